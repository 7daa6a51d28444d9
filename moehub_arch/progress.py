"""Progress of a long single run on stderr: simulated time reached, events/s, wall time.

Updated between batches of events (never per event), at most every `interval` wall seconds; on a
terminal one line is rewritten in place, otherwise a line is printed every `interval`. Short runs
print nothing. `moehub-sim run --quiet` does not install it.
"""
import sys
import time

from .observer import RunObserver


def format_ticks(ticks):
    """Simulated time with a readable unit."""
    for unit, scale in (("s", 10 ** 12), ("ms", 10 ** 9), ("us", 10 ** 6), ("ns", 10 ** 3)):
        if ticks >= scale:
            return f"{ticks / scale:.3f} {unit}"
    return f"{ticks} ps"


class Progress(RunObserver):
    def __init__(self, stream=None, interval=1.0):
        self.stream = stream or sys.stderr
        self.interval = interval
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.printed = False

    def on_start(self, sim):
        self.t0 = self.last = time.perf_counter()
        self.last_events = 0

    def on_pause(self, sim, tick, events, wall_seconds):
        now = time.perf_counter()
        if now - self.last < (self.interval if self.tty else 5 * self.interval):
            return
        rate = (events - self.last_events) / (now - self.last)
        self.last, self.last_events = now, events
        line = (f"[moehub-sim] simulated {format_ticks(tick)}, {events:,} events, "
                f"{rate / 1e6:.2f} M events/s, {now - self.t0:.0f} s")
        if self.tty:
            self.stream.write("\r" + line + "\033[K")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self.printed = True

    def on_finish(self, sim):
        if self.printed and self.tty:
            self.stream.write("\n")
            self.stream.flush()
