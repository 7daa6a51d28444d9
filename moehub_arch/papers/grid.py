"""A seed paper's evaluation grid as data (schemes x cells), its sweep, and the comparison of our
cells with the paper's published figures.

A paper module (`papers/<paper>.py`) describes its evaluation as far as the simulator models it:

- `Scheme`s: the proposed design, the paper's baselines and its ablations, each the `--set`
  overrides that select it here, or `not_modelled` with the reason (a baseline the simulator lacks);
- `Cell`s: the paper's configurations (model or shape, GPUs, tokens, top-k, routing, pass), each
  the overrides that set it up, and per scheme a reason where that scheme cannot run the cell;
- `Compare`s: for every figure of `workloads/papers/<paper>.yaml`, how ours is computed from the
  cells (a speedup, a traffic saving or a stat, aggregated over the cells as the paper aggregates),
  or why no cell of ours measures it.

The grid runs as one `moehub-sim sweep` (sweep/): one point per (cell, scheme), resumable, on local
workers or a Dask scheduler. Nothing here looks at a published value except to put it beside ours.
"""
import math
from pathlib import Path

import attrs

from ..paths import data_root

ROLES = ("proposed", "baseline", "ablation")
KINDS = ("speedup", "traffic_saving", "stat", "not_modelled")
AGGREGATES = ("geomean", "mean", "min", "max", "range")


@attrs.frozen
class Scheme:
    label: str                      # our name in the report (a scheme, or a scheme + options)
    paper_name: str                 # what the paper calls it
    role: str = "baseline"          # proposed | baseline | ablation
    sets: tuple = ()                # (("key", value), ...) that select it
    not_modelled: str | None = None  # why the simulator does not run it (then sets is empty)
    note: str = ""                  # how ours differs from the paper's, in a few words


@attrs.frozen
class Cell:
    labels: tuple                   # (("axis", value), ...): what the report shows per cell
    sets: tuple                     # (("key", value), ...): the cell's overrides
    skip: tuple = ()                # ((scheme label or "*", reason), ...): who cannot run it

    def skip_reason(self, scheme):
        for who, why in self.skip:
            if who in ("*", scheme):
                return why
        return None

    def label(self, axes=None):
        return ", ".join(f"{v}" for k, v in self.labels if axes is None or k in axes)

    def get(self, axis):
        return dict(self.labels).get(axis)


@attrs.frozen
class Compare:
    figure: str                     # id in the paper's figures file
    kind: str                       # speedup | traffic_saving | stat | not_modelled
    over: tuple = ()                # speedup / traffic_saving: the schemes compared with (pooled)
    of: str | None = None           # the scheme whose figure it is (None: the proposed one)
    agg: str = "geomean"            # how the cells' values combine (the paper's own aggregate)
    metric: str = "time"            # speedup: time (the grid's time stat) or alltoall (dispatch
                                    # + combine phases); stat: the stat's name
    scale: float = 1.0              # stat: multiply ours by this into the paper's unit
    where: tuple = ()               # (("axis", value), ...): only cells with these labels
    reason: str = ""                # not_modelled: why


@attrs.frozen
class PaperGrid:
    name: str                       # the paper's key (its figures file's name)
    config: str                     # the sweep's config, relative to the data root
    fixed: tuple                    # (("key", value), ...) every point gets
    system: str                     # the system in words
    description: str                # what the grid is, one paragraph
    axes: tuple                     # the cells' label axes, in table order
    schemes: tuple                  # Scheme
    cells: tuple                    # Cell
    compares: tuple                 # Compare
    time_stat: str = "system.moe.layer_time_us"
    traffic: bool = False           # the report has a traffic table (MoE layers' wire bytes)
    quick: bool = False
    cell_metrics: tuple = ("time",)  # the per-cell speedup tables (the first is plotted)

    @property
    def proposed(self):
        return next(s for s in self.schemes if s.role == "proposed")

    def scheme(self, label):
        for s in self.schemes:
            if s.label == label:
                return s
        raise KeyError(label)


STATS_MOE = ["system.moe.layer_time_us", "system.moe.phase.*", "system.moe.ideal_layer_fraction",
             "system.moe.rows_dropped", "system.moe.nvlink.up_wire_bytes",
             "system.moe.nvlink.down_wire_bytes", "system.moe.nvlink.tx_utilization_mean"]
STATS_BLOCK = ["system.block.time_us", "system.block.link_utilisation_pct",
               "system.cais.table_peak_bytes_per_port", "system.cais.sync_wait_mean",
               "system.cais.complete_fraction"]


def point_values(grid, cell, scheme):
    """The sweep point of one (cell, scheme): its overrides as an ordered mapping."""
    return dict(list(cell.sets) + list(scheme.sets))


def points(grid):
    """[(cell, scheme, values)] of every point the grid runs (modelled schemes, cells they can
    run)."""
    out = []
    for cell in grid.cells:
        for s in grid.schemes:
            if s.not_modelled is None and cell.skip_reason(s.label) is None:
                out.append((cell, s, point_values(grid, cell, s)))
    return out


def sweep_spec(grid, outdir):
    """The grid as a sweep mapping (the keys of a sweep file)."""
    stats = STATS_BLOCK if grid.time_stat.startswith("system.block") else STATS_MOE
    return {"name": f"paper_{grid.name}" + ("_quick" if grid.quick else ""),
            "config": str(data_root() / grid.config),
            "set": dict(grid.fixed),
            "points": [v for _, _, v in points(grid)],
            "stats": stats, "outdir": str(Path(outdir).resolve())}


def _key(values):
    return tuple((str(k), v) for k, v in values.items())


