"""Cold start on two cores: compile the handlers' entry points and the run loop at the same time.

Numba compiles in one thread: the first run after an install (or after an edit of the engine,
which changes the cache key, moehub_arch/__init__.py) spends about a minute compiling ~290
functions one after the other (tools/profile_compile.py). About half of it is the SM's issue
handler with its instruction interpreter and the MoE-Hub AAU, which the run loop calls through
pointers (dispatch/indirect.py), so neither side needs the other compiled first. On a cold cache,
`EngineCompile` starts one worker process that compiles the SM's entry point and the AAU's retry
entry point into the same on-disk cache while this process compiles the run loop and then the
AAU's receive entry point (the split that measured closest to even, docs/performance.md); it then
waits for the worker and loads its entry points from the cache. Of the entry points of the blocks
compiled on demand that the run uses (dispatch/indirect.py), the worker takes the instructions'
and this process the rest. A run whose run loop is cached but which needs an entry point no
earlier run compiled (the first run of a config with a multicast object, say) compiles it here. The compiled code is the same as a serial compile's (each function
compiled from the same source for the same types), so results are too; only the wall time of the
cold start changes (README, Performance). Functions both sides call (the scheduler's, the DAM's)
are compiled by both processes, each for itself: the cache keeps one copy.

A worker that fails, or is not started, changes nothing but the time: this process then
compiles the entry points itself, as a serial compile would. `MOEHUB_COMPILE_JOBS=1` turns the
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
                              "compiles the SM's call tree, dispatch/precompile.py)")
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


class EngineCompile:
    """The engine for one State layout, compiled or loaded: `EngineCompile(state, run_loop_args)`
    starts the worker on a cold cache (before the run's set-up compiles its start hooks and the
    State packer, so the worker's start-up overlaps them), `finish()` compiles the rest here, waits
    and returns (the entry table, the run loop's last argument; how the cold start went: 'warm',
    'serial', 'parallel', 'parallel, worker failed' or 'pure Python')."""

    def __init__(self, state, run_loop_args):
        from numba import typeof, types
        from . import loop
        from ..engine.stateref import jit_disabled, state_ref_type
        from .indirect import entry_cached, rows_in_use, worker_rows
        self.worker = self.tmp = None
        # the entry points this run needs: those of the blocks it does not use are not compiled
        self.rows = rows_in_use(state)
        if jit_disabled():
            self.how = "pure Python"
            return
        jobs = compile_jobs()
        self.state_type = state_ref_type(state)
        entries_type = types.Array(types.int64, 1, "C")   # entry_table's addresses
        self.sig = (self.state_type,) + tuple(typeof(a) for a in run_loop_args) + (entries_type,)
        if _cached(loop.run_loop, self.sig):
            # warm, unless the run uses a block compiled on demand whose entry points no earlier
            # run compiled: this process compiles them (finish)
            warm = all(entry_cached(self.state_type, r) for r in self.rows)
            self.how = "warm" if warm else "serial"
        elif jobs < 2:
            self.how = "serial"
        else:
            self.how = "parallel"
            self.tmp = tempfile.TemporaryDirectory(prefix="moehub-precompile-")
            type_path = os.path.join(self.tmp.name, "state_type.pickle")
            with open(type_path, "wb") as f:
                pickle.dump((self.state_type, worker_rows(self.rows)), f)
            self.log_path = os.path.join(self.tmp.name, "worker.log")
            with open(self.log_path, "wb") as log:
                self.worker = subprocess.Popen([sys.executable, "-m", __name__, type_path],
                                               stdin=subprocess.DEVNULL, stdout=log, stderr=log)

    def finish(self):
        from . import loop
        from .indirect import entry_point, entry_table, worker_rows
        if self.how == "pure Python":
            return entry_table(None, self.rows), self.how
        if self.worker is None:
            return entry_table(self.state_type, self.rows), self.how
        try:
            c0 = time.process_time()
            loop.run_loop.compile(self.sig)
            for row in self.rows:   # the entry points left to this process
                if row not in worker_rows(self.rows):
                    entry_point(self.state_type, row)
            own_cpu = time.process_time() - c0
            try:
                code = self.worker.wait(timeout=WORKER_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                code = None
            if os.environ.get("MOEHUB_PRECOMPILE_DEBUG"):
                with open(self.log_path) as f:
                    print(f"precompile: run loop and own entry points {own_cpu:.1f} s CPU; "
                          f"worker exit {code}: " + f.read().strip(), file=sys.stderr)
        finally:
            self.close()
        if code != 0:
            self.how = "parallel, worker failed"
        return entry_table(self.state_type, self.rows), self.how

    def close(self):
        """Stop the worker if it still runs (the run failed before finish) and clean up."""
        if self.worker is not None and self.worker.poll() is None:
            self.worker.kill()
            self.worker.wait()
        if self.tmp is not None:
            self.tmp.cleanup()
            self.tmp = None


def _worker(type_path):
    """The worker process: compile the entry points it was given for the pickled State type."""
    from .. import version  # noqa: F401  (the cache folder, as in the parent: inherited or the same)
    from .indirect import entry_point
    with open(type_path, "rb") as f:
        state_type, rows = pickle.load(f)
    t0 = time.perf_counter()
    for row in rows:
        entry_point(state_type, row)
    print(f"precompile worker: {time.perf_counter() - t0:.1f} s wall, "
          f"{time.process_time():.1f} s CPU", file=sys.stderr)


if __name__ == "__main__":
    _worker(sys.argv[1])
