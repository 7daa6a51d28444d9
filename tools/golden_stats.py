"""Golden stats: a fingerprint of the model stats of a representative set of shipped configs.

A refactor must not change what the simulator computes. This tool runs a fixed set of small
configurations (the functional MoE layer of every scheme, a small timing layer, the MoE-Hub
test configs, the examples, every microbenchmark shrunk to a few SMs or iterations) and records,
per case, a SHA-256 over the model stats in name order (name, value, unit and description; the
host-side stats, wall-clock times and rates, are left out), plus the number of stats, simTicks
and simEvents so that a mismatch says where to look. tests/test_golden_stats.py compares a run
of the current code with tests/data/golden_stats.json.

    python tools/golden_stats.py --check             # compare with the recorded fingerprints
    python tools/golden_stats.py --record            # record them again (a change that is meant
                                                     # to change the model: say so in the commit)
    python tools/golden_stats.py --dump DIR          # also write each case's stats as JSON
                                                     # (diff two dumps to find the stat that moved)
    python tools/golden_stats.py --case functional_moehub --check    # one case
    python tools/golden_stats.py --record --from-dump DIR   # fingerprints of dumped stats (e.g.
                                                     # written by another checkout with --dump)
"""
import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "data" / "golden_stats.json"


def _mini(num_gpus, num_sms, links):
    return [f"system.num_gpus={num_gpus}", f"system.gpu.num_sms={num_sms}",
            f"system.nvlink.links_per_gpu={links}", f"system.switch.count={links}",
            f"system.switch.gpu_link_switch=[{', '.join(str(i) for i in range(links))}]"]


# name -> (config under configs/, --set overrides); small enough that all of them together run in
# well under a minute with a warm engine cache
CASES = {
    **{f"functional_{s}": ("experiments/functional.yaml", [f"scheme={s}"])
       for s in ("moehub", "deepep", "overlap", "megatron", "tutel")},
    "functional_moehub_timing": ("experiments/functional.yaml",
                                 ["scheme=moehub", "workload.mode=timing"]),
    "functional_deepep_trains": ("experiments/functional.yaml",
                                 ["scheme=deepep", "workload.mode=timing", "run.packet_train=4"]),
    "hub_dispatch_combine": ("hub/dispatch_combine.yaml", []),
    "hub_dispatch_only": ("hub/dispatch_only.yaml", []),
    "hub_tiny_tables": ("hub/tiny_tables.yaml", []),
    "example_half_rate_mma": ("examples/half_rate_mma.yaml", []),
    "example_put_get_exchange": ("examples/put_get_exchange.yaml", []),
    "example_tiled_gemm": ("examples/tiled_gemm.yaml", []),
    "ubench_alltoall": ("ubench/alltoall.yaml", _mini(4, 4, 2) + [
        "workload.launches.0.params.bytes_per_peer=16384",
        "workload.launches.0.params.chunk=4096"]),
    "ubench_p2p_bandwidth": ("ubench/p2p_bandwidth.yaml",
                             ["system.gpu.num_sms=8", "workload.launches.0.params.chunks_per_tb=2"]),
    "ubench_p2p_latency": ("ubench/p2p_latency.yaml", ["workload.launches.0.params.iters=8"]),
    "ubench_hbm_bandwidth": ("ubench/hbm_bandwidth.yaml",
                             ["system.gpu.num_sms=8", "workload.launches.0.grid=16"]),
    "ubench_mma_peak": ("ubench/mma_peak.yaml",
                        ["system.gpu.num_sms=4", "workload.launches.0.params.iters=50"]),
    "ubench_grouped_gemm": ("ubench/grouped_gemm.yaml",
                            ["system.gpu.num_sms=8", "workload.launches.0.params.experts=2",
                             "workload.launches.0.params.rows=256"]),
    "ubench_streaming_gemm": ("ubench/streaming_gemm.yaml", ["system.gpu.num_sms=8"]),
    "hub_dispatch_combine_rowsp": ("hub/dispatch_combine_rowsp.yaml", []),
    "functional_dysharp": ("experiments/functional.yaml", ["scheme=dysharp"]),
    "functional_dysharp_unfused": ("experiments/functional.yaml",
                                   ["scheme=dysharp", "workload.layer.dysharp.fusion=none"]),
}


def model_rows(stats):
    """{name: [value, unit, description]} of a run's model stats (host-side stats left out)."""
    return {s.name: [s.value, s.unit, s.desc] for s in stats if not s.name.startswith("host")}


def fingerprint(rows):
    """(sha256 hex, count, simTicks, simEvents) of model stats {name: [value, unit, desc]}, in name
    order: the order stats are dumped in is presentation, not part of the model."""
    blob = json.dumps(sorted(rows.items()), separators=(",", ":")).encode()
    return {"sha256": hashlib.sha256(blob).hexdigest(), "stats": len(rows),
            "simTicks": rows["simTicks"][0], "simEvents": rows["simEvents"][0]}


def run_case(name, dump=None):
    from moehub_arch.config import load_config
    from moehub_arch.simulation import Simulation
    config, overrides = CASES[name]
    sim = Simulation(load_config(REPO / "configs" / config, list(overrides)))
    sim.run()
    rows = model_rows(sim.stats)
    if dump is not None:
        Path(dump).mkdir(parents=True, exist_ok=True)
        (Path(dump) / f"{name}.json").write_text(json.dumps(rows, indent=0))
    return fingerprint(rows)


def compare(names, recorded, dump=None, verbose=False):
    """Lines describing every case whose fingerprint differs from the recorded one."""
    bad = []
    for name in names:
        t0 = time.perf_counter()
        got = run_case(name, dump)
        want = recorded.get(name)
        if verbose:
            print(f"{name}: {'same' if want == got else 'DIFFERENT'} ({time.perf_counter() - t0:.1f} s)",
                  flush=True)
        if want != got:
            bad.append(f"{name}: recorded {want}, now {got}")
    return bad


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record", action="store_true", help=f"write {GOLDEN.relative_to(REPO)}")
    mode.add_argument("--check", action="store_true", help="compare with the recorded fingerprints")
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="only these cases")
    ap.add_argument("--dump", metavar="DIR", help="write each case's model stats to DIR/<case>.json")
    ap.add_argument("--golden", default=str(GOLDEN), help="fingerprint file (default: %(default)s)")
    ap.add_argument("--from-dump", metavar="DIR", help="with --record: fingerprint DIR/<case>.json "
                    "(written by --dump) instead of running the cases")
    args = ap.parse_args(argv)
    names = args.case or list(CASES)
    path = Path(args.golden)
    if args.record:
        old = json.loads(path.read_text()) if path.is_file() and args.case else {}
        for name in names:
            if args.from_dump:
                old[name] = fingerprint(json.loads((Path(args.from_dump) / f"{name}.json").read_text()))
            else:
                old[name] = run_case(name, args.dump)
            print(f"{name}: {old[name]}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({k: old[k] for k in CASES if k in old}, indent=1) + "\n")
        return 0
    recorded = json.loads(path.read_text())
    bad = compare(names, recorded, args.dump, verbose=True)
    for line in bad:
        print(line)
    print(f"{len(names) - len(bad)} of {len(names)} cases identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
