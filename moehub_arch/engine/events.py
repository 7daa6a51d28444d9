"""Event queue: component timers in a hierarchical timing wheel plus a binary min-heap, in one
canonical order that does not depend on when an event was armed.

The canonical same-tick order (DESIGN rule 3; docs/engine_order.md says why it is a faithful model
of simultaneous hardware events). Events run in order of the key

    (tick, class, identity)

where class 0 holds the heap's one-off events and class 1 the component timers; a heap event's
identity is (kind, a0, a1), a timer's its row in State.timer, whose ranges are the blocks' in
declaration order (SM issue, link transmitters, wire arrivals, switch inputs, hub packetizers,
RPM packetizers, CAIS merge timeouts; the run loop's dispatch) and, within a range, the block's
index. The engine always runs the pending event with the smallest key. An event armed for the
current tick with a smaller key than the one running therefore runs right after it (before every
event that was already pending): the order is a function of the model's state alone, so two
events with the same key are the same event (interchangeable), and a shortcut that arms an event
earlier in the run, or leaves out an event that would have changed nothing, cannot move any
other event. Nothing counts arming time: there is no sequence number.

Each event carries an integer kind (dispatched by the run loop) and two integer arguments; the heap
is one ``[capacity, 4]`` int64 array (columns Q_*) ordered by (tick, kind, a0, a1), its size lives
in State.sys. Sifting moves a hole and writes each entry once (half the stores of swapping);
events popped are counted per kind in State.ev_count (stats system.engine.events.*).

Component timers. Most events are a block's next activation: an SM's next issue cycle, a link
transmitter's next look at its queue, a wire's next packet arrival, a switch input's next
crossbar attempt, a packetizer's next packet. Each block has at most one, and a block woken
earlier than planned must move it. A heap would keep the old setting as a stale event (an SM
whose TB retried a full hub every few cycles piled up hundreds), so these activations are timers:
one row per block in State.timer (tick; TIMER_OFF: unarmed), the truth the run loop obeys.

The timers wait in a hierarchical timing wheel (Varghese and Lauck, "Hashed and hierarchical
timing wheels", SOSP 1987) of WHEEL_LEVELS levels of WHEEL_SLOTS slots, relative to a base tick
(State.sys tw_base) that never passes the current tick. A timer for tick t sits at the level of
the highest WHEEL_BITS-bit digit in which t differs from the base, in the slot of t's digit
there; so level 0 holds the ticks of the base's 32-tick block, one tick per slot, and a level's
slots hold ever later ranges of ticks. When level 0 is empty, the lowest occupied slot of the
lowest occupied level is poured one level or more down (its timers re-placed relative to the
slot's first tick, which becomes the base); a bit mask per level (State.timer_level) finds the
occupied slots.

The current tick's timers. The timers of one tick must run in row order, however they were armed.
When the earliest level-0 slot's tick comes up (sys tw_now), its timers move into a bit set over
the timers' rows (four levels of 32-bit words after the wheel's masks in State.timer_level:
NOW_*), and every timer set for that tick while it runs goes straight there; the next timer is
the set's lowest bit (four lowest-bit reads), a take or a re-set clears its bit. So a level-0 slot
is handled in row order at the cost of a few word operations per timer, with no sorting.

A slot's list is circular and doubly linked through the timers' own rows (State.timer columns
TM_NEXT, TM_PREV), with one head row per slot after the timers' rows: a timer is in at most one
list (or in the current tick's set: TM_NEXT = IN_NOW), so setting it again or clearing it unlinks
it in place (two stores, no search); nothing is stale, nothing is allocated. A list's order does
not matter (a level-0 slot is one tick, ordered by the set).

Why a wheel: it replaced a tournament tree over the timers (a walk from a leaf to the root at
every set and every take: 29% of the run loop's time on a DeepSeek-V3 layer, and growing with the
GPU count, as the tree deepens). Most timers are set a short, bounded distance ahead (a quarter
for the tick being processed, most of the rest 128 ps to 32 ns: link serialisation, SM cycles),
so a set is a few stores, a take clears a bit, and a timer is moved down about once on its way
to level 0, flat in the GPU count (docs/performance.md). Timer index ranges per block kind are in
State.p (tm_*).
"""
import numpy as np
from .jit import compiled
from .bitset import _lowest_bit
from .state import aligned_zeros
from .stateref import jit_disabled
from ..declare import Block, Param, Record, Stat, StatGroup, fields
from ..config.schema import SHORTCUTS
from ..config.keys import key_param

