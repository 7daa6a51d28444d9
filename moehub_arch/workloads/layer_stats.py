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
Does the dispatch use the links it has?
  dispatch_wire_bytes_max  the busiest GPU's wire bytes (link headers and flit padding included)
                           sent for its dispatch-phase kernels: requests and rows they issued
                           (packets to the GPU itself, which skip the links, and responses a GPU
                           sends for other GPUs' requests are not counted)
  dispatch_link_efficiency (dispatch_wire_bytes_max / that GPU's aggregate link bandwidth) /
                           phase.dispatch_us: 1.0 when the dispatch phase lasts exactly as long as
                           its busiest sender's bytes take on all its links; low values mean
                           something other than link bandwidth (a hub unit, memory, the SMs,
                           mediation) holds the rows back
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

    _dispatch_link_stats(st, out, layer, launches, P)

    # link transmitters of every GPU, over the layer's span
    L = int(st.p[0].links_per_gpu)
    tx = np.array([int(st.ch[2 * (g * L + l)].tx_busy) for g in range(P) for l in range(L)])
    out.add("system.moe.nvlink.tx_utilization_mean", float(tx.mean()) / span, "ratio",
            "GPU link transmitters: mean busy fraction over the layer")
    out.add("system.moe.nvlink.tx_utilization_max", float(tx.max()) / span, "ratio",
            "GPU link transmitters: busiest one's busy fraction over the layer")


def _dispatch_link_stats(st, out, layer, launches, P):
    names = layer.plan.phases.get("dispatch", ())
    wire = np.zeros(P)
    for l in launches:
        if l.kernel in names:
            wire[l.gpu] += int(st.ln[l.index].tx_wire)
    out.add("system.moe.dispatch_wire_bytes_max", float(wire.max()), "bytes",
            "the busiest GPU's link wire bytes sent for its dispatch-phase kernels (headers and "
            "flit padding included; loopback and responses to other GPUs excluded)")
    p = st.p[0]
    # aggregate transmit bandwidth of one GPU: links x per-link bandwidth (link_fs_per_byte is
    # femtoseconds per byte of one link direction)
    ps_at_full_rate = wire.max() * int(p.link_fs_per_byte) / int(p.links_per_gpu) / 1000.0
    phase_ps = out.get("system.moe.phase.dispatch_us", 0.0) * 1e6
    out.add("system.moe.dispatch_link_efficiency",
            ps_at_full_rate / phase_ps if phase_ps > 0 else 0.0, "ratio",
            "(busiest GPU's dispatch wire bytes / its aggregate link bandwidth) / dispatch phase "
            "time: 1.0 = the dispatch phase runs at full link rate")
