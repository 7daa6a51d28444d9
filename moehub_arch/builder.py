"""System builder: config + assembled program -> the State arrays the run loop works on.

Everything here runs once, in Python, before the compiled loop starts: the memory map (symmetric
buffers, identical addresses on every GPU as in NVSHMEM), buffer initial contents, kernel launches
with their evaluated parameters, the NVLink/NVSwitch topology with its routing tables, and the
sizes of every bounded queue.
"""
import re

import numpy as np
import attrs

from .errors import BuildError  # noqa: F401 (raised here; re-exported)
from .components.hbm import CAL_COLUMNS, HBM_MIN_ACCESS  # noqa: F401 (re-exported)
from .components.fabric import fill_fabric_destinations
from .components.moehub.aau import aau_staging_packets, pair_homes
from .components.sizing import expert_placement, local_experts, stream_slots_per_sm
from .components.moehub.rpm import rpm_packet_bytes  # noqa: F401 (re-exported)
from .components.moehub.forward import forward_rows
from .components.nvls import check_buffer_size, multicast_object_rows
from .components.nvlink import FIFO_COLUMNS
from .components.packet import request_records
from .components.cais import cais_group_rows
from .components.scheduler import kernel_block_registers
from .components.trace import TRACE_COLUMNS
from .composition import (NUM_EVENT_KINDS, PARAMS, State, build_blocks, declared_arrays,
                          new_record_array, param_values, timer_layout)
from .declare import Building
from .engine.events import new_event_queue, new_timers
from .engine.state import (DAM_HIST_BINS, NUM_WAIT_REASONS, RPM_HIST_BINS, aligned_zeros,
                           new_records)
from .isa.encoding import MAX_PARAMS, NUM_REGS, NUM_UNITS, ROW_WIDTH
from .isa.expr import ExprError, evaluate
from .topology import (TopologyError, build_fabric, build_routes, channel_arrays,
                       gpus_per_node, node_array)

BUFFER_ALIGN = 256  # bytes; every buffer starts on an HBM interleave-friendly boundary
# windows in the paced-arbitration calendar (components/hbm.py): with 1 us windows a 1 ms horizon,
# far beyond the backlog of a saturated GPU in the layer experiments; work beyond it is served at full
# rate and counted (system.gpuN.hbm.beyond_calendar_ticks). A power of two: the calendar finds a
# window's ring row with a mask (components/hbm.py _window)
MEMORY_CALENDAR_WINDOWS = 1024


@attrs.frozen
class Buffer:
    name: str
    addr: int
    nbytes: int
    region: str
    dtype: str


@attrs.frozen
class LaunchInfo:
    index: int          # index among all (launch, GPU) instances: the engine's launch id
    config_index: int   # index in workload.launches
    gpu: int
    kernel: str
    stream: int
    grid: int
    params: tuple
    host_delay: int = 0  # ps before the launch is issued (LaunchConfig.host_delay)


def layout_buffers(cfg):
    """Control buffers first (always backed), then data buffers; returns (buffers, control_end, end)."""
    buffers = {}
    addr = 0
    wanted = [(b.name, b.bytes, b.region, b.dtype) for b in cfg.workload.buffers]
    moe = cfg.workload.moe
    if moe.num_experts:
        # the MoE-Hub's receive windows (data) and completion records (control: always backed,
        # consumers read them with ld)
        slots = local_experts(cfg) * moe.window_rows
        wanted.append((MOE_RECORDS, slots * cfg.system.gpu.hub.moe.aau.record_bytes, "control", "i64"))
        wanted.append((MOE_WINDOWS, slots * moe.row_bytes, "data", "u8"))
        if cfg.system.gpu.hub.moe.aau.overflow == "spill":
            # where evicted row-table entries live: one entry per window slot (last, so that the
            # other buffers keep their addresses)
            wanted.append((MOE_RAT_SPILL, slots * cfg.system.gpu.hub.moe.aau.record_bytes, "data",
                           "u8"))
        if cfg.system.gpu.hub.moe.aau.allocation == "paired" and \
                cfg.system.gpu.hub.moe.aau.pair_table == "memory":
            # the AAU's pairing table (components/moehub/pairing.py): an entry per (source GPU,
            # home); its contents are modelled in State.aau_pair, its accesses charged here
            wanted.append((MOE_PAIR, cfg.system.num_gpus * pair_homes(cfg)
                           * cfg.system.gpu.hub.moe.aau.pair_entry_bytes, "data", "u8"))
        if forward_rows(cfg):
            # internode per_node: the forwarding unit's buffer (components/moehub/forward.py)
            wanted.append((MOE_FORWARD, forward_rows(cfg) * moe.row_bytes, "data", "u8"))
    for region in ("control", "data"):
        for name, nbytes, bregion, dtype in wanted:
            if bregion != region:
                continue
            buffers[name] = Buffer(name, addr, nbytes, bregion, dtype)
            addr += (nbytes + BUFFER_ALIGN - 1) // BUFFER_ALIGN * BUFFER_ALIGN
        if region == "control":
            control_end = addr
    if addr > cfg.system.gpu.hbm.capacity:
        raise BuildError(f"workload.buffers: the buffers need {addr} bytes per GPU, more than "
                         f"system.gpu.hbm.capacity ({cfg.system.gpu.hbm.capacity} bytes)")
    return buffers, control_end, addr


