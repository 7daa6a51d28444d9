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
  ideal_layer_us           also identical for every scheme: per GPU, max(its expert GEMM FLOPs at
                           the tensor peak, the weights of its experts that receive rows read once
                           at HBM bandwidth), the
                           busiest GPU; ideal_layer_fraction = ideal / layer time (the MoE-Hub
                           paper, arXiv 2605.05888, reports 96.8% of such an ideal layer)
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

from ..engine.state import LN_DONE, NUM_WAIT_REASONS
from ..isa.encoding import UNIT_COMM, UNIT_LSU, UNIT_TENSOR, UNIT_VECTOR
from .dedup import add_dedup_stats


def ideal_compute_ps(layer, cfg) -> float:
    """The one definition of a layer's ideal compute time: the busiest GPU's expert GEMM FLOPs -
    each routed row 2·H·I for each of gate, up and down, and each of its tokens the same for every
    shared expert - at the GPU's peak dense BF16 tensor rate (SMs x FLOP per cycle x clock).
    Depends on the model, routing and GPU only, not on how a scheme moves or tiles the rows."""
    return float((expert_gemm_flops(layer) / tensor_peak(cfg)).max()) * 1e12


def expert_gemm_flops(layer):
    """Expert GEMM FLOPs per GPU [P]: routed rows its local experts receive and its tokens through
    every shared expert, 2·H·I each for gate, up and down."""
    s = layer.shape
    rows = np.bincount(layer.routing.topk_idx.reshape(-1), minlength=s.experts)
    rows_per_gpu = rows.reshape(s.num_gpus, s.local_experts).sum(axis=1)
    return (rows_per_gpu.astype(np.float64) * 6.0 * s.hidden * s.ffn
            + s.tokens * s.shared * 6.0 * s.hidden * s.shared_ffn)


def tensor_peak(cfg):
    """Peak dense BF16 tensor rate of one GPU (FLOP/s): SMs x FLOP per cycle x clock."""
    g = cfg.system.gpu
    return g.num_sms * g.sm.tensor_bf16_flops_per_cycle * g.sm_clock


def kernels_finished(sim, kernels):
    """True when every launch of the kernels named in `kernels` finished, on every GPU (a run
    stopped by a limit reports the figures of those alone); False when none of them exists."""
    done = [int(sim.state.ln[l.index].status) == LN_DONE for l in sim.launches
            if l.kernel in kernels]
    return bool(done) and all(done)


def forward_launches(sim, layer):
    """The run's launches without the backward's (passes: training runs some of the forward's
    kernels again: a forward figure counts the forward's launches alone)."""
    by = layer.plan.launch_phases
    return [li for li in sim.launches
            if not (by and by[li.config_index].startswith("backward"))]


def kernel_ticks_per_gpu(sim, kernels, launches=None):
    """Per GPU, the summed durations (ticks) of the launches (`launches`, by default the run's)
    of the kernels named in `kernels` (the per-kernel times DeepEP's tests take with CUDA
    events)."""
    st = sim.state
    per_gpu = np.zeros(sim.cfg.system.num_gpus, dtype=np.int64)
    for li in (sim.launches if launches is None else launches):
        if li.kernel in kernels:
            per_gpu[li.gpu] += int(st.ln[li.index].end) - int(st.ln[li.index].start)
    return per_gpu


