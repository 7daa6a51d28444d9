"""`moehub-sim plot OUTDIR...`: PNG figures of finished runs (matplotlib, no display needed).

- ``sm_timeline.png`` (traced runs): a Gantt chart per GPU - one row per SM, one thin lane per
  thread-block slot, coloured by what the TB does (compute, communicate, memory, run, waits), with
  the MoE layer phases and kernel launches above. It answers "did communication overlap the
  GEMMs?" at a glance.
- ``link_utilization.png`` (traced runs): NVLink utilisation over time, mean over each GPU's links,
  transmit and receive.
- ``time_breakdown.png``: per run, the layer time split into ideal compute and exposed overhead,
  and the time per phase (phases of overlapping schemes overlap, so they need not add up).

With several runs the timeline figures are prefixed with the run's directory name.
"""
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from . import AnalysisError
from .rundata import RunData

ACTIVITY_COLORS = {
    "compute": "#2ca02c", "communicate": "#1f77b4", "memory": "#9467bd", "run": "#c7c7c7",
    "wait flag": "#d62728", "wait fence": "#ff9896", "wait remote result": "#e377c2",
    "wait hub room": "#ff7f0e", "wait claim (hub tile)": "#bcbd22",
}
PHASE_COLORS = {"mediation": "#8c564b", "dispatch": "#1f77b4", "expert": "#2ca02c",
                "combine": "#17becf"}
_SLOT = re.compile(r"SM (\d+)\.(\d+)")


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _timeline_data(events):
    """Per GPU pid: TB activity spans by (sm, slot), phase spans, launch spans; and GPU names."""
    names, slots = {}, {}
    for e in events:
        if e["ph"] != "M":
            continue
        if e["name"] == "process_name":
            names[e["pid"]] = e["args"]["name"]
        elif e["name"] == "thread_name":
            m = _SLOT.fullmatch(e["args"]["name"])
            if m:
                slots[(e["pid"], e["tid"])] = (int(m.group(1)), int(m.group(2)))
    acts = defaultdict(list)     # pid -> [(sm, slot, start us, dur us, activity)]
    phases = defaultdict(list)   # pid -> [(name, start, dur)]
    for e in events:
        if e["ph"] != "X":
            continue
        cat = e.get("cat")
        if cat == "tb":
            sm, slot = slots[(e["pid"], e["tid"])]
            acts[e["pid"]].append((sm, slot, e["ts"], e["dur"], e["name"]))
        elif cat == "phase":
            phases[e["pid"]].append((e["name"], e["ts"], e["dur"]))
    return names, acts, phases


