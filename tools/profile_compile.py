#!/usr/bin/env python3
"""Where the cold start goes: compile the engine on a fresh Numba cache and time every compiled
function and every compiler stage, exclusive of the functions it compiles in turn.

    python tools/profile_compile.py configs/ubench/alltoall.yaml --top 25

The config is built and run once in this process with NUMBA_CACHE_DIR set to an empty temporary
folder (so everything compiles: the first run after `pip install`), all of it in this process
(MOEHUB_COMPILE_JOBS=1: no second compile process, dispatch/precompile.py). Numba broadcasts an event
around each dispatcher compile and each compiler pass (numba.core.event); the LLVM stages (the
per-function passes, the module optimisation of a function with every callee it links in, the
machine-code emission) and the on-disk cache writes are timed by wrapping Numba's code-library
methods. Nested work is charged to the innermost stage and function only, so the figures add up
to the compile time. Stages and functions are timed in CPU seconds of this process (the compiler
is single-threaded), which other work on a loaded machine distorts far less than wall time; the
summary line gives both. Printed: the stages in all, the functions that cost most (with their
compiled versions: more than one means a function was compiled for several argument types), and
the number of compiled functions. --json writes the same figures.

Why this matters for the engine's design: Numba compiles each non-inlined function into its own
LLVM module, links the modules of all its callees into it and optimises and emits the result
again, so a call tree of depth d re-optimises the leaves d times (engine/jit.py).
"""
import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class _Timeline:
    """A stack of open stages; each closing stage is charged its time minus its children's."""

    def __init__(self):
        self.stack = []          # [function, stage, start, children's time]
        self.by_stage = defaultdict(float)
        self.by_function = defaultdict(float)
        self.by_function_stage = defaultdict(float)
        self.versions = defaultdict(int)

    def function(self):
        for frame in reversed(self.stack):
            if frame[0] is not None:
                return frame[0]
        return "(outside any compile)"

    def open(self, function, stage):
        self.stack.append([function, stage, time.process_time(), 0.0])

    def close(self):
        function, stage, start, children = self.stack.pop()
        took = time.process_time() - start
        own = took - children
        who = function if function is not None else self.function()
        self.by_stage[stage] += own
        self.by_function[who] += own
        self.by_function_stage[who, stage] += own
        if self.stack:
            self.stack[-1][3] += took


def _short(qualname, module):
    module = module or ""
    if module.startswith("moehub_arch."):
        module = module[len("moehub_arch."):]
    return f"{module}.{qualname}" if module else qualname


def _install(tl):
    """Hook Numba's events and code-library stages into the timeline."""
    from numba.core import caching, codegen, event
    from moehub_arch.engine import optimise_once
    optimise_once.install()   # first, so the module-optimisation timer below wraps both its paths

    class CompileListener(event.Listener):
        def on_start(self, ev):
            d = ev.data["dispatcher"]
            name = _short(d.py_func.__qualname__, d.py_func.__module__)
            tl.versions[name] += 1
            tl.open(name, "other (dispatch, caching lookups)")

        def on_end(self, ev):
            tl.close()

    class PassListener(event.Listener):
        def on_start(self, ev):
            stage = ev.data["name"].split(" [", 1)[0]
            tl.open(None, f"pass {stage}")

        def on_end(self, ev):
            tl.close()

    event.register("numba:compile", CompileListener())
    event.register("numba:run_pass", PassListener())

    def wrap(cls, method, stage):
        original = getattr(cls, method)

        def timed(self, *args, **kwargs):
            tl.open(None, stage)
            try:
                return original(self, *args, **kwargs)
            finally:
                tl.close()
        setattr(cls, method, timed)

    wrap(codegen.CPUCodeLibrary, "_optimize_functions", "llvm per-function passes")
    wrap(codegen.CPUCodeLibrary, "_optimize_final_module", "llvm module optimisation (with callees)")
    wrap(codegen.CPUCodeLibrary, "finalize", "llvm linking callees, verify")
    wrap(codegen.JITCodeLibrary, "_finalize_specific", "machine code emission")
    wrap(optimise_once, "_emit_quickly", "machine code emission -O0 (linked-only modules)")
    wrap(caching.Cache, "save_overload", "cache write")
    wrap(caching.Cache, "load_overload", "cache read")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", type=Path, help="config to build and run once")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--top", type=int, default=20, help="functions to list (default 20)")
    ap.add_argument("--json", type=Path, help="write the figures as JSON here")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="moehub-compile-") as cache:
        os.environ["NUMBA_CACHE_DIR"] = cache      # before moehub_arch is imported
        os.environ["MOEHUB_COMPILE_JOBS"] = "1"    # every compile in this process, traced
        os.environ.pop("NUMBA_DISABLE_JIT", None)
        sys.path.insert(0, str(REPO))
        tl = _Timeline()
        _install(tl)
        from moehub_arch.config import load_config
        from moehub_arch.errors import exit_code, user_errors
        from moehub_arch.simulation import Simulation
        c0 = time.process_time()
        t0 = t1 = time.perf_counter()
        try:
            sim = Simulation(load_config(args.config, args.overrides))
            t1 = time.perf_counter()
            sim.run()
        except user_errors() as e:      # bad config or a failing run: one paragraph, no traceback
            print(f"profile_compile: error: {e}", file=sys.stderr)
            sys.exit(exit_code(e))
        t2 = time.perf_counter()
        cpu_s = time.process_time() - c0
        cache_mb = sum(f.stat().st_size for f in Path(cache).rglob("*") if f.is_file()) / 2 ** 20

    compile_s = float(sim.stats["hostCompileSeconds"])
    total = sum(tl.by_stage.values())
    print(f"build {t1 - t0:.1f} s, run {t2 - t1:.1f} s (compile/load of the engine: "
          f"{compile_s:.1f} s wall); CPU seconds of build and run: {cpu_s:.1f}; compiler CPU "
          f"time traced: {total:.1f} s; "
          f"{len(tl.versions)} compiled functions, {sum(tl.versions.values())} versions; "
          f"cache written: {cache_mb:.1f} MB")
    print("\nstage                                              seconds   share")
    for stage, s in sorted(tl.by_stage.items(), key=lambda kv: -kv[1]):
        print(f"  {stage:<48} {s:8.2f} {100 * s / total:6.1f}%")
    print(f"\nfunction (exclusive of its callees' compiles)        seconds  versions  "
          f"largest stage")
    ranked = sorted(tl.by_function.items(), key=lambda kv: -kv[1])
    for name, s in ranked[:args.top]:
        stages = {st: v for (fn, st), v in tl.by_function_stage.items() if fn == name}
        big = max(stages, key=stages.get) if stages else ""
        print(f"  {name:<50} {s:8.2f} {tl.versions.get(name, 0):6d}    {big}")
    many = {n: v for n, v in tl.versions.items() if v > 1}
    if many:
        print("\ncompiled more than once: " + ", ".join(f"{n} x{v}" for n, v in sorted(many.items())))
    if args.json:
        args.json.write_text(json.dumps({
            "config": str(args.config), "overrides": args.overrides,
            "compile_s": compile_s, "cpu_s": round(cpu_s, 2), "traced_s": round(total, 3), "cache_mb": round(cache_mb, 2),
            "functions": len(tl.versions), "versions": sum(tl.versions.values()),
            "stages": {k: round(v, 3) for k, v in sorted(tl.by_stage.items(), key=lambda kv: -kv[1])},
            "by_function": {n: {"s": round(s, 3), "versions": tl.versions.get(n, 0)}
                            for n, s in ranked},
        }, indent=1) + "\n")


if __name__ == "__main__":
    main()
