"""The Python API: run configurations, sweep design spaces and read results as pandas DataFrames,
from a script or a notebook, with the same code paths as the command line.

    import moehub_arch as mh

    r = mh.run("configs/experiments/functional.yaml", {"scheme": "deepep"})
    r["system.moe.layer_time_us"]                 # a stat's value
    r.unit("system.moe.layer_time_us")            # 'us'
    r.to_pandas()                                 # long form: one row per stat
    r.to_pandas("wide", "system.moe.phase.*")     # one row, one column per stat
    df = mh.sweep("configs/sweeps/hub_merge_x_tile.yaml", workers=2)   # one row per point
    old = mh.load_results("moehub-out")           # a run made by `moehub-sim run`

- `load_config(path, overrides, system)`: the validated Config `moehub-sim run PATH --set ...` runs.
- `run(config, overrides, outdir=None, engine=None, seed=None, system=None)`: one run; with
  `outdir` it writes the files `moehub-sim run -o OUTDIR` writes, without it nothing touches the
  disk.
- `layer(model, tokens, scheme, system, top_k=None, ...)`: one MoE layer named by what it is, as
  `moehub-sim layer` (the config composed, no file needed).
- `sweep(spec, ...)`: `moehub-sim sweep` (process pool or Dask, progress bar, resumable point
  directories) returning a DataFrame with one row per point.
- `load_results(outdir)`: a finished run's directory (CLI, API or sweep point) as a `Results`.
- `compare(runs, stats)`: `moehub-sim compare` of Results and/or directories, as a DataFrame.

Errors are the command line's: bad input or a run that cannot complete raises the exception the
CLI catches (`moehub_arch.errors.user_errors()`: ConfigError, AsmError, SimulationError, ...), whose
message is the paragraph `moehub-sim` prints after `moehub-sim: error:` and whose `exit_code` is
the status it exits with. Nothing here calls `sys.exit`. pandas is an optional extra
(`pip install 'moehub-arch[analysis]'`), needed only by `to_pandas` and `sweep`.
"""
import concurrent.futures as cf
import difflib
import fnmatch
import multiprocessing
import os
import warnings
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path

from .arguments import bool_arg, int_arg, path_arg, yaml_value_arg
from .frontend import config_path, jit_disabled, require_pandas

__all__ = ["load_config", "run", "layer", "sweep", "load_results", "compare", "Results"]

ENGINES = ("numba", "python")


def _override_list(overrides):
    """`--set` texts from a mapping {key.path: value} (values as in YAML: 20, '20GB/s', [0, 1],
    True) or a sequence of 'key.path=value' strings."""
    from .sweep.spec import _value_text
    if overrides is None:
        return []
    if isinstance(overrides, str):
        return [overrides]
    if isinstance(overrides, Mapping):
        for k, v in overrides.items():
            if not isinstance(k, str):
                raise TypeError(f"overrides: expected 'key.path' strings as keys, found {k!r}")
            yaml_value_arg(f"overrides[{k!r}]", v)
        return [f"{k}={_value_text(v)}" for k, v in overrides.items()]
    try:
        items = list(overrides)
    except TypeError:
        raise TypeError(f"overrides: expected a mapping {{'key.path': value}} or a list of "
                        f"'key.path=value' strings, found {type(overrides).__name__}") from None
    for o in items:
        if not isinstance(o, str) or "=" not in o:
            raise TypeError(f"overrides: expected 'key.path=value' strings, found {o!r}")
    return items


def load_config(path=None, overrides=None, system=None):
    """The validated, frozen Config that `moehub-sim run PATH --system SYSTEM --set ...` would run.

    `path`: a YAML config (None: the default config); a relative path that does not exist here
    falls back to the shipped data folders, as on the command line. `overrides`: a mapping
    {'system.nvlink.bandwidth': '20GB/s', 'scheme': 'deepep'} or a list of 'key.path=value'
    strings, applied in order after the file (as `--set`). `system`: a system file to run the
    config on (as `--system`: it takes the place of the system the config extends). Raises
    ConfigError naming the file (or the override) and the key on bad input; what the command
    line prints as `moehub-sim: warning:` (a later file overriding keys an earlier one set) is a
    Python warning (UserWarning) here, and stays in `cfg.load_warnings`."""
    import warnings

    from .config import load_config as _load_config
    path_arg("path", path, optional=True)
    path_arg("system", system, optional=True)
    cfg = _load_config(config_path(None if path is None else str(path)),
                       _override_list(overrides), system_file=system)
    for w in cfg.load_warnings:
        warnings.warn(w, UserWarning, stacklevel=2)
    return cfg


