"""Scheme `dysharp`: DySHARP (arXiv 2605.05607) - the MoE dispatch as one dynamic multicast per
token and the combine as one in-switch reduction per token over that token's own experts
(moehub_arch/components/dysharp.py on NVLink SHARP's engine, components/nvls.py). Kernels and
layouts: workloads/kernels/dysharp/dysharp.s.

Stream 0, in order:
  dysharp_dispatch  per token, dymultimem.st of its row and of its meta row (expert ids, router
                    weights) to its k experts: one packet train up, one copy down to each GPU
                    holding any of them; that GPU's hub places the row in each target expert's
                    receive layout (AL table, counts) - no count exchange, no host round trip
  nvls_barrier      every GPU's rows are placed (the fence of a dymultimem.st completes when
                    every target GPU has written them)
  grouped GEMM      grouped_tiles, grouped_gate_up, grouped_down (moe_common.s) over the layout
  dysharp_scale     each expert output row times its router weight (the GEMM epilogue's gate
                    weighting, the paper's; here a pass of its own, see below)
  nvls_barrier      every GPU's scaled outputs are written
  dysharp_combine   per token, dymultimem.ld_reduce of its k experts' rows: the switch reads one
                    row per target (one read per target GPU), sums them, returns one row
  nvls_output       out = shared experts + the reduced row
Stream 1: the shared experts (common shared_ffn).

Traffic per token of R bytes with k experts on m distinct GPUs (system.moe.nvlink.{up,down}_
wire_bytes, system.dysharp.*): dispatch puts one row on the source's uplink and m rows on the
downlinks (plus a meta row of 12 k bytes each way, and target-extension flits in every packet);
combine puts k rows on the target GPUs' uplinks (one per target: the switch counts them down) and
one row on the source's downlink, with m read headers down. DeepEP moves m rows each way.

Arithmetic order (functional mode): each expert output row is bf16(fp32(w x y)) (dysharp_scale);
the switch adds a token's k rows in fp32 in target-list order (the token's slot order) and rounds
once to bf16 (dysharp.py); the output adds that row to the shared experts' fp32 sum. The reference
follows the same order (combine="switch_targets"), so the error is 0.0.

Token-centric fusion (workload.layer.dysharp.fusion: token, the default: the paper's design,
whose evaluation runs DySHARP as one persistent megakernel) replaces the sequence above with
thread-block groups launched together:
  stream 0  dysharp_fused_comm (`channels` blocks): the dispatch as above (the meta row also
            carries the token's algebraic row u); once all of a GPU's blocks are past their
            fence, the last one flags the end of its dispatch on every GPU; block 0 waits for
            every source's flag and closes the row tiles that will not fill; then each block
            combines its tokens, one dymultimem.ld_reduce per token as soon as its k ready flags
            are up; then nvls_output
  stream 2  dysharp_fused_expert (compute_tbs persistent blocks, one per SM): GEMM-1 and GEMM-2
            jobs per row tile of the receive layout, a tile's jobs starting when the destination
            hub's token tracker raises its ready word (components/dysharp.py: every byte of its
            rows and meta rows landed) or block 0 closes it; each GEMM-2 job weights its output
            columns by the rows' router weights before storing them (the paper's epilogue)
  stream 3  dysharp_fused_gate (gate_tbs blocks, no shared memory): finds each row's router
            weight as its tile becomes ready (GEMM-2 waits for them), and once the tile's GEMM-2
            jobs are done flags each row's (token, slot) ready word at the token's source
  stream 1  the shared experts
The GEMM and gate groups walk the tracked tiles only (workload.layer.dysharp.walk: tracked, the
tiles of the most rows any expert receives); walk: stride keeps the earlier kernels, which also
walked every empty tile of the layouts' stride (two dependent reads per empty row slot in each of
the gate group's passes: about 169 us per pass at 2048 tokens per GPU on 32 GPUs).
Every block must be resident at once (the groups wait for each other), which the plan checks.
The token tracker's tables: the tile table is state of the hub (system.switch.nvls.dysharp.
tracker_tiles entries, the paper's 1024), an entry per row tile in use: a target's rows are
placed from layout row 0 up, so the tracked objects declare layout_rows = the most rows any
expert receives (rounded up to the tile) and need local experts x its tiles - not the tiles of the
layouts' stride, which spans the algebraic range (P x T / El rows per target) that no expert's
rows reach; the per-token counters are k ready words per token at the source (a
word per (token, slot), as flag.set is the ISA's only remote write; the combine waits for all k:
with system.switch.nvls.dysharp.tracker_ready: count, the default, it checks them once per token -
the paper's per-token ready-output counter - in one coalesced access of the k words, a lane per
slot; with slots, the earlier model, one wait per slot in turn, k dependent accesses per token,
which on 32 GPUs at 512 tokens per GPU cost each of the 16 combine blocks about 3.2 us per token
on the check alone: eight HBM reads in a row, each after the last).
The tile table recycles its entries, as the paper's 1024-entry table must at M top-32, L top-16
and L top-32 (1036, 1048 and 2080 tiles per GPU here): a tile takes an entry when its first bytes
land and frees it when its GEMM-2 jobs are done (the tile's finished-job counter in dy_jobs, the
paper's finished-TB counter: workload.multicast[].done_counters); a tile that finds the table
full waits for the next entry freed, its bytes counted aside (tracker_full: defer), or its copy
waits at the hub holding its link (stall; components/dysharp_tracker.py). One entry per local
expert is kept for the expert's head tile, the one the GEMM blocks need first (tracker_grant:
expert_head), which makes defer deadlock-free; so a table smaller than the local experts is
refused (stall can still deadlock: waiting copies hold link space). The token
table is not recycled: a layer with more tokens per GPU than it has entries is refused. What
fusion cannot hide: the expert GEMMs of a tile still wait for its rows, a partial last tile for
every source's dispatch, and a token's combine for the last of its k experts.

The gate weighting of the unfused sequence is a separate pass (dysharp_scale) because the shared
grouped GEMM kernels have no weighted epilogue: it costs one more read and write of every expert
output row; the fused GEMM-2 jobs do it in shared memory before storing (the same rounding).

Buffers: the receive layouts hold cap rows per local expert, cap = the most rows any expert
receives in this routing, or more so that a dynamic object's algebraic range (P x T rows) does not
reach into the next object (a deployment would reserve the worst case; the timing is the same).
"""
import numpy as np

