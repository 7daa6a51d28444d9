"""The seed papers' published figures as data: `workloads/papers/<paper>.yaml`, read and checked.

Each file holds what one paper published and where, never a value of ours:

    paper: {key: dysharp, title: ..., arxiv: "2605.05607", venue: ISCA 2026,
            address: https://arxiv.org/abs/2605.05607}
    figures:
      layer_vs_deepep_geomean:
        what: MoE-layer speedup of DySHARP over DeepEP, geometric mean over the main configurations
        value: 2.26                  # a number, or [low, high] for a published range
        unit: x                      # x (speedup), fraction, KB, mm2, lines, ...
        bound: upper                 # optional: the paper gives a bound ("< 40 KB"), not a value
        source:
          location: evaluation, MoE-layer performance   # section, figure or table
          address: https://arxiv.org/abs/2605.05607     # a public copy
          via: optional note on how we read it
    not_published:                   # what the paper does not give (the report says so)
      - {what: ..., why: ...}

`load_paper_data(path)` returns a `PaperData`; anything else in the file - a missing or unknown key,
a value that is not a number, a range whose low end is above its high end, an address that is not
http(s) - is a `PaperDataError` naming the file and the key (exit status 2 on the command line).
"""
import math
import re
from pathlib import Path

import attrs
import yaml

from ..inputs import InputFileError, load_yaml, read_text
from ..paths import data_root

PAPERS_DIR = "workloads/papers"
PAPER_KEYS = ("key", "title", "arxiv", "venue", "address")
FIGURE_KEYS = ("what", "value", "unit", "bound", "source")
SOURCE_KEYS = ("location", "address", "via")
NOT_PUBLISHED_KEYS = ("what", "why")
BOUNDS = ("upper", "lower")


class PaperDataError(InputFileError):
    """A paper-figures file that cannot be used (exit status 2)."""


@attrs.frozen
class Figure:
    id: str
    what: str
    value: tuple            # (v,) for a value, (low, high) for a range
    unit: str
    bound: str | None
    location: str
    address: str
    via: str | None

    @property
    def is_range(self):
        return len(self.value) == 2

    def text(self):
        """The published value as the paper states it (range, bound, unit)."""
        unit = "" if self.unit == "x" else f" {self.unit}"
        x = "x" if self.unit == "x" else ""
        body = "-".join(f"{v:g}" for v in self.value) + x + unit
        return {"upper": "< ", "lower": "> "}.get(self.bound, "") + body


@attrs.frozen
class PaperData:
    file: Path
    key: str
    title: str
    arxiv: str
    venue: str
    address: str
    figures: tuple          # Figure, in file order
    not_published: tuple    # ((what, why), ...)

    def figure(self, fid):
        for f in self.figures:
            if f.id == fid:
                return f
        raise KeyError(fid)


def _str(raw, where, key, required=True):
    v = raw.get(key)
    if v is None and not required:
        return None
    if not isinstance(v, str) or not v.strip():
        found = "nothing" if v is None else repr(v)
        raise PaperDataError(f"{where}.{key}: expected a non-empty string, found {found}")
    return v.strip()


def _keys(raw, allowed, where):
    if not isinstance(raw, dict):
        raise PaperDataError(f"{where}: expected a mapping, found {type(raw).__name__}")
    for k in raw:
        if k not in allowed:
            raise PaperDataError(f"{where}.{k}: unknown key (allowed: {', '.join(allowed)})")


def _address(raw, where, key):
    v = _str(raw, where, key)
    if not re.match(r"https?://\S+$", v):
        raise PaperDataError(f"{where}.{key}: expected a public http(s) address, found {v!r}")
    return v


def _number(v, where):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise PaperDataError(f"{where}: expected a finite number, found {v!r}")
    return float(v)


def _figure(fid, raw, where):
    w = f"{where}: figures.{fid}"
    _keys(raw, FIGURE_KEYS, w)
    for k in ("what", "value", "unit", "source"):
        if k not in raw:
            raise PaperDataError(f"{w}.{k}: required key is missing")
    v = raw["value"]
    if isinstance(v, list):
        if len(v) != 2:
            raise PaperDataError(f"{w}.value: a range is [low, high], found {len(v)} numbers")
        value = (_number(v[0], f"{w}.value[0]"), _number(v[1], f"{w}.value[1]"))
        if value[0] > value[1]:
            raise PaperDataError(f"{w}.value: range low end {value[0]:g} is above its high end "
                                 f"{value[1]:g}")
    else:
        value = (_number(v, f"{w}.value"),)
    bound = raw.get("bound")
    if bound is not None and bound not in BOUNDS:
        raise PaperDataError(f"{w}.bound: expected one of {', '.join(BOUNDS)}, found {bound!r}")
    src = raw["source"]
    _keys(src, SOURCE_KEYS, f"{w}.source")
    return Figure(fid, _str(raw, w, "what"), value, _str(raw, w, "unit"), bound,
                  _str(src, f"{w}.source", "location"), _address(src, f"{w}.source", "address"),
                  _str(src, f"{w}.source", "via", required=False))


def load_paper_data(path):
    """Read and check one paper-figures file; raises PaperDataError naming the file and key."""
    path = Path(path)
    where = str(path)
    try:
        raw = load_yaml(read_text(path, "paper figures file"), where, "paper figures file")
    except InputFileError as e:
        raise PaperDataError(str(e)) from None
    except yaml.YAMLError as e:
        raise PaperDataError(f"{where}: YAML syntax error: {getattr(e, 'problem', e)}") from None
    _keys(raw, ("paper", "figures", "not_published"), where)
    for k in ("paper", "figures"):
        if k not in raw:
            raise PaperDataError(f"{where}: {k}: required key is missing")
    paper = raw["paper"]
    _keys(paper, PAPER_KEYS, f"{where}: paper")
    pw = f"{where}: paper"
    fields = {k: _str(paper, pw, k) for k in ("key", "title", "venue")}
    arxiv = paper.get("arxiv")
    if not isinstance(arxiv, str) or not re.fullmatch(r"\d{4}\.\d{4,5}", arxiv):
        raise PaperDataError(f"{pw}.arxiv: expected an arXiv id such as \"2605.05607\" (quoted), "
                             f"found {arxiv!r}")
    figures = raw["figures"]
    if not isinstance(figures, dict) or not figures:
        raise PaperDataError(f"{where}: figures: expected a non-empty mapping of figure id -> "
                             f"figure")
    figs = tuple(_figure(str(fid), f, where) for fid, f in figures.items())
    notes = raw.get("not_published") or []
    if not isinstance(notes, list):
        raise PaperDataError(f"{where}: not_published: expected a list of {{what, why}}")
    nps = []
    for i, n in enumerate(notes):
        w = f"{where}: not_published[{i}]"
        _keys(n, NOT_PUBLISHED_KEYS, w)
        nps.append((_str(n, w, "what"), _str(n, w, "why")))
    return PaperData(path, fields["key"], fields["title"], arxiv, fields["venue"],
                     _address(paper, pw, "address"), figs, tuple(nps))


def paper_data_path(key):
    """The shipped figures file of a paper."""
    return data_root() / PAPERS_DIR / f"{key}.yaml"
