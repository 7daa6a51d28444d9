"""The hooks of a run (RunObserver) and the error that ends one (SimulationError).

Observers are Python objects the run calls between batches of events, never per event:
timelines, debug output, periodic dumps, progress, the watchdog, limits and checkpoints are all
observers. They live here, apart from the Simulation driver, so that modules the driver itself
uses (watchdog.py, limits.py) can subclass RunObserver. `moehub_arch.simulation` re-exports both.
"""

from .errors import UserError


class SimulationError(UserError):
    """A run that cannot complete: a runtime error in a kernel (exit 2) or a deadlock (exit 3)."""

    def __init__(self, message, exit_code=2):
        super().__init__(message)
        self.exit_code = exit_code


class RunObserver:
    """Python-side hooks of a run, called between batches of events (never per event).

    Subclass and override what you need; pass instances to Simulation.run(observers=...).
    """

    def on_start(self, sim):
        """Before the first batch (the engine is compiled or loaded)."""

    def next_stop(self, sim):
        """A simulated tick at which the compiled loop should pause so that on_pause sees the
        state exactly then (events at that tick are processed first), or None. Asked before every
        batch; once that tick is reached, return a later one (or None), or the run cannot advance."""
        return None

    def on_pause(self, sim, tick, events, wall_seconds):
        """After every batch of events or requested stop: `tick` is the current simulated time.
        `sim.exact_tick` is the tick whose state the pause shows exactly (a requested stop: every
        event at or before it processed, none after), None after an ordinary batch.
        Raise SimulationError to stop the run with an error, limits.StopRun to end it cleanly."""

    def on_records(self, sim, records):
        """Trace records ([n, 5] int64, components/trace.py) of the categories this observer
        enabled with sim.set_trace_categories, in the order they were written; called before
        every on_pause and before on_finish. The array is reused afterwards: copy what you keep."""

    def on_finish(self, sim):
        """After the stats are collected (sim.stats)."""
