"""What the RPM accepts: row descriptors taken into the streams' row rings (rpm.py is the block).

`send_to_expert` (rpm_accept), a row-sparse `st.rowsp` store (rpm_accept_rowsp) and a
multi-expert store (rpm_accept_experts, one carrier and its copies) each take descriptors of the
stream toward the expert's GPU, or return False on a full ring (the thread block retries when a
row lands): the ring keeps an entry free for the next store of each row whose first store took a
window slot (ring_reserved), found by the search for a row's open first store (_open_row, on
the descriptors' keys row_key). With `schedule: paper` a new descriptor moves ahead of the
unsent ones it goes before (schedule_insert: critical before `.nop`, then the smaller row id),
the order the packetizer (rpm.py) then sends in. rpm.py's docstring is the model.
"""
from ...engine.jit import compiled

from ...engine.bitset import bit_set
from ..wakeups import rpm_kick
from .rowtable import RS_NEXT, RS_RID, RS_ROW, RS_SIZE, RS_STORED, open_row_slot
from .rpm import SCHEDULE_PAPER, stream_target


@compiled
def take_descriptor(st, g, s, slot, expert, src_addr, nbytes, home, aux, in_stream, tick):
    """Fill stream s's next row-ring entry (a row, an st.rowsp store or a multi-expert copy) and
    take it; `in_stream`: the bytes it adds to the stream (0 for a copy). Returns the descriptor."""
    p = st.p[0]
    sr = st.stream[s]
    row = st.mrow[s * p.rpm_ring + sr.head % p.rpm_ring]
    st.mrow_key[s * p.rpm_ring + sr.head % p.rpm_ring] = row_key(aux, home)
    row.expert = expert
    row.src_addr = src_addr
    row.length = nbytes
    row.home = home
    row.aux = aux
    row.start = sr.accepted
    row.alloc = -1
    row.rat = 0     # no AAU row-table entry yet (rat.RAT_NONE)
    row.rowsp = 0
    row.joins = 0
    row.offset = 0
    row.row_size = 0
    row.row_stored = 0
    row.carrier = -1
    row.copies = 0
    row.nop = 0
    row.fwd = 0
    row.fwd_from = -1
    row.recv = 0
    row.done = 0
    row.slot = slot
    row.accept_tick = tick
    row.launch = st.tb[slot].launch
    sr.head += 1
    sr.accepted += in_stream
    bit_set(st.rpm_active[g], s % p.num_gpus)
    if in_stream > nbytes:
        st.gpu[g].rpm_headers += 1
    if sr.oldest < 0:
        sr.oldest = tick
    st.tb[slot].outstanding += 1
    return row


@compiled
def mark_rowsp(st, s, row):
    """Mark the descriptor just taken in stream s (by take_descriptor, at monotonic index
    sr.head - 1) as an st.rowsp store, and raise the stream's bound on where such stores lie
    (State.stream.rowsp_end, read by _coalesce_end)."""
    row.rowsp = 1
    sr = st.stream[s]
    sr.rowsp_end = sr.head


@compiled
def rpm_accept(st, g, slot, expert, src_addr, nbytes, home, aux, tick):
    """send_to_expert: take a row into the stream toward the expert's GPU. Returns False when the
    stream's row ring is full (the TB retries when a row lands)."""
    p = st.p[0]
    s = g * p.num_gpus + st.moe_place[expert, 0]
    sr = st.stream[s]
    if sr.head - sr.tail + 1 + ring_reserved(st, s) > p.rpm_ring:
        st.gpu[g].rpm_accept_stalls += 1
        return False
    take_descriptor(st, g, s, slot, expert, src_addr, nbytes, home, aux,
                     p.rpm_header_bytes + nbytes, tick)
    if p.rpm_schedule == SCHEDULE_PAPER:
        schedule_insert(st, g, s, 1)
    st.gpu[g].rpm_rows += 1
    rpm_kick(st, g, tick)
    return True


@compiled
def row_key(aux, home):
    """State.mrow_key of a descriptor: any function of (aux, home) keeps _open_row exact, since a
    matching key is only a candidate, checked on the descriptor itself (XOR: no overflow)."""
    return aux ^ home


