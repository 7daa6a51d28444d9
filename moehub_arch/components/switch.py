"""NVSwitch: a crossbar with input buffers, per-port output queues and routing by destination GPU.

A packet arriving on an input port waits in that port's buffer (whose size is the link's credit
count) for the traversal latency, then crosses to an output port that leads to its destination GPU
(round-robin over the ports with room, so traffic spreads over parallel links) and is queued for
transmission. If every eligible output queue is full the input port blocks (head-of-line) until one
drains; the credits it holds then stop the upstream sender. Assumption: the crossbar itself has
enough internal speedup never to be the bottleneck (the output links are).
The link's arrival event is scheduled at arrival + traversal (nvlink.channel_transmit): only then
can the packet move, so the port handles it in that one event, and an EV_XBAR event is needed only
when packets queue behind a blocked head. `rxq_peak` therefore counts packets waiting after their
traversal (head-of-line queueing), not packets still traversing.
Fabrics are single level (every GPU link ends at a switch that has links to the other GPUs), as in
DGX/HGX H100 and GH200 NVL32.
"""
from ..engine.jit import compiled, inline

from ..engine.state import ROUTE_FIRST, ROUTE_N, ROUTE_RR
from .nvlink import channel_count_arrival, credit_return, txq_push
from .trace import CAT_SWITCH, TR_XBAR, trace_event
from .wakeups import xbar_kick
from .block import Block, Debug, Event, Param, Stat, StatGroup, Timer, fields
from .nvlink import RX_STATS, TX_STATS, channel_name

EV_XBAR = 5          # a0 = channel: switch input port moves head packets across the crossbar


def check_inputs(sim, out):
    st = sim.state
    out.empty(st.ch.rxq_count, "switch input buffers not empty", lambda c: channel_name(st, c),
              " packet(s)")


def switch_findings(sim):
    """Input ports blocked on full output queues (the stuck-run report)."""
    st = sim.state
    out = []
    for c in range(st.ch.shape[0]):
        ch = st.ch[c]
        if ch.xbar_blocked:
            dst = int(st.pk[int(st.rxq[c, int(ch.rxq_head)])].dst)
            out.append(f"{channel_name(st, c)}: switch input blocked, every output queue toward "
                       f"GPU {dst} full ({int(ch.rxq_count)} packet(s) buffered)")
    return out


BLOCK = Block(
    "switch", __doc__.split("\n\n")[0],
    params=(
        Param("num_switches", "system.switch.count", "switches", "NVSwitches",
              lambda cfg: cfg.system.switch.count, "config: system.switch.count"),
        Param("switch_traversal_ticks", "system.switch.traversal_latency", "ps",
              "input-to-output traversal", lambda cfg: cfg.system.switch.traversal_latency,
              "config: system.switch.traversal_latency"),
    ),
    # a switch port is the far end of a link: its input buffer lives on the link's up channel
    fields=fields("ch", ("rxq_head", "switch input buffer (ids in State.rxq)"), ("rxq_count", ""),
                  ("xbar_pending", "1: the input port's crossbar timer is armed"),
                  ("xbar_blocked", "1: the head packet waits for output-queue room"),
                  ("xbar_blocked_since", ""), ("rxq_peak", ""), ("xbar_blocked_ticks", "")),
    stats=(StatGroup("switch_port", "", RX_STATS + TX_STATS + (
        Stat("input_queue_peak", "packets", "peak packets waiting at the input after their "
             "traversal (head-of-line queueing behind a blocked head; packets still traversing "
             "hold credits only)", lambda i: i.rx.rxq_peak),
        Stat("input_blocked_ticks", "ps", "time the input's head packet waited for output-queue "
             "room", lambda i: i.rx.xbar_blocked_ticks),
    )),),
    events=(Event("xbar", EV_XBAR, "a switch input port moves head packets across the crossbar"),),
    timers=(Timer("xbar", EV_XBAR, lambda cfg: 2 * cfg.system.num_gpus * cfg.system.nvlink.links_per_gpu,
                  "one per channel (used by up channels: the switch input ports)"),),
    checks=(check_inputs,),
    findings=(switch_findings,),
    debug=(Debug("Switch", CAT_SWITCH, (TR_XBAR,), describe={TR_XBAR: lambda n, c, out, dst: (
        f"system.switch{n.ch_switch[c]}.port{n.ch_port[c]}",
        f"packet for GPU {dst} crosses to port {n.ch_port[out]}")}),),
)


@inline
def switch_receive(st, c, pkt, tick):
    """A packet on up-channel c reached the switch and finished its traversal: queue it at the
    input port and move it across at once unless packets wait ahead of it."""
    channel_count_arrival(st, c, pkt)
    ch = st.ch[c]
    st.rxq[c, (ch.rxq_head + ch.rxq_count) % st.rxq.shape[1]] = pkt
    ch.rxq_count += 1
    if ch.rxq_count > ch.rxq_peak:
        ch.rxq_peak = ch.rxq_count
    st.pk[pkt].ready = tick
    if ch.rxq_count == 1 and not ch.xbar_blocked:
        _cross(st, c, tick)


@compiled
def switch_crossbar(st, c, tick):
    """EV_XBAR: an output queue toward the head packet's destination may have room again."""
    st.ch[c].xbar_pending = 0
    _cross(st, c, tick)


@inline
def _cross(st, c, tick):
    """Move head packets of input port c to their output queues while one has room."""
    p = st.p[0]
    ch = st.ch[c]
    rc = st.rxq.shape[1]
    while ch.rxq_count > 0:
        pkt = st.rxq[c, ch.rxq_head]
        pk = st.pk[pkt]
        route = st.sw_routes[ch.switch * p.num_gpus + pk.dst]
        n = route[ROUTE_N]
        out = -1
        for k in range(n):
            cand = route[ROUTE_FIRST + (route[ROUTE_RR] + k) % n]
            if st.ch[cand].txq_pkts + p.packet_train <= st.ch[cand].txq_cap:
                out = cand
                route[ROUTE_RR] = (route[ROUTE_RR] + k + 1) % n
                break
        if out < 0:
            if not ch.xbar_blocked:
                ch.xbar_blocked = 1
                ch.xbar_blocked_since = tick
                _wait_for_output(st, ch.switch * p.num_gpus + pk.dst, c)
            return  # an output toward pk.dst that frees a slot wakes us
        ch.rxq_head = (ch.rxq_head + 1) % rc
        ch.rxq_count -= 1
        credit_return(st, c, pk.flits, tick + p.link_latency_ticks)
        pk.ready = tick
        trace_event(st, CAT_SWITCH, TR_XBAR, c, out, pk.dst, tick)
        txq_push(st, out, pkt, tick)


@compiled
def _wait_for_output(st, w, c):
    """Input port c waits for room in an output toward one destination (wait list w = switch *
    GPUs + destination), in arrival order."""
    cap = st.sw_wait.shape[1] - 2
    st.sw_wait[w, 2 + (st.sw_wait[w, 0] + st.sw_wait[w, 1]) % cap] = c
    st.sw_wait[w, 1] += 1