# the engine's exact shortcuts (run.shortcuts; docs/engine_order.md), bits of State.p shortcuts:
# each leaves out events that the canonical order makes redundant, with the same model stats
SHORTCUT_TX_WAKE = 1 << SHORTCUTS.index("tx_wake")
SHORTCUT_IDLE_OUTPUT = 1 << SHORTCUTS.index("idle_output")
SHORTCUT_SM_FOLD = 1 << SHORTCUTS.index("sm_fold")
SHORTCUT_BACK_TO_BACK = 1 << SHORTCUTS.index("back_to_back")
SHORTCUT_CREDIT_WAKE = 1 << SHORTCUTS.index("credit_wake")
SHORTCUT_ARRIVAL_HUB = 1 << SHORTCUTS.index("arrival_hub")
SHORTCUT_HUB_AGAIN = 1 << SHORTCUTS.index("hub_again")

# Event kinds are declared by the blocks whose handlers they dispatch (``Event`` in each
# component module's BLOCK: EV_SM_ISSUE in components/sm.py, EV_CH_TX in components/nvlink.py...);
# the composition (moehub_arch/composition.py) checks they are unique and dense and names them
# (EVENT_NAMES, the stats system.engine.events.*).

# columns of the heap array State.q (ordered by tick, then kind, a0, a1: the canonical order)
Q_TICK, Q_KIND, Q_A0, Q_A1 = range(4)
Q_COLUMNS = 4
# columns of State.timer; an unarmed timer has tick TIMER_OFF. TM_NEXT and TM_PREV link an armed
# timer into its wheel slot's list (rows of State.timer too: see new_timers), or TM_NEXT is IN_NOW
# while it waits in the current tick's set. Rows are padded to 32 bytes (two per cache line)
TM_TICK, TM_NEXT, TM_PREV = 0, 1, 2
TM_COLUMNS = 4
IN_NOW = -1
TIMER_OFF = 2 ** 62
# the timing wheel: levels of WHEEL_SLOTS slots, WHEEL_BITS bits of the tick each (32 slots keep
# a level's occupancy mask off the sign bit, like engine/bitset.py); enough levels for any tick
# below TIMER_OFF
WHEEL_BITS = 5
WHEEL_SLOTS = 1 << WHEEL_BITS
WHEEL_LEVELS = (62 + WHEEL_BITS - 1) // WHEEL_BITS
WHEEL_LISTS = WHEEL_LEVELS * WHEEL_SLOTS
# the current tick's set in State.timer_level, after the wheel's masks: a root word, then 32, 1024
# and (timers / 32) words, each bit saying that a word (or, at the last level, a timer) below it
# is set; 32 bits a word (off the sign bit), so four levels hold up to 2**20 timers
NOW_ROOT = WHEEL_LEVELS
NOW_L2 = NOW_ROOT + 1
NOW_L1 = NOW_L2 + 32
NOW_L0 = NOW_L1 + 1024
NOW_MAX_TIMERS = 1 << 20


