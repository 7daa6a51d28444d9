"""Run limits: stop a run cleanly at a simulated time (`run.max_ticks`, `--max-ticks`) or after
a host wall-clock budget (`run.max_wall`, `--max-wall`), with the stats of the run so far.

A RunObserver: the tick limit pauses the compiled loop exactly at that tick (every event at or
before it processed, none after); the wall-clock limit is checked between batches of
`run.batch_events` events. A limited run is not an error (exit status 0), but it is incomplete:
the end-of-run invariants are not checked and `simCompleted` is 0.
"""
from .observer import RunObserver
from .watchdog import fmt_time


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
