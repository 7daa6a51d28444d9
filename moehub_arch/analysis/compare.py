"""`moehub-sim compare OUTDIR...`: selected stats of several runs side by side, with each run's
speedup (times: first / this) or ratio (other stats: this / first) relative to the first run.

Per-GPU stats (``system.gpu3.hub.stall_ticks``) are folded into one row per name
(``system.gpu*.hub.stall_ticks``): summed, or averaged for ratios and rates; `--per-gpu` keeps them
apart, and so does a pattern that names a GPU (``system.gpu0.sm*.insts_issued`` shows GPU 0's
SMs). Equal values read "same". When --stats patterns expand to many rows, rows that are zero in
every run are left out (the table says how many).

A scheme whose phases overlap (the expert GEMMs running while rows still arrive) has phase times
that are spans, adding up to more than its layer time: the phase rows of such runs are marked
"(overlapping)" and a note under the table says which runs, so that "2.77x slower" for an expert
phase is read as a longer span, not a longer layer. A --stats pattern that matches no stat is a
warning; only when no pattern matches anything is there nothing to show (an error).
"""
import csv
import fnmatch
import re
import sys

from . import AnalysisError
from .rundata import RunData

DEFAULT_PATTERNS = (
    "simTicks", "system.report.*",
    "system.moe.layer_time_us", "system.moe.phase.*", "system.moe.ideal_compute_us",
    "system.moe.overhead_us", "system.moe.sm.*", "system.moe.nvlink.*",
    "system.gpu*.hub.stall_ticks", "system.gpu*.hub.rpm.stall_ticks",
    "system.gpu*.hub.rpm.accept_stalls", "system.gpu*.hub.aau.alloc_stall_ticks",
)
TIME_UNITS = ("ps", "ns", "us", "ms", "s")
AVERAGED_UNITS = ("ratio", "GB/s", "events/s", "instructions/s", "")
_GPU = re.compile(r"\.gpu\d+\.")
# above this many rows, rows zero in every run are left out of the table
MANY_ROWS = 16
PHASE_PREFIX = "system.moe.phase."
OVERLAP_MARK = " (overlapping)"


def _overlapping(run):
    """True when the run's MoE phases add up to more than its layer time (they overlap)."""
    stats = run.stats
    layer = stats.get("system.moe.layer_time_us", {}).get("value")
    phases = [s["value"] for n, s in stats.items()
              if n.startswith(PHASE_PREFIX) and isinstance(s["value"], (int, float))]
    return bool(layer) and sum(phases) > layer * (1 + 1e-9)


def _rows(run, patterns, per_gpu):
    """{row name: (value, unit)} for the stats of `run` matching `patterns`, in stat order."""
    rows, counts = {}, {}
    for name, s in run.stats.items():
        matched = [p for p in patterns if fnmatch.fnmatchcase(name, p)]
        if not matched:
            continue
        if not isinstance(s["value"], (int, float)):
            continue
        # a pattern naming one GPU (system.gpu0.*) asks for that GPU's own rows
        apart = per_gpu or any(_GPU.search(p) for p in matched)
        key = name if apart else _GPU.sub(".gpu*.", name)
        value, unit = s["value"], s["unit"]
        if key in rows:
            rows[key] = (rows[key][0] + value, unit)
            counts[key] += 1
        else:
            rows[key] = (value, unit)
            counts[key] = 1
    for key, (value, unit) in rows.items():
        if counts[key] > 1 and unit in AVERAGED_UNITS:
            rows[key] = (value / counts[key], unit)
    return rows


def compare_table(outdirs, patterns=None, per_gpu=False):
    """(header, rows) of the comparison; each row: stat, unit, value per run, speedup per later run."""
    header, table, _ = _compare(outdirs, patterns, per_gpu, [])
    return header, table


def _as_run(run):
    """A run output directory, or a run already in memory: an object with `label` and `stats`
    ({name: {"value", "unit"}}, as stats.json), which the Python API's compare() passes."""
    if hasattr(run, "label") and isinstance(getattr(run, "stats", None), dict):
        return run
    return RunData(run)


