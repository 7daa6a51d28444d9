#!/usr/bin/env python3
"""Simulator speed benchmark: a fixed suite of runs, each timed with a warm JIT cache, plus the cold
compile time, the Numba / pure-Python engine ratio and the growth of wall time with tokens and GPUs.

    python tools/bench.py --quick                  # small suite (< 3 min on 2 cores, warm cache)
    python tools/bench.py                          # full suite (real-scale layers; ~1 h on 2 cores)
    python tools/bench.py --quick --json bench.json --markdown perf.md
    python tools/bench.py --cases alltoall,dsv3_dgx_h100_deepep --set run.packet_train=4

Every run is `moehub-sim run` in its own process (so each case's peak memory is its own: the
child's maximum resident set size from wait4). Per case: wall seconds of the run loop with a warm
JIT cache (stats hostSeconds), warm start (loading the cached engine, hostCompileSeconds), events,
events/s, events per packet (simEvents / packets the GPUs put on their links, requests, data and
responses alike: what the engine spends per unit of modelled traffic) in all and per event kind
(system.engine.events.*: which blocks' activations the events are), simulated instructions/s,
peak memory and slowdown (wall seconds per simulated second), and the cost per event: ns per event
of wall time and of the run loop's CPU time (stats hostCpuSeconds, the steadier figure on a
shared machine). `--cases validate` also times the whole tools/validate.py run as one command
(TOOL_CASES: wall and CPU seconds of the process tree). The current figures live in
tools/figures/bench_current.json (one file; its history is in git).
The cold compile is measured once, on a fresh Numba cache folder: every case runs the same compiled
engine (one compiled version per argument type), so it is the cold start of any of them. The engine
ratio runs one small all-to-all under both engines and checks their model stats are identical.
The sweeps fit wall = a * x^b by least squares on log-log points and report the exponent b, and
the same fit of the run loop's CPU seconds (stats hostCpuSeconds: on a machine shared with other
jobs wall time grows with whatever else runs during the longer points; CPU time far less).

The cases alltoall and the DeepSeek-V3 layers run again with packet trains (--train K, default 4;
run.packet_train, a fast path that changes the model): the difference in simulated time is the
error of that option, reported with its speedup.

--json writes {machine, events_per_s, engine_ratio, cold_compile_s, cold_compile_cpu_s (the
cold process's user + system CPU seconds: what a loaded machine distorts least), suite_wall_s and
suite_cpu_s (the whole suite: its wall time, and the CPU seconds of its child runs), cases: {NAME: {...}},
packet_train: {NAME: {...}}, sweeps: {...}}; events_per_s is the events-weighted rate over the cases (total events / total
run-loop seconds). --markdown writes a performance table (docs/performance.md).
"""
import argparse
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYER = "configs/experiments/layer"

