"""Results of one MoE layer run, as stats under `system.moe.*`.

Where the time goes:
  layer_time_us            first kernel start to last kernel end (any GPU)
  phase.<name>_us          per phase (the scheme maps its kernels to mediation, dispatch, expert,
                           combine): from the phase's first kernel start to its last kernel end on
                           each GPU, averaged over GPUs; mediation includes the host round trip
  kernel.<name>_us         each kernel's duration averaged over GPUs
  ideal_compute_us         the busiest GPU's expert GEMM FLOPs at the SMs' peak BF16 tensor rate
                           (`ideal_compute_ps`): a property of the layer, its routing and the GPU,
                           identical for every scheme run on the same layer
  overhead_us              layer time minus ideal compute: communication, mediation, vector work
                           and load imbalance that compute did not hide (the "exposed" time)
SM time (fractions of SMs x layer time, averaged over GPUs). The five categories partition SM time
(they sum to 1). Units of one SM work at once (a copy can overlap a GEMM), so each SM's time is
attributed in priority order, each category taking at most what the ones before it left:
  sm.idle                  no thread block resident
  sm.computing             tensor or vector unit busy
  sm.communicating         comm unit busy (put/get/send issue) plus LSU (copies)
  sm.waiting               resident thread-block time spent waiting (flags, fences, hub, claims),
                           divided by the TB slots per SM
  sm.other                 the rest of resident time: issuing ALU, branch and control
                           instructions, memory latency not counted as a wait, thread-block launch
Links: nvlink.tx_utilization_mean / _max over every GPU's link transmitters within the layer.
"""
import numpy as np

from ..engine.state import NUM_WAIT_REASONS
from ..isa.encoding import UNIT_COMM, UNIT_LSU, UNIT_TENSOR, UNIT_VECTOR


def ideal_compute_ps(layer, cfg) -> float:
    """The one definition of a layer's ideal compute time: the busiest GPU's expert GEMM FLOPs -
    each routed row 2·H·I for each of gate, up and down, and each of its tokens the same for every
    shared expert - at the GPU's peak dense BF16 tensor rate (SMs x FLOP per cycle x clock).
    Depends on the model, routing and GPU only, not on how a scheme moves or tiles the rows."""
    s, g = layer.shape, cfg.system.gpu
    rows = np.bincount(layer.routing.topk_idx.reshape(-1), minlength=s.experts)
    rows_per_gpu = rows.reshape(s.num_gpus, s.local_experts).sum(axis=1)
    flops = (rows_per_gpu.astype(np.float64) * 6.0 * s.hidden * s.ffn
             + s.tokens * s.shared * 6.0 * s.hidden * s.shared_ffn)
    rate = g.num_sms * g.sm.tensor_bf16_flops_per_cycle * g.sm_clock   # FLOP/s
    return float(flops.max()) / rate * 1e12


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
                f"duration of kernel '{k}', mean over GPUs")

    for phase, names in layer.plan.phases.items():
        per_gpu = []
        for g in range(P):
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

    busy = st.sm_unit_busy.reshape(P, S, -1).astype(np.float64)
    compute = busy[:, :, UNIT_TENSOR] + busy[:, :, UNIT_VECTOR]
    comm = busy[:, :, UNIT_COMM] + busy[:, :, UNIT_LSU]
    waits = st.sm_wait.reshape(P, S, NUM_WAIT_REASONS).sum(axis=2) / slots
    # per SM, in priority order (see the module docstring): each takes what is left of the span
    left = np.full((P, S), float(span))
    parts = {}
    for name, ticks in (("idle", span - st.sm.active_ticks.reshape(P, S).astype(np.float64)),
                        ("computing", compute), ("communicating", comm), ("waiting", waits)):
        parts[name] = np.clip(ticks, 0.0, left)
        left = left - parts[name]
    parts["other"] = left
    denom = S * span
    docs = {"idle": "fraction of SM time with no thread block resident",
            "computing": "fraction of SM time a tensor or vector unit was busy",
            "communicating": "fraction of SM time the comm or load/store unit was busy (sends, "
                             "copies) and no tensor or vector unit",
            "waiting": "thread-block time spent waiting (flags, fences, hub room, claims) / TB "
                       "slots, within the SM time not computing or communicating",
            "other": "the rest of resident SM time: ALU, branch and control issue, memory latency, "
                     "launches (the five sm.* fractions sum to 1)"}
    for name in ("computing", "communicating", "waiting", "other", "idle"):
        out.add(f"system.moe.sm.{name}", float(parts[name].sum(axis=1).mean()) / denom, "ratio",
                docs[name])
    ideal = ideal_compute_ps(layer, sim.cfg)
    out.add("system.moe.ideal_compute_us", ideal * 1e-6, "us",
            "the busiest GPU's expert GEMM FLOPs at the SMs' peak BF16 tensor rate (the same for "
            "every scheme on the same layer)")
    out.add("system.moe.overhead_us", (span - ideal) * 1e-6, "us",
            "layer time minus ideal compute: communication, mediation and imbalance not hidden")

    # link transmitters of every GPU, over the layer's span
    L = int(st.p[0].links_per_gpu)
    tx = np.array([int(st.ch[2 * (g * L + l)].tx_busy) for g in range(P) for l in range(L)])
    out.add("system.moe.nvlink.tx_utilization_mean", float(tx.mean()) / span, "ratio",
            "GPU link transmitters: mean busy fraction over the layer")
    out.add("system.moe.nvlink.tx_utilization_max", float(tx.max()) / span, "ratio",
            "GPU link transmitters: busiest one's busy fraction over the layer")
