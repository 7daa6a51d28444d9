#!/usr/bin/env python3
"""MoE-Hub RPM merge-buffer sweep: link efficiency and dispatch bandwidth as the merge buffer grows.

    python tools/hub_merge_sweep.py                      # 16, 32, ..., 1024 B on the hub dispatch
    python tools/hub_merge_sweep.py --sizes 64 256 --tokens 256

Runs configs/hub/dispatch_only.yaml (timing mode, 4 DGX H100 GPUs, 1000-byte rows, top-2 of 8
experts; the experts only claim and release) with `--tokens` tokens per GPU sent by `--producers`
thread blocks, and reports per merge-buffer size: the RPM's data efficiency
(row data bytes / wire bytes), partial (flush) packets, and the dispatch bandwidth each GPU achieves
over its NVLink ports (remote row bytes / dispatch kernel time) as a fraction of the links' rate.
"""
import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[16, 32, 64, 128, 256, 512, 1024])
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--producers", type=int, default=128, help="dispatch thread blocks per GPU")
    ap.add_argument("--ring", type=int, help="override system.gpu.hub.moe.rpm.row_queue_depth")
    args = ap.parse_args()
    import moehub_arch as mh

    T = args.tokens
    print(f"{'merge B':>8} {'data eff':>9} {'flushes':>8} {'dispatch us':>12} {'GB/s/GPU':>9} {'of links':>9}")
    for size in args.sizes:
        extra = [f"system.gpu.hub.moe.rpm.row_queue_depth={args.ring}"] if args.ring else []
        run = mh.run(REPO / "configs/hub/dispatch_only.yaml", extra + [
            f"system.gpu.hub.moe.rpm.merge_buffer_bytes={size}B",
            f"workload.buffers.x.bytes={T * 1000}B", f"workload.buffers.out.bytes={T * 2000}B",
            f"workload.launches.0.params.tokens={T}", f"workload.launches.0.grid={args.producers}",
            f"workload.moe.window_rows={4 * T}"])
        s, cfg = run.stats, run.cfg
        G = cfg.system.num_gpus
        nv = cfg.system.nvlink
        wire = sum(s[f"system.gpu{g}.hub.rpm.wire_bytes"] for g in range(G))
        data = sum(s[f"system.gpu{g}.hub.rpm.payload_bytes"] - s[f"system.gpu{g}.hub.rpm.rows_accepted"]
                   * cfg.system.gpu.hub.moe.rpm.row_header_bytes for g in range(G))
        flushes = sum(s[f"system.gpu{g}.hub.rpm.flushes"] for g in range(G))
        # the dispatch kernel (instance g of launch 0) ends when all its rows have landed
        t = max(s[f"system.gpu{g}.launch{g}.ticks"] for g in range(G)) * 1e-12
        remote = T * 2 * 1000 * (G - 1) / G            # expected remote row bytes per GPU
        bw = remote / t / 1e9
        print(f"{size:>8} {data / wire:>9.3f} {flushes:>8} {t * 1e6:>12.2f} {bw:>9.1f} "
              f"{bw * 1e9 / (nv.links_per_gpu * nv.bandwidth):>9.3f}")


if __name__ == "__main__":
    from moehub_arch.errors import exit_code, user_errors
    try:
        main()
    except user_errors() as e:   # bad input or a failed run: the message moehub-sim would print
        print(f"hub_merge_sweep.py: error: {e}", file=sys.stderr)
        sys.exit(exit_code(e))
