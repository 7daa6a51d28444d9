"""NVLink: unidirectional channels with serialisation, latency and credit-based flow control.

Each link is two channels (GPU->switch and switch->GPU). A channel transmits the packet at the head
of its FIFO when (1) the wire is free, (2) the packet is ready, and (3) it holds enough credits for
the packet's flits. Serialisation takes flits * flit_bytes / bandwidth; the packet's tail reaches
the receiver one link latency later (store-and-forward at every hop). Credits are the receiver's
buffer space in flits; the receiver returns them (after one link latency) when the packet leaves its
buffer, so a slow receiver throttles the sender and nothing is ever dropped. Credits cost no
flits of their own: NVLink carries flow-control credits in the header flit of every packet going
the other way (Foley & Danskin, IEEE Micro 37(2), 2017; packet.py), and with non-posted writes
(hub.py: one response per write packet) a channel that receives data always has packets going
back to carry them.

Packets on the wire of one channel arrive in transmission order (same latency, serialised), so a
channel keeps them in a FIFO (State.wire) and only the head packet's arrival is scheduled (the
channel's arrival timer), instead of one queued event per packet in flight.

The FIFOs hold, beside each packet's id, what the channel needs of it before it handles the packet
itself (FIFO_* below): a transmit FIFO (State.txq, State.rsq) the packet's ready tick and flits, the
wire its arrival tick, copied when it is queued (nothing changes them while it waits). So a
departing head does not read the next packet's record; instead that record is prefetched
(engine/prefetch.py) when the packet becomes the head, one serialisation before it is sent or
arrives. With many GPUs thousands of packets are in flight and a packet's record is out of the
caches by the time its hop comes: this overlaps that miss with the events in between. Packet
and channel records are laid out in cache lines, the fields a hop reads first (packet.py,
CHANNEL_HOT_FIELDS). Layout and prefetching change no result.

Returned credits are not events: the receiver files each return (tick it reaches the sender,
flits) in the channel's credit-return list (State.credit_ret, kept in tick order), and the
transmitter adds every return that has matured whenever it looks at its credits. Only a transmitter
that is blocked on credits is woken, at the tick of the return it waits for. This is the same
credit loop as one event per return, with two events fewer per packet (the two hops).
"""
import numpy as np

from ..engine.jit import compiled, inline
from ..engine.ring import ring_add, ring_next

from ..engine.clock import bytes_ticks
from ..engine.events import SHORTCUT_BACK_TO_BACK, SHORTCUT_CREDIT_WAKE, timer_clear, timer_set
from ..engine.prefetch import prefetch, prefetch_address
from ..engine.state import CACHE_LINE_BYTES
from .packet import VC_RESPONSE, VC_REQUEST, header_flits, packet_vc
from .trace import CAT_NVLINK, TR_LINK_TX, trace_event
from .wakeups import ch_kick
from .link_class import wire_bytes
from .link_room import (A_AT, A_NPK, A_PKT, A_VC, A_VC_LAST, A_WIRE, A_YIELDS, AHEAD_COLUMNS,
                        AHEAD_RING, depart_ahead, hold_for_waiters, link_slot_freed,
                        txq_settle)
from ..config.keys import key_param
from ..declare import Array, Block, Debug, Event, Record, Stat, StatGroup, Timer, fields

EV_CH_TX = 3         # a0 = channel: the link transmitter tries to send its head packet
EV_CH_ARRIVE = 4     # a0 = channel: the head packet of its wire FIFO reached the far end of the
                     # link (at a switch: and crossed its input stage, see switch.py)
# columns of a link FIFO entry: State.txq and State.rsq (transmit FIFOs) hold all three, the
# packet's ready tick and flits; State.wire (packets on the wire) the first two, the ready
# column holding the packet's arrival tick
FIFO_PACKET, FIFO_READY, FIFO_FLITS = 0, 1, 2
# columns of a transmit-FIFO entry (State.txq, State.rsq) and of a credit return (State.credit_ret:
# tick, flits, virtual channel): three used, padded to four (32 bytes) so that no entry straddles
# two cache lines (a 24-byte entry did in three of eight slots: two misses for one entry)
FIFO_COLUMNS = 4
# a packet sent ahead's A_YIELDS (back_to_back, send_ahead; link_room.py State.ahead): what a
# packet queued in the other virtual channel before its departure does to it (it and the ones
# sent ahead after it are taken back) - AHEAD_YIELDS: the other channel goes
# first at the departure tick's look; AHEAD_EARLY: the packet was sent ahead when it was queued
# on a free link and waits for its ready tick, so a packet of the other channel ready before
# then goes first
AHEAD_YIELDS, AHEAD_EARLY = 1, 2


def channel_name(st, c):
    """Stat-style name of a link direction: 'system.gpu0.nvlink1 -> system.switch1.port0'
    (fabric links: 'system.gpu2.pcie -> system.nic2.pcie')."""
    ch = st.ch[c]
    L = int(st.p[0].links_per_gpu)
    if c >= 2 * int(st.p[0].num_gpus) * L:
        from ..topology import end_name
        return (f"{end_name(int(ch.src_kind), int(ch.src_index), int(ch.src_port))} -> "
                f"{end_name(int(ch.dst_kind), int(ch.dst_index), int(ch.dst_port))}")
    gpu_end = f"system.gpu{int(ch.gpu)}.nvlink{(c // 2) % L}"
    sw_end = f"system.switch{int(ch.switch)}.port{int(ch.port)}"
    return f"{gpu_end} -> {sw_end}" if ch.to_switch else f"{sw_end} -> {gpu_end}"


def _tx(field):
    return lambda i: i.tx[field]


def _rx(field):
    return lambda i: i.rx[field]


