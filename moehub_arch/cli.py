"""`moehub-sim` command line (also `python -m moehub_arch`).

    moehub-sim run [CONFIG.yaml] [--system SYSTEM.yaml] [-o OUTDIR] [--set key.path=value ...] [--seed N] [--engine numba|python]
                   [--trace] [--debug-flags Hub,NVLink] [--debug-start TICK] [--debug-file F] [--quiet]
                   [--max-ticks TIME] [--max-wall SECONDS] [--no-check] [--checkpoint-at TIME ...]
                   [--checkpoint-on-interrupt]
    moehub-sim run --restore CHECKPOINT_DIR [-o OUTDIR]    continue a checkpointed run
    moehub-sim plot OUTDIR [OUTDIR ...] [-o FIGDIR]     PNG figures of runs
    moehub-sim compare OUTDIR [OUTDIR ...] [--stats PATTERN ...]   stats side by side, speedups
    moehub-sim sweep SWEEP.yaml [-o OUTDIR] [--workers N] [--scheduler tcp://HOST:PORT]
    moehub-sim paper NAME [--quick] [-o OUTDIR] [--workers N] [--scheduler tcp://HOST:PORT]
                                            a seed paper's evaluation beside its published figures
    moehub-sim e2e --model M --scheme S [--compare S ...] [--training [--stages N] ...]
                                            a whole model's forward or training step
    moehub-sim validate [--only PATTERN ...] [--json] [--reference FILE ...] [--set KEY=VALUE ...]
                                            hardware correlation: figures beside their references
    moehub-sim asm FILE.s [FILE.s ...] [--config CONFIG.yaml]   validate and disassemble kernels
    moehub-sim isa [--config CONFIG.yaml]   print the instruction-set reference
    moehub-sim stats --list [CONFIG.yaml] [PATTERN]   list the stats a config will produce
    moehub-sim config --list [PATTERN] [--config CONFIG.yaml]   list config keys: type, default,
                                            unit, description, value and its source
    moehub-sim layer --model M --tokens N --scheme S [--system Y] [--top-k K] [--dry-run] [run's options]
                               one MoE layer named by what it is (the config is composed)
    moehub-sim blocks [NAME]   what each hardware block declares: parameters (config key, unit,
                               source), record fields, stats, events, timers, checks, debug flags

Exit status: 0 a run completed (or stopped cleanly at --max-ticks / --max-wall); 130 / 143
interrupted by Ctrl-C (SIGINT) / SIGTERM, stats so far written; 2 bad input
(config, kernel, ISA file, routing trace, checkpoint: one paragraph naming the file and key or
line), an output that cannot be written, or a runtime error in a kernel; 3 a stuck run
(deadlock, the watchdog: no instruction for run.watchdog_interval, or a livelock: thread blocks
spinning without memory, hub or link accesses for run.livelock_interval), with a report of who
waits on what; 4 an end-of-run invariant violated; 70 an internal error (a bug: one paragraph
naming the file that holds the traceback, moehub_arch/bugreport.py); 75 a damaged compile-cache
file was found and removed: run the command again (moehub_arch/cache_repair.py). Stats are written whenever the run got under
way, including exit statuses 3, 4, 130 and 143.
"""
import argparse
import os
import sys
from pathlib import Path

from . import e2e, papers, validation
from .frontend import DEFAULT_CONFIG, config_path, jit_disabled, user_path


