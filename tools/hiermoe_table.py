#!/usr/bin/env python3
"""The EP-32 layer tables: one MoE layer on four nodes x 8 GPUs per scheme (megatron, tutel,
deepep, hiermoe, moehub), with the bytes each level of the topology deduplicates and where each
scheme spends its time across the levels (NVLink inside a node, PCIe to the NIC, the NIC's work
queues, InfiniBand between nodes).

    python tools/hiermoe_table.py                                  # 2 models x 2 systems x 5 schemes
    python tools/hiermoe_table.py --models qwen3_30b_a3b --systems hgx_h800_x4 --schemes deepep hiermoe
    python tools/hiermoe_table.py --no-run --markdown table.md     # the table of the runs already there

Configs are configs/experiments/hiermoe/<model>_<tokens>_<system>.yaml (scheme hiermoe; the
others run with --set scheme=NAME). Runs go one at a time (--jobs 1) under `nice -n 10`
(--nice), into --outdir/<model>_<tokens>_<system>_<scheme>/; a finished run is reused when it was
made from the same inputs (tools/run_cache.py). --no-run runs nothing and prints the runs already
there, also those made by older sources (marked `stale`).

Per run: the layer time and its phases; the speedup over megatron; per level of the topology,
NVLink = the GPUs' NVLink transmitters, PCIe = the GPUs' links to their NIC, IB = the NICs'
InfiniBand transmitters: mean busy fraction over the layer time; IB credit stalls as a fraction
of the layer time; NIC queue waits: the time a work request waited for the NIC's message rate and
for its doorbell, ns per work request (summed over all NICs' requests / their number); the RDMA
work requests (messages) each NIC started; and the MB each NIC put onto InfiniBand. Scheme
`tutel_flat` is tutel with the flat all-to-all (`tutel` runs Tutel's 2-D hierarchical one
across nodes); `moehub_node` is moehub with system.gpu.hub.moe.internode: per_node (one row per
token and other node, fanned out there by the forwarding hub) and `moehub_node_comb` adds
system.gpu.hub.moe.internode_combine: per_node (a node's expert outputs for a token summed at its
forwarder, one row per (token, node) home over RDMA). The
deduplication table gives, per level (GPU, node), the token rows and bytes leaving their home
group one per (token, expert) pair and one per destination group
(`system.moe.dedup.level<i>_*`): a property of the routing and the expert placement, the same for
every scheme that keeps the block placement; hiermoe's expert swap moves experts and changes it.
"""
import argparse
import json
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_cache import STAMP, run_inputs_digest, run_or_reuse  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO / "configs" / "experiments" / "hiermoe"
MODELS = ("deepseek_v3_half", "qwen3_30b_a3b")
SYSTEMS = ("hgx_h800_x4", "dgx_h100_x4")
SCHEMES = ("megatron", "tutel", "deepep", "hiermoe", "moehub")
TOKENS = 128


def config_path(model, tokens, system):
    return CONFIG_DIR / f"{model}_{tokens}_{system}.yaml"


def run_dir(outdir, model, tokens, system, scheme):
    return Path(outdir) / f"{model}_{tokens}_{system}_{scheme}"


# variants: a row name -> the scheme and overrides it runs with
VARIANTS = {"tutel_flat": ["scheme=tutel", "workload.layer.tutel.all_to_all=flat"],
            # MoE-Hub deduplicating per node (components/moehub/forward.py)
            "moehub_node": ["scheme=moehub", "system.gpu.hub.moe.internode=per_node"],
            "moehub_node_comb": ["scheme=moehub", "system.gpu.hub.moe.internode=per_node",
                                 "system.gpu.hub.moe.internode_combine=per_node"]}


def scheme_sets(scheme):
    """The --set overrides of a scheme or a variant (VARIANTS: tutel_flat is tutel with the flat
    all-to-all; plain tutel runs Tutel's 2-D hierarchical one across nodes)."""
    return list(VARIANTS.get(scheme, [f"scheme={scheme}"]))


def read_run(config, outdir, sets):
    """(stats or None, "ok" | "stale" | "missing") of a run folder, without running."""
    stats_file = Path(outdir) / "stats.json"
    if not stats_file.is_file():
        return None, "missing"
    stamp = Path(outdir) / STAMP
    fresh = stamp.is_file() and stamp.read_text().strip() == run_inputs_digest(config, sets)
    return json.loads(stats_file.read_text()), "ok" if fresh else "stale"


def value(stats, name, default=None):
    return stats[name]["value"] if name in stats else default


def mean_of(stats, pattern):
    """Mean of the stats whose name matches a regular expression (None if none does)."""
    rx = re.compile(pattern)
    vals = [v["value"] for k, v in stats.items() if rx.fullmatch(k)]
    return sum(vals) / len(vals) if vals else None


