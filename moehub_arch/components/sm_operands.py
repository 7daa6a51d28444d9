"""The SM's operand reads, address checks and memory-access timing, shared by every instruction.

What every instruction of the SM's interpreter (sm_interpreter.py) and of the extensions'
instructions (moehub/isa.py, nvls_gpu.py, dysharp_isa.py, cais/isa.py) does before its own
semantics: read a register or immediate operand, check that a byte range is legal HBM or lies in
the thread block's shared memory, time a bulk access (HBM through the channel model, shared memory
by its fixed latency, streamed over the unit's occupancy), and block a thread block that must wait.
The model is the SM's (components/sm.py's docstring); this module only keeps it in one place
under the interpreter and the extensions, so neither imports the other's helpers.
"""

from ..engine.jit import compiled, inline
from ..engine.clock import cycle_at_or_after, cycle_edge
from ..engine.state import (ERR_ADDR_RANGE, ERR_BAD_SIZE, ERR_MISALIGNED, ERR_UNBACKED_WORD,
                            TB_WAIT_HUB, WAITLIST_HUB)
from ..isa.encoding import IMM, OP0, REG_CLOCK, REG_TICK, SMEM_ADDR_BIT, THR, UNIT, UNIT_LSU
from .hbm import hbm_access, hbm_access_paced, hbm_backed, raise_error
from .trace import TR_TB_WAIT, trace_tb
from .waiters import add_waiter


@compiled
def operand(st, slot, row, i, tick, cyc):
    if (row[IMM] >> i) & 1:
        return row[OP0 + i]
    r = row[OP0 + i]
    if r == REG_CLOCK:
        return cyc
    if r == REG_TICK:
        return tick
    return st.regs[slot, r]


@compiled
def is_smem(addr):
    return addr >= SMEM_ADDR_BIT


@compiled
def check_range(st, slot, addr, nbytes):
    """True if [addr, addr+nbytes) is a legal HBM range or lies inside the TB's shared memory."""
    if nbytes < 0:
        raise_error(st, ERR_BAD_SIZE, slot, nbytes)
        return False
    if is_smem(addr):
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
def check_hbm_word(st, slot, addr):
    """True if addr is an aligned, backed 8-byte word of HBM (flags and atomics live there)."""
    if addr % 8 != 0:
        raise_error(st, ERR_MISALIGNED, slot, addr)
        return False
    if is_smem(addr) or not check_range(st, slot, addr, 8):
        raise_error(st, ERR_ADDR_RANGE, slot, addr)
        return False
    if not hbm_backed(st, addr, 8):
        raise_error(st, ERR_UNBACKED_WORD, slot, addr)
        return False
    return True


@inline
def tb_bytes(st, g, sm, addr, nbytes):
    """Functional storage for a range: a byte view, or an empty view where storage is not backed.
    (Inlined: a compiled function may not return a view, see engine/jit.py.)"""
    if is_smem(addr):
        off = addr - SMEM_ADDR_BIT
        if st.smem.shape[1] >= off + nbytes:
            return st.smem[sm, off:off + nbytes]
        return st.smem[sm, 0:0]
    if hbm_backed(st, addr, nbytes):
        return st.hbm_mem[g, addr:addr + nbytes]
    return st.hbm_mem[g, 0:0]


@compiled
def mem_access(st, g, addr, nbytes, tick, is_write):
    """Timing of a bulk access: HBM via the channel model, shared memory by its fixed latency."""
    if is_smem(addr):
        return tick + cycle_edge(st.p[0].smem_latency_cycles, st.p[0].sm_period_fs)
    return hbm_access(st, g, addr, nbytes, tick, is_write)


@compiled
def mem_access_paced(st, g, addr, nbytes, tick, is_write, pace):
    """mem_access for an instruction's operand traffic, streamed over its unit occupancy `pace`
    (ticks): TMA / load-store pipelines fetch as the unit consumes (components/hbm.py)."""
    if is_smem(addr):
        return tick + cycle_edge(st.p[0].smem_latency_cycles, st.p[0].sm_period_fs)
    return hbm_access_paced(st, g, addr, nbytes, tick, is_write, pace)


@compiled
def pace_ticks(st, row, work):
    """How long the instruction's unit works on `work` units (ceil(work / throughput) cycles, as
    its occupancy below), in ticks: the time its memory traffic is paced over."""
    thr = row[THR]
    if thr <= 0 or work <= 0:
        return 0
    return cycle_edge((work + thr - 1) // thr, st.p[0].sm_period_fs)


@compiled
def tb_block(st, slot, state, tick):
    st.tb[slot].state = state
    st.tb[slot].wait_start = tick
    trace_tb(st, slot, TR_TB_WAIT, state, 0, tick)


@compiled
def stall_on_hub(st, slot, g, tick):
    """The hub cannot take the request now: the TB sleeps and re-executes the instruction later."""
    add_waiter(st, g, WAITLIST_HUB, slot)
    tb_block(st, slot, TB_WAIT_HUB, tick)


@compiled
def charge_unit(st, sm, row, tick, cyc, occ):
    free = cycle_edge(cyc + occ, st.p[0].sm_period_fs)
    unit = row[UNIT]
    if free > st.sm_unit_free[sm, unit]:
        st.sm_unit_free[sm, unit] = free
    st.sm_unit_busy[sm, unit] += free - tick


@compiled
def occupy_lsu(st, sm, tick, nbytes):
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
