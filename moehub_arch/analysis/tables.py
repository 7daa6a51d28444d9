"""Figures of result tables: `moehub-sim plot TABLE.md` (or a .csv) draws the comparisons the
documentation shows from the tables the table tools print, without running anything.

What a table's columns allow:

- a layer grid (`model`, `GPUs`, `total tokens`, `std`, `moehub us`, `vs BASELINE` columns, as
  `tools/layer_table.py` prints): `speedup.png` - MoE-Hub's speedup over every baseline per model
  against total tokens (one GPU count - the one with the most cells, or `--gpus` - and std
  0.032, the paper's typical value, where the grid has it, or `--std`); and
  `speedup_vs_BASELINE.png` - the speedup over one baseline per model, one line per GPU count;
- a per-scheme table (`scheme` and phase columns `dispatch us`, `expert us`, `combine us`,
  `layer us`, grouped by `system` / `shape` where present, as `tools/dysharp_table.py` prints):
  `time_breakdown.png` - per group, each scheme's layer time and its phases side by side (phases
  of overlapping schemes overlap, so they are drawn beside the layer time, not stacked); and with
  `up MB/GPU` / `down MB/GPU` columns, `wire_bytes.png` - NVLink bytes up and down per GPU.

A Markdown file may hold several tables (a documentation page): every table with such columns is
drawn, the n-th one's files prefixed `tableN_` when there are several.
"""
import csv
import io
import math
import re
from collections import Counter, defaultdict
from pathlib import Path

from . import AnalysisError