def _config_for_run(config, overrides, engine, seed, system):
    """A Config from a path (with overrides, engine and seed as `--set`) or a Config given."""
    import attrs

    from .config import Config
    if engine is not None and engine not in ENGINES:
        raise ValueError(f"engine: expected one of {', '.join(ENGINES)}, found {engine!r}")
    int_arg("seed", seed, lo=0, optional=True)   # a float seed is refused, not truncated
    if isinstance(config, Config):
        if overrides or system is not None:
            raise TypeError("overrides and system apply to a config file; for a Config object, "
                            "load it with load_config(path, overrides, system) or use attrs.evolve")
        run_opts = {k: v for k, v in (("engine", engine), ("seed", seed)) if v is not None}
        if not run_opts:
            return config
        return attrs.evolve(config, run=attrs.evolve(config.run, **run_opts))
    extra = _override_list(overrides)
    if seed is not None:
        extra.append(f"run.seed={seed}")
    if engine is not None:
        extra.append(f"run.engine={engine}")
    return load_config(config, extra, system)


def run(config=None, overrides=None, outdir=None, engine=None, seed=None, progress=False,
        system=None):
    """Run one configuration to its end and return its `Results`.

    `config`: a YAML path (None: the default config) or a Config from `load_config`.
    `overrides`: as for `load_config` (paths only). `outdir`: write config.json and stats.txt /
    .json / .csv there (and trace.json etc. when the config asks), exactly as `moehub-sim run -o
    OUTDIR`; None writes nothing (a config that asks for a trace, periodic dumps or a debug file
    then raises ConfigError). `engine`: 'numba' (compiled) or 'python' (the reference engine); an
    engine other than the one this process runs (the JIT is switched per process, by
    NUMBA_DISABLE_JIT) runs the simulation in a fresh child process, with identical stats.
    `seed`: run.seed. `progress`: print simulated time and events/s on stderr. `system`: run the
    config on this system file (as `moehub-sim run CONFIG --system FILE`).

    Raises the CLI's user errors (ConfigError, SimulationError, ...; `moehub_arch.errors`) with
    its messages. When the run had got under way, the exception carries the stats so far as
    `e.results` (a Results); a run stopped early by a limit (run.max_ticks, max_wall) returns
    normally with `results.stopped` saying why.
    """
    path_arg("outdir", outdir, optional=True)
    bool_arg("progress", progress)
    cfg = _config_for_run(config, overrides, engine, seed, system)
    if (cfg.run.engine == "python") != jit_disabled():
        return _run_in_child(cfg, outdir, progress)
    return _run_here(cfg, outdir, progress)


def layer(model, tokens, scheme, system="dgx_h100", top_k=None, routing=None,
          hub_design="published", overrides=None, outdir=None, engine=None, seed=None,
          progress=False):
    """Run one MoE layer named by what it is and return its `Results`: `model` (a name of
    workloads/models/ or a model YAML path), `tokens` per GPU (any count), `scheme`, `system` (a
    name of configs/systems/ or a system file), `top_k` in place of the model's, `routing` (the
    generator's kind), `hub_design` (configs/hub/designs/); the config is composed as `moehub-sim
    layer` composes it (moehub_arch/experiment.py). With `outdir` the composed config is kept there
    as layer.yaml beside the run's files. The other arguments are `run`'s.
    """
    import tempfile

    from .experiment import write_layer_config
    spec = dict(model=model, tokens=tokens, scheme=scheme, system=system, top_k=top_k,
                routing=routing, hub_design=hub_design)
    if outdir is not None:
        path = write_layer_config(Path(outdir) / "layer.yaml", **spec)
        return run(path, overrides, outdir, engine, seed, progress)
    with tempfile.TemporaryDirectory() as d:
        cfg = _config_for_run(write_layer_config(Path(d) / "layer.yaml", **spec), overrides,
                              engine, seed, None)
    return run(cfg, None, None, None, None, progress)


def _run_here(cfg, outdir, progress):
    from .errors import user_errors
    from .runner import run_to_outdir, stats_so_far_note
    from .simulation import Simulation

    sim = Simulation(cfg)
    try:
        run_to_outdir(cfg, outdir, progress=progress, sim=sim)
    except user_errors() as e:
        if sim.stats is not None:
            e.results = Results(sim.stats, sim.cfg.to_dict(), outdir, sim=sim)
            if outdir is not None:
                e.args = (f"{e}\n{stats_so_far_note(outdir)}",)
        raise
    return Results(sim.stats, sim.cfg.to_dict(), outdir, sim=sim, stopped=sim.stopped)


@contextmanager
def _environment(**values):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _child_run(cfg, outdir, progress):
    """In the child process: the run, returned (or raised) as plain data: a Simulation holds
    compiled-engine state that is not sent between processes."""
    from .errors import user_errors
    if (cfg.run.engine == "python") != jit_disabled():
        raise RuntimeError(f"the child process for engine '{cfg.run.engine}' started with the "
                           f"other engine (numba was imported before NUMBA_DISABLE_JIT was read)")
    try:
        r = _run_here(cfg, outdir, progress)
    except user_errors() as e:
        if getattr(e, "results", None) is not None:
            e.results = Results(e.results.stats, e.results.config, e.results.outdir)
        raise
    return r.stats, r.config, r.stopped