@compiled
def _open_row(st, s, rid, rowid):
    """Monotonic index of the descriptor of the first store of row `rowid` of allocation `rid` in
    stream s whose bytes have not all landed, or -1 (a row whose first store landed is found in
    the receiver's row table: rowtable.open_row_slot). Rows a forwarding hub put in the stream
    (forward.py) are another GPU's: their ids and rows are not this GPU's.
    Every st.rowsp calls this, and a TB retrying on a full ring calls it at each try: a whole-row
    store (the moehub dispatch's) finds nothing, after a walk of the whole ring. The walk reads
    the descriptors' keys (State.mrow_key: 8 contiguous bytes each, not a descriptor record each)
    and a descriptor only where its key matches, stepping the ring position down instead of a
    division per entry: the same index as checking every descriptor, newest first."""
    p = st.p[0]
    sr = st.stream[s]
    R = p.rpm_ring
    base = s * R
    key = row_key(rid, rowid)
    j = (sr.head - 1) % R           # ring position of descriptor sr.head - 1 - back
    for back in range(sr.head - sr.tail):
        if st.mrow_key[base + j] == key:
            r = st.mrow[base + j]
            if r.rowsp and r.joins == 0 and r.done == 0 and r.aux == rid and r.home == rowid \
                    and r.fwd_from < 0:
                return sr.head - 1 - back
        j = j - 1 if j > 0 else R - 1
    return -1


@compiled
def _row_in_ring(st, s, rid, rowid):
    """Some store of row `rowid` of allocation `rid` still holds an entry of stream s's ring."""
    p = st.p[0]
    sr = st.stream[s]
    R = p.rpm_ring
    base = s * R
    key = row_key(rid, rowid)
    j = sr.tail % R
    for _ in range(sr.head - sr.tail):
        if st.mrow_key[base + j] == key:
            r = st.mrow[base + j]
            if r.rowsp and r.aux == rid and r.home == rowid and r.fwd_from < 0:
                return True
        j = j + 1 if j < R - 1 else 0
    return False


@compiled
def ring_reserved(st, s):
    """Ring entries of stream s held back for the next store of each half-landed row-sparse row
    that has stores still to come and none in the ring (a row whose first bytes got a window
    slot at the receiver; rowtable.py keeps them in the stream's list).

    Why: such a row holds a window slot that only its own later stores can complete. Were every
    ring entry taken by stores of new rows that wait at the receiver for a slot of that full
    window, the later stores could never enter and nothing would move again (a circular wait
    between window slots and ring entries; tests/test_rowsp.py, test_rowsp_row_table.py). The
    RPM knows which rows are open (it checks every store against the registered row size), so
    it admits a store that opens a row, or a store of a row with a store still in the ring,
    only while an entry stays free for each such row. Whole-row stores never leave a row open:
    the list is empty and nothing is reserved."""
    sr = st.stream[s]
    n = 0
    k = sr.open_head
    while k >= 0:
        e = st.aau_rows[k]
        if e[RS_STORED] < e[RS_SIZE] and not _row_in_ring(st, s, e[RS_RID], e[RS_ROW]):
            n += 1
        k = e[RS_NEXT]
    return n


@compiled
def _open_row_of_store(st, slot, s, rid, rowid):
    """_open_row for TB `slot`'s st.rowsp. A TB retries the same store while the ring is full
    (on every row landing of its GPU); a search that found nothing stays true as long as no
    descriptor entered the stream since (sr.head unchanged: meanwhile descriptors only leave the
    ring or finish landing, and are reordered only as one enters), so such a retry skips it."""
    miss = st.rpm_open_miss[slot]
    head = st.stream[s].head
    if miss[0] == head and miss[1] == s and miss[2] == rid and miss[3] == rowid:
        return -1
    lead = _open_row(st, s, rid, rowid)
    if lead < 0:
        miss[0] = head
        miss[1] = s
        miss[2] = rid
        miss[3] = rowid
    return lead


