"""`moehub-sim e2e --training`: one training step of a whole MoE model under pipeline parallelism,
composed from simulated layers (forward and backward) by moehub_arch/workloads/training_step.py.

    moehub-sim e2e --training --model qwen3_30b_a3b --scheme moehub --compare deepep --quick
    moehub-sim e2e --training --model deepseek_v3 --scheme moehub --stages 16 --micro-batches 32 \
        --overlap
    moehub-sim e2e --setting configs/e2e/dysharp_l.yaml     (a seed paper's setting: settings.py)

Layers, each distinct one simulated once per micro-batch shape (runs kept under --outdir and
reused, moehub_arch/run_cache.py):

- attention part and dense layers: workload.block kinds attention / transformer on one GPU
  (tp_none) with `passes: training` - their forward and their simulated backward
  (system.block.forward_time_us, backward_time_us: tp/block_backward.s, tp/ffn_backward.s);
- MoE layer: workload.layer on the whole system for each scheme - its forward
  (system.moe.layer_time_us, exposed part system.moe.overhead_us). Its backward: a scheme whose
  backward the simulator runs (SIMULATED_BACKWARD below: every scheme but the inference-only
  deepep_ll; fastermoe's run refuses training when its shadow policy replicates an expert)
  gives it from that run; any other scheme is an error naming it unless
  `--moe-backward estimate`, which composes it from simulated parts: the scheme's
  forward with the forward's expert phase replaced by the simulated backward expert phase of
  the same layer (system.moe.backward.expert_us of scheme megatron's training run: the shared
  grouped backward kernels on the same routing, shared experts included) and without the
  mediation - backward = layer - mediation - expert phase + backward expert phase, exposed =
  overhead - mediation. Why: the backward moves the same rows through the same mechanism in the
  opposite roles (the combine's backward is a dispatch of output gradients, the dispatch's a
  combine of input gradients) and needs no new mediation (DeepEP's cached handle, Megatron's
  known splits), while its expert work is another kernel set (dgrad, wgrad, recomputation, fp32
  weight gradients). That is an estimate from simulated parts, not a simulated backward - it
  keeps the scheme's forward overlap of communication with expert work as it was: the tables
  say which rows are estimates, and for a simulated scheme the tool prints what the estimate
  would have said.

The step (training_step.py): layers split over --stages pipeline stages (contiguous, as even as
possible), one stage per expert-parallel system (one --system each, as DySHARP's 16 NVL32
domains), 1F1B over --micro-batches micro-batches of --tokens-per-gpu tokens per GPU; the
activations (tokens x hidden bf16 per GPU) cross to the next stage at --p2p-GBps per GPU
(default 50 GB/s: one 400 Gb/s ConnectX-7 per GPU, DGX H100 user guide); the weights every GPU
of a stage holds (attention as modelled here - 4 H^2 and two norms per layer -, the router,
shared experts and dense FFNs) are all-reduced over the system's GPUs on NVLink
(links x link bandwidth per GPU) in --grad-bytes per weight (default 4: fp32 gradients,
assumption: Megatron's fp32 main_grad reduced as such), overlapped with the last backward of the
stage unless --no-overlap-grad-reduce; --overlap lets a steady-state forward and backward of
different micro-batches hide each other's exposed time (training_step.py), and a compared scheme
named `name+dualpipe` gets that overlap in its own step (DualPipe as DySHARP's baseline: DeepEP's
layers, `deepep+dualpipe`).

Not modelled: those of the forward step (forward.py: embedding, LM head, MLA, GQA, rotary, the
norm and residual around the MoE layer) and of training_step.py (optimizer, interleaved stages, DualPipe's own
schedule, expert-gradient reduction across replicas).
"""
import json

import attrs

from ..config import ConfigError, load_config
from ..config.models import load_model
from ..experiment import hub_design_path
from ..workloads.layer import BACKWARD_SCHEMES, LayerError, MoeLayer
from ..workloads.training_step import LayerCost, TrainingError, training_step
from . import layers as e2e

# MoE schemes whose layer the simulator runs forward and backward (workload.layer.passes:
# training, moehub_arch/workloads/layer_backward.py), with the stats of the backward's time and
# of its exposed part; the other schemes' backward is the estimate above.
SIMULATED_BACKWARD = {scheme: ("system.moe.backward.time_us", "system.moe.backward.overhead_us")
                      for scheme in BACKWARD_SCHEMES}
