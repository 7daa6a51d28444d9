#!/usr/bin/env python3
"""The seed papers' evaluation grids as one command (`python tools/layer_table.py --grid NAME`).

    python tools/layer_table.py --grid moehub_paper --quick --json out.json
    python tools/layer_table.py --grid moehub_paper --workers 2 --markdown grid.md
    python tools/layer_table.py --grid moehub_paper --report      # the finished points only
    python tools/layer_table.py --grid moehub_paper --scheduler tcp://HOST:8786   # Dask cluster

`moehub_paper` is the MoE-Hub paper's comparison (arXiv 2605.05888): schemes moehub, megatron,
tutel, overlap (Comet-like) and deepep x models Mixtral-8x7B, Qwen1.5-MoE-A2.7B ("Qwen2-MoE") and
Phi-3.5-MoE x total tokens (sequence x GPUs) 128..32768 x 2..16 GPUs x per-expert load standard
deviation 0..0.05 (routing kind normal), on the DGX H800 the MoE-Hub authors simulated
(configs/experiments/layer/base_dgx_h800.yaml; 16 GPUs: one NVSwitch domain of 16 H800s). Cells whose model cannot be
placed (experts not a multiple of the GPUs: Qwen1.5's 60 experts on 8 or 16 GPUs, Mixtral's 8 on
16) are listed as skipped. `--quick` runs a subset (4 and 8 GPUs, 1024 and 8192 total tokens,
std 0.032).

It is a `moehub-sim sweep`: the grid is written as a sweep file (<outdir>/<name>.yaml, runnable
with `moehub-sim sweep` too) and run by moehub_arch.sweep (progress bar, resume: finished points
are kept in <outdir>/points/, `--workers`, `--scheduler`). Then it prints a Markdown table of
moehub's speedup over every baseline per cell (baseline layer time / moehub layer time) and the
min / geomean / max per baseline, and with --json writes every cell's figures.

`--hub-design NAME` runs the grid with another MoE-Hub design from configs/hub/designs/ (e.g.
`expert_order`, `first_reading`; the grid's config already extends `published`): the design file's
keys are added to the sweep's fixed overrides (they change nothing for the baseline schemes, which
re-run beside it so every speedup compares runs of one sweep) and the default output directory
gets the design's name.
"""
import argparse
import json
import math
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hub_designs import DESIGNS_DIR, design_overrides  # noqa: E402  (one reading of a design file)

HUB = "moehub"
GRIDS = {
    "moehub_paper": {
        "config": "configs/experiments/layer/base_dgx_h800.yaml",
        "set": {"workload.layer.routing.kind": "normal"},
        "schemes": ["moehub", "megatron", "tutel", "overlap", "deepep"],
        "models": ["mixtral_8x7b", "qwen1_5_moe_a2_7b", "phi3_5_moe"],
        "total_tokens": [128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768],
        "gpus": [2, 4, 8, 16],
        "std": [0.0, 0.032, 0.05],
        "quick": {"total_tokens": [1024, 8192], "gpus": [4, 8], "std": [0.032]},
    },
}
# Blackwell against Hopper (docs/blackwell.md): every scheme on one layer shape that places whole
# experts on 8-72 GPUs (workloads/models/dsv3_288e.yaml), at small token counts, uniform routing.
# `cells` lists (GPUs, total tokens) pairs instead of crossing `gpus` with `total_tokens`:
# 16 tokens per GPU up to 32 GPUs, 8 on 72.
_ALL_SCHEMES = ["moehub", "deepep", "overlap", "megatron", "tutel", "deepep_ll", "hiermoe", "nvls",
                "dysharp", "counted"]
# (rpm.allocation_ids: one st.rowsp allocation per routed expert, the reasoning of its default of
# 256 for DeepSeek-V3, applied to the 288 experts here)
_BW = {"set": {"workload.layer.routing.kind": "uniform",
               "system.gpu.hub.moe.rpm.allocation_ids": 288}, "schemes": _ALL_SCHEMES,
       "models": ["dsv3_288e"], "total_tokens": [], "gpus": [], "std": [0.0]}
