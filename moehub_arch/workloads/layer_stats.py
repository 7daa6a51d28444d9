"""Results of one MoE layer run, as stats under `system.moe.*`.

Where the time goes:
  layer_time_us            first kernel start to last kernel end (any GPU)
  phase.<name>_us          per phase (the scheme maps its kernels to mediation, dispatch, expert,
                           combine): from the phase's first kernel start to its last kernel end on
                           each GPU, averaged over GPUs; mediation includes the host round trip
  kernel.<name>_us         each kernel's duration averaged over GPUs
  ideal_compute_us         the busiest GPU's tensor + vector work spread evenly over its SMs
  overhead_us              layer time minus ideal compute: communication, mediation and load
                           imbalance that compute did not hide (the "exposed" time)
  ideal_layer_us           the same for every scheme (from the shape and routing alone): per GPU,
                           max(expert GEMM FLOPs at the tensor peak, expert weights at HBM
                           bandwidth), busiest GPU; ideal_layer_fraction = ideal / layer time (the
                           MoE-Hub paper, arXiv 2605.05888, reports 96.8% of such an ideal layer)
SM time (fractions of SMs x layer time, averaged over GPUs):
  sm.computing             tensor or vector unit busy
  sm.communicating         comm unit busy (put/get/send issue) plus LSU (copies)
  sm.waiting               resident thread-block time spent waiting (flags, fences, hub, claims),
                           divided by the TB slots per SM
  sm.idle                  no thread block resident
Links: nvlink.tx_utilization_mean / _max over every GPU's link transmitters within the layer.
"""
import numpy as np

from ..engine.state import NUM_WAIT_REASONS
from ..isa.encoding import UNIT_COMM, UNIT_LSU, UNIT_TENSOR, UNIT_VECTOR


