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

    # link transmitters of every GPU, over the layer's span
    L = int(st.p[0].links_per_gpu)
    tx = np.array([int(st.ch[2 * (g * L + l)].tx_busy) for g in range(P) for l in range(L)])
    out.add("system.moe.nvlink.tx_utilization_mean", float(tx.mean()) / span, "ratio",
            "GPU link transmitters: mean busy fraction over the layer")
    out.add("system.moe.nvlink.tx_utilization_max", float(tx.max()) / span, "ratio",
            "GPU link transmitters: busiest one's busy fraction over the layer")
