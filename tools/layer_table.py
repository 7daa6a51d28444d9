#!/usr/bin/env python3
"""Run the MoE layer experiments and print one table: model x tokens per GPU x scheme -> layer
time, where the time goes, and the speedup of `moehub` over each baseline.

    python tools/layer_table.py                       # all 27 configs in configs/experiments/layer/
    python tools/layer_table.py --models deepseek_v3 --tokens 1024 --jobs 2
    python tools/layer_table.py --markdown table.md --csv table.csv

Each run writes its usual output directory under --outdir (default out/layer_table/<config>);
a run whose stats.json is already there is reused (delete it or pass --force to re-run). Runs go
through `moehub-sim run`, in --jobs parallel processes.

    python tools/layer_table.py --grid moehub_paper [--quick] [--json out.json]

runs a seed paper's evaluation grid instead (tools/layer_grid.py: its own options, --help there).
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYER_DIR = REPO / "configs" / "experiments" / "layer"
MODELS = ("mixtral_8x7b", "deepseek_v3", "qwen3_30b_a3b")
TOKENS = (1024, 4096, 8192)
SCHEMES = ("deepep", "overlap", "moehub")
COLUMNS = (  # (stat, header) per run
    ("system.moe.layer_time_us", "layer_us"),
    ("system.moe.phase.mediation_us", "mediation_us"),
    ("system.moe.phase.dispatch_us", "dispatch_us"),
    ("system.moe.phase.expert_us", "expert_us"),
    ("system.moe.phase.combine_us", "combine_us"),
    ("system.moe.overhead_us", "exposed_us"),
    ("system.moe.sm.computing", "sm_compute"),
    ("system.moe.nvlink.tx_utilization_mean", "link_util"),
)


def run_one(config, outdir, force, extra):
    stats_file = outdir / "stats.json"
    if stats_file.exists() and not force:
        return json.loads(stats_file.read_text()), 0.0, "reused"
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "moehub_arch", "run", str(config), "-o", str(outdir), "--quiet"]
    for e in extra:
        cmd += ["--set", e]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        return None, wall, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
    return json.loads(stats_file.read_text()), wall, "ran"


def main(argv=None):
    args_in = sys.argv[1:] if argv is None else list(argv)
    if any(a == "--grid" or a.startswith("--grid=") for a in args_in):
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import layer_grid
        return layer_grid.main(args_in)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--tokens", nargs="+", type=int, default=list(TOKENS))
    ap.add_argument("--schemes", nargs="+", default=list(SCHEMES))
    ap.add_argument("--outdir", default="out/layer_table")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 1)))
    ap.add_argument("--force", action="store_true", help="re-run even where stats.json exists")
    ap.add_argument("--set", dest="overrides", action="append", default=[],
                    help="KEY=VALUE applied to every run (e.g. workload.layer.routing.kind=skewed)")
    ap.add_argument("--markdown", help="also write the table as Markdown to this file")
    ap.add_argument("--csv", help="also write every run's figures as CSV to this file")
    args = ap.parse_args(argv)

    points = [(m, t, s) for m in args.models for t in args.tokens for s in args.schemes]
    missing = [f"{m}_{t}_{s}.yaml" for m, t, s in points if not (LAYER_DIR / f"{m}_{t}_{s}.yaml").is_file()]
    if missing:
        print(f"layer_table: no such config in {LAYER_DIR}: {', '.join(missing)}", file=sys.stderr)
        return 2
    out = Path(args.outdir)
    results = {}

    def job(p):
        m, t, s = p
        name = f"{m}_{t}_{s}"
        return p, run_one(LAYER_DIR / f"{name}.yaml", out / name, args.force, args.overrides)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:   # each job is a subprocess
        for (m, t, s), (stats, wall, how) in pool.map(job, points):
            results[(m, t, s)] = stats
            state = f"{wall:.0f} s" if how == "ran" else how
            print(f"  {m:14s} {t:5d} {s:8s} {state}", file=sys.stderr, flush=True)

    rows = []
    for m, t, s in points:
        stats = results[(m, t, s)]
        row = {"model": m, "tokens": t, "scheme": s}
        for key, head in COLUMNS:
            row[head] = stats[key]["value"] if stats and key in stats else None
        rows.append(row)
    lines = format_table(rows, args.schemes)
    print("\n".join(lines))
    if args.markdown:
        Path(args.markdown).write_text("\n".join(lines) + "\n")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0 if all(results.values()) else 1


def format_table(rows, schemes):
    """Markdown table: one line per (model, tokens, scheme), speedup of moehub vs each baseline."""
    heads = ["model", "tokens/GPU", "scheme"] + [h for _, h in COLUMNS] + ["moehub speedup"]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    by_point = {(r["model"], r["tokens"], r["scheme"]): r for r in rows}
    for r in rows:
        hub = by_point.get((r["model"], r["tokens"], "moehub"))
        speed = ""
        if r["scheme"] != "moehub" and hub and hub["layer_us"] and r["layer_us"]:
            speed = f"{r['layer_us'] / hub['layer_us']:.2f}x"
        cells = [r["model"], str(r["tokens"]), r["scheme"]]
        for _, h in COLUMNS:
            v = r[h]
            cells.append("failed" if v is None else (f"{v:.3f}" if h in ("sm_compute", "link_util")
                                                      else f"{v:.1f}"))
        lines.append("| " + " | ".join(cells + [speed]) + " |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
