"""Scheme `counted`: a one-sided all-to-all on Blackwell's counted writes (NVSHMEM counted puts /
NCCL's Compute Fabric Transport on SM100; components/counted_write.py). Kernels and buffer layouts:
workloads/kernels/counted/counted.s.

The baseline current one-sided NVLink all-to-all kernels give on such hardware (FlashInfer's
one-sided all-to-all waits on these byte counters): addresses are still computed in software -
every (local expert, source rank) pair owns a fixed region of T receive slots, a sender takes the
next slot of a row's expert itself, with no count exchange and no host round trip (as DeepEP's
low-latency kernels, scheme `deepep_ll`) - but completion is counted by the fabric: every row is a
put.counted into the (expert, source) pair's byte counter at the destination, so a sender signals
its counts right after its rows without a fence (the round trip of every write response), and the
receiver waits for count x row bytes. Combine returns each expert output row with a put.counted
into one counter at home: every (token, slot) pair comes back as exactly one row, so the home
waits for T x k rows' bytes, where `deepep_ll` waits for one done flag per GPU raised after a
fence.

What it is not: the hub does not choose addresses (MoE-Hub's AAU), coalesce (its RPM) or launch
consumers (its DAM); the receiver still packs rows for the grouped GEMM, and a receive buffer
sized for the worst case (P x T rows per local expert) is still allocated. Rows are BF16.
Counted writes travel over NVLink only: the scheme runs within one node (an input error
otherwise).

Extra stats: system.moe.counted.dispatch_us (the dispatch kernel, mean over ranks) and
combine_us (combine + home reduction).
"""
from ...config.schema import LaunchConfig
from ..layer import LayerError, _buf
from .deepep_ll import slot_buffers, slot_plan

KERNELS = "workloads/kernels/counted/counted.s"


def plan(layer):
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.counted
    P, T, k, El, H, rb = s.num_gpus, s.tokens, s.top_k, s.local_experts, s.hidden, s.row_bytes
    if k > 8:
        raise LayerError(f"workload.layer.model: scheme counted walks a token's top-k ids in one "
                         f"8-word load (top-k <= 8), found top-k {k}")
    if cfg.system.nodes.count > 1:
        raise LayerError(f"scheme: counted writes are an NVLink feature (components/"
                         f"counted_write.py); this system has {cfg.system.nodes.count} nodes - "
                         f"run scheme counted inside one NVLink domain")
    comm_only = opts.kernels == "communication"
    buffers = slot_buffers("cw", s, rb, extra=(
        _buf("cw_rx", El * P * 8, region="control", dtype="i64"),
        _buf("cw_back", 8, region="control", dtype="i64")))
    if not comm_only:
        buffers.append(_buf("cw_ye", El * P * T * rb, dtype="bf16"))
        ye = "@cw_ye"
    else:
        ye = "@cw_xe"    # identity experts: the packed rows go back as they came
    dispatch = LaunchConfig(
        kernel="counted_dispatch", grid=opts.send_tbs + El * P, stream=0, params=(
            ("x", "@x"), ("topk_idx", "@topk_idx"), ("recv", "@cw_recv"),
            ("slot_map", "@cw_slot"), ("next", "@cw_next"), ("sent", "@cw_sent"),
            ("count", "@cw_count"), ("rx", "@cw_rx"), ("xe", "@cw_xe"), ("rows", "@cw_rows"),
            ("range", "@cw_range"), ("acct", "@acct"), ("tokens", T), ("topk", k),
            ("row_bytes", rb), ("local_experts", El), ("send_tbs", opts.send_tbs)))
    combine = [
        LaunchConfig(kernel="counted_combine", grid=El * P, stream=0, params=(
            ("ye", ye), ("range", "@cw_range"), ("comb", "@cw_comb"), ("back", "@cw_back"),
            ("tokens", T), ("hidden", H), ("local_experts", El))),
        LaunchConfig(kernel="counted_reduce", grid=cfg.workload.layer.combine_tbs, stream=0,
                     params=(
            ("out", "@out"), ("comb", "@cw_comb"), ("ys", "@ys"), ("topk_idx", "@topk_idx"),
            ("topk_w", "@topk_w"), ("slot_map", "@cw_slot"), ("one", "@one"),
            ("back", "@cw_back"), ("acct", "@acct"), ("tokens", T), ("topk", k), ("hidden", H),
            ("shared", 0 if comm_only else s.shared),
            ("shared_tbs", cfg.workload.layer.shared_tbs))),
    ]
    stats = (("system.moe.counted.dispatch_us",
              "counted-write dispatch kernel time (send, counts, receive and pack), mean over "
              "ranks"),
             ("system.moe.counted.combine_us",
              "counted-write combine time: the send-back kernel + the home weighted reduction, "
              "mean over ranks"))
    return slot_plan(layer, "cw", KERNELS, comm_only, buffers, dispatch, combine, stats)