def _parser():
    ap = argparse.ArgumentParser(prog="moehub-sim", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a configuration and write its stats")
    run.add_argument("config", nargs="?", help=f"YAML config (default: {DEFAULT_CONFIG})")
    run.add_argument("--system", metavar="SYSTEM.yaml",
                     help="run the config on this system: a file with only a system: section (as "
                          "configs/systems/*.yaml; it may extend one). It takes the place of the "
                          "system the config extends; the config's own system keys (hub sizes, "
                          "GPU count) still apply on top, with a warning")
    run.add_argument("-o", "--outdir", default="moehub-out", help="output directory (default: moehub-out)")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config value, e.g. --set system.nvlink.bandwidth=20GB/s")
    run.add_argument("--seed", type=int, help="random seed (same as --set run.seed=N)")
    run.add_argument("--engine", choices=("numba", "python"),
                     help="numba (compiled) or python (the same code, interpreted: the reference engine)")
    run.add_argument("--quiet", action="store_true", help="print nothing but errors (no progress)")
    run.add_argument("--trace", action="store_true",
                     help="write OUTDIR/trace.json, a timeline for ui.perfetto.dev (window, GPUs, "
                          "components: --set trace.start=10us trace.gpus=[0,1] ...)")
    run.add_argument("--debug-flags", metavar="FLAGS",
                     help="print the events of these components, e.g. Hub,NVLink (SM, Launch, "
                          "NVLink, Switch, Hub, RPM, AAU, DAM, MoEHub, All)")
    run.add_argument("--debug-start", metavar="TICK",
                     help="first tick of debug output (ps, or a time such as 10us)")
    run.add_argument("--debug-file", metavar="FILE",
                     help="debug output file, relative to OUTDIR (default: standard error)")
    run.add_argument("--no-check", action="store_true",
                     help="skip the end-of-run invariants (same as --set run.check_invariants=false)")
    run.add_argument("--max-ticks", metavar="TIME",
                     help="stop cleanly at this simulated time, stats dumped: ticks (ps) or a time "
                          "such as 50us (run.max_ticks)")
    run.add_argument("--max-wall", metavar="SECONDS",
                     help="stop cleanly after this much host time, stats dumped: seconds or a time "
                          "such as 90s (run.max_wall)")
    run.add_argument("--checkpoint-at", metavar="TICK", action="append", default=[],
                     help="write a checkpoint at this simulated time (ticks or e.g. 20us; "
                          "repeatable), then go on")
    run.add_argument("--checkpoint-dir", metavar="DIR",
                     help="where --checkpoint-at writes ('{tick}' is replaced by the tick; "
                          "default OUTDIR/checkpoint-{tick})")
    run.add_argument("--checkpoint-on-interrupt", action="store_true",
                     help="on Ctrl-C (SIGINT) or SIGTERM, write a checkpoint where the run stopped "
                          "(in --checkpoint-dir, default OUTDIR/checkpoint-{tick}) to continue it "
                          "later with --restore")
    run.add_argument("--restore", metavar="DIR",
                     help="continue the run saved in a checkpoint directory (instead of CONFIG)")
    plot = sub.add_parser("plot", help="PNG figures of finished runs (SM timeline per GPU, link "
                                       "utilisation, time breakdown per run) or of result tables "
                                       "(.md/.csv: speedup per baseline, time breakdown and wire "
                                       "bytes per scheme)")
    plot.add_argument("outdirs", nargs="+", metavar="OUTDIR|TABLE")
    plot.add_argument("-o", "--figdir", help="where the PNGs go (default: OUTDIR/plots of the "
                                             "first run; for tables: plots/)")
    plot.add_argument("--gpus", type=int, default=4, help="GPUs shown in the SM timeline (default 4)")
    plot.add_argument("--grid-gpus", metavar="N", help="a layer grid table's GPU count drawn in "
                                                       "speedup.png (default: the one with most cells)")
    plot.add_argument("--std", help="a layer grid table's routing std drawn (default 0.032)")
    cmp_ = sub.add_parser("compare", help="selected stats of runs side by side, with speedups "
                                          "relative to the first")
    cmp_.add_argument("outdirs", nargs="+", metavar="OUTDIR")
    cmp_.add_argument("--stats", action="append", metavar="PATTERN",
                      help="stat name or shell pattern (repeatable; default: layer time, phases, "
                           "SM time, link utilisation, hub stalls, simTicks, report figures)")
    cmp_.add_argument("--per-gpu", action="store_true",
                      help="keep per-GPU stats apart (default: gpuN summed, ratios averaged)")
    cmp_.add_argument("--csv", metavar="FILE", help="also write the table as CSV")
    sweep = sub.add_parser("sweep", help="run a grid or list of --set overrides, in parallel "
                                         "(local processes or a Dask cluster), into one table")
    sweep.add_argument("sweep_file", metavar="SWEEP.yaml")
    sweep.add_argument("-o", "--outdir", help="output directory (default: the sweep file's "
                                              "outdir, else sweep-out/<sweep name>)")
    sweep.add_argument("--workers", type=int, help="local worker processes (default: CPU count)")
    sweep.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                       help="run the points on this Dask distributed scheduler")
    sweep.add_argument("--quiet", action="store_true", help="no progress bar")
    papers.add_parser(sub)
    e2e.add_parser(sub)
    validation.add_arguments(sub.add_parser(
        "validate", help="hardware correlation: run the validation measurements and print each "
                         "figure beside its reference values and the error (also "
                         "tools/validate.py)"))
    asm = sub.add_parser("asm", help="assemble kernel files: validate and print the disassembly")
    asm.add_argument("files", nargs="+")
    asm.add_argument("--config", help="config whose system parameters resolve instruction costs and "
                                      "whose workload.isa_files are read after the shipped isa/*.yaml "
                                      "(needed for a kernel using your own instructions; default: "
                                      f"{DEFAULT_CONFIG})")
    isa = sub.add_parser("isa", help="print the instruction-set reference, with the file and line "
                                     "defining each instruction")
    isa.add_argument("--config", help="config whose system parameters resolve instruction costs and "
                                      "whose workload.isa_files are read after the shipped ones "
                                      f"(default: {DEFAULT_CONFIG})")
    stats = sub.add_parser("stats", help="list the statistics a config produces")
    stats.add_argument("--list", dest="config", nargs="?", const=DEFAULT_CONFIG, required=True,
                       metavar="CONFIG")
    stats.add_argument("pattern", nargs="?", metavar="PATTERN",
                       help="only stats whose name contains PATTERN, or matches it as a shell "
                            "pattern (system.gpu0.nvlink*.tx_*)")
    conf = sub.add_parser("config", help="list config keys: type, default, unit, description, and "
                                         "their value in a config with the source it cites")
    conf.add_argument("--list", dest="pattern", nargs="?", const="", required=True,
                      metavar="PATTERN", help="only keys containing PATTERN (e.g. nvlink) or "
                                              "matching it as a shell pattern; when no key name "
                                              "holds it, the keys whose description names it "
                                              "(row_table: \"row table\")")
    conf.add_argument("--config", help=f"config whose values are shown (default: {DEFAULT_CONFIG})")
    blocks = sub.add_parser("blocks", help="what each hardware block declares (components/*.py "
                                           "BLOCK): parameters, fields, stats, events, timers, checks")
    blocks.add_argument("name", nargs="?", help="only this block (sm, hbm, hub, nvlink, ...)")
    from .cli_layer import add_parser as add_layer_parser
    add_layer_parser(sub, run)
    return ap


