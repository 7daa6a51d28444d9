"""Cross-field rules of a converted config: what no single key's kind and bounds can say.

Links, switches and NICs that fit together; the trace and debug settings; the MoE layer's
shape against its scheme and system; the MoE-Hub's tables sized so that a scheme-generated
layer cannot deadlock (`record_table_minimum`). Each rule raises one `ConfigError` paragraph
naming the key and the file that set it (convert.Ctx). loader.py runs them after conversion.
"""
from .convert import Ctx
from .files import ConfigError
from .models import load_model, with_top_k
from .schema import Config
from .units import MAX_TICKS


def check_config(cfg: Config, ctx: Ctx):
    s = cfg.system
    nv, sw = s.nvlink, s.switch
    rate = s.nic.message_rate
    if 0 < rate < 10 ** 12 / MAX_TICKS:
        # the engine spaces work requests by 1e12 / rate ps: that interval must be a time
        raise ctx.error(("system", "nic", "message_rate"),
                        f"expected 0 (no limit) or at least {10 ** 12 / MAX_TICKS:.3g} work "
                        f"requests per second (one per {MAX_TICKS // 10 ** 12} s, the simulated-"
                        f"time range), found {rate:g}")
    if sw.topology == "nvswitch" and len(sw.gpu_link_switch) != nv.links_per_gpu:
        raise ctx.error(("system", "switch", "gpu_link_switch"),
                        f"expected one switch index per link (system.nvlink.links_per_gpu = "
                        f"{nv.links_per_gpu}), found {len(sw.gpu_link_switch)} entries")
    if sw.topology == "nvswitch" and sw.count > s.num_gpus * nv.links_per_gpu:
        # more switches than GPU links: some could never be reached (and the fabric builds
        # every one of them: a count of 2**62 never finished loading, issue 52)
        raise ctx.error(("system", "switch", "count"),
                        f"expected at most one switch per GPU link (system.num_gpus x "
                        f"system.nvlink.links_per_gpu = {s.num_gpus * nv.links_per_gpu}), found "
                        f"{sw.count}")
    for i, idx in enumerate(sw.gpu_link_switch if sw.topology == "nvswitch" else ()):
        if idx >= sw.count:
            raise ctx.error(("system", "switch", "gpu_link_switch", i),
                            f"switch index {idx} out of range: system.switch.count = {sw.count}")
    gpn = s.nodes.gpus_per_node or s.num_gpus
    # only the switches some link reaches need ports (not range(count): a count of 2**62 would
    # take forever, issue 52)
    for idx in sorted(set(sw.gpu_link_switch) if sw.topology == "nvswitch" else ()):
        need = sw.gpu_link_switch.count(idx) * gpn
        if need > sw.ports:
            raise ctx.error(("system", "switch", "ports"),
                            f"switch {idx} needs {need} ports ({gpn} GPUs x "
                            f"{sw.gpu_link_switch.count(idx)} links), found {sw.ports}")
    for key in ("header_bytes", "max_payload_bytes"):
        if getattr(nv, key) % nv.flit_bytes:
            raise ctx.error(("system", "nvlink", key),
                            f"expected a multiple of system.nvlink.flit_bytes ({nv.flit_bytes} B), "
                            f"found {getattr(nv, key)} B")
    max_packet_flits = (nv.header_bytes + nv.max_payload_bytes) // nv.flit_bytes
    if nv.rx_buffer_flits < max_packet_flits:
        raise ctx.error(("system", "nvlink", "rx_buffer_flits"),
                        f"expected at least {max_packet_flits} flits (one largest packet: header + "
                        f"max payload), found {nv.rx_buffer_flits}; a smaller buffer deadlocks")
    if nv.response_path == "separate":
        # the largest response: read data of one store packet (header + payload)
        rsp_flits = -(-(nv.header_bytes + min(nv.store_packet_bytes, nv.max_payload_bytes))
                      // nv.flit_bytes)
        if nv.response_buffer_flits < rsp_flits:
            raise ctx.error(("system", "nvlink", "response_buffer_flits"),
                            f"expected at least {rsp_flits} flits (one read-data response: header + "
                            f"store_packet_bytes), found {nv.response_buffer_flits}; a smaller "
                            f"buffer deadlocks")
    train = cfg.run.packet_train
    if train > 1 and nv.response_path == "separate":
        rsp_room = min(nv.response_buffer_flits // rsp_flits, nv.response_queue_packets)
        if train > rsp_room:
            raise ctx.error(("run", "packet_train"),
                            f"a train of {train} packets must fit a link's response channel "
                            f"({nv.response_buffer_flits} flits = {nv.response_buffer_flits // rsp_flits} "
                            f"read-data responses, {nv.response_queue_packets} queued packets); "
                            f"expected at most {rsp_room}, found {train}")
    if train > 1:
        room = min(nv.rx_buffer_flits // max_packet_flits, nv.tx_queue_packets,
                   sw.output_queue_packets)
        if train > room:
            raise ctx.error(("run", "packet_train"),
                            f"a train of {train} packets must fit a link's receive buffer "
                            f"({nv.rx_buffer_flits} flits = {nv.rx_buffer_flits // max_packet_flits} "
                            f"largest packets) and its transmit and switch output queues "
                            f"({nv.tx_queue_packets}, {sw.output_queue_packets} packets); expected "
                            f"at most {room}, found {train}")
    _check_moe(cfg, ctx)
    check_trace(cfg, ctx)
    for li, lc in enumerate(cfg.workload.launches):
        if not lc.kernel.strip():
            raise ctx.error(("workload", "launches", li, "kernel"), "expected a kernel name, found ''")
        if lc.gpus is not None:
            if not lc.gpus:
                raise ctx.error(("workload", "launches", li, "gpus"),
                                "expected at least one GPU index (omit the key for every GPU)")
            for gi, g in enumerate(lc.gpus):
                if g >= s.num_gpus:
                    raise ctx.error(("workload", "launches", li, "gpus", gi),
                                    f"GPU {g} out of range: system.num_gpus = {s.num_gpus}")
            if len(set(lc.gpus)) != len(lc.gpus):
                raise ctx.error(("workload", "launches", li, "gpus"),
                                f"a GPU is listed twice: {list(lc.gpus)}")


def check_trace(cfg: Config, ctx: Ctx):
    tr = cfg.trace
    if tr.stop and tr.stop <= tr.start:
        raise ctx.error(("trace", "stop"), f"expected a time after trace.start ({tr.start} ps) or 0 "
                                           f"for the end of the run, found {tr.stop} ps")
    for i, g in enumerate(tr.gpus or ()):
        if g >= cfg.system.num_gpus:
            raise ctx.error(("trace", "gpus", i), f"GPU {g} out of range: system.num_gpus = "
                                                  f"{cfg.system.num_gpus}")


def check_layer(cfg: Config, ctx: Ctx):
    layer = cfg.workload.layer
    if cfg.scheme == "none":
        if layer.model:
            raise ctx.error(("scheme",), f"workload.layer.model is '{layer.model}' but no scheme is "
                                         f"chosen: set scheme to deepep, overlap or moehub")
        return
    if not layer.model:
        raise ctx.error(("workload", "layer", "model"),
                        f"scheme '{cfg.scheme}' runs an MoE layer: name a model (a file in "
                        f"workloads/models/, e.g. deepseek_v3) or a model YAML path")
    if layer.tokens_per_gpu <= 0:
        raise ctx.error(("workload", "layer", "tokens_per_gpu"),
                        f"expected a positive number of tokens per GPU, found {layer.tokens_per_gpu}")
    if cfg.workload.launches:
        raise ctx.error(("workload", "launches"),
                        f"scheme '{cfg.scheme}' generates the layer's launches; remove "
                        f"workload.launches (or set scheme: none)")
    if layer.routing.kind == "trace" and not layer.routing.trace:
        raise ctx.error(("workload", "layer", "routing", "trace"),
                        "routing kind 'trace' needs a trace file")
    deepep = layer.deepep_ll if cfg.scheme == "deepep_ll" else layer.deepep
    if cfg.scheme in ("deepep", "deepep_ll") and deepep.dispatch_dtype == "fp8":
        # FP8 rows are moved as opaque bytes (sizes and timing); nothing in the simulator
        # quantises or dequantises them, so neither a numeric check nor a BF16 GEMM can use them
        where = ("workload", "layer", cfg.scheme, "dispatch_dtype")
        if deepep.kernels != "communication":
            raise ctx.error(where, f"fp8 dispatch needs workload.layer.{cfg.scheme}.kernels: "
                                   "communication (the layer's grouped GEMM reads BF16 rows; "
                                   "there is no FP8 GEMM path)")
        if cfg.workload.mode == "functional":
            raise ctx.error(where, "fp8 dispatch is timing-only: the simulator has no FP8 "
                                   "quantise instruction, so functional mode could not check the "
                                   "result against a reference; use workload.mode: timing")


def _check_moe(cfg: Config, ctx: Ctx):
    moe, G = cfg.workload.moe, cfg.system.num_gpus
    path = ("workload", "moe")
    hub = cfg.system.gpu.hub.moe
    if hub.internode == "per_node":
        # the forwarding hub is the sender's local rank on another node: there must be one
        if cfg.system.nodes.count < 2:
            raise ctx.error(("system", "gpu", "hub", "moe", "internode"),
                            "per_node forwards rows to a hub on each other node; this system has "
                            "one node (system.nodes.count = 1): expected per_expert")
        if moe.placement is not None:
            raise ctx.error((*path, "placement"),
                            "system.gpu.hub.moe.internode: per_node groups a token's experts by "
                            "node assuming the block placement (E / G consecutive experts per "
                            "GPU); omit workload.moe.placement")
    if hub.internode_combine == "per_node":
        # the per-node combine sums at the forwarder the dispatch's per-node hub picked
        if hub.internode != "per_node":
            raise ctx.error(("system", "gpu", "hub", "moe", "internode_combine"),
                            f"per_node sums a node's expert outputs at the forwarding GPU of the "
                            f"per-node dispatch; set system.gpu.hub.moe.internode: per_node "
                            f"(found {hub.internode})")
    if moe.num_experts == 0:
        return
    tile = cfg.system.gpu.hub.moe.dam.tile_rows
    if moe.placement is None:
        if moe.num_experts % G:
            raise ctx.error((*path, "num_experts"),
                            f"block placement needs a multiple of system.num_gpus ({G}) experts, "
                            f"found {moe.num_experts}; or give workload.moe.placement")
    else:
        if len(moe.placement) != moe.num_experts:
            raise ctx.error((*path, "placement"), f"expected one GPU per expert ({moe.num_experts}), "
                                                  f"found {len(moe.placement)}")
        for i, g in enumerate(moe.placement):
            if g >= G:
                raise ctx.error((*path, "placement", i), f"GPU {g} out of range: system.num_gpus = {G}")
    if moe.window_rows == 0 or moe.window_rows % tile:
        raise ctx.error((*path, "window_rows"),
                        f"expected a positive multiple of system.gpu.hub.moe.dam.tile_rows ({tile}), "
                        f"found {moe.window_rows}")
    if moe.row_bytes == 0:
        raise ctx.error((*path, "row_bytes"), "expected the window slot size (the largest row), found 0")
    gpus = moe.placement if moe.placement is not None else [e * G // moe.num_experts
                                                            for e in range(moe.num_experts)]
    local = max(list(gpus).count(g) for g in range(G))
    _check_record_table(cfg, ctx, local, "workload.moe")


def record_table_minimum(local_experts: int, tile_rows: int, held_tiles: int = 1,
                         store_experts: int = 1) -> int:
    """The smallest AAU completion-record table that cannot deadlock when a full table stalls
    allocation (today's AAU): every local expert may hold a partial tile of tile_rows - 1 rows,
    each row holding a record until its tile is released, and one more store must fit to
    complete a tile and free records - a multi-expert store takes one record per expert it names
    (`store_experts`), all at once. With the DAM's expert order an expert also holds up to
    held_tiles - 1 ready tiles while it waits for the last tile of its group."""
    return local_experts * (held_tiles * tile_rows - 1) + store_experts


def _check_record_table(cfg: Config, ctx: Ctx, local: int, why: str, store_experts: int = 1):
    if cfg.system.gpu.hub.moe.aau.overflow == "spill":
        return      # a full table spills to device memory: any size works (it costs time)
    dam = cfg.system.gpu.hub.moe.dam
    tile = dam.tile_rows
    held = dam.expert_tiles if dam.order == "expert" else 1
    need = record_table_minimum(local, tile, held, store_experts)
    aau = cfg.system.gpu.hub.moe.aau
    more = ("one more row" if store_experts == 1 else
            f"one more store of up to {store_experts} rows (workload.layer.moehub.multi_expert_store)")
    if aau.record_table_entries < need:
        waits = (f" (system.gpu.hub.moe.dam.order: expert holds up to {held - 1} ready tile(s) "
                 f"of an expert until expert_tiles = {held} are)" if held > 1 else "")
        raise ctx.error(("system", "gpu", "hub", "moe", "aau", "record_table_entries"),
                        f"expected at least {need} entries with system.gpu.hub.moe.dam.tile_rows = "
                        f"{tile}: {local} local expert(s) ({why}) may each hold "
                        f"{held * tile - 1} rows of unfinished tiles{waits}, and {more} must "
                        f"fit to complete a tile; found {aau.record_table_entries} (a smaller table "
                        f"deadlocks: allocation stalls while the table is full)")


def check_paired(cfg: Config, ctx: Ctx):
    """system.gpu.hub.moe.aau.allocation: paired places a gradient row at its forward row's slot:
    only a layer with a backward through the hub has both (scheme moehub, passes: training, the
    gradient windows on their experts' GPUs: per_expert across nodes)."""
    hub = cfg.system.gpu.hub.moe
    if hub.aau.allocation != "paired":
        return
    why = ""
    if cfg.scheme != "moehub" or not cfg.workload.layer.model:
        why = f"this config runs scheme '{cfg.scheme}', not an MoE-Hub layer (scheme: moehub)"
    elif cfg.workload.layer.passes != "training":
        why = (f"workload.layer.passes is '{cfg.workload.layer.passes}': a forward alone sends no "
               f"gradient rows (set workload.layer.passes: training)")
    elif hub.internode == "per_node" or hub.internode_combine == "per_node":
        why = ("system.gpu.hub.moe.internode / internode_combine: per_node has no backward through "
               "the hub (use per_expert)")
    if why:
        raise ctx.error(("system", "gpu", "hub", "moe", "aau", "allocation"),
                        f"paired places each gradient row at the slot of its forward row, so it "
                        f"needs a forward to pair with: {why}; or set bump (the published "
                        f"allocator)")


def check_hub_sizes(cfg: Config, ctx: Ctx):
    """Sizes that guarantee a deadlock of a scheme-generated MoE-Hub layer, found at load time
    (the layer's own workload.moe is generated later, when the system is built)."""
    if cfg.scheme != "moehub" or not cfg.workload.layer.model:
        return
    try:
        model = with_top_k(load_model(cfg.workload.layer.model), cfg.workload.layer.top_k)
    except ConfigError:
        return      # the layer build names the bad model file
    experts = model.experts
    if experts % cfg.system.num_gpus == 0:
        local = experts // cfg.system.num_gpus
        store = min(model.top_k, local) if cfg.workload.layer.moehub.multi_expert_store else 1
        _check_record_table(cfg, ctx, local, f"{experts} experts of {cfg.workload.layer.model} "
                            f"over {cfg.system.num_gpus} GPUs", store)