# On 2 GPUs each holds 128 of DeepSeek-V3's experts: the hub's record table needs 128 x 127 + 1
# entries; the GPU sweep sets it at every point (and the 64-GPU case that is its last point).
RECORDS_FOR_2_GPUS = "system.gpu.hub.moe.aau.record_table_entries=16384"
# name -> (config, overrides). Layer configs are the experiment files tools/layer_table.py runs.
FULL_CASES = {
    "alltoall": ("configs/ubench/alltoall.yaml", []),
    "dsv3_dgx_h100_moehub": (f"{LAYER}/deepseek_v3_4096_moehub.yaml", []),
    "dsv3_dgx_h100_deepep": (f"{LAYER}/deepseek_v3_4096_deepep.yaml", []),
    "dsv3_dgx_h100_overlap": (f"{LAYER}/deepseek_v3_4096_overlap.yaml", []),
    "mixtral_8x7b_dgx_h100": (f"{LAYER}/mixtral_8x7b_8192_moehub.yaml", []),
    "dsv3_gh200_nvl32": (f"{LAYER}/deepseek_v3_4096_moehub_gh200_nvl32.yaml", []),
    "dsv3_hgx_h800_moehub": (f"{LAYER}/deepseek_v3_4096_moehub_hgx_h800.yaml", []),
    # DySHARP (arXiv 2605.05607) sweeps 4-64 GPUs: the NVL32 fabric's 64-port switches take 64
    "dsv3_64gpu_moehub": (f"{LAYER}/deepseek_v3_4096_moehub_gh200_nvl32.yaml",
                          ["system.num_gpus=64", "workload.layer.tokens_per_gpu=256"]),
    # the GPU sweep's last point (run once for both)
    "dsv3_64gpu_moehub_1024tok": (f"{LAYER}/deepseek_v3_4096_moehub_gh200_nvl32.yaml",
                                  ["workload.layer.tokens_per_gpu=1024", RECORDS_FOR_2_GPUS,
                                   "system.num_gpus=64"]),
}
# whole tools timed as one command each (wall and CPU seconds of the process tree; no per-event
# figures): the validation run is what a user waits for after a model change. Only run when named
# (--cases validate): it takes most of an hour on 2 cores
TOOL_CASES = {
    "validate": ["tools/validate.py"],
}
QUICK_CASES = {
    "alltoall": ("configs/ubench/alltoall.yaml", []),
    "dsv3_dgx_h100_moehub": (f"{LAYER}/deepseek_v3_4096_moehub.yaml", ["workload.layer.tokens_per_gpu=512"]),
    "dsv3_dgx_h100_deepep": (f"{LAYER}/deepseek_v3_4096_deepep.yaml", ["workload.layer.tokens_per_gpu=512"]),
    "dsv3_hgx_h800_moehub": (f"{LAYER}/deepseek_v3_256_moehub_hgx_h800.yaml", []),
    # 64 GPUs on the NVL32 fabric's 64-port switches, as the full suite's dsv3_64gpu_moehub, at
    # 8 tokens/GPU so the quick suite stays within its few minutes (what grows with GPUs shows)
    "dsv3_64gpu_moehub": (f"{LAYER}/deepseek_v3_4096_moehub_gh200_nvl32.yaml",
                          ["system.num_gpus=64", "workload.layer.tokens_per_gpu=8"]),
}
# (config, key, points, fixed overrides) per sweep; full and quick (RECORDS_FOR_2_GPUS above).
FULL_SWEEPS = {
    "tokens": (f"{LAYER}/deepseek_v3_4096_moehub.yaml", "workload.layer.tokens_per_gpu",
               [1024, 2048, 4096, 8192, 16384], []),
    "gpus": (f"{LAYER}/deepseek_v3_4096_moehub_gh200_nvl32.yaml", "system.num_gpus",
             [2, 4, 8, 16, 32, 64], ["workload.layer.tokens_per_gpu=1024", RECORDS_FOR_2_GPUS]),
}
QUICK_SWEEPS = {
    "tokens": (f"{LAYER}/deepseek_v3_4096_moehub.yaml", "workload.layer.tokens_per_gpu",
               [128, 256, 512], []),
    "gpus": (f"{LAYER}/deepseek_v3_4096_moehub_gh200_nvl32.yaml", "system.num_gpus",
             [2, 4, 8], ["workload.layer.tokens_per_gpu=128", RECORDS_FOR_2_GPUS]),
}
# packet trains (run.packet_train, the fast path that changes the model): these cases run again
# with trains of TRAIN_LENGTH packets; the table reports the simulated-time error and the speedup
TRAIN_CASES = ("alltoall", "dsv3_dgx_h100_moehub", "dsv3_dgx_h100_deepep", "dsv3_dgx_h100_overlap")
TRAIN_LENGTH = 4
# the engine ratio's config: small enough for the pure-Python engine (~1e5 events)
RATIO_CASE = ("configs/ubench/alltoall.yaml", [
    "workload.buffers.send.bytes=256KB", "workload.buffers.recv.bytes=256KB",
    "workload.launches.0.params.bytes_per_peer=262144 // ngpu", "workload.launches.0.params.chunk=4096"])


_SUITE_CPU = [0.0]   # CPU seconds of every child run so far (the suite's cost, load aside)
_RUNS = {}   # (config, overrides) -> run_sim's result: a sweep point that is also a case runs once


def run_once(config, overrides):
    """run_sim with the default engine and environment, at most once per config and overrides."""
    key = (config, tuple(sorted(overrides)))
    if key not in _RUNS:
        _RUNS[key] = run_sim(config, overrides)
    return _RUNS[key]


