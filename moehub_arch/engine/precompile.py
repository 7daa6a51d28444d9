"""Cold start on two cores: compile the SM's call tree and the run loop at the same time.

Numba compiles in one thread: the first run after an install (or after an edit of the engine,
which changes the cache key, moehub_arch/__init__.py) spends about a minute compiling ~290
functions one after the other (tools/profile_compile.py). About half of it is the SM's issue
handler and its instruction interpreter, which the run loop calls through a pointer
(engine/indirect.py), so neither needs the other compiled first. On a cold cache,
`prepare_engine` starts one worker process that compiles the SM's entry point into the same
on-disk cache while this process compiles the run loop; it then waits for the worker and loads
the entry point from the cache. The compiled code is the same as a serial compile's (each
function compiled from the same source for the same types), so results are too; only the wall
time of the cold start changes (README, Performance). Functions both trees call (the AAU's, the
event queue's) may be compiled by both processes, each for itself: the cache keeps one copy.

A worker that fails, or is not started, changes nothing but the time: this process then
compiles the entry point itself, as a serial compile would. `MOEHUB_COMPILE_JOBS=1` turns the
worker off (tools/profile_compile.py does, to trace every compile in one process); it is also off
on a machine with one core for us and under NUMBA_DISABLE_JIT.
"""
import os
import pickle
import subprocess
import sys
import tempfile
import time

WORKER_TIMEOUT_S = 900   # a worker slower than this is abandoned (this process compiles instead)


def compile_jobs():
    """Processes to compile with: MOEHUB_COMPILE_JOBS if set (1 or 2; more would have nothing to
    do), else 2 where two cores are ours."""
    value = os.environ.get("MOEHUB_COMPILE_JOBS", "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            from ..config import ConfigError
            raise ConfigError(f"environment variable MOEHUB_COMPILE_JOBS = {value!r}: the number "
                              "of processes compiling the engine on a cold cache must be a whole "
                              "number >= 1 (1: this process only; 2 or more: a second process "
                              "compiles the SM's call tree, engine/precompile.py)")
        return min(int(value), 2)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return 2 if (cores or 1) >= 2 else 1


def _cached(disp, sig):
    """Whether dispatcher `disp` has a version for `sig` in this process or in the on-disk cache
    (the lookup Numba's dispatcher makes before it compiles, without loading the code)."""
    if tuple(sig) in disp.overloads:
        return True
    try:
        cache = disp._cache
        key = cache._index_key(sig, disp.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except Exception:   # noqa: BLE001 (a cache we cannot read, a Numba without these internals)
        return False


def prepare_engine(ref, run_loop_args):
    """Compile (or load) what the run loop needs for State `ref` (a StateRef; run_loop_args: its
    other arguments but the last) and return (address of the SM issue entry point, how the cold
    start went: 'warm', 'serial', 'parallel' or 'parallel, worker failed')."""
    from numba import typeof
    from . import loop
    from .indirect import sm_issue_address
    from .stateref import jit_disabled
    if jit_disabled():
        return 0, "pure Python"
    jobs = compile_jobs()
    state_type = typeof(ref)
    sig = (state_type,) + tuple(typeof(a) for a in run_loop_args) + (typeof(0),)
    if _cached(loop.run_loop, sig):
        return sm_issue_address(state_type), "warm"
    if jobs < 2:
        return sm_issue_address(state_type), "serial"
    with tempfile.TemporaryDirectory(prefix="moehub-precompile-") as tmp:
        type_path = os.path.join(tmp, "state_type.pickle")
        with open(type_path, "wb") as f:
            pickle.dump(state_type, f)
        log_path = os.path.join(tmp, "worker.log")
        with open(log_path, "wb") as log:
            worker = subprocess.Popen([sys.executable, "-m", __name__, type_path],
                                      stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        try:
            c0 = time.process_time()
            loop.run_loop.compile(sig)
            own_cpu = time.process_time() - c0
            try:
                code = worker.wait(timeout=WORKER_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                code = None
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        if os.environ.get("MOEHUB_PRECOMPILE_DEBUG"):
            with open(log_path) as f:
                print(f"precompile: run loop {own_cpu:.1f} s CPU; worker exit {code}: "
                      + f.read().strip(), file=sys.stderr)
    how = "parallel" if code == 0 else "parallel, worker failed"
    return sm_issue_address(state_type), how


def _worker(type_path):
    """The worker process: compile the SM issue entry point for the pickled State type."""
    import moehub_arch  # noqa: F401  (the cache folder, as in the parent: inherited or the same)
    from .indirect import sm_issue_address
    with open(type_path, "rb") as f:
        state_type = pickle.load(f)
    t0 = time.perf_counter()
    sm_issue_address(state_type)
    print(f"precompile worker: {time.perf_counter() - t0:.1f} s wall, "
          f"{time.process_time():.1f} s CPU", file=sys.stderr)


if __name__ == "__main__":
    _worker(sys.argv[1])