def _compare(outdirs, patterns, per_gpu, notes):
    """(header, rows, number of all-zero rows left out). `notes` receives the warnings (patterns
    matching nothing, "warning: ...") and the overlap note ("note: ...")."""
    runs = [_as_run(d) for d in outdirs]
    patterns = list(patterns or DEFAULT_PATTERNS)
    per_run = [_rows(r, patterns, per_gpu) for r in runs]
    said = []
    if patterns != list(DEFAULT_PATTERNS):
        names = ", ".join(str(getattr(r, "dir", r.label)) for r in runs)
        empty = [p for p in patterns
                 if not any(fnmatch.fnmatchcase(n, p) for r in runs for n in r.stats)]
        if len(empty) == len(patterns):
            raise AnalysisError(f"--stats {', '.join(empty)}: no stat of {names} matches (list "
                                f"them with `moehub-sim stats --list CONFIG`)")
        said += [f"warning: --stats {p}: no stat of {names} matches; left out" for p in empty]
    overlapping = [r.label for r in runs if _overlapping(r)]
    if overlapping and any(n.startswith(PHASE_PREFIX) for rows in per_run for n in rows):
        said.append(f"note: the phases of {', '.join(map(str, overlapping))} overlap (they add up "
                    f"to more than the layer time): a phase row{OVERLAP_MARK} compares spans, "
                    f"not shares of the layer time")
    notes += said
    names = list(per_run[0])
    for rows in per_run[1:]:
        names += [n for n in rows if n not in names]
    header = ["stat", "unit"] + [r.label for r in runs] + [f"{r.label} vs first" for r in runs[1:]]
    table, zero_rows = [], 0
    prune = patterns != list(DEFAULT_PATTERNS) and len(names) > MANY_ROWS
    for name in names:
        vals = [rows.get(name, (None, None)) for rows in per_run]
        unit = next(u for _, u in vals if u is not None)
        values = [v for v, _ in vals]
        rel = []
        for v in values[1:]:
            first = values[0]
            if v is not None and first is not None and v == first:
                rel.append("same")
            elif v is None or first is None or v == 0 or first == 0:
                rel.append("")
            elif unit in TIME_UNITS:
                rel.append(f"{first / v:.3f}x faster" if first >= v else f"{v / first:.3f}x slower")
            else:
                rel.append(f"{v / first:.3f}x")
        # a --stats pattern expanding to many rows (system.gpu0.sm*.insts_issued): the all-zero
        # ones are left out (the default table always shows its rows)
        if prune and all(v in (0, None) for v in values):
            zero_rows += 1
            continue
        table.append([name, unit] + values + rel)
    return header, table, zero_rows


def _fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def compare_runs(outdirs, patterns=None, per_gpu=False, csv_path=None, warn=None):
    """The comparison as aligned text (and as CSV at `csv_path`); its warnings go to `warn`
    (default: standard error, as `moehub-sim: warning: ...`), its notes under the table."""
    notes = []
    header, table, zero_rows = _compare(outdirs, patterns, per_gpu, notes)
    for n in notes:
        if n.startswith("warning: "):
            (warn or (lambda t: print(f"moehub-sim: {t}", file=sys.stderr)))(n)
    if csv_path:
        with open(csv_path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(header)
            w.writerows(table)
    overlap = any(n.startswith("note: ") and OVERLAP_MARK in n for n in notes)
    cells = [header] + [[_fmt(c) + (OVERLAP_MARK if i == 0 and overlap and
                                    str(c).startswith(PHASE_PREFIX) else "")
                         for i, c in enumerate(row)] for row in table]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = []
    for k, row in enumerate(cells):
        lines.append("  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths))).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    if zero_rows:
        lines.append(f"({zero_rows} more rows are zero in every run; not shown)")
    lines += [f"({n[len('note: '):]})" for n in notes if n.startswith("note: ")]
    return "\n".join(lines)