MOE_RECORDS = "moe_records"   # internal buffers of the MoE-Hub (names users may read)
MOE_WINDOWS = "moe_windows"
MOE_RAT_SPILL = "moe_rat_spill"
MOE_FORWARD = "moe_forward"
MOE_PAIR = "moe_pair"


_NP_DTYPES = {"f32": np.float32, "i64": np.int64, "u8": np.uint8}


def _init_buffer(mem_row, buf, spec, seed, g):
    view = mem_row[buf.addr:buf.addr + buf.nbytes]
    if spec.init == "zeros":
        return
    es = {"f32": 4, "bf16": 2, "i64": 8, "u8": 1}[spec.dtype]
    n = buf.nbytes // es
    if spec.init == "arange":
        values = np.arange(n, dtype=np.float64)
    elif spec.init == "fill":
        values = np.full(n, spec.value, dtype=np.float64)
    else:  # random, different per GPU, reproducible from the seed
        bseed = spec.seed if spec.seed is not None else seed
        rng = np.random.default_rng([bseed, g, sum(map(ord, buf.name))])
        if spec.dtype == "u8":
            values = rng.integers(0, 256, n)         # every byte value
        elif spec.dtype == "i64":
            values = rng.integers(-1000, 1000, n)
        else:
            values = rng.uniform(-1.0, 1.0, n)
    if spec.dtype == "bf16":
        bits = values.astype(np.float32).view(np.uint32)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        view[:n * 2] = rounded.view(np.uint8)
    else:
        arr = values.astype(_NP_DTYPES[spec.dtype])
        view[:n * es] = arr.view(np.uint8)


_BUFFER_REF = re.compile(r"@([A-Za-z_][A-Za-z0-9_]*)")