DUALPIPE = "+dualpipe"
EXPERT_REFERENCE = "megatron"      # whose training run gives the estimate's backward expert phase


def _with_design(out, base, design):
    """A layer experiment config in `out` that extends `base` with a hub design's file."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"layer_{design.stem}.yaml"
    path.write_text(f"# {base.name} with the MoE-Hub design {design.stem} (moehub-sim e2e "
                    f"--hub-design {design.stem})\nextends: ['{base}', '{design}']\n")
    return path


def training_run(a, fail):
    """The training step of the parsed `moehub-sim e2e --training` arguments `a`; `fail(message)`
    reports bad input and returns the exit status."""
    try:
        base, system = e2e.system_files(a.system)
    except ConfigError as e:
        return fail(str(e))
    tokens = e2e.QUICK_TOKENS if a.quick else a.tokens_per_gpu
    if tokens <= 0 or tokens % 64:
        return fail(f"--tokens-per-gpu {tokens}: expected a positive multiple of 64 (the "
                    f"attention kernel's tile)")
    if a.stages < 1:
        return fail(f"--stages {a.stages}: expected at least 1")
    if a.micro_batches < a.stages:
        return fail(f"--micro-batches {a.micro_batches} < --stages {a.stages}: 1F1B needs at "
                    f"least as many micro-batches as stages")
    if not 0 < a.p2p_GBps < float("inf"):      # nan and inf refused too
        return fail(f"--p2p-GBps {a.p2p_GBps}: expected a positive, finite bandwidth")
    specs = [a.scheme] + [s for s in a.compare if s != a.scheme]
    # "name+dualpipe": scheme name's layers with the micro-batch overlap (DualPipe's idea) in its
    # step whatever --overlap says - the DeepSeek-V3 baseline DySHARP compares with
    base_of = {spec: spec[:-len(DUALPIPE)] if spec.endswith(DUALPIPE) else spec
               for spec in specs}
    schemes = list(dict.fromkeys(base_of.values()))
    if a.moe_backward == "simulated":
        missing = [s for s in schemes if s not in SIMULATED_BACKWARD]
        if missing:
            have = ", ".join(sorted(SIMULATED_BACKWARD)) or "none yet"
            return fail(f"scheme {', '.join(missing)}: no simulated backward pass (schemes with "
                        f"one: {have}); pass --moe-backward estimate to compose it from the "
                        f"forward's phases (docs/training.md)")
    setting = a.setting_data or {}
    try:
        model = load_model(a.model)
        design = None if a.hub_design == "published" else hub_design_path(a.hub_design)
    except ConfigError as e:
        return fail(str(e))
    if "layers" in setting:      # the whole model's layer counts where the model file has one
        model = attrs.evolve(model, layers=setting["layers"], moe_layers=setting["moe_layers"])
    if a.stages > model.layers:
        return fail(f"--stages {a.stages}: {a.model} has {model.layers} layers")
    cfg = load_config(base)
    gpus = cfg.system.num_gpus
    nvlink_Bps = cfg.system.nvlink.links_per_gpu * cfg.system.nvlink.bandwidth
    dense = setting.get("dense") or e2e.DENSE[a.model]
    H = model.hidden
    layer_sets = [f"workload.layer.model={a.model}", f"workload.layer.tokens_per_gpu={tokens}"]
    # a layer that refuses training in this configuration (FasterMoE's policy shadowing an
    # expert on this routing, a scheme option without a backward) is bad input: found by
    # planning each layer before anything is simulated
    for s in schemes:
        if s in SIMULATED_BACKWARD:
            try:
                MoeLayer(load_config(base, [f"scheme={s}"] + layer_sets
                                     + ["workload.layer.passes=training"]))
            except (LayerError, ConfigError) as e:
                return fail(f"scheme {s}: {e}")
    out = a.outdir / f"{model.name}_{tokens}_{a.system}"
    bm = e2e.block_model_file(out, model, dense, tokens)
    one_gpu = ["system.num_gpus=1", f"workload.block.model={bm}", "workload.block.tp=1",
               "workload.block.scheme=tp_none", "workload.block.gemm_tbs=132",
               "workload.block.passes=training"]
    print(f"e2e --training: {a.model} on {a.stages} stages of {a.system} ({gpus} GPUs each), "
          f"{a.micro_batches} micro-batches of {tokens} tokens per GPU", flush=True)
    st, how = e2e.run(system, out / "attention_training", one_gpu
                      + ["workload.block.kind=attention"], a.force)
    attn = (e2e.value(st, "system.block.forward_time_us"),
            e2e.value(st, "system.block.backward_time_us"))
    print(f"  attention part (1 GPU): forward {attn[0]:9.1f} us, backward {attn[1]:9.1f} us  "
          f"[{how}]", flush=True)
    dense_layers = model.layers - model.moe_layers
    dl = None
    if dense_layers:
        st, how = e2e.run(system, out / "dense_layer_training", one_gpu
                          + ["workload.block.kind=transformer"], a.force)
        dl = (e2e.value(st, "system.block.forward_time_us"),
              e2e.value(st, "system.block.backward_time_us"))
        print(f"  dense layer (1 GPU):    forward {dl[0]:9.1f} us, backward {dl[1]:9.1f} us  "
              f"[{how}]", flush=True)
    attn_params = 4 * H * H + 2 * H
    moe = {}
    bwd_expert = None
    if any(s not in SIMULATED_BACKWARD for s in schemes):
        # the estimate's expert part: the simulated backward expert phase of this layer
        st, how = e2e.run(base, out / f"moe_{EXPERT_REFERENCE}_training",
                          [f"scheme={EXPERT_REFERENCE}"] + layer_sets
                          + ["workload.layer.passes=training"], a.force)
        bwd_expert = e2e.value(st, "system.moe.backward.expert_us")
        print(f"  MoE backward expert phase ({EXPERT_REFERENCE}'s training run): "
              f"{bwd_expert:9.1f} us  [{how}]", flush=True)
    for s in schemes:
        sets = [f"scheme={s}"] + layer_sets
        if s == "moehub" and design:
            # another hub design: the layer experiment extended by the design's file
            layer_cfg, run_dir = _with_design(out, base, design), f"moe_{s}_{design.stem}"
        else:
            layer_cfg, run_dir = base, f"moe_{s}"
        if s in SIMULATED_BACKWARD:       # forward and backward in one run
            st, how = e2e.run(layer_cfg, out / f"{run_dir}_training",
                              sets + ["workload.layer.passes=training"], a.force)
        else:
            st, how = e2e.run(layer_cfg, out / run_dir, sets, a.force)
        fwd = e2e.value(st, "system.moe.layer_time_us")
        over = e2e.value(st, "system.moe.overhead_us")
        med = e2e.value(st, "system.moe.phase.mediation_us") \
            if "system.moe.phase.mediation_us" in st else 0.0
        expert = e2e.value(st, "system.moe.phase.expert_us")
        estimate = None if bwd_expert is None else fwd - med - expert + bwd_expert
        if s in SIMULATED_BACKWARD:
            time_stat, exposed_stat = SIMULATED_BACKWARD[s]
            bwd, src = e2e.value(st, time_stat), "simulated"
            bexp = min(e2e.value(st, exposed_stat), bwd)
        else:
            bwd, src = estimate, "estimate"
            bexp = min(max(0.0, over - med), bwd)
        # the estimate beside a simulated backward shows how far the estimate is off there
        moe[s] = dict(forward_us=fwd, backward_us=bwd, forward_exposed_us=min(over, fwd),
                      backward_exposed_us=bexp, mediation_us=med, expert_us=expert,
                      backward_source=src, backward_estimate_us=estimate)
        note = f"; the estimate would say {estimate:.1f}" \
            if src == "simulated" and estimate is not None else ""
        print(f"  MoE layer, {s:14s} forward {fwd:9.1f} us, backward {bwd:9.1f} us ({src}{note})"
              f"  [{how}]", flush=True)
    p2p = tokens * H * 2 / (a.p2p_GBps * 1e9) * 1e6
    rows = {}
    for spec in specs:
        s = base_of[spec]
        m = moe[s]
        layers = [LayerCost("dense", dl[0], dl[1], replicated_params=attn_params
                            + 3 * H * dense["dense_ffn"]) for _ in range(dense_layers)]
        layers += [LayerCost("moe", attn[0] + m["forward_us"], attn[1] + m["backward_us"],
                             m["forward_exposed_us"], m["backward_exposed_us"],
                             moe_us=m["forward_us"] + m["backward_us"],
                             replicated_params=attn_params + H * model.experts
                             + 3 * H * model.shared_expert_ffn * model.shared_experts)
                   for _ in range(model.moe_layers)]
        try:
            rows[spec] = training_step(layers, a.stages, a.micro_batches, gpus, nvlink_Bps,
                                       a.grad_bytes, p2p, a.overlap or spec != s,
                                       not a.no_overlap_grad_reduce)
        except TrainingError as e:
            return fail(str(e))
    ref = rows[a.scheme]["step_us"]
    print(f"\none training step: {model.layers} layers over {a.stages} stages, "
          f"{a.micro_batches} micro-batches, 1F1B{' with micro-batch overlap' if a.overlap else ''}"
          f"; activations {p2p:.1f} us per stage hop")
    print(f"{'scheme':16s} {'MoE bwd':>9s} {'step ms':>9s} {'bubble ms':>10s} {'bubble':>7s} "
          f"{'exposed ms':>11s} {'DP ms':>7s} {'DP exp ms':>10s} {'MoE share':>10s} {'speedup':>8s}")
    for s, r in rows.items():
        print(f"{s:16s} {moe[base_of[s]]['backward_source']:>9s} {r['step_us'] / 1e3:9.3f} "
              f"{r['bubble_us'] / 1e3:10.3f} {100 * r['bubble_fraction']:6.1f}% "
              f"{r['exposed_comm_us'] / 1e3:11.3f} {max(r['dp_allreduce_us']) / 1e3:7.3f} "
              f"{max(r['dp_exposed_us']) / 1e3:10.3f} {100 * r['moe_share']:9.1f}% "
              f"{r['step_us'] / ref:7.2f}x")
    print(f"(speedup: {a.scheme}'s step is this many times faster than the row's scheme; "
          f"exposed: the busiest stage's exposed MoE time over the step; DP: the largest stage's "
          f"gradient all-reduce and its exposed part)")
    extrapolated = {}
    if setting.get("extrapolate") == "amdahl":
        extrapolated = amdahl_rows({spec: moe[s] for spec, s in base_of.items()}, rows,
                                   a.scheme)
        print(f"\nthe MoE-Hub paper's extrapolation (the baseline step's MoE share f sped up by the "
              f"MoE-layer speedup s: 1 / ((1 - f) + f / s)) beside the simulated step:")
        print(f"{'over':12s} {'MoE share':>10s} {'layer sp.':>10s} {'extrapolated':>13s} "
              f"{'simulated':>10s}")
        for s, x in extrapolated.items():
            print(f"{s:12s} {100 * x['moe_share']:9.1f}% {x['layer_speedup']:9.2f}x "
                  f"{x['extrapolated_speedup']:12.2f}x {x['simulated_speedup']:9.2f}x")
    if setting:
        print(f"\nsetting {setting['name']} ({setting['file']}); sources:")
        for src in setting["sources"]:
            print(f"  - {src}")
        for name, text in setting.get("published", {}).items():
            print(f"  published {name}: {text} (context, never a target)")
    if a.json:
        a.json.write_text(json.dumps(dict(
            model=a.model, scheme=a.scheme, system=a.system, tokens_per_gpu=tokens,
            stages=a.stages,
            micro_batches=a.micro_batches, overlap=a.overlap, p2p_us=p2p,
            attention=dict(forward_us=attn[0], backward_us=attn[1]),
            dense_layer=dict(forward_us=dl[0], backward_us=dl[1]) if dl else None,
            moe_layer=moe, steps=rows, setting=setting.get("name"),
            extrapolated=extrapolated), indent=1))
    return 0


def amdahl_rows(moe, rows, scheme):
    """The MoE-Hub paper's end-to-end extrapolation for `scheme` over each other scheme b: b's
    step has the MoE share f (its MoE layers' forward and backward time over the stages' busy
    time, rows[b]['moe_share']), and the MoE layers run s = (b's MoE forward + backward) / (the
    scheme's) times faster; everything else unchanged gives 1 / ((1 - f) + f / s). Beside it the
    simulated step's speedup (rows[b] step / rows[scheme] step), which also counts the bubble,
    the exposed time and the overlap the extrapolation leaves as they were."""
    mine = moe[scheme]["forward_us"] + moe[scheme]["backward_us"]
    out = {}
    for b, r in rows.items():
        if b == scheme:
            continue
        f = r["moe_share"]
        s = (moe[b]["forward_us"] + moe[b]["backward_us"]) / mine
        out[b] = dict(moe_share=f, layer_speedup=s, extrapolated_speedup=1.0 / ((1 - f) + f / s),
                      simulated_speedup=r["step_us"] / rows[scheme]["step_us"])
    return out

