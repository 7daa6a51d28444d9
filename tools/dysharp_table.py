#!/usr/bin/env python3
"""Run DySHARP's evaluation shapes (arXiv 2605.05607: S, M and L = DeepSeek-V3, top-k 8) per scheme
and print one Markdown table: layer time, phases and the wire bytes on the GPU-switch links, up
(GPU -> switch) and down (switch -> GPU), per GPU.

    python tools/dysharp_table.py                                  # S, M, L on dgx_h100, all schemes
    python tools/dysharp_table.py --shapes s --systems gh200_nvl32 --schemes deepep nvls
    python tools/dysharp_table.py --json table.json

Configs: configs/experiments/dysharp/dysharp_<shape>_<system>.yaml, the scheme set with --set.
Each run writes its output directory under --outdir (default out/dysharp/<config>_<scheme>); a run
made from the same inputs is reused (tools/run_cache.py; --force re-runs). Runs go through `moehub-sim run`,
in --jobs parallel processes (niced).

Scheme `dysharp` is DySHARP itself (dymultimem.st dispatch, dymultimem.ld_reduce combine) with
its token-centric fusion (the default, workload.layer.dysharp.fusion: token); the row
`dysharp_unfused` is the same scheme with fusion: none (separate kernels with barriers), so the
table shows what fusion gains. Top-k 16 and 32 (the paper's
other points) exceed the baselines' layer kernels' one-load read of a token's expert ids
(top-k <= 8); dysharp's kernels read the list without that limit.
"""
import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_cache import run_or_reuse  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO / "configs" / "experiments" / "dysharp"
SHAPES = ("s", "m", "l")
SYSTEMS = ("dgx_h100", "gh200_nvl32")
SCHEMES = ("deepep", "overlap", "moehub", "nvls", "dysharp", "dysharp_unfused")
# table rows that are a scheme with options: name -> the --set overrides
VARIANTS = {"dysharp_unfused": ["scheme=dysharp", "workload.layer.dysharp.fusion=none"]}
STATS = ("system.moe.layer_time_us", "system.moe.phase.dispatch_us", "system.moe.phase.expert_us",
         "system.moe.phase.combine_us", "system.moe.nvlink.up_wire_bytes",
         "system.moe.nvlink.down_wire_bytes")


def run_one(config, scheme, outdir, force):
    out = outdir / f"{config.stem}_{scheme}"
    sets = VARIANTS.get(scheme, [f"scheme={scheme}"])
    data, _, _, error = run_or_reuse(config, out, sets, force, nice=10)
    if error:
        return {"error": error}
    row = {k: data[k]["value"] for k in STATS if k in data}
    row["num_gpus"] = json.loads((out / "config.json").read_text())["system"]["num_gpus"]
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=SHAPES)
    ap.add_argument("--systems", nargs="+", default=["dgx_h100"], choices=SYSTEMS)
    ap.add_argument("--schemes", nargs="+", default=list(SCHEMES))
    ap.add_argument("--outdir", type=Path, default=Path("out/dysharp"))
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    cells = [(sh, sy, sc) for sy in a.systems for sh in a.shapes for sc in a.schemes]
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        rows = list(pool.map(lambda c: run_one(CONFIG_DIR / f"dysharp_{c[0]}_{c[1]}.yaml", c[2],
                                               a.outdir, a.force), cells))
    print("| system | shape | scheme | layer us | dispatch us | expert us | combine us | "
          "up MB/GPU | down MB/GPU | down / up |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    out = []
    for (sh, sy, sc), r in zip(cells, rows):
        out.append({"system": sy, "shape": sh, "scheme": sc, **r})
        if "error" in r:
            print(f"| {sy} | {sh.upper()} | {sc} | error: {r['error']} ||||||| ")
            continue
        n = r.get("num_gpus") or 1
        up = r["system.moe.nvlink.up_wire_bytes"] / n / 1e6
        down = r["system.moe.nvlink.down_wire_bytes"] / n / 1e6
        print(f"| {sy} | {sh.upper()} | {sc} | {r['system.moe.layer_time_us']:.1f} | "
              f"{r.get('system.moe.phase.dispatch_us', 0):.1f} | "
              f"{r.get('system.moe.phase.expert_us', 0):.1f} | "
              f"{r.get('system.moe.phase.combine_us', 0):.1f} | {up:.2f} | {down:.2f} | "
              f"{down / up if up else 0:.2f} |")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