@compiled
def rpm_accept_rowsp(st, g, slot, rid, expert, size, rowid, offset, src_addr, nbytes, nop, tick):
    """st.rowsp[.nop]: take `nbytes` for row `rowid` of allocation `rid` (registered: expert, row
    size `size`) into the stream toward the expert's GPU (nop: a non-critical store). Returns 1
    (accepted), 0 (row ring full: the TB retries when a row lands) or -1 (the row's stores
    together exceed its registered size)."""
    p = st.p[0]
    s = g * p.num_gpus + st.moe_place[expert, 0]
    sr = st.stream[s]
    # an open row of the same allocation: this store joins it. The row is either half landed
    # (the receiver's row table counts its stores) or has no window slot yet (its first store's
    # descriptor, still in the ring, counts them)
    entry = open_row_slot(st, s, rid, rowid)
    lead = -1 if entry >= 0 else _open_row_of_store(st, slot, s, rid, rowid)
    if entry >= 0 and st.aau_rows[entry, RS_STORED] + nbytes > size:
        return -1
    if lead >= 0 and st.mrow[s * p.rpm_ring + lead % p.rpm_ring].row_stored + nbytes > size:
        return -1
    # a later store of a half-landed row with none of its stores in the ring takes the entry
    # reserved for it; any other store leaves the reserved entries free (ring_reserved)
    need = 1 + ring_reserved(st, s)
    if entry >= 0 and not _row_in_ring(st, s, rid, rowid):
        need -= 1
    if sr.head - sr.tail + need > p.rpm_ring:
        st.gpu[g].rpm_accept_stalls += 1
        return 0
    # no row header: the packet header names id, row and offset
    row = take_descriptor(st, g, s, slot, expert, src_addr, nbytes, rowid, rid, nbytes, tick)
    mark_rowsp(st, s, row)
    row.offset = offset
    row.row_size = size
    row.row_stored = nbytes
    if nop:
        row.nop = 1
        st.gpu[g].rowsp_nop += 1
    if entry >= 0:
        row.joins = 1
        st.aau_rows[entry, RS_STORED] += nbytes
    elif lead >= 0:
        row.joins = 1
        st.mrow[s * p.rpm_ring + lead % p.rpm_ring].row_stored += nbytes
    else:
        st.gpu[g].rpm_rows += 1
        st.gpu[g].rowsp_rows += 1
    st.gpu[g].rowsp_stores += 1
    if p.rpm_schedule == SCHEDULE_PAPER:
        schedule_insert(st, g, s, 1)
    rpm_kick(st, g, tick)
    return 1


@compiled
def rpm_accept_experts(st, g, slot, first, mask, src_addr, nbytes, home, aux, rowsp, tick):
    """send_to_experts / st.rowsp.experts (the SM has checked the named experts: distinct, on one
    GPU; rowsp: registered ids of row size nbytes): bit j of mask names the expert (rowsp: the
    allocation id) in register first + j. The first named one takes a *carrier* descriptor whose
    bytes enter the stream (behind a row header, or none for rowsp); every further one takes a
    *copy* descriptor right behind it that adds no stream bytes (carrier: the carrier's index) and
    gets its own window slot, record and row-table entry at the receiver. Home: home + j (rowsp:
    row home + j of id j, aux = the id). Returns 1, 0 (the row ring lacks one entry per named
    expert: the TB retries) or -1 (rowsp: a named row was already stored to)."""
    p = st.p[0]
    gp = st.gpu[g]
    n = 0
    j0 = -1
    for j in range(8):
        if (mask >> j) & 1:
            n += 1
            if j0 < 0:
                j0 = j
    e0 = st.regs[slot, first + j0]
    if rowsp:
        e0 = st.rowsp_table[g, e0, 0]
    d = stream_target(st, g, st.moe_place[e0, 0])
    # internode per_node: once to the node's forwarding hub (which may hold the first expert)
    fwd = p.fwd_per_node != 0 and d // p.nic_gpus_per_node != g // p.nic_gpus_per_node
    s = g * p.num_gpus + d
    sr = st.stream[s]
    if rowsp:
        for j in range(8):
            if (mask >> j) & 1 and (_open_row(st, s, st.regs[slot, first + j], home + j) >= 0
                                    or open_row_slot(st, s, st.regs[slot, first + j], home + j)
                                    >= 0):
                return -1           # whole-row stores: the row already holds bytes
    if sr.head - sr.tail + n + ring_reserved(st, s) > p.rpm_ring:
        gp.rpm_accept_stalls += 1
        return 0
    carrier = sr.head
    in_stream = nbytes if rowsp else p.rpm_header_bytes + nbytes
    for j in range(8):
        if not (mask >> j) & 1:
            continue
        v = st.regs[slot, first + j]
        expert = st.rowsp_table[g, v, 0] if rowsp else v
        copy = sr.head != carrier
        row = take_descriptor(st, g, s, slot, expert, src_addr, nbytes, home + j,
                               v if rowsp else aux, 0 if copy else in_stream, tick)
        if copy:
            row.carrier = carrier
        if fwd:
            row.fwd = 1
        if rowsp:
            mark_rowsp(st, s, row)
            row.row_size = nbytes
            row.row_stored = nbytes
            gp.rowsp_stores += 1
            gp.rowsp_rows += 1
    st.mrow[s * p.rpm_ring + carrier % p.rpm_ring].copies = n - 1
    if p.rpm_schedule == SCHEDULE_PAPER:
        schedule_insert(st, g, s, n)
    gp.rpm_rows += n
    gp.multi_stores += 1
    gp.multi_copies += n - 1
    gp.multi_saved += (n - 1) * in_stream
    rpm_kick(st, g, tick)
    return 1


