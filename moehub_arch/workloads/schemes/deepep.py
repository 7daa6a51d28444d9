"""Scheme `deepep`: the software-mediated, bulk-synchronous baseline modelled on DeepEP's normal
kernels (github.com/deepseek-ai/DeepEP). Kernels and buffer layouts: workloads/kernels/deepep/deepep.s.

Stream 0 runs, in order: `deepep_layout` (per-rank/channel/expert counts, token metadata),
`deepep_notify` (barrier, count exchange, barrier, per-expert prefix sums and the GEMM tile table),
then - after the host round trip, modelled as the dispatch launch's host_delay - `deepep_dispatch`
(C = comm_sms / 2 channels on comm_sms SMs: C sender blocks with one warp group per destination
and C receiver blocks with one warp group per (channel, source) ring; rows move by warp copies,
put.sm, charged on the SMs' load/store units), `deepep_gate_up` and `deepep_down` (grouped GEMM over the
expert-major receive buffer, in jobs of workload.layer.gemm_n_tile output columns per row tile),
`deepep_combine`
(C blocks of P warp groups on C SMs - one thread block per (channel, rank) where P fp32 rows do
not fit an SM's shared memory; per received token: the fp32 weighted sum of its local expert
outputs, copied home once per (token, rank) as a bf16 row by a warp copy) and `deepep_reduce` (at home: shared experts + per-rank partials).
Stream 1 runs the shared experts (the "expert" phase lists them too, so its span starts with the
layer; kernel.deepep_gate_up_us / deepep_down_us are the routed GEMMs alone).

Arithmetic order differs from the per-slot combine of the other schemes (the partial sums are
rounded to bf16 on the way home), so the functional check uses the reference's
combine="per_rank".

`workload.layer.deepep.kernels: communication` is DeepEP's own benchmark setting (dispatch and
combine alone): layout, notify, dispatch, combine and reduce, without the GEMMs and the shared
experts. The experts are the identity: combine reads the received rows as expert outputs, so the
functional check compares with the reference's identity experts, and token accounting checks
every pair but "computed". `dispatch_dtype: fp8` dispatches rows of 1 B per element plus an fp32
scale per 128 elements (DeepEP's FP8 input) - as bytes only, so it is timing mode with
kernels: communication only (the config loader says so); combine stays bf16.

Every run adds DeepEP's bandwidth figures (moehub_arch/workloads/bandwidth.py):
system.moe.deepep.{dispatch,combine}_GBps and the byte counts behind them.

Buffers are sized from the layer shape and, where DeepEP's host sizes them from the exchanged
counts (receive tensors, GEMM tiles), from the routing table.
"""
import functools

import numpy as np

from ...config.schema import LaunchConfig
from ..bandwidth import dispatch_row_bytes, mean_rank_bandwidth_GBps, tokens_received_per_rank
from ..layer import (ACCT_NAMES, SHARED_KERNELS, LayerError, SchemePlan, _buf,
                     shared_expert_launches)

KERNELS = "workloads/kernels/deepep/deepep.s"
META_BYTES = 128        # dp_meta row: 8 id words, 4 weight words, rank mask, padding
RING_META_BYTES = 96    # the part of it that travels with the row (ids, weights)
RECORD_BYTES = 96       # dp_rec entry: 8 position words, 4 weight words
COMBINE_STAGING = 8     # bf16 rows staged per combine warp group (see deepep_combine)
COMBINE_ACC_BYTES = 28 * 1024   # deepep_combine's .smem: one fp32 row of up to 7168 elements
EPOCH = 1               # one layer call: barrier values 1 and 2


