"""Wake-up helpers: schedule a block's next activation without duplicate events.

Following Akita's "smart ticking", an idle block schedules nothing; whoever gives it work calls its
kick/wake function here. Each block has one component timer (engine.events) and records the tick
it is set for, so a second kick for a later or equal tick costs nothing and an earlier one moves
the timer (no stale event is left behind).
"""
from ..engine.jit import compiled
from ..engine.ring import ring_next

from ..engine.clock import align_up
from ..engine.events import SHORTCUT_TX_WAKE, timer_set
from ..engine.state import TB_READY
from .trace import TR_TB_RESUME, trace_tb


@compiled
def sm_wake(st, sm, tick):
    """Make SM `sm` consider issuing at the first cycle edge at or after `tick`."""
    t = align_up(tick, st.p[0].sm_period_fs)
    s = st.sm[sm]
    if s.next_issue < 0 or t < s.next_issue:
        s.next_issue = t
        timer_set(st, sm, t)


@compiled
def tb_resume(st, slot, tick, reason):
    """A waiting thread block becomes ready at `tick`; account its wait time under `reason`."""
    sm = slot // st.p[0].slots_per_sm
    tb = st.tb[slot]
    st.sm_wait[sm, reason] += tick - tb.wait_start
    tb.state = TB_READY
    tb.progress = tick   # what it waited for (memory, the hub, a link) arrived: progress
    if tick > tb.ready:
        tb.ready = tick
    trace_tb(st, slot, TR_TB_RESUME, reason, 0, tb.ready)
    sm_wake(st, sm, tb.ready)


@compiled
def hub_kick(st, g, tick):
    """Ask GPU g's hub packetizer to run at `tick` (unless it waits for link queue space)."""
    gp = st.gpu[g]
    if gp.hub_blocked:
        return
    if gp.hub_next_tx < 0 or tick < gp.hub_next_tx:
        gp.hub_next_tx = tick
        timer_set(st, st.p[0].tm_hub + g, tick)


@compiled
def hub_kick_response(st, g, tick):
    """Ask GPU g's hub to send a response at `tick`. With separate response channels a hub
    whose requests wait for link queue room (hub_blocked) still sends responses: they do not
    wait behind requests."""
    gp = st.gpu[g]
    if gp.hub_blocked and not st.p[0].response_vc:
        return
    if gp.hub_next_tx < 0 or tick < gp.hub_next_tx:
        gp.hub_next_tx = tick
        timer_set(st, st.p[0].tm_hub + g, tick)


@compiled
def rpm_kick(st, g, tick):
    """Ask GPU g's MoE-Hub RPM packetizer to run at `tick` (unless it waits for link queue room)."""
    gp = st.gpu[g]
    if gp.rpm_blocked:
        return
    if gp.rpm_next_tx < 0 or tick < gp.rpm_next_tx:
        gp.rpm_next_tx = tick
        timer_set(st, st.p[0].tm_rpm + g, tick)


@compiled
def ch_kick(st, c, tick):
    """Ask channel c's transmitter to look at its queue at `tick` (or when it is next free); an
    earlier request supersedes a later one."""
    ch = st.ch[c]
    t = tick
    if ch.busy_until > t:
        t = ch.busy_until
    if st.p[0].shortcuts & SHORTCUT_TX_WAKE and (ch.txq_count > 0 or ch.rsq_count > 0):
        # exact shortcut (docs/engine_order.md): if no head packet is ready by t, the look at t
        # would find nothing to send and only set the timer for the earliest head's ready tick
        # (a head's ready tick does not change while it is the head; credits are not looked at
        # before a head is ready)
        ready = ch.rsq_ready if ch.rsq_count > 0 else ch.txq_ready
        if ch.txq_count > 0 and ch.txq_ready < ready:
            ready = ch.txq_ready
        if ready > t:
            t = ready
    if ch.tx_at < 0 or t < ch.tx_at:
        ch.tx_at = t
        timer_set(st, st.p[0].tm_ch_tx + c, t)


@compiled
def xbar_kick(st, c, tick):
    """Ask the switch input port fed by channel c to move its head packet at `tick`."""
    ch = st.ch[c]
    if ch.xbar_pending:
        return
    ch.xbar_pending = 1
    timer_set(st, st.p[0].tm_xbar + c, tick)


@compiled
def unblock_request_port(st, c, tick):
    """The switch input port fed by channel c stops waiting (for an output slot, a reduction or
    merge entry, a sync group): its blocked time is counted and its head packet tries again."""
    ch = st.ch[c]
    ch.xbar_blocked = 0
    ch.xbar_blocked_ticks += tick - ch.xbar_blocked_since
    xbar_kick(st, c, tick)


@compiled
def switch_output_freed(st, s, dst, vc, tick):
    """An output queue of switch s toward GPU dst has a free slot in virtual channel vc: the
    output arbiter grants it to the input port that has waited longest for that destination and
    channel (switch._wait_for_output); one slot, one grant, so blocked inputs are not all woken
    to compete for it."""
    w = (s * st.p[0].num_gpus + dst) * 2 + vc
    if st.sw_wait[w, 1] == 0:
        return
    cap = st.sw_wait.shape[1] - 2
    cv = st.sw_wait[w, 2 + st.sw_wait[w, 0]]   # input channel x 2 + its virtual channel
    cin = cv // 2
    st.sw_wait[w, 0] = ring_next(st.sw_wait[w, 0], cap)
    st.sw_wait[w, 1] -= 1
    if cv % 2 == 1:
        inp = st.ch[cin]
        inp.rsp_xbar_blocked = 0
        inp.rsp_xbar_blocked_ticks += tick - inp.rsp_xbar_blocked_since
        xbar_kick(st, cin, tick)
    else:
        unblock_request_port(st, cin, tick)