def run_sim(config, overrides, engine="numba", env_extra=None):
    """One `moehub-sim run` in a child process; returns (model+host stats, peak RSS MB, wall s)."""
    env = dict(os.environ)
    env.pop("NUMBA_DISABLE_JIT", None)
    env.update(env_extra or {})
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "moehub_arch", "run", str(REPO / config), "-o", tmp, "--quiet",
               "--engine", engine] + [f"--set={o}" for o in overrides]
        t0 = time.perf_counter()
        with open(Path(tmp) / "_stderr", "w+") as err:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err)
            _, status, usage = os.wait4(proc.pid, 0)     # this child's own peak memory
            proc.returncode = os.waitstatus_to_exitcode(status)
            err.seek(0)
            message = err.read()
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            sys.exit(f"bench: run failed (exit {proc.returncode}): {' '.join(cmd)}\n{message}")
        data = json.loads((Path(tmp) / "stats.json").read_text())
    stats = {k: v["value"] for k, v in data.items()}
    # the child's CPU seconds (user + system, from wait4): on a loaded machine a far steadier
    # figure than wall time (a host-side figure: "host" keeps it out of the model stats)
    stats["hostProcessCpuSeconds"] = usage.ru_utime + usage.ru_stime
    _SUITE_CPU[0] += stats["hostProcessCpuSeconds"]
    peak_mb = usage.ru_maxrss / 1024 if sys.platform != "darwin" else usage.ru_maxrss / 2 ** 20
    return stats, peak_mb, wall