from ...config.schema import LaunchConfig, MulticastConfig
from ...isa.expr import evaluate
from ..alltoall import PhasedLaunches, i64_preset
from ..layer_backward import (KERNELS as BACKWARD_KERNELS, backward_buffers, expert_bwd_launches,
                              shared_bwd)
from ..layer import (ACCT_NAMES, GROUPED_KERNELS, SHARED_KERNELS, LayerError, SchemePlan, _buf,
                     expert_load_max, grouped_gemm_launches, shared_expert_launches)
from .nvls import KERNELS as NVLS_KERNELS, check_switch_scheme

KERNELS = "workloads/kernels/dysharp/dysharp.s"
SCALE_ACC_BYTES = 28 * 1024   # dysharp_scale's .smem: one fp32 row of up to 7168 elements


def meta_row_bytes(k, token_word=False):
    """A token's meta row: k expert ids (i64) and k router weights (f32) - and, with
    `token_word` (token-centric fusion), the token's algebraic row u as an i64 at
    token_word_offset(k) - padded to 16 B and to at least the 64 B groups the gate weighting reads
    the ids in (ld.v8), so no read leaves the row."""
    used = token_word_offset(k) + 8 if token_word else 12 * k
    return -(-max(used, 64 * -(-k // 8)) // 16) * 16


def token_word_offset(k):
    """Where a fused meta row holds the token's algebraic row: after its ids and weights, 8-byte
    aligned."""
    return -(-12 * k // 8) * 8


def plan(layer):
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.dysharp
    P, T, k, El, H = s.num_gpus, s.tokens, s.top_k, s.local_experts, s.hidden
    U = P * T                                        # algebraic rows (tokens of all GPUs)
    rb, mb = s.row_bytes, meta_row_bytes(k)
    check_switch_scheme("dysharp", layer, SCALE_ACC_BYTES, "a row's fp32 product")
    if k > cfg.system.switch.nvls.dysharp.max_targets:
        raise LayerError(f"workload.layer.model: top-k {k} is above "
                         f"system.switch.nvls.dysharp.max_targets "
                         f"({cfg.system.switch.nvls.dysharp.max_targets}): one dymultimem "
                         f"operation names every expert of a token")
    cap = max(1, expert_load_max(layer), -(-U // El))
    if opts.fusion == "token":
        return _fused_plan(layer, cap)
    buffers = [
        _buf("dy_xe", El * cap * rb, dtype="bf16"),
        _buf("dy_ye", El * cap * rb, dtype="bf16"),
        _buf("dy_meta", El * cap * mb, region="control", dtype="i64"),
        _buf("dy_msrc", T * mb, region="control", dtype="i64"),
        _buf("dy_cnt", El * 8, region="control", dtype="i64"),
        _buf("dy_al", U * El * 8, region="control", dtype="i64"),
        _buf("dy_flags", 2 * P * 8, region="control", dtype="i64"),
        _buf("dy_comb", T * rb, dtype="bf16"),
    ]
    dyn = dict(targets_per_gpu=El, rows=U, counts="dy_cnt", al_table="dy_al")
    multicast = (MulticastConfig(buffer="dy_xe", row_bytes=rb, **dyn),
                 MulticastConfig(buffer="dy_meta", row_bytes=mb, **dyn),
                 MulticastConfig(buffer="dy_ye", row_bytes=rb, **dyn))
    training = cfg.workload.layer.passes == "training"
    # training keeps the unweighted expert outputs (the router weights' gradient needs them): the
    # GEMM writes them to dy_yraw and the gate weighting its scaled rows into the combine's object
    yraw = "dy_yraw" if training else "dy_ye"
    if training:
        buffers.append(_buf("dy_yraw", El * cap * rb, dtype="bf16"))
    gbufs, gemm = grouped_gemm_launches(s, 0, cfg.system.gpu.num_sms, "dy_cnt", "dy_xe", yraw,
                                        cap)
    sbufs, shared = shared_expert_launches(s, cfg, stream=1)
    launches = PhasedLaunches()
    add = launches.add
    for launch in shared:
        add(launch, "expert")
    add(LaunchConfig(kernel="dysharp_dispatch", grid=opts.channels, stream=0, params=(
        ("x", "@x"), ("topk_idx", "@topk_idx"), ("topk_w", "@topk_w"), ("msrc", "@dy_msrc"),
        ("xe", "@dy_xe"), ("meta", "@dy_meta"), ("acct", "@acct"), ("tokens", T), ("topk", k),
        ("hidden", H), ("meta_bytes", mb))), "dispatch")
    add(LaunchConfig(kernel="nvls_barrier", grid=1, stream=0, params=(
        ("flags", "@dy_flags"),)), "dispatch")
    for launch in gemm:
        add(launch, "expert")
    add(LaunchConfig(kernel="dysharp_scale", grid=opts.scale_tbs, stream=0, params=(
        ("ye", f"@{yraw}"), ("yout", "@dy_ye"), ("meta", "@dy_meta"), ("cnt", "@dy_cnt"),
        ("acct", "@acct"), ("topk", k), ("hidden", H), ("local_experts", El), ("cap", cap),
        ("meta_bytes", mb))), "expert")
    add(LaunchConfig(kernel="nvls_barrier", grid=1, stream=0, params=(
        ("flags", f"@dy_flags + {P * 8}"),)), "combine")
    add(LaunchConfig(kernel="dysharp_combine", grid=opts.channels, stream=0, params=(
        ("ye", "@dy_ye"), ("comb", "@dy_comb"), ("topk_idx", "@topk_idx"), ("acct", "@acct"),
        ("tokens", T), ("topk", k), ("hidden", H))), "combine")
    add(LaunchConfig(kernel="nvls_output", grid=cfg.workload.layer.combine_tbs, stream=0, params=(
        ("out", "@out"), ("ys", "@ys"), ("comb", "@dy_comb"), ("one", "@one"), ("acct", "@acct"),
        ("tokens", T), ("hidden", H), ("shared", s.shared),
        ("shared_tbs", cfg.workload.layer.shared_tbs))), "combine")
    bbufs, bwd = [], {}
    if training:
        bbufs, bwd = _backward(layer, add, cap, mb, "he")
        multicast += tuple(MulticastConfig(buffer=b, row_bytes=rb, **dyn)
                           for b in ("b_dye", "b_dxe"))
    return SchemePlan(
        buffers=tuple(buffers + gbufs + sbufs + bbufs), launches=tuple(launches.launches),
        kernel_files=(NVLS_KERNELS, KERNELS) + (BACKWARD_KERNELS if training else ()),
        n_tile=s.n_tile, multicast=multicast, backward=True, **bwd,
        phases={"dispatch": ("dysharp_dispatch", "nvls_barrier"),
                "expert": GROUPED_KERNELS + SHARED_KERNELS + ("dysharp_scale",),
                "combine": ("nvls_barrier", "dysharp_combine", "nvls_output")},
        launch_phases=tuple(launches.phases),
        reference_kwargs={"combine": "switch_targets", "local_experts": El},
        checked_accounting=ACCT_NAMES)


def _backward(layer, add, cap, mb, he):
    """The backward on stream 0 after the forward (either fusion; returns its buffers and the
    SchemePlan fields it sets): the combine's in-switch reduction becomes a multicast of dy to
    each token's k experts (dysharp_bwd_dispatch, placed by the forward's AL entries, so dO lands
    where x did), the dispatch's multicast an in-switch reduction of each token's k dX rows
    (dysharp_combine with the gradient rows unweighted); the router weights' gradient and
    dO = bf16(w dy) on the expert side (dysharp_bwd_weight over the forward's unweighted outputs
    dy_yraw and its meta rows of `mb` bytes, dw put home), the shared grouped backward kernels
    between (over the forward's activations `he`)."""
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.dysharp
    P, T, k, El, H = s.num_gpus, s.tokens, s.top_k, s.local_experts, s.hidden
    U = P * T
    bufs = backward_buffers(s, cap, _buf) + [
        _buf("dy_bflags", 2 * P * 8, region="control", dtype="i64"),
        _buf("dy_bacct", 8 * 8, region="control", dtype="i64"),
        _buf("dy_bdw", El * cap * 4, dtype="f32"),
        _buf("dy_bcomb", T * s.row_bytes, dtype="bf16"),
        _buf("dy_bdx", T * H * 4, dtype="f32"),
        _buf("dy_bbases", El * 8, region="control", dtype="i64")]
    presets = {"dy_bbases": i64_preset(np.tile(np.arange(El, dtype=np.int64) * cap, (P, 1)))}
    sbb, slaunches = shared_bwd(s, cfg, 0, _buf, done_flag=False)
    bufs += sbb
    for launch, phase in slaunches:
        add(launch, phase)
    add(LaunchConfig(kernel="dysharp_bwd_dispatch", grid=opts.channels, stream=0, params=(
        ("dy", "@dy"), ("dye", "@b_dye"), ("topk_idx", "@topk_idx"), ("bacct", "@bacct"),
        ("tokens", T), ("topk", k), ("hidden", H))), "backward_dispatch")
    add(LaunchConfig(kernel="nvls_barrier", grid=1, stream=0, params=(
        ("flags", "@dy_bflags"),)), "backward_dispatch")
    add(LaunchConfig(kernel="dysharp_bwd_weight", grid=opts.scale_tbs, stream=0, params=(
        ("al", "@dy_al"), ("meta", "@dy_meta"), ("yraw", "@dy_yraw"), ("dye", "@b_dye"),
        ("bdw", "@dy_bdw"), ("dw", "@dw"), ("gathered", U), ("tokens", T),
        ("local_experts", El), ("cap", cap), ("topk", k), ("hidden", H),
        ("meta_bytes", mb))), "backward_dispatch")
    for launch in expert_bwd_launches(s, 0, cfg.system.gpu.num_sms, "dy_cnt", "dy_xe", he,
                                      cap, "dy_bbases"):
        add(launch, "backward_expert")
    add(LaunchConfig(kernel="nvls_barrier", grid=1, stream=0, params=(
        ("flags", f"@dy_bflags + {P * 8}"),)), "backward_combine")
    add(LaunchConfig(kernel="dysharp_combine", grid=opts.channels, stream=0, params=(
        ("ye", "@b_dxe"), ("comb", "@dy_bcomb"), ("topk_idx", "@topk_idx"),
        ("acct", "@dy_bacct"), ("tokens", T), ("topk", k), ("hidden", H))), "backward_combine")
    # the shared experts' backward ran before on this stream: nothing to wait for
    add(LaunchConfig(kernel="nvls_output", grid=cfg.workload.layer.combine_tbs, stream=0, params=(
        ("out", "@dy_bdx"), ("ys", "@b_dxs"), ("comb", "@dy_bcomb"), ("one", "@one"),
        ("acct", "@dy_bacct"), ("tokens", T), ("hidden", H), ("shared", s.shared),
        ("shared_tbs", 0))), "backward_combine")

    def row_order(sim):
        """{expert: (flat tokens, slots)} in the receive layout's order: the rows the forward's
        hub placed (the AL table), per local expert by layout row."""
        order = {}
        idx = layer.routing.topk_idx.reshape(U, k)
        for g in range(P):
            al = sim.read_buffer(g, "dy_al", "i64")[:U * El].reshape(U, El)
            for le in range(El):
                e = g * El + le
                us = np.nonzero(al[:, le] > 0)[0]
                us = us[np.argsort(al[us, le], kind="stable")]
                t_, s_ = order.setdefault(e, ([], []))
                for u in us:
                    t_.append(int(u))
                    s_.append(int(np.nonzero(idx[u] == e)[0][0]))
        return order

    return bufs, dict(presets=presets, backward_row_order=row_order,
                      backward_reference={"combine": "switch_targets", "local_experts": El},
                      backward_dx_f32="dy_bdx", backward_acct=(("dy_bacct", 3, 2),))


def _fused_plan(layer, cap):
    """Token-centric fusion (the paper's design): the dispatch-and-combine, GEMM and gate groups
    of the persistent megakernel (dysharp.s dysharp_fused_comm, dysharp_fused_expert,
    dysharp_fused_gate), launched together, driven by the token tracker (the hub's tile table,
    the tokens' ready words)."""
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.dysharp
    dy = cfg.system.switch.nvls.dysharp
    P, T, k, El, H = s.num_gpus, s.tokens, s.top_k, s.local_experts, s.hidden
    U = P * T
    tile = s.tile_rows
    rb, mb, tw = s.row_bytes, meta_row_bytes(k, True), token_word_offset(k)
    if T > dy.tracker_tokens:
        raise LayerError(
            f"workload.layer.tokens_per_gpu: {T} tokens per GPU and the token tracker's token "
            f"table holds {dy.tracker_tokens} (system.switch.nvls.dysharp.tracker_tokens): the "
            f"fused layer tracks every token of the layer at once (a token without an entry "
            f"could not be dispatched, and the tiles it would fill could wait for it forever); "
            f"raise tracker_tokens or run workload.layer.dysharp.fusion: none")
    nsm, per_sm = cfg.system.gpu.num_sms, cfg.system.gpu.sm.max_resident_tbs
    workers = _blocks(opts.compute_tbs, nsm, "workload.layer.dysharp.compute_tbs")
    gates = _blocks(opts.gate_tbs, nsm, "workload.layer.dysharp.gate_tbs")
    # a persistent megakernel needs every block resident at once: a block that waits for SM room
    # could hold the rows, weights or flags the resident ones wait for (a GEMM block holds most
    # of an SM's shared memory: one per SM)
    if workers > nsm or workers + gates + opts.channels > nsm * per_sm:
        raise LayerError(
            f"workload.layer.dysharp: {workers} GEMM blocks (compute_tbs; one per SM), {gates} "
            f"gate blocks (gate_tbs) and {opts.channels} dispatch-and-combine blocks (channels) "
            f"must all be resident at once on {nsm} SMs (system.gpu.num_sms) of "
            f"{per_sm} blocks each (system.gpu.sm.max_resident_tbs): the fused layer's blocks "
            f"wait for each other")
    ltiles = -(-cap // tile)
    tiles = El * ltiles
    buffers = [
        _buf("dy_xe", El * cap * rb, dtype="bf16"),
        _buf("dy_ye", El * cap * rb, dtype="bf16"),
        _buf("dy_he", El * cap * s.ffn * 2, dtype="bf16"),
        _buf("dy_meta", El * cap * mb, region="control", dtype="i64"),
        _buf("dy_msrc", T * mb, region="control", dtype="i64"),
        _buf("dy_cnt", El * 8, region="control", dtype="i64"),
        _buf("dy_al", U * El * 8, region="control", dtype="i64"),
        _buf("dy_tready", tiles * 8, region="control", dtype="i64"),
        _buf("dy_tokready", T * k * 8, region="control", dtype="i64"),
        _buf("dy_wvec", El * cap * 4, region="control", dtype="f32"),
        _buf("dy_wdone", tiles * 8, region="control", dtype="i64"),
        _buf("dy_notice", El * cap * 8, region="control", dtype="i64"),
        _buf("dy_ended", (P + 1) * 8, region="control", dtype="i64"),
        _buf("dy_jobs", (2 + 2 * tiles) * 8, region="control", dtype="i64"),
        _buf("dy_comb", T * rb, dtype="bf16"),
    ]
    ready_order = opts.combine_order == "ready"
    if ready_order:
        # the ready queue the token tracker appends tokens to as their k words fill
        # (components/dysharp_ready.py): position p holds the (p + 1)-th token ready, + 1
        buffers.append(_buf("dy_rqueue", T * 8, region="control", dtype="i64"))
    # the tracker's tile table holds the tiles rows land in: a target's rows are placed from
    # layout row 0 up, so only the tiles of the most rows any expert receives (the layouts' stride,
    # cap, also spans the algebraic range U / El, which no expert's rows reach)
    lrows = min(cap, -(-expert_load_max(layer) // tile) * tile)
    # the table recycles: a tile's entry frees when its GEMM-2 jobs are done (their counter in
    # dy_jobs, word 3 + 2 b, reaches H / n_tile); one entry is kept per local expert for the
    # tile its GEMM blocks need first (tracker_grant: expert_head), so a table smaller than the
    # local experts is refused - with fewer, the experts' partial tiles can hold every entry
    # until the dispatch's end while the GEMM blocks, taking tiles in a fixed order, wait for full
    # tiles without one (measured: S top-8 on 8 GPUs x 256 tokens, 8 local experts, 4 entries)
    if El > dy.tracker_tiles:
        raise LayerError(
            f"system.switch.nvls.dysharp.tracker_tiles: the token tracker's tile table holds "
            f"{dy.tracker_tiles} entries and this layer has {El} local experts per GPU: the "
            f"tracker keeps one entry per local expert for the tile its GEMM blocks need first "
            f"(with fewer, the experts' partial row tiles can hold every entry until every "
            f"source's dispatch has ended while the GEMM blocks wait for full tiles in their "
            f"fixed order), so the table needs at least one entry per local expert; raise "
            f"tracker_tiles or run workload.layer.dysharp.fusion: none")
    dyn = dict(targets_per_gpu=El, rows=U, counts="dy_cnt", al_table="dy_al",
               tracker="dy_tready", tile_rows=tile, layout_rows=lrows, done_counters="dy_jobs",
               done_offset=24, done_stride=16, done_jobs=H // s.n_tile)
    ready = (dict(ready_words="dy_tokready", ready_count=k, ready_queue="dy_rqueue")
             if ready_order else {})
    multicast = (MulticastConfig(buffer="dy_xe", row_bytes=rb, **dyn, **ready),
                 MulticastConfig(buffer="dy_meta", row_bytes=mb, **dyn),
                 MulticastConfig(buffer="dy_ye", row_bytes=rb, targets_per_gpu=El, rows=U,
                                 counts="dy_cnt", al_table="dy_al", layout_rows=lrows))
    training = cfg.workload.layer.passes == "training"
    if training:
        # the router weights' gradient needs the unweighted expert outputs: the training
        # kernel's GEMM-2 epilogue stores them too, before weighting (the combine's object keeps
        # the weighted rows)
        buffers.append(_buf("dy_yraw", El * cap * rb, dtype="bf16"))
    sbufs, shared = shared_expert_launches(s, cfg, stream=1)
    launches = PhasedLaunches()
    add = launches.add
    for launch in shared:
        add(launch, "expert")
    expert_kernel = "dysharp_fused_expert_train" if training else "dysharp_fused_expert"
    # the rows per expert the GEMM and gate blocks walk (workload.layer.dysharp.walk): the tracked
    # tiles' (rows land in no other), or the whole stride (the earlier kernels)
    walk = lrows if opts.walk == "tracked" else cap
    add(LaunchConfig(kernel=expert_kernel, grid=workers, stream=2, params=(
        ("xe", "@dy_xe"), ("he", "@dy_he"), ("ye", "@dy_ye"), ("cnt", "@dy_cnt"),
        ("tready", "@dy_tready"), ("wvec", "@dy_wvec"), ("wdone", "@dy_wdone"),
        ("jobs", "@dy_jobs"), ("wg", "@w_gate"), ("wu", "@w_up"), ("wd", "@w_down"),
        ("acct", "@acct"), ("hidden", H), ("ffn", s.ffn), ("tile_rows", tile),
        ("n_tile", s.n_tile), ("swizzle", s.stream_swizzle), ("local_experts", El),
        ("cap", cap), ("walk_rows", walk)) + ((("yraw", "@dy_yraw"),) if training else ())),
        "expert")
    add(LaunchConfig(kernel="dysharp_fused_gate", grid=gates, stream=3, params=(
        ("meta", "@dy_meta"), ("cnt", "@dy_cnt"), ("tready", "@dy_tready"), ("wvec", "@dy_wvec"),
        ("wdone", "@dy_wdone"), ("notice", "@dy_notice"), ("jobs", "@dy_jobs"),
        ("tokready", "@dy_tokready"), ("acct", "@acct"), ("tokens", T), ("topk", k),
        ("local_experts", El), ("cap", cap), ("walk_rows", walk), ("tile_rows", tile),
        ("meta_bytes", mb),
        ("token_word", tw), ("down_jobs", H // s.n_tile))), "expert")
    # the order the combine takes its tokens in (combine_order): in token order, checking a
    # token's k ready words (tracker_ready) once per token, as the paper's per-token ready count
    # (count), or one wait per slot (slots, the earlier model); or in the order they become ready,
    # from the tracker's ready queue (ready)
    comm_kernel = ("dysharp_fused_comm_ready" if ready_order else "dysharp_fused_comm"
                   if dy.tracker_ready == "count" else "dysharp_fused_comm_slots")
    add(LaunchConfig(kernel=comm_kernel, grid=opts.channels, stream=0, params=(
        ("x", "@x"), ("topk_idx", "@topk_idx"), ("topk_w", "@topk_w"), ("msrc", "@dy_msrc"),
        ("xe", "@dy_xe"), ("meta", "@dy_meta"), ("ye", "@dy_ye"), ("comb", "@dy_comb"),
        ("tokready", "@dy_tokready"), ("ended", "@dy_ended"), ("cnt", "@dy_cnt"),
        ("tready", "@dy_tready"), ("acct", "@acct"), ("tokens", T), ("topk", k), ("hidden", H),
        ("meta_bytes", mb), ("token_word", tw), ("local_experts", El), ("layout_tiles", ltiles),
        ("tile_rows", tile)) + ((("rqueue", "@dy_rqueue"),) if ready_order else ())),
        "dispatch")
    add(LaunchConfig(kernel="nvls_output", grid=cfg.workload.layer.combine_tbs, stream=0, params=(
        ("out", "@out"), ("ys", "@ys"), ("comb", "@dy_comb"), ("one", "@one"), ("acct", "@acct"),
        ("tokens", T), ("hidden", H), ("shared", s.shared),
        ("shared_tbs", cfg.workload.layer.shared_tbs))), "combine")
    bbufs, bwd = [], {}
    if training:
        # the backward: the same multicast and in-switch reduction in swapped roles as the
        # unfused layer's, in sequence after the megakernel (a token-fused backward is not built)
        bbufs, bwd = _backward(layer, add, cap, mb, "dy_he")
        plain = dict(targets_per_gpu=El, rows=U, counts="dy_cnt", al_table="dy_al",
                     layout_rows=lrows)
        multicast += tuple(MulticastConfig(buffer=b, row_bytes=rb, **plain)
                           for b in ("b_dye", "b_dxe"))
    return SchemePlan(
        buffers=tuple(buffers + sbufs + bbufs), launches=tuple(launches.launches),
        kernel_files=(NVLS_KERNELS, KERNELS) + (BACKWARD_KERNELS if training else ()),
        n_tile=s.n_tile, multicast=multicast, backward=True, **bwd,
        phases={"dispatch": (comm_kernel,),
                "expert": (expert_kernel, "dysharp_fused_gate") + SHARED_KERNELS,
                "combine": ("nvls_output",)},
        launch_phases=tuple(launches.phases),
        reference_kwargs={"combine": "switch_targets", "local_experts": El},
        checked_accounting=ACCT_NAMES)


def _blocks(value, nsm, key):
    """A thread-block count given as an int or an expression of nsm (SMs per GPU)."""
    try:
        n = evaluate(value, {"nsm": nsm})
    except Exception as e:   # the expression's own error, named with its key
        raise LayerError(f"{key}: '{value}' is not a count or an expression of nsm ({e})") from None
    if not isinstance(n, int) or n < 1:
        raise LayerError(f"{key}: '{value}' gives {n} thread blocks; expected at least 1")
    return n