_CACHE_STAMP = "moehub-engine-version"


def _engine_cached():
    """True if the Numba cache holds compiled code of this engine version (see
    moehub_arch/version.py): a cache folder the user set with NUMBA_CACHE_DIR may hold code of an
    older engine, which Numba recompiles; the stamp written after a run tells them apart."""
    from .version import engine_version
    folder = os.environ.get("NUMBA_CACHE_DIR")
    if not folder or not any(Path(folder).rglob("*.nbi")):
        return False
    try:
        return (Path(folder) / _CACHE_STAMP).read_text() == engine_version()
    except OSError:
        return False


def _stamp_engine_cache():
    """Record that the cache folder now holds this engine version's compiled code."""
    from .version import engine_version
    folder = os.environ.get("NUMBA_CACHE_DIR")
    if folder and not jit_disabled():
        try:
            (Path(folder) / _CACHE_STAMP).write_text(engine_version())
        except OSError:
            pass     # a read-only cache folder: the notice may show again, nothing else changes


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if args.command == "run" and args.engine == "python":
        # must happen before numba is imported anywhere
        os.environ["NUMBA_DISABLE_JIT"] = "1"
    from .interrupts import Interrupted, exit_status, handle_signals
    try:
        with handle_signals():
            return _dispatch(args)
    except BrokenPipeError:   # output piped into `head` and the like
        sys.stderr.close()
        return 0
    except Interrupted as e:
        print(f"moehub-sim: {e}; nothing more was written", file=sys.stderr)
        return exit_status(e.signum)
    except _user_errors() as e:
        from .errors import exit_code
        print(f"moehub-sim: error: {e}", file=sys.stderr)
        return exit_code(e)
    except OSError as e:
        # a file error no reader above turned into a message: still one paragraph, no traceback
        name = f"{e.filename}: " if e.filename else ""
        print(f"moehub-sim: error: {name}{e.strerror or e}", file=sys.stderr)
        return 2
    except Exception as e:   # noqa: BLE001 - anything else is a bug: a report, not a traceback
        from .cache_repair import EXIT_RETRY, damaged_cache_file, remove_function
        damaged = damaged_cache_file(e)
        if damaged is not None:   # a compile-cache file damaged inside: remove it, run again
            remove_function(damaged)
            print(f"moehub-sim: error: the compiled-engine cache file {damaged} is damaged "
                  f"({type(e).__name__}: {e}); it was removed with its function's other cache "
                  f"files: run the command again to compile that part anew", file=sys.stderr)
            return EXIT_RETRY
        from .bugreport import report_bug
        return report_bug(e, [str(a) for a in argv])


