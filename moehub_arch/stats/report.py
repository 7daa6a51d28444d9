"""Report figures: derived numbers a config asks for (``workload.report``), dumped as
``system.report.<name>`` and printed on stdout. Each is also dumped under its former name
``system.ubench.<name>`` (an alias kept for one release, for scripts written against it).

An expression may use numbers, + - * / // % **, parentheses, min/max/abs, and:
  stat('name')                 value of a stat of this run
  sum_stats('pattern')         sum of the stats matching a shell-style pattern
  max_stats / min_stats('pattern')
  word(gpu, 'buffer', index)   64-bit integer element `index` of a buffer on a GPU (e.g. a
                               timestamp a kernel stored with `st [...], %tick`)
  param(launch, 'name')        value of kernel parameter `name` of workload.launches[launch]
                               (on the first GPU it launches on)
  grid(launch)                 thread blocks per GPU of workload.launches[launch] (first GPU)
and the names of the system parameters (``gpu.num_sms``, ``nvlink.bandwidth``, ...).
"""
import math

from ..config import flat_params
from ..isa.expr import ExprError, evaluate
from ..observer import SimulationError


class ReportError(Exception):
    pass


def evaluate_expression(text, sim, names):
    stats = sim.stats

    def stat(name):
        if name not in stats:
            raise ReportError(f"no stat named '{name}'")
        return stats[name]

    def matching(pattern):
        found = stats.match(pattern)
        if not found:
            raise ReportError(f"no stat matches '{pattern}'")
        return [s.value for s in found]

    def instance(launch):
        for li in sim.launches:
            if li.config_index == int(launch):
                return li
        raise ReportError(f"no launch {launch} in workload.launches")

    def param(launch, name):
        li = instance(launch)
        names = sim.program.kernels[li.kernel].params
        if name not in names:
            raise ReportError(f"kernel '{li.kernel}' has no parameter '{name}' "
                              f"(parameters: {', '.join(names)})")
        return li.params[names.index(name)]

    funcs = {
        "stat": stat,
        "param": param,
        "grid": lambda launch: instance(launch).grid,
        "sum_stats": lambda pat: sum(matching(pat)),
        "max_stats": lambda pat: max(matching(pat)),
        "min_stats": lambda pat: min(matching(pat)),
        "word": lambda gpu, buf, index: int(sim.read_buffer(int(gpu), buf, "i64")[int(index)]),
    }
    try:
        return evaluate(text, names, funcs)
    except ExprError as e:
        raise ReportError(str(e)) from None


REPORT_PREFIX = "system.report."
# former prefix, kept as an alias for one release (0.2 drops it)
LEGACY_REPORT_PREFIX = "system.ubench."


def add_report_stat(stats, rep, value):
    """One report figure under its name and its legacy alias."""
    stats.add(REPORT_PREFIX + rep.name, float(value), rep.unit, rep.desc)
    stats.add(LEGACY_REPORT_PREFIX + rep.name, float(value), rep.unit,
              f"alias of {REPORT_PREFIX}{rep.name} (former name, kept for one release)")


def evaluate_report(sim, strict=True):
    """Add every workload.report figure to sim.stats as system.report.<name> (and its alias).

    strict=False (a run that did not finish: stopped by a limit, stuck, interrupted): its
    measurement may not have finished, so a figure that cannot be evaluated, or whose value is
    not a finite non-negative number (the words a kernel had not written yet: a latency of
    -0.015 us), is left out - never a number made of an unfinished measurement (issue 52). The
    figures left out are listed in `sim.report_left_out`. Expressions are bounded in cost
    (isa/expr.py: no integer beyond 1024 bits)."""
    names = flat_params(sim.cfg)
    sim.report_left_out = []
    for rep in sim.cfg.workload.report:
        try:
            value = evaluate_expression(rep.expr, sim, names)
            value = float(value)
        except (ReportError, ZeroDivisionError, ValueError, OverflowError, TypeError) as e:
            if not strict:
                sim.report_left_out.append(rep.name)
                continue
            raise SimulationError(f"workload.report.{rep.name}.expr: cannot evaluate "
                                  f"'{rep.expr}': {e}") from None
        if not strict and not (value >= 0 and math.isfinite(value)):
            sim.report_left_out.append(rep.name)
            continue
        add_report_stat(sim.stats, rep, value)