GRIDS.update({
    "blackwell_hgx_b200": dict(_BW, config="configs/experiments/layer/base_hgx_b200.yaml",
                               cells=[(8, 128)], quick={"cells": [(8, 128)]}),
    "blackwell_gb200_nvl72": dict(_BW, config="configs/experiments/layer/base_gb200_nvl72.yaml",
                                  cells=[(8, 128), (16, 256), (32, 512), (72, 576)],
                                  quick={"cells": [(8, 128), (72, 576)]}),
    "hopper_dgx_h100": dict(_BW, config="configs/experiments/layer/base_dgx_h100.yaml",
                            cells=[(8, 128)], quick={"cells": [(8, 128)]}),
    "hopper_gh200_nvl32": dict(_BW, config="configs/experiments/layer/base_gh200_nvl32.yaml",
                               cells=[(8, 128), (16, 256), (32, 512)],
                               quick={"cells": [(8, 128), (32, 512)]}),
})
STATS = ["system.moe.layer_time_us", "system.moe.phase.*", "system.moe.overhead_us",
         "system.moe.ideal_layer_us", "system.moe.ideal_layer_fraction", "system.moe.rows_dropped",
         "system.moe.nvlink.tx_utilization_mean"]


def cells(grid, quick):
    """(model, gpus, total tokens, std, skip reason or None) of the grid."""
    from moehub_arch.config.models import load_model
    g = dict(grid, **grid["quick"]) if quick else grid
    pairs = g.get("cells") or [(p, t) for p in g["gpus"] for t in g["total_tokens"]]
    out = []
    for m in g["models"]:
        experts = load_model(m).experts
        for p, total in pairs:
            for std in g["std"]:
                why = None
                if experts % p:
                    why = f"{experts} experts do not divide over {p} GPUs"
                elif total % p:
                    why = f"{total} tokens do not divide over {p} GPUs"
                out.append((m, p, total, std, why))
    return out