def _user_errors():
    from .errors import user_errors   # one list, shared with the Python API and sweep workers
    return user_errors()


def _load(config, overrides=(), system=None):
    from .config import load_config
    cfg = load_config(config_path(config), overrides, system_file=system)
    for w in cfg.load_warnings:
        print(f"moehub-sim: warning: {w}", file=sys.stderr)
    return cfg


def _dispatch(args):
    if args.command == "run":
        return _run(args)
    if args.command == "isa":
        from .config import flat_params
        from .isa import default_isa_paths, load_isa
        cfg = _load(args.config)
        isa = load_isa(default_isa_paths() + list(cfg.workload.isa_files))
        print(isa.reference_text(flat_params(cfg)))
        return 0
    if args.command == "asm":
        from .config import flat_params
        from .isa import assemble_files, default_isa_paths, disassemble, load_isa
        cfg = _load(args.config)
        isa = load_isa(default_isa_paths() + list(cfg.workload.isa_files)).resolve(flat_params(cfg))
        program = assemble_files([user_path(f) for f in args.files], isa)
        print(disassemble(program, isa))
        return 0
    if args.command == "stats":
        return _list_stats(args)
    if args.command == "blocks":
        from .composition import BLOCKS, describe
        names = [b.name for b in BLOCKS]
        if args.name is not None and args.name not in names:
            from .config import ConfigError
            raise ConfigError(f"blocks {args.name}: no such block (blocks: {', '.join(names)})",
                              "blocks")
        print(describe(args.name))
        return 0
    if args.command == "config":
        from .config.describe import describe_keys
        text = describe_keys(args.pattern or None, _load(args.config))
        if not text:
            from .config import ConfigError
            raise ConfigError(f"config --list {args.pattern}: no config key matches (all keys: "
                              f"moehub-sim config --list)", "--list")
        print(text)
        return 0
    if args.command == "plot":
        from .analysis.plot import plot_runs
        from .analysis.tables import plot_tables
        tables = [p for p in args.outdirs if Path(p).suffix.lower() in (".md", ".csv")]
        runs = [p for p in args.outdirs if p not in tables]
        written = plot_tables([user_path(p) for p in tables], args.figdir or "plots",
                              args.grid_gpus, args.std) if tables else []
        if runs:
            written += plot_runs(runs, args.figdir, max_gpus=args.gpus)
        for path in written:
            print(f"wrote {path}")
        return 0
    if args.command == "compare":
        from .analysis.compare import compare_runs
        print(compare_runs(args.outdirs, args.stats, per_gpu=args.per_gpu, csv_path=args.csv))
        return 0
    if args.command == "sweep":
        from .sweep import run_sweep_command
        return run_sweep_command(args)
    if args.command == "paper":
        return papers.paper_command(args)
    if args.command == "e2e":
        return e2e.command(args)
    if args.command == "validate":
        return validation.command(args)
    if args.command == "layer":
        from .cli_layer import command
        return command(args, lambda argv: _dispatch(_parser().parse_args(argv)),
                       lambda path, overrides: _load(path, overrides))
    return 2


