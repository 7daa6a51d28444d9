"""RPM, the runtime packet manager (sender side of the MoE-Hub).

`send_to_expert` hands a row to the RPM naming only an expert. The placement table gives the
expert's GPU; the row joins the byte stream toward that GPU as a `row_header_bytes` header (expert,
size, home slot, aux) followed by its data, and its descriptor takes an entry of the stream's row
ring (`row_queue_depth`; a full ring blocks the producer: back-pressure). Row descriptors stay in
the ring until the receiver has landed the row.

Each destination has a merge buffer of `merge_buffer_bytes`: the packetizer sends a packet to a
destination once its unsent bytes fill min(`packet_bytes`, merge buffer), so packets are full even
when rows are not packet multiples (a packet may carry the end of one row and the start of the
next). A partly filled buffer is flushed when its oldest byte has waited `flush_timeout`, or when
the stream ends. Packets carry the stream offset of their first byte; the data is read from local
HBM when the packet is built (charged on the HBM model) and copied at delivery.

Arbitration among destinations with a sendable packet and link room: `round_robin`, or
`longest_first` (the destination with the most unsent bytes first, which fills that expert GPU's
tiles early instead of interleaving every destination). `schedule` (system.gpu.hub.moe.rpm):
  arrival     every destination with a sendable packet (full, or a partial one whose flush timer
              expired) competes;
  full_first  the MoE-Hub RPM's order (arXiv 2605.05888): destinations with a full packet go
              before flushed partial ones (the paper's other two orders - smallest row id first,
              critical rows before `.nop` ones - need row ids and criticality that send_to_expert
              does not carry, so they are not modelled);
  uncoalesced the ablation without the RPM: no coalescing - a packet never carries bytes of two
              rows, and a row's bytes leave as soon as it is accepted (no flush wait). The RPM emits `packets_per_cycle` packets
per hub cycle and shares the NVLink transmit queues with the address-centric packetizer.

End of stream: `notify_ready.eos N` counts producers; at the N-th the RPM marks every stream of this
GPU as ending; after its last data packet each stream sends an EOS packet carrying its total size
(so the receiver knows when it has everything even if packets overtake each other across links).
Packets to the sending GPU itself skip the links (loopback through the hub).

Row-sparse stores (the published ISA, arXiv 2605.05888; workload.layer.moehub.stores: row_sparse).
`rowsp.malloc id, expert, row_bytes` registers allocation `id` in this GPU's hub (`rowsp_table`,
system.gpu.hub.moe.rpm.allocation_ids entries: the MMIO registration of a rowspMalloc call and
the TLB entry mapping the id to its logical destination; the expert's GPU comes from the
placement table and the rows land in that expert's receive window, whose base the AAU holds).
`st.rowsp id, row, offset, src, bytes` stores `bytes` at `offset` of row `row` of the
allocation. A store takes a descriptor of the stream toward the expert's GPU like a
send_to_expert row, but carries no row header in the stream (the packet header names id, row
and offset) and its bytes never share a packet with another store's: it leaves in packets of
at most packet_bytes, the last one as soon as it is accepted (nothing could fill it). Several
stores may fill one row at different offsets: the first open one is the row's *lead*
descriptor, later ones (`lead` >= 0) share its window slot; the row is complete, and gets its
one completion record, when its landed bytes reach the registered row size.
"""
from ...engine.jit import compiled, inline

from ...engine.bitset import bit_clear, bit_set, cyclic_next, words_for
from ...engine.events import push
from ...engine.state import RPM_HIST_BINS
from ..hbm import hbm_access
from ..nvlink import txq_push
from ..packet import PK_MOE, PK_MOE_EOS, packet_alloc, packet_flits
from ..hub import pick_channel
from ..trace import CAT_RPM, TR_RPM_TX, trace_event
from ..wakeups import rpm_kick
from ...config.schema import RPM_SCHEDULES
from ..block import (Array, Block, Debug, Event, Param, Record, Stat, StatGroup, Timer, counters,
                     fields)

