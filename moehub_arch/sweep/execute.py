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
from contextlib import contextmanager
from pathlib import Path


def run_point(config_path, overrides):
    """Run one point (in a worker). Returns {"files": {name: bytes}} or {"error": message}."""
    from ..errors import user_errors
    from ..config import load_config
    from ..runner import run_to_outdir
    try:
        cfg = load_config(config_path, list(overrides))
        with tempfile.TemporaryDirectory(prefix="moehub-point-") as tmp:
            run_to_outdir(cfg, tmp)
            files = {p.name: p.read_bytes() for p in Path(tmp).iterdir() if p.is_file()}
        return {"files": files}
    except user_errors() as e:
        return {"error": str(e)}


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
    Interrupted (or any error here): the workers are terminated, points not finished are dropped
    (they run again when the sweep is re-run)."""
    ctx = multiprocessing.get_context("spawn")   # fresh interpreters: no forked Numba/threads state
    pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx,
                                  initializer=_worker_init, initargs=(workers,))
    try:
        with main_script_hidden():
            futures = {pool.submit(run_point, str(sweep.config), p.overrides): p for p in points}
        for fut in cf.as_completed(futures):
            on_done(futures[fut], fut.result())
    except BaseException:
        # the executor has no public way to stop running work: terminate its processes
        for proc in list(getattr(pool, "_processes", {}).values()):
            proc.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


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
        futures = {client.submit(run_point, str(sweep.config), p.overrides, pure=False,
                                 key=f"moehub-point-{p.id}"): p for p in points}
        for fut in as_completed(futures):
            on_done(futures[fut], fut.result())
    finally:
        client.close()
