"""The backward pass of scheme `deepep` (workload.layer.passes: training), as DeepEP's autograd
runs it (github.com/deepseek-ai/DeepEP; Megatron-Core's fused_a2a.py wraps Buffer.dispatch and
Buffer.combine in autograd functions whose backward calls the other one with the forward's
handle): the combine's backward is a *cached dispatch* of the output gradient dy, the dispatch's
backward a *combine* of the input gradients. Kernels: workloads/kernels/deepep/backward.s (the
cached dispatch, the expert-side weighting, the tile table), deepep.s (cached notify, combine)
and the shared grouped backward kernels (workloads/kernels/common/moe_backward.s).

What differs from the forward, per design:
- no layout, no notify, no host round trip: the handle (the forward's records dp_rec, send
  positions dp_send_head, counts dp_ntf and the GEMM tile table) is reused; the mediation phase
  is gone. A cached_notify (barrier, clean the ring control words, barrier) opens each of the two
  transfers, as DeepEP's cached_notify_dispatch / cached_notify_combine do;
- the gradient dispatch moves dy once per (token, destination GPU) through the forward's rings,
  bytes as the forward's x; the receivers put each row at the positions the forward's receivers
  took for x (the handle), so dO lands row for row where X lies and the wgrad pairs them;
- the router weights are applied on the expert side (Megatron-Core's unpermute with the
  probabilities: its backward scales the gradient and dots it with the kept expert output):
  dO = bf16(w dy) in place and dw = <dy, y_j> there; dw goes home (4 bytes a pair, which DeepEP's
  combine carries as the topk_weights gradient);
- the gradient combine is the forward's combine kernel with weights 1.0: per received token the
  unweighted fp32 sum of its local slots' dX rows, one bf16 row per (token, rank) home, the home
  receivers adding the shared experts' dX first and the ranks ascending (the reference's
  combine="per_rank"); its output is fp32 as the forward's, dx its bf16 rounding.
The shared experts' backward runs first on stream 0 (no communication). Intranode only, with
home_reduce: receivers and the experts computed (kernels: full); other settings give a clear
error naming the key.
"""
import numpy as np

from ..config.schema import LaunchConfig
from .alltoall import i64_preset
from .layer import _buf
from .layer_backward import (KERNELS as BACKWARD_KERNELS, backward_buffers,
                             expert_bwd_kernels, shared_bwd)

KERNELS = "workloads/kernels/deepep/backward.s"
BACKWARD_ACCT_WORDS = 8         # the gradient combine's acct (deepep_combine: word 3 pairs)


def backward_refusal(cfg, *, comm_only, forward_internode):
    """Why this deepep configuration has no backward ('' when it has one)."""
    opts = cfg.workload.layer.deepep
    if comm_only:
        return ("workload.layer.deepep.kernels: communication runs no experts (DeepEP's benchmark "
                "setting); the backward needs them: kernels: full")
    if forward_internode:
        return ("the internode kernels (workload.layer.deepep.internode: forward on a multi-node "
                "system) have no backward here; internode: direct has")
    if opts.home_reduce != "receivers":
        return ("workload.layer.deepep.home_reduce: kernel (the first model) has no backward; "
                "home_reduce: receivers (DeepEP's) has")
    return ""


