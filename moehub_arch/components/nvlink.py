"""NVLink: unidirectional channels with serialisation, latency and credit-based flow control.

Each link is two channels (GPU->switch and switch->GPU). A channel transmits the packet at the head
of its FIFO when (1) the wire is free, (2) the packet is ready, and (3) it holds enough credits for
the packet's flits. Serialisation takes flits * flit_bytes / bandwidth; the packet's tail reaches
the receiver one link latency later (store-and-forward at every hop). Credits are the receiver's
buffer space in flits; the receiver returns them (after one link latency) when the packet leaves its
buffer, so a slow receiver throttles the sender and nothing is ever dropped. Assumption: credits
travel in reverse-direction link-layer control words and cost no data bandwidth.
"""
from ..engine.jit import compiled

from ..engine.clock import bytes_ticks
from ..engine.events import EV_CH_ARRIVE, push
from .trace import CAT_NVLINK, TR_LINK_TX, trace_event
from .wakeups import ch_kick, hub_kick, rpm_kick, xbar_kick


@compiled
def txq_push(st, c, pkt, tick):
    ch = st.ch[c]
    st.txq[c, (ch.txq_head + ch.txq_count) % ch.txq_cap] = pkt
    ch.txq_count += 1
    if ch.txq_count > ch.txq_peak:
        ch.txq_peak = ch.txq_count
    ch_kick(st, c, tick)


@compiled
def channel_transmit(st, c, tick):
    """EV_CH_TX: send the head packet if wire, packet and credits allow."""
    p = st.p[0]
    ch = st.ch[c]
    ch.tx_pending = 0
    if ch.txq_count == 0:
        return
    if ch.busy_until > tick:
        ch_kick(st, c, ch.busy_until)
        return
    pkt = st.txq[c, ch.txq_head]
    pk = st.pk[pkt]
    if pk.ready > tick:
        ch_kick(st, c, pk.ready)
        return
    if ch.credits < pk.flits:
        if not ch.credit_blocked:
            ch.credit_blocked = 1
            ch.credit_blocked_since = tick
        return  # the next EV_CREDIT kicks us
    # transmit
    ch.txq_head = (ch.txq_head + 1) % ch.txq_cap
    ch.txq_count -= 1
    ch.credits -= pk.flits
    wire = pk.flits * p.flit_bytes
    ser = bytes_ticks(wire, p.link_fs_per_byte)
    ch.busy_until = tick + ser
    ch.tx_packets += 1
    ch.tx_wire_bytes += wire
    ch.tx_payload_bytes += pk.payload
    ch.tx_busy += ser
    push(st, tick + ser + p.link_latency_ticks, EV_CH_ARRIVE, pkt, c)
    trace_event(st, CAT_NVLINK, TR_LINK_TX, c, pk.kind, pk.payload, tick)
    # a slot freed in this FIFO: wake whoever waits to fill it
    if ch.to_switch:
        gp = st.gpu[ch.gpu]
        if gp.hub_blocked:
            gp.hub_blocked = 0
            gp.hub_stall_ticks += tick - gp.hub_blocked_since
            hub_kick(st, ch.gpu, tick)
        if gp.rpm_blocked:
            gp.rpm_blocked = 0
            gp.rpm_stall_ticks += tick - gp.rpm_blocked_since
            rpm_kick(st, ch.gpu, tick)
    else:
        s = ch.switch
        for k in range(st.sw_inputs[s, 0]):
            cin = st.sw_inputs[s, 1 + k]
            inp = st.ch[cin]
            if inp.xbar_blocked:
                inp.xbar_blocked = 0
                inp.xbar_blocked_ticks += tick - inp.xbar_blocked_since
                xbar_kick(st, cin, tick)
    if ch.txq_count > 0:
        ch_kick(st, c, tick + ser)


@compiled
def channel_credit(st, c, flits, tick):
    """EV_CREDIT: the receiver freed `flits` of buffer space."""
    ch = st.ch[c]
    ch.credits += flits
    if ch.credit_blocked:
        ch.credit_blocked = 0
        ch.credit_stall += tick - ch.credit_blocked_since
        ch_kick(st, c, tick)


@compiled
def channel_count_arrival(st, c, pkt):
    ch = st.ch[c]
    pk = st.pk[pkt]
    ch.rx_packets += 1
    ch.rx_wire_bytes += pk.flits * st.p[0].flit_bytes
    ch.rx_payload_bytes += pk.payload
