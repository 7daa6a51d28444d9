"""A link transmit FIFO's room, and the departure of a packet sent ahead of its turn.

Whoever fills a channel's transmit FIFO asks it for room first: a GPU's hub and MoE-Hub RPM
packetizers (hub.pick_channel_vc), the NIC (nic._path_room), the CAIS, NVLS and switch-counter
senders, a switch input (pick_switch_output); the occupancy monitor reads a GPU's link backlog.
A slot frees when the transmitter sends the FIFO's head, and the one waiting for it is woken then
(link_slot_freed): a switch input (the output arbiter's grant), a forwarding node's input (fabric
links), or a GPU's hub and RPM packetizers, which wait for room on any of their GPU's links.

The exact shortcut back_to_back (nvlink.send_ahead; docs/engine_order.md) sends a link's next
packets in the transmit event that starts the one before them, so each leaves its FIFO at a
later *departure tick* than the event that sent it. The packets sent ahead wait in a small ring
per channel (State.ahead, oldest first; their departure ticks increase along it) and depart in
that order. Until its departure a packet's slot stays counted, and
everyone who reads the FIFO's room goes through this module (`txq_room`, `txq_settle`), which
lets the packet depart once the reference path's transmit at the departure tick would have run:
at a later tick, or at that tick after the transmitter's timer in the canonical order (an event
whose timer row comes after it; a heap event or an SM's issue comes before). Whoever starts
waiting for room before a departure tick sets the link's transmitter to look at that tick again
(`hold_departures` for a switch input, `hold_gpu_departures` for a hub or RPM), so that the
departure frees the slot and wakes the waiter exactly when the reference path does.
"""
from ..engine.jit import compiled, inline
from ..engine.ring import ring_add, ring_next

from ..engine.events import timer_set
from ..engine.state import ROUTE_FIRST, ROUTE_N, ROUTE_RR
from .packet import VC_RESPONSE
from .wakeups import hub_kick, rpm_kick, switch_output_freed

# the ring of packets a channel sent ahead (State.ahead[channel, entry]; ch.ahead_head is the
# oldest, ch.ahead_count how many, ch.ahead_at the oldest's departure tick): at most AHEAD_RING
# (an engine bound, no model parameter: any length gives the same results); columns: the packet,
# its departure tick, virtual channel, link packets (its FIFO slot is counted until it
# departs), its wire bytes from its previous hop, AHEAD_YIELDS | AHEAD_EARLY (nvlink.py), and
# vc_last before it was sent (both restored if it is taken back); padded to a cache line
AHEAD_RING = 8
A_PKT, A_AT, A_VC, A_NPK, A_WIRE, A_YIELDS, A_VC_LAST = range(7)
AHEAD_COLUMNS = 8


@inline
def ahead_departed(st, c):
    """Whether channel c's oldest packet sent ahead has left its FIFO by the current event: its
    departure tick is past, or is now and the current tick has already run a timer that comes
    after channel c's transmitter (engine/events.py q_row; the loop keeps the largest)."""
    ch = st.ch[c]
    sy = st.sys[0]
    return ch.ahead_at < sy.q_now or (ch.ahead_at == sy.q_now and sy.q_row_at == sy.q_now
                                      and sy.q_row > st.p[0].tm_ch_tx + c)


@inline
def txq_settle(st, c):
    """Apply the departures of channel c's packets sent ahead that have left by now (before its
    FIFO's room or backlog is read)."""
    while st.ch[c].ahead_count > 0 and ahead_departed(st, c):
        depart_ahead(st, c)


@inline
def txq_room(st, c, vc):
    """Whether channel c's transmit FIFO of virtual channel vc has room for a packet (or train)."""
    txq_settle(st, c)
    ch = st.ch[c]
    if vc == VC_RESPONSE:
        return ch.rsq_pkts + st.p[0].packet_train <= ch.rsq_cap
    return ch.txq_pkts + st.p[0].packet_train <= ch.txq_cap


@compiled
def pick_switch_output(st, s, dst, vc):
    """Round-robin over switch s's output ports toward GPU dst that have room in virtual channel
    vc (so traffic spreads over parallel links); the pointer moves past the one chosen. -1 if
    none has room."""
    route = st.sw_routes[s * st.p[0].num_gpus + dst]
    n = route[ROUTE_N]
    for k in range(n):
        cand = route[ROUTE_FIRST + ring_add(route[ROUTE_RR], k, n)]
        if txq_room(st, cand, vc):
            route[ROUTE_RR] = ring_add(route[ROUTE_RR], k + 1, n)
            return cand
    return -1


