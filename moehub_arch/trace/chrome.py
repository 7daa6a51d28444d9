"""A streaming writer of Chrome trace-event JSON (the format ui.perfetto.dev and chrome://tracing
open), bounded in size.

Why hand-written: the `perfetto` Python package builds Perfetto's protobuf format (and needs the
protobuf runtime), not this JSON; the JSON format is a plain list of small objects, written here
one event per line as they are produced, so memory stays flat however long the run.

Times: the format's ``ts`` and ``dur`` are microseconds; the simulator's ticks are picoseconds, so
they are written with six decimals (exact). Metadata events (process and thread names, sort order)
do not count against the event limit, so a truncated trace still names its tracks.

The file is written as `trace.json.partial` and renamed to `trace.json` when closed (outputs.py;
runs that stop with an error close it too): a process killed mid-run leaves the partial file,
never an unterminated `trace.json`.
"""
import json
import os

from ..outputs import output_error, partial_path

PS_PER_US = 1_000_000


def us(ticks):
    """Ticks (ps) as the format's microseconds."""
    return round(ticks / PS_PER_US, 6)


class ChromeTraceWriter:
    def __init__(self, path, max_events):
        self.path = path
        self.max_events = max_events
        self.events = 0
        self.dropped = 0
        self._first = True
        try:
            self._f = open(partial_path(path), "w")
        except OSError as e:
            raise output_error(path, e, "trace file") from None
        self._put('{"displayTimeUnit": "ns", "traceEvents": [\n')

    def _put(self, text):
        try:
            self._f.write(text)
        except OSError as e:
            raise output_error(self.path, e, "trace file") from None

    @property
    def full(self):
        return self.events >= self.max_events

    def _write(self, event):
        if not self._first:
            self._put(",\n")
        self._first = False
        self._put(json.dumps(event, separators=(",", ":")))

    def add(self, event, force=False):
        """Write one event; False (and counted as dropped) once max_events were written, unless
        `force` (the few summary spans written at the end: launches, phases)."""
        if self.events >= self.max_events and not force:
            self.dropped += 1
            return False
        self.events += 1
        self._write(event)
        return True

    def span(self, pid, tid, name, start, end, args=None, cat="sim", force=False):
        """A complete event ("X") from tick `start` to tick `end`."""
        ev = {"ph": "X", "pid": pid, "tid": tid, "name": name, "cat": cat, "ts": us(start),
              "dur": us(end - start)}
        if args:
            ev["args"] = args
        return self.add(ev, force)

    def counter(self, pid, name, tick, values):
        """A counter sample ("C"); `values` maps series name -> number."""
        return self.add({"ph": "C", "pid": pid, "name": name, "ts": us(tick), "args": values})

    def process(self, pid, name, sort_index):
        self._write({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}})
        self._write({"ph": "M", "pid": pid, "name": "process_sort_index",
                     "args": {"sort_index": sort_index}})

    def thread(self, pid, tid, name):
        self._write({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name",
                     "args": {"name": name}})
        self._write({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index",
                     "args": {"sort_index": tid}})

    def close(self, other_data):
        self._put('\n],\n"otherData": ')
        self._put(json.dumps(other_data))
        self._put("}\n")
        try:
            self._f.close()
            os.replace(partial_path(self.path), self.path)
        except OSError as e:
            raise output_error(self.path, e, "trace file") from None
