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

from ..engine.state import ROUTE_FIRST, ROUTE_N, ROUTE_RR
from .nvlink import (channel_count_arrival, credit_return_vc, header_serialisation,
                     packet_serialisation, txq_push, txq_room)
from .packet import VC_REQUEST, VC_RESPONSE, packet_vc
from .trace import CAT_SWITCH, TR_XBAR, trace_event
from .wakeups import xbar_kick


@inline
def switch_receive(st, c, pkt, tick):
    """A packet on up-channel c reached the switch and finished its traversal: queue it in its
    virtual channel's input buffer and move it across at once unless packets wait ahead of it."""
    channel_count_arrival(st, c, pkt)
    ch = st.ch[c]
    st.pk[pkt].ready = tick
    if packet_vc(st, pkt) == VC_RESPONSE:
        st.rsp_rxq[c, (ch.rsp_rxq_head + ch.rsp_rxq_count) % st.rsp_rxq.shape[1]] = pkt
        ch.rsp_rxq_count += 1
        if ch.rsp_rxq_count > ch.rsp_rxq_peak:
            ch.rsp_rxq_peak = ch.rsp_rxq_count
        if ch.rsp_rxq_count == 1 and not ch.rsp_xbar_blocked:
            _cross(st, c, VC_RESPONSE, tick)
    else:
        st.rxq[c, (ch.rxq_head + ch.rxq_count) % st.rxq.shape[1]] = pkt
        ch.rxq_count += 1
        if ch.rxq_count > ch.rxq_peak:
            ch.rxq_peak = ch.rxq_count
        if ch.rxq_count == 1 and not ch.xbar_blocked:
            _cross(st, c, VC_REQUEST, tick)


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
    has room."""
    p = st.p[0]
    ch = st.ch[c]
    while True:
        if vc == VC_RESPONSE:
            if ch.rsp_rxq_count == 0:
                return
            pkt = st.rsp_rxq[c, ch.rsp_rxq_head]
        else:
            if ch.rxq_count == 0:
                return
            pkt = st.rxq[c, ch.rxq_head]
        pk = st.pk[pkt]
        route = st.sw_routes[ch.switch * p.num_gpus + pk.dst]
        n = route[ROUTE_N]
        out = -1
        for k in range(n):
            cand = route[ROUTE_FIRST + (route[ROUTE_RR] + k) % n]
            if txq_room(st, cand, vc):
                out = cand
                route[ROUTE_RR] = (route[ROUTE_RR] + k + 1) % n
                break
        if out < 0:
            if vc == VC_RESPONSE:
                if not ch.rsp_xbar_blocked:
                    ch.rsp_xbar_blocked = 1
                    ch.rsp_xbar_blocked_since = tick
                    _wait_for_output(st, (ch.switch * p.num_gpus + pk.dst) * 2 + vc, c)
            elif not ch.xbar_blocked:
                ch.xbar_blocked = 1
                ch.xbar_blocked_since = tick
                _wait_for_output(st, (ch.switch * p.num_gpus + pk.dst) * 2 + vc, c)
            return  # an output toward pk.dst that frees a slot in this channel wakes us
        if vc == VC_RESPONSE:
            ch.rsp_rxq_head = (ch.rsp_rxq_head + 1) % st.rsp_rxq.shape[1]
            ch.rsp_rxq_count -= 1
        else:
            ch.rxq_head = (ch.rxq_head + 1) % st.rxq.shape[1]
            ch.rxq_count -= 1
        # the buffer space is free once the packet has left it: now, or (cut-through) when its
        # tail has come in, one serialisation after its header
        freed = tick
        if p.cut_through:
            tail = (pk.ready - p.switch_traversal_ticks + packet_serialisation(st, pkt)
                    - header_serialisation(st))
            if tail > freed:
                freed = tail
        credit_return_vc(st, c, pk.flits, freed + p.link_latency_ticks, vc)
        pk.ready = tick
        trace_event(st, CAT_SWITCH, TR_XBAR, c, out, pk.dst, tick)
        txq_push(st, out, pkt, tick)


@compiled
def _wait_for_output(st, w, c):
    """Input port c waits for room in an output toward one destination in one virtual channel
    (wait list w = (switch * GPUs + destination) * 2 + vc), in arrival order."""
    cap = st.sw_wait.shape[1] - 2
    st.sw_wait[w, 2 + (st.sw_wait[w, 0] + st.sw_wait[w, 1]) % cap] = c
    st.sw_wait[w, 1] += 1