# One link direction's stats, read at its transmitter (i.tx: a channel record) and its receiver
# (i.rx). GPU-side names use the up channel for tx and the down channel for rx; switch ports the
# opposite (switch.py).
TX_STATS = tuple(Stat(f"tx_{suffix}", unit, desc, _tx(field)) for suffix, field, unit, desc in (
    ("packets", "tx_packets", "packets", "packets transmitted"),
    ("wire_bytes", "tx_wire_bytes", "bytes", "bytes on the wire (headers and flit padding included)"),
    ("payload_bytes", "tx_payload_bytes", "bytes", "payload bytes transmitted"),
    ("busy_ticks", "tx_busy", "ps", "time the transmitter was serialising"),
    ("credit_stall_ticks", "credit_stall", "ps", "time the head packet waited for credits"),
    ("queue_peak", "txq_peak", "packets", "peak transmit-queue occupancy"),
    ("response_queue_peak", "rsq_peak", "packets",
     "peak response-channel transmit-queue occupancy (system.nvlink.response_path: separate)"),
)) + (
    Stat("tx_utilization", "ratio", "fraction of time the transmitter was serialising",
         lambda i: i.fraction(i.tx.tx_busy)),
    Stat("tx_payload_GBps", "GB/s", "payload bandwidth averaged over the run",
         lambda i: i.per_second(i.tx.tx_payload_bytes) / 1e9),
)
RX_STATS = tuple(Stat(f"rx_{suffix}", unit, desc, _rx(field)) for suffix, field, unit, desc in (
    ("packets", "rx_packets", "packets", "packets received"),
    ("wire_bytes", "rx_wire_bytes", "bytes", "bytes received on the wire"),
    ("payload_bytes", "rx_payload_bytes", "bytes", "payload bytes received"),
))


def check_links(sim, out):
    st = sim.state
    ch = st.ch
    for field in ("packets", "wire_bytes", "payload_bytes"):
        tx, rx = ch[f"tx_{field}"], ch[f"rx_{field}"]
        out.check(tx == rx, f"link {field.replace('_', ' ')} sent != received",
                  lambda c: f"{channel_name(st, c)} sent {int(tx[c])}, received {int(rx[c])}")
    out.check(ch.credits == ch.rx_credits, "link credits not returned (each channel holds its "
              "receive buffer)", lambda c: f"{channel_name(st, c)} holds {int(ch.credits[c])} of "
                                           f"{int(ch.rx_credits[c])}")
    rsp_full = int(st.rsp_rxq.shape[1])
    out.check(ch.rsp_credits == rsp_full,
              f"link response-channel credits not returned (each channel holds {rsp_full})",
              lambda c: f"{channel_name(st, c)} holds {int(ch.rsp_credits[c])}")
    name = lambda c: channel_name(st, c)   # noqa: E731
    out.empty(ch.txq_count, "link transmit queues not empty", name, " packet(s)")
    out.empty(ch.rsq_count, "link response queues not empty", name, " packet(s)")


def link_findings(sim):
    """Channels out of credits or with a full transmit queue (the stuck-run report)."""
    st = sim.state
    out = []
    for c in range(st.ch.shape[0]):
        ch = st.ch[c]
        name = channel_name(st, c)
        if ch.credit_blocked and int(ch.txq_count):
            head = int(st.txq[c, int(ch.txq_head), FIFO_FLITS])
            cap = st.credit_ret.shape[1]
            back = sum(int(st.credit_ret[c, (int(ch.cr_head) + i) % cap, 1])
                       for i in range(int(ch.cr_count)))
            out.append(f"{name}: out of credits (head packet needs {head} flits, {int(ch.credits)} "
                       f"left, {back} on their way back; {int(ch.txq_count)} packet(s) queued; "
                       f"the receiver holds the rest)")
        elif int(ch.txq_count) >= int(ch.txq_cap):
            out.append(f"{name}: transmit queue full ({int(ch.txq_count)} packets)")
        if ch.credit_blocked and int(ch.rsq_count):
            out.append(f"{name}: response channel out of credits ({int(ch.rsp_credits)} left; "
                       f"{int(ch.rsq_count)} response(s) queued)")
    return out


def _describe_tx(n, c, kind, payload):
    to = "" if c % 2 == 0 else f" to GPU {n.channel_gpu(c)}"
    return n.channel(c), f"sends {n.packet_kind(kind)}{to}, {payload} B payload"


def _nvl(key, field, value=None, unit=None, how=""):
    return key_param(field, f"system.nvlink.{key}", value, unit, how)


def _channels(cfg):
    """Every channel of the system: NVLink, then PCIe and InfiniBand (topology.py)."""
    from ..topology import channel_count
    return channel_count(cfg)


# The channel fields the per-packet handlers touch, first and in whole cache lines
# (Record.cache_lines), grouped by the paths that read them so that each path touches as few lines
# as it can: with many GPUs a channel's record is out of the caches by the time its next packet
# comes, so each line a handler touches is a miss (the profile's hottest loads).
#   line 1  the transmitter's state as everyone asks it: the look (tx_at, busy_until, the FIFO
#           counts, a packet sent ahead), the room check of whoever fills the request FIFO (the
#           hub's pick_channel_vc, a switch input's pick_switch_output: link_room.txq_room) and
#           ch_kick
#   line 2  the FIFO heads the look takes from and a push fills (response room too)
#   line 3  the credits: the look's reclaim and the receiver's credit_return_vc (both ends of the
#           credit-return list), and the virtual channel sent last (the look's arbitration)
#   line 4  the wire: serialisation, latency, the wire FIFO's ends, and the two ends' indices that
#           both the transmitter (who it wakes) and the arrival (where it goes) read
#   line 5  what only the transmitter's send reads and writes (its counters, the link class,
#           the back_to_back shortcut's ring)
#   line 6  the receiving end: its counters and a switch input's request FIFO
#   line 7  a switch input's response FIFO, the transmit FIFOs' peaks (a push updates one)
# So a packet's arrival at a switch touches lines 3, 4 and 6 of its input channel, and its push
# into an output lines 1, 2 and 7 of that output; a transmit lines 1-5. Layout changes no
# result.
CHANNEL_HOT_FIELDS = (
    "tx_at", "busy_until", "txq_count", "rsq_count", "txq_pkts", "txq_cap", "ahead_count", "ahead_at",
    "txq_head", "txq_ready", "txq_flits", "rsq_head", "rsq_ready", "rsq_flits", "rsq_pkts",
    "rsq_cap",
    "credits", "rsp_credits", "cr_count", "cr_next", "cr_head", "cr_last", "credit_blocked",
    "vc_last",
    "fs_per_byte", "latency", "to_switch", "traversal", "wire_head", "wire_count", "gpu", "switch",
    "tx_packets", "tx_wire_bytes", "tx_payload_bytes", "tx_busy", "src_switch", "link_class",
    "ahead_head", "credit_stall",
    "rx_packets", "rx_wire_bytes", "rx_payload_bytes", "rxq_head", "rxq_count", "rxq_peak",
    "xbar_blocked", "xbar_pending",
    "rsp_rxq_head", "rsp_rxq_count", "rsp_rxq_peak", "rsp_xbar_blocked", "rsq_peak", "txq_peak")