def _run_in_child(cfg, outdir, progress):
    """Run in a fresh interpreter whose NUMBA_DISABLE_JIT selects `cfg.run.engine`."""
    from .sweep.execute import main_script_hidden
    ctx = multiprocessing.get_context("spawn")   # a fresh interpreter: numba not imported yet
    flag = "1" if cfg.run.engine == "python" else "0"
    with cf.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        # the child inherits the variable when it starts, and does not re-run the user's script
        with _environment(NUMBA_DISABLE_JIT=flag), main_script_hidden():
            future = pool.submit(_child_run, cfg, None if outdir is None else str(outdir), progress)
        stats, config, stopped = future.result()
    return Results(stats, config, outdir, stopped=stopped)


def load_results(outdir):
    """The Results of a finished run's directory (`moehub-sim run -o OUTDIR`, `run(outdir=...)`
    or a sweep point's `points/<id>/`). Raises AnalysisError if it holds no stats.json."""
    from .analysis.rundata import RunData
    from .stats import StatsSet
    path_arg("outdir", outdir)
    data = RunData(outdir)
    stats = StatsSet()
    for name, s in data.stats.items():
        stats.add(name, s["value"], s.get("unit", ""), s.get("desc", ""))
    return Results(stats, data.config, data.dir)


class Results:
    """A finished run: its stats (value, unit, description), the resolved config and the report
    figures, with DataFrame views.

    `results[name]` is a stat's value; `unit(name)`, `description(name)`; `match(pattern)` the
    stats whose names match a shell-style pattern; `report` the figures the config's
    workload.report asks for; `stats` the StatsSet (iterating gives Stat(name, value, unit,
    desc)); `config` the resolved config as in config.json (a dict, base units), `cfg` the Config
    object when the run was made in this process; `sim` the Simulation then (read simulated
    memory with `sim.read_buffer(gpu, name)`); `outdir` where the files are (None: not written);
    `stopped` why a limit ended the run early (None: it ran to its end).
    """

    def __init__(self, stats, config, outdir=None, sim=None, stopped=None):
        self.stats = stats
        self.config = config
        self.outdir = None if outdir is None else Path(outdir)
        self.sim = sim
        self.stopped = stopped
        self._label = None

    @property
    def cfg(self):
        return None if self.sim is None else self.sim.cfg

    @property
    def label(self):
        """How tables name this run (settable): by default the output directory's name, else the
        config file's stem, with the scheme of an MoE layer."""
        if self._label is not None:
            return self._label
        if self.outdir is not None:
            name = self.outdir.name
        else:
            files = self.config.get("source_files") or ["run"]
            name = Path(files[-1]).stem   # the config named (files it extends come first)
        scheme = self.config.get("scheme", "none")
        return name if scheme in ("none", None) or scheme in name else f"{name} ({scheme})"

    @label.setter
    def label(self, text):
        self._label = str(text)

    # ---- stats ----------------------------------------------------------------------------
    def _stat(self, name):
        if name not in self.stats:
            close = difflib.get_close_matches(name, [s.name for s in self.stats], n=3)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise KeyError(f"no stat named '{name}'{hint} (results.match('pattern*') lists "
                           f"names)")
        return self.stats.stat(name)

    def __getitem__(self, name):
        return self._stat(name).value

    def get(self, name, default=None):
        return self.stats.get(name, default)

    def __contains__(self, name):
        return name in self.stats

    def __iter__(self):
        return iter(self.stats)

    def __len__(self):
        return len(self.stats)

    def unit(self, name):
        return self._stat(name).unit

    def description(self, name):
        return self._stat(name).desc

    def match(self, pattern):
        """{name: value} of the stats whose names match a shell-style pattern (or any of a list)."""
        patterns = [pattern] if isinstance(pattern, str) else list(pattern)
        return {s.name: s.value for s in self.stats
                if any(fnmatch.fnmatchcase(s.name, p) for p in patterns)}

    @property
    def report(self):
        """{figure name: value} of the config's workload.report figures (the numbers a
        microbenchmark exists to produce), found by name, unit and description whatever
        namespace the stats file them under."""
        out = {}
        reports = (self.config.get("workload") or {}).get("report") or {}
        items = reports.items() if isinstance(reports, dict) else \
            ((r.get("name"), r) for r in reports)
        for name, rep in items:
            for s in self.stats:
                if s.name.endswith("." + str(name)) and s.desc == rep.get("desc", s.desc):
                    out[name] = s.value
                    break
        return out

    # ---- DataFrames -----------------------------------------------------------------------
    def to_pandas(self, form="long", pattern=None):
        """The stats as a pandas DataFrame.

        form='long' (as stats.csv, plus the name split at its last dot): one row per stat, columns
        name, component (e.g. system.gpu0.nvlink3), stat (tx_bytes), value, unit, description.
        form='wide': one row (index: `label`), one column per stat, values only (units in
        `df.attrs['units']`); `pandas.concat` of several runs' wide frames compares them.
        `pattern`: keep only stats matching this shell-style pattern (or any of a list)."""
        pd = require_pandas()
        keep = None if pattern is None else self.match(pattern)
        stats = [s for s in self.stats if keep is None or s.name in keep]
        if form == "long":
            return pd.DataFrame({
                "name": [s.name for s in stats],
                "component": [s.name.rpartition(".")[0] for s in stats],
                "stat": [s.name.rpartition(".")[2] for s in stats],
                "value": [s.value for s in stats],
                "unit": [s.unit for s in stats],
                "description": [s.desc for s in stats]})
        if form == "wide":
            df = pd.DataFrame([[s.value for s in stats]], columns=[s.name for s in stats],
                              index=pd.Index([self.label], name="run"))
            df.attrs["units"] = {s.name: s.unit for s in stats}
            return df
        raise ValueError(f"form: expected 'long' or 'wide', found {form!r}")

    def __repr__(self):
        where = f", outdir={str(self.outdir)!r}" if self.outdir is not None else ""
        head = [f"{k}={self.get(k)}" for k in ("simTicks", "system.moe.layer_time_us")
                if k in self.stats]
        head += [f"{k}={v:.6g}" for k, v in self.report.items()]
        stop = f", stopped={self.stopped!r}" if self.stopped else ""
        return f"<Results {self.label!r}: {len(self.stats)} stats, {', '.join(head)}{where}{stop}>"