@compiled
def fabric_output_freed(st, c, vc, tick):
    """A slot freed in the transmit queue of channel c, which leaves forwarding node
    ch.src_switch toward another forwarding node: grant it to an input waiting for any destination
    the channel leads to (switch.py wait lists are per destination GPU)."""
    s = st.ch[c].src_switch
    row = st.fabric_dests[c]   # those destinations, in GPU order (fabric.fill_fabric_destinations)
    for k in range(row[0]):
        switch_output_freed(st, s, row[1 + k], vc, tick)


@inline
def link_slot_freed(st, c, vc, tick):
    """A packet left channel c's transmit FIFO of virtual channel vc at `tick`: wake whoever
    waits to fill it."""
    ch = st.ch[c]
    if ch.to_switch and ch.src_switch >= 0:
        fabric_output_freed(st, c, vc, tick)   # between two forwarding nodes (fabric.py)
    elif ch.to_switch:
        # a GPU's own link: its hub and RPM packetizers wait for room on any of its links
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
        switch_output_freed(st, ch.switch, ch.gpu, vc, tick)


@compiled
def depart_ahead(st, c):
    """The oldest packet channel c sent ahead has left its FIFO (at ch.ahead_at, now or earlier):
    its slot is free, and whoever waits for it is woken (at ahead_at: if one waits, this runs in
    the transmitter's look at that tick, set by hold_departures or hold_gpu_departures)."""
    ch = st.ch[c]
    row = st.ahead[c, ch.ahead_head]
    at, vc = row[A_AT], row[A_VC]
    if vc == VC_RESPONSE:
        ch.rsq_pkts -= row[A_NPK]
    else:
        ch.txq_pkts -= row[A_NPK]
    ch.ahead_head = ring_next(ch.ahead_head, AHEAD_RING)
    ch.ahead_count -= 1
    if ch.ahead_count > 0:
        ch.ahead_at = st.ahead[c, ch.ahead_head, A_AT]
    elif ch.to_switch:
        st.gpu[ch.gpu].ahead_links &= ~(1 << ((c // 2) % st.p[0].links_per_gpu))
    link_slot_freed(st, c, vc, at)
    hold_for_waiters(st, c)


@compiled
def hold_for_waiters(st, c):
    """Switch output c after a departure, with packets still sent ahead: each departure grants
    one waiting input (link_slot_freed), so if inputs still wait for room in a virtual channel
    of one of them, the transmitter looks again at that one's departure tick (hold_departures
    held only the first). A GPU's own link needs none: a departure wakes its hub and RPM both."""
    ch = st.ch[c]
    if ch.to_switch or ch.ahead_count == 0:
        return
    base = (ch.switch * st.p[0].num_gpus + ch.gpu) * 2
    for i in range(ch.ahead_count):
        row = ring_add(ch.ahead_head, i, AHEAD_RING)
        if st.sw_wait[base + st.ahead[c, row, A_VC], 1] > 0:
            _hold(st, c, st.ahead[c, row, A_AT])
            return


@inline
def _hold(st, c, at):
    """Channel c's transmitter looks again at `at`, a departure tick of a packet it sent ahead."""
    ch = st.ch[c]
    if ch.tx_at < 0 or at < ch.tx_at:
        ch.tx_at = at
        timer_set(st, st.p[0].tm_ch_tx + c, at)


@compiled
def hold_departures(st, w):
    """A switch input starts waiting for room in an output toward one GPU in one virtual
    channel (switch.py wait list w = (switch * GPUs + GPU) * 2 + vc): a packet sent ahead on
    such an output frees its slot at its departure tick, where the input must be woken; its
    transmitter looks at the first such tick again (and depart_ahead runs there)."""
    route = st.sw_routes[w // 2]
    for k in range(route[ROUTE_N]):
        o = route[ROUTE_FIRST + k]
        ch = st.ch[o]
        for i in range(ch.ahead_count):
            row = ring_add(ch.ahead_head, i, AHEAD_RING)
            if st.ahead[o, row, A_VC] == w % 2:
                _hold(st, o, st.ahead[o, row, A_AT])
                break


@compiled
def hold_gpu_departures(st, g):
    """GPU g's hub or RPM packetizer is about to wait for transmit-queue room (any slot freed on
    one of its links wakes it, link_slot_freed): the packets sent ahead on its links that have
    left by now depart first (they freed their slots before the wait began), and each link with
    one still ahead looks again at the oldest's departure tick, where the packetizer must be
    woken."""
    links = st.gpu[g].ahead_links   # (the links' records are read only where one is ahead)
    if links == 0:
        return
    L = st.p[0].links_per_gpu
    for l in range(L):
        c = 2 * (g * L + l)   # the GPU->switch channel of link l (nvlink.py)
        if links >> l & 1:
            txq_settle(st, c)
            if st.ch[c].ahead_count > 0:
                _hold(st, c, st.ch[c].ahead_at)
