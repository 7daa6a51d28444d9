"""`moehub-sim sweep SWEEP.yaml`: design-space sweeps, each point one run in its own directory,
results collected into one CSV table; resumable; local processes or a Dask cluster.

Output directory:
    sweep.json           the expanded sweep: config, every point's overrides and directory
    points/<id>/         one run's files (config.json, stats.*), plus done.json once finished
    results.csv          one row per point: its swept values, then the selected stats (and,
                         when a point failed, a last column `error` with its reason)

Re-running the same sweep skips the points whose done.json is there and names the same overrides,
the same resolved config and the same sources (the package's code, ISA, kernels and shipped
configs: `paths.sources_digest`), so an interrupted sweep resumes, and a point whose config, system
or model file - or the simulator itself - changed since runs again; a failed point leaves error.txt
and is tried again next time. A point that fails - bad input, an internal error, a worker process
that dies - fails alone (issue 52): the other points run, results.csv marks it 'error' with its
reason, and the command ends with status 1 naming the failed points.

From Python, `moehub_arch.sweep(spec, ...)` (this package is callable: it calls
`sweep_frame`, which is also `moehub_arch.api.sweep`) runs a sweep file or mapping and returns a DataFrame, one row per point.
"""
import csv
import fnmatch
import json
import os
import sys
import types
from collections.abc import Mapping

from ..frontend import require_pandas, user_path
from ..arguments import bool_arg, int_arg, path_arg
from ..interrupts import Interrupted, exit_status
from ..outputs import OutdirLock, write_atomic
from ..paths import sources_digest
from .spec import Sweep, SweepError, load_sweep, sweep_from_dict  # noqa: F401 (public API)

DONE = "done.json"


def _finished(sweep, point):
    """The point's stats if it finished in an earlier run of this sweep, else None."""
    d = sweep.outdir / "points" / point.id
    try:
        done = json.loads((d / DONE).read_text())
        if (done.get("overrides") == list(point.overrides)
                and done.get("config_digest") == point.config_digest
                and done.get("sources_digest") == sources_digest()):
            return json.loads((d / "stats.json").read_text())
    except (OSError, ValueError):
        pass
    return None


def finished_rows(sweep):
    """{point id: row} of the points that finished in an earlier run of this sweep (status
    "ok (earlier run)"), without running anything: what a report of an unfinished sweep shows."""
    rows = {}
    for p in sweep.points:
        stats = _finished(sweep, p)
        if stats is not None:
            rows[p.id] = {"point": p, "status": "ok (earlier run)",
                          "stats": _select(stats, sweep.stats)}
    return rows


def _select(stats, patterns):
    """{name: value} of the stats matching `patterns`, in stat order."""
    return {name: s["value"] for name, s in stats.items()
            if any(fnmatch.fnmatchcase(name, p) for p in patterns)}


def write_results(sweep, rows):
    """results.csv: point, status, swept keys, then every selected stat (union, first-seen order)."""
    columns = []
    for r in rows:
        columns += [c for c in r["stats"] if c not in columns]
    path = sweep.outdir / "results.csv"

    # a sweep with failed points gets a last column, the first line of each failure's reason
    reasons = any(r["status"] == "error" for r in rows)

    def write(f):
        w = csv.writer(f)
        w.writerow(["point", "status"] + list(sweep.swept_keys) + columns
                   + (["error"] if reasons else []))
        for r in rows:
            values = dict(r["point"].values)
            w.writerow([r["point"].id, r["status"]] + [values.get(k, "") for k in sweep.swept_keys]
                       + [r["stats"].get(c, "") for c in columns]
                       + ([r.get("error", "").splitlines()[0] if r.get("error") else ""]
                          if reasons else []))
    write_atomic(path, write, "sweep results file")
    return path


def run_sweep(sweep, workers=None, scheduler=None, progress=True):
    """Run every unfinished point; returns (results.csv path, rows). Rows are in point order, each
    {"point": Point, "status": "ok" | "ok (earlier run)" | "error", "stats": {name: value}} and,
    for a failed point, "error": its message."""
    from .execute import run_dask, run_local

    points_dir = sweep.outdir / "points"
    points_dir.mkdir(parents=True, exist_ok=True)
    # one sweep per output directory (two would run the same points and mix their files)
    with OutdirLock(sweep.outdir, "sweep"):
        return _run_sweep_locked(sweep, workers, scheduler, progress, points_dir)


def _run_sweep_locked(sweep, workers, scheduler, progress, points_dir):
    from .execute import run_dask, run_local

    (sweep.outdir / "sweep.json").write_text(json.dumps({
        "name": sweep.name, "sweep_file": str(sweep.file) if sweep.file else None,
        "config": str(sweep.config),
        "stats": list(sweep.stats),
        "points": [{"id": p.id, "values": {k: v for k, v in p.values}, "overrides": list(p.overrides)}
                   for p in sweep.points]}, indent=1, default=str))
    results = finished_rows(sweep)
    todo = [p for p in sweep.points if p.id not in results]
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(sweep.points), initial=len(sweep.points) - len(todo), unit="run",
                   desc=f"sweep {sweep.name}", file=sys.stderr, dynamic_ncols=True)

    def on_done(point, result):
        d = points_dir / point.id
        d.mkdir(parents=True, exist_ok=True)
        (d / DONE).unlink(missing_ok=True)
        if "error" in result:
            (d / "error.txt").write_text(result["error"] + "\n"
                                         + (f"\n{result['traceback']}" if "traceback" in result
                                            else ""))
            results[point.id] = {"point": point, "status": "error", "stats": {},
                                 "error": result["error"],
                                 "traceback": result.get("traceback")}
        else:
            (d / "error.txt").unlink(missing_ok=True)
            for name, data in result["files"].items():
                (d / name).write_bytes(data)
            # written last: its presence means every file of the point is complete
            (d / DONE).write_text(json.dumps({"overrides": list(point.overrides),
                                              "config_digest": point.config_digest,
                                              "sources_digest": sources_digest()}))
            stats = json.loads(result["files"]["stats.json"])
            results[point.id] = {"point": point, "status": "ok", "stats": _select(stats, sweep.stats)}
        if bar is not None:
            bar.update(1)

    try:
        if todo and scheduler:
            run_dask(todo, sweep, scheduler, on_done)
        elif todo:
            run_local(todo, sweep, workers or os.cpu_count() or 1, on_done)
    except Interrupted as e:
        # keep what finished: results.csv of the finished points; a re-run resumes the rest
        if bar is not None:
            bar.close()
            bar = None
        rows = [results[p.id] for p in sweep.points if p.id in results]
        e.sweep_results = (write_results(sweep, rows), rows)
        raise
    finally:
        if bar is not None:
            bar.close()
    rows = [results[p.id] for p in sweep.points if p.id in results]
    return write_results(sweep, rows), rows


