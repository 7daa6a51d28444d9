"""Streaming multiprocessor: issue arbitration among resident thread blocks.

Model (TB level, as in DESIGN "Fidelity"): each resident thread block is one in-order instruction
stream with its own registers. On every cycle the SM issues up to ``issue_width`` instructions,
picking ready TBs round-robin; an instruction issues only if its functional unit is free. It then
occupies the unit for ``max(ii, ceil(work / throughput))`` cycles (work = bytes for copies, FLOPs for
``mma``, elements for vector ops) and the TB may issue again ``latency`` cycles after that, or when
its memory accesses complete if later. TBs waiting on flags, fences, remote results or a full hub
are not candidates and cost no events until woken.

Memory accesses: the address space of a GPU is its HBM (byte addresses) plus a shared-memory window
(addresses with ``SMEM_ADDR_BIT`` set, relative to the SM's shared memory; ``%smem`` holds the TB's
allocation). Every instruction charges the HBM model for the HBM bytes it reads or writes; shared
memory costs ``smem_latency_cycles`` and LSU throughput. Functional mode computes every result
(word loads/stores, copies, ``mma`` with fp32 accumulation, vector ops); timing mode computes only
what control flow needs (words in the backed control region) and moves no bulk data.

The SM is three modules: this one (the block's declaration and its issue pipeline), the base
instruction interpreter (sm_interpreter.py: what each instruction does, the extensions'
instructions dispatched to their own modules) and the functional numerics (sm_numerics.py);
sm_operands.py holds the operand and access helpers all instructions share.
"""
from ..engine.jit import compiled
from ..engine.clock import align_up, cycle_edge, period_fs
from ..engine.events import SHORTCUT_SM_FOLD
from ..engine.prefetch import prefetch
from ..engine.state import TB_EMPTY, TB_READY, TB_RETIRED, WAIT_NAMES, WAIT_REASON_NAMES
from ..isa.encoding import (ALU_DIV, ALU_REM, SEM, SEM_ALU, SEM_BRANCH, SEM_NOP, SUBOP, UNIT,
                            UNIT_NAMES)
from ..config.keys import key_param
from ..declare import Array, Block, Debug, Event, Param, Record, Stat, StatGroup, Timer, fields
from .sizing import stream_slots_per_sm
from .trace import (ACTIVITY_NAMES, CAT_SM, TR_TB_ACT, TR_TB_EXIT, TR_TB_PLACE, TR_TB_RESUME,
                    TR_TB_WAIT, trace_issue)
from .wakeups import sm_wake
from .sm_interpreter import EV_LOCAL_DONE, execute

EV_SM_ISSUE = 0      # a0 = global SM index: the SM's issue cycle (its component timer)


def check_thread_blocks(sim, out):
    st = sim.state
    out.check(st.tb.state == TB_EMPTY, "thread blocks that did not exit",
              lambda s: f"slot {s} of kernel '{sim.launches[int(st.tb.launch[s])].kernel}'")
    out.empty(st.tb.outstanding, "thread-block slots with operations outstanding",
              lambda s: f"slot {s}", " operation(s)")


def _sms(cfg):
    return cfg.system.num_gpus * cfg.system.gpu.num_sms


# The functional mma's working rows (functional mode only; State.mma_rows): one k step's B row
# and A column as fp32 bit patterns, then that step's products tile. A tile too large for them
# takes the element-by-element loop (sm_numerics.mma_elementwise), which rounds the same way.
MMA_ROWS_F32 = 1 << 16