POLICY_ROUND_ROBIN = 0
POLICY_LONGEST_FIRST = 1
# rpm.schedule (config.schema.RPM_SCHEDULES)
SCHEDULE_ARRIVAL = 0
SCHEDULE_FULL_FIRST = 1
SCHEDULE_OFF = 2
POLICY_NAMES = ("round_robin", "longest_first")

EV_RPM_TX = 7        # a0 = GPU: the MoE-Hub RPM emits its next packet (its component timer)
EV_MOE_LOOPBACK = 8  # a0 = packet, a1 = GPU: an RPM packet to the sending GPU itself arrives


def rpm_packet_bytes(cfg):
    """Payload of a full RPM packet: at most rpm.packet_bytes, at most what one link packet
    carries (system.nvlink.max_payload_bytes) and at most what the merge buffer holds."""
    rpm = cfg.system.gpu.hub.moe.rpm
    return min(rpm.packet_bytes, cfg.system.nvlink.max_payload_bytes, rpm.merge_buffer_bytes)


def _rpm(key, field, unit, doc, value=None):
    return Param(field, f"system.gpu.hub.moe.rpm.{key}", unit, doc,
                 value or (lambda cfg: getattr(cfg.system.gpu.hub.moe.rpm, key)),
                 f"config: system.gpu.hub.moe.rpm.{key}")


def _stream(st, s):
    G = int(st.p[0].num_gpus)
    return f"stream GPU {s // G} -> GPU {s % G}"


def check_streams(sim, out):
    st = sim.state
    if not int(st.p[0].num_experts):
        return
    sr = st.stream
    out.check(sr.sent == sr.accepted, "MoE-Hub stream bytes accepted but not sent",
              lambda s: f"{_stream(st, s)}: {int(sr.accepted[s])} accepted, {int(sr.sent[s])} sent")
    out.check(sr.recv == sr.accepted, "MoE-Hub stream bytes sent != received",
              lambda s: f"{_stream(st, s)}: {int(sr.accepted[s])} sent, {int(sr.recv[s])} received")
    out.check(sr.head == sr.tail, "MoE-Hub row rings not empty (rows not landed)",
              lambda s: f"{_stream(st, s)}: {int(sr.head[s] - sr.tail[s])} rows")
    out.check(sr.eos_sent == sr.done, "MoE-Hub end-of-stream markers sent but streams unfinished",
              lambda s: f"{_stream(st, s)}")


def rpm_findings(sim):
    """A blocked packetizer, full row rings (the stuck-run report)."""
    st = sim.state
    p = st.p[0]
    G = int(p.num_gpus)
    out = []
    for g in range(G):
        hub = f"system.gpu{g}.hub"
        if st.gpu[g].rpm_blocked:
            out.append(f"{hub}.rpm: packetizer waiting for transmit-queue room on its links")
        for d in range(G):
            sr = st.stream[g * G + d]
            if int(p.num_experts) and int(sr.head - sr.tail) >= int(p.rpm_ring):
                out.append(f"{hub}.rpm: row ring toward GPU {d} full ({int(p.rpm_ring)} rows "
                           f"accepted, not yet landed; system.gpu.hub.moe.rpm.row_queue_depth)")
    return out


def sram_bytes(p):
    """Area proxy: merge buffers + row descriptor rings (header + 16 B of state), per destination."""
    return int(p.num_gpus) * (p.rpm_merge_bytes + p.rpm_ring * (p.rpm_header_bytes + 16))


def _mean_read_wait(i):
    G, gr = int(i.p.num_gpus), i.rec
    return gr.rpm_read_wait / 1000 / (gr.rpm_packets - G) if gr.rpm_packets > G else 0.0


def _data_efficiency(i):
    gr = i.rec
    data = gr.rpm_payload - (gr.rpm_rows - gr.rowsp_rows) * i.p.rpm_header_bytes
    return data / gr.rpm_wire if gr.rpm_wire else 0.0


