"""gem5-style debug output: one text line per event of the components named by `debug.flags`.

    moehub-sim run CONFIG --debug-flags Hub,NVLink --debug-start 10us --debug-file debug.txt

Lines read ``TICK: system.gpu0.nvlink3: sends put, 256 B payload``. The events come from the
engine's trace records (components/trace.py): with no flags nothing is recorded and this module is
not even loaded. Recording starts exactly at `debug.start` (the run pauses there).
"""
import sys
from pathlib import Path

import numpy as np

from ..components.trace import (TR_AAU_ALLOC, TR_AAU_STALL, TR_DAM_CLAIM, TR_DAM_READY,
                                TR_HUB_RX, TR_HUB_TX, TR_LAUNCH_END, TR_LAUNCH_START, TR_LINK_TX,
                                TR_RPM_TX, TR_TB_ACT, TR_TB_EXIT, TR_TB_PLACE, TR_TB_RESUME,
                                TR_TB_WAIT, TR_XBAR)
from ..engine.state import WAIT_REASON_NAMES
from ..outputs import writing
from ..simulation import RunObserver
from ..components.packet import PACKET_KIND_NAMES
from .records import ACTIVITY_NAMES, WAIT_NAMES, Names, flags_mask, select


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
        """(component name, message) of one record."""
        n = self.names
        if kind == TR_TB_PLACE:
            return n.slot(ident), f"TB {v1} of kernel '{n.kernel(v0)}' placed"
        if kind == TR_TB_ACT:
            return n.slot(ident), f"issues {ACTIVITY_NAMES[v0]} instructions"
        if kind == TR_TB_WAIT:
            return n.slot(ident), f"blocks: {WAIT_NAMES.get(v0, v0)}"
        if kind == TR_TB_RESUME:
            return n.slot(ident), f"ready again (waited on {WAIT_REASON_NAMES[v0]})"
        if kind == TR_TB_EXIT:
            return n.slot(ident), f"exits (kernel '{n.kernel(v0)}')"
        if kind in (TR_LAUNCH_START, TR_LAUNCH_END):
            verb = "starts" if kind == TR_LAUNCH_START else "ends"
            return (f"system.gpu{v0}.launch{ident}",
                    f"kernel '{n.kernel(ident)}' {verb} ({n.launches[ident].grid} TBs)")
        if kind == TR_LINK_TX:
            to = "" if ident % 2 == 0 else f" to GPU {n.channel_gpu(ident)}"
            return n.channel(ident), f"sends {PACKET_KIND_NAMES[v0]}{to}, {v1} B payload"
        if kind == TR_XBAR:
            return (f"system.switch{n.ch_switch[ident]}.port{n.ch_port[ident]}",
                    f"packet for GPU {v1} crosses to port {n.ch_port[v0]}")
        if kind == TR_HUB_TX:
            return f"system.gpu{ident}.hub", f"sends {PACKET_KIND_NAMES[v0]} to GPU {v1}"
        if kind == TR_HUB_RX:
            return f"system.gpu{ident}.hub", f"receives {PACKET_KIND_NAMES[v0]} from GPU {v1}"
        if kind == TR_RPM_TX:
            what = f"{v1} B of stream" if v1 else "end-of-stream marker"
            return f"system.gpu{ident}.hub.rpm", f"sends {what} to GPU {v0}"
        if kind == TR_AAU_ALLOC:
            return f"system.gpu{ident}.hub.aau", f"allocates row {v1} of expert {v0}'s window"
        if kind == TR_AAU_STALL:
            return (f"system.gpu{ident}.hub.aau",
                    f"packet from GPU {v0} waits for window or record space ({v1} waiting)")
        if kind == TR_DAM_READY:
            return (f"system.gpu{ident}.hub.dam",
                    f"tile {v1} of expert {n.window_expert.get(v0, '?')} ready")
        if kind == TR_DAM_CLAIM:
            return f"system.gpu{ident}.hub.dam", f"tile {v1} of expert {v0} claimed"
        return "system", f"record kind {kind} ({ident}, {v0}, {v1})"
