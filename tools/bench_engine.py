#!/usr/bin/env python3
"""Engine speed benchmark: events/s and instructions/s of the all-to-all microbenchmark, and the
Numba / pure-Python speed ratio measured in the same run.

    python tools/bench_engine.py                 # default: 8-GPU DGX H100 all-to-all, 8 MB per rank
    python tools/bench_engine.py --ratio-mb 0.25 # size of the all-to-all used for the engine ratio

The full-size all-to-all runs on the Numba engine only (the interpreted engine runs ~300x slower);
the ratio is measured on a smaller all-to-all (same system) run by both engines, each in its own
process so the pure-Python engine never sees compiled code. Compile/load time is reported apart.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(config, engine, overrides, outdir):
    env = dict(os.environ)
    env.pop("NUMBA_DISABLE_JIT", None)
    cmd = [sys.executable, "-m", "moehub_arch", "run", str(config), "-o", str(outdir), "--quiet",
           "--engine", engine] + [f"--set={o}" for o in overrides]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"benchmark run failed ({' '.join(cmd)}):\n{r.stderr}")
    data = json.loads((Path(outdir) / "stats.json").read_text())
    return {k: v["value"] for k, v in data.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=REPO / "configs" / "ubench" / "alltoall.yaml")
    ap.add_argument("--ratio-mb", type=float, default=0.25,
                    help="MB each rank sends in the all-to-all used for the Numba/Python ratio")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        full = run(args.config, "numba", [], Path(tmp) / "full")
        nbytes = int(args.ratio_mb * 2 ** 20)
        small = [f"workload.buffers.send.bytes={nbytes}B", f"workload.buffers.recv.bytes={nbytes}B",
                 f"workload.launches.0.params.bytes_per_peer={nbytes} // ngpu",
                 "workload.launches.0.params.chunk=4096"]
        fast = run(args.config, "numba", small, Path(tmp) / "numba")
        slow = run(args.config, "python", small, Path(tmp) / "python")
    same = {k: v for k, v in fast.items() if not k.startswith("host")} == \
           {k: v for k, v in slow.items() if not k.startswith("host")}
    print(f"all-to-all ({args.config}), Numba engine:")
    print(f"  {full['simEvents']} events, {full['simInsts']} instructions in {full['hostSeconds']:.3f} s "
          f"(compile/load {full['hostCompileSeconds']:.1f} s)")
    print(f"  {full['hostEventRate'] / 1e6:.3f} M events/s, {full['hostInstRate'] / 1e3:.1f} k instructions/s")
    print(f"engine ratio on a {args.ratio_mb} MB-per-rank all-to-all ({fast['simEvents']} events):")
    print(f"  numba  {fast['hostSeconds']:.3f} s ({fast['hostEventRate'] / 1e6:.3f} M events/s)")
    print(f"  python {slow['hostSeconds']:.3f} s ({slow['hostEventRate'] / 1e3:.2f} k events/s)")
    print(f"  Numba / Python speed ratio: {slow['hostSeconds'] / fast['hostSeconds']:.0f}x; "
          f"identical model stats: {same}")


if __name__ == "__main__":
    main()