def _mma_rows_shape(cfg):
    return (MMA_ROWS_F32 // 2,) if cfg.workload.mode == "functional" else (1,)


BLOCK = Block(
    "sm", __doc__.split("\n\n")[0],
    params=(
        key_param("sms_per_gpu", "system.gpu.num_sms"),
        Param("slots_per_sm", "system.gpu.sm.max_resident_tbs, workload.launches[i].warp_groups",
              "streams", "instruction-stream (thread-block or warp-group) slots per SM: "
              "max_resident_tbs, or a launch's warp_groups if larger (sizing.py)",
              stream_slots_per_sm, "derived: the larger of the two"),
        key_param("issue_width", "system.gpu.sm.issue_width"),
        key_param("sm_period_fs", "system.gpu.sm_clock",
                  lambda cfg: period_fs(cfg.system.gpu.sm_clock), unit="fs", how="its period"),
        key_param("smem_bytes", "system.gpu.sm.smem_bytes"),
        key_param("lsu_bytes_per_cycle", "system.gpu.sm.lsu_bytes_per_cycle",
                  how="what the LSU loads of vector instructions with lsu_loads take; other "
                  "instructions take their ISA throughput"),
        key_param("smem_latency_cycles", "system.gpu.sm.smem_latency_cycles"),
    ),
    # Both in whole cache lines, the fields every issue cycle reads first: an issue event scans
    # every slot of its SM (state, pc, ready), one line per slot (a 136-byte record straddled two
    # lines in a quarter of the slots), and reads its SM's record (one line, not two in a third
    # of the SMs); with many GPUs these are out of the caches between an SM's issue events
    records=(Record("tb", "thread-block slots, slots_per_sm per SM", cache_lines=True,
                    first=("state", "pc", "ready", "launch", "outstanding", "progress",
                           "wait_start", "smem_base")),
             Record("sm", "SMs", cache_lines=True,
                    first=("next_issue", "rr", "insts", "resident"))),
    arrays=(Array("mma_rows", "the functional mma's working rows (functional mode; fp32 in "
                  "int64 words): a k step's B row, A column and products tile", _mma_rows_shape),),
    fields=fields(
        "tb",
        ("state", "TB_* (engine.state)"), ("pc", "absolute program counter"),
        ("ready", "tick from which the TB may issue again"),
        ("launch", "launch index of the resident TB, -1 if empty"),
        ("outstanding", "asynchronous operations not yet completed (fence waits for 0)"),
        ("wait_addr", "flag-wait address (wait.*)"), ("wait_cmp", "flag-wait comparison"),
        ("wait_value", "flag-wait operand"),
        ("wait_end", "end of the flag range a wait.all watches (wait_addr is its first word not "
                     "yet satisfied; wait_addr + 8 for a single-word wait)"),
        ("wait_ref", "wait.lanes: address of the expected value of the word at wait_addr (the "
                     "lane's own operand; wait_value holds it), -1 for a wait on one value"),
        ("wait_start", "tick at which the current wait began (wait-time stats)"),
        ("smem_base", "the TB's shared-memory allocation within its SM"), ("smem_bytes", "its size"),
        ("progress", "tick of the TB's start or its last instruction touching memory, the hub or "
                     "the links (livelock detection, watchdog.LivelockWatchdog)"),
        init={"state": TB_EMPTY, "launch": -1, "wait_ref": -1})
    + fields(
        "sm",
        ("next_issue", "tick of the scheduled issue event, -1 while the SM sleeps"),
        ("rr", "round-robin pointer over TB slots (issue arbitration)"),
        ("resident", "resident TB count"),
        ("active_since", "tick at which the SM last went from 0 to >=1 resident TBs"),
        ("insts", "instructions issued"), ("tbs_launched", "thread blocks placed"),
        ("active_ticks", "time with at least one resident thread block"),
        init={"next_issue": -1}),
    stats=(
        StatGroup("gpu_total", "", (
            Stat("insts_issued", "instructions", "instructions issued by this GPU's SMs",
                 lambda i: i.st.sm.insts[i.g * int(i.p.sms_per_gpu):
                                         (i.g + 1) * int(i.p.sms_per_gpu)].sum()),)),
        StatGroup("sm", "", (
            Stat("insts_issued", "instructions", "instructions issued", "insts"),
            Stat("tbs_launched", "count", "thread blocks placed on this SM", "tbs_launched"),
            Stat("active_ticks", "ps", "time with at least one resident thread block",
                 "active_ticks"),
            Stat("{v}_busy_ticks", "ps", "time the {v} unit was occupied",
                 lambda i, k: i.st.sm_unit_busy[i.index, k], each=UNIT_NAMES),
            Stat("wait_{v}_ticks", "ps", "thread-block time spent waiting ({v}), summed over TBs",
                 lambda i, k: i.st.sm_wait[i.index, k], each=WAIT_REASON_NAMES),
        )),
    ),
    events=(Event("sm_issue", EV_SM_ISSUE, "an SM's issue cycle"),
            Event("local_done", EV_LOCAL_DONE, "an asynchronous same-GPU put/get completed")),
    timers=(Timer("sm", EV_SM_ISSUE, _sms, "one per SM: its next issue cycle"),),
    checks=(check_thread_blocks,),
    debug=(Debug("SM", CAT_SM, (TR_TB_PLACE, TR_TB_ACT, TR_TB_WAIT, TR_TB_RESUME, TR_TB_EXIT),
                 describe={TR_TB_PLACE: lambda n, ident, v0, v1: (
                               n.slot(ident), f"TB {v1} of kernel '{n.kernel(v0)}' placed"),
                           TR_TB_ACT: lambda n, ident, v0, v1: (
                               n.slot(ident), f"issues {ACTIVITY_NAMES[v0]} instructions"),
                           TR_TB_WAIT: lambda n, ident, v0, v1: (
                               n.slot(ident), f"blocks: {WAIT_NAMES.get(v0, v0)}"),
                           TR_TB_RESUME: lambda n, ident, v0, v1: (
                               n.slot(ident), f"ready again (waited on {WAIT_REASON_NAMES[v0]})"),
                           TR_TB_EXIT: lambda n, ident, v0, v1: (
                               n.slot(ident), f"exits (kernel '{n.kernel(v0)}')")}),),
)


# ---- issue -------------------------------------------------------------------------------------

@compiled
def sm_issue(st, sm, tick):
    """EV_SM_ISSUE: issue up to issue_width instructions from ready TBs, then sleep or re-arm.

    Exact shortcut sm_fold (docs/engine_order.md): when nothing outside the SM can change or see
    what its next issue cycle does - every TB of the SM ready or gone (none waits on memory
    events, a flag, the hub or a fence, so no other event can wake one), the TBs that could issue
    then only have register-only instructions (ALU but division, branch, nop: they read and
    write the TB's registers and the SM's own counters), and a TB placed from now on cannot start
    by then - that cycle is issued in this event, as its own event would issue it, and so on."""
    if st.sm[sm].next_issue != tick:
        return  # superseded by an earlier activation
    st.sm[sm].next_issue = -1
    T = st.p[0].slots_per_sm
    P = st.p[0].sm_period_fs
    cyc = (tick * 1000 + P - 1) // P
    fold_before = -1   # issue cycles before this tick may be folded in (-1: none)
    if st.p[0].shortcuts & SHORTCUT_SM_FOLD and not st.p[0].trace_mask & CAT_SM:
        # a TB placed from now on starts tb_launch_cycles after the next edge at the earliest
        fold_before = cycle_edge(cyc + st.p[0].tb_launch_cycles, P)
        limit = st.sys[0].tick_limit
        if limit >= 0 and limit < fold_before:
            fold_before = limit + 1
    while True:
        nxt = _issue_cycle(st, sm, tick, cyc)
        if nxt < 0:
            return
        if nxt <= tick:
            nxt = cycle_edge(cyc + 1, P)
        nxt = align_up(nxt, P)   # the cycle edge the SM's timer would be set for (sm_wake)
        if nxt >= fold_before or st.sys[0].err_code != 0 or not _foldable(st, sm, nxt):
            sm_wake(st, sm, nxt)
            return
        tick = nxt
        cyc = (tick * 1000 + P - 1) // P


@compiled
def prefetch_issue(st, sm):
    """Start loading what an issue event of SM sm reads first: its record and the first line of
    each thread-block slot's (at most eight: the scan's state, pc and ready); the run loop calls
    it for the event that comes next (a hint: no value changes, engine/prefetch.py)."""
    T = st.p[0].slots_per_sm
    prefetch(st.sm, sm)
    for j in range(min(T, 8)):
        prefetch(st.tb, sm * T + j)


@compiled
def _foldable(st, sm, tick):
    """Whether SM sm's issue cycle at `tick` can run now (sm_fold): every TB slot empty, retired
    or ready, and each TB that could issue at `tick` at a register-only instruction."""
    T = st.p[0].slots_per_sm
    for j in range(T):
        slot = sm * T + j
        state = st.tb[slot].state
        if state == TB_EMPTY or state == TB_RETIRED:
            continue
        if state != TB_READY:
            return False
        pc = st.tb[slot].pc
        if st.tb[slot].ready > tick or st.sm_unit_free[sm, st.code[pc, UNIT]] > tick:
            continue
        sem = st.code[pc, SEM]
        if sem == SEM_ALU:
            sub = st.code[pc, SUBOP]
            if sub == ALU_DIV or sub == ALU_REM:
                return False   # may raise a runtime error, which stops the run at its tick
        elif sem != SEM_BRANCH and sem != SEM_NOP:
            return False
    return True


@compiled
def _issue_cycle(st, sm, tick, cyc):
    """One issue cycle of SM sm at `tick`: issue up to issue_width instructions from ready TBs;
    returns when the SM can issue next (-1: no TB is ready)."""
    T = st.p[0].slots_per_sm
    issued = 0
    start = st.sm[sm].rr
    for k in range(T):
        j = (start + k) % T
        slot = sm * T + j
        if st.tb[slot].state != TB_READY or st.tb[slot].ready > tick:
            continue
        unit = st.code[st.tb[slot].pc, UNIT]
        if st.sm_unit_free[sm, unit] > tick:
            continue
        pc = st.tb[slot].pc
        insts = st.sm[sm].insts
        execute(st, slot, sm, tick, cyc)
        if st.sm[sm].insts != insts:   # issued (not a retry: exit waiting for puts, a full hub)
            st.code_issued[pc] += 1    # where the issue events go (tools/profile_issue.py)
        trace_issue(st, slot, unit, tick)
        issued += 1
        st.sm[sm].rr = (j + 1) % T
        if issued >= st.p[0].issue_width or st.sys[0].err_code != 0:
            break
    nxt = -1
    for j in range(T):
        slot = sm * T + j
        if st.tb[slot].state == TB_READY:
            t = st.tb[slot].ready
            u = st.sm_unit_free[sm, st.code[st.tb[slot].pc, UNIT]]
            if u > t:
                t = u
            if nxt < 0 or t < nxt:
                nxt = t
    return nxt
