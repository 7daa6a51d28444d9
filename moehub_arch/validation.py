"""`moehub-sim validate` (also `python tools/validate.py`, the same arguments): hardware
correlation. Run the validation measurements and print each figure next to its reference values,
with the error of each and a summary.

    moehub-sim validate                      # the table (about 2-3 minutes with a warm cache)
    moehub-sim validate --json               # {"h100.p2p_bandwidth_GBps": 418.7, ...}
    moehub-sim validate --only 'h100.p2p*' --reference my_h100.yaml
    moehub-sim validate --set system.nvlink.header_bytes=32B   # what a model change does

The figures (name -> config + stat) are listed in configs/validation/figures.yaml; the reference
values in tools/reference/*.yaml (format: moehub_arch/analysis/correlation.py; the shipped file
holds data-sheet peaks and line rates only; a wheel carries them as moehub_arch/_data/tools/reference). Each run goes through `moehub-sim run` into
--outdir/<config name>/ (stats.txt etc. for a closer look), in --jobs parallel processes; the
first run goes alone, so a cold Numba cache is compiled once. Progress and the wall time go to
standard error.

A run stopped by a limit (`--set run.max_wall=2400s` for the slow figures) still gives the figures
whose kernels finished (the simulator writes them, marked `simStopped`); they are printed with a
note saying the run was partial, and the others as not measured.

A figure with `kind: model` is a prediction with no measurement to compare (a collective or design
point the simulator adds; no reference is shipped for it); it is run and printed.

Exit status: 0 every figure measured; 1 a run failed (its figure is reported as failed / null);
2 bad input (figure list, reference file, option), with one paragraph naming the file and key.
"""
import argparse
import fnmatch
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs

from moehub_arch.analysis.correlation import (correlate, figure_unit, format_report,
                                              load_references)
from moehub_arch.config.files import ConfigError, display_path, read_yaml
from moehub_arch.paths import data_root

FIGURES_FILE = data_root() / "configs" / "validation" / "figures.yaml"
REFERENCE_DIR = data_root() / "tools" / "reference"
_FIGURE_KEYS = ("config", "stat", "desc", "set", "note", "slow", "kind")
# kind: measurement - a figure that real hardware measures and references are compared with;
# model - what the simulator predicts where no measurement is shipped or held back (a new
# collective, a design that does not exist in silicon); reported without a reference.
FIGURE_KINDS = ("measurement", "model")


@attrs.frozen
class Figure:
    name: str
    config: Path
    stat: str
    desc: str = ""
    overrides: tuple = ()
    note: str = ""
    slow: bool = False
    kind: str = "measurement"


def load_figures(path):
    """The figure list of a figures file (see configs/validation/figures.yaml)."""
    shown = display_path(path)
    raw = read_yaml(Path(path))
    if not isinstance(raw, dict) or set(raw) != {"figures"} or not isinstance(raw["figures"], dict):
        raise ConfigError(f"{shown}: the top level must be a mapping with one key, 'figures': "
                          f"figure name -> {{config, stat, desc, set, note}}", file=shown)
    out = []
    for name, spec in raw["figures"].items():
        key = f"figures.{name}"
        if not isinstance(name, str) or figure_unit(name) is None:
            raise ConfigError(f"{shown}: {key}: a figure name must end with its unit (_GBps, "
                              f"_TFLOPs, _us, _ns, _ms, _pct)", file=shown, key=key)
        if not isinstance(spec, dict):
            raise ConfigError(f"{shown}: {key}: expected a mapping with config and stat, found "
                              f"{spec!r}", file=shown, key=key)
        for k in spec:
            if k not in _FIGURE_KEYS:
                raise ConfigError(f"{shown}: {key}.{k}: unknown key; expected "
                                  f"{', '.join(_FIGURE_KEYS)}", file=shown, key=f"{key}.{k}")
        for k in ("config", "stat"):
            if not isinstance(spec.get(k), str) or not spec[k]:
                raise ConfigError(f"{shown}: {key}.{k}: expected a non-empty string, found "
                                  f"{spec.get(k)!r}", file=shown, key=f"{key}.{k}")
        if not isinstance(spec.get("slow", False), bool):
            raise ConfigError(f"{shown}: {key}.slow: expected true or false, found "
                              f"{spec['slow']!r}", file=shown, key=f"{key}.slow")
        if spec.get("kind", "measurement") not in FIGURE_KINDS:
            raise ConfigError(f"{shown}: {key}.kind: expected one of {', '.join(FIGURE_KINDS)}, "
                              f"found {spec['kind']!r}", file=shown, key=f"{key}.kind")
        config = (Path(path).parent / spec["config"]).resolve()
        if not config.is_file():
            raise ConfigError(f"{shown}: {key}.config: no such file {display_path(config)}",
                              file=shown, key=f"{key}.config")
        sets = spec.get("set", [])
        if not isinstance(sets, list) or not all(isinstance(s, str) and "=" in s for s in sets):
            raise ConfigError(f"{shown}: {key}.set: expected a list of 'key.path=value' strings, "
                              f"found {sets!r}", file=shown, key=f"{key}.set")
        out.append(Figure(name=name, config=config, stat=spec["stat"],
                          desc=str(spec.get("desc", "")), overrides=tuple(sets),
                          note=str(spec.get("note", "")), slow=spec.get("slow") is True,
                          kind=spec.get("kind", "measurement")))
    return out