def plot_sm_timeline(run, path, max_gpus=4):
    plt = _pyplot()
    names, acts, phases = _timeline_data(run.trace())
    pids = sorted(p for p in acts)[:max_gpus]
    if not pids:
        raise AnalysisError(f"{run.dir}/trace.json has no thread-block spans (trace.components "
                            f"without sm, or an empty window)")
    slots_per_sm = 1 + max(s for p in pids for _, s, *_ in acts[p])
    fig, axes = plt.subplots(len(pids), 1, figsize=(13, 2.2 + 2.6 * len(pids)), squeeze=False,
                             sharex=True)
    for ax, pid in zip(axes[:, 0], pids):
        sms = sorted({sm for sm, *_ in acts[pid]})
        row = {sm: i for i, sm in enumerate(sms)}
        lane = 0.9 / slots_per_sm
        by_act = defaultdict(lambda: ([], []))
        for sm, slot, ts, dur, act in acts[pid]:
            xs, ys = by_act[act]
            xs.append((ts, dur))
            ys.append(row[sm] + slot * lane)
        for act, (xs, ys) in by_act.items():
            color = ACTIVITY_COLORS.get(act, "#7f7f7f")
            for y in sorted(set(ys)):
                ax.broken_barh([x for x, yy in zip(xs, ys) if yy == y], (y, lane * 0.95),
                               facecolors=color, linewidth=0)
        # phases above the SMs, one lane each (the phases of some schemes overlap)
        top = len(sms) + 0.3
        lane_h = max(0.8, len(sms) / 25)
        order = list(dict.fromkeys(name for name, _, _ in phases.get(pid, [])))
        for name, ts, dur in phases.get(pid, []):
            y = top + order.index(name) * lane_h
            ax.broken_barh([(ts, dur)], (y, lane_h * 0.9),
                           facecolors=PHASE_COLORS.get(name, "#7f7f7f"), alpha=0.6)
            ax.text(ts + dur / 2, y + lane_h * 0.45, name, ha="center", va="center", fontsize=7)
        ax.set_ylim(-0.2, top + lane_h * len(order) + 0.2)
        step = max(1, len(sms) // 12)
        ax.set_yticks([row[s] + 0.45 for s in sms[::step]])
        ax.set_yticklabels([str(s) for s in sms[::step]], fontsize=7)
        ax.set_ylabel(f"{names.get(pid, pid)}\nSM (lanes: TB slots)", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("simulated time (us)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in ACTIVITY_COLORS.values()]
    # title on top, the legend under it, then the axes (they must not overlap)
    fig.suptitle(f"Thread-block activity per SM - {run.label} (phases on top)", y=0.995,
                 va="top")
    fig.legend(handles, list(ACTIVITY_COLORS), loc="upper center", ncol=5, fontsize=8,
               frameon=False, bbox_to_anchor=(0.5, 0.96))
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _counter_series(events, pattern):
    """pid -> {counter name: (times us, values)} for counters whose name matches `pattern`."""
    out = defaultdict(lambda: defaultdict(lambda: ([], [])))
    rx = re.compile(pattern)
    for e in events:
        if e["ph"] == "C" and rx.fullmatch(e["name"]):
            ts, vs = out[e["pid"]][e["name"]]
            ts.append(e["ts"])
            vs.append(e["args"]["value"])
    return out


def _sample_times(other):
    """The instants (us) at which the counters were sampled: every counter period from the window
    start, and the window end (the trace writes a counter only when its value changed)."""
    start, end = other["window_ps"]
    period = other["counter_period_ps"]
    return np.append(np.arange(start, end, period), end) / 1e6


def _mean_step(series, grid):
    """Mean over several counters (written on change only) at the sample instants `grid`."""
    total = np.zeros(len(grid))
    for ts, vs in series.values():
        idx = np.searchsorted(np.asarray(ts), grid, side="right") - 1
        total += np.where(idx >= 0, np.asarray(vs, float)[np.clip(idx, 0, None)], 0.0)
    return grid, total / len(series)


def plot_link_utilization(run, path, max_gpus=8):
    plt = _pyplot()
    events = run.trace()
    grid = _sample_times(run.trace_info())
    names = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    fig, axes = plt.subplots(2, 1, figsize=(12, 6.5), sharex=True)
    drawn = False
    for ax, direction in zip(axes, ("tx", "rx")):
        series = _counter_series(events, rf"nvlink\d+ {direction} util %")
        for pid in sorted(series)[:max_gpus]:
            t, v = _mean_step(series[pid], grid)
            ax.step(t, v, where="pre", label=names.get(pid, str(pid)), linewidth=1.2)
            drawn = True
        ax.set_ylabel(f"{direction} utilisation (%)\nmean over links")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    if not drawn:
        plt.close(fig)
        raise AnalysisError(f"{run.dir}/trace.json has no link counters (trace.components "
                            f"without nvlink)")
    axes[0].legend(fontsize=8, ncol=4)
    axes[0].set_title(f"NVLink utilisation per GPU - {run.label}")
    axes[1].set_xlabel("simulated time (us)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_time_breakdown(runs, path):
    plt = _pyplot()
    labels = [r.label for r in runs]
    x = np.arange(len(runs))
    layer = [r.value("system.moe.layer_time_us") for r in runs]
    if all(v is None for v in layer):   # not MoE layers: simulated time only
        fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(runs)), 4))
        ax.bar(x, [r.value("simSeconds", 0) * 1e6 for r in runs], color="#1f77b4")
        ax.set_xticks(x, labels, rotation=20, ha="right")
        ax.set_ylabel("simulated time (us)")
        ax.set_title("Simulated time per run")
    else:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(max(10, 2.5 * len(runs)), 4.8))
        ideal = np.array([r.value("system.moe.ideal_compute_us", 0) for r in runs])
        over = np.array([r.value("system.moe.overhead_us", 0) for r in runs])
        ax1.bar(x, ideal, color="#2ca02c", label="ideal compute")
        ax1.bar(x, over, bottom=ideal, color="#d62728", label="exposed overhead (comm, mediation, imbalance)")
        for i, v in enumerate(ideal + over):
            ax1.text(i, v, f"{v:.1f}", ha="center", va="bottom", fontsize=8)
        ax1.set_xticks(x, labels, rotation=20, ha="right")
        ax1.set_ylabel("layer time (us)")
        ax1.set_title("MoE layer time")
        ax1.set_ylim(0, 1.3 * max(ideal + over))   # room for the legend above the bars
        ax1.legend(fontsize=8, loc="upper right")
        phases = [p for p in PHASE_COLORS if any(r.value(f"system.moe.phase.{p}_us") for r in runs)]
        width = 0.8 / max(len(phases), 1)
        for k, p in enumerate(phases):
            vals = [r.value(f"system.moe.phase.{p}_us", 0) for r in runs]
            ax2.bar(x + (k - (len(phases) - 1) / 2) * width, vals, width, label=p,
                    color=PHASE_COLORS[p])
        ax2.set_xticks(x, labels, rotation=20, ha="right")
        ax2.set_ylabel("time (us), mean over GPUs")
        ax2.set_title("Time per phase (phases may overlap)")
        ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_runs(outdirs, figdir=None, max_gpus=4):
    """Every figure the runs allow; returns the PNG paths written."""
    runs = [RunData(d) for d in outdirs]
    figdir = Path(figdir) if figdir else runs[0].dir / "plots"
    figdir.mkdir(parents=True, exist_ok=True)
    written = []
    for run in runs:
        prefix = "" if len(runs) == 1 else f"{run.name}_"
        if not run.has_trace:
            print(f"moehub-sim: note: {run.dir} has no trace.json (run with --trace): no timeline "
                  f"figures for it", file=sys.stderr)
            continue
        components = set()
        for e in run.trace():
            if e["ph"] == "X":
                components.add(e.get("cat"))
        if "tb" in components:
            written.append(figdir / f"{prefix}sm_timeline.png")
            plot_sm_timeline(run, written[-1], max_gpus)
        if any(e["ph"] == "C" and e["name"].startswith("nvlink") for e in run.trace()):
            written.append(figdir / f"{prefix}link_utilization.png")
            plot_link_utilization(run, written[-1])
    written.append(figdir / "time_breakdown.png")
    plot_time_breakdown(runs, written[-1])
    return written
