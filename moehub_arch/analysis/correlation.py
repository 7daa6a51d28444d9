"""Hardware correlation: simulated figures next to reference values, with the error of each.

A *figure* is one number a validation run measures, named `<system>.<what>_<unit>`
(`h100.p2p_bandwidth_GBps`, `h100.p2p_latency_us`); the name's last part is its unit (UNITS).
A *reference file* (`tools/reference/*.yaml`) gives values to compare them with:

    kind: datasheet                 # optional: default kind of the entries (datasheet | measured)
    references:
      - figure: h100.p2p_bandwidth_GBps
        value: 450
        unit: GB/s                  # must be the figure's unit
        source: "NVIDIA H100 data sheet: NVLink 900 GB/s bidirectional = 450 GB/s per direction"
        kind: datasheet             # optional, per entry
        note: "..."                 # optional

`datasheet` values are peaks and line rates (an upper bound: the error says how far below the
peak the model lands); `measured` values are results of real runs (the error is the model's
error). A figure may have several references; each one is a row of the report.

The correlator (`correlate`) gives, per (figure, reference): simulated value, reference value and
error % = 100 x (simulated - reference) / reference; figures without a reference are listed with
none. The summary is the mean absolute error % over the rows that have both values, overall and
per kind.

Every problem in a reference file raises ConfigError (exit status 2): one paragraph naming the
file, the key (`references[2].unit`), what was expected and what was found.
"""
import difflib
import math
from pathlib import Path

import attrs

from ..config.files import ConfigError, display_path, read_yaml

UNITS = {"GBps": "GB/s", "TFLOPs": "TFLOP/s", "us": "us", "ns": "ns", "ms": "ms", "pct": "%"}
KINDS = ("datasheet", "measured")
_ENTRY_KEYS = ("figure", "value", "unit", "source", "kind", "note")
_REQUIRED = ("figure", "value", "unit", "source")


def figure_unit(name):
    """The unit a figure's name ends with (`..._GBps` -> 'GB/s'); None if it names none."""
    suffix = name.rsplit("_", 1)[-1] if "_" in name else ""
    return UNITS.get(suffix)


@attrs.frozen
class Reference:
    figure: str
    value: float
    unit: str
    source: str
    kind: str
    file: str
    note: str = ""


@attrs.frozen
class Row:
    figure: str
    simulated: float | None
    reference: Reference | None

    @property
    def error_pct(self):
        """100 x (simulated - reference) / reference; None without both values."""
        if self.reference is None or self.simulated is None:
            return None
        return 100.0 * (self.simulated - self.reference.value) / self.reference.value


@attrs.frozen
class Correlation:
    rows: tuple

    def mean_abs_error_pct(self, kind=None):
        """Mean |error %| over the rows with both values (of one kind, if given); None if none."""
        errs = [abs(r.error_pct) for r in self.rows if r.error_pct is not None
                and (kind is None or r.reference.kind == kind)]
        return sum(errs) / len(errs) if errs else None

    @property
    def unreferenced(self):
        return [r.figure for r in self.rows if r.reference is None]


def _fail(file, key, what):
    return ConfigError(f"{file}: {key}: {what}", file=file, key=key)


def _suggest(name, known):
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def load_references(paths, known_figures):
    """Every reference of the given files, checked against the figures validation knows."""
    known = sorted(known_figures)
    out = []
    for path in paths:
        out += _load_file(Path(path), known)
    return out


def _load_file(path, known):
    shown = display_path(path)
    if not path.is_file():
        raise ConfigError(f"{shown}: no such reference file", file=shown)
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{shown}: the top level must be a mapping with a 'references' list "
                          f"(and optionally 'kind'); found {type(raw).__name__}", file=shown)
    extra = sorted(set(raw) - {"references", "kind"})
    if extra:
        raise _fail(shown, extra[0], "unknown key; a reference file has 'references' (a list) "
                                     "and optionally 'kind'")
    default_kind = raw.get("kind", "measured")
    if default_kind not in KINDS:
        raise _fail(shown, "kind", f"expected one of {', '.join(KINDS)}, found {default_kind!r}")
    entries = raw.get("references")
    if not isinstance(entries, list) or not entries:
        raise _fail(shown, "references", f"expected a non-empty list of entries (figure, value, "
                                         f"unit, source), found {entries!r}")
    return [_entry(e, f"references[{i}]", shown, default_kind, known)
            for i, e in enumerate(entries)]


