"""`moehub-sim e2e` without --training: one forward (prefill) step of a whole MoE model, composed
from simulated layers.

    moehub-sim e2e --model deepseek_v3 --scheme moehub --system dgx_h100 --quick
    moehub-sim e2e --model mixtral_8x7b --scheme moehub --compare deepep overlap --tokens-per-gpu 1024

Each distinct layer is simulated once (moehub-sim runs, reused from --outdir when their stats
are there) and the step is composed from them:

    step = dense_layers x dense layer + moe_layers x (attention part + MoE layer[scheme])

- attention part: workload.block kind attention on one GPU (scheme tp_none): norm, QKV
  projection, causal attention, output projection, residual over the GPU's tokens, one sequence
  of --tokens-per-gpu tokens (attention data-parallel, experts expert-parallel: every GPU runs
  the same attention on its own tokens, as DeepSeek-V3's and DySHARP's deployments do);
- dense layer: workload.block kind transformer on one GPU (attention part, norm, SwiGLU FFN of
  the model's dense width, residual);
- MoE layer: workload.layer of the model on the whole system with each scheme (dispatch, experts,
  combine), the configs of configs/experiments/layer/ (base_<system>.yaml).

Not modelled (the step time leaves them out): the embedding and the LM head, DeepSeek-V3's
multi-head latent attention (its low-rank Q/KV projections and 192-wide query/key heads: the
attention here is multi-head attention with head dim hidden / heads) and multi-token prediction,
grouped-query attention (Mixtral's 8 and Qwen3-30B-A3B's 4 KV heads: K and V are projected for
every head here), Qwen3-30B-A3B's head dim 128 (its 32 query heads are 4096 wide against a hidden
size of 2048: here 32 heads of 64, so its QKV and output projections are half their real size),
rotary embeddings, the norm and residual around the MoE layer, overlap between layers, pipeline
bubbles, the optimizer and data loading, and the backward pass (forward only).
"""
import json

from ..config import ConfigError, load_config
from ..config.models import load_model
from . import layers as e2e    # e2e.run looked up at each call, as training.py does
from .layers import DENSE, QUICK_TOKENS, block_model_file, system_files, value


def forward_step(a, fail):
    """The forward step of the parsed `moehub-sim e2e` arguments `a`; `fail(message)` reports bad
    input and returns the exit status."""
    try:
        base, system = system_files(a.system)
    except ConfigError as e:
        return fail(str(e))
    tokens = QUICK_TOKENS if a.quick else a.tokens_per_gpu
    if tokens <= 0 or tokens % 64:
        return fail(f"--tokens-per-gpu {tokens}: expected a positive multiple of 64 (the "
                    f"attention kernel's tile)")
    try:
        model = load_model(a.model)
    except ConfigError as e:
        return fail(str(e))
    dense = DENSE[a.model]
    tag = f"{a.model}_{tokens}_{a.system}"
    out = a.outdir / tag
    bm = block_model_file(out, model, dense, tokens)
    one_gpu = ["system.num_gpus=1", f"workload.block.model={bm}", "workload.block.tp=1",
               "workload.block.scheme=tp_none", "workload.block.gemm_tbs=132"]
    layers = {}
    print(f"e2e: {a.model} on {a.system}, {tokens} tokens per GPU; simulating each distinct layer "
          f"once (outputs under {out})", flush=True)
    st, how = e2e.run(system, out / "attention", one_gpu + ["workload.block.kind=attention"],
                      a.force)
    layers["attention"] = value(st, "system.block.time_us")
    print(f"  attention part (1 GPU):           {layers['attention']:10.1f} us  [{how}]", flush=True)
    dense_layers = model.layers - model.moe_layers
    if dense_layers:
        st, how = e2e.run(system, out / "dense_layer",
                          one_gpu + ["workload.block.kind=transformer"], a.force)
        layers["dense_layer"] = value(st, "system.block.time_us")
        print(f"  dense layer (1 GPU):              {layers['dense_layer']:10.1f} us  [{how}]",
              flush=True)
    schemes = [a.scheme] + [s for s in a.compare if s != a.scheme]
    moe = {}
    for s in schemes:
        st, how = e2e.run(base, out / f"moe_{s}", [f"scheme={s}", f"workload.layer.model={a.model}",
                                                  f"workload.layer.tokens_per_gpu={tokens}"],
                          a.force)
        moe[s] = value(st, "system.moe.layer_time_us")
        print(f"  MoE layer, {s:22s} {moe[s]:10.1f} us  [{how}]", flush=True)

    rows = {}
    for s in schemes:
        attn = model.moe_layers * layers["attention"]
        dl = dense_layers * layers.get("dense_layer", 0.0)
        ml = model.moe_layers * moe[s]
        rows[s] = dict(step_us=attn + dl + ml, attention_us=attn, dense_layers_us=dl, moe_us=ml)
    gpus = load_config(base).system.num_gpus
    print(f"\none forward step: {model.layers} layers = {dense_layers} dense + {model.moe_layers} "
          f"MoE, {tokens} tokens per GPU x {gpus} GPUs")
    print(f"{'scheme':12s} {'step ms':>10s} {'attention ms':>13s} {'dense ms':>10s} "
          f"{'MoE ms':>10s} {'MoE share':>10s} {'speedup':>8s}")
    ref = rows[a.scheme]["step_us"]
    for s, r in rows.items():
        print(f"{s:12s} {r['step_us'] / 1e3:10.3f} {r['attention_us'] / 1e3:13.3f} "
              f"{r['dense_layers_us'] / 1e3:10.3f} {r['moe_us'] / 1e3:10.3f} "
              f"{100 * r['moe_us'] / r['step_us']:9.1f}% {r['step_us'] / ref:8.2f}x")
    print(f"(speedup: {a.scheme}'s step time is this many times faster than the row's scheme)")
    print("not modelled: embedding and LM head, MLA and multi-token prediction (attention is "
          "MHA with head dim hidden / heads), GQA, rotary embeddings, the norm and residual around "
          "the MoE layer, overlap between layers, pipeline bubbles, optimizer, data loading, "
          "backward (moehub-sim e2e --training simulates a training step; docs/e2e.md)")
    if a.json:
        a.json.write_text(json.dumps(dict(model=a.model, system=a.system, tokens_per_gpu=tokens,
                                          layers=layers, moe_layer_us=moe, steps=rows), indent=1))
    return 0

