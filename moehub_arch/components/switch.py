"""NVSwitch: a crossbar with input buffers per virtual channel, per-port output queues and routing
by destination GPU.

Virtual channels (system.nvlink.response_path: separate): every input port has a request buffer
(`nvlink.rx_buffer_flits`) and a response buffer (`nvlink.response_buffer_flits`), each with its
own credits, and every output port a request and a response queue. NVLink separates request and
response traffic into virtual channels so that responses, which free the requesters' resources,
never wait behind requests (the protocol stays deadlock-free); the MoE-Hub and DySHARP simulators
model 8 request + 8 response virtual channels of depth 256 per NVSwitch input port (arXiv
2605.05888, 2605.05607). We keep one channel per class: in a single-level fabric with FIFO output
queues, more channels of one class would only spread one class's packets over several buffers
(their combined depth is the buffer parameter). Arbitration: at an input port the response channel
moves first, and the output link sends its response queue's head before its request queue's
(nvlink.channel_transmit). `response_path: shared` keeps one channel per port (the responses
queue behind the requests): the design before the split, for comparison.

A packet arriving on an input port waits in that buffer for the traversal latency, then crosses
to an output port that leads to its destination GPU (round-robin over the ports with room in its
channel's queue, so traffic spreads over parallel links) and is queued for transmission. If every
eligible output queue is full the input channel blocks (head-of-line within that channel only)
until one drains; the credits it holds then stop the upstream sender's packets of that channel.
Assumption: the crossbar itself has enough internal speedup never to be the bottleneck (the
output links are).

Forwarding (system.switch.forwarding): `cut_through` starts a packet's traversal as soon as its
header flit has arrived (the output link cannot overtake the input: both run at link rate), and
the input buffer space is freed once the packet has crossed and its tail has arrived;
`store_and_forward` waits for the whole packet first (one packet serialisation more per hop). The
seeds' simulators use BookSim2's flit-level routers, which forward flits as they arrive (Jiang et
al., ISPASS 2013); NVIDIA does not publish NVSwitch's internals.

The link's arrival event is scheduled at (head or tail) arrival + traversal
(nvlink.channel_transmit): only then can the packet move, so the port handles it in that one
event, and an EV_XBAR event is needed only when packets queue behind a blocked head. `rxq_peak`
therefore counts packets waiting after their traversal (head-of-line queueing), not packets still
traversing. Fabrics are single level (every GPU link ends at a switch that has links to the other
GPUs), as in DGX/HGX H100 and GH200 NVL32.
"""
from ..engine.jit import compiled, inline
from ..engine.ring import ring_add, ring_next

from .nvlink import channel_count_arrival, credit_return_vc, input_free_tick, txq_push
from .link_room import hold_departures, pick_switch_output
from ..engine.events import SHORTCUT_IDLE_OUTPUT, timer_clear, timer_is_next
from ..engine import extension
from .packet import VC_REQUEST, VC_RESPONSE, packet_free, packet_vc
from .trace import CAT_SWITCH, TR_XBAR, trace_event
from .wakeups import xbar_kick
from ..config.keys import key_param
from ..declare import Block, Debug, Event, Param, Stat, StatGroup, Timer, fields
from .nvlink import RX_STATS, TX_STATS, _channels, channel_name
from .link_class import LINK_IB
from .nic import nic_admit
from ..topology import NODE_NIC, SWN_INDEX, SWN_KIND

EV_XBAR = 5          # a0 = channel: switch input port moves head packets across the crossbar


def check_inputs(sim, out):
    st = sim.state
    name = lambda c: channel_name(st, c)   # noqa: E731
    out.empty(st.ch.rxq_count, "switch input buffers not empty", name, " packet(s)")
    out.empty(st.ch.rsp_rxq_count, "switch response input buffers not empty", name, " packet(s)")


def switch_findings(sim):
    """Input ports blocked on full output queues (the stuck-run report)."""
    st = sim.state
    out = []
    for c in range(st.ch.shape[0]):
        ch = st.ch[c]
        if ch.rsp_xbar_blocked:
            dst = int(st.pk[int(st.rsp_rxq[c, int(ch.rsp_rxq_head)])].dst)
            out.append(f"{channel_name(st, c)}: switch response input blocked, every response "
                       f"queue toward GPU {dst} full ({int(ch.rsp_rxq_count)} response(s) buffered)")
        if ch.xbar_blocked:
            dst = int(st.pk[int(st.rxq[c, int(ch.rxq_head)])].dst)
            out.append(f"{channel_name(st, c)}: switch input blocked, every output queue toward "
                       f"GPU {dst} full ({int(ch.rxq_count)} packet(s) buffered)")
    return out


