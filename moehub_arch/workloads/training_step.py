"""One training step of a pipelined MoE model, composed from simulated layer times: the 1F1B
pipeline schedule, the data-parallel gradient reduction of the non-expert weights, and the
overlap of one micro-batch's exposed communication with another micro-batch's compute.

What it models (arithmetic over times the simulator measured; no hardware block):

- **Pipeline parallelism, 1F1B** (PipeDream-Flush, Narayanan et al., "Memory-Efficient
  Pipeline-Parallel DNN Training", arXiv 2006.09503; Megatron-LM's default schedule, Narayanan et
  al. arXiv 2104.04473 section 2.2): p stages, m micro-batches; stage s runs min(p - s - 1, m)
  forwards (warm-up), then alternates one forward and one backward (steady state), then the
  remaining backwards (cool-down). A forward of micro-batch i on stage s waits for stage s - 1's
  forward of i (plus the activation transfer `p2p_us`), a backward for stage s + 1's backward of
  i (plus `p2p_us`); the last stage's backward of i follows its own forward of i. The schedule is
  computed op by op (`pipeline_1f1b`), so stages of different cost and transfer times are exact;
  with equal stages of forward F and backward B and no transfer time the step is
  (m + p - 1)(F + B) and the bubble (each stage's idle time) (p - 1)(F + B)
  (`tests/test_training_step.py` checks both; with a transfer time the steady state also waits
  for the round trips between stages once m > p, which the op-by-op schedule counts).
- **Micro-batch overlap** (`overlap=True`: DeepSeek-V3's DualPipe idea, arXiv 2412.19437 section
  3.2.1, applied to 1F1B's steady state): a steady-state forward of micro-batch j and the backward
  of micro-batch i != j after it run as an overlapped pair in which each one's exposed time
  (communication, mediation: `*_exposed_us`) hides under the other's compute: the pair lasts
  max(cF + cB, xF + xB, F, B) (c = time - exposed, x = exposed) instead of F + B - the bound such
  an overlap approaches (assumption: the two chunks' compute and communication do not slow each
  other, and both chunks are at hand, as DualPipe's bidirectional feeding arranges; 1F1B alone
  would often have the backward arrive only as the forward ends). The pair's time is shared by
  the two ops in proportion to F and B, each result leaving at its share's end. The last stage
  (its steady pairs are one micro-batch: the backward needs the forward) and warm-up /
  cool-down ops do not overlap.
- **Data-parallel gradient reduction** of the weights every GPU of a stage holds (attention,
  norms, router, shared experts, dense FFNs - not the routed experts, which expert parallelism
  shards): a ring all-reduce, 2 (n - 1) / n x bytes at the GPU's NVLink bandwidth
  (`allreduce_us`); with `overlap_grad_reduce` (Megatron-Core's bucketed reduction during the
  backward) the part hidden under the stage's last backward is not exposed. The step ends when
  every stage's reduction has ended.

Not modelled: the optimizer step, the embedding and LM head, activation recomputation beyond what
the backward kernels recompute, interleaved (virtual) stages, DualPipe's bidirectional schedule
(its bubble is smaller than 1F1B's), and the expert weights' reduction across expert-parallel
replicas (one replica per stage here).
"""
from __future__ import annotations

import attrs


class TrainingError(Exception):
    """A training step that cannot be composed as asked (exit status 2)."""

    exit_code = 2


@attrs.frozen
class StageTimes:
    """One pipeline stage's cost for one micro-batch (us)."""

    forward_us: float
    backward_us: float
    forward_exposed_us: float = 0.0     # the part of forward_us compute does not hide
    backward_exposed_us: float = 0.0

    def __attrs_post_init__(self):
        for name in ("forward_us", "backward_us", "forward_exposed_us", "backward_exposed_us"):
            v = getattr(self, name)
            if not v >= 0:
                raise TrainingError(f"stage time {name}: expected a number >= 0, found {v!r}")
        if self.forward_exposed_us > self.forward_us or self.backward_exposed_us > self.backward_us:
            raise TrainingError(f"stage times: the exposed part exceeds the time ({self})")