def backward_plan(layer, *, counts, rows_cap, tiles_cap, C, groups, dispatch_smem, combine_smem,
                  combine_ctl_bytes, combine_chunk, epoch):
    """(buffers, [(launch, phase)], presets, row_order) of the backward on stream 0. `counts`
    [P][El] rows per local expert (what the host learned in the forward's notify), the forward's
    receive capacity and tile count, channels `C`, warp groups per block `groups`, the forward
    kernels' dynamic shared memory and ring settings, and the forward's last barrier epoch."""
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.deepep
    P, T, k, El, H = s.num_gpus, s.tokens, s.top_k, s.local_experts, s.hidden
    rb = s.row_bytes
    Tc = -(-T // C)
    bases = np.concatenate([np.zeros((P, 1), np.int64), np.cumsum(counts, axis=1)[:, :-1]],
                           axis=1)
    buffers = backward_buffers(s, 1, _buf, rows=rows_cap, tiles=tiles_cap) + [
        _buf("dp_bcounts", El * 8, region="control", dtype="i64"),
        _buf("dp_bbases", El * 8, region="control", dtype="i64"),
        _buf("dp_brec", C * P * Tc * 96, region="control", dtype="i64"),
        _buf("dp_bdw", C * P * Tc * k * 4, dtype="f32"),
        _buf("dp_bdx", T * H * 4, dtype="f32"),
        _buf("dp_bacct", BACKWARD_ACCT_WORDS * 8, region="control", dtype="i64"),
    ]
    presets = {"dp_bcounts": i64_preset(counts), "dp_bbases": i64_preset(bases)}
    sbufs, shared = shared_bwd(s, cfg, 0, _buf, done_flag=False)
    buffers += sbufs
    out = list(shared)
    send_chunk = opts.send_chunk_tokens
    out += [
        (LaunchConfig(kernel="deepep_cached_notify", grid=1, stream=0, params=(
            ("bar", "@dp_bar"), ("ctl", "@dp_ring_ctl"), ("ctl_bytes", 2 * C * P * 8),
            ("epoch", epoch + 1))), "backward_dispatch"),
        (LaunchConfig(kernel="deepep_dispatch_cached", grid=2 * C * P // P, warp_groups=P,
                      dynamic_smem=dispatch_smem, stream=0, params=(
            ("x", "@dy"), ("meta", "@dp_meta"), ("rank_slots", "@dp_rank_slots"),
            ("ring_x", "@dp_ring_x"), ("ring_ctl", "@dp_ring_ctl"), ("ntf", "@dp_ntf"),
            ("rec", "@dp_rec"), ("recv_x", "@b_dye"), ("acct", "@bacct"),
            ("send_head", "@dp_send_head"), ("tokens", T), ("topk", k), ("row_bytes", rb),
            ("channels", C), ("ring_rows", opts.ring_rows), ("send_chunk", send_chunk),
            ("local_experts", El))), "backward_dispatch"),
        # an elementwise kernel over the received rows on every SM (as Megatron-Core's
        # unpermute, whose backward this is)
        (LaunchConfig(kernel="deepep_bwd_weight", grid=2 * cfg.system.gpu.num_sms, stream=0,
                      params=(
            ("rec", "@dp_rec"), ("ntf", "@dp_ntf"), ("dye", "@b_dye"), ("ye", "@dp_recv_y"),
            ("brec", "@dp_brec"), ("bdw", "@dp_bdw"), ("dw", "@dw"),
            ("tokens", T), ("topk", k), ("hidden", H), ("channels", C),
            ("local_experts", El))), "backward_dispatch"),
        (LaunchConfig(kernel="deepep_bwd_tiles", grid=1, stream=0, params=(
            ("tiles", "@dp_tiles"), ("info", "@dp_info"), ("table", "@b_table"),
            ("xe", "@dp_recv_x"), ("dg", "@b_dg"), ("dye", "@b_dye"), ("hidden", H),
            ("ffn", s.ffn))), "backward_expert"),
    ]
    out += [(launch, "backward_expert") for launch in expert_bwd_kernels(
        s, 0, cfg.system.gpu.num_sms, "dp_bcounts", "dp_bbases", "dp_recv_x", "dp_hh")]
    out += [
        (LaunchConfig(kernel="deepep_cached_notify", grid=1, stream=0, params=(
            ("bar", "@dp_bar"), ("ctl", "@dp_cring_ctl"), ("ctl_bytes", combine_ctl_bytes),
            ("epoch", epoch + 2))), "backward_combine"),
        (LaunchConfig(
            kernel="deepep_combine", grid=2 * C * P // groups, warp_groups=groups, stream=0,
            dynamic_smem=combine_smem, kernel_threads="declared" if groups == P else "none",
            params=(
                ("rec", "@dp_brec"), ("ntf", "@dp_ntf"), ("recv_y", "@b_dxe"),
                ("scratch", "@dp_combine_scratch"), ("cring_x", "@dp_cring_x"),
                ("cring_ctl", "@dp_cring_ctl"), ("send_head", "@dp_send_head"),
                ("out", "@dp_bdx"), ("ys", "@b_dxs"), ("one", "@one"), ("acct", "@dp_bacct"),
                ("tokens", T), ("topk", k), ("hidden", H), ("channels", C),
                ("local_experts", El), ("ring_rows", opts.ring_rows),
                ("send_chunk", combine_chunk), ("shared", s.shared),
                # the shared experts' backward ran before on this stream: nothing to wait for
                ("shared_tbs", 0), ("head_poll", int(opts.head_poll == "remote")),
                ("bench_rows", 0))), "backward_combine"),
    ]

    def row_order(sim):
        """{expert: (flat tokens, slots)} in the packed receive buffer's order: the positions
        the forward's receivers recorded (dp_rec)."""
        rows = {}
        for g in range(P):
            ntf = sim.read_buffer(g, "dp_ntf", "i64")[:P * (C + El)].reshape(P, C + El)
            rec = sim.read_buffer(g, "dp_rec", "i64")[:C * P * Tc * 12].reshape(C, P, Tc, 12)
            for c in range(C):
                for src in range(P):
                    for i in range(int(ntf[src, c])):
                        for j in range(k):
                            word = int(rec[c, src, i, j])
                            if word & 0xffffffff:
                                rows[(g, (word & 0xffffffff) - 1)] = (src * T + (word >> 32), j)
        order = {}
        for (g, pos) in sorted(rows):
            tok, slot = rows[(g, pos)]
            e = int(layer.routing.topk_idx.reshape(P * T, k)[tok, slot])
            t_, s_ = order.setdefault(e, ([], []))
            t_.append(tok)
            s_.append(slot)
        return order

    return buffers, out, presets, row_order


def backward_kernel_files():
    """The kernel files the backward adds to the forward's."""
    return (KERNELS,) + BACKWARD_KERNELS
