#!/usr/bin/env python3
"""Run one transformer layer of CAIS's three models (arXiv 2605.05628: Mega-GPT-4B, Mega-GPT-8B,
LLaMA-7B) at t = 8 on DGX H100 under every TP scheme and print one Markdown table: layer time,
its phases, NVLink utilisation, the switch's buffers (NVLS reduction buffer, CAIS merge table)
and the merge unit's evictions and timeouts.

    python tools/tp_table.py                                   # 3 models x 7 schemes
    python tools/tp_table.py --models mega_gpt_4b --schemes tp_nvls cais cais_kernels
    python tools/tp_table.py --tokens 4096 --json tp.json      # fewer tokens than seq x batch
    python tools/tp_table.py --training --tokens 3072          # one training step per layer

Configs: configs/experiments/tp/<model>_layer_<scheme>.yaml (prefill, the model's seq x batch
tokens unless --tokens). `cais` is CAIS with its graph-level dataflow (workload.block.cais_dataflow,
its default: one persistent kernel from the output projection to the layer's end, the "dataflow"
column); `cais_qkv_fused` adds cais_fusion (the QKV projection an AG-GEMM too);
`cais_dataflow_throttle` adds system.switch.cais.throttle=true (the switch holds back GPUs that
run ahead). The variants of cais before the dataflow (workload.block.cais_dataflow=false, every
collective a kernel): `cais_kernels`; `cais_fused` (workload.block.cais_fusion=true: the
attention's collectives fused into its GEMMs, docs/systems/cais.md);
`cais_throttle` and `cais_fused_throttle` (the switch's throttle); `cais_nosync` and
`cais_fused_nosync` (workload.block.cais_sync=false: no group sync table, only the common request
order). `t3` is T3's fused GEMM + reduce-scatter with ring all-gathers, `t3_nvls` the same with
NVLS all-gathers (workload.block.t3_collectives=nvls). Each run writes its output directory
under --outdir (default out/tp/<model>_<scheme>);
a run made from the same inputs is reused (tools/run_cache.py; --force re-runs). Runs go through
`moehub-sim run`, one at a time unless --jobs, niced.

--training runs configs/experiments/tp/<model>_layer_training.yaml (workload.block.passes:
training, the whole layer's forward and backward) with each scheme of --schemes that has a
backward (tp_ring, tp_nvls, sp_ring, sp_nvls, cais; default all five) and prints the forward, the
backward and its phases, the step, the backward's GEMM TFLOP/s, the backward / forward ratio and
for cais the merge-table peak per port and the merged share (a training step of cais runs its
forward with the collective kernels: workloads/block.py _runs_dataflow).
"""
import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_cache import run_or_reuse  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO / "configs" / "experiments" / "tp"
MODELS = ("mega_gpt_4b", "mega_gpt_8b", "llama_7b")
SCHEMES = ("tp_ring", "sp_ring", "tp_nvls", "sp_nvls", "t3", "cais", "cais_kernels")
# Variants of a scheme's config: (the scheme whose config runs, its --set overrides).
OLD = "workload.block.cais_dataflow=false"    # cais's collectives as kernels (before the dataflow)
VARIANTS = {"t3_nvls": ("t3", ["workload.block.t3_collectives=nvls"]),
            "cais_kernels": ("cais", [OLD]),
            "cais_fused": ("cais", ["workload.block.cais_fusion=true", OLD]),
            "cais_throttle": ("cais", ["system.switch.cais.throttle=true", OLD]),
            "cais_fused_throttle": ("cais", ["workload.block.cais_fusion=true",
                                             "system.switch.cais.throttle=true", OLD]),
            "cais_nosync": ("cais", ["workload.block.cais_sync=false", OLD]),
            "cais_fused_nosync": ("cais", ["workload.block.cais_fusion=true",
                                           "workload.block.cais_sync=false", OLD]),
            "cais_qkv_fused": ("cais", ["workload.block.cais_fusion=true"]),
            "cais_dataflow_throttle": ("cais", ["system.switch.cais.throttle=true"])}