def run_tool(cmd):
    """Time one whole tool (`python TOOL ARGS` from the repository): wall seconds and the CPU
    seconds of it and every process it waited for."""
    t0 = time.perf_counter()
    before = os.times()
    proc = subprocess.run([sys.executable] + cmd, cwd=REPO, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    after = os.times()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    _SUITE_CPU[0] += cpu
    return {"command": " ".join(cmd), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}


# packets put on the wires by the GPUs (requests, data, responses; each counted once, at its
# first hop): the denominator of events per packet, the engine's cost per unit of modelled traffic
INJECTED_PACKETS = re.compile(r"system\.gpu\d+\.nvlink\d+\.tx_packets")
EVENT_KIND = "system.engine.events."


def events_per_packet_by_kind(stats, packets):
    """{event kind: events of that kind per injected packet}, largest first, kinds that ran: where
    the engine's events go (load-independent, unlike wall time)."""
    kinds = {k[len(EVENT_KIND):]: int(v) for k, v in stats.items()
             if k.startswith(EVENT_KIND) and int(v) > 0}
    return {k: round(n / packets, 3) for k, n in sorted(kinds.items(), key=lambda kv: -kv[1])} \
        if packets else {}


def case_figures(stats, peak_mb, wall):
    run_s = stats["hostSeconds"]
    sim_s = stats["simSeconds"]
    packets = sum(int(v) for k, v in stats.items() if INJECTED_PACKETS.fullmatch(k))
    return {"wall_s": round(run_s, 3), "warm_start_s": round(stats["hostCompileSeconds"], 3),
            "process_s": round(wall, 2), "events": int(stats["simEvents"]),
            "events_per_s": round(stats["simEvents"] / run_s) if run_s else 0,
            "packets": packets,
            "events_per_packet": round(stats["simEvents"] / packets, 2) if packets else None,
            # the cost per event: wall, and CPU seconds of the run loop (steadier on a shared
            # machine)
            "ns_per_event": round(run_s / stats["simEvents"] * 1e9, 1) if stats["simEvents"] else None,
            "cpu_s": round(stats.get("hostCpuSeconds", 0.0), 3),
            "cpu_ns_per_event": (round(stats["hostCpuSeconds"] / stats["simEvents"] * 1e9, 1)
                                 if stats["simEvents"] and "hostCpuSeconds" in stats else None),
            "events_per_packet_by_kind": events_per_packet_by_kind(stats, packets),
            "insts": int(stats["simInsts"]),
            "insts_per_s": round(stats["simInsts"] / run_s) if run_s else 0,
            "peak_mem_mb": round(peak_mb, 1), "sim_us": round(sim_s * 1e6, 3),
            "slowdown": round(run_s / sim_s) if sim_s else None}


def fit_exponent(xs, ys):
    """Least-squares slope of log(y) on log(x): y ~ x^b."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def machine():
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count())
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numba
    return {"cpu": model, "cores": len(cpus), "python": platform.python_version(),
            "numba": numba.__version__, "os": platform.platform(terse=True)}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the small suite (a few minutes)")
    ap.add_argument("--cases", help="comma-separated case names to run (default: all of the suite); "
                    "'none' runs only the compile, ratio and sweeps")
    ap.add_argument("--no-sweeps", action="store_true", help="skip the token and GPU sweeps")
    ap.add_argument("--no-ratio", action="store_true", help="skip the Numba / pure-Python ratio")
    ap.add_argument("--cold", action="store_true", help="measure the cold compile in the quick "
                    "suite too (the full suite always does; it adds about two minutes)")
    ap.add_argument("--train", type=int, default=TRAIN_LENGTH, metavar="K",
                    help=f"packet-train length whose error is measured on {', '.join(TRAIN_CASES)} "
                    f"(default {TRAIN_LENGTH}; 1 skips it)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override applied to every run (e.g. run.packet_train=4)")
    ap.add_argument("--json", type=Path, help="write the figures as JSON here")
    ap.add_argument("--markdown", type=Path, help="write the performance table (Markdown) here")
    args = ap.parse_args()
    cases = QUICK_CASES if args.quick else FULL_CASES
    sweeps = {} if args.no_sweeps else QUICK_SWEEPS if args.quick else FULL_SWEEPS
    tools = {}
    if args.cases:
        names = [] if args.cases == "none" else args.cases.split(",")
        tools = {n: TOOL_CASES[n] for n in names if n in TOOL_CASES}
        names = [n for n in names if n not in TOOL_CASES]
        unknown = [n for n in names if n not in cases]
        if unknown:
            sys.exit(f"bench: unknown case(s) {', '.join(unknown)}; this suite has "
                     f"{', '.join(list(cases) + list(TOOL_CASES))}")
        cases = {n: cases[n] for n in names}
    extra = args.overrides
    out = {"suite": "quick" if args.quick else "full", "machine": machine(), "overrides": extra}
    suite_t0 = time.perf_counter()

    # cold compile: the smallest run on an empty Numba cache folder
    out["cold_compile_s"] = out["cold_compile_cpu_s"] = None
    if args.cold or not args.quick:
        with tempfile.TemporaryDirectory() as cache:
            log("bench: cold compile (fresh Numba cache) ...")
            stats, _, _ = run_sim(*RATIO_CASE, env_extra={"NUMBA_CACHE_DIR": cache})
            out["cold_compile_s"] = round(stats["hostCompileSeconds"], 2)
            # CPU seconds of the whole process (start-up, build, compile, the ~1e5-event run)
            out["cold_compile_cpu_s"] = round(stats["hostProcessCpuSeconds"], 1)
    # the ratio also warms the project cache for everything after it
    if not args.no_ratio:
        log("bench: engine ratio (Numba and pure-Python engines, same config) ...")
        fast, _, _ = run_sim(RATIO_CASE[0], RATIO_CASE[1] + extra)
        slow, _, _ = run_sim(RATIO_CASE[0], RATIO_CASE[1] + extra, engine="python")
        model = lambda s: {k: v for k, v in s.items() if not k.startswith("host")}
        out["engine_ratio"] = round(slow["hostSeconds"] / fast["hostSeconds"], 1)
        out["engine_ratio_case"] = {"events": int(fast["simEvents"]),
                                    "numba_s": round(fast["hostSeconds"], 4),
                                    "python_s": round(slow["hostSeconds"], 2),
                                    "identical_stats": model(fast) == model(slow)}
    else:
        run_sim(RATIO_CASE[0], RATIO_CASE[1] + extra)
    out["cases"], exact = {}, {}
    for name, (config, over) in cases.items():
        log(f"bench: {name} ...")
        result = run_once(config, over + extra)
        exact[name] = result[0]
        out["cases"][name] = fig = case_figures(*result)
        fig["compile_s"] = out["cold_compile_s"]
        fig["config"] = " ".join([config] + [f"--set {o}" for o in over])
    out["tools"] = {}
    for name, cmd in tools.items():
        log(f"bench: {name} (the whole tool) ...")
        out["tools"][name] = run_tool(cmd)
    out["packet_train"] = {}
    for name in (n for n in TRAIN_CASES if n in exact and args.train > 1):
        log(f"bench: {name} with run.packet_train={args.train} ...")
        config, over = cases[name]
        fast, _, _ = run_sim(config, over + extra + [f"run.packet_train={args.train}"])
        a, b = exact[name], fast
        out["packet_train"][name] = {
            "train": args.train, "sim_us_exact": round(a["simSeconds"] * 1e6, 3),
            "sim_us_train": round(b["simSeconds"] * 1e6, 3),
            "error_pct": round(100 * (b["simSeconds"] - a["simSeconds"]) / a["simSeconds"], 2),
            "events_ratio": round(a["simEvents"] / b["simEvents"], 2),
            "speedup": round(a["hostSeconds"] / b["hostSeconds"], 2)}
    events = sum(c["events"] for c in out["cases"].values())
    seconds = sum(c["wall_s"] for c in out["cases"].values())
    out["events_per_s"] = round(events / seconds) if seconds else None
    out["sweeps"] = {}
    for name, (config, key, points, over) in sweeps.items():
        walls, cpus, events = [], [], []
        for x in points:
            log(f"bench: sweep {name}: {key}={x} ...")
            stats, peak, _ = run_once(config, over + [f"{key}={x}"] + extra)
            walls.append(stats["hostSeconds"])
            cpus.append(stats["hostCpuSeconds"])
            events.append(int(stats["simEvents"]))
        out["sweeps"][name] = {"config": config, "key": key, "points": points,
                               "wall_s": [round(w, 3) for w in walls],
                               "cpu_s": [round(c, 3) for c in cpus], "events": events,
                               "exponent": round(fit_exponent(points, walls), 3),
                               "cpu_exponent": round(fit_exponent(points, cpus), 3),
                               "events_exponent": round(fit_exponent(points, events), 3)}
    # the whole suite, start-ups and compiles included (the quick suite is meant to take < 3 min)
    out["suite_wall_s"] = round(time.perf_counter() - suite_t0, 1)
    out["suite_cpu_s"] = round(_SUITE_CPU[0], 1)
    table = render(out)
    print(table)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    if args.markdown:
        args.markdown.write_text(table + "\n")


def render(out):
    m = out["machine"]
    lines = [f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, Numba {m['numba']}"
             f" ({out['suite']} suite{', ' + ' '.join(out['overrides']) if out['overrides'] else ''})",
             "", "| case | wall s (warm) | run-loop CPU s | events | events/packet | ns/event | "
             "CPU ns/event | k insts/s | peak MB | slowdown |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    fmt = lambda v, f: "-" if v is None else format(v, f)   # noqa: E731
    for name, c in out["cases"].items():
        lines.append(f"| {name} | {c['wall_s']:.2f} | {fmt(c.get('cpu_s'), '.2f')} | "
                     f"{c['events']:,} | {fmt(c.get('events_per_packet'), '.2f')} | "
                     f"{fmt(c.get('ns_per_event'), '.0f')} | {fmt(c.get('cpu_ns_per_event'), '.0f')} | "
                     f"{c['insts_per_s'] / 1e3:.0f} | {c['peak_mem_mb']:.0f} | {c['slowdown']:,} |")
    for name, t in out.get("tools", {}).items():
        lines.append(f"| {name} (`{t['command']}`) | {t['wall_s']:.1f} (whole tool) | "
                     f"{t['cpu_s']:.1f} (whole tool) | - | - | - | - | - | - | - |")
    lines.append("")
    for name, c in out["cases"].items():
        kinds = c.get("events_per_packet_by_kind") or {}
        if kinds:
            lines.append(f"- {name} events per packet by kind: "
                         + ", ".join(f"{k} {v:.2f}" for k, v in kinds.items()))
    if out.get("events_per_s"):
        lines.append(f"- run loop, all cases: {out['events_per_s'] / 1e6:.2f} M events/s")
    if out.get("suite_wall_s") is not None:
        lines.append(f"- the whole {out['suite']} suite: {out['suite_wall_s']:.0f} s wall, "
                     f"{out['suite_cpu_s']:.0f} CPU s in its runs")
    cold = ("not measured (--cold)" if out["cold_compile_s"] is None
            else f"{out['cold_compile_s']:.1f} s" + (
                "" if out.get("cold_compile_cpu_s") is None
                else f" ({out['cold_compile_cpu_s']:.1f} CPU s for the whole process)"))
    lines.append(f"- cold compile (fresh cache): {cold}; warm start (cached engine): "
                 + ", ".join(f"{c['warm_start_s']:.2f} s" for c in out["cases"].values()))
    if "engine_ratio" in out:
        r = out["engine_ratio_case"]
        lines.append(f"- Numba / pure-Python engine: {out['engine_ratio']:.0f}x on {r['events']:,} events "
                     f"({r['numba_s']:.3f} s vs {r['python_s']:.1f} s; identical stats: "
                     f"{r['identical_stats']})")
    for name, t in out.get("packet_train", {}).items():
        lines.append(f"- {name} with run.packet_train={t['train']}: simulated time "
                     f"{t['sim_us_train']:.1f} us vs {t['sim_us_exact']:.1f} us exact "
                     f"({t['error_pct']:+.2f}%), {t['events_ratio']:.1f}x fewer events, "
                     f"{t['speedup']:.1f}x faster")
    for name, s in out["sweeps"].items():
        pts = ", ".join(f"{x}: {w:.2f} s" for x, w in zip(s["points"], s["wall_s"]))
        cpu = "" if s.get("cpu_exponent") is None else f"CPU seconds ~ x^{s['cpu_exponent']:.2f}, "
        lines.append(f"- {name} sweep ({s['key']}; {pts}): wall ~ x^{s['exponent']:.2f}, {cpu}"
                     f"events ~ x^{s['events_exponent']:.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