@compiled
def prefetch_transmit(st, c):
    """Start loading the channel record lines a transmit of channel c reads (lines 1-5 of
    CHANNEL_HOT_FIELDS); the run loop calls it for the event that comes next (a hint: no value
    changes, engine/prefetch.py)."""
    at = st.ch.ctypes.data + c * st.ch.itemsize
    for k in range(5):
        prefetch_address(at + k * CACHE_LINE_BYTES)


@compiled
def prefetch_arrival(st, c):
    """The same for the arrival of channel c's head packet: the credit line (the receiver
    returns credits), the wire line and the receiving end's line (lines 3, 4 and 6)."""
    at = st.ch.ctypes.data + c * st.ch.itemsize
    prefetch_address(at + 2 * CACHE_LINE_BYTES)
    prefetch_address(at + 3 * CACHE_LINE_BYTES)
    prefetch_address(at + 5 * CACHE_LINE_BYTES)


def build_links(cfg, building):
    """NVLink's build hook (declare.Block.build): the link buffers, credits and queue depths of
    every channel, and the sizes of the link FIFOs the builder allocates.

    A receive buffer must hold one largest packet (header + max_payload_bytes, in flits) or the
    link deadlocks. Each channel starts with its receiver's buffer as credits (rx_credits:
    NVLink's rx_buffer_flits, or a fabric link's buffer, topology.py). A GPU's transmitter queues
    tx_queue_packets; a forwarding node's output output_queue_packets (assumption for PCIe, NIC
    and IB ports: as deep as an NVSwitch output queue; the NIC's PCIe queue is nic.py's). The
    response virtual channel (response_path: separate) has its own buffer and queue; shared, it
    is one packet deep and unused. Sizes: `rxq_cap` (the deepest receive buffer, in packets: every
    packet is at least one flit), `rsp_rx_cap` (the response buffer) and `in_flight` (packets on a
    wire, or credit returns on their way)."""
    nv, ch = cfg.system.nvlink, building.ch
    flit = nv.flit_bytes
    max_pkt_flits = (nv.header_bytes + nv.max_payload_bytes + flit - 1) // flit
    if nv.rx_buffer_flits < max_pkt_flits:
        raise ValueError(f"system.nvlink.rx_buffer_flits: {nv.rx_buffer_flits} flits cannot "
                         f"hold one maximum-size packet ({max_pkt_flits} flits); links would "
                         f"deadlock")
    ch.credits[:] = ch.rx_credits
    ch.txq_cap[:] = np.where(ch.src_switch < 0, nv.tx_queue_packets,
                             cfg.system.switch.output_queue_packets)
    rxq_cap = int(ch.rx_credits.max())
    separate = nv.response_path == "separate"
    rsp_rx_cap = nv.response_buffer_flits if separate else 1
    ch.rsp_credits[:] = rsp_rx_cap
    ch.rsq_cap[:] = nv.response_queue_packets if separate else 1
    building.sizes.update(rxq_cap=rxq_cap, rsp_rx_cap=rsp_rx_cap, in_flight=rxq_cap + rsp_rx_cap)


