"""Event records for timelines and debug output: compiled hooks that cost one branch when off.

Components call the inline hooks below at their state transitions (a thread block placed, issuing
compute or communication, blocked, resumed, exited; a kernel starting and ending; a packet leaving
a link transmitter, crossing a switch, leaving or entering a hub; MoE-Hub rows and tiles). Each
hook tests one bit of ``State.p.trace_mask`` (0 unless a timeline or debug flags asked for that
category) and, only when set, appends one row to the bounded record buffer ``State.trace``:

    [tick, kind (TR_*), id (TB slot, channel, GPU or launch), v0, v1]

Python owns everything else (moehub_arch/trace/): it turns categories on and off at simulated
ticks (between batches, where the loop pauses exactly), and drains the buffer between batches.
When the buffer passes ``trace_limit`` rows the run loop returns to Python to have it drained, the
way it returns to grow the event queue; the limit leaves room for the most records one event can
write, so no record is lost. Recording writes only these arrays: simulated results are the same
with or without it.
"""
from ..engine.jit import compiled, inline

from ..engine.state import TB_READY
from ..isa.encoding import UNIT_COMM, UNIT_LSU, UNIT_TENSOR, UNIT_VECTOR
from ..declare import Block, Param, fields

# categories (bits of trace_mask); moehub_arch/trace/records.py names them for users
CAT_SM = 1        # thread-block residency, activity and waits
CAT_LAUNCH = 2    # kernel launches start / end
CAT_NVLINK = 4    # packets transmitted on a link direction
CAT_SWITCH = 8    # packets crossing a switch crossbar
CAT_HUB = 16      # address-centric hub: packets sent and received
CAT_RPM = 32      # MoE-Hub RPM packets
CAT_AAU = 64      # MoE-Hub AAU slot allocations and stalls
CAT_DAM = 128     # MoE-Hub DAM tiles ready and claimed

# record kinds (column TR_KIND) and what id / v0 / v1 hold
TR_TB_PLACE = 0      # slot; launch, TB index
TR_TB_ACT = 1        # slot; ACT_* (what the TB issues now)
TR_TB_WAIT = 2       # slot; TB_* wait state
TR_TB_RESUME = 3     # slot
TR_TB_EXIT = 4       # slot; launch
TR_LAUNCH_START = 5  # launch; GPU
TR_LAUNCH_END = 6    # launch; GPU
TR_LINK_TX = 7       # channel; packet kind, payload bytes
TR_XBAR = 8          # input channel; output channel, destination GPU
TR_HUB_TX = 9        # GPU; packet kind, destination GPU
TR_HUB_RX = 10       # GPU; packet kind, source GPU
TR_RPM_TX = 11       # GPU; destination GPU, payload bytes (0: end-of-stream marker)
TR_AAU_ALLOC = 12    # GPU; expert, window slot (monotonic row index)
TR_AAU_STALL = 13    # GPU; source GPU, packets waiting in the AAU
TR_DAM_READY = 14    # GPU; window, tile index
TR_DAM_CLAIM = 15    # GPU; expert, tile index
TR_TICK, TR_KIND, TR_ID, TR_V0, TR_V1 = range(5)
TRACE_COLUMNS = 5

# thread-block activities (TR_TB_ACT): the class of the last instruction issued; ALU and control
# instructions do not change it (loop bookkeeping between two mma is still "computing")
ACT_RUN, ACT_MEMORY, ACT_COMPUTE, ACT_COMM = range(4)
ACTIVITY_NAMES = {ACT_RUN: "run", ACT_MEMORY: "memory", ACT_COMPUTE: "compute",
                  ACT_COMM: "communicate"}   # their names in timelines and debug output

# The recorder's own state; each block declares its flag, category and record kinds (Debug).
BLOCK = Block(
    "trace", "event records for timelines and debug output (this module; moehub_arch/trace/)",
    params=(
        Param("trace_mask", "debug.flags, trace.components", "bitmask",
              "categories recorded now (CAT_*); 0: "
              "off, set by Python between batches", None, "derived: set at run time by trace/"),
        Param("trace_limit", "", "records", "fill level of State.trace that returns to Python",
              None, "derived: set at run time by trace/ from the buffer size"),
    ),
    fields=fields("sys", ("trace_n", "records in State.trace"),
                  ("trace_full", "1: the buffer passed trace_limit, the loop returns to drain it"),
                  ("trace_lost", "records lost (never, by construction: checked by tests)"))
    + fields("tb", ("trace_act", "activity last recorded for the timeline (ACT_*)")),
)


@compiled
def trace_record(st, kind, ident, v0, v1, tick):
    """Append one record; ask the run loop to return to Python once the buffer is nearly full."""
    sy = st.sys[0]
    n = sy.trace_n
    if n >= st.trace.shape[0]:
        sy.trace_lost += 1   # cannot happen while trace_limit leaves one event's worth of room
        return
    st.trace[n, TR_TICK] = tick
    st.trace[n, TR_KIND] = kind
    st.trace[n, TR_ID] = ident
    st.trace[n, TR_V0] = v0
    st.trace[n, TR_V1] = v1
    sy.trace_n = n + 1
    if n + 1 >= st.p[0].trace_limit:
        sy.trace_full = 1


@inline
def trace_event(st, category, kind, ident, v0, v1, tick):
    """Record an event of `category` if that category is being traced."""
    if st.p[0].trace_mask & category:
        trace_record(st, kind, ident, v0, v1, tick)


@inline
def trace_tb(st, slot, kind, v0, v1, tick):
    """A thread block was placed, blocked, resumed or exited: it is running scalar code next."""
    if st.p[0].trace_mask & CAT_SM:
        st.tb[slot].trace_act = ACT_RUN
        trace_record(st, kind, slot, v0, v1, tick)


@inline
def trace_issue(st, slot, unit, tick):
    """A thread block issued an instruction on `unit` (called after it executed)."""
    if st.p[0].trace_mask & CAT_SM:
        _activity(st, slot, unit, tick)


@compiled
def _activity(st, slot, unit, tick):
    tb = st.tb[slot]
    if tb.state != TB_READY:
        return   # the instruction blocked the TB (recorded as a wait) or ended it
    if unit == UNIT_TENSOR or unit == UNIT_VECTOR:
        act = ACT_COMPUTE
    elif unit == UNIT_COMM:
        act = ACT_COMM
    elif unit == UNIT_LSU:
        act = ACT_MEMORY
    else:
        return
    if act != tb.trace_act:
        tb.trace_act = act
        trace_record(st, TR_TB_ACT, slot, act, 0, tick)
