"""Running sweep points: in a local process pool (default) or on a Dask distributed cluster.

A point runs entirely on its worker, in a private temporary directory; the worker sends back every
file the run wrote (config.json, stats.*, and trace.json or stats dumps if the sweep asks for
them), and this process writes them into the point's directory. So a cluster needs the package
installed on its workers (the same version: results are bit-identical wherever a point runs), but
no file system shared with this machine.
"""
import concurrent.futures as cf
import multiprocessing
import tempfile
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


def run_local(points, sweep, workers, on_done):
    """Run `points` in `workers` local processes; `on_done(point, result)` as each finishes."""
    ctx = multiprocessing.get_context("spawn")   # fresh interpreters: no forked Numba/threads state
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {pool.submit(run_point, str(sweep.config), p.overrides): p for p in points}
        for fut in cf.as_completed(futures):
            on_done(futures[fut], fut.result())


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