BLOCK = Block(
    "nvlink", __doc__.split("\n\n")[0],
    params=(
        _nvl("links_per_gpu", "links_per_gpu"),
        _nvl("store_packet_bytes", "store_payload",
             lambda cfg: min(cfg.system.nvlink.store_packet_bytes, cfg.system.nvlink.max_payload_bytes),
             how="capped at max_payload_bytes; packet.py"),
        _nvl("write_responses", "write_resp_per_packet",
             lambda cfg: int(cfg.system.nvlink.write_responses == "per_packet"), "bool",
             "1: per_packet, 0: per_request"),
        _nvl("header_bytes", "header_bytes"),
        _nvl("flit_bytes", "flit_bytes"),
        _nvl("response_path", "response_vc",
             lambda cfg: int(cfg.system.nvlink.response_path == "separate"), "bool",
             "1: separate, 0: shared"),
        _nvl("rx_buffer_flits", "rx_buffer_flits"),
        _nvl("vc_arbitration", "vc_round_robin",
             lambda cfg: int(cfg.system.nvlink.vc_arbitration == "round_robin"), "bool",
             "1: round_robin, 0: response_first"),
    ),
    records=(Record("ch", "link channels: link l of GPU g is link g * L + l, its GPU->switch "
                          "channel 2 * link, its switch->GPU channel 2 * link + 1",
                    cache_lines=True, first=CHANNEL_HOT_FIELDS),),
    fields=fields(
        "ch", ("to_switch", "1 for GPU->switch channels"), ("gpu", "the link's GPU"),
        ("switch", "the link's switch"), ("port", "the link's switch port"),
        ("busy_until", "tick the transmitter is free"), ("credits", "flits of receiver buffer free"),
        ("cr_head", "credit returns in flight (ids in State.credit_ret)"), ("cr_count", ""),
        ("cr_next", "tick of the earliest credit return in flight (valid while cr_count > 0)"),
        ("cr_last", "tick of the latest (the list's tail)"),
        ("txq_head", "transmit FIFO (ids in State.txq)"), ("txq_count", ""),
        ("txq_cap", "its capacity (tx_queue_packets, or the switch's output_queue_packets)"),
        ("txq_pkts", "link packets queued (trains count their packets)"),
        ("wire_head", "packets on the wire, in order (ids in State.wire)"), ("wire_count", ""),
        ("tx_at", "tick of the transmitter's timer (-1: idle)"),
        ("credit_blocked", "1: the head packet waits for credits"), ("credit_blocked_since", ""),
        ("tx_packets", ""), ("tx_wire_bytes", ""), ("tx_payload_bytes", ""), ("tx_busy", ""),
        ("credit_stall", ""), ("txq_peak", ""),
        ("rx_packets", ""), ("rx_wire_bytes", ""), ("rx_payload_bytes", ""),
        # the response virtual channel (nvlink.response_path: separate): its transmit FIFO (ids in
        # State.rsq) and its credits (the receiver's response buffer); build_links sets rsq_cap
        # and rsp_credits (one packet deep with response_path: shared)
        ("rsq_head", ""), ("rsq_count", ""), ("rsq_cap", ""), ("rsq_pkts", ""),
        ("rsp_credits", ""), ("rsq_peak", "response virtual channel stat"),
        # the head packet of each transmit FIFO, as the transmitter needs it: when it is ready and
        # its flits (copied from its packet record when it becomes the head, so that a look at a
        # busy, starved or not-ready channel reads no packet record)
        ("txq_ready", "ready tick of the transmit FIFO's head packet"),
        ("txq_flits", "its flits"), ("rsq_ready", "the same for the response FIFO"), ("rsq_flits", ""),
        # run.shortcuts back_to_back (send_ahead below): the packets sent ahead of their turn,
        # in a ring (State.ahead, link_room.py), oldest first
        ("ahead_head", "the oldest packet sent ahead (its entry in State.ahead)"),
        ("ahead_count", "packets sent ahead, not yet departed"),
        ("ahead_at", "the oldest's departure tick (valid while ahead_count > 0)"),
        # system.nvlink.vc_arbitration: round_robin - the virtual channel this direction sent
        # last; when both can send, the other one goes
        ("vc_last", "virtual channel of the last packet sent"),
        init={"tx_at": -1}) + fields(
        "gpu", ("ahead_links", "back_to_back: bit l is set while the GPU->switch channel of the "
                               "GPU's link l has a packet sent ahead (link_room.hold_gpu_departures)")),
    stats=(StatGroup("link", "", TX_STATS + RX_STATS),),
    arrays=(Array("ahead", "back_to_back: the packets each channel sent ahead, a ring of "
                  "link_room.AHEAD_RING entries (link_room.A_*)",
                  lambda cfg: (_channels(cfg), AHEAD_RING, AHEAD_COLUMNS)),),
    events=(Event("ch_tx", EV_CH_TX, "a link transmitter looks at its head packet"),
            Event("ch_arrive", EV_CH_ARRIVE, "the head packet on a wire reaches the far end")),
    timers=(Timer("ch_tx", EV_CH_TX, _channels, "one per channel: its transmitter"),
            Timer("ch_arrive", EV_CH_ARRIVE, _channels, "one per channel: its wire's head arrival")),
    checks=(check_links,),
    findings=(link_findings,),
    build=(build_links,),
    debug=(Debug("NVLink", CAT_NVLINK, (TR_LINK_TX,), describe={TR_LINK_TX: _describe_tx}),),
)


@compiled
def input_free_tick(st, c, pkt, tick):
    """When packet pkt, leaving a switch input buffer at `tick`, frees its space: now, or with
    cut-through forwarding once its tail has come in, one serialisation after its header (its
    `ready` is still its arrival tick after the traversal)."""
    freed = tick
    if st.p[0].cut_through:
        tail = (st.pk[pkt].ready - st.ch[c].traversal + packet_serialisation(st, c, pkt)
                - header_serialisation(st, c))
        if tail > freed:
            freed = tail
    return freed


@compiled
def txq_push(st, c, pkt, tick):
    """Queue packet pkt for transmission on channel c, in its virtual channel's FIFO."""
    ch = st.ch[c]
    npk = st.pk[pkt].npk
    vc = packet_vc(st, pkt)
    if ch.ahead_count > 0:
        txq_settle(st, c)
        for i in range(ch.ahead_count):
            row = st.ahead[c, ring_add(ch.ahead_head, i, AHEAD_RING)]
            y = row[A_YIELDS]
            if vc != row[A_VC] and (y & AHEAD_YIELDS or (y & AHEAD_EARLY and
                                                         st.pk[pkt].ready < row[A_AT])):
                # a packet of the other virtual channel queued before this one sent ahead was
                # due would go first (send_ahead): it and the ones after it come back
                take_back_ahead(st, c, i)
                break
    if vc == VC_RESPONSE:
        slot = ring_add(ch.rsq_head, ch.rsq_count, ch.rsq_cap)
        st.rsq[c, slot, FIFO_PACKET] = pkt
        st.rsq[c, slot, FIFO_READY] = st.pk[pkt].ready
        st.rsq[c, slot, FIFO_FLITS] = st.pk[pkt].flits
        if ch.rsq_count == 0:
            ch.rsq_ready = st.pk[pkt].ready
            ch.rsq_flits = st.pk[pkt].flits
        ch.rsq_count += 1
        ch.rsq_pkts += npk
        if ch.rsq_pkts > ch.rsq_peak:
            ch.rsq_peak = ch.rsq_pkts
    else:
        slot = ring_add(ch.txq_head, ch.txq_count, ch.txq_cap)
        st.txq[c, slot, FIFO_PACKET] = pkt
        st.txq[c, slot, FIFO_READY] = st.pk[pkt].ready
        st.txq[c, slot, FIFO_FLITS] = st.pk[pkt].flits
        if ch.txq_count == 0:
            ch.txq_ready = st.pk[pkt].ready
            ch.txq_flits = st.pk[pkt].flits
        ch.txq_count += 1
        ch.txq_pkts += npk
        if ch.txq_pkts > ch.txq_peak:
            ch.txq_peak = ch.txq_pkts
    ch_kick(st, c, tick)
    p = st.p[0]
    if p.shortcuts & SHORTCUT_BACK_TO_BACK and ch.to_switch and c < 2 * p.num_gpus * p.links_per_gpu \
            and ch.txq_count + ch.rsq_count == 1 and ch.ahead_count == 0 and ch.busy_until <= tick \
            and st.pk[pkt].ready > tick and p.trace_mask == 0:
        # a GPU's free link: the look at the packet's ready tick is certain to send it unless a
        # packet of the other virtual channel ready before then is queued (send_ahead)
        send_ahead(st, c, st.pk[pkt].ready, tick)