def _entry(e, key, shown, default_kind, known):
    if not isinstance(e, dict):
        raise _fail(shown, key, f"expected a mapping with keys {', '.join(_REQUIRED)}, found "
                                f"{e!r}")
    for k in e:
        if k not in _ENTRY_KEYS:
            raise _fail(shown, f"{key}.{k}", f"unknown key; expected {', '.join(_ENTRY_KEYS)}"
                                             + _suggest(str(k), _ENTRY_KEYS))
    for k in _REQUIRED:
        if k not in e:
            raise _fail(shown, f"{key}.{k}", "missing (every reference needs figure, value, unit "
                                             "and source)")
    figure = e["figure"]
    if not isinstance(figure, str) or figure not in known:
        raise _fail(shown, f"{key}.figure", f"no validation figure named {figure!r}"
                    + (_suggest(figure, known) if isinstance(figure, str) else "")
                    + f"; the figures are listed in configs/validation/figures.yaml")
    value = e["value"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value <= 0:
        raise _fail(shown, f"{key}.value", f"expected a positive number, found {value!r}")
    unit = figure_unit(figure)
    if e["unit"] != unit:
        raise _fail(shown, f"{key}.unit", f"expected '{unit}' (the unit of {figure}), found "
                                          f"{e['unit']!r}; convert the value to {unit}")
    source = e["source"]
    if not isinstance(source, str) or not source.strip():
        raise _fail(shown, f"{key}.source", "expected a non-empty string naming where the value "
                                            "comes from (data sheet, paper, your own run)")
    kind = e.get("kind", default_kind)
    if kind not in KINDS:
        raise _fail(shown, f"{key}.kind", f"expected one of {', '.join(KINDS)}, found {kind!r}")
    note = e.get("note", "")
    if not isinstance(note, str):
        raise _fail(shown, f"{key}.note", f"expected a string, found {note!r}")
    return Reference(figure=figure, value=float(value), unit=unit, source=source.strip(),
                     kind=kind, file=shown, note=note)


def correlate(figures, references):
    """Rows in figure order: one per reference of a figure, or one without reference.
    `figures`: {name: simulated value or None (run failed)}; references of figures that are not
    in `figures` (not run this time) are left out."""
    by_figure = {}
    for ref in references:
        by_figure.setdefault(ref.figure, []).append(ref)
    rows = []
    for name, value in figures.items():
        refs = by_figure.get(name) or [None]
        rows += [Row(figure=name, simulated=value, reference=r) for r in refs]
    return Correlation(rows=tuple(rows))


def _num(v):
    if v is None:
        return "-"
    return f"{v:.4g}" if abs(v) < 10 else f"{v:.1f}"


def format_report(corr, notes=None):
    """The report as text: one line per row, then the summary."""
    notes = notes or {}
    head = ("figure", "simulated", "reference", "unit", "error %", "kind", "source")
    lines = []
    for r in corr.rows:
        ref = r.reference
        err = r.error_pct
        lines.append((r.figure, "failed" if r.simulated is None else _num(r.simulated),
                      _num(ref.value) if ref else "-", figure_unit(r.figure) or "",
                      f"{err:+.1f}" if err is not None else "-",
                      ref.kind if ref else "-",
                      f"{ref.file}: {ref.source}" if ref else "no reference"))
    widths = [max(len(h), *(len(l[i]) for l in lines)) if lines else len(h)
              for i, h in enumerate(head)]
    widths[-1] = len(head[-1])
    fmt = lambda cells: "  ".join(c.ljust(w) if i in (0, 3, 5, 6) else c.rjust(w)
                                  for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    out = [fmt(head), fmt(["-" * w for w in widths])] + [fmt(l) for l in lines]
    out.append("")
    overall = corr.mean_abs_error_pct()
    n = sum(1 for r in corr.rows if r.error_pct is not None)
    out.append(f"mean absolute error: {_pct(overall)} over {n} figure-reference pairs")
    for kind in KINDS:
        m = corr.mean_abs_error_pct(kind)
        if m is not None:
            what = ("distance below data-sheet peaks and line rates" if kind == "datasheet"
                    else "error against measurements")
            out.append(f"  {kind}: {_pct(m)} ({what})")
    if corr.unreferenced:
        out.append(f"no reference: {', '.join(corr.unreferenced)}")
    for figure, note in notes.items():
        out.append(f"note: {figure}: {note}")
    return "\n".join(out)


def _pct(v):
    return "-" if v is None else f"{v:.1f}%"
