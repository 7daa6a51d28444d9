"""System builder: config + assembled program -> the State arrays the run loop works on.

Everything here runs once, in Python, before the compiled loop starts: the memory map (symmetric
buffers, identical addresses on every GPU as in NVSHMEM), buffer initial contents, kernel launches
with their evaluated parameters, the NVLink/NVSwitch topology with its routing tables, and the
sizes of every bounded queue.
"""
import re

import numpy as np
import attrs

from .components.trace import TRACE_COLUMNS
from .config.schema import L2_LINK_WRITES, MEMORY_ARBITRATION, RPM_SCHEDULES
from .engine.clock import period_fs
from .engine.events import NUM_EVENT_KINDS, new_event_queue, new_timers
from .engine.state import (DAM_HIST_BINS, GPU, HBM_CHANNEL, LAUNCH, LINK_CHANNEL, MOE_ROW,
                           NUM_WAIT_REASONS, PACKET, PARAMS, REQUEST, RPM_HIST_BINS, SM, STREAM,
                           SYSTEM, THREAD_BLOCK, TB_EMPTY, TILE, WINDOW, State, new_records)
from .isa.encoding import MAX_PARAMS, NUM_REGS, NUM_UNITS, ROW_WIDTH
from .isa.expr import ExprError, evaluate

BUFFER_ALIGN = 256  # bytes; every buffer starts on an HBM interleave-friendly boundary
HBM_MIN_ACCESS = 32  # bytes: the DRAM sector, the smallest unit HBM transfers
# windows in the paced-arbitration calendar (components/hbm.py): with 1 us windows a 1 ms horizon,
# far beyond the backlog of a saturated GPU in the layer experiments; work beyond it is served at full
# rate and counted (system.gpuN.hbm.beyond_calendar_ticks)
MEMORY_CALENDAR_WINDOWS = 1024


class BuildError(Exception):
    """A config that is well-formed but cannot be built (message names the key)."""


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


