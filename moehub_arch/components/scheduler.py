"""Per-GPU kernel launch and thread-block scheduler.

Kernels are launched on streams: launches in one (GPU, stream) run in order, each starting one
``kernel_launch_latency`` after its predecessor finished (the first one after the latency from time
zero); launches on different streams may run concurrently. A running launch places its thread
blocks onto SMs round-robin as slots free up, respecting the SM's resident-TB limit, the kernel's
``.max_tbs_per_sm``, registers and threads (a kernel's ``.threads`` x ``.regs``: the resident
blocks' registers, allocated per warp in ``register_alloc_unit`` multiples, fit the SM's
``registers``, their threads its ``max_threads``; CUDA C++ Programming Guide, "Occupancy") and
shared-memory capacity (first fit): a block holds its warp groups'
``.smem`` plus its launch's ``dynamic_smem`` (CUDA's dynamic shared memory) until it exits, so a
launch with a large footprint keeps other launches' blocks off its SMs, as on the GPU (CUDA C++
Programming Guide, "Occupancy": shared memory per block is a per-SM residency limit). A placed TB starts ``tb_launch_cycles``
later with its registers zeroed and its special and parameter registers set. A launch with
``dam_tile_tbs`` places only the thread blocks the MoE-Hub DAM has started (``granted``), in the
order and with the block indices (%tb) the DAM queued them in its GPU's start queue
(``grant_block``): a deque, because the DAM puts a tile's dependent group before the first groups
of later tiles.

Warp groups (``warp_groups: G`` on a launch): a thread block of G warp groups is G instruction
streams, each in its own slot with its own registers, issuing independently; the SM's issue
arbitration interleaves them like any resident streams, and they share the SM's functional units.
This is how DeepEP runs a channel (github.com/deepseek-ai/DeepEP csrc/kernels/intranode.cu: one
768-thread block per SM, `__launch_bounds__(kNumThreads, 1)`, its warps split evenly over the
peer ranks, each rank's warps working on their own). The block is placed whole, on an SM with a
free thread-block place (``max_resident_tbs`` counts blocks) and G free stream slots, and keeps
every slot until its last warp group exits (an SM releases a block's warps, registers and shared
memory when the block ends: a warp group that exits early is TB_RETIRED). The SM has
max(``max_resident_tbs``, the largest G of the run's launches) stream slots, so ordinary runs are
unchanged.
"""
from ..engine.jit import compiled

from ..engine.clock import cycle_at_or_after, cycle_edge
from ..engine.events import push
from ..engine.state import LN_DONE, LN_RUNNING, TB_EMPTY, TB_READY, TB_RETIRED
from ..isa.encoding import (FIRST_PARAM_REG, MAX_PARAMS, REG_GPU, REG_NGPU, REG_NSM, REG_NTB,
                            REG_SM, REG_SMEM, REG_TB, SMEM_ADDR_BIT)
from .trace import (CAT_LAUNCH, TR_LAUNCH_END, TR_LAUNCH_START, TR_TB_EXIT, TR_TB_PLACE,
                    trace_event, trace_tb)
from .wakeups import sm_wake
from .sizing import start_queue_capacity
from ..config.keys import key_param
from ..declare import Array, Block, Event, Record, Stat, StatGroup, Debug, fields

EV_KERNEL_START = 1  # a0 = launch index: the launch's first thread blocks may be placed