def add_layer_stats(sim, layer):
    """The system.moe.* stats of the module docstring. A run stopped by a limit (`sim.stopped`:
    run.max_ticks, max_wall, max_events, a signal) reports what finished: the kernels and phases
    whose every launch ended, with the properties of the layer (ideal times, deduplication) and
    the byte counts so far; the stats over the whole layer (its time, the SM and link fractions)
    are left out, and system.moe.launches_finished says how far it got."""
    st, out = sim.state, sim.stats
    launches = sim.launches
    P = layer.shape.num_gpus
    S = int(st.p[0].sms_per_gpu)
    slots = int(st.p[0].slots_per_sm)
    starts = np.array([int(st.ln[l.index].start) for l in launches])
    ends = np.array([int(st.ln[l.index].end) for l in launches])
    done = np.array([int(st.ln[l.index].status) == LN_DONE for l in launches])
    partial = sim.stopped is not None
    if partial:
        out.add("system.moe.launches_finished", int(done.sum()), "count",
                f"kernel launches finished (of {len(launches)}) when the run stopped: only the "
                f"kernels and phases finished on every GPU have stats ({sim.stopped})")
        add_finished_layer_stats(sim, layer, starts, ends, done)
        return
    # passes: training - the forward's figures leave the backward's launches out
    # (layer_backward.py reports those)
    by = layer.plan.launch_phases
    fwd = [i for i, l in enumerate(launches)
           if not (by and by[l.config_index].startswith("backward"))]
    t0, t1 = int(starts[fwd].min()), int(ends[fwd].max())
    span = max(t1 - t0, 1)
    out.add("system.moe.layer_time_us", span * 1e-6, "us",
            "MoE layer: first kernel start to last kernel end over all GPUs")

    _kernel_and_phase_stats(out, layer, [launches[i] for i in fwd], starts[fwd], ends[fwd],
                            None, P)

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
    ideal_layer = ideal_layer_ps(sim.cfg, layer)
    out.add("system.moe.ideal_layer_us", ideal_layer * 1e-6, "us",
            "an ideal MoE layer on the busiest GPU: its expert GEMM FLOPs (routed rows it "
            "receives + shared experts) at the tensor peak, or its expert weights read once at "
            "HBM bandwidth if that is longer; no communication, mediation or padding")
    out.add("system.moe.ideal_layer_fraction", ideal_layer / span, "ratio",
            "ideal_layer_us / layer_time_us: how close the scheme gets to the ideal layer")

    _dispatch_link_stats(st, out, layer, launches, P)

    # link transmitters of every GPU, over the layer's span
    L = int(st.p[0].links_per_gpu)
    tx = np.array([int(st.ch[2 * (g * L + l)].tx_busy) for g in range(P) for l in range(L)])
    out.add("system.moe.nvlink.tx_utilization_mean", float(tx.mean()) / span, "ratio",
            "GPU link transmitters: mean busy fraction over the layer")
    out.add("system.moe.nvlink.tx_utilization_max", float(tx.max()) / span, "ratio",
            "GPU link transmitters: busiest one's busy fraction over the layer")
    # traffic of every scheme on the same footing (DySHARP's comparison, arXiv 2605.05607):
    # bytes on the wires between the GPUs and the switches, headers and padding included
    # (NVLink only: a multi-node system's PCIe and InfiniBand links have their own stats)
    _nvlink_wire_bytes(st, out)
    add_dedup_stats(out, layer, sim.cfg)


def _nvlink_wire_bytes(st, out):
    nvl = st.ch.link_class == 0
    up = int(st.ch.tx_wire_bytes[nvl & (st.ch.to_switch == 1)].sum())
    down = int(st.ch.tx_wire_bytes[nvl & (st.ch.to_switch == 0)].sum())
    out.add("system.moe.nvlink.tx_wire_bytes", up + down, "bytes",
            "wire bytes sent on all GPU-switch links, both directions (the whole run)")
    out.add("system.moe.nvlink.up_wire_bytes", up, "bytes",
            "of which GPU -> switch (uplinks)")
    out.add("system.moe.nvlink.down_wire_bytes", down, "bytes",
            "of which switch -> GPU (downlinks)")


def _kernel_and_phase_stats(out, layer, launches, starts, ends, done, P):
    """kernel.<name>_us and phase.<name>_us; with `done` (a stopped run: per launch, finished),
    only the kernels and phases whose every launch finished."""
    # by first start; kernels starting at the same tick in launch order (sorting the set alone
    # left ties in string-hash order, which differs between processes)
    kernels = sorted(dict.fromkeys(l.kernel for l in launches), key=lambda k: min(
        starts[i] for i, l in enumerate(launches) if l.kernel == k))
    for k in kernels:
        idx = [i for i, l in enumerate(launches) if l.kernel == k]
        if done is not None and not done[idx].all():
            continue
        d = [ends[i] - starts[i] for i in idx]
        out.add(f"system.moe.kernel.{k}_us", float(np.mean(d)) * 1e-6, "us",
                f"duration of kernel '{k}', mean over GPUs (and over its launches, if several)")

    for phase, names in layer.plan.phases.items():
        per_gpu = []
        by_launch = layer.plan.launch_phases
        unfinished = False
        for g in range(P):
            if by_launch:
                idx = [i for i, l in enumerate(launches)
                       if l.gpu == g and by_launch[l.config_index] == phase]
            else:
                idx = [i for i, l in enumerate(launches) if l.gpu == g and l.kernel in names]
            if not idx:
                continue
            unfinished |= done is not None and not done[idx].all()
            lo = min(starts[i] for i in idx)
            hi = max(ends[i] for i in idx)
            per_gpu.append(hi - lo)
        if unfinished or (done is not None and not per_gpu):
            continue    # a stopped run: a phase with a launch unfinished, or with none at all
        t = float(np.mean(per_gpu)) if per_gpu else 0.0
        if phase == "mediation":
            t += layer.plan.mediation_extra_ps
        out.add(f"system.moe.phase.{phase}_us", t * 1e-6, "us",
                f"time in {phase} ({', '.join(names) or 'no kernel'}), mean over GPUs"
                + ("; includes the host round trip" if phase == "mediation" else ""))


