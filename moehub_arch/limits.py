"""Run limits: stop a run cleanly at a simulated time (`run.max_ticks`, `--max-ticks`) or after
a host wall-clock budget (`run.max_wall`, `--max-wall`), with the stats of the run so far.

A RunObserver: the tick limit pauses the compiled loop exactly at that tick (every event at or
before it processed, none after); the wall-clock limit is checked between batches of
`run.batch_events` events. A limited run is not an error (exit status 0), but it is incomplete:
the end-of-run invariants are not checked and `simCompleted` is 0.
"""
from .config.units import MAX_TICKS, fmt_time
from .observer import RunObserver, SimulationError


class StopRun(Exception):
    """Raised by an observer to end the run early and cleanly (a limit, not an error)."""


class RunLimits(RunObserver):
    """RunObserver enforcing `max_ticks` (ps) and `max_wall` (seconds); 0 means no limit."""

    def __init__(self, max_ticks=0, max_wall_seconds=0.0):
        self.max_ticks = int(max_ticks)
        self.max_wall = float(max_wall_seconds)

    def next_stop(self, sim):
        return self.max_ticks if self.max_ticks > 0 else None

    def on_pause(self, sim, tick, events, wall_seconds):
        if self.max_ticks > 0 and tick >= self.max_ticks:
            raise StopRun(f"stopped at the simulated-time limit {fmt_time(self.max_ticks)} "
                          f"(run.max_ticks, --max-ticks)")
        if self.max_wall > 0 and wall_seconds >= self.max_wall:
            raise StopRun(f"stopped at tick {tick} after {wall_seconds:.1f} s of host time, the "
                          f"wall-clock limit {self.max_wall:g} s (run.max_wall, --max-wall)")


class TimeHorizon(RunObserver):
    """The simulated-time range (issue 52): the engine's clocks compute in femtoseconds in 64-bit
    integers (engine/clock.py), so simulated time must stay below `MAX_TICKS` (about 4,611 s,
    half of that range; the other half is headroom for the delays added to the current time).
    Every run gets this observer: the compiled loop pauses at MAX_TICKS, and a run that gets
    there stops with an error (exit status 2) naming the config keys that made it so slow - never
    a simulated time that wraps around to negative. As a second guard it checks at every pause
    that time did not go backwards (an overflow inside one long transfer)."""

    def __init__(self, limit=MAX_TICKS):
        self.limit = int(limit)
        self.last = 0

    def next_stop(self, sim):
        return self.limit

    def on_pause(self, sim, tick, events, wall_seconds):
        now = int(sim.state.sys[0].q_now)
        if tick >= self.limit:
            raise SimulationError(
                f"simulated time reached {fmt_time(self.limit)} (tick {self.limit}), the end of "
                f"the range the engine represents (its clocks count femtoseconds in 64-bit "
                f"integers); the run stopped there instead of overflowing. {slow_keys(sim.cfg)}",
                exit_code=2)
        if now < 0 or now < self.last:
            raise SimulationError(
                f"simulated time went backwards (from tick {self.last} to {now}): a delay "
                f"overflowed the engine's 64-bit femtosecond arithmetic. {slow_keys(sim.cfg)}",
                exit_code=2)
        self.last = now


def slow_keys(cfg) -> str:
    """Which config keys make simulated time this long: the slowest bandwidths (with the time a
    256 B packet takes at each), and latencies of a second or more; or, when none is unusual, the
    workload itself (a long sleep or a very long run)."""
    from .config.schema import key_units
    found = []
    for key, unit in key_units(cfg.system, "system").items():
        value = _value_at(cfg, key)
        if unit == "B/s" and value and value < 1e9:
            found.append((256 / value, f"{key} = {value:g} B/s (a 256 B packet takes "
                                       f"{fmt_time(round(256e12 / value))})"))
        elif unit == "ps" and value >= 10 ** 12:
            found.append((value / 1e12, f"{key} = {fmt_time(value)}"))
    if not found:
        return ("No rate or latency of the system is unusual: the workload itself runs this long "
                "(a long sleep, many iterations); shorten it or stop it with run.max_ticks.")
    found.sort(reverse=True)
    return ("The keys that make it so slow: " + "; ".join(t for _, t in found[:4])
            + ". Raise them (or stop the run earlier with run.max_ticks).")


def _value_at(cfg, dotted):
    node = cfg
    for part in dotted.replace("]", "").replace("[", ".").split("."):
        if part.isdigit():
            node = node[int(part)]
        elif isinstance(node, tuple):   # a named entry
            node = next(x for x in node if getattr(x, "name", None) == part)
        else:
            node = getattr(node, part)
    return node