def kernel_block_registers(kernel, sm):
    """Registers one thread block of `kernel` (an assembled KernelInfo) holds on an SM of config
    `sm`: CUDA allocates registers per warp, .regs x 32 rounded up to register_alloc_unit, for
    ceil(.threads / 32) warps (CUDA C++ Programming Guide, "Occupancy"; the occupancy
    calculator's allocation granularity). 0 for a kernel that declares no .threads / .regs."""
    if not kernel.threads:
        return 0
    unit = sm.register_alloc_unit
    per_warp = -(-kernel.regs_per_thread * 32 // unit) * unit
    return -(-kernel.threads // 32) * per_warp


def _launch_stat(what):
    return lambda i, k: f"{what} of kernel '{i.launch.kernel}'"


def check_launches(sim, out):
    st = sim.state
    out.check(st.ln.status == LN_DONE, "kernel launches that did not finish",
              lambda l: f"'{sim.launches[l].kernel}' on GPU {sim.launches[l].gpu}: "
                        f"{int(st.ln.finished[l])} of {int(st.ln.grid[l])} thread blocks exited")


def _start_queue_shape(cfg):
    return (cfg.system.num_gpus, start_queue_capacity(cfg))


BLOCK = Block(
    "scheduler", __doc__.split("\n\n")[0],
    params=(
        key_param("kernel_launch_ticks", "system.gpu.kernel_launch_latency",
                  how="from a launch's predecessor in its stream, or time zero, to its start"),
        key_param("tbs_per_sm", "system.gpu.sm.max_resident_tbs",
                  how="a block of warp groups counts once"),
        key_param("sm_registers", "system.gpu.sm.registers"),
        key_param("sm_max_threads", "system.gpu.sm.max_threads"),
        key_param("tb_launch_cycles", "system.gpu.sm.tb_launch_cycles",
                  how="from placing a thread block to its first issue"),
    ),
    records=(Record("ln", "kernel launches, one per (launch, GPU) instance"),),
    fields=fields("ln", ("gpu", "GPU it runs on"), ("entry_pc", "first instruction"),
                  ("grid", "thread blocks"), ("next_in_stream", "next launch of its stream (-1: none)"),
                  ("smem", "shared memory per TB"), ("max_per_sm", ".max_tbs_per_sm (0: no limit)"),
                  ("dynamic_smem", "shared memory per thread block asked for at launch, on top of "
                   "its warp groups' .smem (held by the block's first warp group)"),
                  ("dispatched", "TBs placed"), ("finished", "TBs exited"), ("status", "LN_*"),
                  ("start", "start tick (-1: not started)"), ("end", "end tick (-1: not ended)"),
                  ("host_delay", "host-side time before the launch is issued (e.g. a host sync)"),
                  ("tx_wire", "link wire bytes its GPU's hub sent for its requests and rows"),
                  ("groups", "warp groups per thread block (grid counts streams: blocks x groups)"),
                  ("block_regs", "registers a thread block holds (its kernel's .threads x .regs "
                   "in whole warps and allocation units; 0: not declared)"),
                  ("block_threads", "threads of a thread block (.threads; 0: not declared)"))
    + fields("gpu", ("rr_sm", "round-robin pointer over the GPU's SMs (TB placement)"),
             ("start_head", "start queue: position of its first entry"),
             ("start_count", "start queue: blocks started by the DAM, not placed yet"))
    + fields("sm", ("blocks", "resident thread blocks (a block of warp groups counts once)"),
             ("regs_used", "registers held by the resident blocks"),
             ("threads_used", "threads of the resident blocks"))
    + fields("tb", ("start_tag", "what the unit that started the block tracks it by (the DAM: "
                    "the tile whose group counter its exit decrements; -1: none)"),
             ("block_lead", "slot of the first warp group of its thread block"),
             ("block_live", "on a block's first slot: its warp groups that have not exited"),
             init={"start_tag": -1}),
    arrays=(Array("start_ids", "per GPU, a deque of the block indices the DAM started and the "
                  "scheduler has not placed yet", _start_queue_shape),
            Array("start_tags", "the start_tag of each of those blocks", _start_queue_shape, -1)),
    stats=(StatGroup("launch", "", (
        Stat("start_tick", "ps", lambda i, k: f"start of kernel '{i.launch.kernel}' "
             f"(stream {i.launch.stream})", lambda i: int(i.rec.start)),
        Stat("end_tick", "ps", lambda i, k: f"end of kernel '{i.launch.kernel}' (last TB exit)",
             lambda i: int(i.rec.end)),
        Stat("ticks", "ps", _launch_stat("duration"),
             lambda i: int(i.rec.end) - int(i.rec.start) if int(i.rec.end) >= 0 else -1),
        Stat("tbs", "count", _launch_stat("thread blocks"), lambda i: i.launch.grid),
    )),),
    events=(Event("kernel_start", EV_KERNEL_START, "a launch starts (after its launch latency)"),),
    checks=(check_launches,),
    debug=(Debug("Launch", CAT_LAUNCH, (TR_LAUNCH_START, TR_LAUNCH_END), describe={
        TR_LAUNCH_START: lambda n, ident, v0, v1: (
            f"system.gpu{v0}.launch{ident}",
            f"kernel '{n.kernel(ident)}' starts ({n.launches[ident].grid} TBs)"),
        TR_LAUNCH_END: lambda n, ident, v0, v1: (
            f"system.gpu{v0}.launch{ident}",
            f"kernel '{n.kernel(ident)}' ends ({n.launches[ident].grid} TBs)")}),),
    start=(lambda st: schedule_initial_launches(st),),
)


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
        G = ln.groups
        while ln.dispatched < ln.grid and ln.dispatched < ln.granted:
            placed = False
            for k in range(S):
                s = (gp.rr_sm + k) % S
                sm = g * S + s
                if st.sm[sm].blocks >= p.tbs_per_sm or T - st.sm[sm].resident < G:
                    continue
                if ln.max_per_sm > 0 and st.ln_per_sm[l, s] + G > ln.max_per_sm:
                    continue
                if (st.sm[sm].regs_used + ln.block_regs > p.sm_registers
                        or st.sm[sm].threads_used + ln.block_threads > p.sm_max_threads):
                    continue
                base = _smem_fit(st, sm, ln.smem * G + ln.dynamic_smem)
                if base < 0:
                    continue
                # the block's warp groups, each in a free slot with its share of the allocation;
                # the first one's share runs on into the block's dynamic shared memory
                lead = -1
                for i in range(G):
                    slot = -1
                    for j in range(T):
                        if st.tb[sm * T + j].state == TB_EMPTY:
                            slot = sm * T + j
                            break
                    if lead < 0:
                        lead = slot
                        _place(st, l, g, s, sm, slot, base, ln.smem + ln.dynamic_smem,
                               start_tick, tick)
                    else:
                        _place(st, l, g, s, sm, slot, base + ln.dynamic_smem + i * ln.smem,
                               ln.smem, start_tick, tick)
                    st.tb[slot].block_lead = lead
                st.tb[lead].block_live = G
                st.sm[sm].blocks += 1
                st.sm[sm].regs_used += ln.block_regs
                st.sm[sm].threads_used += ln.block_threads
                gp.rr_sm = (s + 1) % S
                placed = True
                break
            if not placed:
                break


@compiled
def grant_block(st, g, l, tb_index, tag, first):
    """Another unit (the MoE-Hub DAM) starts block `tb_index` of launch l (GPU g's launch with
    dam_tile_tbs): it is placed when a slot frees, before the blocks already waiting if `first`.
    Returns False if the queue is full (the capacity bound was wrong: an internal error)."""
    gp = st.gpu[g]
    cap = st.start_ids.shape[1]
    if gp.start_count >= cap:
        return False
    if first:
        gp.start_head = (gp.start_head + cap - 1) % cap
        at = gp.start_head
    else:
        at = (gp.start_head + gp.start_count) % cap
    st.start_ids[g, at] = tb_index
    st.start_tags[g, at] = tag
    gp.start_count += 1
    st.ln[l].granted += 1
    return True


@compiled
def _place(st, l, g, s, sm, slot, smem_base, smem_bytes, start_tick, tick):
    p = st.p[0]
    ln = st.ln[l]
    tb_index = ln.dispatched
    tag = -1
    if ln.dam_tile_tbs > 0:
        # the next block the DAM started, with the index it gave it
        gp = st.gpu[g]
        tb_index = st.start_ids[g, gp.start_head]
        tag = st.start_tags[g, gp.start_head]
        gp.start_head = (gp.start_head + 1) % st.start_ids.shape[1]
        gp.start_count -= 1
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
    tb.smem_bytes = smem_bytes
    tb.start_tag = tag
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
    tb.state = TB_RETIRED
    st.ln_per_sm[l, sm - g * S] -= 1
    lead = st.tb[tb.block_lead]
    lead.block_live -= 1
    if lead.block_live == 0:
        # the block's last warp group: the SM releases the block's slots and shared memory
        smr = st.sm[sm]
        for j in range(T):
            other = st.tb[sm * T + j]
            if other.state == TB_RETIRED and other.block_lead == tb.block_lead:
                other.state = TB_EMPTY
                other.launch = -1
                other.smem_bytes = 0
                smr.resident -= 1
        smr.blocks -= 1
        smr.regs_used -= st.ln[l].block_regs
        smr.threads_used -= st.ln[l].block_threads
        if smr.resident == 0:
            smr.active_ticks += tick - smr.active_since
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
