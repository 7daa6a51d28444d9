"""Event queue: component timers plus a binary min-heap, ordered by (tick, sequence number).

The sequence number is taken from a counter at push time, so two events at the same tick run in
the order they were scheduled: the same config and seed give bit-identical results (DESIGN rule 3).
Each event carries an integer kind (dispatched by the run loop) and two integer arguments; the heap
is one ``[capacity, 5]`` int64 array (columns Q_*), its size and sequence counter live in State.sys.
Sifting moves a hole and writes each entry once (half the stores of swapping); events popped are
counted per kind in State.ev_count (stats system.engine.events.*).

Component timers. Most events are a block's next activation: an SM's next issue cycle, a link
transmitter's next look at its queue, a wire's next packet arrival, a switch input's next
crossbar attempt, a packetizer's next packet. Each block has at most one, and a block woken
earlier than planned must move it. In a heap that leaves the old entry behind as a stale event
(an SM whose TB retried a full hub every few cycles piled up hundreds), so these activations are
timers instead: one (tick, seq) slot per block in State.timer, and a tournament tree
(State.timer_tree: node -> index, tick and sequence number of the earliest timer below it) whose
root is the earliest timer. Setting or clearing a timer takes one walk from its leaf to the root;
each node carries its winner's key, so a step of the walk compares two adjacent rows instead of
fetching two timers from anywhere in State.timer (the walk was 14% of the run loop's time on a
DeepSeek-V3 layer, mostly those fetches: tools/profile_engine.py --annotate), and it stops as soon
as a node's winner and key come out as they were. Nothing is ever stale, and
the heap keeps only one-off events (launches, local completions, MoE-Hub loopback, DAM ready).
The run loop takes whichever of heap top and tree root is earlier by (tick, seq): the same total
order as a single queue. Timer index ranges per block kind are in State.p (tm_*).

Timers set for the current tick skip the tree. A third of the timer settings are for the tick
being processed (a switch input moving a packet to an idle output, a packet queued at an idle
transmitter, a hub with one more response to send): each costs a walk up the tree when it is set
and another when it is taken. Since sequence numbers only grow, the timers set for the current tick
are in (tick, seq) order in the order they are set, so they wait in a FIFO (State.timer_now: timer
index, sequence number) instead, and the run loop takes the earliest of heap top, tree root and
FIFO head by (tick, seq): the same events in the same order (simEvents and every stat unchanged),
two tree walks fewer for each of them. A FIFO entry whose timer was cleared or set again since
(its State.timer row no longer holds that sequence number) is dropped unseen; a timer taken from
the FIFO has no tree leaf to clear. A full FIFO (never, in practice: a timer has at most one live
entry) falls back to the tree.
"""
import numpy as np
from .jit import compiled
from ..components.block import Array, Block, Param, Record, Stat, StatGroup, fields

# Event kinds are declared by the blocks whose handlers they dispatch (``Event`` in each
# component module's BLOCK: EV_SM_ISSUE in components/sm.py, EV_CH_TX in components/nvlink.py...);
# the composition (moehub_arch/composition.py) checks they are unique and dense and names them
# (EVENT_NAMES, the stats system.engine.events.*).

# columns of the heap array State.q
Q_TICK, Q_SEQ, Q_KIND, Q_A0, Q_A1 = range(5)
# columns of State.timer; an unarmed timer has tick TIMER_OFF
TM_TICK, TM_SEQ = 0, 1
TIMER_OFF = 2 ** 62
# columns of State.timer_tree: the node's winner (a timer index) and that timer's tick and sequence
TT_INDEX, TT_TICK, TT_SEQ = 0, 1, 2
# columns of State.timer_now, the FIFO of timers set for the current tick: timer index, sequence
TN_TIMER, TN_SEQ = 0, 1


def _timer_now_shape(cfg):
    """Room for two entries per timer (one live, one dropped-but-not-yet-popped; more falls back
    to the tree, which gives the same order)."""
    from ..composition import timer_layout
    return (2 * max(timer_layout(cfg)[1], 2), 2)


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
        ("tn_head", "first entry of the current tick's timer FIFO (State.timer_now)"),
        ("tn_count", "its entries")),
    arrays=(Array("timer_now", "FIFO of the timers set for the current tick: (timer, sequence)",
                  _timer_now_shape),),
    stats=(StatGroup("system", "engine", (
        Stat("queue_peak", "events", "peak number of pending events in the event queue",
             lambda i: i.st.sys[0].q_peak),
        Stat("events.{v}", "count", "events of kind '{v}' processed (engine.events)",
             lambda i, k: i.st.ev_count[k], each=_event_names),
    )),),
)


