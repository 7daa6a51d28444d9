#!/usr/bin/env python3
"""Run the MoE layer experiments and print one table: model x tokens per GPU x scheme x system ->
layer time, where the time goes, and the speedup of `moehub` over each baseline.

    python tools/layer_table.py                       # all 27 DGX H100 configs in configs/experiments/layer/
    python tools/layer_table.py --models deepseek_v3 --tokens 1024 --jobs 2
    python tools/layer_table.py --systems hgx_h800 dgx_h100 --tokens 1024 --schemes deepep moehub
    python tools/layer_table.py --markdown table.md --csv table.csv --json table.json

Configs are `<model>_<tokens>_<scheme>.yaml` for the DGX H100 and `<model>_<tokens>_<scheme>_<system>.yaml`
for any other system where the repository ships one (hgx_h800, dgx_h800: 256, 1024 and 4096 tokens
per GPU); any other point - any model of workloads/models/, token count and system of
configs/systems/ - runs the config `moehub-sim layer` composes for it (moehub_arch/experiment.py).

Scheme `moehub` is the MoE-Hub design the layer configs extend (configs/hub/designs/published.yaml,
the authors' design). Two more scheme names run the same moehub configs with another hub design put
on top (the design file's keys as --set overrides):
    moehub_first    configs/hub/designs/first_reading.yaml  (this project's first reading of the hub)
    moehub_expert   configs/hub/designs/expert_order.yaml   (the published design + the DAM's expert order)
The table gives the speedup of each moehub design present over every baseline on the same point.

Each run writes its usual output directory under --outdir (default out/layer_table/<config>);
a run whose stats.json is already there is reused only if it was made from the same inputs - the
config, the --set overrides and the project's sources (tools/run_cache.py) - and re-run otherwise
(or with --force). Runs go through
`moehub-sim run`, in --jobs parallel processes.

    python tools/layer_table.py --grid moehub_paper [--quick] [--json out.json]

runs a seed paper's evaluation grid instead (tools/layer_grid.py: its own options, --help there).
"""
import argparse
import csv
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from hub_designs import design_overrides  # noqa: E402
from run_cache import run_or_reuse  # noqa: E402

from moehub_arch.config import ConfigError  # noqa: E402
from moehub_arch.experiment import write_layer_config  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LAYER_DIR = REPO / "configs" / "experiments" / "layer"
MODELS = ("mixtral_8x7b", "deepseek_v3", "qwen3_30b_a3b")
TOKENS = (1024, 4096, 8192)
SCHEMES = ("deepep", "overlap", "moehub")
SYSTEMS = ("dgx_h100",)
# scheme name in the table -> hub design file put on top of the moehub layer config
HUB_VARIANTS = {"moehub_first": "first_reading.yaml", "moehub_expert": "expert_order.yaml"}
DEFAULT_SYSTEM = "dgx_h100"     # its configs carry no system suffix
COLUMNS = (  # (stat, header) per run
    ("system.moe.layer_time_us", "layer_us"),
    ("system.moe.phase.mediation_us", "mediation_us"),
    ("system.moe.phase.dispatch_us", "dispatch_us"),
    ("system.moe.dispatch_link_efficiency", "dispatch_link_eff"),
    ("system.moe.phase.expert_us", "expert_us"),
    ("system.moe.phase.combine_us", "combine_us"),
    ("system.moe.overhead_us", "exposed_us"),
    ("system.moe.sm.computing", "sm_compute"),
    ("system.moe.nvlink.tx_utilization_mean", "link_util"),
)


