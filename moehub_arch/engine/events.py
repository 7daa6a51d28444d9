"""Event queue: a binary min-heap over parallel numpy arrays, ordered by (tick, sequence number).

The sequence number is taken from a counter at push time, so two events at the same tick run in
the order they were scheduled: the same config and seed give bit-identical results (DESIGN rule 3).
Each event carries an integer kind (dispatched by the run loop) and two integer arguments; the heap
is one ``[capacity, 5]`` int64 array (columns Q_*), its size and sequence counter live in State.sys.
"""
import numpy as np
from .jit import compiled

# event kinds (the run loop dispatches on these)
EV_SM_ISSUE = 0      # a0 = global SM index
EV_KERNEL_START = 1  # a0 = launch index
EV_HUB_TX = 2        # a0 = GPU: the hub packetizer emits its next packet
EV_CH_TX = 3         # a0 = channel: the link transmitter tries to send its head packet
EV_CH_ARRIVE = 4     # a0 = packet, a1 = channel: a packet's tail reached the far end of a link
EV_XBAR = 5          # a0 = channel: switch input port moves head packets across the crossbar
EV_CREDIT = 6        # a0 = channel, a1 = flits: flow-control credits return to the transmitter
EV_LOCAL_DONE = 7    # a0 = TB slot: an asynchronous same-GPU put/get completed
EV_RPM_TX = 8        # a0 = GPU: the MoE-Hub RPM emits its next packet
EV_MOE_LOOPBACK = 9  # a0 = packet, a1 = GPU: an RPM packet to the sending GPU itself arrives
EV_DAM_READY = 10    # a0 = window, a1 = tile index: a tile became claimable
EVENT_NAMES = ("sm_issue", "kernel_start", "hub_tx", "ch_tx", "ch_arrive", "xbar", "credit",
               "local_done", "rpm_tx", "moe_loopback", "dam_ready")

# columns of the heap array State.q
Q_TICK, Q_SEQ, Q_KIND, Q_A0, Q_A1 = range(5)


def new_event_queue(capacity):
    return np.zeros((capacity, 5), np.int64)


def grow_event_queue(q, capacity):
    new = new_event_queue(capacity)
    new[:q.shape[0]] = q
    return new


@compiled
def _less(q, i, j):
    if q[i, Q_TICK] != q[j, Q_TICK]:
        return q[i, Q_TICK] < q[j, Q_TICK]
    return q[i, Q_SEQ] < q[j, Q_SEQ]


@compiled
def _swap(q, i, j):
    for k in range(5):
        q[i, k], q[j, k] = q[j, k], q[i, k]


@compiled
def push(st, tick, kind, a0, a1):
    """Schedule an event. The caller guarantees capacity (the run loop returns to Python to grow
    the heap before it gets within one handler's worth of pushes of full)."""
    q = st.q
    sy = st.sys[0]
    i = sy.q_size
    q[i, Q_TICK] = tick
    q[i, Q_SEQ] = sy.q_next_seq
    q[i, Q_KIND] = kind
    q[i, Q_A0] = a0
    q[i, Q_A1] = a1
    sy.q_next_seq += 1
    sy.q_size = i + 1
    while i > 0:
        parent = (i - 1) >> 1
        if _less(q, i, parent):
            _swap(q, i, parent)
            i = parent
        else:
            break


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
        for k in range(5):
            q[0, k] = q[n, k]
        i = 0
        while True:
            left = 2 * i + 1
            if left >= n:
                break
            child = left
            if left + 1 < n and _less(q, left + 1, left):
                child = left + 1
            if _less(q, child, i):
                _swap(q, child, i)
                i = child
            else:
                break
    return tick, kind, a0, a1