@compiled
def _goes_before(a, b):
    """schedule paper: descriptor a is sent before descriptor b - critical before .nop, then the
    smaller row id (st.rowsp's row; send_to_expert's home)."""
    if a.nop != b.nop:
        return a.nop < b.nop
    return a.home < b.home


@compiled
def schedule_insert(st, g, s, n):
    """schedule paper: the n descriptors just taken (a row, a store, or a multi-expert carrier and
    its copies) move ahead of the descriptors they go before (_goes_before) among those none of
    whose bytes has been packetized, keeping acceptance order among equals. The stream offsets of
    the rows they pass and their own are rewritten (nothing of them has been sent, so the
    receiver has not seen them), as are multi-expert carrier indices."""
    p = st.p[0]
    sr = st.stream[s]
    R = p.rpm_ring
    base = s * R
    new = sr.head - n
    nw = st.mrow[base + new % R]
    pos = new
    k = new - 1
    while k >= sr.tail:
        r = st.mrow[base + k % R]
        if r.carrier >= 0:
            k -= 1          # a multi-expert copy: only its carrier's place can be taken
            continue
        if r.start < sr.sent or not _goes_before(nw, r):
            break
        if nw.rowsp and r.rowsp and r.aux == nw.aux and r.home == nw.home \
                and r.fwd_from == nw.fwd_from:
            break           # an earlier store of the same row (it holds the row's window slot)
        pos = k
        k -= 1
    if pos == new:
        return
    if sr.rowsp_end > pos:
        # st.rowsp descriptors among the passed ones move up by n places (the new ones only
        # move down): the bound follows them
        sr.rowsp_end = min(sr.rowsp_end + n, sr.head)
    passed = nw.start - st.mrow[base + pos % R].start   # stream bytes of the rows passed
    moved = sr.accepted - nw.start                      # stream bytes of the new ones
    for k in range(pos, new):
        r = st.mrow[base + k % R]
        r.start += moved
        if r.carrier >= pos:
            r.carrier += n
    for k in range(new, sr.head):
        r = st.mrow[base + k % R]
        r.start -= passed
        if r.carrier >= 0:
            r.carrier = pos
    # rotate: each new descriptor bubbles down by (new - pos) places through the scratch record
    scratch = st.mrow.shape[0] - 1
    for j in range(n):
        k = new + j
        while k > pos + j:
            a = base + k % R
            b = base + (k - 1) % R
            st.mrow[scratch] = st.mrow[a]
            st.mrow[a] = st.mrow[b]
            st.mrow[b] = st.mrow[scratch]
            key = st.mrow_key[a]          # each descriptor's key moves with it
            st.mrow_key[a] = st.mrow_key[b]
            st.mrow_key[b] = key
            k -= 1
    st.gpu[g].rpm_reordered += 1