def collect(grid, rows):
    """{(cell index, scheme label): stats, or None (failed)}; points not run are absent."""
    by_values = {_key(dict(r["point"].values)): r for r in rows}
    out = {}
    for i, cell in enumerate(grid.cells):
        for s in grid.schemes:
            if s.not_modelled is not None or cell.skip_reason(s.label) is not None:
                continue
            r = by_values.get(_key(point_values(grid, cell, s)))
            if r is not None:
                out[(i, s.label)] = r["stats"] if r["status"].startswith("ok") else None
    return out


def cell_state(grid, results, i, label):
    """'ok' | 'not modelled: ..' | 'skipped: ..' | 'failed' | 'not run' of one (cell, scheme)."""
    s = grid.scheme(label)
    if s.not_modelled is not None:
        return "not modelled"
    why = grid.cells[i].skip_reason(label)
    if why is not None:
        return f"skipped: {why}"
    if (i, label) not in results:
        return "not run"
    return "ok" if results[(i, label)] is not None else "failed"


def metric_value(grid, stats, metric):
    if metric == "time":
        return stats.get(grid.time_stat)
    if metric == "alltoall":
        d, c = stats.get("system.moe.phase.dispatch_us"), stats.get("system.moe.phase.combine_us")
        return None if d is None or c is None else d + c
    return stats.get(metric)


def wire_bytes_per_gpu(stats):
    up, down = stats.get("system.moe.nvlink.up_wire_bytes"), stats.get(
        "system.moe.nvlink.down_wire_bytes")
    n = stats.get("system.num_gpus")
    if up is None or down is None or not n:
        return None
    return up / n, down / n


def cell_values(grid, results, cmp):
    """[(cell index, value)] of one comparison over the cells it covers."""
    of = cmp.of or grid.proposed.label
    out = []
    for i, cell in enumerate(grid.cells):
        if any(cell.get(k) != v for k, v in cmp.where):
            continue
        mine = results.get((i, of))
        if mine is None:
            continue
        if cmp.kind == "stat":
            v = mine.get(cmp.metric)
            if v is not None:
                out.append((i, v * cmp.scale))
            continue
        for b in cmp.over:
            base = results.get((i, b))
            if base is None:
                continue
            if cmp.kind == "speedup":
                a, t = metric_value(grid, base, cmp.metric), metric_value(grid, mine, cmp.metric)
                if a and t:
                    out.append((i, a / t))
            elif cmp.kind == "traffic_saving":
                wa, wt = wire_bytes_per_gpu(base), wire_bytes_per_gpu(mine)
                if wa and wt and sum(wa):
                    out.append((i, 1.0 - sum(wt) / sum(wa)))
    return out


def aggregate(values, agg):
    """The cells' values combined as the paper combines them: a tuple (one value, or low and high
    for a range); None without values."""
    if not values:
        return None
    if agg == "geomean":
        return (math.exp(sum(math.log(v) for v in values) / len(values)),)
    if agg == "mean":
        return (sum(values) / len(values),)
    if agg == "min":
        return (min(values),)
    if agg == "max":
        return (max(values),)
    return (min(values), max(values))


def why_not_modelled(grid, cmp):
    """The reason a comparison has no value of ours by construction (a scheme not modelled), or
    None."""
    if cmp.kind == "not_modelled":
        return cmp.reason
    names = [cmp.of] if cmp.of else []
    for b in list(cmp.over) + names:
        s = grid.scheme(b)
        if s.not_modelled is not None:
            return f"{s.paper_name}: {s.not_modelled}"
    return None


def compare_rows(grid, data, results):
    """One row per published figure: {figure, paper (Figure), ours (tuple or None), ratio (tuple
    or None), cells (count), state ('ok' | 'not modelled: ..' | 'no cell finished')}."""
    by_fig = {c.figure: c for c in grid.compares}
    rows = []
    for fig in data.figures:
        cmp = by_fig[fig.id]
        why = why_not_modelled(grid, cmp)
        if why is not None:
            rows.append({"figure": fig, "compare": cmp, "ours": None, "ratio": None, "cells": 0,
                         "state": f"not modelled: {why}"})
            continue
        vals = [v for _, v in cell_values(grid, results, cmp)]
        ours = aggregate(vals, cmp.agg)
        ratio = None
        if ours is not None:
            pv = fig.value if len(fig.value) == len(ours) else (fig.value[-1],) * len(ours)
            ratio = tuple(o / p if p else None for o, p in zip(ours, pv))
        rows.append({"figure": fig, "compare": cmp, "ours": ours, "ratio": ratio,
                     "cells": len(vals), "state": "ok" if ours is not None else "no cell finished"})
    return rows


def check_grid(grid, data):
    """A grid and its figures file agree: every figure has exactly one comparison, every
    comparison names a figure and schemes of the grid. Raises ValueError (a programming error in
    a paper module, caught by the tests)."""
    figs = {f.id for f in data.figures}
    cmps = [c.figure for c in grid.compares]
    if len(set(cmps)) != len(cmps):
        raise ValueError(f"paper {grid.name}: a figure is compared twice")
    if set(cmps) != figs:
        raise ValueError(f"paper {grid.name}: figures without a comparison: "
                         f"{sorted(figs - set(cmps))}; comparisons without a figure: "
                         f"{sorted(set(cmps) - figs)}")
    labels = {s.label for s in grid.schemes}
    for c in grid.compares:
        if c.kind not in KINDS or c.agg not in AGGREGATES:
            raise ValueError(f"paper {grid.name}: figure {c.figure}: kind {c.kind} / agg {c.agg}")
        for b in list(c.over) + ([c.of] if c.of else []):
            if b not in labels:
                raise ValueError(f"paper {grid.name}: figure {c.figure}: unknown scheme {b}")
    if sum(s.role == "proposed" for s in grid.schemes) != 1:
        raise ValueError(f"paper {grid.name}: exactly one proposed scheme")