@compiled
def credit_return(st, c, flits, tick):
    """The receiver of channel c freed `flits` of its request-channel buffer; they reach the
    sender at `tick`."""
    credit_return_vc(st, c, flits, tick, VC_REQUEST)


@compiled
def credit_return_vc(st, c, flits, tick, vc):
    """The receiver of channel c freed `flits` of virtual channel vc's buffer; they reach the
    sender at `tick`."""
    ch = st.ch[c]
    cap = st.credit_ret.shape[1]
    # insert in tick order, after returns of the same tick; returns come nearly in order, so
    # most go at the tail (known from ch.cr_last without reading the list) and the walk back is
    # short otherwise
    i = ch.cr_count
    if i > 0 and ch.cr_last > tick:
        while i > 0:
            prev = ring_add(ch.cr_head, i - 1, cap)
            if st.credit_ret[c, prev, 0] <= tick:
                break
            cur = ring_add(ch.cr_head, i, cap)
            st.credit_ret[c, cur, 0] = st.credit_ret[c, prev, 0]
            st.credit_ret[c, cur, 1] = st.credit_ret[c, prev, 1]
            st.credit_ret[c, cur, 2] = st.credit_ret[c, prev, 2]
            i -= 1
    else:
        ch.cr_last = tick
    if i == 0:
        ch.cr_next = tick
    slot = ring_add(ch.cr_head, i, cap)
    st.credit_ret[c, slot, 0] = tick
    st.credit_ret[c, slot, 1] = flits
    st.credit_ret[c, slot, 2] = vc
    ch.cr_count += 1
    if ch.credit_blocked:
        if not st.p[0].shortcuts & SHORTCUT_CREDIT_WAKE:
            ch_kick(st, c, tick)
        elif ch.tx_at < 0 or tick < ch.tx_at:
            # exact shortcut credit_wake (docs/engine_order.md): the transmitter looks when a head
            # packet has its credits, not at every return (a look at or before this return's
            # tick is set already otherwise, and counts it)
            due = credit_wake_tick(st, c)
            if due >= 0:
                ch_kick(st, c, due)


@inline
def _credits_due(st, c, vc, have, need):
    """The tick of the first credit return filed for channel c that brings virtual channel vc's
    credits from `have` to `need` (the returns counted in tick order); -1 if those filed do not."""
    ch = st.ch[c]
    cap = st.credit_ret.shape[1]
    for i in range(ch.cr_count):
        k = ring_add(ch.cr_head, i, cap)
        if st.credit_ret[c, k, 2] == vc:
            have += st.credit_ret[c, k, 1]
            if have >= need:
                return st.credit_ret[c, k, 0]
    return -1


@compiled
def credit_wake_tick(st, c):
    """Exact shortcut credit_wake (run.shortcuts; docs/engine_order.md): the first tick at which
    the look of channel c's transmitter, short of credits for a head packet, can send - the
    earliest over its virtual channels of the head's ready tick and the return, among those
    filed, that gives the head its credits; -1 if the returns filed give no head enough. The
    reference path looks at every return while it is short (credit_return_vc), and each look
    before that tick reclaims the matured returns, finds every head still short or not ready
    and sets its timer again: nothing another block reads. A head changes only by a send, a
    packet queued on an empty FIFO kicks the look itself (txq_push), and a return filed later
    with an earlier tick recomputes this (credit_return_vc)."""
    ch = st.ch[c]
    best = -1
    if ch.rsq_count > 0:
        t = ch.rsq_ready
        if ch.rsp_credits < ch.rsq_flits:
            due = _credits_due(st, c, VC_RESPONSE, ch.rsp_credits, ch.rsq_flits)
            t = -1 if due < 0 else max(t, due)
        best = t
    if ch.txq_count > 0:
        t = ch.txq_ready
        if ch.credits < ch.txq_flits:
            due = _credits_due(st, c, VC_REQUEST, ch.credits, ch.txq_flits)
            t = -1 if due < 0 else max(t, due)
        if t >= 0 and (best < 0 or t < best):
            best = t
    return best


@compiled
def _reclaim_credits(st, c, tick):
    """Add every credit return that reached the sender by `tick` (to its virtual channel)."""
    ch = st.ch[c]
    if ch.cr_count == 0 or ch.cr_next > tick:
        return   # nothing has matured (known from the channel record: the list is not read)
    cap = st.credit_ret.shape[1]
    while ch.cr_count > 0 and st.credit_ret[c, ch.cr_head, 0] <= tick:
        if st.credit_ret[c, ch.cr_head, 2] == VC_RESPONSE:
            ch.rsp_credits += st.credit_ret[c, ch.cr_head, 1]
        else:
            ch.credits += st.credit_ret[c, ch.cr_head, 1]
        ch.cr_head = ring_next(ch.cr_head, cap)
        ch.cr_count -= 1
    if ch.cr_count > 0:
        ch.cr_next = st.credit_ret[c, ch.cr_head, 0]