def _observe_overrides(args):
    """--trace and --debug-* as config overrides (so config.json records them)."""
    out = []
    if args.trace:
        out.append("trace.enabled=true")
    if args.debug_flags is not None:
        out.append(f"debug.flags={args.debug_flags}")
    if args.debug_start is not None:
        start = args.debug_start.strip()
        out.append(f"debug.start={start}ps" if start.isdigit() else f"debug.start={start}")
    if args.debug_file is not None:
        out.append(f"debug.file={args.debug_file}")
    return out


def _time_arg(flag, text, bare_unit):
    """A time given on the command line, in ps: a quantity with a unit (50us), or a bare number
    meaning `bare_unit` (ps for ticks, s for wall-clock seconds). A simulated time (ticks) must be
    within the engine's range, a wall-clock time within 64 bits; infinity and NaN are refused."""
    from .config import ConfigError, UnitError, parse_quantity
    from .config.units import INT64_MAX, quantity_limit, range_text
    limit = None if bare_unit == "ps" else INT64_MAX
    try:
        return parse_quantity(text, "time", limit)
    except UnitError as e:
        if "too large" in str(e):
            raise ConfigError(f"{flag} {text}: {e}", flag) from None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0 or value != value:
        raise ConfigError(f"{flag} {text}: expected a time such as 50us, or a non-negative number "
                          f"of {'ticks (ps)' if bare_unit == 'ps' else 'seconds'}", flag)
    ps = value * (1 if bare_unit == "ps" else 10 ** 12)
    if ps > quantity_limit("time", limit):   # infinity included
        raise ConfigError(f"{flag} {text}: too large: expected a time of at most "
                          f"{range_text('time', limit)}", flag)
    return int(round(ps))


def _run_options(args):
    """run.* values the flags set (applied after loading, so they also apply to --restore)."""
    out = {}
    if args.no_check:
        out["check_invariants"] = False
    if args.max_ticks is not None:
        out["max_ticks"] = _time_arg("--max-ticks", args.max_ticks, "ps")
    if args.max_wall is not None:
        out["max_wall"] = _time_arg("--max-wall", args.max_wall, "s")
    return out


def _with_run_options(cfg, args):
    import attrs
    opts = _run_options(args)
    return attrs.evolve(cfg, run=attrs.evolve(cfg.run, **opts)) if opts else cfg


def _simulation(args):
    """The Simulation a `run` command asks for: from a config, or restored from a checkpoint.
    The config is loaded and checked before the engine is imported (the imports below point down,
    to the run's floor), so that bad input is reported without loading Numba."""
    if args.restore:
        from .errors import CheckpointError
        given = [f for f, v in (("CONFIG", args.config), ("--system", args.system),
                                ("--set", args.overrides),
                                ("--seed", args.seed is not None)) if v]
        if given:
            raise CheckpointError(f"--restore {args.restore}: a checkpoint carries its own config; "
                                  f"{', '.join(given)} cannot be combined with it")
        from .checkpoint import restore
        sim = restore(user_path(args.restore))
        sim.cfg = _with_run_options(sim.cfg, args)
        return sim
    overrides = list(args.overrides) + _observe_overrides(args)
    if args.seed is not None:
        overrides.append(f"run.seed={args.seed}")
    if args.engine is not None:
        overrides.append(f"run.engine={args.engine}")
    cfg = _load(args.config, overrides, args.system)
    if cfg.run.engine == "python" and not jit_disabled():
        # the config asked for the reference engine: restart with the JIT disabled
        os.environ["NUMBA_DISABLE_JIT"] = "1"
        os.execv(sys.executable, [sys.executable, "-m", "moehub_arch"] + sys.argv[1:])
    cfg = _with_run_options(cfg, args)
    from .simulation import Simulation
    return Simulation(cfg)