def plan_runs(figures, extra_sets):
    """One run per distinct (config, overrides): {run name: (config, overrides, [figures])}, in
    the order they start: the first figure's run (alone: it compiles a cold cache), then the
    slow runs, then the others."""
    first, rest = figures[:1], figures[1:]
    figures = first + [f for f in rest if f.slow] + [f for f in rest if not f.slow]
    runs = {}
    for f in figures:
        sets = f.overrides + tuple(extra_sets)
        for name, (cfg, s, members) in runs.items():
            if cfg == f.config and s == sets:
                members.append(f)
                break
        else:
            name = f.config.stem
            while name in runs:
                name += "_"
            runs[name] = (f.config, sets, [f])
    return runs


def run_one(config, sets, outdir):
    """`moehub-sim run` in a subprocess; returns (stats dict or None, wall seconds, error line)."""
    cmd = [sys.executable, "-m", "moehub_arch", "run", str(config), "-o", str(outdir), "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines()
        return None, wall, lines[-1] if lines else f"exit status {r.returncode}"
    stats = json.loads((Path(outdir) / "stats.json").read_text())
    values = {k: v["value"] for k, v in stats.items()}
    if "simStopped" in stats:
        # a run stopped by a limit (e.g. --set run.max_wall=2400s): its stats are partial, the
        # figures of what finished are there (the rest missing); say why beside them
        values["simStopped"] = stats["simStopped"]["desc"]
    return values, wall, ""


def measure(runs, outdir, jobs, log, partial=None):
    """Run every planned run (the first alone, then `jobs` at a time); {figure: value or None}.
    `partial` (a dict) gets {figure: why} for the figures taken from a run a limit stopped."""
    values = {}
    partial = {} if partial is None else partial

    def job(item):
        name, (config, sets, members) = item
        stats, wall, err = run_one(config, sets, outdir / name)
        return name, members, stats, wall, err

    def record(result):
        name, members, stats, wall, err = result
        log(f"  {name:24s} {wall:6.1f} s" + (f"  FAILED: {err}" if err else ""))
        for f in members:
            if stats is None:
                values[f.name] = None
            elif f.stat not in stats:
                values[f.name] = None
                log(f"  {name}: no stat '{f.stat}' (figure {f.name})")
            else:
                values[f.name] = float(stats[f.stat])
                if "simStopped" in stats:
                    partial[f.name] = stats["simStopped"]
                    log(f"  {name}: figure {f.name} from a partial run ({stats['simStopped']})")

    items = list(runs.items())
    if items:
        record(job(items[0]))          # a cold Numba cache compiles once, here
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:   # each job is a subprocess
        for result in pool.map(job, items[1:]):
            record(result)
    return values


def add_arguments(ap):
    """The arguments of `moehub-sim validate` and of `python tools/validate.py` (the same)."""
    ap.add_argument("--json", action="store_true",
                    help="print one JSON object {figure: simulated value} instead of the table")
    ap.add_argument("--report-json", metavar="FILE",
                    help="also write every row (figure, simulated, reference, error %%, source) "
                         "and the summary as JSON to FILE")
    ap.add_argument("--reference", action="append", metavar="FILE",
                    help="reference file (repeatable; default: every tools/reference/*.yaml)")
    ap.add_argument("--figures", default=str(FIGURES_FILE), metavar="FILE",
                    help="figure list (default: configs/validation/figures.yaml)")
    ap.add_argument("--only", action="append", metavar="PATTERN",
                    help="measure only the figures matching this shell pattern (repeatable)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override applied to every run (e.g. a model parameter under study)")
    ap.add_argument("-o", "--outdir", default="out/validate", help="run directories (default: "
                                                             "out/validate)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                    help="parallel runs (default: 2 or the CPU count if smaller)")
    return ap


def main(argv=None):
    """`python tools/validate.py ...`: the same command outside the `moehub-sim` front end."""
    ap = add_arguments(argparse.ArgumentParser(prog="validate",
                                               description=__doc__.split("\n\n")[0]))
    return command(ap.parse_args(argv), prog="validate")


def command(args, prog="moehub-sim validate"):
    """Measure the selected figures and print the table (or JSON); the exit status."""
    try:
        known = load_figures(Path(args.figures))
        figures = [f for f in known
                   if not args.only or any(fnmatch.fnmatchcase(f.name, p) for p in args.only)]
        if not figures:
            raise ConfigError(f"--only {' '.join(args.only)}: no figure matches")
        ref_files = args.reference or sorted(REFERENCE_DIR.glob("*.yaml"))
        references = load_references(ref_files, [f.name for f in known])
        bad = [s for s in args.overrides if "=" not in s]
        if bad:
            raise ConfigError(f"--set {bad[0]}: expected KEY=VALUE")
        if args.jobs < 1:
            raise ConfigError(f"--jobs {args.jobs}: expected at least 1 parallel run")
    except ConfigError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2

    log = lambda msg: print(msg, file=sys.stderr, flush=True)
    runs = plan_runs(figures, args.overrides)
    t0 = time.perf_counter()
    log(f"{prog}: {len(figures)} figures, {len(runs)} runs, {args.jobs} at a time")
    partial = {}
    values = measure(runs, Path(args.outdir).resolve(), args.jobs, log, partial)
    log(f"{prog}: wall time {time.perf_counter() - t0:.0f} s")
    values = {f.name: values.get(f.name) for f in figures}
    corr = correlate(values, references)
    if args.json:
        print(json.dumps(values, indent=1))
    else:
        notes = {f.name: " ".join(n for n in (f.note, "(kind: model: the simulator's prediction; "
                                              "no measurement is referenced)"
                                              if f.kind == "model" else "",
                                              "(partial run: a limit stopped it after this "
                                              "figure's kernels finished)"
                                              if f.name in partial else "") if n)
                 for f in figures if f.note or f.kind == "model" or f.name in partial}
        print(format_report(corr, notes))
    if args.report_json:
        Path(args.report_json).write_text(json.dumps(report_dict(corr), indent=1))
    return 0 if all(v is not None for v in values.values()) else 1


def report_dict(corr):
    rows = [{"figure": r.figure, "simulated": r.simulated,
             "reference": r.reference.value if r.reference else None,
             "unit": figure_unit(r.figure), "error_pct": r.error_pct,
             "kind": r.reference.kind if r.reference else None,
             "source": r.reference.source if r.reference else None,
             "file": r.reference.file if r.reference else None} for r in corr.rows]
    return {"rows": rows, "mean_abs_error_pct": corr.mean_abs_error_pct(),
            "mean_abs_error_pct_by_kind": {k: corr.mean_abs_error_pct(k)
                                           for k in ("datasheet", "measured")},
            "unreferenced": corr.unreferenced}