def run_sweep_command(args):
    sweep = load_sweep(args.sweep_file, args.outdir)
    if args.workers is not None and args.workers < 1:
        raise SweepError(f"--workers: expected at least 1, found {args.workers}")
    try:
        path, rows = run_sweep(sweep, workers=args.workers, scheduler=args.scheduler,
                               progress=not args.quiet)
    except Interrupted as e:
        path, rows = getattr(e, "sweep_results", (None, []))
        print(f"moehub-sim: sweep {e}: the workers were stopped; {len(rows)} of "
              f"{len(sweep.points)} points finished and are kept"
              + (f" (in {path})" if path else "")
              + "; run the same command again to run the rest", file=sys.stderr)
        return exit_status(e.signum)
    failed = [r["point"] for r in rows if r["status"] == "error"]
    if not args.quiet:
        skipped = sum(r["status"].startswith("ok (") for r in rows)
        print(f"{len(rows)} points ({skipped} finished earlier, {len(failed)} failed); wrote {path}")
    for r in rows:
        if r["status"] == "error":
            print(f"moehub-sim: point {r['point'].id} failed: {r['error']}"
                  + (f" (traceback in {sweep.outdir / 'points' / r['point'].id / 'error.txt'})"
                     if r.get("traceback") else ""), file=sys.stderr)
    if failed:
        print(f"moehub-sim: sweep {sweep.name}: {len(failed)} of {len(sweep.points)} point(s) "
              f"failed ({', '.join(p.id for p in failed)}); the others ran; {path} marks the "
              f"failed ones 'error'; running the same command again tries them again",
              file=sys.stderr)
    return 1 if failed else 0


def sweep_frame(spec, outdir=None, workers=None, scheduler=None, progress=True):
    """Run a sweep (`moehub-sim sweep`) and return its results as a pandas DataFrame, one row per
    point in point order.

    `spec`: a sweep file's path, or a mapping with the same keys (config, set, grid, points,
    stats, name, outdir; relative paths from the working directory). Points run in `workers`
    local processes (default: the CPU count) or on the Dask scheduler at `scheduler`
    (tcp://HOST:PORT); `progress` shows the progress bar. Every point writes its run directory
    under `outdir` (default: the spec's outdir, else sweep-out/<name>), and re-running finds the
    points finished earlier, as the command does.

    Columns: point (its directory name), status ('ok', 'ok (earlier run)' or 'error'), the swept
    keys, the selected stats, outdir (the point's run directory: `load_results(row.outdir)`),
    error (a failed point's message, else None). Bad input raises SweepError / ConfigError before
    anything runs; a point that fails is a row with status 'error', not an exception.
    """
    pd = require_pandas()
    int_arg("workers", workers, lo=1, hi=None, optional=True)
    path_arg("outdir", outdir, optional=True)
    if scheduler is not None and not isinstance(scheduler, str):
        raise TypeError(f"scheduler: expected an address string tcp://HOST:PORT, found "
                        f"{type(scheduler).__name__}")
    bool_arg("progress", progress)
    if isinstance(spec, Mapping):
        sw = sweep_from_dict(dict(spec), None, outdir)
    elif isinstance(spec, (str, os.PathLike)):
        sw = load_sweep(user_path(spec), outdir)   # relative: falls back to the shipped files
    else:
        raise SweepError(f"sweep spec: expected a sweep file path or a mapping of its keys, found "
                         f"{type(spec).__name__}")
    _, rows = run_sweep(sw, workers=workers, scheduler=scheduler, progress=progress)
    stat_columns = []
    for r in rows:
        stat_columns += [c for c in r["stats"] if c not in stat_columns]
    records = []
    for r in rows:
        p = r["point"]
        rec = {"point": p.id, "status": r["status"]}
        rec.update(dict(p.values))
        rec.update(r["stats"])
        rec["outdir"] = str(sw.outdir / "points" / p.id)
        rec["error"] = r.get("error")
        records.append(rec)
    columns = ["point", "status"] + list(sw.swept_keys) + stat_columns + ["outdir", "error"]
    df = pd.DataFrame.from_records(records, columns=columns)
    df.attrs["sweep"] = sw.name
    df.attrs["outdir"] = str(sw.outdir)
    return df


class _CallableSweepPackage(types.ModuleType):
    """This package's type: `moehub_arch.sweep(...)` is sweep_frame (the API's sweep()), while
    `moehub_arch.sweep.load_sweep` etc. stay where they are."""

    def __call__(self, spec, *args, **kwargs):
        return sweep_frame(spec, *args, **kwargs)


sys.modules[__name__].__class__ = _CallableSweepPackage
