"""The report of one paper's grid: Markdown (report.md), the figures as JSON (report.json) and PNG
plots in the paper's own form - the proposed design's speedup per baseline per cell with the
paper's aggregate beside it, the wire bytes per GPU where the paper reports traffic, and the
ablations - with every published figure cited (figure, location, address) and every cell shown,
run or not (not modelled, skipped, failed, not run say so)."""
import json
from pathlib import Path

from ..outputs import write_text_atomic
from .grid import cell_state, compare_rows, metric_value, wire_bytes_per_gpu


def _fmt(v, unit):
    if v is None:
        return "-"
    if unit == "x":
        return f"{v:.2f}x"
    if unit == "fraction":
        return f"{v:.3f}"
    return f"{v:.3g} {unit}"


def _fmt_tuple(t, unit):
    return "-" if t is None else "-".join(_fmt(v, unit) for v in t)


def _ratio(t):
    return "-" if t is None else " / ".join("-" if r is None else f"{r:.2f}" for r in t)


def _paper_figure(grid, data, label, metric):
    """The paper's figure for the proposed design's speedup over exactly one scheme measured
    with `metric` (its geometric mean where it gives one, else its first such figure), or
    None."""
    found = [c for c in grid.compares if c.kind == "speedup" and c.over == (label,)
             and c.of is None and c.metric == metric]
    found.sort(key=lambda c: c.agg != "geomean")
    return data.figure(found[0].figure) if found else None


METRIC_WORDS = {"time": "the grid's time stat", "alltoall": "all-to-all time = "
                "system.moe.phase.dispatch_us + system.moe.phase.combine_us"}