def write_sweep(name, grid, quick, outdir, design=None):
    """The grid as a sweep file (explicit points), with a hub design's keys among its fixed
    overrides; returns its path and the cells."""
    cs = cells(grid, quick)
    points = [{"scheme": s, "workload.layer.model": m, "system.num_gpus": p,
               "workload.layer.tokens_per_gpu": total // p, "workload.layer.routing.std": std}
              for (m, p, total, std, why) in cs if why is None for s in grid["schemes"]]
    sweep = {"name": name + ("_quick" if quick else ""), "config": str(REPO / grid["config"]),
             "set": {**grid["set"], **(design_overrides(design) if design else {})},
             "points": points, "stats": STATS, "outdir": str(outdir)}
    outdir.mkdir(parents=True, exist_ok=True)
    path = outdir / f"{sweep['name']}.yaml"
    path.write_text("# generated by tools/layer_table.py --grid; run with moehub-sim sweep too\n"
                    + yaml.safe_dump(sweep, sort_keys=False, default_flow_style=None))
    return path, cs


def collect(rows):
    """{(model, gpus, total, std, scheme): stats} from the sweep's result rows."""
    out = {}
    for r in rows:
        v = dict(r["point"].values)
        p = int(v["system.num_gpus"])
        key = (v["workload.layer.model"], p, int(v["workload.layer.tokens_per_gpu"]) * p,
               float(v["workload.layer.routing.std"]), v["scheme"])
        out[key] = r["stats"] if r["status"].startswith("ok") else None
    return out  # a point absent from `rows` (not run yet) is absent here; a failed one is None


def summarize(grid, cs, results):
    """Per cell: each scheme's figures and moehub's speedups; per baseline: min/geomean/max."""
    baselines = [s for s in grid["schemes"] if s != HUB]
    table, speedups = [], {b: [] for b in baselines}
    for m, p, total, std, why in cs:
        cell = {"model": m, "gpus": p, "total_tokens": total, "std": std, "skipped": why,
                "schemes": {}, "speedup": {}}
        if why is None:
            for s in grid["schemes"]:
                if (m, p, total, std, s) in results:  # else not run (yet): absent from the cell
                    cell["schemes"][s] = results[(m, p, total, std, s)]
            hub = cell["schemes"].get(HUB)
            for b in baselines:
                base = cell["schemes"].get(b)
                if hub and base:
                    x = base["system.moe.layer_time_us"] / hub["system.moe.layer_time_us"]
                    cell["speedup"][b] = x
                    speedups[b].append(x)
        table.append(cell)
    summary = {}
    for b, xs in speedups.items():
        if xs:
            summary[b] = {"cells": len(xs), "min": min(xs), "max": max(xs),
                          "geomean": math.exp(sum(math.log(x) for x in xs) / len(xs))}
    return table, summary


def _missing(cell, scheme):
    return "failed" if scheme in cell["schemes"] else "not run"


def markdown(grid, table, summary):
    baselines = [s for s in grid["schemes"] if s != HUB]
    heads = (["model", "GPUs", "total tokens", "std", "moehub us", "moehub / ideal"]
             + [f"vs {b}" for b in baselines])
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for c in table:
        first = [c["model"], str(c["gpus"]), str(c["total_tokens"]), f"{c['std']:g}"]
        if c["skipped"]:
            lines.append("| " + " | ".join(first + [f"skipped: {c['skipped']}"]
                                           + [""] * (len(heads) - 5)) + " |")
            continue
        hub = c["schemes"].get(HUB)
        if hub:
            first += [f"{hub['system.moe.layer_time_us']:.1f}",
                      f"{hub['system.moe.ideal_layer_fraction']:.1%}"]
        else:
            first += [_missing(c, HUB), ""]
        for b in baselines:
            x = c["speedup"].get(b)
            base = c["schemes"].get(b)
            note = ""
            if base and base.get("system.moe.rows_dropped"):
                note = f" ({int(base['system.moe.rows_dropped'])} dropped)"
            first.append(_missing(c, b) if base is None else (f"{x:.2f}x{note}" if x else ""))
        lines.append("| " + " | ".join(first) + " |")
    lines += ["", "| baseline | cells | min | geomean | max |", "|---|---|---|---|---|"]
    for b in baselines:
        if b in summary:
            s = summary[b]
            lines.append(f"| {b} | {s['cells']} | {s['min']:.2f}x | {s['geomean']:.2f}x | "
                         f"{s['max']:.2f}x |")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(prog="layer_table.py --grid", description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", required=True, choices=sorted(GRIDS))
    ap.add_argument("--quick", action="store_true", help="the grid's small subset")
    ap.add_argument("--outdir", help="sweep output (default out/grid/<name>[_quick]_<platform "
                                     "config>)")
    ap.add_argument("--workers", type=int, help="local worker processes (default: CPU count)")
    ap.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="run on a Dask cluster")
    ap.add_argument("--json", help="write every cell's figures and the summary to this file")
    ap.add_argument("--markdown", help="also write the table to this Markdown file")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.add_argument("--hub-design", choices=sorted(p.stem for p in DESIGNS_DIR.glob("*.yaml")),
                    help="run scheme moehub with this hub design (configs/hub/designs/; default: "
                         "the grid config's, published)")
    ap.add_argument("--report", action="store_true",
                    help="run nothing: the table of the points that have finished (an interrupted "
                         "grid's or one still running); the others are marked 'not run'")
    args = ap.parse_args(argv)
    from moehub_arch.config import ConfigError
    from moehub_arch.sweep import SweepError, finished_rows, load_sweep, run_sweep
    grid = GRIDS[args.grid]
    name = args.grid + ("_quick" if args.quick else "") + (f"_{args.hub_design}" if args.hub_design
                                                             else "")
    # the platform is in the default directory's name: resume matches points by their overrides
    # only, so results of another platform must not be found there
    outdir = Path(args.outdir or Path("out/grid") / f"{name}_{Path(grid['config']).stem}")
    try:
        path, cs = write_sweep(args.grid + (f"_{args.hub_design}" if args.hub_design else ""),
                               grid, args.quick, outdir, args.hub_design)
        sweep = load_sweep(path, outdir)
        if args.report:
            done = finished_rows(sweep)
            rows = [done[p.id] for p in sweep.points if p.id in done]
            print(f"{len(rows)} of {len(sweep.points)} points finished (in {outdir})")
        else:
            _, rows = run_sweep(sweep, workers=args.workers, scheduler=args.scheduler,
                                progress=not args.quiet)
    except (SweepError, ConfigError) as e:
        print(f"layer_table: {e}", file=sys.stderr)
        return 2
    table, summary = summarize(grid, cs, collect(rows))
    lines = markdown(grid, table, summary)
    print("\n".join(lines))
    if args.markdown:
        Path(args.markdown).write_text("\n".join(lines) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "grid": args.grid, "quick": args.quick, "config": grid["config"],
            "points": len(sweep.points), "points_finished": sum(
                r["status"].startswith("ok") for r in rows),
            "hub_design": args.hub_design or "published",
            "schemes": grid["schemes"], "cells": table, "summary": summary}, indent=1))
    failed = [r["point"].id for r in rows if r["status"] == "error"]
    for pid in failed:
        err = (outdir / "points" / pid / "error.txt").read_text().strip()
        print(f"layer_table: point {pid} failed: {err}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
