"""The AAU's row address table (RAT, MoE-Hub arXiv 2605.05888): one entry per allocated row whose
tile is not yet released, mapping the row to its window slot (aau.py is the block and its model).

With system.gpu.hub.moe.aau.overflow: spill the table keeps the newest `record_table_entries`
entries (a ring per GPU, State.aau_rat: window, slot, stream, ring index; released entries leave
holes that the head skips and a full span compacts): taking an entry when the table is full
evicts the oldest (FIFO) to its spill slot in device memory, a posted HBM write
(rat_insert); a later packet of a row whose entry was evicted reads it back first, an HBM read
the packet's writes wait for, and puts it back, evicting the then oldest (rat_refill). A
tile's release (notify_ready.release) takes its rows' entries out (aau_release_entries).
"""
from ...engine.jit import compiled

from ..hbm import hbm_access
from .rowtable import RS_ALLOC, RS_RAT

RAT_NONE = 0       # MOE_ROW.rat: no entry (not allocated, or overflow: stall)
RAT_ON_CHIP = 1    # the row's entry is in the AAU's table
RAT_SPILLED = 2    # the row's entry was evicted to device memory


@compiled
def window_index(st, g, expert):
    """Index of a local expert's receive window (State.win) among all GPUs' windows."""
    return g * st.p[0].local_experts + st.moe_place[expert, 1]


@compiled
def window_slot(p, w, index):
    """Slot of window row `index` (a monotonic row index) in window w's rows, counted over the
    windows laid out one after another: w a local expert's window (the per-GPU arrays: HBM
    window, records, spill slots) or a window of State.win (the AAU's row table)."""
    return w * p.window_rows + index % p.window_rows


@compiled
def _spill_address(st, g, expert, index):
    """Device-memory home of the table entry of window slot `index` of a local expert."""
    p = st.p[0]
    return p.rat_spill_addr + window_slot(p, st.moe_place[expert, 1], index) * p.record_bytes


@compiled
def rat_insert(st, g, s, i, row, t):
    """Put row i of stream s (row: its descriptor, allocated) in GPU g's table at tick t, evicting
    the oldest entry first if the table is full."""
    p = st.p[0]
    gp = st.gpu[g]
    cap = p.records_cap
    if gp.rat_live == cap:
        _rat_evict_oldest(st, g, t)
    if gp.rat_span == cap:
        _rat_compact(st, g)
    e = st.aau_rat[g, (gp.rat_head + gp.rat_span) % cap]
    e[0] = window_index(st, g, row.expert)
    e[1] = row.alloc
    e[2] = s
    e[3] = i
    gp.rat_span += 1
    gp.rat_live += 1
    row.rat = RAT_ON_CHIP


@compiled
def _rat_trim(st, g):
    """Drop released entries' holes at the ring's head."""
    gp = st.gpu[g]
    cap = st.p[0].records_cap
    while gp.rat_span > 0 and st.aau_rat[g, gp.rat_head, 0] < 0:
        gp.rat_head = (gp.rat_head + 1) % cap
        gp.rat_span -= 1


@compiled
def _rat_evict_oldest(st, g, t):
    """FIFO eviction: write the oldest entry to its spill slot (posted: nobody waits for it)."""
    p = st.p[0]
    gp = st.gpu[g]
    _rat_trim(st, g)
    e = st.aau_rat[g, gp.rat_head]
    w, index, s, i = e[0], e[1], e[2], e[3]
    le = w - g * p.local_experts
    hbm_access(st, g, p.rat_spill_addr + window_slot(p, le, index) * p.record_bytes,
               p.record_bytes, t, True)
    gp.aau_spills += 1
    sr = st.stream[s]
    if sr.tail <= i and i < sr.head:
        # the row is still in its stream's ring (it may get more packets): mark it spilled
        st.mrow[s * p.rpm_ring + i % p.rpm_ring].rat = RAT_SPILLED
    e_rows = window_slot(p, w, index)
    if st.aau_rows[e_rows, RS_ALLOC] == index:
        # a half-landed row (rowtable.py): its later stores read the entry back
        st.aau_rows[e_rows, RS_RAT] = RAT_SPILLED
    e[0] = -1
    gp.rat_head = (gp.rat_head + 1) % p.records_cap
    gp.rat_span -= 1
    gp.rat_live -= 1


@compiled
def _rat_compact(st, g):
    """The ring is spanned by live entries and holes: move the live ones together (order kept)."""
    cap = st.p[0].records_cap
    gp = st.gpu[g]
    n = 0
    for k in range(gp.rat_span):
        src = st.aau_rat[g, (gp.rat_head + k) % cap]
        if src[0] < 0:
            continue
        dst = st.aau_rat[g, (gp.rat_head + n) % cap]
        for f in range(4):
            dst[f] = src[f]
        n += 1
    for k in range(n, gp.rat_span):
        st.aau_rat[g, (gp.rat_head + k) % cap, 0] = -1
    gp.rat_span = n


@compiled
def rat_refill(st, g, s, i, row, t):
    """Read row i's evicted entry back from device memory (issued at t); returns when the
    packet may write, with the entry back in the table."""
    p = st.p[0]
    gp = st.gpu[g]
    done = hbm_access(st, g, _spill_address(st, g, row.expert, row.alloc), p.record_bytes, t, False)
    gp.aau_refills += 1
    gp.aau_refill_wait += done - t
    rat_insert(st, g, s, i, row, done)
    return done


@compiled
def aau_release_entries(st, g, expert, first_index, rows):
    """notify_ready.release of a tile (slots first_index .. + rows - 1, monotonic): its rows'
    entries leave the table (overflow: spill; entries already evicted simply stay in memory)."""
    p = st.p[0]
    if not p.aau_spill:
        return
    gp = st.gpu[g]
    w = window_index(st, g, expert)
    cap = p.records_cap
    for k in range(gp.rat_span):
        e = st.aau_rat[g, (gp.rat_head + k) % cap]
        if e[0] == w and e[1] >= first_index and e[1] < first_index + rows:
            e[0] = -1
            gp.rat_live -= 1
    _rat_trim(st, g)
