"""Sweep files: a grid and/or a list of `--set` overrides over one config.

    name: merge_x_tile                          # default: the file name
    config: ../experiments/functional.yaml      # relative to this file (else the data root)
    set: {scheme: moehub}                       # overrides every point gets
    grid:                                       # every combination of these values
      system.gpu.hub.moe.rpm.merge_buffer_bytes: [64B, 128B, 256B]
      system.gpu.hub.moe.dam.tile_rows: [8, 16]
    points:                                     # and/or an explicit list (times the grid)
      - {scheme: deepep}
      - {scheme: moehub}
      - {scheme: moehub, system: systems/a6000_x4.yaml}   # `system`: run the point on this
                                                # system file, as `--system FILE` does
    stats: [system.moe.layer_time_us, "system.moe.phase.*"]   # columns of results.csv
    outdir: sweep-out/merge_x_tile              # default: sweep-out/<name>

Every point is checked (its config loaded) before anything runs, so a bad key or value is one
error naming the sweep file and the point. A point's directory name is derived from its overrides
(readable, plus a short hash), so re-running a sweep finds the points it already finished.
"""
import hashlib
import itertools
import json
import re
from pathlib import Path

import attrs
import yaml

from ..errors import UserError
from ..inputs import InputFileError, load_yaml, read_text

from ..config import ConfigError, load_config
from ..paths import data_root

SWEEP_KEYS = ("name", "config", "set", "grid", "points", "stats", "outdir")
DEFAULT_STATS = ("simTicks", "system.report.*", "system.moe.layer_time_us", "system.moe.phase.*",
                 "system.moe.overhead_us", "system.moe.sm.*", "system.moe.nvlink.*")


class SweepError(UserError):
    """A sweep file or option that cannot be used (exit status 2)."""

    exit_code = 2


@attrs.frozen
class Point:
    id: str                  # directory name under points/
    values: tuple            # ((key, value), ...) of the swept keys
    overrides: tuple         # every --set of the point (fixed ones first)
    config_digest: str = ""  # sha256 of the point's resolved config (files it includes and overrides)
    system: str = ""         # a system file the point runs on in place of the config's (--system)


@attrs.frozen
class Sweep:
    name: str
    file: Path
    config: Path
    points: tuple
    stats: tuple
    outdir: Path
    swept_keys: tuple


def _value_text(v):
    """A YAML value as `--set` takes it (lists in flow style)."""
    if isinstance(v, str):
        return v
    return yaml.safe_dump(v, default_flow_style=True).strip().removesuffix("...").strip()


def _mapping(raw, key, where):
    """A mapping of dotted key -> value, or a list of 'key=value' strings, as (key, value) pairs."""
    if raw is None:
        return []
    if isinstance(raw, dict):
        return [(str(k), v) for k, v in raw.items()]
    if isinstance(raw, list) and all(isinstance(x, str) and "=" in x for x in raw):
        return [tuple(x.split("=", 1)) for x in raw]
    raise SweepError(f"{where}: {key}: expected a mapping of key.path: value (or a list of "
                     f"'key.path=value'), found {type(raw).__name__}")


def config_digest(cfg):
    """A fingerprint of a resolved config: resuming a sweep reuses a finished point only when the
    point would run exactly this config (an edited config, system or model file reruns it)."""
    # the values only: where each came from (`source_files`, `value_sources`, `load_warnings`)
    # names files as the working directory sees them, and a sweep resumed from another directory
    # ran every point again
    values = {k: v for k, v in cfg.to_dict().items() if k not in PROVENANCE_KEYS}
    text = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


PROVENANCE_KEYS = ("source_files", "value_sources", "load_warnings")


def point_id(values):
    """Readable and unique: the swept values (last key component = value) and a short hash."""
    text = "_".join(f"{k.rsplit('.', 1)[-1]}={_value_text(v)}" for k, v in values)
    slug = re.sub(r"[^A-Za-z0-9=.,_-]+", "-", text)[:80] or "point"
    digest = hashlib.sha1(repr([(k, _value_text(v)) for k, v in values]).encode()).hexdigest()[:8]
    return f"{slug}-{digest}"


