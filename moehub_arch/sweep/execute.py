"""Running sweep points: in a local process pool (default) or on a Dask distributed cluster.

A point runs entirely on its worker, in a private temporary directory; the worker sends back every
file the run wrote (config.json, stats.*, and trace.json or stats dumps if the sweep asks for
them), and this process writes them into the point's directory. So a cluster needs the package
installed on its workers (the same version: results are bit-identical wherever a point runs), but
no file system shared with this machine.
"""
import concurrent.futures as cf
import multiprocessing
import os
import signal
import sys
import tempfile
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from pathlib import Path


def run_point(config_path, overrides, system=""):
    """Run one point (in a worker; `system`: a system file in place of the config's, as
    --system). Returns {"files": {name: bytes}} or {"error": message} (and, for an unexpected
    exception, a bug in the simulator, "traceback": its text)."""
    import traceback

    from ..errors import user_errors
    from ..config import load_config
    from ..runner import run_to_outdir
    try:
        cfg = load_config(config_path, list(overrides), system_file=system or None)
        with tempfile.TemporaryDirectory(prefix="moehub-point-") as tmp:
            run_to_outdir(cfg, tmp)
            files = {p.name: p.read_bytes() for p in Path(tmp).iterdir() if p.is_file()}
        return {"files": files}
    except user_errors() as e:
        return {"error": str(e)}
    except Exception as e:   # noqa: BLE001 - a bug: this point fails, the others still run
        return {"error": f"internal error (a bug in moehub-sim): {type(e).__name__}: {e}",
                "traceback": traceback.format_exc()}


def _died(procs):
    """How the pool's dead worker processes ended: 'killed by SIGKILL', 'exit status 1'."""
    out = []
    for proc in procs:
        proc.join(timeout=10)
        code = proc.exitcode
        if code is None or code == 0:
            continue
        if code < 0:
            try:
                out.append(f"killed by {signal.Signals(-code).name}")
            except ValueError:
                out.append(f"killed by signal {-code}")
        else:
            out.append(f"exit status {code}")
    return ", ".join(dict.fromkeys(out)) or "ended without a result"


def _worker_init(workers):
    """Workers leave Ctrl-C to the sweep process (the terminal sends it to the whole process
    group): it decides, stops them and keeps the finished points. Several workers already keep
    the cores busy: on a cold Numba cache each compiles in its own process only, without the
    second compile process of dispatch/precompile.py."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if workers > 1:
        os.environ.setdefault("MOEHUB_COMPILE_JOBS", "1")


@contextmanager
def main_script_hidden():
    """While worker processes start: keep them from re-importing the caller's main script.

    A spawned worker (a fresh interpreter) normally imports the parent's `__main__` module again,
    so a user's script that calls `moehub_arch.sweep(...)` or `run(engine=...)` without an
    `if __name__ == "__main__":` guard would run again in every worker and fail there. The workers
    need nothing from it (what they run lives in this package), so the main module's file and spec
    are hidden while they start, as they are in a notebook. Workers start in the calling thread
    (ProcessPoolExecutor.submit), inside this block."""
    main = sys.modules.get("__main__")
    if main is None or getattr(main, "__file__", None) is None:
        yield
        return
    saved = {k: getattr(main, k) for k in ("__file__", "__spec__") if hasattr(main, k)}
    del main.__file__
    main.__spec__ = None
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(main, k, v)


def run_local(points, sweep, workers, on_done):
    """Run `points` in `workers` local processes; `on_done(point, result)` as each finishes.

    A worker process that dies (killed, out of memory, crashed) breaks the whole pool: the points
    that finished are kept, the unfinished ones are suspects and run again one at a time, each in
    a pool of its own, so a point that kills its worker again is recorded as failed with how the
    worker ended, and every other point still runs. Interrupted (or any error here): the workers
    are terminated, points not finished are dropped (they run again when the sweep is re-run)."""
    pending, suspects = list(points), []
    while pending or suspects:
        if pending:
            batch, width, pending = pending, workers, []
        else:
            batch, width = [suspects.pop(0)], 1
        broken, how = _run_pool(batch, sweep, width, on_done)
        if broken and width == 1:
            (point,) = broken
            on_done(point, {"error": f"the worker process running this point died ({how}) "
                                     f"twice: it was killed, ran out of memory or crashed"})
        else:
            suspects += broken


def _run_pool(points, sweep, workers, on_done):
    """One process pool over `points`; returns (the points a dead worker left unfinished, how the
    dead workers ended)."""
    ctx = multiprocessing.get_context("spawn")   # fresh interpreters: no forked Numba/threads state
    pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx,
                                  initializer=_worker_init, initargs=(workers,))
    broken = []
    try:
        with main_script_hidden():
            futures = {pool.submit(run_point, str(sweep.config), p.overrides, p.system): p
                       for p in points}
        # the worker processes (the executor forgets them once one died): to say how they ended
        procs = list((getattr(pool, "_processes", None) or {}).values())
        for fut in cf.as_completed(futures):
            try:
                result = fut.result()
            except BrokenProcessPool:
                broken.append(futures[fut])
                continue
            on_done(futures[fut], result)
    except BaseException:
        # the executor has no public way to stop running work: terminate its processes
        for proc in list(getattr(pool, "_processes", {}).values()):
            proc.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    how = _died(procs) if broken else ""
    pool.shutdown(wait=True)
    order = {p.id: i for i, p in enumerate(points)}
    return sorted(broken, key=lambda p: order[p.id]), how


def run_dask(points, sweep, address, on_done):
    """Run `points` as tasks on the Dask scheduler at `address` (tcp://HOST:PORT)."""
    try:
        from dask.distributed import Client, as_completed
    except ImportError:
        from .spec import SweepError
        raise SweepError("--scheduler needs Dask: pip install 'moehub-arch[cluster]' "
                         "(dask[distributed])") from None
    try:
        client = Client(address, timeout="20s")
    except ValueError as e:   # not an address Dask reads ('host', 'http://...', no port)
        from .spec import SweepError
        raise SweepError(f"--scheduler {address}: not a Dask scheduler address ({e}); expected "
                         f"tcp://HOST:PORT") from None
    except (OSError, TimeoutError) as e:
        from .spec import SweepError
        raise SweepError(f"--scheduler {address}: cannot connect to a Dask scheduler ({e})") from None
    try:
        futures = {client.submit(run_point, str(sweep.config), p.overrides, p.system, pure=False,
                                 key=f"moehub-point-{p.id}"): p for p in points}
        for fut in as_completed(futures):
            try:
                result = fut.result()
            except Exception as e:   # noqa: BLE001 - e.g. KilledWorker: this point fails alone
                result = {"error": f"the Dask task failed ({type(e).__name__}: {e})"}
            on_done(futures[fut], result)
    finally:
        client.close()
