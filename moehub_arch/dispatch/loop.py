"""The one compiled run loop (DESIGN rule 1): pop the earliest event, dispatch it by integer kind.

The loop runs at most ``max_events`` events per call and then returns to Python, which reports
progress, grows the event queue if needed and calls again; all state stays in arrays, so a call
boundary changes nothing. It also returns when the queue is empty (done or deadlocked) or when a
handler recorded a runtime error.

Event kinds and component timers are declared by the blocks (components/*.py BLOCK: Event,
Timer; composed in moehub_arch/composition.py). Which timer is which event, which block receives
a packet at a GPU and which sends the request at a hub FIFO's head are generated from the
declarations (dispatch/chains.py: timer_event, receive_packet, send_request); the dispatch by
event kind below maps each kind to its handler: a block with an event of its own adds its branch
here (DESIGN rule 5), unless the block is compiled on demand (declare.Block.on_demand), whose
events the generated `block_event` dispatches through the entry table.
"""
from .chains import block_event, receive_packet, send_request, timer_event
from .indirect import ENTRY_AAU_RECEIVE, ENTRY_AAU_RETRY, ENTRY_SM_ISSUE
from ..engine.entries import call_void2, call_void4, install
from ..engine.jit import compiled

from ..components.hub import EV_HUB_TX, hub_packetize
from ..components.moehub.forward import EV_HUB_FORWARD, forward_run
from ..components.moehub.dam import EV_DAM_READY, dam_tile_ready
from ..components.moehub.rpm import EV_MOE_LOOPBACK, EV_RPM_TX, rpm_packetize
from ..components.nvlink import (EV_CH_ARRIVE, EV_CH_TX, channel_arrival, channel_transmit,
                                  prefetch_arrival, prefetch_transmit)
from ..components.scheduler import EV_KERNEL_START, kernel_start
from ..components.sm import EV_SM_ISSUE, prefetch_issue
from ..components.sm_interpreter import EV_LOCAL_DONE, local_done
from ..components.occupancy import EV_OCCUPANCY_SAMPLE, occupancy_sample
from ..components.switch import EV_XBAR, switch_crossbar, switch_receive
from ..engine.events import (Q_TICK, SHORTCUT_ARRIVAL_HUB, SHORTCUT_HUB_AGAIN, TIMER_OFF, TM_TICK,
                             _u, pop, timer_clear, timer_is_next, timer_next_hint, timer_peek,
                             timer_take)
from ..engine.stateref import jit_disabled

STATUS_EMPTY = 0      # no events left (heap empty, no timer armed)
STATUS_BATCH = 1      # max_events processed; call again
STATUS_GROW = 2       # event queue nearly full; grow it and call again
STATUS_ERROR = 3      # a handler recorded a runtime error in st.err
STATUS_TICK_LIMIT = 4  # next event lies beyond the tick limit
STATUS_TRACE_FULL = 5  # the trace record buffer needs draining (components/trace.py)
# prefetch the records of the event that comes next while this one runs (_prefetch_next); the
# pure-Python engine has no caches to warm
PREFETCH_NEXT = not jit_disabled()


@compiled
def _prefetch_next(st, p):
    """Start loading the records the next timer's handler reads first (SM issue: the SM's thread
    blocks; a link transmit or arrival: its channel's hot lines), so that their cache misses
    overlap this event's work instead of stalling the next one. With many GPUs most of an
    event's time is such misses (docs/performance.md, the profile); a hint changes no value."""
    ti = timer_next_hint(st)
    if ti < 0:
        return
    if ti < p.tm_ch_tx:
        prefetch_issue(st, ti)
    elif ti < p.tm_ch_arrive:
        prefetch_transmit(st, ti - p.tm_ch_tx)
    elif ti < p.tm_xbar:
        prefetch_arrival(st, ti - p.tm_ch_arrive)