def plan(layer):
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.deepep
    P, T, k, El, H, E = (s.num_gpus, s.tokens, s.top_k, s.local_experts, s.hidden, s.experts)
    comm_only = opts.kernels == "communication"
    C = max(1, opts.comm_sms // 2)                 # channels
    rb = s.row_bytes                               # bf16 rows (expert outputs, combine)
    db = dispatch_row_bytes(H, opts.dispatch_dtype)   # dispatched rows
    nsm = cfg.system.gpu.num_sms

    # what the host learns from the count exchange: rows each GPU receives, tiles of its experts
    counts = np.bincount(layer.routing.topk_idx.reshape(-1), minlength=E).reshape(P, El)
    rows_cap = max(1, int(counts.sum(axis=1).max()))
    tiles_cap = max(1, int((-(-counts // s.tile_rows)).sum(axis=1).max()))

    n = s.n_tile
    csb = COMBINE_STAGING * rb
    if 4 * H > COMBINE_ACC_BYTES:
        raise LayerError(f"workload.layer.model: scheme deepep keeps a token's fp32 combine sum in "
                         f"{COMBINE_ACC_BYTES // 1024} KB of shared memory per warp group (hidden "
                         f"<= {COMBINE_ACC_BYTES // 4}), found hidden {H}")
    # combine: one block of P warp groups per channel (DeepEP) when their accumulators fit the SM's
    # shared memory, else one thread block per (channel, rank) spread over the SMs
    groups = P if P * COMBINE_ACC_BYTES <= cfg.system.gpu.sm.smem_bytes else 1
    # combine's expert outputs: the layer's GEMM output; the received rows themselves when the
    # experts are the identity (communication only); with fp8 rows, a bf16 buffer of their size
    if not comm_only:
        expert_out = "@dp_recv_y"
    else:
        expert_out = "@dp_recv_x" if opts.dispatch_dtype == "bf16" else "@dp_recv_y"

    buffers, launches = mediation_and_dispatch(
        layer, comm_sms=opts.comm_sms, ring_rows=opts.ring_rows, rows_cap=rows_cap,
        tiles_cap=tiles_cap, align=1, host_delay=opts.host_sync_latency, receivers=True,
        dispatch_dtype=opts.dispatch_dtype, send_chunk=opts.send_chunk_tokens)
    buffers += [
        _buf("dp_comb", T * P * rb, dtype="bf16"),
        _buf("dp_combine_scratch", C * P * csb),
    ]
    if expert_out == "@dp_recv_y":
        buffers.append(_buf("dp_recv_y", rows_cap * rb, dtype="bf16"))
    if not comm_only:
        # GEMM jobs: one per SM at a time (their accumulators fill most of an SM's shared memory)
        expert_tbs = max(1, min(nsm, tiles_cap * max(s.ffn, H) // n))
        buffers.append(_buf("dp_hh", rows_cap * s.ffn * 2, dtype="bf16"))
        launches += [
            LaunchConfig(kernel="deepep_gate_up", grid=expert_tbs, stream=0, params=(
                ("recv_x", "@dp_recv_x"), ("hh", "@dp_hh"), ("tiles", "@dp_tiles"),
                ("info", "@dp_info"), ("wg", "@w_gate"), ("wu", "@w_up"), ("hidden", H),
                ("ffn", s.ffn), ("tile_rows", s.tile_rows), ("n_tile", n),
                ("swizzle", s.swizzle))),
            LaunchConfig(kernel="deepep_down", grid=expert_tbs, stream=0, params=(
                ("hh", "@dp_hh"), ("recv_y", "@dp_recv_y"), ("tiles", "@dp_tiles"),
                ("info", "@dp_info"), ("wd", "@w_down"), ("acct", "@acct"), ("hidden", H),
                ("ffn", s.ffn), ("tile_rows", s.tile_rows), ("n_tile", n),
                ("swizzle", s.swizzle))),
        ]
    shared = 0 if comm_only else s.shared
    launches += [
        LaunchConfig(kernel="deepep_combine", grid=C * P // groups, warp_groups=groups, stream=0,
                     params=(
            ("rec", "@dp_rec"), ("ntf", "@dp_ntf"), ("recv_y", expert_out),
            ("comb", "@dp_comb"), ("scratch", "@dp_combine_scratch"), ("acct", "@acct"),
            ("done", "@done"), ("tokens", T), ("topk", k), ("hidden", H), ("channels", C),
            ("local_experts", El))),
        LaunchConfig(kernel="deepep_reduce", grid=cfg.workload.layer.combine_tbs, stream=0,
                     params=(
            ("out", "@out"), ("ys", "@ys"), ("comb", "@dp_comb"), ("meta", "@dp_meta"),
            ("one", "@one"), ("done", "@done"), ("acct", "@acct"), ("tokens", T), ("hidden", H),
            ("shared", shared), ("shared_tbs", cfg.workload.layer.shared_tbs))),
    ]
    reference = {"combine": "per_rank", "local_experts": El}
    if comm_only:
        sbufs, slaunch = [], []
        reference.update(identity_experts=True, shared_gate=None, shared_up=None,
                         shared_down=None)
    else:
        sbufs, slaunch = shared_expert_launches(s, cfg, stream=1)
    return SchemePlan(
        buffers=tuple(buffers + sbufs), launches=tuple(launches + slaunch),
        kernel_files=(KERNELS,), n_tile=n,
        phases={"mediation": ("deepep_layout", "deepep_notify"),
                "dispatch": ("deepep_dispatch",),
                "expert": () if comm_only else ("deepep_gate_up", "deepep_down") + SHARED_KERNELS,
                "combine": ("deepep_combine", "deepep_reduce")},
        mediation_extra_ps=opts.host_sync_latency + cfg.system.gpu.kernel_launch_latency,
        reference_kwargs=reference,
        checked_accounting=tuple(a for a in ACCT_NAMES if not (comm_only and a == "computed")),
        extra_stats=functools.partial(add_bandwidth_stats, dispatch_bytes=db))


def mediation_and_dispatch(layer, *, comm_sms, ring_rows, rows_cap, tiles_cap, align, host_delay,
                           receivers, dispatch_dtype="bf16", send_chunk=8, channel_blocks=True):
    """The DeepEP mediation and dispatch kernels on stream 0: deepep_layout, deepep_notify (expert
    regions aligned to `align` rows), then deepep_dispatch after `host_delay` (its receiver TBs
    too if `receivers`, otherwise only its C*P senders: scheme overlap drains the rings itself),
    publishing the ring tail every `send_chunk` tokens. Rows travel in `dispatch_dtype` (fp8: the
    bytes of e4m3 elements and their scales, read from dp_x_fp8). Returns (buffers, launches); the
    receive buffer dp_recv_x holds `rows_cap` rows. `channel_blocks`: one thread block per channel
    side with a warp group per peer rank, placed whole on an SM of its own as DeepEP's are; False:
    the same instruction streams (same %tb and %ntb) as one single-stream block each, placed
    wherever a slot is free - for schemes whose persistent GEMM blocks hold a slot on every SM,
    where a whole-SM channel block could never be placed."""
    s, cfg = layer.shape, layer.cfg
    P, T, k, El, H = s.num_gpus, s.tokens, s.top_k, s.local_experts, s.hidden
    if P > 62:
        raise LayerError(f"system.num_gpus: schemes deepep and overlap keep a token's destination "
                         f"ranks in one 64-bit mask word (at most 62 GPUs), found {P}")
    C = max(1, comm_sms // 2)                      # channels
    groups = P if channel_blocks else 1            # warp groups per dispatch thread block
    R = ring_rows
    W = C + El                                     # count row: C channel counts, El expert counts
    G = -(-El // 8)                                # notify TBs: 8 local experts each
    db = dispatch_row_bytes(H, dispatch_dtype)     # bytes of a dispatched row
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
        _buf("dp_ring_x", C * P * R * db, dtype="bf16"),
        _buf("dp_recv_x", rows_cap * db, dtype="bf16"),
    ]
    if dispatch_dtype == "fp8":
        buffers.append(_buf("dp_x_fp8", T * db, dtype="bf16"))   # bytes only (timing mode)
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
        # one block per channel side, one warp group per peer rank (DeepEP intranode.cu: sender
        # and receiver SMs of 768 threads, their warps split evenly over the ranks)
        LaunchConfig(kernel="deepep_dispatch", grid=(2 if receivers else 1) * C * P // groups,
                     warp_groups=groups, stream=0, host_delay=host_delay, params=(
            ("x", "@dp_x_fp8" if dispatch_dtype == "fp8" else "@x"), ("meta", "@dp_meta"),
            ("rank_slots", "@dp_rank_slots"),
            ("ring_x", "@dp_ring_x"), ("ring_ctl", "@dp_ring_ctl"), ("ntf", "@dp_ntf"),
            ("rec", "@dp_rec" if receivers else 0), ("recv_x", "@dp_recv_x"),
            ("cursor", "@dp_cursor"), ("acct", "@acct"), ("tokens", T), ("topk", k),
            ("row_bytes", db), ("channels", C), ("ring_rows", R), ("send_chunk", send_chunk),
            ("local_experts", El))),
    ]
    return buffers, launches


def add_bandwidth_stats(sim, layer, dispatch_bytes):
    """DeepEP's bandwidth figures (moehub_arch/workloads/bandwidth.py): bytes each rank receives
    in dispatch (deduplicated token rows, its own included, `dispatch_bytes` each) and sends back
    in combine (the same rows in bf16), over each rank's kernel time, averaged over ranks."""
    s = layer.shape
    rows = tokens_received_per_rank(layer.routing.topk_idx, s.local_experts)
    st, out = sim.state, sim.stats

    def ticks(kernel):
        per_gpu = np.zeros(s.num_gpus, dtype=np.int64)
        for li in sim.launches:
            if li.kernel == kernel:
                per_gpu[li.gpu] += int(st.ln[li.index].end) - int(st.ln[li.index].start)
        return per_gpu

    t_dispatch, t_combine, t_reduce = (ticks(f"deepep_{n}") for n in ("dispatch", "combine",
                                                                       "reduce"))
    recv, back = rows * dispatch_bytes, rows * s.row_bytes
    out.add("system.moe.deepep.dispatch_recv_bytes", float(recv.mean()), "B",
            "bytes of token rows a rank receives in dispatch (one row per token and rank holding "
            "any of its experts, own tokens included; dispatch dtype), mean over ranks")
    out.add("system.moe.deepep.dispatch_GBps", mean_rank_bandwidth_GBps(recv, t_dispatch), "GB/s",
            "DeepEP dispatch bandwidth: bytes received / deepep_dispatch kernel time, mean over "
            "ranks")
    out.add("system.moe.deepep.combine_send_bytes", float(back.mean()), "B",
            "bytes of bf16 rows a rank sends back in combine (the rows it received), mean over "
            "ranks")
    out.add("system.moe.deepep.combine_GBps", mean_rank_bandwidth_GBps(back, t_combine), "GB/s",
            "DeepEP combine bandwidth: bytes sent back / deepep_combine kernel time, mean over "
            "ranks")
    out.add("system.moe.deepep.combine_reduce_GBps",
            mean_rank_bandwidth_GBps(back, t_combine + t_reduce), "GB/s",
            "the same over deepep_combine + deepep_reduce kernel time (DeepEP's combine kernel "
            "also does the home reduction, a separate kernel here)")
