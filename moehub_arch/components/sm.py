"""Streaming multiprocessor: issue arbitration among resident thread blocks and instruction semantics.

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
"""
import math

import numpy as np
from ..engine.jit import compiled, inline

from ..engine.clock import align_up, cycle_at_or_after, cycle_edge
from ..engine.clock import period_fs
from ..engine.events import SHORTCUT_SM_FOLD, push
from ..engine.state import (ERR_ADDR_RANGE, ERR_BAD_GPU, ERR_BAD_SIZE, ERR_DIV_ZERO,
                            ERR_MISALIGNED, ERR_MOE_AFTER_EOS, ERR_MOE_EXPERT, ERR_MOE_RELEASE,
                            ERR_MOE_ROW_SIZE, ERR_MOE_CLAIM_LAUNCH, ERR_RED_REMOTE, ERR_MULTIMEM_ADDR, ERR_REG_RANGE,
                            ERR_DY_COUNT, ERR_DY_ROW, ERR_DY_TARGET,
                            ERR_ROWSP_ID, ERR_ROWSP_REGISTER, ERR_ROWSP_ROW, ERR_UNBACKED_WORD,
                            ERR_MULTI_EMPTY, ERR_MULTI_GPUS, ERR_MULTI_MANY, TB_READY, TB_RETIRED,
                            TB_WAIT_CLAIM,
                            TB_WAIT_FENCE, TB_WAIT_FLAG, TB_WAIT_HUB, TB_WAIT_REMOTE, WAIT_FENCE,
                            WAITLIST_FLAG, WAITLIST_HUB, TB_EMPTY, WAIT_REASON_NAMES)
from ..isa.encoding import (ATOM_RED_ADD, NUM_GENERAL_REGS, ALU_ADD, ALU_AND, ALU_DIV, ALU_MAX, ALU_MIN, ALU_MOV, ALU_MUL, ALU_OR,
                            ALU_REM, ALU_SETEQ, ALU_SETGT, ALU_SETLE, ALU_SETLT,
                            ALU_SETNE, ALU_SHL, ALU_SHR, ALU_SUB, ALU_XOR, DT_BF16, II, IMM,
                            LAT, OP0, REG_CLOCK, REG_TICK, SEM, SEM_ALU, SEM_ATOM, SEM_BRANCH, SEM_NOP,
                            SEM_COPY, SEM_COPY2D, SEM_EXIT, SEM_FENCE, SEM_FLAG_SET, SEM_GET,
                            SEM_LD, SEM_MMA, SEM_PUT, SEM_SLEEP, SEM_ST, SEM_VEC, SEM_WAIT,
                            SEM_CLAIM, SEM_NOTIFY, SEM_SEND_EXPERT, SEM_SEND_HOME, NOTIFY_EOS,
                            SEM_ROWSP_MALLOC, SEM_ST_ROWSP, SEM_SEND_EXPERTS, SEM_ST_ROWSP_EXPERTS, ROWSP_NOP,
                            SMEM_ADDR_BIT, SUBOP, THR, UNIT, UNIT_LSU, DTYPE, DTYPE_DST_SHIFT, DTYPE_LSU_LOADS, DTYPE_SRC_MASK, MMA_A_L2, MMA_B_L2, MMA_L2, MMA_RA, MMA_RA_B_L2, MMA_BT_B_L2, VEC_ADD,
                            VEC_AXPY, VEC_CVT, VEC_MUL, PUT_SM, PUT_ADD_BF16,
                            VEC_SILU_MUL, VEC_ZERO, VEC_SUB, VEC_MAX, VEC_EXP, VEC_RSQRT,
                            VEC_ROW_MAX, VEC_ROW_SUM, VEC_ROW_SUMSQ, VEC_ROW_ADD, VEC_ROW_SUB,
                            VEC_ROW_MUL, VEC_ROW_DIV, VEC_COL_ADD, VEC_COL_MUL, VEC_FIRST_ROWWISE,
                            VEC_LAST_ROWWISE, VEC_DSILU_MUL, MMA_AT, MMA_BT)
from .elements import load_f32 as _load_f32, store_f32 as _store_f32
from .hbm import (copy_overlapping, hbm_access, hbm_access_paced, hbm_backed,
                  move_bytes, raise_error, read_word, update_bytes_bf16, write_word)
from .l2 import l2_operand_read_span
from .hub import (REQ_ATOM, REQ_DY_LD, REQ_DY_ST, REQ_GET, REQ_MM_LD, REQ_MM_RED, REQ_MM_ST, REQ_PUT, REQ_STORE,
                  atomic_ticks, hub_room, hub_submit)
from .nvls import multimem_element_bytes, multimem_object, multimem_route_peer
from .dysharp import dymultimem_object, dysharp_stage
from .cais_merge import cais_element_bytes, cais_group, cais_sync_peer
from .hub import REQ_CAIS_LD, REQ_CAIS_RED, REQ_CAIS_SYNC
from ..engine.state import ERR_CAIS_ADDR, ERR_CW_COUNTER, WAIT_NAMES
from ..isa.encoding import CAIS_LD, CAIS_SYNC, SEM_CAIS
from .moehub.aau import aau_release_entries, aau_retry, record_address, slot_address
from .moehub.dam import CLAIM_WAIT, dam_block_exited, dam_claim, dam_release
from .moehub.rpm import (rpm_accept, rpm_accept_experts, rpm_accept_rowsp, rpm_end_of_stream,
                         stream_target)
from .scheduler import block_exit
from .sizing import stream_slots_per_sm
from .trace import TR_TB_WAIT, trace_issue, trace_tb
from .waiters import add_waiter, compare, notify_stores
from .wakeups import sm_wake, tb_resume
from ..declare import Array, Block, Debug, Event, Param, Record, Stat, StatGroup, Timer, fields
from .trace import ACTIVITY_NAMES, CAT_SM, TR_TB_ACT, TR_TB_EXIT, TR_TB_PLACE, TR_TB_RESUME
from ..isa.encoding import MM_DY_LD_REDUCE, MM_DY_ST, MM_LD_REDUCE, MM_RED, SEM_MULTIMEM, UNIT_NAMES
from ..isa.encoding import CMP_GE, SEM_PUT_COUNTED, SEM_WAIT_COUNT
from .counted_write import (counted_local_put, counted_put_issued, counted_wait_issued,
                            counter_add, counter_ok)
from .nic import rdma_message

EV_SM_ISSUE = 0      # a0 = global SM index: the SM's issue cycle (its component timer)
EV_LOCAL_DONE = 6    # a0 = TB slot: an asynchronous same-GPU put/get completed


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
# takes the element-by-element loop (_mma_elementwise), which rounds the same way.
MMA_ROWS_F32 = 1 << 16


