"""Scheme `moehub`: destination-agnostic dispatch through the MoE-Hub (arXiv 2605.05888).

Kernels (workloads/kernels/moehub/moe_layer.s): `moehub_dispatch` sends every routed row with
send_to_expert as soon as its token is routed - no count exchange, barrier, prefix sum or host
round trip; `moehub_expert` claims hub-ready tiles and runs the SwiGLU FFN while later rows still
arrive, sending each output row home with send_home; then the common `moe_combine`.

Streams: 0 dispatch; 1 shared experts; 2 claimers; 3 GEMM workers, then combine (all start with the
layer: the shared experts and the routed GEMMs overlap the dispatch).
Expert GEMMs: El claimer TBs (moehub_claim, no shared memory) publish hub-ready tiles in a queue;
`expert_tbs` worker TBs (moehub_expert) take (I + H) / gemm_n_tile jobs per tile (moe_layer.s), so
several SMs work on each tile.
With system.gpu.hub.moe.dam.consumers: launch there are no claimers and no persistent workers:
the DAM starts `moehub_tile`'s blocks per ready tile in two thread-block groups - the Ju gate/up
blocks, then the Jd down blocks once every gate/up block exited (the group counter) - and one last
block (moe_layer.s).
With workload.layer.moehub.stores: row_sparse the dispatch is `moehub_dispatch_rowsp`: it
registers one row-sparse allocation per expert (rowsp.malloc) and stores each row with st.rowsp
naming (the expert's allocation id, row t * k + j, offset 0) - the published ISA. With
workload.layer.moehub.nop_choices N > 0 it is `moehub_dispatch_rowsp_nop`: each token's last N
choices are stored with st.rowsp.nop (non-critical rows; rpm.schedule: paper sends them last).
With workload.layer.moehub.multi_expert_store the dispatch kernels end in `_grouped`: one store
per token and destination GPU names all the token's experts there (send_to_experts, or
st.rowsp.experts), so the row crosses the links once per GPU (an ISA experiment beyond the paper).
With system.gpu.hub.moe.internode: per_node (a multi-node system) the dispatch kernels end in
`_pernode`: one store per token and other node names all the token's experts there, and the hub
sends the row once to that node's forwarding hub, which fans it out (components/moehub/
forward.py); the experts on the sender's node keep one store each (one per GPU with
multi_expert_store).
With system.gpu.hub.moe.internode_combine: per_node too the expert kernel is `moehub_expert_combnode`
(or `moehub_tile_combnode`): an output row for a token of another node goes over NVLink to that
token's forwarder, `moehub_forward_combine` there sums the node's weighted rows and puts one bf16
row per (token, node) home, and `moe_combine_pernode` replaces `moe_combine` (reference
combine="node_slots").
Windows: each local expert's receive window holds every row it will receive (rounded up to whole
tiles), so the windows never throttle the layer; the AAU's record table
(system.gpu.hub.moe.aau.record_table_entries) does bound the rows in flight.
"""

from ...config.schema import LaunchConfig, MoeWorkloadConfig
from ..layer import (SHARED_KERNELS, LayerError, SchemePlan, _buf, combine_launch, expert_load_max,
                     max_tiles_per_gpu, shared_expert_launches)
from ..moehub_backward import (BACKWARD_KERNEL_FILES, backward_plan, backward_refusal,
                               placement as training_placement)