def _run(args):
    checkpoint_ticks = [_time_arg("--checkpoint-at", t, "ps") for t in args.checkpoint_at]
    sim = _simulation(args)
    # the run's floor, imported once the input is known to be good (see _simulation)
    from .checkpoint import CheckpointWriter
    from .interrupts import InterruptStop
    from .runner import run_to_outdir, stats_so_far_note

    cfg = sim.cfg
    out = Path(args.outdir)

    def say_compiling(sim):
        if not args.quiet and not jit_disabled() and not _engine_cached():
            print("compiling the simulation engine with Numba (first run after an install, an "
                  "upgrade or an engine edit; 30-90 s on two cores, measured on three 2-core "
                  "machines, about twice that on one; cached afterwards)...", flush=True)

    observers = []
    if checkpoint_ticks:
        where = args.checkpoint_dir or str(out / "checkpoint-{tick}")
        if len(checkpoint_ticks) > 1 and "{tick}" not in where:
            where = str(Path(where) / "checkpoint-{tick}")
        observers.append(CheckpointWriter(checkpoint_ticks, where))
    interrupt = InterruptStop((args.checkpoint_dir or str(out / "checkpoint-{tick}"))
                              if args.checkpoint_on_interrupt else None)
    observers.append(interrupt)
    try:
        run_to_outdir(cfg, out, progress=not args.quiet, quiet=args.quiet, before_run=say_compiling,
                      sim=sim, observers=observers)
    except _user_errors() as e:
        if sim.stats is not None and (out / "stats.json").is_file():
            e.args = (f"{e}\n{stats_so_far_note(out)}",)
        raise
    finally:
        for ob in observers:
            if not isinstance(ob, CheckpointWriter):
                continue
            for tick, path in ob.written:
                print(f"wrote checkpoint {path} at tick {tick}",
                      file=sys.stderr if args.quiet else sys.stdout)
            if ob.pending:
                print(f"moehub-sim: warning: the run ended at tick {int(sim.state.sys[0].q_now)} "
                      f"before --checkpoint-at {', '.join(map(str, ob.pending))}: no checkpoint "
                      f"written there", file=sys.stderr)
    _stamp_engine_cache()
    stats = sim.stats
    if interrupt.tick is not None:
        return _report_interrupt(args, interrupt, out)
    if sim.stopped:
        print(f"moehub-sim: {sim.stopped}; stats cover the run up to there", file=sys.stderr)
    if not args.quiet:
        print(f"simulated {stats['simSeconds'] * 1e6:.3f} us in {stats['hostSeconds']:.2f} s "
              f"({stats['simEvents']} events, {stats['hostEventRate'] / 1e6:.2f} M events/s, "
              f"{stats['simInsts']} instructions; engine {'python' if jit_disabled() else 'numba'}, compile/load "
              f"{stats['hostCompileSeconds']:.1f} s)")
        print(run_summary(stats), end="")
        extra = [name for name, on in (("trace.json", cfg.trace.enabled),
                                       ("stats_dumps.txt, stats_dumps.csv", cfg.stats.dump_period),
                                       (cfg.debug.file, cfg.debug.flags and cfg.debug.file)) if on]
        print(f"wrote {out}/config.json, stats.txt, stats.json, stats.csv"
              + "".join(", " + e for e in extra))
    return 0