@compiled
def settle_credits(st):
    """End of a run: every credit return still on its way reaches its sender (so a finished
    run's State shows every channel's credits back at the receive-buffer size)."""
    for c in range(st.ch.shape[0]):
        while st.ch[c].ahead_count > 0:
            depart_ahead(st, c)     # the packets sent ahead have left their FIFO long since
        _reclaim_credits(st, c, 2 ** 62)


@compiled
def credits_outstanding(st, c):
    """Flits filed for return to channel c's sender but not yet added to its credits."""
    ch = st.ch[c]
    cap = st.credit_ret.shape[1]
    n = 0
    for i in range(ch.cr_count):
        n += st.credit_ret[c, ring_add(ch.cr_head, i, cap), 1]
    return n


@inline
def _new_head(st, fifo, c, head):
    """A packet became the head of a transmit FIFO: its record is read when it is sent, one
    serialisation from now at the earliest; start loading it (engine/prefetch.py)."""
    prefetch(st.pk, fifo[c, head, FIFO_PACKET])


@inline
def channel_transmit(st, c, tick):
    """EV_CH_TX: send the head packet of a virtual channel if wire, packet and credits allow.
    When both channels' heads can go, system.nvlink.vc_arbitration decides: round_robin (the
    default) sends the one that did not send last - a starvation-free arbiter, as NVIDIA's
    patents on VC arbitration describe (US 11,824,791, US 12,137,055: round-robin virtual
    channel select) - so requests keep a share of a link that responses would fill;
    response_first always sends the response (the earlier model: right for short write
    responses, but a stream of read data then holds back every request behind it, the read
    requests that keep other servers busy included)."""
    p = st.p[0]
    ch = st.ch[c]
    while ch.ahead_count > 0 and ch.ahead_at <= tick:
        depart_ahead(st, c)
    if ch.tx_at != tick:
        return  # superseded by an earlier activation
    ch.tx_at = -1
    if ch.txq_count == 0 and ch.rsq_count == 0:
        return
    if ch.busy_until > tick:
        ch_kick(st, c, ch.busy_until)
        # (a look held for a departure: the next one an input still waits for, link_room.py)
        hold_for_waiters(st, c)
        return
    _reclaim_credits(st, c, tick)
    vc = -1
    pkt = -1
    wake = -1           # the earliest head packet not yet ready
    starved = False     # a ready head packet lacks credits
    rsp_ok = False      # the response channel's head can go now
    if ch.rsq_count > 0:
        if ch.rsq_ready > tick:
            wake = ch.rsq_ready
        elif ch.rsp_credits >= ch.rsq_flits:
            rsp_ok = True
        else:
            starved = True
    # the request channel's head goes if it can and the response channel cannot, or (round
    # robin) the last packet sent was a response
    if ch.txq_count > 0 and not (rsp_ok and (p.vc_round_robin == 0 or ch.vc_last == VC_REQUEST)):
        if ch.txq_ready > tick:
            if wake < 0 or ch.txq_ready < wake:
                wake = ch.txq_ready
        elif ch.credits >= ch.txq_flits:
            vc = VC_REQUEST
            pkt = st.txq[c, ch.txq_head, FIFO_PACKET]
        else:
            starved = True
    if vc < 0 and rsp_ok:
        vc = VC_RESPONSE
        pkt = st.rsq[c, ch.rsq_head, FIFO_PACKET]
    if vc < 0:
        if starved:
            if not ch.credit_blocked:
                ch.credit_blocked = 1
                ch.credit_blocked_since = tick
            if p.shortcuts & SHORTCUT_CREDIT_WAKE:
                # exact shortcut credit_wake: straight to the return that gives a head packet its
                # credits (credit_wake_tick); a return filed later that comes sooner moves it
                due = credit_wake_tick(st, c)
                if due >= 0:
                    ch_kick(st, c, due)
            elif ch.cr_count > 0:   # wake up when the next return arrives (later ones kick earlier)
                ch_kick(st, c, ch.cr_next)
        if wake >= 0:
            ch_kick(st, c, wake)
        return
    pk = st.pk[pkt]
    if ch.credit_blocked:
        ch.credit_blocked = 0
        ch.credit_stall += tick - ch.credit_blocked_since
    ser = _send(st, c, vc, pkt, tick)
    ch.vc_last = vc
    if vc == VC_RESPONSE:
        ch.rsq_pkts -= pk.npk
    else:
        ch.txq_pkts -= pk.npk
    trace_event(st, CAT_NVLINK, TR_LINK_TX, c, pk.kind, pk.payload, tick)
    link_slot_freed(st, c, vc, tick)   # a slot freed in this FIFO: wake whoever waits to fill it
    if ch.txq_count > 0 or ch.rsq_count > 0:
        ch_kick(st, c, tick + ser)
        if p.shortcuts & SHORTCUT_BACK_TO_BACK and c < 2 * p.num_gpus * p.links_per_gpu \
                and p.trace_mask == 0:
            send_ahead(st, c, tick + ser, tick + ser)