def compare(runs, stats=None, per_gpu=False):
    """`moehub-sim compare` as a DataFrame: selected stats of several runs side by side, and each
    later run's speedup (time stats: first / this, e.g. '1.250x faster') or ratio (others) against
    the first; equal values read 'same'.

    `runs`: Results (in memory: nothing needs to be written) and/or run directories, in order;
    tables name them by `Results.label` (settable). `stats`: names or shell-style patterns
    (default: the command's - layer time, phases, SM time, links, hub stalls, report figures).
    Per-GPU stats are folded into `system.gpu*.…` rows (summed; ratios averaged) unless `per_gpu`
    or a pattern names one GPU. Columns: stat, unit, one per run, then '<label> vs first'.
    `df.attrs['notes']` says which runs' phases overlap (their phase times are spans); a pattern
    that matches no stat is a warning, all patterns matching nothing an AnalysisError."""
    from types import SimpleNamespace

    from .analysis.compare import _compare
    from .analysis.rundata import RunData
    pd = require_pandas()
    if isinstance(runs, (str, os.PathLike, Results)) or not hasattr(runs, "__iter__"):
        raise TypeError(f"runs: expected a list of Results and/or run directories, found "
                        f"{type(runs).__name__}")
    runs = list(runs)
    for i, r in enumerate(runs):
        if not isinstance(r, Results):
            path_arg(f"runs[{i}]", r)
    if not runs:
        raise ValueError("compare: no runs given (Results or run directories)")
    views, seen = [], {}
    for r in runs:
        if isinstance(r, Results):
            view = SimpleNamespace(label=r.label, stats={
                s.name: {"value": s.value, "unit": s.unit} for s in r.stats})
        else:
            data = RunData(r)
            view = SimpleNamespace(label=data.label, stats=data.stats, dir=data.dir)
        seen[view.label] = seen.get(view.label, 0) + 1
        if seen[view.label] > 1:   # e.g. a run and its own directory: keep the columns apart
            view.label = f"{view.label} #{seen[view.label]}"
        views.append(view)
    if isinstance(stats, str):
        stats = [stats]
    notes = []
    header, rows, _ = _compare(views, stats, per_gpu, notes)
    for n in notes:
        if n.startswith("warning: "):       # a pattern that matched nothing
            warnings.warn(n[len("warning: "):], stacklevel=2)
    df = pd.DataFrame(rows, columns=header)
    df.attrs["notes"] = notes               # e.g. which runs' phases overlap
    return df


def sweep(spec, outdir=None, workers=None, scheduler=None, progress=True):
    """Run a sweep (`moehub-sim sweep`) and return its results as a pandas DataFrame, one row per
    point: `moehub_arch.sweep.sweep_frame`, which documents the arguments and columns."""
    from .sweep import sweep_frame
    return sweep_frame(spec, outdir, workers, scheduler, progress)