def level_figures(stats):
    """Where the layer's time goes across the levels (see the module docstring)."""
    span_us = value(stats, "system.moe.layer_time_us")
    if not span_us:
        return {}
    span = span_us * 1e6     # ps
    frac = lambda pattern: (None if (m := mean_of(stats, pattern)) is None else m / span)
    wr = mean_of(stats, r"system\.nic\d+\.wr_wait_ticks")
    db = mean_of(stats, r"system\.nic\d+\.doorbell_wait_ticks")
    n_wr = mean_of(stats, r"system\.nic\d+\.work_requests")
    return {
        "nvlink_busy": value(stats, "system.moe.nvlink.tx_utilization_mean"),
        "pcie_busy": frac(r"system\.gpu\d+\.pcie\.tx_busy_ticks"),
        "ib_busy": frac(r"system\.nic\d+\.ib\.tx_busy_ticks"),
        "ib_credit_stall": frac(r"system\.nic\d+\.ib\.tx_credit_stall_ticks"),
        # summed over work requests (several wait at once): per work request, in ns
        "nic_wait_ns_per_wr": (None if wr is None or db is None or not n_wr
                               else (wr + db) / n_wr / 1e3),
        "ib_MB_per_nic": (None if (b := mean_of(stats, r"system\.nic\d+\.rdma_payload_bytes"))
                          is None else b / 1e6),
        "wr_per_nic": n_wr,
    }


def dedup_levels(stats):
    """[(level, group name, GPUs per group, rows before, rows after, bytes saved)] of a run."""
    out = []
    i = 0
    while f"system.moe.dedup.level{i}_rows_before" in stats:
        base = f"system.moe.dedup.level{i}"
        m = re.search(r"leaving their home (.+?) \(groups of (\d+) GPUs\)",
                      stats[f"{base}_rows_before"]["desc"])
        name, size = (m.group(1), int(m.group(2))) if m else (f"level {i}", 0)
        out.append((i, name, size, int(value(stats, f"{base}_rows_before")),
                    int(value(stats, f"{base}_rows_after")),
                    int(value(stats, f"{base}_bytes_saved"))))
        i += 1
    return out


def _f(x, fmt):
    return "-" if x is None else format(x, fmt)