PHASES = ("norm", "qkv", "attention", "o_proj", "residual", "ffn", "dataflow")
TRAINING_SCHEMES = ("tp_ring", "tp_nvls", "sp_ring", "sp_nvls", "cais")
# columns of the training table: (heading, the backward phases summed)
TRAINING_COLUMNS = (("FFN bwd", ("ffn_bwd_act", "ffn_dgrad", "ffn_wgrad")),
                    ("attention bwd", ("attention_bwd",)),
                    ("projections bwd", ("o_proj_dgrad", "o_proj_wgrad", "qkv_dgrad",
                                         "qkv_wgrad")),
                    ("norms bwd", ("norm_bwd",)),
                    ("dX all-reduces", ("dx_allreduce",)))


def run_training(model, scheme, tokens, outdir, force):
    config = CONFIG_DIR / f"{model}_layer_training.yaml"
    sets = [f"workload.block.scheme={scheme}"]
    if tokens:
        sets.append(f"workload.block.tokens={tokens}")
    out = outdir / (f"{model}_{scheme}_training" + (f"_{tokens}" if tokens else ""))
    data, how, wall, error = run_or_reuse(config, out, sets, force, nice=10)
    if error:
        return {"error": error}
    v = {k: (x["value"] if isinstance(x, dict) else x) for k, x in data.items()}
    row = {k: v[f"system.block.{k}"] for k in ("forward_time_us", "backward_time_us", "time_us",
                                               "backward_TFLOPs", "attention_bwd_TFLOPs",
                                               "ffn_TFLOPs", "attention_TFLOPs")}
    row.update(how=how, wall_s=wall, cais_peak=v.get("system.cais.table_peak_per_port", 0),
               merged=v.get("system.cais.complete_fraction", 0.0),
               evictions=v.get("system.cais.evictions", 0))
    for p in ("ffn_bwd_act", "ffn_dgrad", "ffn_wgrad", "attention_bwd", "o_proj_dgrad",
              "o_proj_wgrad", "qkv_dgrad", "qkv_wgrad", "norm_bwd", "dx_allreduce", "allreduce"):
        row[p] = v.get(f"system.block.{p}_time_us", 0.0)
    return row


def training_table(a):
    cells = [(m, s) for m in a.models for s in a.schemes]
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        rows = list(pool.map(lambda c: run_training(*c, a.tokens, a.outdir, a.force), cells))
    heads = " | ".join(h for h, _ in TRAINING_COLUMNS)
    print(f"| model | scheme | forward us | backward us | {heads} | step us | bwd / fwd | "
          f"backward TFLOP/s | merge table peak / port, merged, evictions | run s |")
    print("|---|---|" + "---:|" * (len(TRAINING_COLUMNS) + 7))
    result = {}
    for (m, s), r in zip(cells, rows):
        result[f"{m}/{s}/training"] = r
        if "error" in r:
            print(f"| {m} | {s} | error: {r['error']} |")
            continue
        cols = " | ".join(f"{sum(r[p] for p in ps):.0f}" for _, ps in TRAINING_COLUMNS)
        merge = (f"{r['cais_peak']:.0f} entries, {100 * r['merged']:.1f}%, {r['evictions']:.0f}"
                 if s.startswith("cais") else "-")
        print(f"| {m} | {s} | {r['forward_time_us']:.0f} | {r['backward_time_us']:.0f} | {cols} | "
              f"{r['time_us']:.0f} | {r['backward_time_us'] / r['forward_time_us']:.2f} | "
              f"{r['backward_TFLOPs']:.0f} | {merge} | {r['wall_s'] or 0:.0f} |")
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))
    return 0