def run_one(config, outdir, force, extra):
    """(stats or None, wall seconds, "reused" | "ran" | the error line) of one layer run."""
    stats, how, wall, error = run_or_reuse(config, outdir, extra, force)
    return stats, wall, error or how


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
    ap.add_argument("--systems", nargs="+", default=list(SYSTEMS),
                    help="systems to run on (config suffix; default dgx_h100)")
    ap.add_argument("--outdir", default="out/layer_table")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 1)))
    ap.add_argument("--force", action="store_true",
                    help="re-run even where a run from the same inputs exists")
    ap.add_argument("--set", dest="overrides", action="append", default=[],
                    help="KEY=VALUE applied to every run (e.g. workload.layer.routing.kind=skewed)")
    ap.add_argument("--markdown", help="also write the table as Markdown to this file")
    ap.add_argument("--csv", help="also write every run's figures as CSV to this file")
    ap.add_argument("--json", help="also write every run's figures to this file: a list of objects "
                    "(model, tokens_per_gpu, scheme, system and every column)")
    args = ap.parse_args(argv)

    points = [(m, t, s, y) for y in args.systems for m in args.models for t in args.tokens
              for s in args.schemes]
    out = Path(args.outdir)
    configs = {}
    try:
        for p in points:
            configs[p] = point_config(*p, out / run_name(*p))
    except ConfigError as e:
        print(f"layer_table: {e}", file=sys.stderr)
        return 2
    results = {}

    def job(p):
        sets = design_sets(p[2]) + args.overrides
        return p, run_one(configs[p], out / run_name(*p), args.force, sets)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:   # each job is a subprocess
        for (m, t, s, y), (stats, wall, how) in pool.map(job, points):
            results[(m, t, s, y)] = stats
            state = f"{wall:.0f} s" if how == "ran" else how
            print(f"  {m:14s} {t:5d} {s:8s} {y:9s} {state}", file=sys.stderr, flush=True)

    rows = []
    for m, t, s, y in points:
        stats = results[(m, t, s, y)]
        row = {"model": m, "tokens": t, "scheme": s, "system": y}
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
    if args.json:
        objs = [{"model": r["model"], "tokens_per_gpu": r["tokens"], "scheme": r["scheme"],
                 "system": r["system"], **{h: r[h] for _, h in COLUMNS}} for r in rows]
        Path(args.json).write_text(json.dumps(objs, indent=1) + "\n")
    return 0 if all(results.values()) else 1


def config_name(model, tokens, scheme, system):
    """The layer config's file name (without .yaml) of one point (a hub design variant runs the
    moehub config)."""
    name = f"{model}_{tokens}_{'moehub' if scheme in HUB_VARIANTS else scheme}"
    return name if system == DEFAULT_SYSTEM else f"{name}_{system}"


def point_config(model, tokens, scheme, system, outdir):
    """The config of one point: the shipped file where there is one, else the config `moehub-sim
    layer` composes for it (moehub_arch/experiment.py: the same keys a shipped file would hold),
    written to OUTDIR/layer.yaml - so any model, token count and system runs."""
    name = config_name(model, tokens, scheme, system)
    shipped = LAYER_DIR / f"{name}.yaml"
    if shipped.is_file():
        return shipped
    try:
        return write_layer_config(Path(outdir) / "layer.yaml", model=model, tokens=tokens,
                                  scheme="moehub" if scheme in HUB_VARIANTS else scheme,
                                  system=system)
    except ConfigError as e:
        raise ConfigError(f"no config {name}.yaml in {LAYER_DIR}, and none can be composed: "
                          f"{e}") from None


def run_name(model, tokens, scheme, system):
    """The output folder's name of one point: the config's, with the hub design variant's name."""
    name = config_name(model, tokens, scheme, system)
    return name + scheme[len("moehub"):] if scheme in HUB_VARIANTS else name


def design_sets(scheme):
    """The --set overrides that put a hub design variant on top of the moehub config ([] for a
    scheme that runs its own config)."""
    if scheme not in HUB_VARIANTS:
        return []
    return [f"{k}={v}" for k, v in design_overrides(Path(HUB_VARIANTS[scheme]).stem).items()]


def is_hub(scheme):
    return scheme == "moehub" or scheme in HUB_VARIANTS


def format_table(rows, schemes):
    """Markdown table: one line per (model, tokens, scheme, system), and on every baseline's line
    the speedup of each moehub design in the table over it (baseline time / moehub time) on the
    same system."""
    hubs = [s for s in schemes if is_hub(s)]
    heads = (["model", "tokens/GPU", "scheme", "system"] + [h for _, h in COLUMNS]
             + [f"{h} speedup" for h in hubs])
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    by_point = {(r["model"], r["tokens"], r["scheme"], r.get("system", DEFAULT_SYSTEM)): r
                for r in rows}
    for r in rows:
        speed = []
        for h in hubs:
            hub = by_point.get((r["model"], r["tokens"], h, r.get("system", DEFAULT_SYSTEM)))
            ok = not is_hub(r["scheme"]) and hub and hub["layer_us"] and r["layer_us"]
            speed.append(f"{r['layer_us'] / hub['layer_us']:.2f}x" if ok else "")
        cells = [r["model"], str(r["tokens"]), r["scheme"], r.get("system", DEFAULT_SYSTEM)]
        for _, h in COLUMNS:
            v = r[h]
            cells.append("failed" if v is None else (f"{v:.3f}" if h in ("sm_compute", "link_util",
                                                                         "dispatch_link_eff")
                                                      else f"{v:.1f}"))
        lines.append("| " + " | ".join(cells + speed) + " |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