# The engine itself: run-wide parameters, the queue's bookkeeping and the first runtime error.
BLOCK = Block(
    "engine", "event queue and component timers (this module), run-wide parameters, runtime errors",
    params=(
        key_param("num_gpus", "system.num_gpus"),
        key_param("functional", "workload.mode", lambda cfg: int(cfg.workload.mode == "functional"),
                  "bool", "1: functional, 0: timing"),
        key_param("packet_train", "run.packet_train"),
        key_param("shortcuts", "run.shortcuts",
                  lambda cfg: sum(1 << SHORTCUTS.index(n) for n in cfg.run.shortcuts), "bit mask",
                  "bit i set: SHORTCUTS[i] taken (SHORTCUT_*)"),
        Param("tm_count", "", "timers", "component timers in all (composition: the sum of every "
              "block's timer range)", None, "derived: from the blocks' Timer declarations"),
    ),
    records=(Record("sys", "whole-run bookkeeping (one record)"),
             Record("gpu", "per-GPU state: every block that has one instance per GPU adds its "
                           "fields here (scheduler, hub, HBM and L2 counters, MoE-Hub units)")),
    fields=fields(
        "sys",
        ("q_size", "events in the heap"),
        ("q_events", "events processed"), ("q_now", "tick of the current event"),
        ("q_peak", "peak heap size"),
        ("err_code", "the first runtime error (engine.state ERR_*), 0: none"),
        ("err_slot", "thread-block slot that raised it"), ("err_pc", "its program counter"),
        ("err_value", "the offending value (address, size...)"),
        ("tw_base", "the timing wheel's base tick (at or before the current tick)"),
        ("tw_now", "the tick whose timers are in the current tick's set (at or before the current "
                   "tick)"),
        ("tick_limit", "the run loop's tick limit (-1: none): no shortcut acts beyond it"),
        ("q_row", "the largest timer row run so far at tick q_row_at: the timers of that tick "
                  "that come before it in the canonical order have run (components/link_room.py)"),
        ("q_row_at", "the tick q_row belongs to (-1: none)"),
        init={"q_row": -1, "q_row_at": -1}),
    stats=(StatGroup("system", "engine", (
        Stat("queue_peak", "events", "peak number of pending events in the event queue",
             lambda i: i.st.sys[0].q_peak),
        # then the events processed per kind (system.engine.events.*): added by the composition,
        # which alone knows every block's event kinds (composition.py EVENT_COUNTS)
    )),),
)