BLOCK = Block(
    "switch", __doc__.split("\n\n")[0],
    params=(
        Param("num_switches", "system.switch.count, system.nodes.count, system.switch.topology",
              "switches", "NVSwitch chips in the system "
              "(every node's; none with NVLink bridges)",
              lambda cfg: 0 if cfg.system.switch.topology == "bridge_pairs"
              else cfg.system.switch.count * cfg.system.nodes.count,
              "derived: system.switch.count x system.nodes.count, 0 with bridge_pairs"),
        key_param("cut_through", "system.switch.forwarding",
                  lambda cfg: int(cfg.system.switch.forwarding == "cut_through"), "bool",
                  "1: cut_through, 0: store_and_forward"),
        # the traversal itself is each forwarding node's (State.ch traversal, topology.py)
    ),
    # a switch port is the far end of a link: its input buffer lives on the link's up channel
    fields=fields("ch", ("rxq_head", "switch input buffer (ids in State.rxq)"), ("rxq_count", ""),
                  ("xbar_pending", "1: the input port's crossbar timer is armed"),
                  ("xbar_blocked", "1: the head packet waits for output-queue room"),
                  ("xbar_blocked_since", ""), ("rxq_peak", ""), ("xbar_blocked_ticks", ""),
                  # the response virtual channel's input buffer (ids in State.rsp_rxq)
                  ("rsp_rxq_head", ""), ("rsp_rxq_count", ""),
                  ("rsp_xbar_blocked", "1: the head response waits for response-queue room"),
                  ("rsp_xbar_blocked_since", ""), ("rsp_rxq_peak", ""),
                  ("rsp_xbar_blocked_ticks", "")),
    stats=(StatGroup("switch_port", "", RX_STATS + TX_STATS + (
        Stat("input_queue_peak", "packets", "peak packets waiting at the input after their "
             "traversal (head-of-line queueing behind a blocked head; packets still traversing "
             "hold credits only)", lambda i: i.rx.rxq_peak),
        Stat("input_blocked_ticks", "ps", "time the input's head packet waited for output-queue "
             "room", lambda i: i.rx.xbar_blocked_ticks),
        Stat("response_input_queue_peak", "packets", "peak responses waiting at the input's "
             "response channel after their traversal (system.nvlink.response_path: separate)",
             lambda i: i.rx.rsp_rxq_peak),
        Stat("response_input_blocked_ticks", "ps", "time the input's head response waited for "
             "response-queue room", lambda i: i.rx.rsp_xbar_blocked_ticks),
    )),),
    events=(Event("xbar", EV_XBAR, "a switch input port moves head packets across the crossbar"),),
    timers=(Timer("xbar", EV_XBAR, _channels,
                  "one per channel (used by channels into a forwarding node: its input ports)"),),
    checks=(check_inputs,),
    findings=(switch_findings,),
    debug=(Debug("Switch", CAT_SWITCH, (TR_XBAR,), describe={TR_XBAR: lambda n, c, out, dst: (
        f"system.switch{n.ch_switch[c]}.port{n.ch_port[c]}",
        f"packet for GPU {dst} crosses to port {n.ch_port[out]}")}),),
)


@inline
def switch_receive(st, c, pkt, tick):
    """A packet on up-channel c reached the switch and finished its traversal: queue it in its
    virtual channel's input buffer and move it across at once unless packets wait ahead of it.
    Returns the output channel whose transmitter the run loop runs next in this event (the
    idle_output shortcut), or -1."""
    channel_count_arrival(st, c, pkt)
    ch = st.ch[c]
    st.pk[pkt].ready = tick
    if extension.switch_absorb(st, c, pkt, tick):
        return -1  # a block took it in place (declare.Crossing arrival: NVLS's reduction data)
    out = -1
    if packet_vc(st, pkt) == VC_RESPONSE:
        st.rsp_rxq[c, ring_add(ch.rsp_rxq_head, ch.rsp_rxq_count, st.rsp_rxq.shape[1])] = pkt
        ch.rsp_rxq_count += 1
        if ch.rsp_rxq_count > ch.rsp_rxq_peak:
            ch.rsp_rxq_peak = ch.rsp_rxq_count
        if ch.rsp_rxq_count == 1 and not ch.rsp_xbar_blocked:
            out = _cross(st, c, VC_RESPONSE, tick)
    else:
        st.rxq[c, ring_add(ch.rxq_head, ch.rxq_count, st.rxq.shape[1])] = pkt
        ch.rxq_count += 1
        if ch.rxq_count > ch.rxq_peak:
            ch.rxq_peak = ch.rxq_count
        if ch.rxq_count == 1 and not ch.xbar_blocked:
            out = _cross(st, c, VC_REQUEST, tick)
    if (out >= 0 and st.p[0].shortcuts & SHORTCUT_IDLE_OUTPUT
            and st.sys[0].err_code == 0 and st.sys[0].trace_full == 0
            and timer_is_next(st, st.p[0].tm_ch_tx + out, tick)):
        # exact shortcut (docs/engine_order.md): the packet went to an idle output, whose
        # transmitter this arrival armed for now, and that transmitter is the next event (its
        # timer comes before every wire arrival's in the canonical order); this handler has
        # nothing left to do, so the run loop transmits in this event, as that event would
        timer_clear(st, st.p[0].tm_ch_tx + out)
        return out
    return -1