BLOCK = Block(
    "rpm", __doc__.split("\n\n")[0],
    params=(
        _rpm("merge_buffer_bytes", "rpm_merge_bytes", "bytes", "merge buffer per destination GPU"),
        _rpm("packet_bytes", "rpm_packet_bytes", "bytes", "payload of a full RPM packet (capped by "
             "the link payload and the merge buffer: rpm_packet_bytes())", rpm_packet_bytes),
        _rpm("flush_timeout", "rpm_flush_ticks", "ps", "a partly filled buffer is sent after this"),
        _rpm("row_queue_depth", "rpm_ring", "rows", "row descriptor ring per destination GPU"),
        _rpm("row_header_bytes", "rpm_header_bytes", "bytes", "metadata per row in the stream"),
        _rpm("packets_per_cycle", "rpm_ticks_per_packet", "ps", "packetizer time per packet",
             lambda cfg: int(round(1e12 / (cfg.system.gpu.hub.clock
                                           * cfg.system.gpu.hub.moe.rpm.packets_per_cycle)))),
        _rpm("arbitration", "rpm_policy", "choice", "POLICY_* above",
             lambda cfg: POLICY_NAMES.index(cfg.system.gpu.hub.moe.rpm.arbitration)),
        _rpm("schedule", "rpm_schedule", "choice", "SCHEDULE_* above (config.schema.RPM_SCHEDULES)",
             lambda cfg: RPM_SCHEDULES.index(cfg.system.gpu.hub.moe.rpm.schedule)),
    ),
    records=(Record("stream", "byte streams from one GPU's RPM to one GPU (index src * G + dst)"),
             Record("mrow", "row descriptors in flight, a ring of rpm_ring per stream")),
    arrays=(Array("rowsp_table", "per GPU, the registered row-sparse allocations (rowsp.malloc): "
                  "[expert, row bytes] per id (-1: not registered)",
                  lambda cfg: (cfg.system.num_gpus, cfg.system.gpu.hub.moe.rpm.allocation_ids, 2),
                  fill=-1),
            Array("rpm_active", "per GPU, a bit set (engine/bitset.py) of the destinations whose "
                  "stream may have something to send: set when bytes or an end of stream are "
                  "accepted, cleared when the packetizer finds the stream empty (so it visits only "
                  "those, in round-robin order, instead of every GPU per packet)",
                  lambda cfg: (cfg.system.num_gpus, words_for(cfg.system.num_gpus))),),
    fields=fields(
        "stream",
        ("accepted", "stream bytes accepted (row headers + data), i.e. the stream's end offset"),
        ("sent", "stream bytes packetized"),
        ("head", "row descriptors: next to accept (monotonic)"),
        ("tail", "oldest not yet landed (monotonic)"),
        ("oldest", "acceptance tick of the oldest unsent byte's row (-1: nothing unsent)"),
        ("eos_pending", "end of stream requested"), ("eos_sent", "EOS marker sent"),
        ("recv", "receiver side: bytes processed"), ("total", "receiver side: final size"),
        ("eos_seen", "receiver side: EOS arrived"), ("done", "receiver side: finished"),
        ("allocs", "receiver side: rows of the stream given a window slot (parked packets' stamp)"),
        init={"oldest": -1})
    + fields("mrow", ("expert", ""), ("src_addr", ""), ("length", ""), ("home", ""), ("aux", ""),
             ("start", "stream offset of the row"), ("alloc", "window slot (receiver)"),
             ("recv", "bytes landed"), ("done", "1: landed"), ("slot", "TB slot that sent it"),
             ("accept_tick", ""), ("launch", "of the TB that sent it (wire-byte stats)"),
             ("rowsp", "1: an st.rowsp store (no row header in the stream; home = row id, "
                       "aux = allocation id)"),
             ("lead", "st.rowsp: monotonic index of the row's lead descriptor (-1: this is it)"),
             ("offset", "st.rowsp: byte offset of the store in its row"),
             ("row_size", "st.rowsp: the registered row size"),
             ("row_stored", "st.rowsp lead: bytes stored into the row so far"),
             ("row_landed", "st.rowsp lead: bytes of the row landed so far"))
    + fields("gpu", ("rpm_next_tx", "tick of the packetizer's timer (-1: idle)"),
             ("rpm_blocked", "1: waiting for transmit-queue room"), ("rpm_blocked_since", ""),
             ("rpm_rr", "round-robin pointer over destinations"),
             ("eos_notes", "notify_ready.eos calls counted"),
             ("loop_inflight", "loopback packets in flight"),
             ("rpm_rows", ""), ("rpm_packets", ""), ("rpm_payload", ""), ("rpm_wire", ""),
             ("rpm_stall_ticks", ""), ("rpm_flushes", ""), ("rpm_accept_stalls", ""),
             ("combine_rows", "rows sent home by send_home"), ("rpm_read_wait", ""),
             ("rowsp_stores", ""), ("rowsp_rows", ""),
             init={"rpm_next_tx": -1}),
    stats=(
        StatGroup("gpu", "hub", (Stat("combine_rows", "rows", "rows sent home by send_home",
                                      "combine_rows"),)),
        StatGroup("gpu", "hub.rpm", counters((
            ("rows_accepted", "rpm_rows", "rows", "rows taken by send_to_expert"),
            ("packets", "rpm_packets", "packets", "packets emitted (data and end-of-stream)"),
            ("payload_bytes", "rpm_payload", "bytes", "stream bytes sent (row headers + row data)"),
            ("wire_bytes", "rpm_wire", "bytes", "bytes on the wire for those packets (link headers included)"),
            ("flushes", "rpm_flushes", "packets", "partly filled packets sent because the flush timeout expired"),
            ("stall_ticks", "rpm_stall_ticks", "ps", "time the RPM had a packet ready but no link queue room"),
            ("accept_stalls", "rpm_accept_stalls", "count", "send_to_expert attempts refused: row ring full"),
            ("rowsp_stores", "rowsp_stores", "stores", "st.rowsp stores accepted"),
            ("rowsp_rows", "rowsp_rows", "rows", "rows begun by st.rowsp stores (counted in rows_accepted)"),
            ("read_wait_ticks", "rpm_read_wait", "ps", "sum over data packets of the time from packetizing "
             "to their payload read from local HBM (a link sends its head packet only once it is read)"),
        )) + (
            Stat("payload_efficiency", "ratio", "stream bytes / wire bytes",
                 lambda i: i.rec.rpm_payload / i.rec.rpm_wire if i.rec.rpm_wire else 0.0),
            Stat("data_efficiency", "ratio",
                 "row data bytes / wire bytes (row and link headers are overhead)", _data_efficiency),
            Stat("read_wait_mean_ns", "ns", "mean time a data packet waited for its payload "
                 "to be read from HBM (end-of-stream packets excluded)", _mean_read_wait),
            Stat("merge_fill_bin{k}", "packets",
                 lambda i, b: f"packets emitted with the merge buffer {b}/{RPM_HIST_BINS} to "
                              f"{b + 1}/{RPM_HIST_BINS} full (last bin: full)",
                 lambda i, b: i.st.rpm_hist[i.g, b], each=range(RPM_HIST_BINS)),
            Stat("sram_bytes", "bytes", "area proxy: merge buffers + row descriptor rings (header + "
                 "16 B of state)", lambda i: sram_bytes(i.p)),
        )),
    ),
    events=(Event("rpm_tx", EV_RPM_TX, "the RPM emits its next packet"),
            Event("moe_loopback", EV_MOE_LOOPBACK, "an RPM packet to its own GPU arrives")),
    timers=(Timer("rpm", EV_RPM_TX, lambda cfg: cfg.system.num_gpus, "one per GPU: its RPM packetizer"),),
    checks=(check_streams,),
    findings=(rpm_findings,),
    debug=(Debug("RPM", CAT_RPM, (TR_RPM_TX,), groups=("MoEHub",), describe={
        TR_RPM_TX: lambda n, g, dst, nbytes: (
            f"system.gpu{g}.hub.rpm",
            f"sends {f'{nbytes} B of stream' if nbytes else 'end-of-stream marker'} to GPU {dst}")}),),
)