def format_tables(rows, schemes):
    """Markdown: per (model, system) the scheme table, then the deduplication table."""
    lines = []
    groups = dict.fromkeys((r["model"], r["tokens"], r["system"]) for r in rows)
    for model, tokens, system in groups:
        part = [r for r in rows if (r["model"], r["tokens"], r["system"]) == (model, tokens, system)]
        base = next((r["layer_us"] for r in part if r["scheme"] == "megatron" and r["layer_us"]),
                    None)
        gpus = next((r["gpus"] for r in part if r["gpus"]), "?")
        row_bytes = next((r["row_bytes"] for r in part if r["row_bytes"]), "?")
        lines += [f"**{model}, {tokens} tokens per GPU, {system} (EP {gpus})**",
                  "",
                  "| scheme | layer us | vs megatron | mediation us | dispatch us | expert us | "
                  "combine us | NVLink busy | PCIe busy | IB busy | IB credit stall | "
                  "NIC wait ns/WR | WRs per NIC | IB MB per NIC | pairs dropped | run |",
                  "|---|" + "---:|" * 14 + "---|"]
        for r in part:
            speed = (base / r["layer_us"]) if base and r["layer_us"] else None
            lines.append(
                f"| {r['scheme']} | {_f(r['layer_us'], '.1f')} | "
                f"{_f(speed, '.2f') + 'x' if speed else '-'} | {_f(r['mediation_us'], '.1f')} | "
                f"{_f(r['dispatch_us'], '.1f')} | {_f(r['expert_us'], '.1f')} | "
                f"{_f(r['combine_us'], '.1f')} | {_f(r['nvlink_busy'], '.2f')} | "
                f"{_f(r['pcie_busy'], '.2f')} | {_f(r['ib_busy'], '.2f')} | "
                f"{_f(r['ib_credit_stall'], '.2f')} | {_f(r['nic_wait_ns_per_wr'], '.0f')} | "
                f"{_f(r['wr_per_nic'], '.0f')} | {_f(r['ib_MB_per_nic'], '.2f')} | {_f(r['dropped'], 'd')} | {r['state']} |")
        lines.append("")
        for r in part:
            if r["hiermoe"]:
                h = r["hiermoe"]
                lines += [f"hiermoe: deduplicates at the {('gpu', 'node')[h['level']]} level (its "
                          f"performance model: gpu {h['model_us_gpu']:.1f} us, node "
                          f"{h['model_us_node']:.1f} us); {h['swaps']} expert swaps, the busiest "
                          f"GPU's token-expert rows {h['swap_max_gpu_rows_before']} -> "
                          f"{h['swap_max_gpu_rows_after']}", ""]
        # deduplication: one table per distinct placement (hiermoe's swap moves experts)
        seen = {}
        for r in part:
            if r["dedup"]:
                seen.setdefault(tuple(r["dedup"]), []).append(r["scheme"])
        for dedup, who in seen.items():
            lines += [f"Deduplication per level ({', '.join(who)}; {row_bytes} B rows; rows and "
                      f"MB over all GPUs, dispatch direction):", "",
                      "| level | group | rows before | rows after | MB before | MB after | saved |",
                      "|---|---|---:|---:|---:|---:|---:|"]
            for i, name, size, before, after, saved in dedup:
                rb = saved / (before - after) if before > after else None
                mb = lambda n: _f(n * rb / 1e6, ".1f") if rb else "-"
                lines.append(f"| {i} | {name} ({size} GPUs) | {before} | {after} | {mb(before)} | "
                             f"{mb(after)} | {_f(1 - after / before if before else None, '.1%')} |")
            lines.append("")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--systems", nargs="+", default=list(SYSTEMS))
    ap.add_argument("--schemes", nargs="+", default=list(SCHEMES))
    ap.add_argument("--tokens", type=int, default=TOKENS, help="tokens per GPU (default %(default)s)")
    ap.add_argument("--outdir", default="out/hiermoe_table")
    ap.add_argument("--jobs", type=int, default=1, help="parallel runs (default 1)")
    ap.add_argument("--nice", type=int, default=10, help="niceness of the runs (default 10)")
    ap.add_argument("--force", action="store_true", help="re-run even where a run of the same "
                                                         "inputs exists")
    ap.add_argument("--no-run", action="store_true", help="run nothing: the table of the runs "
                                                          "already in --outdir")
    ap.add_argument("--set", dest="overrides", action="append", default=[],
                    help="KEY=VALUE applied to every run")
    ap.add_argument("--markdown", help="also write the tables as Markdown to this file")
    ap.add_argument("--json", help="also write every run's figures to this file")
    args = ap.parse_args(argv)

    points = [(m, args.tokens, y, s) for y in args.systems for m in args.models
              for s in args.schemes]
    missing = sorted({str(config_path(m, t, y).relative_to(REPO)) for m, t, y, _ in points
                      if not config_path(m, t, y).is_file()})
    if missing:
        print(f"hiermoe_table: no such config: {', '.join(missing)} (configs are "
              f"<model>_<tokens>_<system>.yaml in {CONFIG_DIR.relative_to(REPO)})", file=sys.stderr)
        return 2

    def job(p):
        m, t, y, s = p
        cfg, out = config_path(m, t, y), run_dir(args.outdir, m, t, y, s)
        sets = scheme_sets(s) + args.overrides
        if args.no_run:
            stats, state = read_run(cfg, out, sets)
            return p, stats, state
        stats, how, wall, error = run_or_reuse(cfg, out, sets, args.force, nice=args.nice)
        print(f"  {m:16s} {t:5d} {y:12s} {s:9s} "
              + (f"FAILED: {error}" if error else f"{wall:.0f} s" if how == "ran" else how),
              file=sys.stderr, flush=True)
        return p, stats, "ok" if stats else "failed"

    rows = []
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:   # each job is a subprocess
        for (m, t, y, s), stats, state in pool.map(job, points):
            stats = stats or {}
            partial = "simStopped" in stats
            row = {"model": m, "tokens": t, "system": y, "scheme": s,
                   "state": "partial" if partial else state,
                   "gpus": value(stats, "system.num_gpus") or len(
                       [k for k in stats if re.fullmatch(r"system\.gpu\d+\.pcie\.tx_busy_ticks", k)])
                   or None,
                   "layer_us": value(stats, "system.moe.layer_time_us"),
                   **{f"{ph}_us": value(stats, f"system.moe.phase.{ph}_us")
                      for ph in ("mediation", "dispatch", "expert", "combine")},
                   **{k: None for k in ("nvlink_busy", "pcie_busy", "ib_busy", "ib_credit_stall",
                                        "nic_wait_ns_per_wr", "wr_per_nic", "ib_MB_per_nic")},
                   **level_figures(stats),
                   "dropped": (None if (d := value(stats, "system.moe.rows_dropped")) is None
                               else int(d)),
                   "hiermoe": {k: (int(v) if k != "model_us_gpu" and k != "model_us_node" else v)
                               for k in ("level", "model_us_gpu", "model_us_node", "swaps",
                                         "swap_max_gpu_rows_before", "swap_max_gpu_rows_after")
                               if (v := value(stats, f"system.moe.hiermoe.{k}")) is not None}
                   or None,
                   "dedup": dedup_levels(stats),
                   "row_bytes": None}
            if row["dedup"]:
                _, _, _, before, after, saved = row["dedup"][0]
                row["row_bytes"] = saved // (before - after) if before > after else None
            rows.append(row)
    lines = format_tables(rows, args.schemes)
    print("\n".join(lines))
    if args.markdown:
        Path(args.markdown).write_text("\n".join(lines) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if all(r["state"] in ("ok", "partial", "stale") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