def _eval_param(expr, names, where):
    if isinstance(expr, (int, np.integer)):
        return int(expr)
    declared = list(names.get("__buffers__", ()))
    unknown = []

    def buffer_name(m):
        # whole names only: '@flags' must not read as '@flag' followed by 's'
        if m.group(1) not in declared:
            unknown.append(m.group(1))
        return f"buf__{m.group(1)}"
    text = _BUFFER_REF.sub(buffer_name, str(expr))
    if unknown or "@" in text:
        import difflib
        close = difflib.get_close_matches(unknown[0], declared, n=1) if unknown else []
        hint = f"; did you mean '@{close[0]}'?" if close else ""
        raise BuildError(f"{where}: '{expr}' names a buffer that is not declared in "
                         f"workload.buffers{hint} (declared: {', '.join(declared) or 'none'})")
    env = {k: v for k, v in names.items() if k != "__buffers__"}
    try:
        value = evaluate(text, env)
    except ExprError as e:
        raise BuildError(f"{where}: cannot evaluate '{expr}': {e}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(value, float) and not value.is_integer()):
        raise BuildError(f"{where}: '{expr}' evaluates to {value!r}, not an integer")
    if not -2 ** 63 <= value <= 2 ** 63 - 1:
        # kernel parameters and grids live in 64-bit registers and records (issue 52)
        raise BuildError(f"{where}: '{expr}' evaluates to {value:g}, which does not fit a "
                         f"64-bit integer")
    return int(value)


def build_launches(cfg, program, buffers):
    G = cfg.system.num_gpus
    launches = []
    last_in_stream = {}
    next_in_stream = []
    for li, lc in enumerate(cfg.workload.launches):
        where = f"workload.launches[{li}]"
        if lc.kernel not in program.kernels:
            import difflib
            close = difflib.get_close_matches(lc.kernel, list(program.kernels), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise BuildError(f"{where}.kernel: no kernel named '{lc.kernel}' in "
                             f"workload.kernel_files{hint} (kernels: {', '.join(program.kernels)})")
        kinfo = program.kernels[lc.kernel]
        given = dict(lc.params)
        missing = [p for p in kinfo.params if p not in given]
        unknown = [p for p in given if p not in kinfo.params]
        if missing or unknown:
            raise BuildError(f"{where}.params: kernel '{lc.kernel}' declares parameters "
                             f"({', '.join(kinfo.params) or 'none'}); missing: "
                             f"{', '.join(missing) or 'none'}; unknown: {', '.join(unknown) or 'none'}")
        gpus = lc.gpus if lc.gpus is not None else tuple(range(G))
        for g in gpus:
            names = {"gpu": g, "ngpu": G, "nsm": cfg.system.gpu.num_sms,
                     "__buffers__": list(buffers)}
            for b in buffers.values():
                names[f"buf__{b.name}"] = b.addr
            values = tuple(_eval_param(given[p], names, f"{where}.params.{p}") for p in kinfo.params)
            grid = _eval_param(lc.grid, names, f"{where}.grid")
            if grid < 1:
                raise BuildError(f"{where}.grid: '{lc.grid}' gives {grid} thread blocks on GPU {g}; "
                                 f"expected at least 1")
            idx = len(launches)
            launches.append(LaunchInfo(idx, li, g, lc.kernel, lc.stream, grid, values, lc.host_delay))
            next_in_stream.append(-1)
            key = (g, lc.stream)
            if key in last_in_stream:
                next_in_stream[last_in_stream[key]] = idx
            last_in_stream[key] = idx
    return launches, next_in_stream


def launch_smem(kernel, params, sm_bytes):
    """Shared memory one thread block of `kernel` reserves at a launch with parameter values
    `params` on SMs of `sm_bytes`: its `.smem`, sized for the largest job it may run; where that
    does not fit the SM and the kernel declares `.smem_job`, what this launch's jobs need, tile_rows
    x n_tile x smem_job bytes (a GPU with less shared memory runs a kernel with smaller tiles, as a
    CUTLASS kernel is instantiated per tile shape). Kernels that fit keep their `.smem`, so their
    residency does not change with the job size."""
    if kernel.smem_bytes <= sm_bytes or not kernel.smem_job:
        return kernel.smem_bytes
    pv = dict(zip(kernel.params, params))
    return min(kernel.smem_bytes, pv["tile_rows"] * pv["n_tile"] * kernel.smem_job)


def build_topology(cfg):
    """Channels, forwarding nodes and routing tables of the fabric (moehub_arch/topology.py:
    NVSwitch or NVLink bridges inside a node; PCIe, NICs and InfiniBand between nodes)."""
    fab = build_fabric(cfg)
    try:
        routes = build_routes(cfg, fab)
    except TopologyError as e:
        raise BuildError(str(e)) from None
    return fab, routes


def build_state(cfg, program, seed=None, presets=None):
    """Allocate and initialise every State array. Returns (State, buffers, launches).
    `presets`: buffer name -> [num_gpus, n] uint8 initial contents (e.g. routing tables)."""
    sysc, gpu = cfg.system, cfg.system.gpu
    G, S, T = sysc.num_gpus, gpu.num_sms, stream_slots_per_sm(cfg)
    NSM, NT = G * S, G * S * T
    L = sysc.nvlink.links_per_gpu
    R = request_records(cfg)   # request table + posted multimem stores' tags (packet.py)
    functional = cfg.workload.mode == "functional"
    seed = cfg.run.seed if seed is None else seed

    # every block's parameters (components/*.py BLOCK params, composed in composition.py)
    params = new_records(PARAMS, 1)
    for name, value in param_values(cfg).items():
        params[0][name] = value

    # memory
    buffers, control_end, total = layout_buffers(cfg)
    backed = total if functional else control_end
    hbm_mem = np.zeros((G, max(backed, 8)), np.uint8)
    specs = {b.name: b for b in cfg.workload.buffers}
    for g in range(G):
        for b in buffers.values():
            if b.addr + b.nbytes <= backed and b.name in specs:
                _init_buffer(hbm_mem[g], b, specs[b.name], seed, g)
    for name, rows in (presets or {}).items():
        b = buffers[name]
        if rows.shape[1] > b.nbytes or b.addr + rows.shape[1] > backed:
            raise BuildError(f"internal: preset contents of buffer '{name}' do not fit it")
        hbm_mem[:, b.addr:b.addr + rows.shape[1]] = rows
    if MOE_WINDOWS in buffers:
        params[0].win_addr = buffers[MOE_WINDOWS].addr
        params[0].rec_addr = buffers[MOE_RECORDS].addr
        if MOE_RAT_SPILL in buffers:
            params[0].rat_spill_addr = buffers[MOE_RAT_SPILL].addr
        if MOE_FORWARD in buffers:
            params[0].fwd_addr = buffers[MOE_FORWARD].addr
        if MOE_PAIR in buffers:
            params[0].pair_addr = buffers[MOE_PAIR].addr
    smem = np.zeros((NSM, gpu.sm.smem_bytes if functional else 0), np.uint8)

    # launches
    launches, next_in_stream = build_launches(cfg, program, buffers)
    NL = len(launches)
    ln = new_record_array("ln", NL, cfg)
    ln_params = np.zeros((NL, MAX_PARAMS), np.int64)
    for l, nxt in zip(launches, next_in_stream):
        k = program.kernels[l.kernel]
        block_smem = launch_smem(k, l.params, gpu.sm.smem_bytes)
        if block_smem > gpu.sm.smem_bytes:
            job = ""
            if k.smem_job:
                pv = dict(zip(k.params, l.params))
                job = (f" (and its jobs of tile_rows {pv['tile_rows']} x n_tile {pv['n_tile']} "
                       f"x {k.smem_job} bytes (.smem_job) need "
                       f"{pv['tile_rows'] * pv['n_tile'] * k.smem_job}: a smaller n_tile fits)")
            raise BuildError(f"kernel '{k.name}' ({k.file}:{k.line}) asks for {k.smem_bytes} bytes of "
                             f"shared memory per TB{job}; system.gpu.sm.smem_bytes is "
                             f"{gpu.sm.smem_bytes}")
        lc = cfg.workload.launches[l.config_index]
        groups = lc.warp_groups
        if groups > 1 and lc.dam_tile_tbs:
            raise BuildError(f"workload.launches[{l.config_index}].warp_groups: {groups} for kernel "
                             f"'{k.name}' cannot be placed: the MoE-Hub DAM starts single-stream "
                             f"thread blocks (dam_tile_tbs)")
        footprint = block_smem * groups + lc.dynamic_smem
        if footprint > gpu.sm.smem_bytes:
            key = "warp_groups" if groups > 1 and not lc.dynamic_smem else "dynamic_smem"
            raise BuildError(f"workload.launches[{l.config_index}].{key}: a thread block of kernel "
                             f"'{k.name}' cannot be placed on any SM: its shared memory "
                             f"({groups} warp groups x {block_smem} bytes of .smem + "
                             f"{lc.dynamic_smem} bytes of dynamic_smem = {footprint} bytes) exceeds "
                             f"system.gpu.sm.smem_bytes ({gpu.sm.smem_bytes})")
        lc = cfg.workload.launches[l.config_index]
        declared = lc.kernel_threads == "declared"
        block_regs = kernel_block_registers(k, gpu.sm) if declared else 0
        block_threads = k.threads if declared else 0
        if block_threads > gpu.sm.max_threads or block_regs > gpu.sm.registers:
            raise BuildError(f"kernel '{k.name}' ({k.file}:{k.threads_line}): a thread block of "
                             f"{k.threads} threads x {k.regs_per_thread} registers (.threads / "
                             f".regs: {block_regs} registers in whole warps) cannot be placed on "
                             f"any SM: system.gpu.sm.registers is {gpu.sm.registers} and "
                             f"system.gpu.sm.max_threads {gpu.sm.max_threads}")
        r = ln[l.index]
        r.block_regs, r.block_threads = block_regs, block_threads
        # the scheduler's unit is the instruction stream: grid = blocks x warp groups
        r.gpu, r.entry_pc, r.grid, r.next_in_stream = l.gpu, k.entry_pc, l.grid * groups, nxt
        r.groups = groups
        r.smem, r.max_per_sm, r.start, r.end = block_smem, k.max_tbs_per_sm, -1, -1
        r.dynamic_smem = lc.dynamic_smem
        r.host_delay = l.host_delay
        r.dam_tile_tbs = lc.dam_tile_tbs
        r.dam_first_group = lc.dam_groups[0] if lc.dam_groups else lc.dam_tile_tbs
        r.granted = 0 if r.dam_tile_tbs else r.grid
        ln_params[l.index, :len(l.params)] = l.params

    # record arrays with the initial values their blocks declare
    tb = new_record_array("tb", NT, cfg)
    sm = new_record_array("sm", NSM, cfg)
    gpus = new_record_array("gpu", G, cfg)
    gpus.dam_launch[:] = _dam_launches(cfg, launches)

    # fabric
    fab, (gpu_routes, sw_routes, sw_inputs) = build_topology(cfg)
    cols = channel_arrays(fab, G)
    nch = len(fab.channels)
    ch = new_record_array("ch", nch, cfg)
    for name, values in cols.items():
        ch[name][:] = values
    # what the blocks derive from the built fabric: link credits, queue depths (nvlink.py, nic.py)
    building = Building(ch)
    try:
        build_blocks(cfg, building)
    except ValueError as e:
        raise BuildError(str(e)) from None
    rxq_cap, rsp_rx_cap = building.sizes["rxq_cap"], building.sizes["rsp_rx_cap"]
    in_flight = building.sizes["in_flight"]
    # component timers (engine.events): every block's timer range (composition.timer_layout)
    pr = params[0]
    layout, count = timer_layout(cfg)
    for name, first in layout.items():
        pr[name] = first
    pr.tm_count = count
    timer, timer_level = new_timers(count)

    # hub: a GPU can be the target of every other GPU's outstanding requests at once
    free_reqs = np.array([[g * R + (R - 1 - i) for i in range(R)] for g in range(G)], np.int64)
    # every packet sits in a transmit queue or in (or on the way to) a receive buffer
    # (+ the MoE-Hub loopback path, bounded like one more receive buffer per GPU)
    # (and the MoE-Hub staging stores, whose packets have left the link buffers)
    npk = (int(ch.txq_cap.sum()) + int(ch.rsq_cap.sum()) + nch * in_flight
           + G * (rxq_cap + aau_staging_packets(cfg)) + 16)
    sysrec = new_record_array("sys", 1, cfg)

    code = program.code if program.code.shape[0] else np.zeros((1, ROW_WIDTH), np.int64)
    st = State(
        p=params, sys=sysrec, q=new_event_queue(4096 + 4 * (NSM + nch + NL)),
        ev_count=np.zeros(NUM_EVENT_KINDS, np.int64), timer=timer, timer_level=timer_level,
        code=np.ascontiguousarray(code, dtype=np.int64),
        code_issued=np.zeros(code.shape[0], np.int64),
        tb=tb, regs=np.zeros((NT, NUM_REGS), np.int64),
        sm=sm, sm_unit_free=np.zeros((NSM, NUM_UNITS), np.int64),
        sm_unit_busy=np.zeros((NSM, NUM_UNITS), np.int64),
        sm_wait=np.zeros((NSM, NUM_WAIT_REASONS), np.int64),
        ln=ln, ln_params=ln_params, ln_per_sm=np.zeros((NL, S), np.int64),
        gpu=gpus, wait_list=np.zeros((G, 2, NT // G), np.int64), hbm_mem=hbm_mem, smem=smem,
        hbm_chan=new_record_array("hbm_chan", G * gpu.hbm.channels, cfg),
        mem_cal=_memory_calendar(G, gpu.hbm),
        ch=ch, txq=aligned_zeros((nch, int(ch.txq_cap.max()), FIFO_COLUMNS)),
        rxq=np.zeros((nch, rxq_cap), np.int64),
        rsq=aligned_zeros((nch, int(ch.rsq_cap.max()), FIFO_COLUMNS)),
        rsp_rxq=np.zeros((nch, rsp_rx_cap), np.int64),
        wire=np.zeros((nch, in_flight, 2), np.int64),
        credit_ret=aligned_zeros((nch, in_flight, FIFO_COLUMNS)),
        gpu_routes=gpu_routes, sw_routes=sw_routes, sw_inputs=sw_inputs,
        # a response-channel wait list holds every input's response channel and (CAIS replies,
        # components/cais/) its request channel: room for two per input
        sw_wait=np.zeros((2 * sw_routes.shape[0], 2 + 2 * max(1, sw_inputs.shape[1] - 1)), np.int64),
        reqq=np.zeros((G, gpu.hub.request_queue_depth), np.int64),
        respq=np.zeros((G, G * R, 3), np.int64), free_reqs=free_reqs,
        link_resp=np.zeros((G, G), np.int64),
        req=new_record_array("req", G * R, cfg), pk=new_record_array("pk", npk, cfg),
        pk_free=np.zeros(npk, np.int64),   # pages written only as deep as packets are freed
        **_moe_state(cfg, params[0], L, rxq_cap),
        trace=np.zeros((1, TRACE_COLUMNS), np.int64),  # sized when something records (trace/)
        **declared_arrays(cfg),   # the records and arrays blocks declare with their size
    )
    st.sw_node[:] = node_array(fab)
    fill_fabric_destinations(st)
    _bind_multicast_objects(st, cfg, buffers)
    _register_cais_groups(st, cfg, buffers)
    return st, buffers, launches


def _register_cais_groups(st, cfg, buffers):
    """CAIS groups (components/cais/) from workload.cais: they live in one node's
    NVSwitches, like NVLS multicast objects."""
    try:
        rows = cais_group_rows(cfg, buffers)
    except ValueError as e:
        raise BuildError(str(e)) from None
    G = cfg.system.num_gpus
    _check_one_node(cfg, [[g for g in range(G) if (r[2] >> g) & 1] for r in rows],
                    "workload.cais", "a CAIS group", "merge in")
    for k, row in enumerate(rows):
        st.cais_groups[k, :] = row


def _check_one_node(cfg, members, key, what, does):
    """Groups of GPUs served by the NVSwitches (`members`: each group's GPUs) must lie in one
    node's NVLink domain, and there must be switches."""
    gpn = gpus_per_node(cfg.system)
    for k, gpus in enumerate(members):
        nodes = sorted({g // gpn for g in gpus})
        if len(nodes) > 1:
            raise BuildError(f"{key}[{k}].gpus: {what} lives in one node's NVSwitches; its GPUs "
                             f"span nodes {nodes} (system.nodes.gpus_per_node = {gpn})")
        if cfg.system.switch.topology == "bridge_pairs":
            raise BuildError(f"{key}[{k}]: system.switch.topology is bridge_pairs: there is no "
                             f"NVSwitch to {does}")


def _bind_multicast_objects(st, cfg, buffers):
    """NVLink SHARP multicast objects (components/nvls.py) from workload.multicast."""
    bad = check_buffer_size(cfg)
    if bad:
        raise BuildError(bad)
    dy = cfg.system.switch.nvls.dysharp
    if dy.al_tlb_ways and dy.al_tlb_entries % dy.al_tlb_ways:
        raise BuildError(f"system.switch.nvls.dysharp.al_tlb_ways: {dy.al_tlb_ways} ways do not "
                         f"divide the AL-TLB's {dy.al_tlb_entries} entries "
                         f"(system.switch.nvls.dysharp.al_tlb_entries): give a divisor, or 0 for "
                         f"a fully associative TLB")
    try:
        rows, members = multicast_object_rows(cfg, buffers)
    except ValueError as e:
        raise BuildError(str(e)) from None
    # NVLink SHARP lives in the NVSwitches: a multicast object spans one NVLink domain (node)
    _check_one_node(cfg, members, "workload.multicast", "a multicast object (NVLink SHARP)",
                    "multicast or reduce in")
    for k, row in enumerate(rows):
        st.mm_objects[k, :] = row
        st.mm_member[k, members[k]] = 1


def _memory_calendar(G, hbm):
    """The paced-arbitration calendar (components/hbm.py): one row of windows per HBM channel and
    per L2 read port; tags start at -1 (no window loaded). A placeholder under fifo arbitration."""
    if hbm.arbitration == "fifo":
        return np.full((1, 1, CAL_COLUMNS), -1, np.int64)
    assert MEMORY_CALENDAR_WINDOWS & (MEMORY_CALENDAR_WINDOWS - 1) == 0
    cal = aligned_zeros((G * hbm.channels + G, MEMORY_CALENDAR_WINDOWS, CAL_COLUMNS))
    cal[:, :, 0] = -1
    return cal


def _dam_launches(cfg, launches):
    """The launch each GPU's DAM starts thread blocks of (dam.consumers: launch), -1 for none."""
    G = cfg.system.num_gpus
    found = [-1] * G
    mode = cfg.system.gpu.hub.moe.dam.consumers
    for l in launches:
        lc = cfg.workload.launches[l.config_index]
        if lc.dam_groups is not None:
            gwhere = f"workload.launches[{l.config_index}].dam_groups"
            if not lc.dam_tile_tbs:
                raise BuildError(f"{gwhere}: thread-block groups need a launch the DAM starts "
                                 f"(dam_tile_tbs > 0; found 0)")
            if len(lc.dam_groups) > 2 or sum(lc.dam_groups) != lc.dam_tile_tbs:
                raise BuildError(f"{gwhere}: expected one or two groups summing to dam_tile_tbs "
                                 f"({lc.dam_tile_tbs}); found {list(lc.dam_groups)}")
        if not lc.dam_tile_tbs:
            continue
        where = f"workload.launches[{l.config_index}].dam_tile_tbs"
        if mode != "launch":
            raise BuildError(f"{where}: a launch the DAM starts needs "
                             f"system.gpu.hub.moe.dam.consumers: launch (found {mode})")
        if found[l.gpu] >= 0:
            raise BuildError(f"{where}: GPU {l.gpu} already has a launch the DAM starts "
                             f"(workload.launches[{launches[found[l.gpu]].config_index}])")
        if l.grid <= lc.dam_tile_tbs:
            raise BuildError(f"{where}: the grid ({l.grid}) is the upper bound of the blocks the DAM "
                             f"starts: at least one tile's {lc.dam_tile_tbs} plus the last one")
        found[l.gpu] = l.index
    if mode == "launch" and cfg.workload.moe.num_experts:
        missing = [g for g in range(G) if found[g] < 0]
        if missing:
            raise BuildError(f"system.gpu.hub.moe.dam.consumers: launch: GPU(s) {missing} have no "
                             f"launch for the DAM to start (a workload.launches entry with "
                             f"dam_tile_tbs > 0)")
    return found


def _moe_state(cfg, p, links, rxq_cap):
    """MoE-Hub arrays (minimal placeholders when the workload uses no experts)."""
    G = cfg.system.num_gpus
    return dict(
        moe_place=expert_placement(cfg), stream=new_record_array("stream", G * G, cfg),
        # + 1: a scratch record (rpm.py's schedule paper moves descriptors through it)
        mrow=new_record_array("mrow", G * G * p.rpm_ring + 1, cfg),
        win=new_record_array("win", G * p.local_experts, cfg),
        tile=new_record_array("tile", G * p.local_experts * p.tiles_per_window, cfg),
        # waiting packets: at most every receive buffer of the GPU's links plus its loopback
        aau_q=np.zeros((G, p.aau_staging + (links + 1) * rxq_cap, 4), np.int64),
        rpm_hist=np.zeros((G, RPM_HIST_BINS), np.int64),
        dam_hist=np.zeros((G, DAM_HIST_BINS), np.int64),
        aau_rat=np.zeros((G, p.records_cap if p.aau_spill else 1, 4), np.int64),
    )


def event_headroom(st):
    """Most events one handler can push: a TB exit can place a whole GPU's worth of TBs, a store
    can wake every waiter of a GPU, a channel dequeue can wake every input port of a switch."""
    p = st.p[0]
    per_gpu_slots = p.sms_per_gpu * p.slots_per_sm
    return 64 + 2 * per_gpu_slots + 2 * st.sw_inputs.shape[1] + st.ln.shape[0]