@compiled
def switch_crossbar(st, c, tick):
    """EV_XBAR: an output queue toward a blocked head packet's destination may have room again
    (responses first)."""
    ch = st.ch[c]
    ch.xbar_pending = 0
    if not ch.rsp_xbar_blocked:
        _cross(st, c, VC_RESPONSE, tick)
    if not ch.xbar_blocked:
        _cross(st, c, VC_REQUEST, tick)


@inline
def _cross(st, c, vc, tick):
    """Move head packets of input port c's virtual channel vc to their output queues while one
    has room. Returns the output channel of the last packet queued on a link (-1: none; the
    last one is what this call did last)."""
    p = st.p[0]
    ch = st.ch[c]
    last = -1
    while True:
        if vc == VC_RESPONSE:
            if ch.rsp_rxq_count == 0:
                return last
            pkt = st.rsp_rxq[c, ch.rsp_rxq_head]
        else:
            if ch.rxq_count == 0:
                return last
            pkt = st.rxq[c, ch.rxq_head]
        last = -1
        pk = st.pk[pkt]
        out = -1
        # a kind a block serves in the switch (declare.Crossing: multimem's engine, the CAIS merge
        # unit, the switch counters; the chain is generated, engine/extension.py), or one routed
        wait = extension.switch_serve(st, c, pkt, tick)
        if wait == extension.ROUTE:
            out = pick_switch_output(st, ch.switch, pk.dst, vc)
            wait = pk.dst if out < 0 else extension.SENT
        if wait != extension.SENT:
            # wait for room in an output toward GPU `wait` (or, wait < 0, in the reduction buffer
            # or merge table); the merge unit asks for a response-channel output toward GPU g
            # from a request input as num_gpus + g (responses always drain: no deadlock)
            ovc = vc
            if wait >= p.num_gpus:
                wait -= p.num_gpus
                ovc = VC_RESPONSE
            if vc == VC_RESPONSE:
                if not ch.rsp_xbar_blocked:
                    ch.rsp_xbar_blocked = 1
                    ch.rsp_xbar_blocked_since = tick
                    _wait_for_output(st, (ch.switch * p.num_gpus + wait) * 2 + ovc, c * 2 + vc)
            elif not ch.xbar_blocked:
                ch.xbar_blocked = 1
                ch.xbar_blocked_since = tick
                if wait >= 0:
                    _wait_for_output(st, (ch.switch * p.num_gpus + wait) * 2 + ovc, c * 2 + vc)
            return -1  # an output toward it that frees a slot in this channel wakes us
        if vc == VC_RESPONSE:
            ch.rsp_rxq_head = ring_next(ch.rsp_rxq_head, st.rsp_rxq.shape[1])
            ch.rsp_rxq_count -= 1
        else:
            ch.rxq_head = ring_next(ch.rxq_head, st.rxq.shape[1])
            ch.rxq_count -= 1
        # the buffer space is free once the packet has left it: now, or (cut-through) when its
        # tail has come in, one serialisation after its header
        credit_return_vc(st, c, pk.flits, input_free_tick(st, c, pkt, tick) + ch.latency, vc)
        if out < 0:
            packet_free(st, pkt)   # a multimem packet the engine has served
            continue
        pk.ready = tick
        nic = st.sw_node[ch.switch, SWN_KIND] == NODE_NIC
        if nic:
            # the NIC's RDMA engine (nic.py): work requests toward InfiniBand
            nic_admit(st, ch.switch, st.sw_node[ch.switch, SWN_INDEX],
                      st.ch[out].link_class == LINK_IB, pkt, tick)
        trace_event(st, CAT_SWITCH, TR_XBAR, c, out, pk.dst, tick)
        txq_push(st, out, pkt, tick)
        if not nic:
            last = out


@compiled
def _wait_for_output(st, w, cv):
    """Input port c's channel v (cv = c * 2 + v) waits for room in an output toward one
    destination in one virtual channel (wait list w = (switch * GPUs + destination) * 2 + vc), in
    arrival order."""
    cap = st.sw_wait.shape[1] - 2
    st.sw_wait[w, 2 + ring_add(st.sw_wait[w, 0], st.sw_wait[w, 1], cap)] = cv
    st.sw_wait[w, 1] += 1
    hold_departures(st, w)      # an output's packet sent ahead frees its slot at its own tick
