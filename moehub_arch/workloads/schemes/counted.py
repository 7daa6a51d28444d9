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
import attrs
import numpy as np

from ...config.schema import LaunchConfig
from ..alltoall import KERNELS as A2A_KERNELS, flag_set_launch, i64_preset
from ..layer import LayerError, _buf
from ..layer_backward import (KERNELS as BACKWARD_KERNELS, backward_buffers, combine_bwd_launch,
                              expert_bwd_launches, shared_bwd)
from .deepep_ll import slot_buffers, slot_plan

KERNELS = "workloads/kernels/counted/counted.s"
BACKWARD = "workloads/kernels/counted/backward.s"


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
    why = ("workload.layer.counted.kernels: communication runs identity experts (no GEMM to "
           "differentiate; use kernels: full)") if comm_only else ""
    plan = slot_plan(layer, "cw", KERNELS, comm_only, buffers, dispatch, combine, stats,
                     backward_why=why)
    if cfg.workload.layer.passes != "training" or comm_only:
        return plan
    return _with_backward(layer, plan, combine)


def _with_backward(layer, plan, combine):
    """The backward after the forward, on stream 0 (workloads/kernels/counted/backward.s): the
    forward's slots (cw_slot) and packed ranges (cw_range) are the handle - no slot taken and no
    count sent again; the gradient rows travel as counted writes both ways."""
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.counted
    P, T, k, El, E, H, rb = (s.num_gpus, s.tokens, s.top_k, s.local_experts, s.experts,
                             s.hidden, s.row_bytes)
    cap = P * T
    buffers = backward_buffers(s, cap, _buf) + [
        _buf("cw_bbases", El * 8, region="control", dtype="i64"),
        _buf("cw_bmap", s.pairs * 8, region="control", dtype="i64"),
        _buf("cw_bw", s.pairs * 4, region="control", dtype="f32"),
        _buf("cw_brx", El * P * 8, region="control", dtype="i64"),
        _buf("cw_bback", 8, region="control", dtype="i64"),
        _buf("cw_bacct", 8 * 8, region="control", dtype="i64"),
        _buf("cw_dsend", s.pairs * rb, dtype="bf16"),
        _buf("cw_bcomb", E * T * rb, dtype="bf16"),
        _buf("cw_bdx", T * H * 4, dtype="f32"),
    ]
    presets = {"cw_bbases": i64_preset(np.tile(np.arange(El, dtype=np.int64) * cap, (P, 1))),
               "cw_bmap": i64_preset(np.tile(np.arange(s.pairs, dtype=np.int64), (P, 1))),
               "cw_bw": np.ones((P, s.pairs), np.float32).view(np.uint8)}
    sbufs, shared = shared_bwd(s, cfg, 0, _buf, done_flag=False)
    buffers += sbufs
    send_back, reduce = combine
    out = [
        (LaunchConfig(kernel="counted_bwd_yhome", grid=cfg.workload.layer.combine_tbs, stream=0,
                      params=(("comb", "@cw_comb"), ("slot_map", "@cw_slot"),
                              ("topk_idx", "@topk_idx"), ("x", "@x"), ("yhome", "@yhome"),
                              ("tokens", T),
                              ("topk", k), ("hidden", H))), "backward_dispatch"),
        (combine_bwd_launch(s, cfg, 0, "@cw_bmap", "@cw_dsend"), "backward_dispatch"),
    ] + list(shared) + [
        # the gradient reduction waits for word 5 of its acct: the shared experts' dX
        (flag_set_launch(0, "@cw_bacct + 40", 1), "backward_expert"),
        (LaunchConfig(kernel="counted_bwd_dispatch", grid=opts.send_tbs + El * P, stream=0,
                      params=(("dsend", "@cw_dsend"), ("topk_idx", "@topk_idx"), ("x", "@x"),
                              ("slot_map", "@cw_slot"), ("recv", "@cw_recv"),
                              ("brx", "@cw_brx"), ("range", "@cw_range"), ("dye", "@b_dye"),
                              ("tokens", T), ("topk", k), ("hidden", H), ("local_experts", El),
                              ("send_tbs", opts.send_tbs))), "backward_dispatch"),
    ] + [(launch, "backward_expert") for launch in expert_bwd_launches(
        s, 0, cfg.system.gpu.num_sms, "cw_rows", "cw_xe", "he", cap, "cw_bbases")] + [
        (attrs.evolve(send_back, params=_replace(send_back.params, ye="@b_dxe",
                                                 comb="@cw_bcomb", back="@cw_bback")),
         "backward_combine"),
        (attrs.evolve(reduce, params=_replace(
            reduce.params, out="@cw_bdx", comb="@cw_bcomb", ys="@b_dxs", topk_w="@cw_bw",
            back="@cw_bback", acct="@cw_bacct", shared_tbs=1)), "backward_combine"),
    ]
    phases = dict(plan.phases)
    by_kernel = {name: phase for phase, names in phases.items() for name in names}
    launch_phases = [by_kernel.get(l.kernel, "") for l in plan.launches] \
        + [phase for _, phase in out]

    def row_order(sim):
        """{expert: (flat tokens, slots)} in the packed order: (le, s) ranges by position, each
        range's slots in order; slot i of (le, s) is the pair of source s that took it."""
        owner = {}
        for src in range(P):
            slots = sim.read_buffer(src, "cw_slot", "i64")[:s.pairs]
            idx = layer.routing.topk_idx[src].reshape(-1)
            for pair in range(s.pairs):
                owner[(int(idx[pair]), src, int(slots[pair]))] = (src * T + pair // k, pair % k)
        order = {}
        for g in range(P):
            ranges = sim.read_buffer(g, "cw_range", "i64")[:El * P].reshape(El, P)
            for le in range(El):
                e = g * El + le
                tokens, slot_js = order.setdefault(e, ([], []))
                for src in sorted(range(P), key=lambda q: int(ranges[le, q]) >> 32):
                    for i in range(int(ranges[le, src]) & 0xffffffff):
                        t_, j_ = owner[(e, src, i)]
                        tokens.append(t_)
                        slot_js.append(j_)
        return order

    return attrs.evolve(
        plan, buffers=plan.buffers + tuple(buffers),
        launches=plan.launches + tuple(launch for launch, _ in out),
        launch_phases=tuple(launch_phases),
        kernel_files=plan.kernel_files + (A2A_KERNELS, BACKWARD) + BACKWARD_KERNELS,
        presets={**plan.presets, **presets}, backward=True, backward_row_order=row_order,
        backward_dx_f32="cw_bdx", backward_acct=(("cw_bacct", 3, 2),))


def _replace(params, **new):
    """A launch's (name, value) parameters with some values replaced."""
    return tuple((name, new.get(name, value)) for name, value in params)