@inline
def _send(st, c, vc, pkt, tick):
    """Put packet pkt, the head of virtual channel vc's FIFO (with the credits it needs), on
    channel c's wire at `tick`: FIFO, credits, serialisation, counters, the wire's FIFO and its
    arrival timer. The FIFO's packet count (its room) is the caller's. Returns the packet's
    serialisation time."""
    p = st.p[0]
    ch = st.ch[c]
    pk = st.pk[pkt]
    if vc == VC_RESPONSE:
        ch.rsq_head = ring_next(ch.rsq_head, ch.rsq_cap)
        ch.rsq_count -= 1
        ch.rsp_credits -= pk.flits
        if ch.rsq_count > 0:
            _new_head(st, st.rsq, c, ch.rsq_head)
            ch.rsq_ready = st.rsq[c, ch.rsq_head, FIFO_READY]
            ch.rsq_flits = st.rsq[c, ch.rsq_head, FIFO_FLITS]
    else:
        ch.txq_head = ring_next(ch.txq_head, ch.txq_cap)
        ch.txq_count -= 1
        ch.credits -= pk.flits
        if ch.txq_count > 0:
            _new_head(st, st.txq, c, ch.txq_head)
            ch.txq_ready = st.txq[c, ch.txq_head, FIFO_READY]
            ch.txq_flits = st.txq[c, ch.txq_head, FIFO_FLITS]
    wire = wire_bytes(st, c, pkt)
    pk.wire = wire
    ser = bytes_ticks(wire, ch.fs_per_byte)
    ch.busy_until = tick + ser
    ch.tx_packets += pk.npk
    ch.tx_wire_bytes += wire
    ch.tx_payload_bytes += pk.payload
    ch.tx_busy += ser
    arrive = tick + ser + ch.latency
    if ch.to_switch:
        # the switch handles a packet once it has crossed the input stage (switch.py); a
        # cut-through switch starts that as soon as the header flit is in, store-and-forward
        # only once the whole packet is
        if p.cut_through:
            arrive = tick + header_serialisation(st, c) + ch.latency
        arrive += ch.traversal
    # on the wire: packets of one channel arrive in the order they were sent, so the channel
    # keeps them in a FIFO and only its head has an arrival event (a small event queue)
    pk.ready = arrive
    slot = ring_add(ch.wire_head, ch.wire_count, st.wire.shape[1])
    st.wire[c, slot, FIFO_PACKET] = pkt
    st.wire[c, slot, FIFO_READY] = arrive
    ch.wire_count += 1
    if ch.wire_count == 1:
        timer_set(st, p.tm_ch_arrive + c, arrive)
    return ser