def _mma_rows_shape(cfg):
    return (MMA_ROWS_F32 // 2,) if cfg.workload.mode == "functional" else (1,)


BLOCK = Block(
    "sm", __doc__.split("\n\n")[0],
    params=(
        Param("sms_per_gpu", "system.gpu.num_sms", "SMs", "SMs per GPU",
              lambda cfg: cfg.system.gpu.num_sms, "config: system.gpu.num_sms"),
        Param("slots_per_sm", "system.gpu.sm.max_resident_tbs", "streams",
              "instruction-stream (thread-block or warp-group) slots per SM: max_resident_tbs, or "
              "a launch's warp_groups if larger (sizing.py)", stream_slots_per_sm,
              "config: system.gpu.sm.max_resident_tbs; workload.launches[].warp_groups"),
        Param("issue_width", "system.gpu.sm.issue_width", "instructions/cycle",
              "instructions issued per SM cycle", lambda cfg: cfg.system.gpu.sm.issue_width,
              "config: system.gpu.sm.issue_width"),
        Param("sm_period_fs", "system.gpu.sm_clock", "fs", "SM clock period",
              lambda cfg: period_fs(cfg.system.gpu.sm_clock), "config: system.gpu.sm_clock"),
        Param("smem_bytes", "system.gpu.sm.smem_bytes", "bytes", "shared memory per SM",
              lambda cfg: cfg.system.gpu.sm.smem_bytes, "config: system.gpu.sm.smem_bytes"),
        Param("lsu_bytes_per_cycle", "system.gpu.sm.lsu_bytes_per_cycle", "bytes/cycle",
              "load/store unit bytes per SM cycle (the LSU loads of vector instructions with "
              "lsu_loads; other instructions take it from their ISA throughput)",
              lambda cfg: cfg.system.gpu.sm.lsu_bytes_per_cycle,
              "config: system.gpu.sm.lsu_bytes_per_cycle"),
        Param("smem_latency_cycles", "system.gpu.sm.smem_latency_cycles", "SM cycles",
              "shared-memory load latency", lambda cfg: cfg.system.gpu.sm.smem_latency_cycles,
              "config: system.gpu.sm.smem_latency_cycles"),
    ),
    records=(Record("tb", "thread-block slots, slots_per_sm per SM"), Record("sm", "SMs")),
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
        ("wait_start", "tick at which the current wait began (wait-time stats)"),
        ("smem_base", "the TB's shared-memory allocation within its SM"), ("smem_bytes", "its size"),
        ("progress", "tick of the TB's start or its last instruction touching memory, the hub or "
                     "the links (livelock detection, watchdog.LivelockWatchdog)"),
        init={"state": TB_EMPTY, "launch": -1})
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

# Semantics that neither touch memory, the hub or the links nor end the thread block: a TB that
# issues only these for run.livelock_interval is reported as livelocked (watchdog.py). Every other
# semantic stamps the TB's `progress` tick when it issues: one shift, test and store per
# instruction. New semantics count as progress unless added here (never a false report). `sleep`
# is not idle: a sleeping TB waits for time as others wait for a flag (a deliberate back-off);
# it stamps its wake-up tick.
IDLE_SEMANTICS = (1 << SEM_NOP) | (1 << SEM_ALU) | (1 << SEM_BRANCH) | (1 << SEM_FENCE)


# ---- operands --------------------------------------------------------------------------------

@compiled
def _operand(st, slot, row, i, tick, cyc):
    if (row[IMM] >> i) & 1:
        return row[OP0 + i]
    r = row[OP0 + i]
    if r == REG_CLOCK:
        return cyc
    if r == REG_TICK:
        return tick
    return st.regs[slot, r]


@compiled
def _is_smem(addr):
    return addr >= SMEM_ADDR_BIT


@compiled
def _check_range(st, slot, addr, nbytes):
    """True if [addr, addr+nbytes) is a legal HBM range or lies inside the TB's shared memory."""
    if nbytes < 0:
        raise_error(st, ERR_BAD_SIZE, slot, nbytes)
        return False
    if _is_smem(addr):
        off = addr - SMEM_ADDR_BIT
        if off < st.tb[slot].smem_base or off + nbytes > st.tb[slot].smem_base + st.tb[slot].smem_bytes:
            raise_error(st, ERR_ADDR_RANGE, slot, addr)
            return False
        return True
    if addr < 0 or addr + nbytes > st.p[0].hbm_capacity:
        raise_error(st, ERR_ADDR_RANGE, slot, addr)
        return False
    return True


@compiled
def _check_hbm_word(st, slot, addr):
    """True if addr is an aligned, backed 8-byte word of HBM (flags and atomics live there)."""
    if addr % 8 != 0:
        raise_error(st, ERR_MISALIGNED, slot, addr)
        return False
    if _is_smem(addr) or not _check_range(st, slot, addr, 8):
        raise_error(st, ERR_ADDR_RANGE, slot, addr)
        return False
    if not hbm_backed(st, addr, 8):
        raise_error(st, ERR_UNBACKED_WORD, slot, addr)
        return False
    return True


@inline
def _bytes(st, g, sm, addr, nbytes):
    """Functional storage for a range: a byte view, or an empty view where storage is not backed.
    (Inlined: a compiled function may not return a view, see engine/jit.py.)"""
    if _is_smem(addr):
        off = addr - SMEM_ADDR_BIT
        if st.smem.shape[1] >= off + nbytes:
            return st.smem[sm, off:off + nbytes]
        return st.smem[sm, 0:0]
    if hbm_backed(st, addr, nbytes):
        return st.hbm_mem[g, addr:addr + nbytes]
    return st.hbm_mem[g, 0:0]


@compiled
def _access(st, g, addr, nbytes, tick, is_write):
    """Timing of a bulk access: HBM via the channel model, shared memory by its fixed latency."""
    if _is_smem(addr):
        return tick + cycle_edge(st.p[0].smem_latency_cycles, st.p[0].sm_period_fs)
    return hbm_access(st, g, addr, nbytes, tick, is_write)


@compiled
def _access_paced(st, g, addr, nbytes, tick, is_write, pace):
    """_access for an instruction's operand traffic, streamed over its unit occupancy `pace`
    (ticks): TMA / load-store pipelines fetch as the unit consumes (components/hbm.py)."""
    if _is_smem(addr):
        return tick + cycle_edge(st.p[0].smem_latency_cycles, st.p[0].sm_period_fs)
    return hbm_access_paced(st, g, addr, nbytes, tick, is_write, pace)


@compiled
def _pace_ticks(st, row, work):
    """How long the instruction's unit works on `work` units (ceil(work / throughput) cycles, as
    its occupancy below), in ticks: the time its memory traffic is paced over."""
    thr = row[THR]
    if thr <= 0 or work <= 0:
        return 0
    return cycle_edge((work + thr - 1) // thr, st.p[0].sm_period_fs)


@compiled
def _silu(x):
    # in float64, rounded once to fp32: libm's exp gives the same double in both engines, and
    # the NumPy reference can reproduce it (float32 exp implementations differ in the last ulp)
    xd = np.float64(x)
    return np.float32(xd / (1.0 + np.exp(-xd)))


@compiled
def _dsilu(x):
    # silu'(x) = s (1 + x (1 - s)), s = 1 / (1 + exp(-x)): in float64, rounded once to fp32 (as
    # _silu; reference.dsilu reproduces it)
    xd = np.float64(x)
    s = 1.0 / (1.0 + np.exp(-xd))
    return np.float32(s * (1.0 + xd * (1.0 - s)))


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
        _execute(st, slot, sm, tick, cyc)
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


@compiled
def local_done(st, slot, tick):
    """EV_LOCAL_DONE: an asynchronous same-GPU put/get finished."""
    st.tb[slot].outstanding -= 1
    if st.tb[slot].outstanding == 0 and st.tb[slot].state == TB_WAIT_FENCE:
        tb_resume(st, slot, tick, WAIT_FENCE)


@compiled
def _block(st, slot, state, tick):
    st.tb[slot].state = state
    st.tb[slot].wait_start = tick
    trace_tb(st, slot, TR_TB_WAIT, state, 0, tick)


@compiled
def _execute(st, slot, sm, tick, cyc):
    """Execute the instruction at the TB's pc (all semantics; dispatch by integer semantic id)."""
    pc = st.tb[slot].pc
    row = st.code[pc]
    sem = row[SEM]
    sub = row[SUBOP]
    g = sm // st.p[0].sms_per_gpu
    P = st.p[0].sm_period_fs
    occ = row[II]          # unit occupancy, cycles
    lat = row[LAT]         # extra cycles until the TB may issue again
    work = 0               # work units for size-dependent instructions
    mem_done = tick        # completion of memory accesses
    next_pc = pc + 1
    if not (IDLE_SEMANTICS >> sem) & 1:
        st.tb[slot].progress = tick

    if sem == SEM_ALU:
        a = _operand(st, slot, row, 1, tick, cyc)
        b = _operand(st, slot, row, 2, tick, cyc)
        if sub == ALU_MOV:
            v = a
        elif sub == ALU_ADD:
            v = a + b
        elif sub == ALU_SUB:
            v = a - b
        elif sub == ALU_MUL:
            v = a * b
        elif sub == ALU_DIV or sub == ALU_REM:
            if b == 0:
                raise_error(st, ERR_DIV_ZERO, slot, a)
                return
            # C semantics (truncate toward zero), the same in both engines
            qa = abs(a) // abs(b)
            if (a < 0) != (b < 0):
                qa = -qa
            v = qa if sub == ALU_DIV else a - qa * b
        elif sub == ALU_AND:
            v = a & b
        elif sub == ALU_OR:
            v = a | b
        elif sub == ALU_XOR:
            v = a ^ b
        elif sub == ALU_SHL:
            v = a << b
        elif sub == ALU_SHR:
            v = a >> b
        elif sub == ALU_MIN:
            v = min(a, b)
        elif sub == ALU_MAX:
            v = max(a, b)
        elif sub == ALU_SETLT:
            v = 1 if a < b else 0
        elif sub == ALU_SETLE:
            v = 1 if a <= b else 0
        elif sub == ALU_SETEQ:
            v = 1 if a == b else 0
        elif sub == ALU_SETNE:
            v = 1 if a != b else 0
        elif sub == ALU_SETGT:
            v = 1 if a > b else 0
        else:  # ALU_SETGE
            v = 1 if a >= b else 0
        st.regs[slot, row[OP0]] = v

    elif sem == SEM_BRANCH:
        a = _operand(st, slot, row, 0, tick, cyc)
        b = _operand(st, slot, row, 1, tick, cyc)
        if compare(sub, a, b):
            next_pc = row[OP0 + 2]

    elif sem == SEM_LD or sem == SEM_ST:
        ai = 1 if sem == SEM_LD else 0
        addr = _operand(st, slot, row, ai, tick, cyc) + row[OP0 + ai + 1]
        if addr % 8 != 0:
            raise_error(st, ERR_MISALIGNED, slot, addr)
            return
        if not _check_range(st, slot, addr, 8):
            return
        view = _bytes(st, g, sm, addr, 8)
        if view.shape[0] == 0:
            raise_error(st, ERR_UNBACKED_WORD, slot, addr)
            return
        if sem == SEM_LD:
            nw = 1 << sub                  # ld.vN: N words into dst .. dst + N - 1, one access
            if row[OP0] + nw > NUM_GENERAL_REGS:
                raise_error(st, ERR_REG_RANGE, slot, row[OP0])
                return
            if nw > 1:
                if not _check_range(st, slot, addr, 8 * nw):
                    return
                view = _bytes(st, g, sm, addr, 8 * nw)
                if view.shape[0] == 0:
                    raise_error(st, ERR_UNBACKED_WORD, slot, addr)
                    return
            words = view.view(np.int64)
            for i in range(nw):
                st.regs[slot, row[OP0] + i] = words[i]
            mem_done = _access(st, g, addr, 8 * nw, tick, False)
        else:
            words = view.view(np.int64)
            words[0] = _operand(st, slot, row, 2, tick, cyc)
            visible = _access(st, g, addr, 8, tick, True)
            if not _is_smem(addr):
                notify_stores(st, g, addr, 8, visible)
            # stores are posted: the TB does not wait for the memory write

    elif sem == SEM_COPY or sem == SEM_COPY2D:
        dst = _operand(st, slot, row, 0, tick, cyc)
        src = _operand(st, slot, row, 1, tick, cyc)
        if sem == SEM_COPY:
            rows = 1
            row_bytes = _operand(st, slot, row, 2, tick, cyc)
            dst_stride = row_bytes
            src_stride = row_bytes
        else:
            rows = _operand(st, slot, row, 2, tick, cyc)
            row_bytes = _operand(st, slot, row, 3, tick, cyc)
            dst_stride = _operand(st, slot, row, 4, tick, cyc)
            src_stride = _operand(st, slot, row, 5, tick, cyc)
        if rows < 0 or row_bytes < 0:
            raise_error(st, ERR_BAD_SIZE, slot, rows * row_bytes)
            return
        if rows > 0 and row_bytes > 0:
            span_d = (rows - 1) * dst_stride + row_bytes
            span_s = (rows - 1) * src_stride + row_bytes
            if not _check_range(st, slot, dst, span_d) or not _check_range(st, slot, src, span_s):
                return
            pace = _pace_ticks(st, row, rows * row_bytes)
            if rows == 1 or (dst_stride == row_bytes and src_stride == row_bytes):
                # contiguous: one access per side
                total = rows * row_bytes
                rd = _access_paced(st, g, src, total, tick, False, pace)
                wr = _access_paced(st, g, dst, total, tick, True, pace)
                mem_done = max(rd, wr)
            else:
                for r in range(rows):
                    rd = _access_paced(st, g, src + r * src_stride, row_bytes, tick, False, pace)
                    wr = _access_paced(st, g, dst + r * dst_stride, row_bytes, tick, True, pace)
                    mem_done = max(mem_done, rd, wr)
            for r in range(rows):
                _copy_functional(st, g, sm, slot, dst + r * dst_stride, src + r * src_stride,
                                 row_bytes)
            if not _is_smem(dst):
                notify_stores(st, g, dst, span_d, mem_done)
        work = rows * row_bytes

    elif sem == SEM_MMA:
        c_addr = _operand(st, slot, row, 0, tick, cyc)
        a_addr = _operand(st, slot, row, 1, tick, cyc)
        b_addr = _operand(st, slot, row, 2, tick, cyc)
        m = _operand(st, slot, row, 3, tick, cyc)
        n = _operand(st, slot, row, 4, tick, cyc)
        k = _operand(st, slot, row, 5, tick, cyc)
        lda = _operand(st, slot, row, 6, tick, cyc)
        ldb = _operand(st, slot, row, 7, tick, cyc)
        dt = row[DTYPE] & DTYPE_SRC_MASK
        es = 2 if dt == DT_BF16 else 4
        if m <= 0 or n <= 0 or k <= 0:
            raise_error(st, ERR_BAD_SIZE, slot, m * n * k)
            return
        a_t = sub == MMA_AT
        b_t = sub == MMA_BT_B_L2 or sub == MMA_BT
        # storage shapes: A [m][k] ([k][m] transposed), B [k][n] ([n][k] transposed); a row
        # stride (lda, ldb elements; 0 = dense) at least the stored row's length
        a_rows, a_cols = (k, m) if a_t else (m, k)
        b_rows, b_cols = (n, k) if b_t else (k, n)
        if lda == 0:
            lda = a_cols
        if ldb == 0:
            ldb = b_cols
        if lda < a_cols or ldb < b_cols:
            raise_error(st, ERR_BAD_SIZE, slot, lda if lda < a_cols else ldb)
            return
        a_span = ((a_rows - 1) * lda + a_cols) * es
        b_span = ((b_rows - 1) * ldb + b_cols) * es
        if (not _check_range(st, slot, a_addr, a_span) or not _check_range(st, slot, b_addr, b_span)
                or not _check_range(st, slot, c_addr, m * n * 4)):
            return
        pace = _pace_ticks(st, row, 2 * m * n * k)   # operands stream over the tensor work
        # global operands go through the L2 (components/l2.py): marked ones (a row tile several TBs
        # share, weights after their first touch) hit while resident, the others are cold reads. A
        # strided operand moves its m k (k n) elements; its residency is that of its whole span
        if sub == MMA_RA or sub == MMA_RA_B_L2:
            ra = tick   # the same A tile as the previous mma: already on chip (a fused mainloop)
        elif _is_smem(a_addr):
            ra = _access_paced(st, g, a_addr, m * k * es, tick, False, pace)
        else:
            ra = l2_operand_read_span(st, g, a_addr, a_span, m * k * es, tick, pace,
                                      sub == MMA_L2 or sub == MMA_A_L2)
        if _is_smem(b_addr):
            rb = _access_paced(st, g, b_addr, k * n * es, tick, False, pace)
        else:
            rb = l2_operand_read_span(st, g, b_addr, b_span, k * n * es, tick, pace,
                                      sub == MMA_B_L2 or sub == MMA_L2 or sub == MMA_RA_B_L2
                                      or sub == MMA_BT_B_L2)
        rc = _access_paced(st, g, c_addr, m * n * 4, tick, False, pace)
        wc = _access_paced(st, g, c_addr, m * n * 4, tick, True, pace)
        mem_done = max(ra, rb, rc, wc)
        va = _bytes(st, g, sm, a_addr, a_span)
        vb = _bytes(st, g, sm, b_addr, b_span)
        vc = _bytes(st, g, sm, c_addr, m * n * 4)
        if vc.shape[0] > 0:
            if va.shape[0] == 0 or vb.shape[0] == 0:
                raise_error(st, ERR_UNBACKED_WORD, slot, a_addr)
                return
            _mma_functional(st, va, vb, vc, m, n, k, dt, a_t, b_t, lda, ldb)
        work = 2 * m * n * k

    elif sem == SEM_VEC:
        d_addr = _operand(st, slot, row, 0, tick, cyc)
        a_addr = _operand(st, slot, row, 1, tick, cyc)
        b_addr = _operand(st, slot, row, 2, tick, cyc)
        n = _operand(st, slot, row, 3, tick, cyc)
        cols = _operand(st, slot, row, 4, tick, cyc)
        dt = row[DTYPE] & DTYPE_SRC_MASK          # the sources' element type
        dt_dst = (row[DTYPE] >> DTYPE_DST_SHIFT) & DTYPE_SRC_MASK   # the result's, if it differs
        if dt_dst == 0:
            dt_dst = dt
        es = 2 if dt == DT_BF16 else 4
        es_dst = 2 if dt_dst == DT_BF16 else 4
        if n < 0:
            raise_error(st, ERR_BAD_SIZE, slot, n)
            return
        rowwise = VEC_FIRST_ROWWISE <= sub <= VEC_LAST_ROWWISE
        if rowwise and (cols <= 0 or n % cols != 0):
            raise_error(st, ERR_BAD_SIZE, slot, cols)   # rows of `cols` elements must tile n
            return
        if not rowwise:
            cols = 1
        rows = n // cols
        reduce = sub == VEC_ROW_MAX or sub == VEC_ROW_SUM or sub == VEC_ROW_SUMSQ
        nb = n * es
        nb_dst = (rows if reduce else n) * es_dst
        # bytes of b read: n elements (element-wise), one per row or per column, or none
        if (sub == VEC_ADD or sub == VEC_MUL or sub == VEC_SILU_MUL or sub == VEC_SUB or sub == VEC_MAX
                or sub == VEC_DSILU_MUL):
            nb_b = nb
        elif sub == VEC_ROW_ADD or sub == VEC_ROW_SUB or sub == VEC_ROW_MUL or sub == VEC_ROW_DIV:
            nb_b = rows * es
        elif sub == VEC_COL_ADD or sub == VEC_COL_MUL:
            nb_b = cols * es
        else:
            nb_b = 0
        if not _check_range(st, slot, d_addr, nb_dst):
            return
        pace = _pace_ticks(st, row, n)
        mem_done = _access_paced(st, g, d_addr, nb_dst, tick, True, pace)
        uses_a = sub != VEC_ZERO
        if uses_a:
            if not _check_range(st, slot, a_addr, nb):
                return
            mem_done = max(mem_done, _access_paced(st, g, a_addr, nb, tick, False, pace))
        if nb_b > 0:
            if not _check_range(st, slot, b_addr, nb_b):
                return
            mem_done = max(mem_done, _access_paced(st, g, b_addr, nb_b, tick, False, pace))
        if sub == VEC_AXPY:
            if not _check_range(st, slot, b_addr, es_dst):
                return
            mem_done = max(mem_done, _access_paced(st, g, d_addr, nb_dst, tick, False, pace),
                           _access(st, g, b_addr, es_dst, tick, False))
        vd = _bytes(st, g, sm, d_addr, nb_dst)
        if vd.shape[0] > 0 and n > 0:
            va = _bytes(st, g, sm, a_addr, nb) if uses_a else vd
            if nb_b > 0:
                vb = _bytes(st, g, sm, b_addr, nb_b)
            elif sub == VEC_AXPY:
                vb = _bytes(st, g, sm, b_addr, es_dst)
            else:
                vb = vd
            if (uses_a and va.shape[0] == 0) or vb.shape[0] == 0:
                raise_error(st, ERR_UNBACKED_WORD, slot, a_addr)
                return
            _vec_functional(sub, vd, va, vb, n, dt, dt_dst, cols)
        if row[DTYPE] & DTYPE_LSU_LOADS:
            # the warps load the global sources into registers through the load/store unit
            # (DeepEP's combine receivers: ld.global of each BF16 row, then FP32 adds): the LSU
            # moves those bytes after what it already has queued, and the sum needs them
            lb = 0
            if uses_a and not _is_smem(a_addr):
                lb += nb
            if nb_b > 0 and not _is_smem(b_addr):
                lb += nb_b
            if lb > 0:
                mem_done = max(mem_done, _occupy_lsu(st, sm, tick, lb))
        if not _is_smem(d_addr):
            notify_stores(st, g, d_addr, nb_dst, mem_done)
        work = n

    elif sem == SEM_SEND_EXPERT:
        if not _send_to_expert(st, slot, row, g, tick, cyc):
            return

    elif sem == SEM_ROWSP_MALLOC:
        if not _rowsp_malloc(st, slot, row, g, tick, cyc):
            return

    elif sem == SEM_ST_ROWSP:
        if not _st_rowsp(st, slot, row, g, tick, cyc):
            return

    elif sem == SEM_SEND_EXPERTS or sem == SEM_ST_ROWSP_EXPERTS:
        if not _store_experts(st, slot, row, g, tick, cyc, sem == SEM_ST_ROWSP_EXPERTS):
            return

    elif sem == SEM_CLAIM:
        expert = _operand(st, slot, row, 3, tick, cyc)
        if not _local_expert(st, slot, g, expert):
            return
        if st.p[0].dam_launch_mode:
            raise_error(st, ERR_MOE_CLAIM_LAUNCH, slot, expert)
            return
        status, rows, first = dam_claim(st, g, slot, expert, tick)
        if status == CLAIM_WAIT:
            _block(st, slot, TB_WAIT_CLAIM, tick)
            return  # re-executed when the DAM wakes this TB
        st.regs[slot, row[OP0]] = rows
        st.regs[slot, row[OP0 + 1]] = slot_address(st, g, expert, first) if rows else 0
        st.regs[slot, row[OP0 + 2]] = record_address(st, g, expert, first) if rows else 0

    elif sem == SEM_NOTIFY:
        a = _operand(st, slot, row, 0, tick, cyc)
        if sub == NOTIFY_EOS:
            rpm_end_of_stream(st, g, a, tick)
        else:
            if not _local_expert(st, slot, g, a):
                return
            p = st.p[0]
            off = _operand(st, slot, row, 1, tick, cyc) - p.win_addr \
                - st.moe_place[a, 1] * p.window_rows * p.row_bytes
            tile = dam_release(st, g, a, off // p.row_bytes) if off >= 0 and off % p.row_bytes == 0 \
                else -1
            if tile < 0:
                raise_error(st, ERR_MOE_RELEASE, slot, off)
                return
            # the released rows' entries leave the AAU's row table (overflow: spill)
            aau_release_entries(st, g, a, tile * p.tile_rows, p.tile_rows)
            aau_retry(st, g, tick)

    elif sem == SEM_PUT or sem == SEM_GET or sem == SEM_SEND_HOME or sem == SEM_PUT_COUNTED:
        counter = -1   # put.counted (counted_write.py): the counter's address at the peer
        if sem == SEM_SEND_HOME:
            # combine: the completion record names the row's home GPU and slot
            rec = _operand(st, slot, row, 0, tick, cyc)
            if not _check_hbm_word(st, slot, rec) or not _check_hbm_word(st, slot, rec + 8):
                return
            src = _operand(st, slot, row, 1, tick, cyc)
            nb = _operand(st, slot, row, 2, tick, cyc)
            peer = read_word(st, g, rec)
            dst = _operand(st, slot, row, 3, tick, cyc) + read_word(st, g, rec + 8) * nb
        else:
            rec = 0
            peer = _operand(st, slot, row, 0, tick, cyc)
            dst = _operand(st, slot, row, 1, tick, cyc)
            src = _operand(st, slot, row, 2, tick, cyc)
            nb = _operand(st, slot, row, 3, tick, cyc)
        if peer < 0 or peer >= st.p[0].num_gpus:
            raise_error(st, ERR_BAD_GPU, slot, peer)
            return
        if sem == SEM_PUT_COUNTED:
            counter = _operand(st, slot, row, 4, tick, cyc)
            if not counter_ok(st, slot, counter):
                return
            if rdma_message(st, g, peer):
                raise_error(st, ERR_CW_COUNTER, slot, peer)
                return
        if nb < 0 or _is_smem(dst) or _is_smem(src):
            raise_error(st, ERR_ADDR_RANGE if nb >= 0 else ERR_BAD_SIZE, slot, dst)
            return
        update = sem == SEM_PUT and sub == PUT_ADD_BF16   # near-memory add at the destination
        if update and nb % 2:
            raise_error(st, ERR_BAD_SIZE, slot, nb)         # whole bf16 elements only
            return
        if not _check_range(st, slot, dst, nb) or not _check_range(st, slot, src, nb):
            return
        if nb > 0 and (sem == SEM_PUT or sem == SEM_PUT_COUNTED) and sub == PUT_SM:
            # warp-level copy: the TB's warps load src through the LSU (paced over the unit's
            # occupancy) and wait for the loads; the stores are posted
            if peer != g and not hub_room(st, g):
                _stall_on_hub(st, slot, g, tick)
                return
            work = 2 * nb                     # every byte loaded, then stored, through the LSU
            pace = _pace_ticks(st, row, work)
            mem_done = hbm_access_paced(st, g, src, nb, tick, False, pace)
            st.tb[slot].outstanding += 1
            if peer == g:
                done = hbm_access_paced(st, g, dst, nb, mem_done, True, pace)
                move_bytes(st, g, src, g, dst, nb, slot)
                notify_stores(st, g, dst, nb, done)
                push(st, done, EV_LOCAL_DONE, slot, 0)
                if counter >= 0:
                    counted_local_put(st, g, nb)
                    notify_stores(st, g, counter, 8, counter_add(st, g, counter, nb, 1, done))
            else:
                # the hub carries the stores (store packets) from when the loads delivered them
                hub_submit(st, g, REQ_PUT, slot, peer, dst, src, nb, 0, 0, tick, mem_done)
                if counter >= 0:
                    counted_put_issued(st, g, st.free_reqs[g, st.gpu[g].free_top], counter, nb)
        elif nb > 0:
            if peer == g:
                # same GPU: an asynchronous copy through the memory system
                done = max(hbm_access(st, g, src, nb, tick, False), hbm_access(st, g, dst, nb, tick, True))
                if update:
                    # the memory adds the elements in place (T3's near-memory op-and-store): the
                    # channels see the write; the read of the old value stays in the DRAM
                    update_bytes_bf16(st, g, src, g, dst, nb, slot)
                else:
                    move_bytes(st, g, src, g, dst, nb, slot)
                notify_stores(st, g, dst, nb, done)
                st.tb[slot].outstanding += 1
                push(st, done, EV_LOCAL_DONE, slot, 0)
                if counter >= 0:
                    counted_local_put(st, g, nb)
                    notify_stores(st, g, counter, 8, counter_add(st, g, counter, nb, 1, done))
            else:
                kind = REQ_GET if sem == SEM_GET else REQ_PUT
                if not hub_submit(st, g, kind, slot, peer, dst, src, nb, 1 if update else 0, 0,
                                  tick, -1):
                    _stall_on_hub(st, slot, g, tick)
                    return
                st.tb[slot].outstanding += 1
                if counter >= 0:
                    # the request hub_submit just took is the one on top of the free stack
                    counted_put_issued(st, g, st.free_reqs[g, st.gpu[g].free_top], counter, nb)
        if sem == SEM_SEND_HOME:
            mem_done = hbm_access(st, g, rec, 16, tick, False)  # the record was read
            st.gpu[g].combine_rows += 1

    elif sem == SEM_MULTIMEM:
        # NVLink SHARP (nvls.py): the multimem address is dst for st/red, src for ld_reduce
        dst = _operand(st, slot, row, 0, tick, cyc)
        src = _operand(st, slot, row, 1, tick, cyc)
        nb = _operand(st, slot, row, 2, tick, cyc)
        dt = row[DTYPE] & DTYPE_SRC_MASK
        if nb <= 0 or nb % multimem_element_bytes(dt) != 0:
            raise_error(st, ERR_BAD_SIZE, slot, nb)
            return
        if _is_smem(dst) or _is_smem(src):
            raise_error(st, ERR_ADDR_RANGE, slot, dst if _is_smem(dst) else src)
            return
        if sub >= MM_DY_ST:
            # DySHARP (dysharp.py): the operation names its own targets
            if not _dymultimem(st, g, sm, slot, row, sub, dst, src, nb, dt, tick, cyc):
                return
        else:
            if not _check_range(st, slot, dst, nb) or not _check_range(st, slot, src, nb):
                return
            mm = src if sub == MM_LD_REDUCE else dst
            obj = multimem_object(st, g, mm, nb)
            if obj < 0:
                raise_error(st, ERR_MULTIMEM_ADDR, slot, mm)
                return
            kind = REQ_MM_LD if sub == MM_LD_REDUCE else (REQ_MM_RED if sub == MM_RED else REQ_MM_ST)
            if not hub_submit(st, g, kind, slot, multimem_route_peer(st, obj, g), dst, src, nb,
                              obj * 16 + dt, 0, tick, -1):
                _stall_on_hub(st, slot, g, tick)
                return
            st.tb[slot].outstanding += 1

    elif sem == SEM_CAIS and sub == CAIS_SYNC:
        # sync.cais flag, value: the group sync table's pre-access sync (cais_merge.py); the
        # switch writes value into the flag on every member once all have arrived
        flag = _operand(st, slot, row, 1, tick, cyc)
        value = _operand(st, slot, row, 4, tick, cyc)
        if not _check_hbm_word(st, slot, flag):
            return
        grp = cais_group(st, g, g, flag, 8)
        if grp < 0:
            raise_error(st, ERR_CAIS_ADDR, slot, flag)
            return
        if not hub_submit(st, g, REQ_CAIS_SYNC, slot, cais_sync_peer(st, g, grp), flag, value, 0,
                          grp * 16, 0, tick, -1):
            _stall_on_hub(st, slot, g, tick)
            return
        st.tb[slot].outstanding += 1

    elif sem == SEM_CAIS:
        # CAIS (cais_merge.py): the address at the home is src for ld.cais, dst for red.cais
        home = _operand(st, slot, row, 0, tick, cyc)
        dst = _operand(st, slot, row, 1, tick, cyc)
        src = _operand(st, slot, row, 2, tick, cyc)
        nb = _operand(st, slot, row, 3, tick, cyc)
        dt = row[DTYPE] & DTYPE_SRC_MASK
        if home < 0 or home >= st.p[0].num_gpus:
            raise_error(st, ERR_BAD_GPU, slot, home)
            return
        if nb <= 0 or nb % cais_element_bytes(dt) != 0:
            raise_error(st, ERR_BAD_SIZE, slot, nb)
            return
        if _is_smem(dst) or _is_smem(src):
            raise_error(st, ERR_ADDR_RANGE, slot, dst if _is_smem(dst) else src)
            return
        if not _check_range(st, slot, dst, nb) or not _check_range(st, slot, src, nb):
            return
        at_home = src if sub == CAIS_LD else dst
        grp = cais_group(st, g, home, at_home, nb)
        if grp < 0:
            raise_error(st, ERR_CAIS_ADDR, slot, at_home)
            return
        kind = REQ_CAIS_LD if sub == CAIS_LD else REQ_CAIS_RED
        if not hub_submit(st, g, kind, slot, home, dst, src, nb, grp * 16 + dt, 0, tick, -1):
            _stall_on_hub(st, slot, g, tick)
            return
        st.tb[slot].outstanding += 1

    elif sem == SEM_FLAG_SET or sem == SEM_ATOM:
        base = 1 if sem == SEM_ATOM else 0
        peer = _operand(st, slot, row, base, tick, cyc)
        addr = _operand(st, slot, row, base + 1, tick, cyc) + row[OP0 + base + 2]
        value = _operand(st, slot, row, base + 3, tick, cyc)
        if peer < 0 or peer >= st.p[0].num_gpus:
            raise_error(st, ERR_BAD_GPU, slot, peer)
            return
        if not _check_hbm_word(st, slot, addr):
            return
        if sem == SEM_ATOM and sub == ATOM_RED_ADD:
            if peer != g:
                raise_error(st, ERR_RED_REMOTE, slot, peer)
                return
            # posted reduction at memory: the TB goes on; later readers see it once it is done
            done_at = hbm_access(st, g, addr, 8, tick, True) + atomic_ticks(st)
            st.gpu[g].hbm_atomics += 1
            write_word(st, g, addr, read_word(st, g, addr) + value)
            notify_stores(st, g, addr, 8, done_at)
        elif peer == g:
            if sem == SEM_FLAG_SET:
                write_word(st, g, addr, value)
                notify_stores(st, g, addr, 8, hbm_access(st, g, addr, 8, tick, True))
            else:
                mem_done = hbm_access(st, g, addr, 8, tick, True) + atomic_ticks(st)
                st.gpu[g].hbm_atomics += 1
                old = read_word(st, g, addr)
                write_word(st, g, addr, old + value)
                st.regs[slot, row[OP0]] = old
                notify_stores(st, g, addr, 8, mem_done)
        else:
            kind = REQ_STORE if sem == SEM_FLAG_SET else REQ_ATOM
            if not hub_submit(st, g, kind, slot, peer, addr, 0, 8, value, row[OP0], tick, -1):
                _stall_on_hub(st, slot, g, tick)
                return
            if sem == SEM_FLAG_SET:
                st.tb[slot].outstanding += 1
            else:
                _charge_unit(st, sm, row, tick, cyc, occ)
                st.sm[sm].insts += 1
                st.tb[slot].pc = next_pc
                _block(st, slot, TB_WAIT_REMOTE, tick)
                return

    elif sem == SEM_WAIT or sem == SEM_WAIT_COUNT:
        addr = _operand(st, slot, row, 0, tick, cyc) + row[OP0 + 1]
        value = _operand(st, slot, row, 2, tick, cyc)
        # wait.count (counted_write.py): until the counter holds at least the expected bytes
        cmp = CMP_GE if sem == SEM_WAIT_COUNT else sub
        if sem == SEM_WAIT_COUNT:
            if not counter_ok(st, slot, addr):
                return
        elif not _check_hbm_word(st, slot, addr):
            return
        mem_done = hbm_access(st, g, addr, 8, tick, False)
        satisfied = compare(cmp, read_word(st, g, addr), value)
        if sem == SEM_WAIT_COUNT:
            counted_wait_issued(st, g, slot, not satisfied)
        if not satisfied:
            _charge_unit(st, sm, row, tick, cyc, occ)
            st.sm[sm].insts += 1
            st.tb[slot].pc = next_pc
            st.tb[slot].wait_addr = addr
            st.tb[slot].wait_cmp = cmp
            st.tb[slot].wait_value = value
            add_waiter(st, g, WAITLIST_FLAG, slot)
            _block(st, slot, TB_WAIT_FLAG, tick)
            return

    elif sem == SEM_FENCE:
        if st.tb[slot].outstanding > 0:
            _charge_unit(st, sm, row, tick, cyc, occ)
            st.sm[sm].insts += 1
            st.tb[slot].pc = next_pc
            _block(st, slot, TB_WAIT_FENCE, tick)
            return

    elif sem == SEM_SLEEP:
        lat += max(0, _operand(st, slot, row, 0, tick, cyc))
        # a sleeping TB waits for time, as others wait for a flag: livelock detection counts
        # from its wake-up
        st.tb[slot].progress = cycle_edge(cyc + occ + lat, P)

    elif sem == SEM_EXIT:
        if st.tb[slot].outstanding > 0:
            # exit implies a fence: wait, then execute exit again
            _block(st, slot, TB_WAIT_FENCE, tick)
            return
        st.sm[sm].insts += 1
        dam_block_exited(st, slot, tick)   # a DAM-started block counts its group down
        block_exit(st, slot, tick)
        return

    # SEM_NOP falls through
    thr = row[THR]
    if thr > 0 and work > 0:
        occ = max(occ, (work + thr - 1) // thr)
    _charge_unit(st, sm, row, tick, cyc, occ)
    st.sm[sm].insts += 1
    st.tb[slot].pc = next_pc
    ready = cycle_edge(cyc + occ + lat, P)
    if mem_done > ready:
        ready = mem_done
    st.tb[slot].ready = ready


@compiled
def _occupy_lsu(st, sm, tick, nbytes):
    """The load/store unit of SM sm moves nbytes for an instruction issued on another unit
    (a vector instruction with lsu_loads): it starts when the LSU is free, takes
    ceil(nbytes / lsu_bytes_per_cycle) cycles, and is busy that long. Returns when it is done."""
    p = st.p[0]
    start = max(tick, st.sm_unit_free[sm, UNIT_LSU])
    c0 = cycle_at_or_after(start, p.sm_period_fs)
    free = cycle_edge(c0 + (nbytes + p.lsu_bytes_per_cycle - 1) // p.lsu_bytes_per_cycle,
                      p.sm_period_fs)
    st.sm_unit_free[sm, UNIT_LSU] = free
    st.sm_unit_busy[sm, UNIT_LSU] += free - start
    return free


@compiled
def _charge_unit(st, sm, row, tick, cyc, occ):
    free = cycle_edge(cyc + occ, st.p[0].sm_period_fs)
    unit = row[UNIT]
    if free > st.sm_unit_free[sm, unit]:
        st.sm_unit_free[sm, unit] = free
    st.sm_unit_busy[sm, unit] += free - tick


@compiled
def _local_expert(st, slot, g, expert):
    if expert < 0 or expert >= st.p[0].num_experts or st.moe_place[expert, 0] != g:
        raise_error(st, ERR_MOE_EXPERT, slot, expert)
        return False
    return True


@compiled
def _expert_row(st, slot, expert, nb):
    """send_to_expert(s): the expert exists and the row fits a window slot (False: error raised)."""
    p = st.p[0]
    if expert < 0 or expert >= p.num_experts:
        raise_error(st, ERR_MOE_EXPERT, slot, expert)
        return False
    if nb <= 0 or nb > p.row_bytes:
        raise_error(st, ERR_MOE_ROW_SIZE, slot, nb)
        return False
    return True


@compiled
def _send_to_expert(st, slot, row, g, tick, cyc):
    """send_to_expert: validate, then hand the row to the RPM (False: error or stalled)."""
    p = st.p[0]
    expert = _operand(st, slot, row, 0, tick, cyc)
    src = _operand(st, slot, row, 1, tick, cyc)
    nb = _operand(st, slot, row, 2, tick, cyc)
    if not _expert_row(st, slot, expert, nb):
        return False
    if _is_smem(src) or not _check_range(st, slot, src, nb):
        raise_error(st, ERR_ADDR_RANGE, slot, src)
        return False
    sr = st.stream[g * p.num_gpus + st.moe_place[expert, 0]]
    if sr.eos_pending:
        raise_error(st, ERR_MOE_AFTER_EOS, slot, expert)
        return False
    home = _operand(st, slot, row, 3, tick, cyc)
    aux = _operand(st, slot, row, 4, tick, cyc)
    if not rpm_accept(st, g, slot, expert, src, nb, home, aux, tick):
        _stall_on_hub(st, slot, g, tick)
        return False
    return True


@compiled
def _rowsp_malloc(st, slot, row, g, tick, cyc):
    """rowsp.malloc id, expert, row_bytes: register allocation `id` in this GPU's hub (the
    MMIO write of a rowspMalloc call): its logical destination (the expert; the placement table
    gives its GPU, the TLB's part) and its row size. The rows land in the expert's receive window
    on that GPU (the base the AAU holds). Re-registering an id overwrites it."""
    p = st.p[0]
    rid = _operand(st, slot, row, 0, tick, cyc)
    expert = _operand(st, slot, row, 1, tick, cyc)
    nb = _operand(st, slot, row, 2, tick, cyc)
    if rid < 0 or rid >= st.rowsp_table.shape[1]:
        raise_error(st, ERR_ROWSP_ID, slot, rid)
        return False
    if expert < 0 or expert >= p.num_experts or nb <= 0 or nb > p.row_bytes:
        raise_error(st, ERR_ROWSP_REGISTER, slot, expert if nb > 0 and nb <= p.row_bytes else nb)
        return False
    st.rowsp_table[g, rid, 0] = expert
    st.rowsp_table[g, rid, 1] = nb
    return True


@compiled
def _st_rowsp(st, slot, row, g, tick, cyc):
    """st.rowsp[.nop] id, row, offset, src, bytes: validate, then hand the bytes to the RPM as
    part of row `row` of allocation `id`, .nop marking them non-critical (False: error or
    stalled)."""
    p = st.p[0]
    rid = _operand(st, slot, row, 0, tick, cyc)
    if rid < 0 or rid >= st.rowsp_table.shape[1] or st.rowsp_table[g, rid, 0] < 0:
        raise_error(st, ERR_ROWSP_ID, slot, rid)
        return False
    expert = st.rowsp_table[g, rid, 0]
    size = st.rowsp_table[g, rid, 1]
    rowid = _operand(st, slot, row, 1, tick, cyc)
    off = _operand(st, slot, row, 2, tick, cyc)
    src = _operand(st, slot, row, 3, tick, cyc)
    nb = _operand(st, slot, row, 4, tick, cyc)
    if rowid < 0 or off < 0 or nb <= 0 or off + nb > size:
        raise_error(st, ERR_ROWSP_ROW, slot, off + nb)
        return False
    if _is_smem(src) or not _check_range(st, slot, src, nb):
        raise_error(st, ERR_ADDR_RANGE, slot, src)
        return False
    if st.stream[g * p.num_gpus + st.moe_place[expert, 0]].eos_pending:
        raise_error(st, ERR_MOE_AFTER_EOS, slot, expert)
        return False
    status = rpm_accept_rowsp(st, g, slot, rid, expert, size, rowid, off, src, nb,
                              row[SUBOP] == ROWSP_NOP, tick)
    if status < 0:
        raise_error(st, ERR_ROWSP_ROW, slot, off + nb)
        return False
    if status == 0:
        _stall_on_hub(st, slot, g, tick)
        return False
    return True


@compiled
def _store_experts(st, slot, row, g, tick, cyc, rowsp):
    """send_to_experts first, mask, src, bytes, home, aux / st.rowsp.experts first, mask, row,
    src, bytes: validate the named experts (bit j of mask: register first + j holds an expert, or
    for rowsp an allocation id), then hand the row to the RPM once (False: error or stalled)."""
    p = st.p[0]
    first = row[OP0]
    mask = _operand(st, slot, row, 1, tick, cyc)
    if rowsp:
        home = _operand(st, slot, row, 2, tick, cyc)    # the row of the first id (j = 0)
        src = _operand(st, slot, row, 3, tick, cyc)
        nb = _operand(st, slot, row, 4, tick, cyc)
        aux = 0
    else:
        src = _operand(st, slot, row, 2, tick, cyc)
        nb = _operand(st, slot, row, 3, tick, cyc)
        home = _operand(st, slot, row, 4, tick, cyc)
        aux = _operand(st, slot, row, 5, tick, cyc)
    if mask == 0:
        raise_error(st, ERR_MULTI_EMPTY, slot, mask)
        return False
    n = 0
    top = 0
    for j in range(8):
        if (mask >> j) & 1:
            n += 1
            top = j
    if mask < 0 or mask >= 256 or first + top >= NUM_GENERAL_REGS or n > p.rpm_ring:
        raise_error(st, ERR_MULTI_MANY, slot, mask)
        return False
    d = -1
    for j in range(8):
        if not (mask >> j) & 1:
            continue
        v = st.regs[slot, first + j]
        if rowsp:
            if v < 0 or v >= st.rowsp_table.shape[1] or st.rowsp_table[g, v, 0] < 0:
                raise_error(st, ERR_ROWSP_ID, slot, v)
                return False
            if home < 0 or st.rowsp_table[g, v, 1] != nb:
                # whole rows only: rows of several stores are st.rowsp's
                raise_error(st, ERR_ROWSP_ROW, slot, nb)
                return False
            expert = st.rowsp_table[g, v, 0]
        else:
            expert = v
            if not _expert_row(st, slot, expert, nb):
                return False
        for i in range(j):
            # one expert named twice (rowsp: also through two ids of one expert): the AAU checks
            # each named expert's window for one free slot
            if (mask >> i) & 1:
                u = st.regs[slot, first + i]
                if (st.rowsp_table[g, u, 0] if rowsp else u) == expert:
                    raise_error(st, ERR_MULTI_GPUS, slot, v)
                    return False
        # one GPU, or with internode per_node one other node (one stream: its forwarding hub's)
        if d < 0:
            d = stream_target(st, g, st.moe_place[expert, 0])
        elif stream_target(st, g, st.moe_place[expert, 0]) != d:
            raise_error(st, ERR_MULTI_GPUS, slot, v)
            return False
    if _is_smem(src) or not _check_range(st, slot, src, nb):
        raise_error(st, ERR_ADDR_RANGE, slot, src)
        return False
    if st.stream[g * p.num_gpus + d].eos_pending:
        raise_error(st, ERR_MOE_AFTER_EOS, slot, d)
        return False
    status = rpm_accept_experts(st, g, slot, first, mask, src, nb, home, aux, rowsp, tick)
    if status < 0:
        raise_error(st, ERR_ROWSP_ROW, slot, nb)
        return False
    if status == 0:
        _stall_on_hub(st, slot, g, tick)
        return False
    return True


@compiled
def _dymultimem(st, g, sm, slot, row, sub, dst, src, nb, dt, tick, cyc):
    """dymultimem.st / dymultimem.ld_reduce (DySHARP, components/dysharp.py): the multimem address
    (dst for st, src for ld_reduce) lies in a dynamic object's algebraic range; the MultimemQ
    fetches the target list (`count` i64 expert ids at `targets`) and the hub takes the operation.
    A full MultimemQ or hub stalls the thread block (it re-executes the instruction later).
    Returns True once the hub has the operation."""
    p = st.p[0]
    gp = st.gpu[g]
    tl = _operand(st, slot, row, 3, tick, cyc)
    count = _operand(st, slot, row, 4, tick, cyc)
    if count <= 0 or count > p.dy_max_targets:
        raise_error(st, ERR_DY_COUNT, slot, count)
        return False
    ld = sub == MM_DY_LD_REDUCE
    mm = src if ld else dst
    local = dst if ld else src
    if not _check_range(st, slot, local, nb):
        return False
    obj = dymultimem_object(st, g, mm, nb)
    if obj < 0:
        raise_error(st, ERR_DY_ROW if obj == -2 else ERR_MULTIMEM_ADDR, slot, mm)
        return False
    if gp.dy_queue >= p.dy_queue_entries or not hub_room(st, g):
        if gp.dy_queue >= p.dy_queue_entries:
            gp.dy_queue_stalls += 1
        _stall_on_hub(st, slot, g, tick)
        return False
    if tl % 8 != 0:
        raise_error(st, ERR_MISALIGNED, slot, tl)
        return False
    if not _check_range(st, slot, tl, 8 * count):
        return False
    view = _bytes(st, g, sm, tl, 8 * count)
    if view.shape[0] == 0:
        raise_error(st, ERR_UNBACKED_WORD, slot, tl)
        return False
    ids = view.view(np.int64)
    bad = dysharp_stage(st, g, obj, ids, count)
    if bad >= 0:
        raise_error(st, ERR_DY_TARGET, slot, ids[bad])
        return False
    gp.dy_stage_ready = _access(st, g, tl, 8 * count, tick, False)   # the list is fetched
    kind = REQ_DY_LD if ld else REQ_DY_ST
    hub_submit(st, g, kind, slot, multimem_route_peer(st, obj, g), dst, src, nb, obj * 16 + dt, 0,
               tick, -1)
    st.tb[slot].outstanding += 1
    return True


@compiled
def _stall_on_hub(st, slot, g, tick):
    """The hub cannot take the request now: the TB sleeps and re-executes the instruction later."""
    add_waiter(st, g, WAITLIST_HUB, slot)
    _block(st, slot, TB_WAIT_HUB, tick)


@compiled
def _copy_functional(st, g, sm, slot, dst, src, nbytes):
    vd = _bytes(st, g, sm, dst, nbytes)
    if vd.shape[0] == 0:
        return
    vs = _bytes(st, g, sm, src, nbytes)
    if vs.shape[0] == 0:
        raise_error(st, ERR_UNBACKED_WORD, slot, src)
        return
    copy_overlapping(vd, vs, nbytes)


@compiled
def _widen_f32(view, first, count, step, dt, out):
    """Elements first, first + step, ... (`count` of them) of a byte view holding dt, as fp32 bit
    patterns in `out` (uint32): a bf16 is the high half of the fp32 it widens to exactly; an fp32
    is copied (a shift by 0). A ufunc with an output array: no allocation, and one NumPy call in
    the reference engine where an element loop would be `count` Python iterations."""
    last = first + (count - 1) * step + 1
    if dt == DT_BF16:
        halves = view.view(np.uint16)
        np.left_shift(halves[first:last:step], np.uint32(16), out)
    else:
        words = view.view(np.uint32)
        np.left_shift(words[first:last:step], np.uint32(0), out)


@compiled
def _mma_functional(st, va, vb, vc, m, n, k, dt, a_transposed, b_transposed, lda, ldb):
    """C[m,n] += A[m,k] @ B[k,n], inputs in dt, fp32 accumulation in k order (every C element is
    rounded to fp32 after each of its k products, in increasing k, whatever the loop order).
    a_transposed: A is stored as its transpose, [k][m] (mma.bf16.at); b_transposed: B is stored
    as its transpose, [n][k] (mma.bf16.bt.bl2). lda / ldb: the stored rows' stride in elements.

    One k step at a time, as whole arrays: A's column k and B's row k widened to fp32, their
    outer product (each element one fp32 multiply) added to C (one fp32 add each) - the same
    operations, in the same order per element, as _mma_elementwise, with k NumPy calls of each
    kind instead of m n k Python iterations in the reference engine (DESIGN rule 4: both engines
    run this code)."""
    rows = st.mma_rows.view(np.uint8).view(np.uint32)
    if m * n + m + n > rows.shape[0]:
        _mma_elementwise(va, vb, vc, m, n, k, dt, a_transposed, b_transposed, lda, ldb)
        return
    b_row = rows[0:n]
    a_col = rows[n:n + m]
    b = b_row.view(np.float32).reshape((1, n))
    a = a_col.view(np.float32).reshape((m, 1))
    products = rows[n + m:n + m + m * n].view(np.float32).reshape((m, n))
    c = vc.view(np.float32).reshape((m, n))
    for kk in range(k):
        if a_transposed:
            _widen_f32(va, kk * lda, m, 1, dt, a_col)
        else:
            _widen_f32(va, kk, m, lda, dt, a_col)
        if b_transposed:
            _widen_f32(vb, kk, n, ldb, dt, b_row)
        else:
            _widen_f32(vb, kk * ldb, n, 1, dt, b_row)
        np.multiply(a, b, products)
        np.add(c, products, c)


@compiled
def _mma_elementwise(va, vb, vc, m, n, k, dt, a_transposed, b_transposed, lda, ldb):
    """_mma_functional element by element (for a tile larger than State.mma_rows holds)."""
    c = vc.view(np.float32)
    for i in range(m):
        for kk in range(k):
            a = _load_f32(va, kk * lda + i if a_transposed else i * lda + kk, dt)
            for j in range(n):
                bj = j * ldb + kk if b_transposed else kk * ldb + j
                c[i * n + j] = np.float32(c[i * n + j] + a * _load_f32(vb, bj, dt))


@compiled
def _exp_f32(x):
    # as _silu: float64 libm exp rounded once to fp32 (exp(-inf) = 0: a masked score)
    return np.float32(np.exp(np.float64(x)))


@compiled
def _rsqrt_f32(x):
    # 1 / sqrt(x) in float64 (sqrt and the division correctly rounded), rounded once to fp32;
    # IEEE special cases spelled out (both engines, no Python ZeroDivisionError in the loop)
    xd = np.float64(x)
    if xd != xd or xd < 0.0:
        return np.float32(np.nan)
    if xd == 0.0:
        return np.float32(math.copysign(math.inf, xd))
    return np.float32(1.0 / math.sqrt(xd))


@compiled
def _div_f32(x, y):
    # IEEE fp32 division x / y, with the y == 0 cases spelled out as for _rsqrt_f32
    if y == 0.0:
        if x != x or x == 0.0:
            return np.float32(np.nan)
        return np.float32(math.copysign(math.inf, x) * math.copysign(1.0, y))
    return np.float32(x / y)


@compiled
def _vec_functional(sub, vd, va, vb, n, dt, dt_dst, cols):
    """Sources a, b in dt; dst (and axpy's scalar b[0]) in dt_dst; arithmetic in fp32, every
    result rounded to fp32 once (as NumPy's float32 operators round). exp and rsqrt are computed
    in float64 and rounded once to fp32 (_exp_f32, _rsqrt_f32). Row and column subops see a as
    rows of `cols` elements; the row reductions accumulate in fp32 in increasing column order."""
    if sub == VEC_ROW_MAX or sub == VEC_ROW_SUM or sub == VEC_ROW_SUMSQ:
        for r in range(n // cols):
            acc = _load_f32(va, r * cols, dt)
            if sub == VEC_ROW_SUMSQ:
                acc = np.float32(acc * acc)
            for c in range(1, cols):
                v = _load_f32(va, r * cols + c, dt)
                if sub == VEC_ROW_MAX:
                    acc = v if v > acc else acc
                elif sub == VEC_ROW_SUM:
                    acc = np.float32(acc + v)
                else:
                    acc = np.float32(acc + np.float32(v * v))
            _store_f32(vd, r, dt_dst, acc)
        return
    alpha = np.float32(0.0)
    if sub == VEC_AXPY:
        alpha = _load_f32(vb, 0, dt_dst)
    for i in range(n):
        if sub == VEC_ZERO:
            r = np.float32(0.0)
        elif sub == VEC_ADD:
            r = np.float32(_load_f32(va, i, dt) + _load_f32(vb, i, dt))
        elif sub == VEC_MUL:
            r = np.float32(_load_f32(va, i, dt) * _load_f32(vb, i, dt))
        elif sub == VEC_SILU_MUL:
            r = np.float32(_silu(_load_f32(va, i, dt)) * _load_f32(vb, i, dt))
        elif sub == VEC_DSILU_MUL:
            r = np.float32(_dsilu(_load_f32(va, i, dt)) * _load_f32(vb, i, dt))
        elif sub == VEC_CVT:
            r = _load_f32(va, i, dt)
        elif sub == VEC_SUB:
            r = np.float32(_load_f32(va, i, dt) - _load_f32(vb, i, dt))
        elif sub == VEC_MAX:
            x = _load_f32(va, i, dt)
            y = _load_f32(vb, i, dt)
            r = x if x >= y else y
        elif sub == VEC_EXP:
            r = _exp_f32(_load_f32(va, i, dt))
        elif sub == VEC_RSQRT:
            r = _rsqrt_f32(_load_f32(va, i, dt))
        elif sub == VEC_ROW_ADD:
            r = np.float32(_load_f32(va, i, dt) + _load_f32(vb, i // cols, dt))
        elif sub == VEC_ROW_SUB:
            r = np.float32(_load_f32(va, i, dt) - _load_f32(vb, i // cols, dt))
        elif sub == VEC_ROW_MUL:
            r = np.float32(_load_f32(va, i, dt) * _load_f32(vb, i // cols, dt))
        elif sub == VEC_ROW_DIV:
            r = _div_f32(_load_f32(va, i, dt), _load_f32(vb, i // cols, dt))
        elif sub == VEC_COL_ADD:
            r = np.float32(_load_f32(va, i, dt) + _load_f32(vb, i % cols, dt))
        elif sub == VEC_COL_MUL:
            r = np.float32(_load_f32(va, i, dt) * _load_f32(vb, i % cols, dt))
        else:  # VEC_AXPY
            r = np.float32(_load_f32(vd, i, dt_dst) + alpha * _load_f32(va, i, dt))
        _store_f32(vd, i, dt_dst, r)