def new_timers(count):
    """`count` unarmed timers and an empty timing wheel: State.timer ([count + WHEEL_LISTS,
    TM_COLUMNS]: the timers, then one list head per wheel slot, level by level) and
    State.timer_level (the levels' occupancy masks, then the current tick's set: NOW_*). A slot's
    list is circular and doubly linked through its head row (an empty list links the head to
    itself), so linking and unlinking a timer take no test for the ends of the list."""
    n = max(count, 1)
    if n > NOW_MAX_TIMERS:
        raise ValueError(f"the system has {n} component timers; the event queue holds at most "
                         f"{NOW_MAX_TIMERS} (engine/events.py NOW_MAX_TIMERS)")
    timer = aligned_zeros((n + WHEEL_LISTS, TM_COLUMNS))    # two rows a line, none straddling
    timer[:, TM_TICK] = TIMER_OFF
    heads = np.arange(n, n + WHEEL_LISTS)
    timer[n:, TM_NEXT] = heads
    timer[n:, TM_PREV] = heads
    level = np.zeros(NOW_L0 + (n + 31) // 32, np.int64)
    return timer, level


if jit_disabled():
    def _u(i):
        """Index i itself: the pure-Python engine has no wrap-around code to leave out (and
        making a numpy integer cost it about 5% of its time; every use is an index)."""
        return i
else:
    @compiled
    def _u(i):
        """Index i (never negative) as unsigned: Numba then leaves out the wrap-around of
        negative indices (three instructions per index: most of what a timer set did besides
        its stores)."""
        return np.uint64(i)


@compiled
def _wheel_level(x):
    """The wheel level of a tick whose bits differ from the base's in `x` (tick ^ base): the
    index of its highest set bit, over WHEEL_BITS. Most timers are set less than 2**20 ticks
    ahead (levels 0-3: compares); beyond, a float holds a power of two's exponent exactly, and
    any integer below 2**53 exactly (larger ones are shifted first)."""
    if x < WHEEL_SLOTS:
        return 0
    if x < 1 << (2 * WHEEL_BITS):
        return 1
    if x < 1 << (3 * WHEEL_BITS):
        return 2
    if x < 1 << (4 * WHEEL_BITS):
        return 3
    if x >= 2 ** 52:
        return (((np.float64(x >> 26).view(np.int64) >> 52) - 1023) + 26) // WHEEL_BITS
    return ((np.float64(x).view(np.int64) >> 52) - 1023) // WHEEL_BITS


@compiled
def _wheel_link(st, i, lv, s):
    """Link timer i at the tail of slot s of level lv."""
    t = st.timer
    head = t.shape[0] - WHEEL_LISTS + lv * WHEEL_SLOTS + s
    last = t[_u(head), TM_PREV]
    t[_u(last), TM_NEXT] = i
    t[_u(i), TM_PREV] = last
    t[_u(i), TM_NEXT] = head
    t[_u(head), TM_PREV] = i
    st.timer_level[_u(lv)] |= 1 << s


@compiled
def _wheel_append(st, i, tick, base):
    """Link timer i (set for `tick`) into its slot relative to `base`: the level of the highest
    digit in which they differ, the slot of tick's digit there."""
    lv = _wheel_level(tick ^ base)
    _wheel_link(st, i, lv, (tick >> (WHEEL_BITS * lv)) & (WHEEL_SLOTS - 1))


@compiled
def _wheel_unlink(st, i):
    """Take armed timer i out of its slot's list; clear the slot's occupancy bit if that empties
    it (only the head row is left: its neighbours on both sides are the same row)."""
    t = st.timer
    nxt = t[_u(i), TM_NEXT]
    prev = t[_u(i), TM_PREV]
    t[_u(prev), TM_NEXT] = nxt
    t[_u(nxt), TM_PREV] = prev
    if nxt == prev:
        k = nxt - (t.shape[0] - WHEEL_LISTS)
        st.timer_level[_u(k >> WHEEL_BITS)] &= ~(1 << (k & (WHEEL_SLOTS - 1)))


@compiled
def _now_add(st, i):
    """Put timer i (set for the current tick's set's tick) into that set."""
    lv = st.timer_level
    w0 = i >> 5
    old = lv[_u(NOW_L0 + w0)]
    lv[_u(NOW_L0 + w0)] = old | (1 << (i & 31))
    if old == 0:
        w1 = w0 >> 5
        old = lv[_u(NOW_L1 + w1)]
        lv[_u(NOW_L1 + w1)] = old | (1 << (w0 & 31))
        if old == 0:
            w2 = w1 >> 5
            old = lv[_u(NOW_L2 + w2)]
            lv[_u(NOW_L2 + w2)] = old | (1 << (w1 & 31))
            if old == 0:
                lv[NOW_ROOT] |= 1 << w2
    st.timer[_u(i), TM_NEXT] = IN_NOW


@compiled
def _now_remove(st, i):
    """Take timer i out of the current tick's set."""
    lv = st.timer_level
    w0 = i >> 5
    x = lv[_u(NOW_L0 + w0)] & ~(1 << (i & 31))
    lv[_u(NOW_L0 + w0)] = x
    if x == 0:
        w1 = w0 >> 5
        x = lv[_u(NOW_L1 + w1)] & ~(1 << (w0 & 31))
        lv[_u(NOW_L1 + w1)] = x
        if x == 0:
            w2 = w1 >> 5
            x = lv[_u(NOW_L2 + w2)] & ~(1 << (w1 & 31))
            lv[_u(NOW_L2 + w2)] = x
            if x == 0:
                lv[NOW_ROOT] &= ~(1 << w2)


@compiled
def _now_first(st):
    """The lowest timer row in the current tick's set (which is not empty)."""
    lv = st.timer_level
    w2 = _lowest_bit(lv[NOW_ROOT])
    w1 = (w2 << 5) | _lowest_bit(lv[_u(NOW_L2 + w2)])
    w0 = (w1 << 5) | _lowest_bit(lv[_u(NOW_L1 + w1)])
    return (w0 << 5) | _lowest_bit(lv[_u(NOW_L0 + w0)])


@compiled
def _timer_unlink(st, i):
    """Take armed timer i out of the current tick's set or its wheel slot's list."""
    if st.timer[_u(i), TM_NEXT] == IN_NOW:
        _now_remove(st, i)
    else:
        _wheel_unlink(st, i)


@compiled
def timer_set(st, i, tick):
    """Arm timer i for `tick` (at or after the current tick), replacing its previous setting:
    into the current tick's set if that is its tick, else into its wheel slot."""
    sy = st.sys[0]
    t = st.timer
    if t[_u(i), TM_TICK] != TIMER_OFF:
        _timer_unlink(st, i)
    t[_u(i), TM_TICK] = tick
    if tick == sy.tw_now:
        _now_add(st, i)
    else:
        _wheel_append(st, i, tick, sy.tw_base)


@compiled
def timer_clear(st, i):
    """Disarm timer i."""
    t = st.timer
    if t[_u(i), TM_TICK] != TIMER_OFF:
        _timer_unlink(st, i)
        t[_u(i), TM_TICK] = TIMER_OFF


@compiled
def timer_peek(st, before):
    """The earliest armed timer by (tick, row), or -1 if no timer is armed at or before tick
    `before` (the heap's top; TIMER_OFF: none). While the current tick's set holds a timer that
    is its lowest row (the run loop's case for almost every event); otherwise _wheel_advance
    pours the wheel down."""
    if st.timer_level[NOW_ROOT] != 0:
        return _now_first(st)
    return _wheel_advance(st, before)


@compiled
def _wheel_advance(st, before):
    """timer_peek with the current tick's set empty: pour the lowest occupied slot of the lowest
    occupied level down (its timers re-placed relative to the slot's first tick, which becomes
    the base) until level 0 holds a timer, then move the earliest level-0 slot into the current
    tick's set (its tick becomes tw_now) - unless the slot starts after `before` (the next
    event's tick, so base and tw_now stay at or before the current tick) or no timer is armed
    (-1 for both)."""
    sy = st.sys[0]
    t = st.timer
    levels = st.timer_level
    heads = t.shape[0] - WHEEL_LISTS
    while levels[0] == 0:
        lv = 1
        while lv < WHEEL_LEVELS and levels[_u(lv)] == 0:
            lv += 1
        if lv == WHEEL_LEVELS:
            return -1
        s = _lowest_bit(levels[_u(lv)])
        # the slot's first tick: the base's digits above this level, the slot's digit, zeros below
        above = WHEEL_BITS * (lv + 1)
        first = s << (WHEEL_BITS * lv)
        if above < 62:
            first |= (sy.tw_base >> above) << above
        if before < first:
            return -1
        # pour the slot down: every tick in it is at or after `first`, which the next event's is
        # too
        sy.tw_base = first
        head = heads + lv * WHEEL_SLOTS + s
        i = t[_u(head), TM_NEXT]
        t[_u(head), TM_NEXT] = head
        t[_u(head), TM_PREV] = head
        levels[_u(lv)] &= ~(1 << s)
        if lv == 1:
            # a level-1 slot is one 32-tick block: all of it goes to level 0, one tick per slot
            # (most pours; no level to compute)
            while i != head:
                nxt = t[_u(i), TM_NEXT]
                _wheel_link(st, i, 0, t[_u(i), TM_TICK] & (WHEEL_SLOTS - 1))
                i = nxt
        else:
            while i != head:
                nxt = t[_u(i), TM_NEXT]
                _wheel_append(st, i, t[_u(i), TM_TICK], first)
                i = nxt
    # the earliest level-0 slot: one tick of the base's 32-tick block
    s = _lowest_bit(levels[0])
    tick = ((sy.tw_base >> WHEEL_BITS) << WHEEL_BITS) | s
    if before < tick:
        return -1
    sy.tw_now = tick
    head = heads + s
    i = t[_u(head), TM_NEXT]
    t[_u(head), TM_NEXT] = head
    t[_u(head), TM_PREV] = head
    levels[0] &= ~(1 << s)
    while i != head:
        nxt = t[_u(i), TM_NEXT]
        _now_add(st, i)
        i = nxt
    return _now_first(st)


@compiled
def timer_next_hint(st):
    """A timer that runs soon, read without changing anything (for prefetching its block's
    records: dispatch/loop.py): the current tick's set's lowest row (the next timer unless a
    handler arms an earlier one or a heap event comes first), else a timer of the earliest
    occupied level-0 slot of the wheel (a later tick of the base's 32-tick block); -1 if
    neither holds one."""
    lv = st.timer_level
    if lv[NOW_ROOT] != 0:
        return _now_first(st)
    if lv[0] != 0:
        t = st.timer
        return t[_u(t.shape[0] - WHEEL_LISTS + _lowest_bit(lv[0])), TM_NEXT]
    return -1


@compiled
def timer_is_next(st, i, tick):
    """Whether timer i is the next event to run, the current event being at `tick`: armed for
    `tick` in the current tick's set and its lowest row, and no heap event due by then (a heap
    event goes first at the same tick). A handler whose last act armed it may then run it
    itself (an exact shortcut: nothing could come between)."""
    if st.timer[_u(i), TM_TICK] != tick or tick != st.sys[0].tw_now:
        return False
    if st.sys[0].q_size > 0 and st.q[0, Q_TICK] <= tick:
        return False
    return _now_first(st) == i


@compiled
def timer_take(st, i):
    """Take the earliest timer (i, which timer_peek returned): disarm it and take it out of the
    current tick's set; returns i."""
    st.timer[_u(i), TM_TICK] = TIMER_OFF
    _now_remove(st, i)
    return i


def new_event_queue(capacity):
    return aligned_zeros((capacity, Q_COLUMNS))


def grow_event_queue(q, capacity):
    new = new_event_queue(capacity)
    new[:q.shape[0]] = q
    return new


@compiled
def _q_before(tick, kind, a0, a1, q, j):
    """Whether the event (tick, kind, a0, a1) comes before heap entry j in the canonical order
    (tick, kind, a0, a1); equal events are the same event (either may go first)."""
    t = q[j, Q_TICK]
    if tick != t:
        return tick < t
    k = q[j, Q_KIND]
    if kind != k:
        return kind < k
    x = q[j, Q_A0]
    if a0 != x:
        return a0 < x
    return a1 < q[j, Q_A1]


@compiled
def push(st, tick, kind, a0, a1):
    """Schedule an event. The caller guarantees capacity (the run loop returns to Python to grow
    the heap before it gets within one handler's worth of pushes of full)."""
    q = st.q
    sy = st.sys[0]
    i = sy.q_size
    sy.q_size = i + 1
    if i + 1 > sy.q_peak:
        sy.q_peak = i + 1
    # sift the hole up (parents move down) and write the new entry once where it belongs
    while i > 0:
        parent = (i - 1) >> 1
        if _q_before(tick, kind, a0, a1, q, parent):
            for k in range(Q_COLUMNS):
                q[i, k] = q[parent, k]
            i = parent
        else:
            break
    q[i, Q_TICK] = tick
    q[i, Q_KIND] = kind
    q[i, Q_A0] = a0
    q[i, Q_A1] = a1


@compiled
def pop(st):
    """Remove the earliest event; returns (tick, kind, a0, a1)."""
    q = st.q
    sy = st.sys[0]
    tick = q[0, Q_TICK]
    kind = q[0, Q_KIND]
    a0 = q[0, Q_A0]
    a1 = q[0, Q_A1]
    n = sy.q_size - 1
    sy.q_size = n
    if n > 0:
        # sift the hole at the root down (smaller children move up), then place the last entry
        i = 0
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            right = child + 1
            if right < n and _q_before(q[right, Q_TICK], q[right, Q_KIND], q[right, Q_A0],
                                       q[right, Q_A1], q, child):
                child = right
            if _q_before(q[child, Q_TICK], q[child, Q_KIND], q[child, Q_A0], q[child, Q_A1],
                         q, n):
                for k in range(Q_COLUMNS):
                    q[i, k] = q[child, k]
                i = child
            else:
                break
        for k in range(Q_COLUMNS):
            q[i, k] = q[n, k]
    st.ev_count[kind] += 1
    return tick, kind, a0, a1