def plan(layer):
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.moehub
    El, tile = s.local_experts, s.tile_rows
    workers = opts.expert_tbs
    most = expert_load_max(layer)
    window_rows = max(1, -(-most // tile)) * tile
    tiles = max_tiles_per_gpu(layer)
    buffers = [
        _buf("tq", 64 * (tiles + 2 * workers + 6 * s.stream_swizzle + 4), region="control",
             dtype="i64"),   # end marks: moe_layer.s
        _buf("tiles", tiles * tile * (s.ffn + s.hidden) * 2, dtype="bf16"),
    ]
    if opts.stores == "row_sparse":
        buffers.append(_buf("rowsp_sync", 8, region="control", dtype="i64"))
    # streams: 0 dispatch; 1 the shared experts (no routed rows needed: they overlap everything);
    # 2 the claimers; 3 the GEMM workers, then the combine. All start with the layer.
    sbufs, shared = shared_expert_launches(s, cfg, stream=1)
    # the shared experts are placed first: the persistent GEMM workers would otherwise hold every
    # SM until the end
    if cfg.system.gpu.hub.moe.dam.consumers == "launch":
        return _plan_dam_launched(layer, buffers, sbufs, shared, window_rows)
    if _training(cfg):
        return _plan_training(layer, buffers, sbufs, shared, window_rows)
    expert_params = (
        ("wg", "@w_gate"), ("wu", "@w_up"), ("wd", "@w_down"), ("tq", "@tq"),
        ("tiles", "@tiles"), ("yhome", "@yhome"),
        ("acct", "@acct"), ("done", "@done"), ("hidden", s.hidden), ("ffn", s.ffn),
        ("local_experts", El), ("record_bytes", cfg.system.gpu.hub.moe.aau.record_bytes),
        ("tile_rows", tile), ("n_tile", s.n_tile), ("swizzle", s.stream_swizzle))
    claim = LaunchConfig(kernel="moehub_claim", grid=El, stream=2, params=(
        ("tq", "@tq"), ("local_experts", El), ("workers", workers),
        ("swizzle", s.stream_swizzle)))
    if _combine_per_node(cfg):
        buffers += _node_combine_buffers(s, cfg)
        launches = [
            *shared, _dispatch_launch(s, cfg), claim,
            LaunchConfig(kernel="moehub_expert_combnode", grid=workers, stream=3,
                         params=expert_params + _forward_params(s, cfg)),
            *_node_combine_launches(s, cfg),
        ]
        return _scheme_plan(s, cfg, buffers + sbufs, launches, window_rows,
                            ("moehub_claim", "moehub_expert_combnode"), **_node_combine_plan(s, cfg))
    launches = [
        *shared,
        _dispatch_launch(s, cfg),
        claim,
        LaunchConfig(kernel="moehub_expert", grid=workers, stream=3, params=expert_params),
        combine_launch(s, cfg, stream=3),
    ]
    return _scheme_plan(s, cfg, buffers + sbufs, launches, window_rows,
                        ("moehub_claim", "moehub_expert"))


def _training(cfg):
    """passes: training in a configuration with a backward (moehub_backward.backward_refusal)."""
    return cfg.workload.layer.passes == "training" and not backward_refusal(cfg)


def _plan_training(layer, buffers, sbufs, shared, window_rows):
    """The forward with moehub_expert_train (activations kept beside the windows' X rows), then
    the backward (moehub_backward.py)."""
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.moehub
    El = s.local_experts
    claim = LaunchConfig(kernel="moehub_claim", grid=El, stream=2, params=(
        ("tq", "@tq"), ("local_experts", El), ("workers", opts.expert_tbs),
        ("swizzle", s.stream_swizzle)))
    expert = LaunchConfig(kernel="moehub_expert_train", grid=opts.expert_tbs, stream=3, params=(
        ("wg", "@w_gate"), ("wu", "@w_up"), ("wd", "@w_down"), ("tq", "@tq"),
        ("tiles", "@tiles"), ("yhome", "@yhome"), ("acct", "@acct"), ("done", "@done"),
        ("hidden", s.hidden), ("ffn", s.ffn), ("local_experts", El),
        ("record_bytes", cfg.system.gpu.hub.moe.aau.record_bytes), ("tile_rows", s.tile_rows),
        ("n_tile", s.n_tile), ("swizzle", s.stream_swizzle)) + _keep_activations())
    launches = [*shared, _dispatch_launch(s, cfg), claim, expert, combine_launch(s, cfg, stream=3)]
    return _with_backward(layer, buffers + sbufs, launches, window_rows,
                          ("moehub_claim", "moehub_expert_train"))


def _keep_activations():
    """moehub_{expert,tile}_train's parameters: where the activations go (moehub_backward.py)."""
    return (("he", "@mh_he"), ("xwin", "@moe_windows"))


def _with_backward(layer, buffers, launches, window_rows, expert_kernels):
    """The SchemePlan of a training run: the forward's launches, then the backward's; the
    experts get a second window each (the gradient's)."""
    s, cfg = layer.shape, layer.cfg
    phases = _phases(cfg, expert_kernels, ("moe_combine",))
    by_kernel = {k: p for p, names in phases.items() for k in names}
    launch_phases = [by_kernel.get(l.kernel, "") for l in launches]
    bbufs, blaunches, presets, row_order, received = backward_plan(layer, window_rows)
    launches = launches + [launch for launch, _ in blaunches]
    launch_phases += [phase for _, phase in blaunches]
    moe = MoeWorkloadConfig(num_experts=2 * s.experts, placement=training_placement(s),
                            window_rows=window_rows, row_bytes=s.row_bytes)
    return SchemePlan(buffers=tuple(buffers + bbufs), launches=tuple(launches),
                      kernel_files=("workloads/kernels/moehub/moe_layer.s",)
                      + BACKWARD_KERNEL_FILES, moe=moe, presets=presets,
                      received_rows=received, n_tile=s.n_tile, phases=phases,
                      launch_phases=tuple(launch_phases), backward=True,
                      backward_row_order=row_order)


def _phases(cfg, expert_kernels, combine):
    return {"mediation": (), "dispatch": (_dispatch_kernel(cfg),),
            "expert": expert_kernels + SHARED_KERNELS, "combine": combine}


def _combine_per_node(cfg):
    """system.gpu.hub.moe.internode_combine: per_node (the loader allows it with internode:
    per_node only)."""
    return cfg.system.gpu.hub.moe.internode_combine == "per_node"


def _forward_params(s, cfg):
    """moehub_{expert,tile}_combnode's extra parameters (tile_rows_forward in moe_layer.s)."""
    return (("yfwd", "@yfwd"), ("slots", s.pairs),
            ("node_gpus", cfg.system.nodes.gpus_per_node))


def _node_combine_launches(s, cfg):
    """The forwarders' sums (moehub_forward_combine), then the home's (moe_combine_pernode), on
    stream 3 after the expert kernel."""
    L = cfg.system.nodes.gpus_per_node
    node = (("node_gpus", L), ("experts_per_node", s.local_experts * L))
    return [
        LaunchConfig(kernel="moehub_forward_combine", grid=cfg.workload.layer.combine_tbs,
                     stream=3, params=(
                         ("yfwd", "@yfwd"), ("cf_idx", "@cf_idx"), ("cf_w", "@cf_w"),
                         ("cf_stage", "@cf_stage"), ("cf_ctl", "@cf_ctl"),
                         ("ynode", "@ynode"), ("topk_idx", "@topk_idx"),
                         ("topk_w", "@topk_w"), ("done", "@done"), ("fdone", "@fdone"),
                         ("tokens", s.tokens), ("topk", s.top_k), ("hidden", s.hidden))
                     + node),
        LaunchConfig(kernel="moe_combine_pernode", grid=cfg.workload.layer.combine_tbs,
                     stream=3, params=(
                         ("out", "@out"), ("yhome", "@yhome"), ("ynode", "@ynode"),
                         ("ys", "@ys"), ("topk_idx", "@topk_idx"), ("topk_w", "@topk_w"),
                         ("one", "@one"), ("done", "@done"), ("fdone", "@fdone"),
                         ("acct", "@acct"), ("tokens", s.tokens), ("topk", s.top_k),
                         ("hidden", s.hidden), ("shared", s.shared),
                         ("shared_tbs", cfg.workload.layer.shared_tbs)) + node),
    ]


def _node_combine_plan(s, cfg):
    """The _scheme_plan arguments of the per-node combine: its phase kernels and reference."""
    return dict(combine=("moehub_forward_combine", "moe_combine_pernode"),
                reference={"combine": "node_slots", "local_experts": s.local_experts,
                           "node_gpus": cfg.system.nodes.gpus_per_node})


def _node_combine_buffers(s, cfg):
    """The per-node combine's buffers (layouts: moe_layer.s, moehub_forward_combine)."""
    N = cfg.system.nodes.count
    return [_buf("yfwd", N * s.pairs * s.row_bytes, dtype="bf16"),
            _buf("cf_idx", N * s.pairs * 8, region="control", dtype="i64"),
            _buf("cf_w", N * s.pairs * 4, region="control", dtype="f32"),
            _buf("cf_stage", N * s.tokens * s.row_bytes, dtype="bf16"),
            _buf("cf_ctl", 16, region="control", dtype="i64"),
            _buf("ynode", s.tokens * N * s.row_bytes, dtype="bf16"),
            _buf("fdone", s.num_gpus * 8, region="control", dtype="i64")]


def _dispatch_launch(s, cfg):
    opts = cfg.workload.layer.moehub
    params = (("x", "@x"), ("topk_idx", "@topk_idx"), ("tokens", s.tokens), ("topk", s.top_k),
              ("hidden", s.hidden), ("acct", "@acct"))
    per_node = _per_node(cfg)
    if opts.nop_choices:
        _check_nop_choices(s, opts, per_node)
        # choices j >= nop_from of each token are stored with st.rowsp.nop
        params += (("nop_from", s.top_k - opts.nop_choices),)
    if per_node:
        # one store per token and other node (the hub forwards it there: forward.py); on this
        # node one per expert, or per GPU with multi_expert_store. Experts sit E / G per GPU
        gpn = cfg.system.nodes.gpus_per_node
        params += (("experts_per_node", s.local_experts * gpn), ("gpus_per_node", gpn),
                   ("nodes", cfg.system.nodes.count),
                   ("local_group", s.local_experts if opts.multi_expert_store else 1))
    elif opts.multi_expert_store:
        # the kernel groups a token's experts by GPU: experts sit E / G per GPU in order
        params += (("experts_per_gpu", s.local_experts),)
    kernel = _dispatch_kernel_name(opts, per_node)
    if opts.stores == "row_sparse":
        return LaunchConfig(kernel=kernel, grid=opts.dispatch_tbs, stream=0,
                            params=params + (("experts", s.experts), ("sync", "@rowsp_sync")))
    return LaunchConfig(kernel=kernel, grid=opts.dispatch_tbs, stream=0, params=params)


def _per_node(cfg):
    """system.gpu.hub.moe.internode: per_node (the loader allows it on multi-node systems only)."""
    return cfg.system.gpu.hub.moe.internode == "per_node"


def _check_nop_choices(s, opts, per_node=False):
    """workload.layer.moehub.nop_choices marks single-row st.rowsp stores (st.rowsp.nop)."""
    key = "workload.layer.moehub.nop_choices"
    if per_node:
        raise LayerError(f"{key}: {opts.nop_choices} needs one store per routing choice; "
                         f"system.gpu.hub.moe.internode: per_node stores a token's experts on "
                         f"another node together (st.rowsp.experts has no .nop variant)")
    if opts.stores != "row_sparse":
        raise LayerError(f"{key}: {opts.nop_choices} marks rows with st.rowsp.nop, a row-sparse "
                         f"store; set workload.layer.moehub.stores: row_sparse (found "
                         f"{opts.stores})")
    if opts.multi_expert_store:
        raise LayerError(f"{key}: {opts.nop_choices} needs one store per routing choice; "
                         f"st.rowsp.experts (workload.layer.moehub.multi_expert_store: true) has "
                         f"no .nop variant")
    if opts.nop_choices > s.top_k:
        raise LayerError(f"{key}: {opts.nop_choices} is above the model's top-k ({s.top_k})")


def _dispatch_kernel_name(opts, per_node=False):
    """moehub_dispatch[_rowsp][_grouped|_pernode|_nop] (workload.layer.moehub.stores,
    .multi_expert_store, .nop_choices; system.gpu.hub.moe.internode: per_node)."""
    return ("moehub_dispatch" + ("_rowsp" if opts.stores == "row_sparse" else "")
            + ("_pernode" if per_node else "_grouped" if opts.multi_expert_store else "")
            + ("_nop" if opts.nop_choices else ""))


def _dispatch_kernel(cfg):
    return _dispatch_kernel_name(cfg.workload.layer.moehub, _per_node(cfg))


def _scheme_plan(s, cfg, buffers, launches, window_rows, expert_kernels,
                 combine=("moe_combine",), reference=None):
    moe = MoeWorkloadConfig(num_experts=s.experts, placement=None, window_rows=window_rows,
                            row_bytes=s.row_bytes)
    return SchemePlan(buffers=tuple(buffers), launches=tuple(launches),
                      reference_kwargs=reference or {},
                      kernel_files=("workloads/kernels/moehub/moe_layer.s",), moe=moe,
                      received_stat="system.gpu*.hub.aau.allocations", n_tile=s.n_tile,
                      phases=_phases(cfg, expert_kernels, combine),
                      backward_why=backward_refusal(cfg))


def _plan_dam_launched(layer, buffers, sbufs, shared, window_rows):
    """system.gpu.hub.moe.dam.consumers: launch: no claimers and no persistent workers; the DAM
    starts moehub_tile's blocks per ready tile, the Ju gate/up group then the Jd down group, then
    one last block (moe_layer.s)."""
    s, cfg = layer.shape, layer.cfg
    gate_up, down = s.ffn // s.n_tile, s.hidden // s.n_tile
    jobs = gate_up + down
    groups = (gate_up, down) if cfg.workload.layer.moehub.tile_groups == "split" else None
    per_node = _combine_per_node(cfg)
    params = (("tq", "@tq"), ("wg", "@w_gate"), ("wu", "@w_up"), ("wd", "@w_down"),
              ("tiles", "@tiles"), ("yhome", "@yhome"), ("acct", "@acct"),
              ("done", "@done"), ("hidden", s.hidden), ("ffn", s.ffn),
              ("local_experts", s.local_experts),
              ("record_bytes", cfg.system.gpu.hub.moe.aau.record_bytes),
              ("tile_rows", s.tile_rows), ("n_tile", s.n_tile))
    kernel = "moehub_tile_combnode" if per_node else "moehub_tile"
    if _training(cfg):
        kernel, params = "moehub_tile_train", params + _keep_activations()
    launches = [
        *shared,
        _dispatch_launch(s, cfg),
        LaunchConfig(kernel=kernel, grid=max_tiles_per_gpu(layer) * jobs + 1, stream=3,
                     dam_tile_tbs=jobs, dam_groups=groups,
                     params=params + (_forward_params(s, cfg) if per_node else ())),
        *(_node_combine_launches(s, cfg) if per_node else [combine_launch(s, cfg, stream=3)]),
    ]
    if _training(cfg):
        return _with_backward(layer, buffers + sbufs, launches, window_rows, (kernel,))
    if per_node:
        buffers = buffers + _node_combine_buffers(s, cfg)
        return _scheme_plan(s, cfg, buffers + sbufs, launches, window_rows, (kernel,),
                            **_node_combine_plan(s, cfg))
    return _scheme_plan(s, cfg, buffers + sbufs, launches, window_rows, (kernel,))
