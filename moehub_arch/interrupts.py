"""Interrupts: Ctrl-C (SIGINT) and SIGTERM stop a run cleanly, between batches of the compiled loop.

While the simulation runs, the first signal only sets a flag (the compiled loop cannot be
interrupted inside a batch: Python runs the handler when the batch returns). `InterruptStop`, a
RunObserver every `moehub-sim run` gets, then asks the loop to finish the current tick (every
event at that tick processed, none after), optionally writes a checkpoint of that exact state
(`--checkpoint-on-interrupt`), and ends the run as a limit does: the stats so far are collected
and written (`simCompleted` 0), the CLI says where the run stopped and how to continue, and exits
with 128 + the signal number (130 for SIGINT, 143 for SIGTERM), as shells report a signal.

A signal before the run started (loading, building, compiling) or a second signal while the
first is handled stops at once: `Interrupted` (a BaseException, like KeyboardInterrupt), the
same exit status, without stats. Sweeps stop their workers and keep the points that finished.
"""
import signal

from .limits import StopRun
from .signal_state import FLAG, Interrupted, end_soft, signal_name  # noqa: F401 (re-exported)
from .observer import RunObserver
from .config.units import fmt_time

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exit_status(signum):
    return 128 + int(signum)


class InterruptedRun(StopRun):
    """Ends the run loop cleanly at the tick the interrupt was seen (stats collected)."""


def _handler(signum, frame):
    if FLAG.soft and FLAG.signum is None:
        FLAG.signum = signum
        return
    raise Interrupted(signum, f"interrupted by {signal_name(signum)}"
                      + (" again: stopped at once" if FLAG.signum is not None else ""))


class handle_signals:
    """Context manager: SIGINT and SIGTERM raise `Interrupted` (or, inside a run loop watched by
    InterruptStop, set the flag). The previous handlers come back on exit."""

    def __enter__(self):
        FLAG.signum, FLAG.soft = None, False
        self._old = {s: signal.signal(s, _handler) for s in SIGNALS}
        return FLAG

    def __exit__(self, *exc):
        FLAG.soft = False
        for s, h in self._old.items():
            signal.signal(s, h)
        return False


class InterruptStop(RunObserver):
    """RunObserver turning the first signal of the run loop into a clean stop at the end of the
    current tick; writes a checkpoint there when `checkpoint_dir` is given ('{tick}' replaced)."""

    def __init__(self, checkpoint_dir=None):
        self.checkpoint_dir = checkpoint_dir
        self.stop_tick = None
        self.tick = None          # where the run stopped
        self.events = None
        self.checkpoint = None    # the checkpoint written there, if any
        self.signum = None

    def on_start(self, sim):
        FLAG.soft = True

    def next_stop(self, sim):
        if FLAG.signum is not None and self.stop_tick is None:
            # the end of the tick reached (a pause may have brought it past the last event)
            self.stop_tick = max(int(sim.state.sys[0].q_now), int(getattr(sim, "_reached", 0)))
        return self.stop_tick

    def on_pause(self, sim, tick, events, wall_seconds):
        if self.stop_tick is None or sim.exact_tick != self.stop_tick:
            return
        self.signum, self.tick, self.events = FLAG.signum, tick, events
        if self.checkpoint_dir is not None:
            from .checkpoint import write_checkpoint
            self.checkpoint = write_checkpoint(
                sim, str(self.checkpoint_dir).replace("{tick}", str(tick)), tick)
        FLAG.soft = False   # a second signal from here on stops at once
        raise InterruptedRun(self.signal_text)

    @property
    def signal_text(self):
        return (f"interrupted by {signal_name(self.signum)} at tick {self.tick} "
                f"({fmt_time(self.tick)} simulated, {self.events} events)")

    def on_finish(self, sim):
        FLAG.soft = False
