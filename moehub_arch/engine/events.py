"""Event queue: component timers in a hierarchical timing wheel plus a binary min-heap, ordered
by (tick, sequence number).

The sequence number is taken from a counter at push time, so two events at the same tick run in
the order they were scheduled: the same config and seed give bit-identical results (DESIGN rule 3).
Each event carries an integer kind (dispatched by the run loop) and two integer arguments; the heap
is one ``[capacity, 5]`` int64 array (columns Q_*), its size and sequence counter live in State.sys.
Sifting moves a hole and writes each entry once (half the stores of swapping); events popped are
counted per kind in State.ev_count (stats system.engine.events.*).

Component timers. Most events are a block's next activation: an SM's next issue cycle, a link
transmitter's next look at its queue, a wire's next packet arrival, a switch input's next
crossbar attempt, a packetizer's next packet. Each block has at most one, and a block woken
earlier than planned must move it. A heap would keep the old setting as a stale event (an SM
whose TB retried a full hub every few cycles piled up hundreds), so these activations are timers:
one (tick, seq) row per block in State.timer (TIMER_OFF: unarmed), the truth the run loop obeys.

The timers wait in a hierarchical timing wheel (Varghese and Lauck, "Hashed and hierarchical
timing wheels", SOSP 1987) of WHEEL_LEVELS levels of WHEEL_SLOTS slots, relative to a base tick
(State.sys tw_base) that never passes the current tick. A timer for tick t sits at the level of
the highest WHEEL_BITS-bit digit in which t differs from the base, in the slot of t's digit
there; so level 0 holds the ticks of the base's 32-tick block, one tick per slot, and a level's
slots hold ever later ranges of ticks. The earliest timer is the head of the lowest occupied
level-0 slot (a bit mask per level, State.timer_level, finds it); when level 0 is empty, the
lowest occupied slot of the lowest occupied level is poured one level or more down (its timers
re-placed relative to the slot's first tick, which becomes the base).

A slot's list is circular and doubly linked through the timers' own rows (State.timer columns
TM_NEXT, TM_PREV), with one head row per slot after the timers' rows: a timer is in at most one
list, so setting it again or clearing it unlinks it in place (two stores, no search), a take
unlinks a level-0 head, and a peek reads a head; nothing is stale, nothing is allocated. Every
list is in sequence order, which is what ties need (a level-0 slot is one tick): a set has the
newest sequence number and goes to a tail, and a pour appends one list, in order, to levels that
are empty (every level below the poured one is).

Why a wheel: it replaced a tournament tree over the timers (a walk from a leaf to the root at
every set and every take: 29% of the run loop's time on a DeepSeek-V3 layer, and growing with the
GPU count, as the tree deepens). Most timers are set a short, bounded distance ahead (a quarter
for the tick being processed, most of the rest 128 ps to 32 ns: link serialisation, SM cycles),
so a set is a few stores, a take unlinks a list head, and a timer is moved down about once on its
way to level 0, flat in the GPU count (README, Performance). The wheel's first version kept its
lists in a pool of entries and left a re-set timer's old entry in place, stale, to be dropped
when it came up; every peek then read the timer's row to test its head for staleness. Linking
the timers' rows themselves removes that read, the pool and its free list (README, Performance:
the run loop's CPU time 7-9% less on DeepSeek-V3 layers).

The run loop takes whichever of heap top and wheel head is earlier by (tick, seq): the same
total order as one queue of all events, and the same as the tree's. Timer index ranges per block
kind are in State.p (tm_*).
"""
import numpy as np
from .jit import compiled
from .bitset import _lowest_bit
from .stateref import jit_disabled
from ..declare import Block, Param, Record, Stat, StatGroup, fields

# Event kinds are declared by the blocks whose handlers they dispatch (``Event`` in each
# component module's BLOCK: EV_SM_ISSUE in components/sm.py, EV_CH_TX in components/nvlink.py...);
# the composition (moehub_arch/composition.py) checks they are unique and dense and names them
# (EVENT_NAMES, the stats system.engine.events.*).

# columns of the heap array State.q
Q_TICK, Q_SEQ, Q_KIND, Q_A0, Q_A1 = range(5)
# columns of State.timer; an unarmed timer has tick TIMER_OFF. TM_NEXT and TM_PREV link an armed
# timer into its wheel slot's list (rows of State.timer too: see new_timers)
TM_TICK, TM_SEQ, TM_NEXT, TM_PREV = 0, 1, 2, 3
TM_COLUMNS = 4
TIMER_OFF = 2 ** 62
# the timing wheel: levels of WHEEL_SLOTS slots, WHEEL_BITS bits of the tick each (32 slots keep
# a level's occupancy mask off the sign bit, like engine/bitset.py); enough levels for any tick
# below TIMER_OFF
WHEEL_BITS = 5
WHEEL_SLOTS = 1 << WHEEL_BITS
WHEEL_LEVELS = (62 + WHEEL_BITS - 1) // WHEEL_BITS
WHEEL_LISTS = WHEEL_LEVELS * WHEEL_SLOTS