@compiled
def rpm_accept(st, g, slot, expert, src_addr, nbytes, home, aux, tick):
    """send_to_expert: take a row into the stream toward the expert's GPU. Returns False when the
    stream's row ring is full (the TB retries when a row lands)."""
    p = st.p[0]
    d = st.moe_place[expert, 0]
    s = g * p.num_gpus + d
    sr = st.stream[s]
    if sr.head - sr.tail >= p.rpm_ring:
        st.gpu[g].rpm_accept_stalls += 1
        return False
    row = st.mrow[s * p.rpm_ring + sr.head % p.rpm_ring]
    row.expert = expert
    row.src_addr = src_addr
    row.length = nbytes
    row.home = home
    row.aux = aux
    row.start = sr.accepted
    row.alloc = -1
    row.rat = 0     # no AAU row-table entry yet (aau.RAT_NONE)
    row.rowsp = 0
    row.lead = -1
    row.offset = 0
    row.recv = 0
    row.done = 0
    row.slot = slot
    row.accept_tick = tick
    row.launch = st.tb[slot].launch
    sr.head += 1
    sr.accepted += p.rpm_header_bytes + nbytes
    bit_set(st.rpm_active[g], d)
    if sr.oldest < 0:
        sr.oldest = tick
    st.gpu[g].rpm_rows += 1
    st.tb[slot].outstanding += 1
    rpm_kick(st, g, tick)
    return True


