"""Dump formats: gem5-style ``stats.txt``, ``stats.json`` and long-format ``stats.csv``."""
import csv
import json
import math

from ..outputs import write_atomic, write_text_atomic


def _fmt(value):
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        if value == int(value) and abs(value) < 1e15:
            return f"{value:.6f}"
        return f"{value:.6g}" if abs(value) < 1e-3 or abs(value) >= 1e15 else f"{value:.6f}"
    return str(value)


def format_stats_txt(stats):
    """gem5 format: Begin/End markers; one stat per line: name, value, '# description (unit)'."""
    width = max([len(s.name) for s in stats] + [40])
    lines = ["", "---------- Begin Simulation Statistics ----------"]
    for s in stats:
        lines.append(f"{s.name:<{width}} {_fmt(s.value):>20}  # {s.desc} ({s.unit})")
    lines += ["", "---------- End Simulation Statistics   ----------", ""]
    return "\n".join(lines)


def write_stats_txt(stats, path):
    write_text_atomic(path, format_stats_txt(stats), "stats file")


_json_str = json.encoder.encode_basestring_ascii   # json.dumps of a str (C), without its call


def _json_value(value):
    """`value` as json.dumps(..., indent=1) writes it two levels deep (a stat's "value"): a number
    or a string as json writes one, anything else with its lines indented two more spaces."""
    kind = type(value)
    if kind is int:
        return int.__repr__(value)
    if kind is float:
        if value != value:
            return "NaN"
        if value in (math.inf, -math.inf):
            return "Infinity" if value > 0 else "-Infinity"
        return float.__repr__(value)
    if kind is str:
        return _json_str(value)
    return json.dumps(value, indent=1).replace("\n", "\n  ")


def format_stats_json(stats):
    """{name: {value, unit, desc}} in dump order: the text json.dumps(..., indent=1) writes, char
    for char (tests/test_stats_json.py). Written a stat at a time because json does not use its C
    encoder with an indent: its Python encoder took 1.3 s for the 157,684 stats of 64 GPUs."""
    data = {s.name: s for s in stats}   # a repeated name keeps its first place, its last stat
    if not data:
        return "{}"
    # a unit or a description is a str, unless a caller of StatsSet.add (the Python API) gave
    # something else: _json_value writes either as json.dumps would
    q, v = _json_str, _json_value
    parts = [f' {q(name)}: {{\n  "value": {v(s.value)},\n  "unit": {v(s.unit)},'
             f'\n  "desc": {v(s.desc)}\n }}' for name, s in data.items()]
    return "{\n" + ",\n".join(parts) + "\n}"


def write_stats_json(stats, path):
    """{name: {value, unit, desc}} in dump order (format_stats_json)."""
    write_text_atomic(path, format_stats_json(stats), "stats file")


def write_stats_csv(stats, path):
    """Long format, one row per stat: name, value, unit, description."""
    def write(f):
        w = csv.writer(f)
        w.writerow(["name", "value", "unit", "description"])
        for s in stats:
            w.writerow([s.name, s.value, s.unit, s.desc])
    write_atomic(path, write, "stats file")
