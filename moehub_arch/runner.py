"""One run from a loaded config to its output directory: the observers the config asks for
(timeline, debug output, periodic dumps, progress) and the files every run writes.

Used by `moehub-sim run`, by every point of `moehub-sim sweep` and by `moehub_arch.run()` (which
may run without an output directory: then nothing is written). How files are
written so that a directory is never half-written yet looks complete: outputs.py.
"""
import contextlib
import json

from .outputs import OutdirLock, OutputError, make_outdir, remove_stale, write_text_atomic
from .signal_state import Interrupted
from .simulation import Simulation
from .stats import write_stats_csv, write_stats_json, write_stats_txt

OUTPUT_FILES = ("config.json", "stats.txt", "stats.json", "stats.csv")
# written while the run goes, when the config asks for them (renamed from NAME.partial at the end)
STREAMED_FILES = ("trace.json", "stats_dumps.txt", "stats_dumps.csv")


def observers_for(cfg, outdir, progress=False, quiet=False):
    """RunObservers for what `cfg` switches on; modules of features that are off are not loaded.
    `outdir` None (a run kept in memory): a feature that writes a file is a ConfigError."""
    if outdir is None:
        _check_no_files(cfg)
    observers = []
    if cfg.trace.enabled:
        from .trace.timeline import Timeline
        observers.append(Timeline(cfg.trace, outdir / "trace.json", cfg.system.num_gpus, quiet))
    if cfg.debug.flags:
        from .trace.debug import DebugPrinter
        observers.append(DebugPrinter(cfg.debug, outdir))
    if cfg.stats.dump_period:
        from .stats.periodic import PeriodicDump
        observers.append(PeriodicDump(cfg.stats.dump_period, outdir))
    if progress:
        from .progress import Progress
        observers.append(Progress())
    return observers


def stats_so_far_note(outdir):
    """The line added to an error's message when the run got under way and wrote its stats."""
    return f"(the stats so far are in {outdir}/stats.txt, stats.json, stats.csv)"


def _check_no_files(cfg):
    from .config import ConfigError
    writes = [(key, what) for key, what, on in (
        ("trace.enabled", "trace.json", cfg.trace.enabled),
        ("stats.dump_period", "stats_dumps.txt", cfg.stats.dump_period),
        ("debug.file", cfg.debug.file, cfg.debug.flags and cfg.debug.file)) if on]
    if writes:
        key, what = writes[0]
        raise ConfigError(f"{cfg.where(key) or 'config'}: {key}: the run writes {what}, which "
                          f"needs an output directory (outdir=...); none was given", None, key)


def run_to_outdir(cfg, outdir, progress=False, quiet=False, before_run=None, sim=None,
                  observers=()):
    """Build, run and write `outdir` (config.json, stats.*, and trace.json etc. when asked for).
    Returns the finished Simulation. `before_run(sim)` is called once the system is built; `sim`
    is a Simulation built already (e.g. restored from a checkpoint) instead of one from `cfg`;
    `observers` run besides those the config asks for. The stats are written whenever the run
    got under way, also when it ends with an error (stuck, invariants, runtime error).
    `outdir` None: the same run, nothing written (the stats stay in the returned Simulation)."""
    out = None if outdir is None else make_outdir(outdir)
    # one writer per output directory: the lock is held until the stats are written
    with OutdirLock(out) if out is not None else contextlib.nullcontext():
        return _run_locked(cfg, out, progress, quiet, before_run, sim, observers)


def _run_locked(cfg, out, progress, quiet, before_run, sim, observers):
    sim = sim if sim is not None else Simulation(cfg)
    if out is not None:
        # never a mix of two runs: what an earlier run left here under our names goes first
        remove_stale(out, STREAMED_FILES + OUTPUT_FILES)
        # the resolved config, including what an MoE layer generated (buffers, launches, windows)
        write_text_atomic(out / "config.json", json.dumps(sim.cfg.to_dict(), indent=1),
                          "config file")
    if before_run is not None:
        before_run(sim)
    error = None
    try:
        sim.run(observers_for(sim.cfg, out, progress=progress, quiet=quiet) + list(observers))
    except BaseException as e:
        error = e
        raise
    finally:
        # a signal after the run loop (interrupts.py: Interrupted) stops at once, nothing more
        # written; every other ending writes the stats so far
        if sim.stats is not None and out is not None and not isinstance(error, Interrupted):
            try:
                write_stats(sim.stats, out)
            except OutputError as e:
                if error is None:
                    raise
                # keep the run's own error; say what else went wrong
                error.args = (f"{error}\n(the stats could not be written either: {e})",)
    return sim


def write_stats(stats, out):
    """stats.txt, stats.csv, then stats.json: written last, it marks the directory complete."""
    write_stats_txt(stats, out / "stats.txt")
    write_stats_csv(stats, out / "stats.csv")
    write_stats_json(stats, out / "stats.json")