@compiled
def run_loop(st, max_events, headroom, tick_limit, entries):
    # entries: the addresses of the handlers compiled as their own entry points (the SM's issue,
    # the AAU's receive and retry, the handlers of the blocks compiled on demand that this run
    # uses: dispatch/indirect.py), which keeps their call trees out of this function's compiled
    # module; written into the table the callers read (engine/entries.py) on every call
    install(entries)
    sy = st.sys[0]
    p = st.p[0]
    cap = st.q.shape[0]
    sy.tick_limit = tick_limit
    n = 0
    while n < max_events:
        # the earlier, in the canonical order (engine/events.py), of the heap's top event and the
        # earliest component timer (the lowest row of the current tick's timers; -1 if none is
        # due by the heap's top): at the same tick the heap's events go first
        qt = st.q[0, Q_TICK] if sy.q_size > 0 else TIMER_OFF
        due = timer_peek(st, qt)
        use_timer = False
        if due >= 0:
            tick = st.timer[_u(due), TM_TICK]
            use_timer = tick < qt
        if not use_timer:
            if sy.q_size == 0:
                return STATUS_EMPTY
            tick = qt
        if sy.q_size + headroom > cap:
            return STATUS_GROW
        if tick_limit >= 0 and tick > tick_limit:
            return STATUS_TICK_LIMIT
        if use_timer:
            # the handler re-arms it if the block has more to do
            ti = timer_take(st, due)
            a1 = 0
            kind, a0 = timer_event(p, ti)   # generated from the Timer declarations
            st.ev_count[kind] += 1
            # the largest timer row run at this tick (components/link_room.py reads it: which of
            # the tick's transmits have run)
            if sy.q_row_at != tick or ti > sy.q_row:
                sy.q_row = ti
                sy.q_row_at = tick
        else:
            tick, kind, a0, a1 = pop(st)
        sy.q_now = tick
        sy.q_events += 1
        n += 1
        if PREFETCH_NEXT:
            _prefetch_next(st, p)
        if kind == EV_CH_ARRIVE:
            pkt = channel_arrival(st, a0)
            if st.ch[a0].to_switch:
                # exact shortcut idle_output: the output the packet went to transmits next, in
                # this event (switch_receive checked that its timer is the next event)
                a0 = switch_receive(st, a0, pkt, tick)
                if a0 >= 0:
                    kind = EV_CH_TX
            else:
                # the block that declared the packet's kind receives it (declare.Receive)
                g = st.ch[a0].gpu
                receive_packet(st, g, a0, pkt, tick)
                ti = p.tm_hub + g
                if (st.timer[_u(ti), TM_TICK] == tick and p.shortcuts & SHORTCUT_ARRIVAL_HUB
                        and sy.err_code == 0 and sy.trace_full == 0
                        and sy.q_size + headroom <= cap and timer_is_next(st, ti, tick)):
                    # exact shortcut arrival_hub (docs/engine_order.md): the GPU's hub
                    # packetizer, armed for now (an owed response, a request to send), is the
                    # next event; it runs in this one, as the loop would run it next
                    timer_clear(st, ti)
                    if ti > sy.q_row:
                        sy.q_row = ti
                    kind = EV_HUB_TX
                    a0 = g
        if kind == EV_SM_ISSUE:
            call_void2(ENTRY_SM_ISSUE, st, a0, tick)
        elif kind == EV_CH_TX:
            channel_transmit(st, a0, tick)
        elif kind == EV_CH_ARRIVE:
            pass        # (handled above)
        elif kind == EV_XBAR:
            switch_crossbar(st, a0, tick)
        elif kind == EV_HUB_TX:
            ti = p.tm_hub + a0
            while True:
                # the hub sends a response, or the head request's packetizer (its block's Send)
                # runs
                r = hub_packetize(st, a0, tick)
                if r >= 0:
                    send_request(st, a0, r, tick)
                if not (st.timer[_u(ti), TM_TICK] == tick and p.shortcuts & SHORTCUT_HUB_AGAIN
                        and sy.err_code == 0 and sy.trace_full == 0
                        and sy.q_size + headroom <= cap and timer_is_next(st, ti, tick)):
                    break
                # exact shortcut hub_again (docs/engine_order.md): it armed itself again for
                # this tick (another response due now) and is the next event: it runs here
                timer_clear(st, ti)
        elif kind == EV_LOCAL_DONE:
            local_done(st, a0, tick)
        elif kind == EV_KERNEL_START:
            kernel_start(st, a0, tick)
        elif kind == EV_RPM_TX:
            rpm_packetize(st, a0, tick)
        elif kind == EV_MOE_LOOPBACK:
            call_void4(ENTRY_AAU_RECEIVE, st, a1, -1, a0, tick)
        elif kind == EV_DAM_READY:
            dam_tile_ready(st, a0, a1, tick)
        elif kind == EV_OCCUPANCY_SAMPLE:
            occupancy_sample(st, tick)
        elif kind == EV_HUB_FORWARD:
            if forward_run(st, a0, tick):
                # forwarding-buffer slots freed: parked packets go on
                call_void2(ENTRY_AAU_RETRY, st, a0, tick)
        else:
            # the events of blocks compiled on demand (CAIS's merge-table timer, DySHARP's
            # tracker retry), each through the entry table (dispatch/chains.py)
            block_event(st, kind, a0, tick)
        if sy.err_code != 0:
            return STATUS_ERROR
        if sy.trace_full != 0:
            return STATUS_TRACE_FULL
    return STATUS_BATCH