def figure_table(rows):
    lines = ["| figure | what the paper reports | paper | ours | ours / paper | our cells (how "
             "combined) | source |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        f = r["figure"]
        ours = _fmt_tuple(r["ours"], f.unit) if r["state"] == "ok" else r["state"]
        src = f"{f.location}, [{f.address}]({f.address})" + (f" ({f.via})" if f.via else "")
        cells = f"{r['cells']} ({r['compare'].agg})" if r["state"] == "ok" else "-"
        lines.append(f"| `{f.id}` | {f.what} | {f.text()} | {ours} | {_ratio(r['ratio'])} | "
                     f"{cells} | {src} |")
    return lines


def speedup_table(grid, data, results, metric="time"):
    """Per cell: the proposed scheme's time (by `metric`) and its speedup over every other
    scheme, the paper's figure for each baseline in the last row."""
    hub = grid.proposed
    others = [s for s in grid.schemes if s.role != "proposed"]
    unit = "us"
    heads = (list(grid.axes) + [f"{hub.label} {unit}"]
             + [f"vs {s.label} ({s.paper_name})" for s in others])
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    notes = {}

    def short(state):
        """A skip reason as a numbered note under the table (they repeat across cells)."""
        if not state.startswith("skipped: "):
            return state
        n = notes.setdefault(state[len("skipped: "):], len(notes) + 1)
        return f"skipped [{n}]"

    for i, cell in enumerate(grid.cells):
        row = [str(cell.get(a)) for a in grid.axes]
        st = cell_state(grid, results, i, hub.label)
        mine = results.get((i, hub.label))
        row.append(f"{metric_value(grid, mine, metric):.1f}" if st == "ok" else short(st))
        for s in others:
            so = cell_state(grid, results, i, s.label)
            if so != "ok" or st != "ok":
                row.append(short(so) if so != "ok" else "-")
                continue
            base = results[(i, s.label)]
            x = metric_value(grid, base, metric) / metric_value(grid, mine, metric)
            dropped = base.get("system.moe.rows_dropped")
            row.append(f"{x:.2f}x" + (f" ({int(dropped)} rows dropped)" if dropped else ""))
        lines.append("| " + " | ".join(row) + " |")
    paper = ["the paper"] + [""] * (len(grid.axes) - 1) + [""]
    for s in others:
        f = _paper_figure(grid, data, s.label, metric)
        paper.append(f"{f.text()} (`{f.id}`)" if f is not None else "-")
    lines.append("| " + " | ".join(paper) + " |")
    if notes:
        lines.append("")
        lines += [f"[{n}] {why}" + ("  " if n < len(notes) else "") for why, n in notes.items()]
    return lines


def traffic_table(grid, results):
    """Per cell and modelled scheme: wire MB per GPU, up (GPU to switch) and down."""
    lines = ["| " + " | ".join(list(grid.axes) + ["scheme", "up MB/GPU", "down MB/GPU"]) + " |",
             "|" + "---|" * (len(grid.axes) + 3)]
    for i, cell in enumerate(grid.cells):
        for s in grid.schemes:
            st = cell_state(grid, results, i, s.label)
            if st.startswith("not modelled") or st.startswith("skipped"):
                continue
            w = wire_bytes_per_gpu(results[(i, s.label)]) if st == "ok" else None
            vals = [f"{w[0] / 1e6:.2f}", f"{w[1] / 1e6:.2f}"] if w else [st, st]
            lines.append("| " + " | ".join([str(cell.get(a)) for a in grid.axes] + [s.label]
                                           + vals) + " |")
    return lines


def plot_speedups(grid, data, results, path):
    """Grouped bars: the proposed scheme's speedup (by the grid's first cell metric) over each
    modelled scheme, per cell; the paper's figure per baseline as a dashed line of the bar's
    colour (a range as two lines)."""
    metric = grid.cell_metrics[0]
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    hub = grid.proposed
    others = [s for s in grid.schemes if s.role != "proposed" and s.not_modelled is None]
    cells = [(i, c) for i, c in enumerate(grid.cells) if (i, hub.label) in results]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.0 + 0.9 * len(cells) * max(1, len(others)) / 3),
                                    4.2))
    width = 0.8 / max(1, len(others))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for j, s in enumerate(others):
        xs, ys = [], []
        for n, (i, _) in enumerate(cells):
            mine, base = results.get((i, hub.label)), results.get((i, s.label))
            if mine and base:
                xs.append(n + (j - (len(others) - 1) / 2) * width)
                ys.append(metric_value(grid, base, metric) / metric_value(grid, mine, metric))
        color = colors[j % len(colors)]
        ax.bar(xs, ys, width, label=f"{s.label} ({s.paper_name})", color=color)
        f = _paper_figure(grid, data, s.label, metric)
        for v in (f.value if f is not None else ()):
            ax.axhline(v, color=color, linestyle="--", linewidth=1)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(cells)))
    ax.set_xticklabels([c.label() for _, c in cells], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel(f"speedup of {hub.label} ({metric} of other / {hub.label})")
    ax.set_title(f"{data.title[:70]}\nours (bars) and the paper's figure (dashed lines)",
                 fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_traffic(grid, results, path):
    """Bars of wire MB per GPU (up + down) per scheme per cell."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    schemes = [s for s in grid.schemes if s.not_modelled is None]
    cells = list(enumerate(grid.cells))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.0 + 0.6 * len(cells) * len(schemes) / 3), 4.2))
    width = 0.8 / len(schemes)
    for j, s in enumerate(schemes):
        xs, ys = [], []
        for n, (i, _) in enumerate(cells):
            st = results.get((i, s.label))
            w = wire_bytes_per_gpu(st) if st else None
            if w:
                xs.append(n + (j - (len(schemes) - 1) / 2) * width)
                ys.append(sum(w) / 1e6)
        ax.bar(xs, ys, width, label=s.label)
    ax.set_xticks(range(len(cells)))
    ax.set_xticklabels([c.label() for _, c in cells], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("wire MB per GPU (up + down)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _cell_json(grid, results, i, label):
    stats = results.get((i, label))
    out = {"state": cell_state(grid, results, i, label),
           "time": metric_value(grid, stats, "time") if stats else None}
    w = wire_bytes_per_gpu(stats) if stats else None
    if w:
        out["up_bytes_per_gpu"], out["down_bytes_per_gpu"] = w
    return out


def _code_line(code):
    """The code the points ran on, in one line (run.code_version)."""
    commit = code.get("commit") or "not a git checkout"
    return (f"- Code: moehub_arch {code['version']}, commit `{commit}`, sources digest "
            f"`{code['sources_digest'][:12]}` - every point shown finished under this digest "
            f"(the sweep's resume rule: same overrides, resolved config and sources), so this "
            f"commit's simulator produced them (the digest leaves out the paper reports and "
            f"figures, `moehub_arch/papers/` and `workloads/papers/`)")


def write_report(grid, data, results, errors, outdir, sweep_dir, points_total, code=None,
                 report_only=False, notes=()):
    """report.md, report.json and the PNGs in `outdir`; returns the Markdown's path. `code`:
    the version the points ran on (run.code_version); `report_only`: nothing was run for this
    report (`--report-only`); `notes`: lines about points left out."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    rows = compare_rows(grid, data, results)
    finished = sum(v is not None for v in results.values())
    resume = ("written with --report-only from the points finished so far: nothing was run; "
              "points not finished say `not run`" if report_only
              else "re-running the command resumes it")
    lines = [f"# {data.title}",
             "",
             f"arXiv {data.arxiv} ({data.venue}), {data.address} - `moehub-sim paper "
             f"{grid.name}{' --quick' if grid.quick else ''}`: ours beside the paper's published "
             f"figures (`workloads/papers/{grid.name}.yaml`). The published numbers are shown, "
             f"never tuned toward.",
             "",
             f"- Grid: {grid.description}" + (" **Quick subset.**" if grid.quick else ""),
             f"- System: {grid.system}; config `{grid.config}`"
             + (", with " + ", ".join(f"`{k}={v}`" for k, v in grid.fixed) if grid.fixed else ""),
             f"- Points: {finished} of {points_total} finished ({len(errors)} failed); sweep in "
             f"`{sweep_dir}` ({resume})"]
    if code is not None:
        lines.append(_code_line(code))
    lines += [f"- Note: {n}" for n in notes]
    lines += ["",
             "## Published figures beside ours", ""]
    lines += figure_table(rows)
    lines += ["", "A ratio is ours / the paper's (per end for a range). A figure the paper states "
                  "as a bound (< or >) is compared with the bound."]
    for metric in grid.cell_metrics:
        what = f"`{grid.time_stat}`" if metric == "time" else METRIC_WORDS.get(metric, metric)
        lines += ["", f"## Per cell: speedup of {grid.proposed.label} ({grid.proposed.paper_name}),"
                      f" {metric}", "",
                  f"Time: {what}; a speedup is the other scheme's time / "
                  f"{grid.proposed.label}'s.", ""]
        lines += speedup_table(grid, data, results, metric)
    if grid.traffic:
        lines += ["", "## Traffic: wire bytes per GPU", "",
                  "`system.moe.nvlink.{up,down}_wire_bytes` / GPUs (headers included).", ""]
        lines += traffic_table(grid, results)
    lines += ["", "## Schemes", "", "| ours | the paper's | role | note |", "|---|---|---|---|"]
    for s in grid.schemes:
        note = f"not modelled: {s.not_modelled}" if s.not_modelled else s.note
        sets = ", ".join(f"`{k}={v}`" for k, v in s.sets)
        lines.append(f"| {s.label} | {s.paper_name} | {s.role} | {note}"
                     + (f" ({sets})" if sets else "") + " |")
    if data.not_published:
        lines += ["", "## What the paper does not publish", ""]
        lines += [f"- {what}: {why}" for what, why in data.not_published]
    if errors:
        lines += ["", "## Failed points", ""]
        lines += [f"- {cell.label()} / {label}: {msg}" for (cell, label), msg in errors]
    plots = [("speedup.png", "speedup per baseline per cell")]
    plot_speedups(grid, data, results, outdir / "speedup.png")
    if grid.traffic:
        plot_traffic(grid, results, outdir / "traffic.png")
        plots.append(("traffic.png", "wire bytes per GPU"))
    lines += ["", "## Plots", ""] + [f"![{what}]({name})" for name, what in plots]
    md = outdir / "report.md"
    write_text_atomic(md, "\n".join(lines) + "\n", "paper report")
    js = {"paper": grid.name, "arxiv": data.arxiv, "quick": grid.quick,
          "points": points_total, "points_finished": finished, "report_only": report_only,
          "code": code, "notes": list(notes),
          "figures": [{"id": r["figure"].id, "paper": list(r["figure"].value),
                       "unit": r["figure"].unit, "bound": r["figure"].bound,
                       "ours": list(r["ours"]) if r["ours"] else None,
                       "ratio": list(r["ratio"]) if r["ratio"] else None, "cells": r["cells"],
                       "state": r["state"], "location": r["figure"].location,
                       "address": r["figure"].address} for r in rows],
          "cells": [{"labels": dict(c.labels),
                     "schemes": {s.label: _cell_json(grid, results, i, s.label)
                                 for s in grid.schemes}}
                    for i, c in enumerate(grid.cells)]}
    write_text_atomic(outdir / "report.json", json.dumps(js, indent=1) + "\n", "paper report")
    return md