_SPEEDUP = re.compile(r"^\s*([0-9.]+)x")
_PHASES = ("mediation us", "dispatch us", "expert us", "combine us")


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def read_tables(path):
    """[(header, rows)] of the Markdown tables (or the one CSV table) in a file; cells as str."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise AnalysisError(f"{path}: cannot read the table file ({e})") from None
    if path.suffix.lower() == ".csv":
        rows = list(csv.reader(io.StringIO(text)))
        return [(rows[0], rows[1:])] if rows else []
    tables, cur = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cur.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif cur:
            if len(cur) >= 3 and set("".join(cur[1])) <= set("-: "):
                tables.append((cur[0], [r for r in cur[2:] if len(r) == len(cur[0])]))
            cur = []
    return tables


def _number(text):
    m = _SPEEDUP.match(text) or re.match(r"^\s*(-?[0-9.]+)", text)
    return float(m.group(1)) if m else math.nan


def _png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    _pyplot().close(fig)
    return buf.getvalue()


def _grid_figures(header, rows, gpus=None, std=None):
    col = {name: i for i, name in enumerate(header)}
    baselines = [h[3:] for h in header if h.startswith("vs ")]
    if "moehub us" in col:      # cells that could not be placed say "skipped: ..."
        rows = [r for r in rows if not math.isnan(_number(r[col["moehub us"]]))]
    if gpus is None:     # the GPU count with the most cells (ties: the larger)
        counts = Counter(r[col["GPUs"]] for r in rows)
        gpus = max(counts, key=lambda g: (counts[g], _number(g)))
    if std is None:      # the MoE-Hub paper's typical imbalance where the grid has it
        stds = Counter(r[col["std"]] for r in rows)
        std = "0.032" if "0.032" in stds else stds.most_common(1)[0][0]
    models = list(dict.fromkeys(r[col["model"]] for r in rows if r[col["GPUs"]] == gpus))
    if not models:
        raise AnalysisError(f"the layer grid has no cell with {gpus} GPUs and std {std}")
    plt = _pyplot()
    out = {}

    def panel_axes(title):
        fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.6), squeeze=False,
                                 sharey=True)
        fig.suptitle(title, fontsize=11)
        return fig, axes[0]

    def finish(ax, model):
        ax.axhline(1.0, color="#888", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_title(model, fontsize=10)
        ax.set_xlabel("total tokens")
        ax.grid(alpha=0.3)

    fig, axes = panel_axes(f"MoE-Hub speedup over each baseline (layer time ratio), {gpus} GPUs, "
                           f"routing std {std}")
    for ax, model in zip(axes, models):
        pts = sorted((int(r[col["total tokens"]]), r) for r in rows if r[col["model"]] == model
                     and r[col["GPUs"]] == gpus and r[col["std"]] == std)
        for b in baselines:
            ys = [_number(r[col["vs " + b]]) for _, r in pts]
            ax.plot([t for t, _ in pts], ys, marker="o", ms=3, label=b)
        finish(ax, model)
    axes[0].set_ylabel("speedup (baseline / moehub)")
    axes[-1].legend(fontsize=8)
    out["speedup.png"] = _png(fig)
    for b in baselines:
        fig, axes = panel_axes(f"MoE-Hub speedup over {b} (layer time ratio), routing std {std}")
        for ax, model in zip(axes, models):
            by_gpus = defaultdict(list)
            for r in rows:
                if r[col["model"]] == model and r[col["std"]] == std:
                    by_gpus[int(r[col["GPUs"]])].append((int(r[col["total tokens"]]),
                                                         _number(r[col["vs " + b]])))
            for g in sorted(by_gpus):
                pts = sorted(by_gpus[g])
                ax.plot([t for t, _ in pts], [s for _, s in pts], marker="o", ms=3,
                        label=f"{g} GPUs")
            finish(ax, model)
        axes[0].set_ylabel(f"speedup over {b}")
        axes[-1].legend(fontsize=8)
        out[f"speedup_vs_{b}.png"] = _png(fig)
    return out


def _scheme_figures(header, rows):
    col = {name: i for i, name in enumerate(header)}
    keys = [k for k in ("system", "shape", "model", "tokens") if k in col]
    groups = defaultdict(list)
    for r in rows:
        groups[" / ".join(r[col[k]] for k in keys) or "all"].append(r)
    phases = [p for p in _PHASES if p in col]
    plt = _pyplot()
    out = {}
    n = len(groups)
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    if "layer us" in col:
        fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.4 * nrows), squeeze=False)
        series = ["layer us"] + phases
        for ax, (name, rs) in zip(axes.flat, groups.items()):
            schemes = [r[col["scheme"]] for r in rs]
            width = 0.8 / len(series)
            for i, s in enumerate(series):
                ax.bar([x + i * width for x in range(len(rs))], [_number(r[col[s]]) for r in rs],
                       width, label=s[:-3])
            ax.set_xticks([x + 0.4 - width / 2 for x in range(len(rs))], schemes, rotation=30,
                          ha="right", fontsize=8)
            ax.set_title(name, fontsize=10)
            ax.set_ylabel("us")
            ax.grid(axis="y", alpha=0.3)
        for ax in list(axes.flat)[n:]:
            ax.set_visible(False)
        axes.flat[0].legend(fontsize=8)
        fig.suptitle("Layer time and phases per scheme (phases may overlap; a missing bar: the "
                     "scheme has no such phase)", fontsize=11)
        fig.tight_layout()
        out["time_breakdown.png"] = _png(fig)
    if "up MB/GPU" in col and "down MB/GPU" in col:
        fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.4 * nrows), squeeze=False)
        for ax, (name, rs) in zip(axes.flat, groups.items()):
            xs = range(len(rs))
            ax.bar([x - 0.2 for x in xs], [_number(r[col["up MB/GPU"]]) for r in rs], 0.4,
                   label="up (GPU to switch)")
            ax.bar([x + 0.2 for x in xs], [_number(r[col["down MB/GPU"]]) for r in rs], 0.4,
                   label="down (switch to GPU)")
            ax.set_xticks(list(xs), [r[col["scheme"]] for r in rs], rotation=30, ha="right",
                          fontsize=8)
            ax.set_title(name, fontsize=10)
            ax.set_ylabel("NVLink wire MB per GPU")
            ax.grid(axis="y", alpha=0.3)
        for ax in list(axes.flat)[n:]:
            ax.set_visible(False)
        axes.flat[0].legend(fontsize=8)
        fig.suptitle("NVLink wire bytes per GPU, headers included", fontsize=11)
        fig.tight_layout()
        out["wire_bytes.png"] = _png(fig)
    return out


def table_figures(path, gpus=None, std=None):
    """{file name: PNG bytes} of every figure the tables in `path` allow (see the module doc)."""
    found = []
    for header, rows in read_tables(path):
        names = set(header)
        if not rows:
            continue
        if {"model", "GPUs", "total tokens", "std"} <= names and any(h.startswith("vs ")
                                                                   for h in header):
            found.append(_grid_figures(header, rows, gpus, std))
        elif "scheme" in names and ("layer us" in names or "up MB/GPU" in names):
            found.append(_scheme_figures(header, rows))
    if not found:
        raise AnalysisError(f"{path}: no table with columns to draw (a layer grid: model, GPUs, "
                            f"total tokens, std, vs BASELINE; or a per-scheme table: scheme, "
                            f"layer us and phase columns, up/down MB/GPU)")
    if len(found) == 1:
        return found[0]
    return {f"table{i}_{name}": png for i, figs in enumerate(found, 1) for name, png in figs.items()}


def plot_tables(paths, figdir, gpus=None, std=None):
    """Write the figures of each table file into figdir (prefixed with the file's name when there
    are several files); returns the paths written."""
    figdir = Path(figdir)
    figdir.mkdir(parents=True, exist_ok=True)
    written = []
    for path in paths:
        prefix = f"{Path(path).stem}_" if len(paths) > 1 else ""
        for name, png in table_figures(path, gpus, std).items():
            out = figdir / (prefix + name)
            out.write_bytes(png)
            written.append(out)
    return written
