"""Stats of a State: the gem5 root stats, then every block's declared stats.

Each block declares its statistics in its own module (components/*.py ``BLOCK``: name, unit,
description, and the counter field or the formula computed at dump time), grouped by the scope
they repeat over; ``moehub-sim stats --list`` prints them. This module adds the root stats and
asks the composition (moehub_arch/composition.py) for the rest, in dump order: system-wide
stats, then per GPU (its totals, its kernel launches, its SMs, its GPU-level blocks, its links),
then the switch ports.
"""
from ..composition import emit_stats
from ..declare import GPU_SCOPES
from ..engine.state import LN_DONE
from .registry import StatsSet


def collect_stats(st, launches, program, host_seconds, compile_seconds, sim_ticks=None,
                  host_cpu_seconds=None):
    """All stats of a finished run, in dump order (root stats first); `sim_ticks`: the time of a
    periodic dump during the run (default: the tick of the last event); `host_cpu_seconds`: the
    process's CPU time over the run loop (a finished run's; None leaves the stat out)."""
    out = StatsSet()
    sim_ticks = int(st.sys[0].q_now) if sim_ticks is None else int(sim_ticks)
    events = int(st.sys[0].q_events)
    insts = int(st.sm.insts.sum())
    out.add("simTicks", sim_ticks, "ps", "simulated time (tick of the last event)")
    out.add("simSeconds", sim_ticks * 1e-12, "s", "simulated time")
    out.add("simFreq", 10 ** 12, "ticks/s", "ticks per simulated second")
    out.add("simInsts", insts, "instructions", "instructions issued by all SMs")
    out.add("simEvents", events, "count", "events processed by the run loop")
    out.add("simCompleted", int((st.ln.status == LN_DONE).all()), "",
            "1 if every kernel launch finished; 0 if the run stopped before (a limit, a deadlock, "
            "the watchdog, a runtime error)")
    out.add("hostSeconds", host_seconds, "s", "wall-clock time of the run loop (compile excluded)")
    if host_cpu_seconds is not None:
        # on a shared machine wall time measures the load as much as the engine; the process's own
        # CPU time (user + system) over the same span is what tools/bench.py's sweeps fit
        out.add("hostCpuSeconds", host_cpu_seconds, "s",
                "CPU time (user + system) of the process during the run loop (compile excluded)")
    out.add("hostCompileSeconds", compile_seconds, "s", "wall-clock time to load or compile the engine")
    out.add("hostInstRate", insts / host_seconds if host_seconds > 0 else 0.0, "instructions/s",
            "simulated instructions per host second")
    out.add("hostEventRate", events / host_seconds if host_seconds > 0 else 0.0, "events/s",
            "events per host second")
    emit_stats(out, st, launches, sim_ticks, ("system",))
    emit_stats(out, st, launches, sim_ticks, GPU_SCOPES + ("switch_port", "fabric_link", "nic"))
    return out