def add_layer_stats(sim, layer):
    st, out = sim.state, sim.stats
    launches = sim.launches
    P = layer.shape.num_gpus
    S = int(st.p[0].sms_per_gpu)
    slots = int(st.p[0].slots_per_sm)
    starts = np.array([int(st.ln[l.index].start) for l in launches])
    ends = np.array([int(st.ln[l.index].end) for l in launches])
    t0, t1 = int(starts.min()), int(ends.max())
    span = max(t1 - t0, 1)
    out.add("system.moe.layer_time_us", span * 1e-6, "us",
            "MoE layer: first kernel start to last kernel end over all GPUs")

    kernels = sorted({l.kernel for l in launches}, key=lambda k: min(
        starts[i] for i, l in enumerate(launches) if l.kernel == k))
    for k in kernels:
        d = [ends[i] - starts[i] for i, l in enumerate(launches) if l.kernel == k]
        out.add(f"system.moe.kernel.{k}_us", float(np.mean(d)) * 1e-6, "us",
                f"duration of kernel '{k}', mean over GPUs (and over its launches, if several)")

    for phase, names in layer.plan.phases.items():
        per_gpu = []
        by_launch = layer.plan.launch_phases
        for g in range(P):
            if by_launch:
                idx = [i for i, l in enumerate(launches)
                       if l.gpu == g and by_launch[l.config_index] == phase]
            else:
                idx = [i for i, l in enumerate(launches) if l.gpu == g and l.kernel in names]
            if not idx:
                continue
            lo = min(starts[i] for i in idx)
            hi = max(ends[i] for i in idx)
            per_gpu.append(hi - lo)
        t = float(np.mean(per_gpu)) if per_gpu else 0.0
        if phase == "mediation":
            t += layer.plan.mediation_extra_ps
        out.add(f"system.moe.phase.{phase}_us", t * 1e-6, "us",
                f"time in {phase} ({', '.join(names) or 'no kernel'}), mean over GPUs"
                + ("; includes the host round trip" if phase == "mediation" else ""))

    busy = st.sm_unit_busy.reshape(P, S, -1)
    compute = busy[:, :, UNIT_TENSOR] + busy[:, :, UNIT_VECTOR]
    comm = busy[:, :, UNIT_COMM] + busy[:, :, UNIT_LSU]
    waits = st.sm_wait.reshape(P, S, NUM_WAIT_REASONS).sum(axis=2)
    active = st.sm.active_ticks.reshape(P, S)
    denom = S * span
    out.add("system.moe.sm.computing", float(compute.sum(axis=1).mean()) / denom, "ratio",
            "fraction of SM time a tensor or vector unit was busy")
    out.add("system.moe.sm.communicating", float(comm.sum(axis=1).mean()) / denom, "ratio",
            "fraction of SM time the comm or load/store unit was busy (sends, copies)")
    out.add("system.moe.sm.waiting", float(waits.sum(axis=1).mean()) / (denom * slots), "ratio",
            "thread-block time spent waiting (flags, fences, hub room, claims) / TB slots")
    out.add("system.moe.sm.idle", 1.0 - float(active.sum(axis=1).mean()) / denom, "ratio",
            "fraction of SM time with no thread block resident")
    ideal = float(compute.sum(axis=1).max()) / S
    out.add("system.moe.ideal_compute_us", ideal * 1e-6, "us",
            "the busiest GPU's tensor + vector work spread evenly over its SMs")
    out.add("system.moe.overhead_us", (span - ideal) * 1e-6, "us",
            "layer time minus ideal compute: communication, mediation and imbalance not hidden")
    ideal_layer = ideal_layer_ps(sim.cfg, layer)
    out.add("system.moe.ideal_layer_us", ideal_layer * 1e-6, "us",
            "an ideal MoE layer on the busiest GPU: its expert GEMM FLOPs (routed rows it "
            "receives + shared experts) at the tensor peak, or its expert weights read once at "
            "HBM bandwidth if that is longer; no communication, mediation or padding")
    out.add("system.moe.ideal_layer_fraction", ideal_layer / span, "ratio",
            "ideal_layer_us / layer_time_us: how close the scheme gets to the ideal layer")

    # link transmitters of every GPU, over the layer's span
    L = int(st.p[0].links_per_gpu)
    tx = np.array([int(st.ch[2 * (g * L + l)].tx_busy) for g in range(P) for l in range(L)])
    out.add("system.moe.nvlink.tx_utilization_mean", float(tx.mean()) / span, "ratio",
            "GPU link transmitters: mean busy fraction over the layer")
    out.add("system.moe.nvlink.tx_utilization_max", float(tx.max()) / span, "ratio",
            "GPU link transmitters: busiest one's busy fraction over the layer")


def ideal_layer_ps(cfg, layer):
    """Ideal layer time (ps) of the busiest GPU: the SwiGLU expert GEMMs (3 GEMMs of 2 H I FLOP
    per row: the routed rows its local experts receive, plus every local token through each
    shared expert) at the tensor peak (SMs x dense BF16 FLOP per cycle x SM clock), or its expert
    weights (3 H I bf16 matrices per local routed and per shared expert) read once at HBM
    bandwidth, whichever is longer. Independent of the scheme: no communication, no mediation, no
    padding, no vector work (SiLU, combine)."""
    s, g = layer.shape, cfg.system.gpu
    rows = np.bincount(layer.routing.topk_idx.reshape(-1), minlength=s.experts)
    rows = rows.reshape(s.num_gpus, s.local_experts).sum(axis=1)            # per GPU
    flops = 6.0 * s.hidden * (rows * s.ffn + s.tokens * s.shared * s.shared_ffn)
    peak = g.num_sms * g.sm.tensor_bf16_flops_per_cycle * g.sm_clock        # FLOP/s
    weights = 6.0 * s.hidden * (s.local_experts * s.ffn + s.shared * s.shared_ffn)   # bytes
    t = np.maximum(flops / peak, weights / g.hbm.bandwidth)
    return float(t.max()) * 1e12