def new_timers(count):
    """`count` unarmed timers and their tournament tree (leaves padded to a power of two): row
    `leaves + i` is timer i, row n < leaves the winner of rows 2n and 2n + 1 (ties: the left)."""
    leaves = 1
    while leaves < max(count, 2):
        leaves *= 2
    timer = np.zeros((leaves, 2), np.int64)
    timer[:, TM_TICK] = TIMER_OFF
    tree = np.zeros((2 * leaves, 3), np.int64)
    tree[leaves:, TT_INDEX] = np.arange(leaves)
    tree[:, TT_TICK] = TIMER_OFF
    for node in range(leaves - 1, 0, -1):
        tree[node] = tree[2 * node]
    return timer, tree


@compiled
def timer_set(st, i, tick):
    """Arm timer i for `tick` with a fresh sequence number (replacing its previous setting): in the
    tree, or for the tick being processed in the current tick's FIFO (module docstring)."""
    sy = st.sys[0]
    seq = sy.q_next_seq
    sy.q_next_seq += 1
    st.timer[i, TM_TICK] = tick
    st.timer[i, TM_SEQ] = seq
    cap = st.timer_now.shape[0]
    if tick == sy.q_now and sy.tn_count < cap:
        if st.timer_tree[i + st.timer.shape[0], TT_TICK] != TIMER_OFF:
            _timer_update(st, i, TIMER_OFF, 0)    # it was set for later: out of the tree
        slot = (sy.tn_head + sy.tn_count) % cap
        st.timer_now[slot, TN_TIMER] = i
        st.timer_now[slot, TN_SEQ] = seq
        sy.tn_count += 1
    else:
        _timer_update(st, i, tick, seq)


@compiled
def timer_clear(st, i):
    """Disarm timer i (a FIFO entry of it is dropped when it comes up)."""
    st.timer[i, TM_TICK] = TIMER_OFF
    if st.timer_tree[i + st.timer.shape[0], TT_TICK] != TIMER_OFF:
        _timer_update(st, i, TIMER_OFF, 0)


@compiled
def timer_now_head(st):
    """The timer at the head of the current tick's FIFO, dropping entries of timers cleared or set
    again since; -1 if none."""
    sy = st.sys[0]
    cap = st.timer_now.shape[0]
    while sy.tn_count > 0:
        i = st.timer_now[sy.tn_head, TN_TIMER]
        if (st.timer[i, TM_SEQ] == st.timer_now[sy.tn_head, TN_SEQ]
                and st.timer[i, TM_TICK] != TIMER_OFF):
            return i
        sy.tn_head = (sy.tn_head + 1) % cap
        sy.tn_count -= 1
    return -1


@compiled
def timer_now_take(st):
    """Remove the head of the current tick's FIFO (timer_now_head returned it) and disarm it."""
    sy = st.sys[0]
    st.timer[st.timer_now[sy.tn_head, TN_TIMER], TM_TICK] = TIMER_OFF
    sy.tn_head = (sy.tn_head + 1) % st.timer_now.shape[0]
    sy.tn_count -= 1


@compiled
def _timer_update(st, i, tick, seq):
    """Give timer i's leaf the key (tick, seq) and replay the tournament from it to the root (the
    same winners as comparing the timers themselves: every node holds a copy of its winner's key)."""
    tree = st.timer_tree
    node = i + st.timer.shape[0]
    tree[node, TT_TICK] = tick
    tree[node, TT_SEQ] = seq
    node >>= 1
    while node >= 1:
        a = 2 * node
        b = a + 1
        ta = tree[a, TT_TICK]
        tb = tree[b, TT_TICK]
        if tb < ta or (tb == ta and tree[b, TT_SEQ] < tree[a, TT_SEQ]):
            a = b
        w = tree[a, TT_INDEX]
        t = tree[a, TT_TICK]
        q = tree[a, TT_SEQ]
        if tree[node, TT_INDEX] == w and tree[node, TT_TICK] == t and tree[node, TT_SEQ] == q:
            break   # same winner, same key: nothing above this node changes
        tree[node, TT_INDEX] = w
        tree[node, TT_TICK] = t
        tree[node, TT_SEQ] = q
        node >>= 1


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