@compiled
def rpm_accept_rowsp(st, g, slot, rid, expert, size, rowid, offset, src_addr, nbytes, tick):
    """st.rowsp: take `nbytes` for row `rowid` of allocation `rid` (registered: expert, row size
    `size`) into the stream toward the expert's GPU. Returns 1 (accepted), 0 (row ring full: the
    TB retries when a row lands) or -1 (the row's stores together exceed its registered size)."""
    p = st.p[0]
    d = st.moe_place[expert, 0]
    s = g * p.num_gpus + d
    sr = st.stream[s]
    base = s * p.rpm_ring
    # an open row (stored to, not yet complete) of the same allocation: this store joins it
    lead = -1
    i = sr.head - 1
    while i >= sr.tail:
        r = st.mrow[base + i % p.rpm_ring]
        if r.rowsp and r.lead < 0 and r.done == 0 and r.aux == rid and r.home == rowid:
            lead = i
            break
        i -= 1
    if lead >= 0 and st.mrow[base + lead % p.rpm_ring].row_stored + nbytes > size:
        return -1
    if sr.head - sr.tail >= p.rpm_ring:
        st.gpu[g].rpm_accept_stalls += 1
        return 0
    row = st.mrow[base + sr.head % p.rpm_ring]
    row.expert = expert
    row.src_addr = src_addr
    row.length = nbytes
    row.home = rowid
    row.aux = rid
    row.start = sr.accepted
    row.alloc = -1
    row.rat = 0
    row.recv = 0
    row.done = 0
    row.slot = slot
    row.accept_tick = tick
    row.launch = st.tb[slot].launch
    row.rowsp = 1
    row.lead = lead
    row.offset = offset
    row.row_size = size
    row.row_stored = nbytes
    row.row_landed = 0
    if lead >= 0:
        st.mrow[base + lead % p.rpm_ring].row_stored += nbytes
    else:
        st.gpu[g].rpm_rows += 1
        st.gpu[g].rowsp_rows += 1
    st.gpu[g].rowsp_stores += 1
    sr.head += 1
    sr.accepted += nbytes      # no row header: the packet header names id, row and offset
    bit_set(st.rpm_active[g], d)
    if sr.oldest < 0:
        sr.oldest = tick
    st.tb[slot].outstanding += 1
    rpm_kick(st, g, tick)
    return 1


