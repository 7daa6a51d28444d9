"""Per-GPU kernel launch and thread-block scheduler.

Kernels are launched on streams: launches in one (GPU, stream) run in order, each starting one
``kernel_launch_latency`` after its predecessor finished (the first one after the latency from time
zero); launches on different streams may run concurrently. A running launch places its thread
blocks onto SMs round-robin as slots free up, respecting the SM's resident-TB limit, the kernel's
``.max_tbs_per_sm`` and shared-memory capacity (first fit). A placed TB starts ``tb_launch_cycles``
later with its registers zeroed and its special and parameter registers set. A launch with
``dam_tile_tbs`` places only the thread blocks the MoE-Hub DAM has started (``granted``).
"""
from ..engine.jit import compiled

from ..engine.clock import cycle_at_or_after, cycle_edge
from ..engine.events import EV_KERNEL_START, push
from ..engine.state import LN_DONE, LN_RUNNING, TB_EMPTY, TB_READY
from ..isa.encoding import (FIRST_PARAM_REG, MAX_PARAMS, REG_GPU, REG_NGPU, REG_NSM, REG_NTB,
                            REG_SM, REG_SMEM, REG_TB, SMEM_ADDR_BIT)
from .trace import (CAT_LAUNCH, TR_LAUNCH_END, TR_LAUNCH_START, TR_TB_EXIT, TR_TB_PLACE,
                    trace_event, trace_tb)
from .wakeups import sm_wake


@compiled
def schedule_initial_launches(st):
    """Every launch that heads its stream starts after one launch latency (plus its host delay)."""
    n = st.ln.shape[0]
    for l in range(n):
        head = True
        for m in range(n):
            if st.ln[m].next_in_stream == l:
                head = False
        if head:
            push(st, st.p[0].kernel_launch_ticks + st.ln[l].host_delay, EV_KERNEL_START, l, 0)


@compiled
def kernel_start(st, l, tick):
    ln = st.ln[l]
    ln.status = LN_RUNNING
    ln.start = tick
    trace_event(st, CAT_LAUNCH, TR_LAUNCH_START, l, ln.gpu, 0, tick)
    dispatch_blocks(st, ln.gpu, tick)


@compiled
def _smem_fit(st, sm, nbytes):
    """First-fit base offset for nbytes of shared memory on SM sm, or -1."""
    if nbytes == 0:
        return 0
    T = st.p[0].slots_per_sm
    cand = 0
    while cand + nbytes <= st.p[0].smem_bytes:
        clash = -1
        for j in range(T):
            tb = st.tb[sm * T + j]
            if tb.state != TB_EMPTY and tb.smem_bytes > 0:
                lo = tb.smem_base
                hi = lo + tb.smem_bytes
                if lo < cand + nbytes and cand < hi and hi > clash:
                    clash = hi
        if clash < 0:
            return cand
        cand = clash
    return -1


@compiled
def dispatch_blocks(st, g, tick):
    """Place as many pending thread blocks of GPU g's running launches as fit."""
    p = st.p[0]
    S = p.sms_per_gpu
    T = p.slots_per_sm
    gp = st.gpu[g]
    c0 = cycle_at_or_after(tick, p.sm_period_fs)
    start_tick = cycle_edge(c0 + p.tb_launch_cycles, p.sm_period_fs)
    for l in range(st.ln.shape[0]):
        ln = st.ln[l]
        if ln.gpu != g or ln.status != LN_RUNNING:
            continue
        while ln.dispatched < ln.grid and ln.dispatched < ln.granted:
            placed = False
            for k in range(S):
                s = (gp.rr_sm + k) % S
                sm = g * S + s
                if st.sm[sm].resident >= T:
                    continue
                if ln.max_per_sm > 0 and st.ln_per_sm[l, s] >= ln.max_per_sm:
                    continue
                base = _smem_fit(st, sm, ln.smem)
                if base < 0:
                    continue
                slot = -1
                for j in range(T):
                    if st.tb[sm * T + j].state == TB_EMPTY:
                        slot = sm * T + j
                        break
                _place(st, l, g, s, sm, slot, base, start_tick, tick)
                gp.rr_sm = (s + 1) % S
                placed = True
                break
            if not placed:
                break


@compiled
def _place(st, l, g, s, sm, slot, smem_base, start_tick, tick):
    p = st.p[0]
    ln = st.ln[l]
    tb_index = ln.dispatched
    ln.dispatched += 1
    st.ln_per_sm[l, s] += 1
    smr = st.sm[sm]
    if smr.resident == 0:
        smr.active_since = tick
    smr.resident += 1
    smr.tbs_launched += 1
    tb = st.tb[slot]
    tb.state = TB_READY
    tb.launch = l
    tb.pc = ln.entry_pc
    tb.ready = start_tick
    tb.progress = start_tick
    tb.outstanding = 0
    tb.smem_base = smem_base
    tb.smem_bytes = ln.smem
    regs = st.regs[slot]
    regs[:] = 0
    regs[REG_GPU] = g
    regs[REG_NGPU] = p.num_gpus
    regs[REG_SM] = s
    regs[REG_NSM] = p.sms_per_gpu
    regs[REG_TB] = tb_index
    regs[REG_NTB] = ln.grid
    regs[REG_SMEM] = SMEM_ADDR_BIT + smem_base
    for i in range(MAX_PARAMS):
        regs[FIRST_PARAM_REG + i] = st.ln_params[l, i]
    trace_tb(st, slot, TR_TB_PLACE, l, tb_index, tick)
    sm_wake(st, sm, start_tick)


@compiled
def block_exit(st, slot, tick):
    """A thread block executed `exit` with nothing outstanding: free its slot."""
    p = st.p[0]
    T = p.slots_per_sm
    S = p.sms_per_gpu
    sm = slot // T
    g = sm // S
    tb = st.tb[slot]
    l = tb.launch
    trace_tb(st, slot, TR_TB_EXIT, l, 0, tick)
    tb.state = TB_EMPTY
    tb.launch = -1
    tb.smem_bytes = 0
    smr = st.sm[sm]
    smr.resident -= 1
    if smr.resident == 0:
        smr.active_ticks += tick - smr.active_since
    st.ln_per_sm[l, sm - g * S] -= 1
    ln = st.ln[l]
    ln.finished += 1
    if ln.finished == ln.grid:
        ln.status = LN_DONE
        ln.end = tick
        trace_event(st, CAT_LAUNCH, TR_LAUNCH_END, l, g, 0, tick)
        if ln.next_in_stream >= 0:
            nxt = ln.next_in_stream
            push(st, tick + p.kernel_launch_ticks + st.ln[nxt].host_delay, EV_KERNEL_START, nxt, 0)
    dispatch_blocks(st, g, tick)