def _resolve_config(name, where, base_dir):
    p = Path(str(name)).expanduser()
    for c in ([p] if p.is_absolute() else [base_dir / p, Path.cwd() / p, data_root() / p]):
        if c.is_file():
            return c.resolve()
    raise SweepError(f"{where}: config: file '{name}' not found (relative to the sweep file, "
                     f"the working directory or the data root)")


def load_sweep(path, outdir=None):
    """Read, expand and check a sweep file; raise SweepError / ConfigError on bad input."""
    path = Path(path)
    if not path.is_file():
        what = "is not a regular file" if path.exists() else "sweep file not found"
        raise SweepError(f"{path}: {what}" + (" (a sweep file is a YAML file of points or a grid)"
                                              if path.exists() else ""))
    try:
        raw = load_yaml(read_text(path, "sweep file"), str(path), "sweep file")
    except InputFileError as e:
        raise SweepError(str(e)) from None
    except yaml.YAMLError as e:
        raise SweepError(f"{path}: YAML syntax error: {getattr(e, 'problem', e)}") from None
    return sweep_from_dict(raw, path, outdir)


def sweep_from_dict(raw, path=None, outdir=None):
    """Expand and check a sweep given as a mapping with the keys of a sweep file (the Python
    API's `sweep({...})`). `path` is the file it came from (None: relative paths are relative to
    the working directory, and errors name 'sweep spec')."""
    where = path if path is not None else "sweep spec"
    base_dir = path.parent if path is not None else Path.cwd()
    if not isinstance(raw, dict):
        raise SweepError(f"{where}: expected a mapping with keys {', '.join(SWEEP_KEYS)}")
    import difflib
    for k in raw:
        if k not in SWEEP_KEYS:
            close = difflib.get_close_matches(str(k), SWEEP_KEYS, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise SweepError(f"{where}: {k}: unknown key; {hint}(known keys: {', '.join(SWEEP_KEYS)})")
    if "config" not in raw:
        raise SweepError(f"{where}: config: required key is missing (the YAML config every point runs)")
    config = _resolve_config(raw["config"], where, base_dir)
    fixed = [f"{k}={_value_text(v)}" for k, v in _mapping(raw.get("set"), "set", where)]
    grid = _mapping(raw.get("grid"), "grid", where)
    for k, values in grid:
        if not isinstance(values, list) or not values:
            raise SweepError(f"{where}: grid.{k}: expected a non-empty list of values, found "
                             f"{values!r}")
    listed = raw.get("points")
    if listed is not None and (not isinstance(listed, list) or not all(isinstance(x, dict) for x in listed)):
        raise SweepError(f"{where}: points: expected a list of mappings (key.path: value)")
    combos = [tuple(zip([k for k, _ in grid], vs)) for vs in itertools.product(*[v for _, v in grid])]
    listed = [tuple((str(k), v) for k, v in x.items()) for x in (listed or [{}])]
    points, seen = [], set()
    for entry in listed:
        for combo in combos:
            values = entry + combo
            pid = point_id(values)
            if pid in seen:
                raise SweepError(f"{where}: the point {dict(values)} appears twice")
            seen.add(pid)
            # `system`: a system file in place of the config's (as --system), not a --set
            system = str(dict(values).get("system", ""))
            overrides = tuple(fixed + [f"{k}={_value_text(v)}" for k, v in values
                                       if k != "system"])
            try:
                cfg = load_config(config, overrides, system_file=system or None)
            except ConfigError as e:
                raise SweepError(f"{where}: point {dict(values) or '(the config itself)'}: {e}") from None
            points.append(Point(pid, values, overrides, config_digest(cfg), system))
    stats = raw.get("stats", list(DEFAULT_STATS))
    if isinstance(stats, str):
        stats = [stats]
    if not isinstance(stats, (list, tuple)) or not all(isinstance(s, str) for s in stats):
        raise SweepError(f"{where}: stats: expected a list of stat names or patterns")
    name = str(raw.get("name") or (path.stem if path is not None else "sweep"))
    out = Path(outdir) if outdir else Path(raw.get("outdir") or Path("sweep-out") / name)
    keys = list(dict.fromkeys(k for p in points for k, _ in p.values))
    return Sweep(name, path.resolve() if path is not None else None, config, tuple(points),
                 tuple(stats), out, tuple(keys))