@compiled
def row_header(p, row):
    """Stream bytes ahead of a descriptor's data: the row header, or none for st.rowsp."""
    return 0 if row.rowsp else p.rpm_header_bytes


@compiled
def rpm_end_of_stream(st, g, producers, tick):
    """notify_ready.eos: one producer finished; the N-th ends every stream of this GPU."""
    gp = st.gpu[g]
    gp.eos_notes += 1
    gp.dam_notifies += 1
    if gp.eos_notes == producers:
        G = st.p[0].num_gpus
        for d in range(G):
            st.stream[g * G + d].eos_pending = 1
            bit_set(st.rpm_active[g], d)
        rpm_kick(st, g, tick)


@compiled
def _sendable(st, s, tick):
    """Bytes stream s would put in a packet now (0: nothing to send yet; -1: only its EOS)."""
    p = st.p[0]
    sr = st.stream[s]
    avail = sr.accepted - sr.sent
    if avail == 0:
        return -1 if (sr.eos_pending and not sr.eos_sent) else 0
    full = p.rpm_packet_bytes
    row = st.mrow[s * p.rpm_ring + row_at(st, s, sr.sent) % p.rpm_ring]
    if row.rowsp:
        # a row-sparse store's bytes travel alone: full packets (or a train), then its tail at once
        rest = row.start + row.length - sr.sent
        return rest if rest < full else min(rest // full, p.packet_train) * full
    if p.rpm_schedule == SCHEDULE_OFF:
        # no coalescing: up to the end of the row the next byte belongs to (rows are accepted
        # whole, so it is all there)
        return min(row.start + p.rpm_header_bytes + row.length - sr.sent, full)
    if avail >= full:
        return min(avail // full, p.packet_train) * full   # one packet, or a train of them
    if sr.eos_pending or tick - sr.oldest >= p.rpm_flush_ticks:
        return avail
    return 0


@compiled
def _has_room(st, g, d):
    """A link transmit queue toward d has room (loopback: fewer packets in flight than one
    receive buffer holds, the loopback path's own back-pressure)."""
    if d == g:
        return st.gpu[g].loop_inflight < st.p[0].rx_buffer_flits
    return pick_channel(st, g, d, False) >= 0


@compiled
def row_at(st, s, offset):
    """Monotonic index of the first live row of stream s that ends after byte `offset` (the row
    holding it); sr.head if none. Rows are contiguous in the stream, so a binary search."""
    p = st.p[0]
    sr = st.stream[s]
    lo, hi = sr.tail, sr.head
    while lo < hi:
        mid = (lo + hi) // 2
        row = st.mrow[s * p.rpm_ring + mid % p.rpm_ring]
        if row.start + row_header(p, row) + row.length > offset:
            hi = mid
        else:
            lo = mid + 1
    return lo


@inline
def rpm_packetize(st, g, tick):
    """EV_RPM_TX: pick a destination by the arbitration policy and emit one packet to it."""
    p = st.p[0]
    gp = st.gpu[g]
    if gp.rpm_next_tx != tick:
        return  # superseded by an earlier activation
    gp.rpm_next_tx = -1
    G = p.num_gpus
    best = -1
    best_n = 0
    partial = -1        # schedule full_first: the first destination with only a partial packet
    waiting_room = False
    next_flush = -1
    # the streams in round-robin order from rpm_rr, skipping those known to be empty (an empty
    # stream is one the scan of every destination would pass over without effect)
    active = st.rpm_active[g]
    k = -1
    while True:
        k = cyclic_next(active, gp.rpm_rr, k + 1, G)
        if k >= G:
            break
        d = (gp.rpm_rr + k) % G
        s = g * G + d
        n = _sendable(st, s, tick)
        if n == 0:
            sr = st.stream[s]
            if sr.accepted == sr.sent:
                bit_clear(active, d)   # nothing left, no end of stream to send: empty
                continue
            t = sr.oldest + p.rpm_flush_ticks   # bytes that wait for the flush timer
            if next_flush < 0 or t < next_flush:
                next_flush = t
            continue
        if not _has_room(st, g, d):
            waiting_room = True
            continue
        size = st.stream[s].accepted - st.stream[s].sent
        if p.rpm_schedule == SCHEDULE_FULL_FIRST and 0 <= n < p.rpm_packet_bytes:
            if partial < 0:
                partial = d
            continue
        if best < 0 or (p.rpm_policy == POLICY_LONGEST_FIRST and size > best_n):
            best = d
            best_n = size
            if p.rpm_policy == POLICY_ROUND_ROBIN:
                break
    if best < 0:
        best = partial      # no full packet anywhere: a flushed partial one (or an EOS)
    if best < 0:
        if waiting_room:
            gp.rpm_blocked = 1
            gp.rpm_blocked_since = tick
        elif next_flush >= 0:
            rpm_kick(st, g, next_flush)
        return
    gp.rpm_rr = (best + 1) % G
    npk = _emit(st, g, best, tick)
    rpm_kick(st, g, tick + npk * p.rpm_ticks_per_packet)


@compiled
def _emit(st, g, d, tick):
    """Build and send the next packet (or train) of stream g -> d; returns its link packets."""
    p = st.p[0]
    gp = st.gpu[g]
    s = g * p.num_gpus + d
    sr = st.stream[s]
    n = _sendable(st, s, tick)
    pkt = packet_alloc(st)
    pk = st.pk[pkt]
    pk.src = g
    pk.dst = d
    pk.req = -1
    pk.src_addr = 0
    ready = tick
    launch = st.mrow[s * p.rpm_ring + (sr.head - 1) % p.rpm_ring].launch if sr.head > 0 else -1
    if n < 0:  # end of stream marker, after every data byte
        pk.kind = PK_MOE_EOS
        pk.payload = 0
        pk.addr = sr.accepted
        pk.value = sr.accepted
        sr.eos_sent = 1
    else:
        pk.kind = PK_MOE
        pk.addr = sr.sent
        pk.payload = n
        pk.value = 0
        full = p.rpm_packet_bytes
        # the data is read from the producers' buffers in local HBM (from the packet's first byte)
        row = st.mrow[s * p.rpm_ring + row_at(st, s, sr.sent) % p.rpm_ring]
        if n < full and not sr.eos_pending and p.rpm_schedule != SCHEDULE_OFF and not row.rowsp:
            gp.rpm_flushes += 1
        # merge-buffer fill at emission, in eighths of the buffer
        fill = min(sr.accepted - sr.sent, p.rpm_merge_bytes)
        b = fill * RPM_HIST_BINS // p.rpm_merge_bytes
        st.rpm_hist[g, min(b, RPM_HIST_BINS - 1)] += 1
        launch = row.launch   # the packet's bytes count for the kernel that sent its first row
        first = row.src_addr + max(0, sr.sent - row.start - row_header(p, row))
        ready = hbm_access(st, g, first, n, tick, False)
        gp.rpm_read_wait += ready - tick   # the packet cannot leave before its data is read
        sr.sent += n
        sr.oldest = -1
        if sr.sent < sr.accepted:
            sr.oldest = st.mrow[s * p.rpm_ring + row_at(st, s, sr.sent) % p.rpm_ring].accept_tick
        gp.rpm_payload += n
    pk.flits, pk.npk = packet_flits(st, pk.payload, p.rpm_packet_bytes)
    pk.ready = ready + p.hub_tx_latency_ticks
    gp.rpm_packets += pk.npk
    gp.rpm_wire += pk.flits * p.flit_bytes
    trace_event(st, CAT_RPM, TR_RPM_TX, g, d, pk.payload, tick)
    if d != g and launch >= 0:
        st.ln[launch].tx_wire += pk.flits * p.flit_bytes
    if d == g:
        gp.loop_inflight += 1
        push(st, pk.ready, EV_MOE_LOOPBACK, pkt, g)
    else:
        c = pick_channel(st, g, d, True)
        txq_push(st, c, pkt, tick)
    return pk.npk
