"""Scheme `deepep`: the software-mediated, bulk-synchronous baseline modelled on DeepEP's normal
kernels (BRIEF 3). Kernels and buffer layouts: workloads/kernels/deepep/deepep.s.

Stream 0 runs, in order: `deepep_layout` (per-rank/channel/expert counts, token metadata),
`deepep_notify` (barrier, count exchange, barrier, per-expert prefix sums and the GEMM tile table),
then - after the host round trip, modelled as the dispatch launch's host_delay - `deepep_dispatch`
(C = comm_sms / 2 channels; C * P sender TBs, one per (channel, destination), and C * P receiver
TBs, one per (channel, source) ring), `deepep_gate_up` and `deepep_down` (grouped GEMM over the
expert-major receive buffer, in jobs of workload.layer.gemm_n_tile output columns per row tile),
`deepep_combine`
(per received token: the fp32 weighted sum of its local expert outputs, sent home once per
(token, rank) as a bf16 row) and `deepep_reduce` (at home: shared experts + per-rank partials).
Stream 1 runs the shared experts (the "expert" phase lists them too, so its span starts with the
layer; kernel.deepep_gate_up_us / deepep_down_us are the routed GEMMs alone).

Arithmetic order differs from the per-slot combine of the other schemes (the partial sums are
rounded to bf16 on the way home), so the functional check uses the reference's
combine="per_rank".

Buffers are sized from the layer shape and, where DeepEP's host sizes them from the exchanged
counts (receive tensors, GEMM tiles), from the routing table.
"""
import numpy as np

from ...config.schema import LaunchConfig
from ..layer import SHARED_KERNELS, LayerError, SchemePlan, _buf, shared_expert_launches

KERNELS = "workloads/kernels/deepep/deepep.s"
META_BYTES = 128        # dp_meta row: 8 id words, 4 weight words, rank mask, padding
RING_META_BYTES = 96    # the part of it that travels with the row (ids, weights)
RECORD_BYTES = 96       # dp_rec entry: 8 position words, 4 weight words
COMBINE_STAGING = 8     # bf16 rows staged per combine TB (see deepep_combine)
EPOCH = 1               # one layer call: barrier values 1 and 2