def expert_placement(cfg):
    """[E, 2] int64: GPU and local slot of every expert."""
    moe, G = cfg.workload.moe, cfg.system.num_gpus
    E = moe.num_experts
    gpus = list(moe.placement) if moe.placement is not None else [e // (E // G) for e in range(E)]
    place = np.zeros((max(E, 1), 2), np.int64)
    count = [0] * G
    for e, g in enumerate(gpus):
        place[e] = (g, count[g])
        count[g] += 1
    return place


def local_experts(cfg):
    """Most experts placed on one GPU (every GPU gets that many windows)."""
    place = expert_placement(cfg)
    return int(place[:cfg.workload.moe.num_experts, 1].max()) + 1 if cfg.workload.moe.num_experts else 0


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
    if value != int(value):
        raise BuildError(f"{where}: '{expr}' evaluates to {value}, not an integer")
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


def build_topology(cfg):
    """Channels, switch ports and routing tables for a single-level NVSwitch fabric."""
    sysc = cfg.system
    G, L, NSW = sysc.num_gpus, sysc.nvlink.links_per_gpu, sysc.switch.count
    link_switch = list(sysc.switch.gpu_link_switch)
    nch = 2 * G * L
    ch_gpu = np.zeros(nch, np.int64)
    ch_switch = np.zeros(nch, np.int64)
    ch_port = np.zeros(nch, np.int64)
    to_switch = np.zeros(nch, np.int64)
    ports_used = [0] * NSW
    for g in range(G):
        for l in range(L):
            link = g * L + l
            s = link_switch[l]
            port = ports_used[s]
            ports_used[s] += 1
            for c in (2 * link, 2 * link + 1):
                ch_gpu[c], ch_switch[c], ch_port[c] = g, s, port
            to_switch[2 * link] = 1
    for s, used in enumerate(ports_used):
        if used > sysc.switch.ports:
            raise BuildError(f"system.switch.ports: switch {s} needs {used} ports for "
                             f"{G} GPUs x its links in system.switch.gpu_link_switch, but has "
                             f"{sysc.switch.ports}")
    # route rows: [count, round-robin pointer, candidate channels...] (engine.state.ROUTE_*)
    gpu_routes = np.full((G * G, 2 + L), -1, np.int64)
    gpu_routes[:, :2] = 0
    sw_routes = np.full((NSW * G, 2 + L), -1, np.int64)
    sw_routes[:, :2] = 0
    for h in range(G):
        for l in range(L):
            row = sw_routes[link_switch[l] * G + h]
            row[2 + row[0]] = 2 * (h * L + l) + 1
            row[0] += 1
    for g in range(G):
        for h in range(G):
            row = gpu_routes[g * G + h]
            for l in range(L):
                if sw_routes[link_switch[l] * G + h, 0] > 0:
                    row[2 + row[0]] = 2 * (g * L + l)
                    row[0] += 1
            if h != g and row[0] == 0:
                raise BuildError(f"system.switch.gpu_link_switch: GPU {g} has no switch path to "
                                 f"GPU {h}")
    max_in = max(ports_used) if ports_used else 0
    sw_inputs = np.full((NSW, 1 + max_in), -1, np.int64)
    sw_inputs[:, 0] = 0
    for c in range(nch):
        if to_switch[c]:
            row = sw_inputs[ch_switch[c]]
            row[1 + row[0]] = c
            row[0] += 1
    return (gpu_routes, sw_routes, sw_inputs), (to_switch, ch_gpu, ch_switch, ch_port)


def rpm_packet_bytes(cfg):
    """Payload of a full RPM packet: at most rpm.packet_bytes, at most what one link packet
    carries (system.nvlink.max_payload_bytes) and at most what the merge buffer holds."""
    rpm = cfg.system.gpu.hub.moe.rpm
    return min(rpm.packet_bytes, cfg.system.nvlink.max_payload_bytes, rpm.merge_buffer_bytes)


def aau_staging_packets(cfg):
    """Packets the AAU staging store holds: every row the senders' rings may have in flight to
    one GPU, as full packets plus one partial packet per row. A full packet carries
    min(max payload, merge buffer) bytes: a merge buffer smaller than the link payload makes
    more, smaller packets (sizing by the payload alone let the store fill, parked packets kept
    their link credits and wedged the link for other traffic: found by tests/test_fuzz.py)."""
    hub, moe = cfg.system.gpu.hub, cfg.workload.moe
    if not moe.num_experts:
        return 0
    payload = rpm_packet_bytes(cfg)
    per_row = -(-(moe.row_bytes + hub.moe.rpm.row_header_bytes) // payload) + 1
    return cfg.system.num_gpus * hub.moe.rpm.row_queue_depth * per_row


def _moe_params(cfg):
    hub, moe = cfg.system.gpu.hub, cfg.workload.moe
    ticks = lambda cycles: int(round(cycles * 1e12 / hub.clock))  # noqa: E731 (hub cycles -> ps)
    tile = hub.moe.dam.tile_rows
    return dict(
        num_experts=moe.num_experts, local_experts=max(local_experts(cfg), 1),
        window_rows=max(moe.window_rows, tile), row_bytes=max(moe.row_bytes, 1), tile_rows=tile,
        tiles_per_window=max(moe.window_rows, tile) // tile,
        record_bytes=hub.moe.aau.record_bytes, records_cap=hub.moe.aau.record_table_entries,
        aau_spill=int(hub.moe.aau.overflow == "spill"),
        rpm_merge_bytes=hub.moe.rpm.merge_buffer_bytes, rpm_packet_bytes=rpm_packet_bytes(cfg),
        rpm_flush_ticks=hub.moe.rpm.flush_timeout,
        rpm_ring=hub.moe.rpm.row_queue_depth, rpm_header_bytes=hub.moe.rpm.row_header_bytes,
        rpm_ticks_per_packet=int(round(1e12 / (hub.clock * hub.moe.rpm.packets_per_cycle))),
        rpm_policy=("round_robin", "longest_first").index(hub.moe.rpm.arbitration),
        rpm_schedule=RPM_SCHEDULES.index(hub.moe.rpm.schedule),
        aau_alloc_ticks=ticks(hub.moe.aau.alloc_latency_cycles),
        aau_staging=aau_staging_packets(cfg),
        dam_notify_ticks=ticks(hub.moe.dam.notify_latency_cycles),
        dam_launch_mode=int(hub.moe.dam.consumers == "launch"),
    )


def build_state(cfg, program, seed=None, presets=None):
    """Allocate and initialise every State array. Returns (State, buffers, launches).
    `presets`: buffer name -> [num_gpus, n] uint8 initial contents (e.g. routing tables)."""
    sysc, gpu = cfg.system, cfg.system.gpu
    G, S, T = sysc.num_gpus, gpu.num_sms, gpu.sm.max_resident_tbs
    NSM, NT = G * S, G * S * T
    L = sysc.nvlink.links_per_gpu
    R = gpu.hub.max_outstanding_requests
    functional = cfg.workload.mode == "functional"
    seed = cfg.run.seed if seed is None else seed

    flit = sysc.nvlink.flit_bytes
    max_pkt_flits = (sysc.nvlink.header_bytes + sysc.nvlink.max_payload_bytes + flit - 1) // flit
    if sysc.nvlink.rx_buffer_flits < max_pkt_flits:
        raise BuildError(f"system.nvlink.rx_buffer_flits: {sysc.nvlink.rx_buffer_flits} flits cannot "
                         f"hold one maximum-size packet ({max_pkt_flits} flits); links would deadlock")

    sm_period = period_fs(gpu.sm_clock)
    params = new_records(PARAMS, 1)
    for name, value in dict(
        num_gpus=G, sms_per_gpu=S, slots_per_sm=T, issue_width=gpu.sm.issue_width,
        functional=int(functional), sm_period_fs=sm_period,
        tb_launch_cycles=gpu.sm.tb_launch_cycles, smem_bytes=gpu.sm.smem_bytes,
        smem_latency_cycles=gpu.sm.smem_latency_cycles,
        kernel_launch_ticks=gpu.kernel_launch_latency,
        hbm_channels=gpu.hbm.channels, hbm_interleave=gpu.hbm.interleave_bytes,
        hbm_fs_per_byte_channel=int(round(1e15 * gpu.hbm.channels / gpu.hbm.bandwidth)),
        hbm_latency_cycles=gpu.hbm.latency_cycles, hbm_atomic_cycles=gpu.hbm.atomic_latency_cycles,
        hbm_capacity=gpu.hbm.capacity, hbm_min_access=HBM_MIN_ACCESS,
        mem_arbitration=MEMORY_ARBITRATION.index(gpu.hbm.arbitration),
        mem_window_ticks=gpu.hbm.arbitration_window,
        hbm_queue_ticks=_queue_drain_ticks(gpu.hbm.queue_depth, gpu.hbm.bandwidth / gpu.hbm.channels),
        l2_queue_ticks=_queue_drain_ticks(gpu.hbm.queue_depth, gpu.l2.bandwidth),
        l2_fs_per_byte=int(round(1e15 / gpu.l2.bandwidth)), l2_latency_cycles=gpu.l2.latency_cycles,
        l2_link_writes=L2_LINK_WRITES.index(gpu.l2.link_writes),
        links_per_gpu=L, num_switches=sysc.switch.count, max_payload=sysc.nvlink.max_payload_bytes,
        store_payload=min(sysc.nvlink.store_packet_bytes, sysc.nvlink.max_payload_bytes),
        write_resp_per_packet=int(sysc.nvlink.write_responses == "per_packet"),
        packet_train=cfg.run.packet_train,
        header_bytes=sysc.nvlink.header_bytes, flit_bytes=flit,
        response_vc=int(sysc.nvlink.response_path == "separate"),
        cut_through=int(sysc.switch.forwarding == "cut_through"),
        link_fs_per_byte=int(round(1e15 / sysc.nvlink.bandwidth)),
        link_latency_ticks=sysc.nvlink.latency, rx_buffer_flits=sysc.nvlink.rx_buffer_flits,
        switch_traversal_ticks=sysc.switch.traversal_latency,
        hub_ticks_per_packet=int(round(1e12 / (gpu.hub.clock * gpu.hub.packets_per_cycle))),
        hub_tx_latency_ticks=int(round(gpu.hub.tx_latency_cycles * 1e12 / gpu.hub.clock)),
        hub_rx_latency_ticks=int(round(gpu.hub.rx_latency_cycles * 1e12 / gpu.hub.clock)),
        reqs_per_gpu=R,
        **_moe_params(cfg),
    ).items():
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
    smem = np.zeros((NSM, gpu.sm.smem_bytes if functional else 0), np.uint8)

    # launches
    launches, next_in_stream = build_launches(cfg, program, buffers)
    NL = len(launches)
    ln = new_records(LAUNCH, NL)
    ln_params = np.zeros((NL, MAX_PARAMS), np.int64)
    for l, nxt in zip(launches, next_in_stream):
        k = program.kernels[l.kernel]
        if k.smem_bytes > gpu.sm.smem_bytes:
            raise BuildError(f"kernel '{k.name}' ({k.file}:{k.line}) asks for {k.smem_bytes} bytes of "
                             f"shared memory per TB; system.gpu.sm.smem_bytes is {gpu.sm.smem_bytes}")
        r = ln[l.index]
        r.gpu, r.entry_pc, r.grid, r.next_in_stream = l.gpu, k.entry_pc, l.grid, nxt
        r.smem, r.max_per_sm, r.start, r.end = k.smem_bytes, k.max_tbs_per_sm, -1, -1
        r.host_delay = l.host_delay
        r.dam_tile_tbs = cfg.workload.launches[l.config_index].dam_tile_tbs
        r.granted = 0 if r.dam_tile_tbs else l.grid
        ln_params[l.index, :len(l.params)] = l.params

    tb = new_records(THREAD_BLOCK, NT)
    tb.state[:] = TB_EMPTY
    tb.launch[:] = -1
    sm = new_records(SM, NSM)
    sm.next_issue[:] = -1
    gpus = new_records(GPU, G)
    gpus.hub_next_tx[:] = -1
    gpus.rpm_next_tx[:] = -1
    gpus.hub_rx_first[:] = -1
    gpus.hub_rx_last[:] = -1
    gpus.free_top[:] = R
    gpus.dam_launch[:] = _dam_launches(cfg, launches)

    # fabric
    (gpu_routes, sw_routes, sw_inputs), (to_switch, ch_gpu, ch_switch, ch_port) = build_topology(cfg)
    nch = to_switch.shape[0]
    ch = new_records(LINK_CHANNEL, nch)
    ch.to_switch[:], ch.gpu[:], ch.switch[:], ch.port[:] = to_switch, ch_gpu, ch_switch, ch_port
    # component timers (engine.events): SM issue, link transmit, wire arrival, switch input,
    # hub packetizer, RPM packetizer
    pr = params[0]
    pr.tm_ch_tx = NSM
    pr.tm_ch_arrive = NSM + nch
    pr.tm_xbar = NSM + 2 * nch
    pr.tm_hub = NSM + 3 * nch
    pr.tm_rpm = pr.tm_hub + G
    pr.tm_count = pr.tm_rpm + G
    timer, timer_tree = new_timers(int(pr.tm_count))
    ch.credits[:] = sysc.nvlink.rx_buffer_flits
    ch.tx_at[:] = -1
    ch.txq_cap[:] = np.where(to_switch == 1, sysc.nvlink.tx_queue_packets,
                             sysc.switch.output_queue_packets)
    rxq_cap = sysc.nvlink.rx_buffer_flits  # every packet is at least one flit
    # the response virtual channel (unused, one packet deep, with response_path: shared)
    separate = sysc.nvlink.response_path == "separate"
    rsp_rx_cap = sysc.nvlink.response_buffer_flits if separate else 1
    ch.rsp_credits[:] = rsp_rx_cap
    ch.rsq_cap[:] = sysc.nvlink.response_queue_packets if separate else 1
    in_flight = rxq_cap + rsp_rx_cap  # packets on a wire, or credit returns on their way

    # hub: a GPU can be the target of every other GPU's outstanding requests at once
    free_reqs = np.array([[g * R + (R - 1 - i) for i in range(R)] for g in range(G)], np.int64)
    # every packet sits in a transmit queue or in (or on the way to) a receive buffer
    # (+ the MoE-Hub loopback path, bounded like one more receive buffer per GPU)
    # (and the MoE-Hub staging stores, whose packets have left the link buffers)
    npk = (int(ch.txq_cap.sum()) + int(ch.rsq_cap.sum()) + nch * in_flight
           + G * (rxq_cap + aau_staging_packets(cfg)) + 16)
    sysrec = new_records(SYSTEM, 1)
    sysrec[0].pk_top = npk

    code = program.code if program.code.shape[0] else np.zeros((1, ROW_WIDTH), np.int64)
    st = State(
        p=params, sys=sysrec, q=new_event_queue(4096 + 4 * (NSM + nch + NL)),
        ev_count=np.zeros(NUM_EVENT_KINDS, np.int64), timer=timer, timer_tree=timer_tree,
        code=np.ascontiguousarray(code, dtype=np.int64),
        tb=tb, regs=np.zeros((NT, NUM_REGS), np.int64),
        sm=sm, sm_unit_free=np.zeros((NSM, NUM_UNITS), np.int64),
        sm_unit_busy=np.zeros((NSM, NUM_UNITS), np.int64),
        sm_wait=np.zeros((NSM, NUM_WAIT_REASONS), np.int64),
        ln=ln, ln_params=ln_params, ln_per_sm=np.zeros((NL, S), np.int64),
        gpu=gpus, wait_list=np.zeros((G, 2, NT // G), np.int64), hbm_mem=hbm_mem, smem=smem,
        hbm_chan=new_records(HBM_CHANNEL, G * gpu.hbm.channels),
        mem_cal=_memory_calendar(G, gpu.hbm),
        ch=ch, txq=np.zeros((nch, int(ch.txq_cap.max())), np.int64),
        rxq=np.zeros((nch, rxq_cap), np.int64),
        rsq=np.zeros((nch, int(ch.rsq_cap.max())), np.int64),
        rsp_rxq=np.zeros((nch, rsp_rx_cap), np.int64),
        wire=np.zeros((nch, in_flight), np.int64),
        credit_ret=np.zeros((nch, in_flight, 3), np.int64),
        gpu_routes=gpu_routes, sw_routes=sw_routes, sw_inputs=sw_inputs,
        sw_wait=np.zeros((2 * sw_routes.shape[0], 2 + max(1, sw_inputs.shape[1] - 1)), np.int64),
        reqq=np.zeros((G, gpu.hub.request_queue_depth), np.int64),
        respq=np.zeros((G, G * R, 3), np.int64), free_reqs=free_reqs,
        link_resp=np.zeros((G, G), np.int64),
        req=new_records(REQUEST, G * R), pk=new_records(PACKET, npk),
        pk_free=np.arange(npk, dtype=np.int64)[::-1].copy(),
        **_moe_state(cfg, params[0], L, rxq_cap),
        trace=np.zeros((1, TRACE_COLUMNS), np.int64),  # sized when something records (trace/)
    )
    return st, buffers, launches


def _queue_drain_ticks(queue_depth, bandwidth):
    """Ticks (ps) to drain a full controller queue of 32 B requests at `bandwidth` (B/s), rounded up
    as components/hbm.py rounds transfers (whole femtoseconds per byte)."""
    fs_per_byte = int(round(1e15 / bandwidth))
    return -(-queue_depth * HBM_MIN_ACCESS * fs_per_byte // 1000)


def _memory_calendar(G, hbm):
    """The paced-arbitration calendar (components/hbm.py): one row of windows per HBM channel and
    per L2 read port; tags start at -1 (no window loaded). A placeholder under fifo arbitration."""
    if hbm.arbitration == "fifo":
        return np.full((1, 1, 5), -1, np.int64)
    cal = np.zeros((G * hbm.channels + G, MEMORY_CALENDAR_WINDOWS, 5), np.int64)
    cal[:, :, 0] = -1
    return cal


def _dam_launches(cfg, launches):
    """The launch each GPU's DAM starts thread blocks of (dam.consumers: launch), -1 for none."""
    G = cfg.system.num_gpus
    found = [-1] * G
    mode = cfg.system.gpu.hub.moe.dam.consumers
    for l in launches:
        lc = cfg.workload.launches[l.config_index]
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
    tile = new_records(TILE, G * p.local_experts * p.tiles_per_window)
    tile.index[:] = -1
    stream = new_records(STREAM, G * G)
    stream.oldest[:] = -1
    return dict(
        moe_place=expert_placement(cfg), stream=stream,
        mrow=new_records(MOE_ROW, G * G * p.rpm_ring),
        win=new_records(WINDOW, G * p.local_experts), tile=tile,
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
