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
lowest occupied slot of the lowest occupied level is poured one level or more down (its entries
re-placed relative to the slot's first tick, which becomes the base). Ties need no comparison of
keys: a level-0 slot is one tick and a list in sequence order (a timer set later has a larger
sequence number and goes to the tail; entries poured in are placed in order). The wheel's lists
live in a pool of entries (State.timer_entry: tick, seq, timer, next) with a free list.

Why a wheel: it replaced a tournament tree over the timers (a walk from a leaf to the root at
every set and every take: 29% of the run loop's time on a DeepSeek-V3 layer, and growing with the
GPU count, as the tree deepens). Most timers are set a short, bounded distance ahead (a quarter
for the tick being processed, most of the rest 128 ps to 32 ns: link serialisation, SM cycles),
so a set is a few stores, a take pops a list head, and an entry is moved down about once on its
way to level 0: half the tree's time on recorded traces of the timer operations, and flat in the
GPU count (README, Performance). Clearing or setting a timer again does not look for its old
entry: that entry is stale (its timer's row no longer holds its sequence number, or is off) and
is dropped when it comes up; when the pool runs dry the wheel drops every stale entry at once
(the pool has room for four entries per timer and at most one per timer is live, so that is rare).

The run loop takes whichever of heap top and wheel head is earlier by (tick, seq): the same
total order as one queue of all events, and the same as the tree's. Timer index ranges per block
kind are in State.p (tm_*).
"""
import numpy as np
from .jit import compiled
from .bitset import _lowest_bit
from ..components.block import Block, Param, Record, Stat, StatGroup, fields

# Event kinds are declared by the blocks whose handlers they dispatch (``Event`` in each
# component module's BLOCK: EV_SM_ISSUE in components/sm.py, EV_CH_TX in components/nvlink.py...);
# the composition (moehub_arch/composition.py) checks they are unique and dense and names them
# (EVENT_NAMES, the stats system.engine.events.*).

# columns of the heap array State.q
Q_TICK, Q_SEQ, Q_KIND, Q_A0, Q_A1 = range(5)
# columns of State.timer; an unarmed timer has tick TIMER_OFF
TM_TICK, TM_SEQ = 0, 1
TIMER_OFF = 2 ** 62
# the timing wheel: levels of WHEEL_SLOTS slots, WHEEL_BITS bits of the tick each (32 slots keep
# a level's occupancy mask off the sign bit, like engine/bitset.py); enough levels for any tick
# below TIMER_OFF
WHEEL_BITS = 5
WHEEL_SLOTS = 1 << WHEEL_BITS
WHEEL_LEVELS = (62 + WHEEL_BITS - 1) // WHEEL_BITS
# columns of State.timer_entry (the wheel's pool): tick, sequence, timer, next entry (-1: none)
TE_TICK, TE_SEQ, TE_TIMER, TE_NEXT = 0, 1, 2, 3
# State.timer_slot[level, slot]: first and last entry of its list (-1: empty; the last is kept
# for level 0 only, where timers set for the slot's tick are appended in sequence order)
TS_HEAD, TS_TAIL = 0, 1
# entries in the pool per timer (at most one live per timer; the rest hold stale settings until
# they are dropped)
ENTRIES_PER_TIMER = 4


def _event_names(inst):
    """{kind: name} of the event kinds in use (composed from every block's declarations)."""
    from ..composition import enabled_events
    return enabled_events(inst.st)


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
        ("tw_base", "the timing wheel's base tick (at or before the current tick)"),
        ("tw_free", "first free entry of the wheel's pool (State.timer_entry), -1: none")),
    stats=(StatGroup("system", "engine", (
        Stat("queue_peak", "events", "peak number of pending events in the event queue",
             lambda i: i.st.sys[0].q_peak),
        Stat("events.{v}", "count", "events of kind '{v}' processed (engine.events)",
             lambda i, k: i.st.ev_count[k], each=_event_names),
    )),),
)


def new_timers(count):
    """`count` unarmed timers and an empty timing wheel: State.timer, State.timer_entry (every
    entry on the free list, in order), State.timer_slot and State.timer_level."""
    n = max(count, 1)
    timer = np.zeros((n, 2), np.int64)
    timer[:, TM_TICK] = TIMER_OFF
    entry = np.zeros((ENTRIES_PER_TIMER * n + 64, 4), np.int64)
    entry[:, TE_NEXT] = np.arange(1, entry.shape[0] + 1)
    entry[-1, TE_NEXT] = -1
    slot = np.full((WHEEL_LEVELS, WHEEL_SLOTS, 2), -1, np.int64)
    level = np.zeros(WHEEL_LEVELS, np.int64)
    return timer, entry, slot, level


@compiled
def _wheel_level(x):
    """The wheel level of a tick whose bits differ from the base's in `x` (tick ^ base): the
    index of its highest set bit, over WHEEL_BITS. A float holds a power of two's exponent
    exactly, and any integer below 2**53 exactly (larger ones are shifted first)."""
    if x < WHEEL_SLOTS:
        return 0
    if x >= 2 ** 52:
        return (((np.float64(x >> 26).view(np.int64) >> 52) - 1023) + 26) // WHEEL_BITS
    return ((np.float64(x).view(np.int64) >> 52) - 1023) // WHEEL_BITS


@compiled
def _wheel_place(st, e, base):
    """Link entry e into its slot relative to `base`: at the head of a slot above level 0 (their
    order does not matter), in sequence order in a level-0 slot (one tick)."""
    ent = st.timer_entry
    tick = ent[e, TE_TICK]
    lv = _wheel_level(tick ^ base)
    s = (tick >> (WHEEL_BITS * lv)) & (WHEEL_SLOTS - 1)
    head = st.timer_slot[lv, s, TS_HEAD]
    if lv > 0 or head < 0 or ent[head, TE_SEQ] > ent[e, TE_SEQ]:
        ent[e, TE_NEXT] = head
        st.timer_slot[lv, s, TS_HEAD] = e
        if lv == 0 and head < 0:
            st.timer_slot[0, s, TS_TAIL] = e
    else:
        q = ent[e, TE_SEQ]
        p = st.timer_slot[0, s, TS_TAIL]
        if ent[p, TE_SEQ] > q:
            # poured in out of order (rare): walk to its place
            p = head
            while ent[ent[p, TE_NEXT], TE_SEQ] < q:
                p = ent[p, TE_NEXT]
        ent[e, TE_NEXT] = ent[p, TE_NEXT]
        ent[p, TE_NEXT] = e
        if ent[e, TE_NEXT] < 0:
            st.timer_slot[0, s, TS_TAIL] = e
    st.timer_level[lv] |= 1 << s


@compiled
def _entry_live(st, e):
    """Whether entry e still holds its timer's setting (not cleared or set again since)."""
    i = st.timer_entry[e, TE_TIMER]
    return (st.timer[i, TM_SEQ] == st.timer_entry[e, TE_SEQ]
            and st.timer[i, TM_TICK] != TIMER_OFF)


@compiled
def _entry_free(st, e):
    sy = st.sys[0]
    st.timer_entry[e, TE_NEXT] = sy.tw_free
    sy.tw_free = e


@compiled
def _wheel_collect(st):
    """Drop every stale entry (the pool ran dry); live entries keep their slots and order."""
    ent = st.timer_entry
    for lv in range(WHEEL_LEVELS):
        for s in range(WHEEL_SLOTS):
            e = st.timer_slot[lv, s, TS_HEAD]
            last = -1
            while e >= 0:
                nxt = ent[e, TE_NEXT]
                if _entry_live(st, e):
                    last = e
                else:
                    if last < 0:
                        st.timer_slot[lv, s, TS_HEAD] = nxt
                    else:
                        ent[last, TE_NEXT] = nxt
                    _entry_free(st, e)
                e = nxt
            if lv == 0:
                st.timer_slot[0, s, TS_TAIL] = last
            if st.timer_slot[lv, s, TS_HEAD] < 0:
                st.timer_level[lv] &= ~(1 << s)


@compiled
def timer_set(st, i, tick):
    """Arm timer i for `tick` (at or after the current tick) with a fresh sequence number,
    replacing its previous setting (whose entry goes stale)."""
    sy = st.sys[0]
    seq = sy.q_next_seq
    sy.q_next_seq = seq + 1
    st.timer[i, TM_TICK] = tick
    st.timer[i, TM_SEQ] = seq
    if sy.tw_free < 0:
        _wheel_collect(st)
    e = sy.tw_free
    ent = st.timer_entry
    sy.tw_free = ent[e, TE_NEXT]
    ent[e, TE_TICK] = tick
    ent[e, TE_SEQ] = seq
    ent[e, TE_TIMER] = i
    lv = _wheel_level(tick ^ sy.tw_base)
    if lv == 0:
        # the base's block: append to the tick's list (the largest sequence number so far)
        s = tick & (WHEEL_SLOTS - 1)
        ent[e, TE_NEXT] = -1
        if st.timer_slot[0, s, TS_HEAD] < 0:
            st.timer_slot[0, s, TS_HEAD] = e
        else:
            ent[st.timer_slot[0, s, TS_TAIL], TE_NEXT] = e
        st.timer_slot[0, s, TS_TAIL] = e
        st.timer_level[0] |= 1 << s
    else:
        s = (tick >> (WHEEL_BITS * lv)) & (WHEEL_SLOTS - 1)
        ent[e, TE_NEXT] = st.timer_slot[lv, s, TS_HEAD]
        st.timer_slot[lv, s, TS_HEAD] = e
        st.timer_level[lv] |= 1 << s


@compiled
def timer_clear(st, i):
    """Disarm timer i (its entry goes stale)."""
    st.timer[i, TM_TICK] = TIMER_OFF


@compiled
def timer_peek(st, before):
    """The wheel entry of the earliest armed timer by (tick, seq), or -1 if no timer is armed at or
    before tick `before` (the heap's top; TIMER_OFF: none). Drops stale entries it meets, and
    pours slots down while level 0 is empty and the next slot starts at or before `before` (the
    next event's tick, so the base stays at or before the current tick)."""
    sy = st.sys[0]
    ent = st.timer_entry
    levels = st.timer_level
    while True:
        while levels[0] != 0:
            s = _lowest_bit(levels[0])
            e = st.timer_slot[0, s, TS_HEAD]
            while e >= 0:
                if _entry_live(st, e):
                    st.timer_slot[0, s, TS_HEAD] = e
                    return e
                nxt = ent[e, TE_NEXT]
                _entry_free(st, e)
                e = nxt
            st.timer_slot[0, s, TS_HEAD] = -1
            levels[0] &= ~(1 << s)
        lv = 1
        while lv < WHEEL_LEVELS and levels[lv] == 0:
            lv += 1
        if lv == WHEEL_LEVELS:
            return -1
        s = _lowest_bit(levels[lv])
        # the slot's first tick: the base's digits above this level, the slot's digit, zeros below
        above = WHEEL_BITS * (lv + 1)
        first = s << (WHEEL_BITS * lv)
        if above < 62:
            first |= (sy.tw_base >> above) << above
        if before < first:
            return -1
        # pour the slot down: every tick in it is at or after `first`, which the next event's is too
        sy.tw_base = first
        e = st.timer_slot[lv, s, TS_HEAD]
        st.timer_slot[lv, s, TS_HEAD] = -1
        levels[lv] &= ~(1 << s)
        while e >= 0:
            nxt = ent[e, TE_NEXT]
            if _entry_live(st, e):
                _wheel_place(st, e, first)
            else:
                _entry_free(st, e)
            e = nxt


@compiled
def timer_take(st, e):
    """Take the earliest timer (entry e, which timer_peek returned: the head of a level-0 slot):
    disarm it and free its entry; returns the timer."""
    ent = st.timer_entry
    i = ent[e, TE_TIMER]
    st.timer[i, TM_TICK] = TIMER_OFF
    s = ent[e, TE_TICK] & (WHEEL_SLOTS - 1)
    nxt = ent[e, TE_NEXT]
    st.timer_slot[0, s, TS_HEAD] = nxt
    if nxt < 0:
        st.timer_level[0] &= ~(1 << s)
    _entry_free(st, e)
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
