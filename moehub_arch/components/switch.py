"""NVSwitch: a crossbar with input buffers, per-port output queues and routing by destination GPU.

A packet arriving on an input port waits in that port's buffer (whose size is the link's credit
count) for the traversal latency, then crosses to an output port that leads to its destination GPU
(round-robin over the ports with room, so traffic spreads over parallel links) and is queued for
transmission. If every eligible output queue is full the input port blocks (head-of-line) until one
drains; the credits it holds then stop the upstream sender. Assumption: the crossbar itself has
enough internal speedup never to be the bottleneck (the output links are).
Fabrics are single level (every GPU link ends at a switch that has links to the other GPUs), as in
DGX/HGX H100 and GH200 NVL32.
"""
from ..engine.jit import compiled

from ..engine.events import EV_CREDIT, push
from ..engine.state import ROUTE_FIRST, ROUTE_N, ROUTE_RR
from .nvlink import channel_count_arrival, txq_push
from .trace import CAT_SWITCH, TR_XBAR, trace_event
from .wakeups import xbar_kick


@compiled
def switch_receive(st, c, pkt, tick):
    """A packet reached the switch end of up-channel c: buffer it at the input port."""
    channel_count_arrival(st, c, pkt)
    ch = st.ch[c]
    st.rxq[c, (ch.rxq_head + ch.rxq_count) % st.rxq.shape[1]] = pkt
    ch.rxq_count += 1
    if ch.rxq_count > ch.rxq_peak:
        ch.rxq_peak = ch.rxq_count
    pk = st.pk[pkt]
    pk.ready = tick + st.p[0].switch_traversal_ticks
    if ch.rxq_count == 1 and not ch.xbar_blocked:
        xbar_kick(st, c, pk.ready)


@compiled
def switch_crossbar(st, c, tick):
    """EV_XBAR: move ready head packets of input port c to their output queues."""
    p = st.p[0]
    ch = st.ch[c]
    ch.xbar_pending = 0
    rc = st.rxq.shape[1]
    while ch.rxq_count > 0:
        pkt = st.rxq[c, ch.rxq_head]
        pk = st.pk[pkt]
        if pk.ready > tick:
            xbar_kick(st, c, pk.ready)
            return
        route = st.sw_routes[ch.switch * p.num_gpus + pk.dst]
        n = route[ROUTE_N]
        out = -1
        for k in range(n):
            cand = route[ROUTE_FIRST + (route[ROUTE_RR] + k) % n]
            if st.ch[cand].txq_count < st.ch[cand].txq_cap:
                out = cand
                route[ROUTE_RR] = (route[ROUTE_RR] + k + 1) % n
                break
        if out < 0:
            ch.xbar_blocked = 1
            ch.xbar_blocked_since = tick
            return  # an output channel's dequeue wakes us
        ch.rxq_head = (ch.rxq_head + 1) % rc
        ch.rxq_count -= 1
        push(st, tick + p.link_latency_ticks, EV_CREDIT, c, pk.flits)
        pk.ready = tick
        trace_event(st, CAT_SWITCH, TR_XBAR, c, out, pk.dst, tick)
        txq_push(st, out, pkt, tick)