def plan(layer):
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.deepep
    P, T, k, El, H, E = (s.num_gpus, s.tokens, s.top_k, s.local_experts, s.hidden, s.experts)
    C = max(1, opts.comm_sms // 2)                 # channels
    rb = s.row_bytes
    nsm = cfg.system.gpu.num_sms

    # what the host learns from the count exchange: rows each GPU receives, tiles of its experts
    counts = np.bincount(layer.routing.topk_idx.reshape(-1), minlength=E).reshape(P, El)
    rows_cap = max(1, int(counts.sum(axis=1).max()))
    tiles_cap = max(1, int((-(-counts // s.tile_rows)).sum(axis=1).max()))

    n = s.n_tile
    # GEMM jobs: one per SM at a time (their accumulators fill most of an SM's shared memory)
    expert_tbs = max(1, min(nsm, tiles_cap * max(s.ffn, H) // n))
    csb = COMBINE_STAGING * rb
    if 4 * H > 32 * 1024:
        raise LayerError(f"workload.layer.model: scheme deepep keeps a token's fp32 combine sum in "
                         f"32 KB of shared memory (hidden <= 8192), found hidden {H}")

    buffers, launches = mediation_and_dispatch(
        layer, comm_sms=opts.comm_sms, ring_rows=opts.ring_rows, rows_cap=rows_cap,
        tiles_cap=tiles_cap, align=1, host_delay=opts.host_sync_latency, receivers=True)
    buffers += [
        _buf("dp_hh", rows_cap * s.ffn * 2, dtype="bf16"),
        _buf("dp_recv_y", rows_cap * rb, dtype="bf16"),
        _buf("dp_comb", T * P * rb, dtype="bf16"),
        _buf("dp_combine_scratch", C * P * csb),
    ]
    launches += [
        LaunchConfig(kernel="deepep_gate_up", grid=expert_tbs, stream=0, params=(
            ("recv_x", "@dp_recv_x"), ("hh", "@dp_hh"), ("tiles", "@dp_tiles"),
            ("info", "@dp_info"), ("wg", "@w_gate"), ("wu", "@w_up"), ("hidden", H),
            ("ffn", s.ffn), ("tile_rows", s.tile_rows), ("n_tile", n))),
        LaunchConfig(kernel="deepep_down", grid=expert_tbs, stream=0, params=(
            ("hh", "@dp_hh"), ("recv_y", "@dp_recv_y"), ("tiles", "@dp_tiles"),
            ("info", "@dp_info"), ("wd", "@w_down"), ("acct", "@acct"), ("hidden", H),
            ("ffn", s.ffn), ("tile_rows", s.tile_rows), ("n_tile", n))),
        LaunchConfig(kernel="deepep_combine", grid=C * P, stream=0, params=(
            ("rec", "@dp_rec"), ("ntf", "@dp_ntf"), ("recv_y", "@dp_recv_y"),
            ("comb", "@dp_comb"), ("scratch", "@dp_combine_scratch"), ("acct", "@acct"),
            ("done", "@done"), ("tokens", T), ("topk", k), ("hidden", H), ("channels", C),
            ("local_experts", El))),
        LaunchConfig(kernel="deepep_reduce", grid=cfg.workload.layer.combine_tbs, stream=0,
                     params=(
            ("out", "@out"), ("ys", "@ys"), ("comb", "@dp_comb"), ("meta", "@dp_meta"),
            ("one", "@one"), ("done", "@done"), ("acct", "@acct"), ("tokens", T), ("hidden", H),
            ("shared", s.shared), ("shared_tbs", cfg.workload.layer.shared_tbs))),
    ]
    sbufs, slaunch = shared_expert_launches(s, cfg, stream=1)
    return SchemePlan(
        buffers=tuple(buffers + sbufs), launches=tuple(launches + slaunch),
        kernel_files=(KERNELS,), n_tile=n,
        phases={"mediation": ("deepep_layout", "deepep_notify"),
                "dispatch": ("deepep_dispatch",),
                "expert": ("deepep_gate_up", "deepep_down") + SHARED_KERNELS,
                "combine": ("deepep_combine", "deepep_reduce")},
        mediation_extra_ps=opts.host_sync_latency + cfg.system.gpu.kernel_launch_latency,
        reference_kwargs={"combine": "per_rank", "local_experts": El})


def mediation_and_dispatch(layer, *, comm_sms, ring_rows, rows_cap, tiles_cap, align, host_delay,
                           receivers):
    """The DeepEP mediation and dispatch kernels on stream 0: deepep_layout, deepep_notify (expert
    regions aligned to `align` rows), then deepep_dispatch after `host_delay` (its receiver TBs
    too if `receivers`, otherwise only its C*P senders: scheme overlap drains the rings itself).
    Returns (buffers, launches); the receive buffer dp_recv_x holds `rows_cap` rows."""
    s, cfg = layer.shape, layer.cfg
    P, T, k, El, H = s.num_gpus, s.tokens, s.top_k, s.local_experts, s.hidden
    if P > 62:
        raise LayerError(f"system.num_gpus: schemes deepep and overlap keep a token's destination "
                         f"ranks in one 64-bit mask word (at most 62 GPUs), found {P}")
    C = max(1, comm_sms // 2)                      # channels
    R = ring_rows
    W = C + El                                     # count row: C channel counts, El expert counts
    G = -(-El // 8)                                # notify TBs: 8 local experts each
    rb = s.row_bytes
    layout_tbs = max(1, min(T, 4 * cfg.system.gpu.num_sms))
    buffers = [
        _buf("dp_meta", T * META_BYTES, region="control", dtype="i64"),
        _buf("dp_lay", P * W * 8, region="control", dtype="i64"),
        _buf("dp_ntf", P * W * 8 + 64, region="control", dtype="i64"),   # + 64: ld.v8 past a row
        _buf("dp_bar", P * 8, region="control", dtype="i64"),
        _buf("dp_info", 32, region="control", dtype="i64"),
        _buf("dp_grp", G * 32, region="control", dtype="i64"),
        _buf("dp_cursor", El * 8, region="control", dtype="i64"),
        _buf("dp_tiles", tiles_cap * 32 + 64, region="control", dtype="i64"),
        _buf("dp_rank_slots", P * -(-T // 16) * 8, region="control", dtype="i64"),
        # tail and head tables, then the metadata ring slots
        _buf("dp_ring_ctl", 2 * C * P * 8 + C * P * R * RING_META_BYTES, region="control",
             dtype="i64"),
        _buf("dp_ring_x", C * P * R * rb, dtype="bf16"),
        _buf("dp_recv_x", rows_cap * rb, dtype="bf16"),
    ]
    if receivers:
        Tc = -(-T // C)
        buffers.append(_buf("dp_rec", C * P * Tc * RECORD_BYTES, region="control", dtype="i64"))
    launches = [
        LaunchConfig(kernel="deepep_layout", grid=layout_tbs, stream=0, params=(
            ("topk_idx", "@topk_idx"), ("topk_w", "@topk_w"), ("meta", "@dp_meta"),
            ("lay", "@dp_lay"), ("rank_slots", "@dp_rank_slots"), ("tokens", T), ("topk", k),
            ("channels", C), ("local_experts", El))),
        LaunchConfig(kernel="deepep_notify", grid=G, stream=0, params=(
            ("lay", "@dp_lay"), ("ntf", "@dp_ntf"), ("bar", "@dp_bar"), ("info", "@dp_info"),
            ("grp", "@dp_grp"), ("cursor", "@dp_cursor"), ("tiles", "@dp_tiles"),
            ("epoch", EPOCH), ("channels", C), ("local_experts", El),
            ("tile_rows", s.tile_rows), ("align", align))),
        LaunchConfig(kernel="deepep_dispatch", grid=(2 if receivers else 1) * C * P, stream=0,
                     host_delay=host_delay, params=(
            ("x", "@x"), ("meta", "@dp_meta"), ("rank_slots", "@dp_rank_slots"),
            ("ring_x", "@dp_ring_x"), ("ring_ctl", "@dp_ring_ctl"), ("ntf", "@dp_ntf"),
            ("rec", "@dp_rec" if receivers else 0), ("recv_x", "@dp_recv_x"),
            ("cursor", "@dp_cursor"), ("acct", "@acct"), ("tokens", T), ("topk", k),
            ("hidden", H), ("channels", C), ("ring_rows", R), ("local_experts", El))),
    ]
    return buffers, launches