def _report_interrupt(args, interrupt, out):
    """Where an interrupted run stopped, what it wrote, how to continue; exit 128 + signal."""
    from .interrupts import exit_status
    if interrupt.checkpoint is not None:
        cont = (f"a checkpoint of that state is in {interrupt.checkpoint}; continue with: "
                f"moehub-sim run --restore {interrupt.checkpoint} -o {out}-continued")
    else:
        cont = (f"to be able to continue from where an interrupt stops the run, run it with "
                f"--checkpoint-on-interrupt (or --checkpoint-at {interrupt.tick}) and continue "
                f"with --restore")
    print(f"moehub-sim: {interrupt.signal_text}; the stats so far (simCompleted 0) are in "
          f"{out}/stats.txt, stats.json, stats.csv; {cont}", file=sys.stderr)
    return exit_status(interrupt.signum)


def run_summary(stats) -> str:
    """The headline figures of a run, printed after it: an MoE layer's time, phases and output
    error, and every report figure (workload.report)."""
    lines = []
    if "system.moe.layer_time_us" in stats:
        phases = ", ".join(f"{s.name.rsplit('.', 1)[1][:-3]} {s.value:.3f}"
                           for s in stats.match("system.moe.phase.*_us"))
        lines.append(f"layer time {stats['system.moe.layer_time_us']:.3f} us "
                     f"(ideal compute {stats['system.moe.ideal_compute_us']:.3f} us); "
                     f"phases (us, mean over GPUs): {phases}")
        sm = ", ".join(f"{s.name.rsplit('.', 1)[1]} {s.value:.3f}"
                       for s in stats.match("system.moe.sm.*"))
        lines.append(f"SM time: {sm}")
        if "system.moe.output_max_abs_error" in stats:
            lines.append(f"output max abs error {stats['system.moe.output_max_abs_error']:.3g} "
                         f"(largest reference magnitude "
                         f"{stats['system.moe.output_max_abs_reference']:.3g})")
    elif "system.moe.launches_finished" in stats:
        # a stopped run: the phases that finished on every GPU (layer_stats.add_layer_stats)
        phases = ", ".join(f"{s.name.rsplit('.', 1)[1][:-3]} {s.value:.3f}"
                           for s in stats.match("system.moe.phase.*_us"))
        total = len(stats.match("system.gpu*.launch*.end_tick"))
        lines.append(f"partial layer: {int(stats['system.moe.launches_finished'])} of {total} "
                     f"kernel launches finished; phases finished on every GPU (us, mean over "
                     f"GPUs): {phases or 'none'}")
    for s in stats.match("system.report.*"):
        lines.append(f"{s.name} = {s.value:.6g} {s.unit}  # {s.desc}")
    return "".join(line + "\n" for line in lines)


def _list_stats(args):
    """Build the system (no run) and list every stat name with unit and description; a PATTERN
    keeps the names containing it (or matching it as a shell pattern)."""
    import fnmatch
    cfg = _load(args.config)
    # the build's floor, imported once the config is known to be good (as in _simulation)
    from .simulation import Simulation
    from .stats.collect import collect_stats
    from .stats.report import add_report_stat

    sim = Simulation(cfg)
    stats = collect_stats(sim.state, sim.launches, sim.program, 0.0, 0.0)
    if sim.layer is not None:
        # an MoE layer's system.moe.* stats, computed here from the not-yet-run state (zeros):
        # only their names, units and descriptions are listed
        sim.stats = stats
        sim.layer.finish(sim)
    for rep in sim.cfg.workload.report:
        add_report_stat(stats, rep, 0.0)
    pattern = args.pattern
    glob = pattern is not None and any(c in pattern for c in "*?[")
    shown = [s for s in stats if pattern is None or
             (fnmatch.fnmatchcase(s.name, pattern) if glob else pattern in s.name)]
    if not shown:
        from .config import ConfigError
        raise ConfigError(f"stats --list {args.config} {pattern}: no stat matches (of {len(stats)})",
                          "--list")
    for s in shown:
        print(f"{s.name}  ({s.unit})  {s.desc}")
    if pattern is not None:
        print(f"({len(shown)} of {len(stats)} stats)", file=sys.stderr)
    return 0
