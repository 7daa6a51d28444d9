"""Scheme `deepep_ll`: DeepEP's low-latency kernels (github.com/deepseek-ai/DeepEP
csrc/kernels/internode_ll.cu; its benchmark tests/test_low_latency.py). Kernels and buffer
layouts: workloads/kernels/deepep/low_latency.s.

No mediation: every (local expert, source rank) pair owns a fixed region of T receive slots, so
dispatch needs no count exchange and no host round trip; a token row goes once per top-k expert
(no per-rank deduplication) as one RDMA write, and each source sends its per-expert counts after
its rows. Receivers pack the rows expert-major for the grouped GEMM (moe_common.s); combine sends
every output row back into the slot it came from, and the home GPU sums the k rows of a token
with its router weights in slot order (the reference's per-slot combine).

Transport per peer, as DeepEP's kernels choose it since PR #173 (allow_nvlink_for_low_latency_mode,
the default since commit aae9fa9; internode_ll.cu: nvshmemi_get_p2p_ptr): a row for a GPU of the
sender's node is a warp copy over NVLink (`put.sm`: the SM's load/store unit carries it), a row
for a GPU of another node an IBGDA RDMA write (`put`: the NIC's DMA). The published figures were
measured so: EP 8 on one 8-GPU node, EP 16 on two (configs/validation/h800_deepep_ll.yaml,
docs/internode_validation.md); DeepEP's first "pure RDMA" setting is a system of one-GPU nodes.

What differs from DeepEP: a row's slot (not its token id in a 16 B header) identifies it on the
way back - the sender remembers the slot each (token, slot j) took - so a message is the row
alone; the home GPU waits for every GPU's combine to finish (done flags) rather than polling one
flag per expert; `kernels: communication` skips the GEMMs (identity experts), as DeepEP's
benchmark times dispatch and combine alone.

Extra stats: system.moe.deepep_ll.dispatch_us (the dispatch kernel, mean over ranks) and
combine_us (combine + home reduction: DeepEP's combine kernel does both).
"""
import functools

from ...config.schema import LaunchConfig
from ..bandwidth import dispatch_row_bytes
from ..layer_stats import kernel_ticks_per_gpu, kernels_finished
from ..layer import (ACCT_NAMES, GROUPED_KERNELS, SHARED_KERNELS, LayerError, SchemePlan, _buf,
                     grouped_gemm_launches)
from .deepep import node_gpus, shared_experts_or_identity

KERNELS = "workloads/kernels/deepep/low_latency.s"
# DeepEP's README: the normal kernels serve "both training and inference prefilling", the
# low-latency kernels "latency-sensitive inference decoding"; its training integrations
# (Megatron-Core's fused_a2a.py) wrap the normal Buffer.dispatch / combine in autograd only
LL_NO_BACKWARD = ("DeepEP's low-latency kernels are its inference-decoding kernels (DeepEP's "
                  "README; the training integrations such as Megatron-Core's fused_a2a.py run "
                  "the normal kernels' backward): train with scheme deepep")


def plan(layer):
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.deepep_ll
    P, T, k, El, H, rb = s.num_gpus, s.tokens, s.top_k, s.local_experts, s.hidden, s.row_bytes
    if k > 8:
        raise LayerError(f"workload.layer.model: scheme deepep_ll walks a token's top-k ids in one "
                         f"8-word load (top-k <= 8), found top-k {k}")
    comm_only = opts.kernels == "communication"
    db = dispatch_row_bytes(H, opts.dispatch_dtype)
    buffers = slot_buffers("ll", s, db)
    if opts.dispatch_dtype == "fp8":
        buffers.append(_buf("ll_x_fp8", T * db, dtype="bf16"))   # bytes only (timing mode)
    # combine's expert outputs: the GEMM's; the packed rows themselves with identity experts
    # (bf16), or a bf16 buffer of the right size (fp8 rows, timing only)
    if not comm_only or opts.dispatch_dtype == "fp8":
        buffers.append(_buf("ll_ye", El * P * T * rb, dtype="bf16"))
        ye = "@ll_ye"
    else:
        ye = "@ll_xe"
    dispatch = LaunchConfig(
        kernel="deepep_ll_dispatch", grid=opts.send_tbs + El * P, stream=0, params=(
            ("x", "@ll_x_fp8" if opts.dispatch_dtype == "fp8" else "@x"),
            ("topk_idx", "@topk_idx"), ("recv", "@ll_recv"), ("slot_map", "@ll_slot"),
            ("next", "@ll_next"), ("sent", "@ll_sent"), ("count", "@ll_count"),
            ("xe", "@ll_xe"), ("rows", "@ll_rows"), ("range", "@ll_range"), ("acct", "@acct"),
            ("tokens", T), ("topk", k), ("row_bytes", db), ("local_experts", El),
            ("send_tbs", opts.send_tbs), ("node_gpus", node_gpus(cfg))))
    combine = [
        LaunchConfig(kernel="deepep_ll_combine", grid=El * P, stream=0, params=(
            ("ye", ye), ("range", "@ll_range"), ("comb", "@ll_comb"), ("acct", "@acct"),
            ("done", "@done"), ("tokens", T), ("hidden", H), ("local_experts", El),
            ("node_gpus", node_gpus(cfg)))),
        LaunchConfig(kernel="deepep_ll_reduce", grid=cfg.workload.layer.combine_tbs, stream=0,
                     params=(
            ("out", "@out"), ("comb", "@ll_comb"), ("ys", "@ys"), ("topk_idx", "@topk_idx"),
            ("topk_w", "@topk_w"), ("slot_map", "@ll_slot"), ("one", "@one"), ("done", "@done"),
            ("acct", "@acct"), ("tokens", T), ("topk", k), ("hidden", H),
            ("shared", 0 if comm_only else s.shared),
            ("shared_tbs", cfg.workload.layer.shared_tbs))),
    ]
    # DeepEP's low-latency figures (tests/test_low_latency.py times each kernel)
    stats = (("system.moe.deepep_ll.dispatch_us",
              "DeepEP low-latency dispatch kernel time (send, counts, receive and pack), mean "
              "over ranks"),
             ("system.moe.deepep_ll.combine_us",
              "DeepEP low-latency combine time: the send-back kernel + the home weighted "
              "reduction (DeepEP's combine kernel does both), mean over ranks"))
    return slot_plan(layer, "ll", KERNELS, comm_only, buffers, dispatch, combine, stats,
                     backward_why=LL_NO_BACKWARD)