# The engine itself: run-wide parameters, the queue's bookkeeping and the first runtime error.
BLOCK = Block(
    "engine", "event queue and component timers (this module), run-wide parameters, runtime errors",
    params=(
        Param("num_gpus", "system.num_gpus", "GPUs", "GPUs in the system",
              lambda cfg: cfg.system.num_gpus, "config: system.num_gpus"),
        Param("functional", "workload.mode", "bool", "1 in functional mode (memory holds values)",
              lambda cfg: int(cfg.workload.mode == "functional"), "config: workload.mode"),
        Param("packet_train", "run.packet_train", "packets",
              "link packets simulated as one (1 = exact; components/packet.py)",
              lambda cfg: cfg.run.packet_train, "config: run.packet_train"),
        Param("tm_count", "", "timers", "component timers in all (composition: the sum of every "
              "block's timer range)", None, "derived: from the blocks' Timer declarations"),
    ),
    records=(Record("sys", "whole-run bookkeeping (one record)"),
             Record("gpu", "per-GPU state: every block that has one instance per GPU adds its "
                           "fields here (scheduler, hub, HBM and L2 counters, MoE-Hub units)")),
    fields=fields(
        "sys",
        ("q_size", "events in the heap"), ("q_next_seq", "next sequence number (ties by push order)"),
        ("q_events", "events processed"), ("q_now", "tick of the current event"),
        ("q_peak", "peak heap size"),
        ("err_code", "the first runtime error (engine.state ERR_*), 0: none"),
        ("err_slot", "thread-block slot that raised it"), ("err_pc", "its program counter"),
        ("err_value", "the offending value (address, size...)"),
        ("tw_base", "the timing wheel's base tick (at or before the current tick)")),
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
    State.timer_level (the levels' occupancy masks). A slot's list is circular and doubly linked
    through its head row (an empty list links the head to itself), so linking and unlinking a
    timer take no test for the ends of the list."""
    n = max(count, 1)
    timer = np.zeros((n + WHEEL_LISTS, TM_COLUMNS), np.int64)
    timer[:, TM_TICK] = TIMER_OFF
    heads = np.arange(n, n + WHEEL_LISTS)
    timer[n:, TM_NEXT] = heads
    timer[n:, TM_PREV] = heads
    level = np.zeros(WHEEL_LEVELS, np.int64)
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
    """Link timer i at the tail of slot s of level lv (the newest sequence number last)."""
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
def timer_set(st, i, tick):
    """Arm timer i for `tick` (at or after the current tick) with a fresh sequence number,
    replacing its previous setting (it leaves its old slot: the newest sequence number goes to
    the tail of its new one)."""
    sy = st.sys[0]
    seq = sy.q_next_seq
    sy.q_next_seq = seq + 1
    t = st.timer
    if t[_u(i), TM_TICK] != TIMER_OFF:
        _wheel_unlink(st, i)
    t[_u(i), TM_TICK] = tick
    t[_u(i), TM_SEQ] = seq
    _wheel_append(st, i, tick, sy.tw_base)


@compiled
def timer_clear(st, i):
    """Disarm timer i."""
    t = st.timer
    if t[_u(i), TM_TICK] != TIMER_OFF:
        _wheel_unlink(st, i)
        t[_u(i), TM_TICK] = TIMER_OFF


@compiled
def timer_peek(st, before):
    """The earliest armed timer by (tick, seq), or -1 if no timer is armed at or before tick
    `before` (the heap's top; TIMER_OFF: none). While level 0 holds a timer that is the head of
    its lowest occupied slot (the run loop's case for almost every event); otherwise
    _wheel_advance pours higher slots down."""
    levels = st.timer_level
    if levels[0] != 0:
        t = st.timer
        return t[_u(t.shape[0] - WHEEL_LISTS + _lowest_bit(levels[0])), TM_NEXT]
    return _wheel_advance(st, before)


@compiled
def _wheel_advance(st, before):
    """timer_peek with level 0 empty: pour the lowest occupied slot of the lowest occupied level
    down (its timers re-placed relative to the slot's first tick, which becomes the base) until
    level 0 holds a timer, or the next slot starts after `before` (the next event's tick, so the
    base stays at or before the current tick), or no timer is armed (-1 for both)."""
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
        # too. Its list is in sequence order and the levels below are empty, so appending its
        # timers in list order keeps every list in sequence order
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
    return t[_u(heads + _lowest_bit(levels[0])), TM_NEXT]


@compiled
def timer_take(st, i):
    """Take the earliest timer (i, which timer_peek returned): disarm it and unlink it; returns i."""
    st.timer[_u(i), TM_TICK] = TIMER_OFF
    _wheel_unlink(st, i)
    return i


def new_event_queue(capacity):
    return np.zeros((capacity, 5), np.int64)


def grow_event_queue(q, capacity):
    new = new_event_queue(capacity)
    new[:q.shape[0]] = q
    return new


@compiled
def push(st, tick, kind, a0, a1):
    """Schedule an event. The caller guarantees capacity (the run loop returns to Python to grow
    the heap before it gets within one handler's worth of pushes of full)."""
    q = st.q
    sy = st.sys[0]
    seq = sy.q_next_seq
    sy.q_next_seq = seq + 1
    i = sy.q_size
    sy.q_size = i + 1
    if i + 1 > sy.q_peak:
        sy.q_peak = i + 1
    # sift the hole up (parents move down) and write the new entry once where it belongs
    while i > 0:
        parent = (i - 1) >> 1
        pt = q[parent, Q_TICK]
        if tick < pt or (tick == pt and seq < q[parent, Q_SEQ]):
            for k in range(5):
                q[i, k] = q[parent, k]
            i = parent
        else:
            break
    q[i, Q_TICK] = tick
    q[i, Q_SEQ] = seq
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
        lt = q[n, Q_TICK]
        ls = q[n, Q_SEQ]
        i = 0
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            right = child + 1
            if right < n:
                ct = q[child, Q_TICK]
                rt = q[right, Q_TICK]
                if rt < ct or (rt == ct and q[right, Q_SEQ] < q[child, Q_SEQ]):
                    child = right
            ct = q[child, Q_TICK]
            if ct < lt or (ct == lt and q[child, Q_SEQ] < ls):
                for k in range(5):
                    q[i, k] = q[child, k]
                i = child
            else:
                break
        for k in range(5):
            q[i, k] = q[n, k]
    st.ev_count[kind] += 1
    return tick, kind, a0, a1
