"""gem5-style debug output: one text line per event of the components named by `debug.flags`.

    moehub-sim run CONFIG --debug-flags Hub,NVLink --debug-start 10us --debug-file debug.txt

Lines read ``TICK: system.gpu0.nvlink3: sends put, 256 B payload``. The events come from the
engine's trace records (components/trace.py): with no flags nothing is recorded and this module is
not even loaded. Recording starts exactly at `debug.start` (the run pauses there).
"""
import sys
from pathlib import Path

import numpy as np

from ..composition import DESCRIBE
from ..outputs import writing
from ..observer import RunObserver
from .records import Names, flags_mask, select


class DebugPrinter(RunObserver):
    """Prints the events of the flagged components from `start` on, to `file` or stderr."""

    def __init__(self, debug_cfg, outdir):
        self.mask = flags_mask(debug_cfg.flags)
        self.start = debug_cfg.start
        self.path = Path(outdir) / debug_cfg.file if debug_cfg.file else None
        self.what = "debug output file" if self.path else "debug output"
        self.active = False
        self.out = None
        self.names = None
        self.lines = 0

    def on_start(self, sim):
        self.names = Names(sim)
        if self.path:
            with writing(self.path, self.what):
                self.out = self.path.open("w")
        else:
            self.out = sys.stderr
        sim.enable_trace()
        if self.start == 0:
            self._activate(sim)

    def _activate(self, sim):
        self.active = True
        sim.set_trace_categories(self, self.mask)

    def next_stop(self, sim):
        return None if self.active else self.start

    def on_pause(self, sim, tick, events, wall_seconds):
        if not self.active and sim.exact_tick == self.start:
            self._activate(sim)

    def on_records(self, sim, records):
        if not self.active:
            return
        mine = select(records, self.mask)
        order = np.argsort(mine[:, 0], kind="stable")  # records of a future tick (wake-ups) last
        write = self.out.write
        with writing(self.path or "standard error", self.what):
            for tick, kind, ident, v0, v1 in mine[order].tolist():
                who, what = self.describe(kind, ident, v0, v1)
                write(f"{tick:>14}: {who}: {what}\n")
        self.lines += len(mine)

    def on_finish(self, sim):
        with writing(self.path or "standard error", self.what):
            if self.path:
                self.out.close()
            else:
                self.out.flush()

    def describe(self, kind, ident, v0, v1):
        """(component name, message) of one record: the line its block declares (Debug.describe
        in components/*.py, composed in composition.DESCRIBE)."""
        fn = DESCRIBE.get(kind)
        if fn is None:
            return "system", f"record kind {kind} ({ident}, {v0}, {v1})"
        return fn(self.names, ident, v0, v1)