def slot_buffers(prefix, s, db, extra=()):
    """The fixed-slot all-to-all's buffers (workloads/kernels/lib/slot_alltoall.s), named
    `prefix`_*, for rows of `db` bytes; `extra` (a scheme's own) go after the count words."""
    P, T, k, E, El, rb = s.num_gpus, s.tokens, s.top_k, s.experts, s.local_experts, s.row_bytes
    cap = P * T                                    # packed rows per local expert, worst case
    return [
        _buf(f"{prefix}_recv", El * P * T * db, dtype="bf16"),
        _buf(f"{prefix}_slot", T * k * 8, region="control", dtype="i64"),
        _buf(f"{prefix}_next", E * 8, region="control", dtype="i64"),
        _buf(f"{prefix}_sent", 8, region="control", dtype="i64"),
        _buf(f"{prefix}_count", El * P * 8, region="control", dtype="i64"),
        *extra,
        _buf(f"{prefix}_xe", El * cap * db, dtype="bf16"),
        _buf(f"{prefix}_rows", El * 8, region="control", dtype="i64"),
        _buf(f"{prefix}_range", El * P * 8, region="control", dtype="i64"),
        _buf(f"{prefix}_comb", E * T * rb, dtype="bf16"),
    ]


def slot_plan(layer, prefix, kernels, comm_only, buffers, dispatch, combine, stats,
              backward_why=""):
    """The plan of a fixed-slot all-to-all layer (deepep_ll, counted): the `dispatch` launch, the
    grouped GEMM on the packed rows (unless `comm_only`: identity experts), the `combine` launches
    (send-back, home reduction), the shared experts; `stats`: the names and descriptions of the
    dispatch and combine times it reports; `backward_why`: why it has no backward pass."""
    s, cfg = layer.shape, layer.cfg
    launches = [dispatch]
    gemm = ()
    if not comm_only:
        gbufs, glaunch = grouped_gemm_launches(s, 0, cfg.system.gpu.num_sms, f"{prefix}_rows",
                                               f"{prefix}_xe", f"{prefix}_ye",
                                               s.num_gpus * s.tokens)
        buffers = buffers + gbufs
        launches += glaunch
        gemm = GROUPED_KERNELS
    launches += combine
    reference = {}
    sbufs, slaunch = shared_experts_or_identity(layer, comm_only, reference)
    names = tuple(c.kernel for c in combine)
    return SchemePlan(
        buffers=tuple(buffers + sbufs), launches=tuple(launches + slaunch),
        kernel_files=(kernels,), n_tile=s.n_tile, backward_why=backward_why,
        phases={"mediation": (),
                "dispatch": (dispatch.kernel,),
                "expert": () if comm_only else gemm + SHARED_KERNELS,
                "combine": names},
        reference_kwargs=reference,
        checked_accounting=tuple(a for a in ACCT_NAMES if not (comm_only and a == "computed")),
        extra_stats=functools.partial(add_kernel_stats, kernels=((dispatch.kernel,), names),
                                      stats=stats))


def add_kernel_stats(sim, layer, kernels, stats):
    """The dispatch kernel and the combine (send-back + home reduction) per rank, mean over
    ranks, in us: `stats` names and describes them, `kernels` are theirs."""
    # a run stopped by a limit reports the figures whose kernels finished on every rank
    for names, (stat, desc) in zip(kernels, stats):
        if kernels_finished(sim, names):
            sim.stats.add(stat, float(kernel_ticks_per_gpu(sim, names).mean()) / 1e6, "us", desc)