def run_one(model, scheme, tokens, outdir, force):
    base, sets = VARIANTS.get(scheme, (scheme, []))
    config = CONFIG_DIR / f"{model}_layer_{base}.yaml"
    sets = list(sets)
    if tokens:
        sets.append(f"workload.block.tokens={tokens}")
    out = outdir / f"{model}_{scheme}" if not tokens else outdir / f"{model}_{scheme}_{tokens}"
    data, how, wall, error = run_or_reuse(config, out, sets, force, nice=10)
    if error:
        return {"error": error}
    v = {k: (x["value"] if isinstance(x, dict) else x) for k, x in data.items()}
    row = {"time": v["system.block.time_us"], "how": how, "wall_s": wall,
           "collectives": v.get("system.block.allreduce_time_us", 0.0)
           + v.get("system.block.reduce_scatter_time_us", 0.0)
           + v.get("system.block.all_gather_time_us", 0.0),
           "gaps": v.get("system.block.launch_gaps_us", 0.0),
           "util": v["system.block.link_utilisation_pct"],
           "nvls_buffer": v.get("system.nvls.buffer_peak_bytes", 0),
           "cais_peak": v.get("system.cais.table_peak_per_port", 0),
           "cais_peak_bytes": v.get("system.cais.table_peak_bytes_per_port", 0),
           "evictions": v.get("system.cais.evictions", 0),
           "timeouts": v.get("system.cais.timeouts", 0),
           "merged": v.get("system.cais.complete_fraction", 0.0),
           "sync_wait_us": v.get("system.cais.sync_wait_mean", 0) * 1e-6,
           "full_stalls": v.get("system.cais.full_stalls", 0),
           "skew_mean_us": v.get("system.cais.request_skew_mean", 0) * 1e-6,
           "skew_max_us": v.get("system.cais.request_skew_max", 0) * 1e-6}
    for p in PHASES:
        row[p] = v.get(f"system.block.{p}_time_us", 0.0)
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--training", action="store_true",
                    help="one training step of each layer (schemes tp_ring, tp_nvls, sp_ring, sp_nvls, cais)")
    ap.add_argument("--schemes", nargs="+", default=None,
                    choices=SCHEMES + tuple(v for v in VARIANTS if v not in SCHEMES))
    ap.add_argument("--tokens", type=int, default=0,
                    help="tokens per layer (0: the model's seq x batch, CAIS's shape)")
    ap.add_argument("--outdir", type=Path, default=REPO / "out" / "tp")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    if a.training:
        a.schemes = a.schemes or list(TRAINING_SCHEMES)
        bad = [s for s in a.schemes if s not in TRAINING_SCHEMES]
        if bad:
            ap.error(f"--training: no backward for {', '.join(bad)} (built: "
                     f"{', '.join(TRAINING_SCHEMES)})")
        return training_table(a)
    a.schemes = a.schemes or list(SCHEMES)
    cells = [(m, s) for m in a.models for s in a.schemes]
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        rows = list(pool.map(lambda c: run_one(*c, a.tokens, a.outdir, a.force), cells))
    print("| model | scheme | layer us | norms | QKV | attention | out proj | residuals | FFN | "
          "dataflow | collectives | gaps | link util | switch buffer peak / port | evictions / timeouts | "
          "merged | sync wait |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    result = {}
    for (m, s), r in zip(cells, rows):
        result[f"{m}/{s}"] = r
        if "error" in r:
            print(f"| {m} | {s} | error: {r['error']} |")
            continue
        if s.startswith("cais"):
            buf = f"{r['cais_peak']:.0f} entries ({r['cais_peak_bytes'] / 1024:.1f} KB)"
            ev = f"{r['evictions']:.0f} / {r['timeouts']:.0f}"
            merged = f"{100 * r['merged']:.1f}%"
            wait = f"{r['sync_wait_us']:.2f} us" if r["sync_wait_us"] else "-"
        elif r["nvls_buffer"]:
            buf, ev, merged, wait = f"{r['nvls_buffer'] / 1024:.0f} KB (NVLS)", "-", "-", "-"
        else:
            buf, ev, merged, wait = "-", "-", "-", "-"
        print(f"| {m} | {s} | {r['time']:.0f} | " + " | ".join(f"{r[p]:.0f}" for p in PHASES)
              + f" | {r['collectives']:.0f} | {r['gaps']:.0f} | {r['util']:.1f}% | {buf} | {ev} | "
              f"{merged} | {wait} |")
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