@compiled
def send_ahead(st, c, t1, horizon):
    """Exact shortcut back_to_back (run.shortcuts; docs/engine_order.md), on an NVLink channel
    (GPU -> switch or switch -> GPU) that has just started a packet ending at t1, or on a GPU's
    free link whose one queued packet is ready at t1 (txq_push): send the next packets now, each
    departing where the one before it ends, as long as the look at its departure tick is certain
    to send it and nothing can tell the difference before then. Credits are counted up to
    `horizon` (t1 after a packet; the current tick for a queued one: a look before t1 can still
    happen then, and reads the credits of its own tick) for every packet of the run: a look
    taken back to a later departure tick (below) must not find credits reclaimed beyond it.

    Certain: the next packet is the head of the virtual channel the look at its departure tick
    serves first (the responses; with vc_arbitration: round_robin the channel not sent last), or
    of the other one with nothing queued in the first, is ready by that tick and has the credits
    (credits only grow until then but by the packets sent ahead themselves, so more credits
    change no choice). Only a packet queued in that first channel before the departure could go
    first, and on a free link one ready before t1: txq_push then takes that packet sent ahead
    and every later one back (take_back_ahead), and the looks run as they would have. Unseen:
    each packet's FIFO slot stays counted until it departs (link_room.py: every room check and
    backlog read applies the departures once the looks would have run), and its wake-up of
    whoever waits for that room is applied at its departure (depart_ahead); a switch input, hub
    or RPM that starts waiting for room before then sets the look for that tick again
    (hold_departures, hold_gpu_departures). Nothing else reads a link's FIFO, credits or wire
    before then but the transmitter itself. Not while a switch input already waits for this
    output, nor on a GPU's link while its hub or RPM waits for room (the look would wake it),
    while anything is traced (counters sample the links) or beyond the run's tick limit; at most
    link_room.AHEAD_RING packets at a time."""
    p = st.p[0]
    sy = st.sys[0]
    ch = st.ch[c]
    if ch.ahead_count > 0 or sy.err_code != 0:
        return
    t = t1
    while ch.ahead_count < AHEAD_RING and (sy.tick_limit < 0 or t <= sy.tick_limit):
        # the virtual channel the look at t serves first if its head can go: the responses, or
        # (round robin) the one not sent last
        first = VC_REQUEST if p.vc_round_robin and ch.vc_last == VC_RESPONSE else VC_RESPONSE
        n_first = ch.txq_count if first == VC_REQUEST else ch.rsq_count
        vc = first if n_first > 0 else 1 - first
        if vc == VC_RESPONSE:
            if ch.rsq_count == 0 or ch.rsq_ready > t \
                    or _credits_at(st, c, horizon, VC_RESPONSE) < ch.rsq_flits:
                break
            pkt = st.rsq[c, ch.rsq_head, FIFO_PACKET]
        else:
            if ch.txq_count == 0 or ch.txq_ready > t \
                    or _credits_at(st, c, horizon, VC_REQUEST) < ch.txq_flits:
                break
            pkt = st.txq[c, ch.txq_head, FIFO_PACKET]
        if ch.to_switch:
            gp = st.gpu[ch.gpu]
            if gp.hub_blocked or gp.rpm_blocked:
                break
        elif st.sw_wait[(ch.switch * p.num_gpus + ch.gpu) * 2 + vc, 1] > 0:
            break
        if ch.ahead_count == 0:
            _reclaim_credits(st, c, horizon)
            ch.ahead_at = t
            if ch.to_switch:
                st.gpu[ch.gpu].ahead_links |= 1 << ((c // 2) % p.links_per_gpu)
        row = st.ahead[c, ring_add(ch.ahead_head, ch.ahead_count, AHEAD_RING)]
        ch.ahead_count += 1
        row[A_PKT] = pkt
        row[A_AT] = t
        row[A_VC] = vc
        yields = 0
        if vc != first:
            # the first channel was empty: a packet queued there goes first
            yields = AHEAD_YIELDS
        if horizon < t1 and t == t1:
            yields |= AHEAD_EARLY   # queued on a free link, waiting for its ready tick
        row[A_YIELDS] = yields
        row[A_VC_LAST] = ch.vc_last
        row[A_NPK] = st.pk[pkt].npk
        row[A_WIRE] = st.pk[pkt].wire
        t += _send(st, c, vc, pkt, t)
        ch.vc_last = vc
    if ch.ahead_count == 0:
        return
    # the look that sending the last of them at its departure tick arms
    ch.tx_at = -1
    if ch.txq_count > 0 or ch.rsq_count > 0:
        ch_kick(st, c, t)
    else:
        timer_clear(st, p.tm_ch_tx + c)


@compiled
def _credits_at(st, c, t, vc):
    """Credits of virtual channel vc that channel c's sender holds at tick t, counting the
    returns filed so far."""
    ch = st.ch[c]
    n = ch.rsp_credits if vc == VC_RESPONSE else ch.credits
    if ch.cr_count == 0 or ch.cr_next > t:
        return n
    cap = st.credit_ret.shape[1]
    for i in range(ch.cr_count):
        k = ring_add(ch.cr_head, i, cap)
        if st.credit_ret[c, k, 0] > t:
            break
        if st.credit_ret[c, k, 2] == vc:
            n += st.credit_ret[c, k, 1]
    return n


@compiled
def take_back_ahead(st, c, first):
    """Undo send_ahead for channel c's packets sent ahead from the `first`-th oldest on, before
    their departure ticks: newest first, each is the head of its FIFO again, with its credits,
    off the wire (they are the wire's newest packets, in order), and the transmitter looks
    again at the first one's departure tick (or earlier, where a hold set it)."""
    p = st.p[0]
    ch = st.ch[c]
    for i in range(ch.ahead_count - 1, first - 1, -1):
        row = st.ahead[c, ring_add(ch.ahead_head, i, AHEAD_RING)]
        pk = st.pk[row[A_PKT]]
        ch.vc_last = row[A_VC_LAST]
        ch.wire_count -= 1
        ser = bytes_ticks(pk.wire, ch.fs_per_byte)
        ch.tx_packets -= pk.npk
        ch.tx_wire_bytes -= pk.wire
        ch.tx_payload_bytes -= pk.payload
        ch.tx_busy -= ser
        if row[A_VC] == VC_RESPONSE:
            ch.rsq_head = ring_add(ch.rsq_head, ch.rsq_cap - 1, ch.rsq_cap)
            ch.rsq_count += 1
            ch.rsp_credits += pk.flits
            ch.rsq_ready = st.rsq[c, ch.rsq_head, FIFO_READY]
            ch.rsq_flits = st.rsq[c, ch.rsq_head, FIFO_FLITS]
            pk.ready = ch.rsq_ready
        else:
            ch.txq_head = ring_add(ch.txq_head, ch.txq_cap - 1, ch.txq_cap)
            ch.txq_count += 1
            ch.credits += pk.flits
            ch.txq_ready = st.txq[c, ch.txq_head, FIFO_READY]
            ch.txq_flits = st.txq[c, ch.txq_head, FIFO_FLITS]
            pk.ready = ch.txq_ready
        pk.wire = row[A_WIRE]
    row = st.ahead[c, ring_add(ch.ahead_head, first, AHEAD_RING)]
    t1 = row[A_AT]
    # the link was free until t1 (sent at the end of the packet before it), or free since it
    # was queued (AHEAD_EARLY: any tick up to now reads the same)
    ch.busy_until = st.sys[0].q_now if row[A_YIELDS] & AHEAD_EARLY else t1
    ch.ahead_count = first
    if first == 0 and ch.to_switch:
        st.gpu[ch.gpu].ahead_links &= ~(1 << ((c // 2) % p.links_per_gpu))
    if ch.wire_count == 0:
        timer_clear(st, p.tm_ch_arrive + c)   # it was alone on the wire (AHEAD_EARLY)
    if ch.tx_at < 0 or t1 < ch.tx_at:
        ch.tx_at = t1
        timer_set(st, p.tm_ch_tx + c, t1)


@compiled
def header_serialisation(st, c):
    """Time to serialise one packet header on channel c (what a cut-through switch waits for)."""
    p = st.p[0]
    return bytes_ticks(header_flits(st) * p.flit_bytes, st.ch[c].fs_per_byte)


@compiled
def packet_serialisation(st, c, pkt):
    """Time to serialise packet pkt on channel c (the bytes it took on that wire)."""
    return bytes_ticks(st.pk[pkt].wire, st.ch[c].fs_per_byte)


@compiled
def channel_arrival(st, c):
    """EV_CH_ARRIVE: the packet at the head of channel c's wire FIFO reached the far end; the
    next one (if any) gets its arrival event. Returns the packet."""
    ch = st.ch[c]
    pkt = st.wire[c, ch.wire_head, FIFO_PACKET]
    ch.wire_head = ring_next(ch.wire_head, st.wire.shape[1])
    ch.wire_count -= 1
    if ch.wire_count > 0:
        timer_set(st, st.p[0].tm_ch_arrive + c, st.wire[c, ch.wire_head, FIFO_READY])
        # its record is read when it arrives, one serialisation from now (engine/prefetch.py)
        prefetch(st.pk, st.wire[c, ch.wire_head, FIFO_PACKET])
    return pkt


@compiled
def channel_count_arrival(st, c, pkt):
    ch = st.ch[c]
    pk = st.pk[pkt]
    ch.rx_packets += pk.npk
    ch.rx_wire_bytes += pk.wire
    ch.rx_payload_bytes += pk.payload