def stage_ops(stage, stages, micro_batches, overlap):
    """The 1F1B op order of one stage: ("F", i), ("B", i) and, with overlap, ("Fo", j), ("Bo", i):
    a steady-state forward and backward of different micro-batches that run as an overlapped
    pair."""
    warm = min(stages - stage - 1, micro_batches)
    ops = [("F", i) for i in range(warm)]
    for i in range(micro_batches - warm):
        f = warm + i
        pair = overlap and f != i
        ops += [("Fo" if pair else "F", f), ("Bo" if pair else "B", i)]
    ops += [("B", i) for i in range(micro_batches - warm, micro_batches)]
    return ops


def pair_us(st):
    """How long an overlapped forward + backward pair of one stage lasts: each one's exposed time
    hides under the other's compute, max(cF + cB, xF + xB), but never less than either alone."""
    cf = st.forward_us - st.forward_exposed_us
    cb = st.backward_us - st.backward_exposed_us
    return max(cf + cb, st.forward_exposed_us + st.backward_exposed_us, st.forward_us,
               st.backward_us)


def pipeline_1f1b(stage_times, micro_batches, p2p_us=0.0, overlap=False) -> dict:
    """Times of a 1F1B pipeline of len(stage_times) stages over `micro_batches` micro-batches:
    returns step_us (last op's end), stage_end_us [p], stage_busy_us [p], bubble_us (the busiest
    stage's idle time: step - its busy time), bubble_fraction (bubble / step) and
    overlap_saved_us (busy time the micro-batch overlap removed, summed over stages)."""
    p, m = len(stage_times), int(micro_batches)
    if p < 1:
        raise TrainingError("pipeline: expected at least one stage")
    if m < p:
        raise TrainingError(f"pipeline: {m} micro-batches for {p} stages: 1F1B needs at least as "
                            f"many micro-batches as stages (otherwise stages idle in every "
                            f"step: raise the micro-batches or lower the stages)")
    if not p2p_us >= 0:
        raise TrainingError(f"pipeline: p2p_us must be >= 0, found {p2p_us!r}")
    fwd_end = [[None] * m for _ in range(p)]
    bwd_end = [[None] * m for _ in range(p)]
    orders = [stage_ops(s, p, m, overlap) for s in range(p)]
    nxt, free = [0] * p, [0.0] * p
    busy, saved = [0.0] * p, 0.0

    def ready(s, op, i):
        if op[0] == "F":
            if s == 0:
                return 0.0
            e = fwd_end[s - 1][i]
        elif s == p - 1:
            return fwd_end[s][i]
        else:
            e = bwd_end[s + 1][i]
        return None if e is None else e + p2p_us

    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(p):
            while nxt[s] < len(orders[s]):
                op, i = orders[s][nxt[s]]
                st = stage_times[s]
                r = ready(s, op, i)
                if r is None:
                    break
                start = max(r, free[s])
                dur = st.forward_us if op[0] == "F" else st.backward_us
                if op in ("Fo", "Bo"):
                    # one half of an overlapped pair: the pair lasts pair_us, shared in
                    # proportion to the two ops' times, each result leaving at its half's end
                    whole = st.forward_us + st.backward_us
                    short = dur * pair_us(st) / whole if whole else 0.0
                    saved += dur - short
                    dur = short
                free[s] = end = start + dur
                busy[s] += dur
                (fwd_end if op[0] == "F" else bwd_end)[s][i] = end
                nxt[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:      # cannot happen for 1F1B orders; a guard against a bad schedule
            raise TrainingError("pipeline: the schedule deadlocks")
    step = max(free)
    worst = max(range(p), key=lambda s: busy[s])
    bubble = step - busy[worst]
    return dict(step_us=step, stage_end_us=list(free), stage_busy_us=busy, bubble_us=bubble,
                bubble_fraction=bubble / step if step else 0.0, overlap_saved_us=saved)


def allreduce_us(grad_bytes, gpus, gpu_bandwidth_Bps) -> float:
    """Ring all-reduce time of `grad_bytes` over `gpus` GPUs at `gpu_bandwidth_Bps` per GPU and
    direction: each GPU sends and receives 2 (n - 1) / n x the bytes (the bandwidth term of NCCL's
    ring; the latency of its 2 (n - 1) steps is left out: microseconds against milliseconds of
    gradients)."""
    if gpus <= 1 or grad_bytes <= 0:
        return 0.0
    if not gpu_bandwidth_Bps > 0:
        raise TrainingError(f"all-reduce: bandwidth must be > 0, found {gpu_bandwidth_Bps!r}")
    return 2.0 * (gpus - 1) / gpus * grad_bytes / gpu_bandwidth_Bps * 1e6


def split_layers(layers, stages):
    """Contiguous layers per stage, as even as possible (the first stages take one more when the
    count does not divide): a list of `stages` lists of layer indices."""
    if stages < 1 or stages > len(layers):
        raise TrainingError(f"pipeline: {stages} stages for {len(layers)} layers: expected 1 to "
                            f"{len(layers)} stages")
    base, extra = divmod(len(layers), stages)
    out, at = [], 0
    for s in range(stages):
        n = base + (1 if s < extra else 0)
        out.append(list(layers[at:at + n]))
        at += n
    return out


@attrs.frozen
class LayerCost:
    """One layer's simulated cost for one micro-batch (us) and its non-expert weights."""

    kind: str                   # "dense" or "moe"
    forward_us: float
    backward_us: float
    forward_exposed_us: float = 0.0
    backward_exposed_us: float = 0.0
    moe_us: float = 0.0         # of forward_us + backward_us, the MoE layer's (not attention)
    replicated_params: int = 0  # weights every data-parallel GPU holds (reduced after the step)


def training_step(layers, stages, micro_batches, dp_gpus, gpu_bandwidth_Bps, grad_bytes=4,
                  p2p_us=0.0, overlap=False, overlap_grad_reduce=True) -> dict:
    """A training step of `layers` (LayerCost, in model order) over `stages` pipeline stages and
    `micro_batches` micro-batches, the non-expert gradients all-reduced over `dp_gpus` GPUs of
    each stage (`grad_bytes` per weight: 4 for fp32 gradients). Returns the pipeline's figures
    (pipeline_1f1b) and step_us (with the exposed reductions), dp_allreduce_us and
    dp_exposed_us per stage, moe_share (MoE layers' share of all stages' busy time without
    overlap), exposed_comm_us (the exposed time of every layer over all micro-batches, the
    busiest stage's) and the stages' layer lists."""
    per_stage = split_layers(list(range(len(layers))), stages)
    times, dp, moe_busy, all_busy, exposed = [], [], 0.0, 0.0, []
    for idxs in per_stage:
        ls = [layers[i] for i in idxs]
        st = StageTimes(forward_us=sum(x.forward_us for x in ls),
                        backward_us=sum(x.backward_us for x in ls),
                        forward_exposed_us=sum(x.forward_exposed_us for x in ls),
                        backward_exposed_us=sum(x.backward_exposed_us for x in ls))
        times.append(st)
        dp.append(allreduce_us(sum(x.replicated_params for x in ls) * grad_bytes, dp_gpus,
                               gpu_bandwidth_Bps))
        moe_busy += micro_batches * sum(x.moe_us for x in ls)
        all_busy += micro_batches * (st.forward_us + st.backward_us)
        exposed.append(micro_batches * (st.forward_exposed_us + st.backward_exposed_us))
    pipe = pipeline_1f1b(times, micro_batches, p2p_us, overlap)
    dp_exposed = [max(0.0, d - (t.backward_us if overlap_grad_reduce else 0.0))
                  for d, t in zip(dp, times)]
    step = max(e + x for e, x in zip(pipe["stage_end_us"], dp_exposed))
    worst = max(range(stages), key=lambda s: pipe["stage_busy_us"][s])
    return dict(pipe, pipeline_us=pipe["step_us"], step_us=step, dp_allreduce_us=dp,
                dp_exposed_us=dp_exposed, moe_share=moe_busy / all_busy if all_busy else 0.0,
                exposed_comm_us=exposed[worst], stage_layers=per_stage,
                stage_times=[attrs.asdict(t) for t in times])
