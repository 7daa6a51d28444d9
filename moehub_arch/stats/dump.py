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


def write_stats_json(stats, path):
    """{name: {value, unit, desc}} in dump order."""
    data = {s.name: {"value": s.value, "unit": s.unit, "desc": s.desc} for s in stats}
    write_text_atomic(path, json.dumps(data, indent=1), "stats file")


def write_stats_csv(stats, path):
    """Long format, one row per stat: name, value, unit, description."""
    def write(f):
        w = csv.writer(f)
        w.writerow(["name", "value", "unit", "description"])
        for s in stats:
            w.writerow([s.name, s.value, s.unit, s.desc])
    write_atomic(path, write, "stats file")