def add_finished_layer_stats(sim, layer, starts, ends, done):
    """The stats a stopped run can give (see add_layer_stats): finished kernels and phases, the
    dispatch's link efficiency if the dispatch finished, the layer's ideal times, the NVLink
    wire bytes so far and the deduplication of its routing."""
    st, out, launches, cfg = sim.state, sim.stats, sim.launches, sim.cfg
    P = layer.shape.num_gpus
    _kernel_and_phase_stats(out, layer, launches, starts, ends, done, P)
    if "system.moe.phase.dispatch_us" in out:
        _dispatch_link_stats(st, out, layer, launches, P)
    out.add("system.moe.ideal_compute_us", ideal_compute_ps(layer, cfg) * 1e-6, "us",
            "the busiest GPU's expert GEMM FLOPs at the SMs' peak BF16 tensor rate (the same for "
            "every scheme on the same layer)")
    out.add("system.moe.ideal_layer_us", ideal_layer_ps(cfg, layer) * 1e-6, "us",
            "an ideal MoE layer on the busiest GPU (see a complete run's description)")
    _nvlink_wire_bytes(st, out)
    add_dedup_stats(out, layer, cfg)


def _dispatch_link_stats(st, out, layer, launches, P):
    names = layer.plan.phases.get("dispatch", ())
    by = layer.plan.launch_phases
    wire = np.zeros(P)
    for l in launches:
        # the backward's launches (passes: training) run some of the same kernels: not counted
        if l.kernel in names and not (by and by[l.config_index].startswith("backward")):
            wire[l.gpu] += int(st.ln[l.index].tx_wire)
    out.add("system.moe.dispatch_wire_bytes_max", float(wire.max()), "bytes",
            "the busiest GPU's link wire bytes sent for its dispatch-phase kernels (headers and "
            "flit padding included; loopback and responses to other GPUs excluded)")
    p = st.p[0]
    # aggregate transmit bandwidth of one GPU: links x per-link bandwidth, the rate its link
    # transmitters serialise at (State.ch fs_per_byte: femtoseconds per byte of one direction;
    # topology.py gives every NVLink channel system.nvlink.bandwidth's, so channel 0's is theirs)
    ps_at_full_rate = wire.max() * int(st.ch[0].fs_per_byte) / int(p.links_per_gpu) / 1000.0
    phase_ps = out.get("system.moe.phase.dispatch_us", 0.0) * 1e6
    out.add("system.moe.dispatch_link_efficiency",
            ps_at_full_rate / phase_ps if phase_ps > 0 else 0.0, "ratio",
            "(busiest GPU's dispatch wire bytes / its aggregate link bandwidth) / dispatch phase "
            "time: 1.0 = the dispatch phase runs at full link rate")


def ideal_layer_ps(cfg, layer):
    """Ideal layer time (ps) of the busiest GPU: its expert GEMM FLOPs (`expert_gemm_flops`) at the
    tensor peak, or its expert weights (3 H I bf16 matrices per local routed expert that
    receives a row and per shared expert) read once at HBM bandwidth, whichever is longer. An
    expert no token chose is never read (every scheme skips it), so counting its weights would
    put the "ideal" above what a scheme achieves. Independent of the scheme: no communication,
    no mediation, no padding, no vector work (SiLU, combine)."""
    s = layer.shape
    rows = np.bincount(layer.routing.topk_idx.reshape(-1), minlength=s.experts)
    used = (rows.reshape(s.num_gpus, s.local_experts) > 0).sum(axis=1)   # [P]
    weights = 6.0 * s.hidden * (used * s.ffn + s.shared * s.shared_ffn)   # bytes
    t = np.maximum(expert_gemm_flops(layer) / tensor_peak(cfg),
                   weights / cfg.system.gpu.hbm.bandwidth)
    return float(t.max()) * 1e12
