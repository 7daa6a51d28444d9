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
"""
from ...engine.jit import compiled, inline

from ...engine.events import EV_MOE_LOOPBACK, push
from ...engine.state import RPM_HIST_BINS
from ..hbm import hbm_access
from ..nvlink import txq_push
from ..packet import PK_MOE, PK_MOE_EOS, packet_alloc, packet_flits
from ..hub import pick_channel
from ..trace import CAT_RPM, TR_RPM_TX, trace_event
from ..wakeups import rpm_kick

POLICY_ROUND_ROBIN = 0
POLICY_LONGEST_FIRST = 1
# rpm.schedule (config.schema.RPM_SCHEDULES)
SCHEDULE_ARRIVAL = 0
SCHEDULE_FULL_FIRST = 1
SCHEDULE_OFF = 2
POLICY_NAMES = ("round_robin", "longest_first")


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
    row.recv = 0
    row.done = 0
    row.slot = slot
    row.accept_tick = tick
    row.launch = st.tb[slot].launch
    sr.head += 1
    sr.accepted += p.rpm_header_bytes + nbytes
    if sr.oldest < 0:
        sr.oldest = tick
    st.gpu[g].rpm_rows += 1
    st.tb[slot].outstanding += 1
    rpm_kick(st, g, tick)
    return True


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
    if p.rpm_schedule == SCHEDULE_OFF:
        # no coalescing: up to the end of the row the next byte belongs to (rows are accepted
        # whole, so it is all there)
        row = st.mrow[s * p.rpm_ring + row_at(st, s, sr.sent) % p.rpm_ring]
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
        if row.start + p.rpm_header_bytes + row.length > offset:
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
    for k in range(G):
        d = (gp.rpm_rr + k) % G
        s = g * G + d
        n = _sendable(st, s, tick)
        if n == 0:
            sr = st.stream[s]
            if sr.accepted > sr.sent:
                t = sr.oldest + p.rpm_flush_ticks
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
        if n < full and not sr.eos_pending and p.rpm_schedule != SCHEDULE_OFF:
            gp.rpm_flushes += 1
        # merge-buffer fill at emission, in eighths of the buffer
        fill = min(sr.accepted - sr.sent, p.rpm_merge_bytes)
        b = fill * RPM_HIST_BINS // p.rpm_merge_bytes
        st.rpm_hist[g, min(b, RPM_HIST_BINS - 1)] += 1
        # the data is read from the producers' buffers in local HBM (from the packet's first byte)
        row = st.mrow[s * p.rpm_ring + row_at(st, s, sr.sent) % p.rpm_ring]
        launch = row.launch   # the packet's bytes count for the kernel that sent its first row
        first = row.src_addr + max(0, sr.sent - row.start - p.rpm_header_bytes)
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
