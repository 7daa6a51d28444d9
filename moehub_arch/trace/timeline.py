"""Timeline of a run as Chrome trace-event JSON (trace.json; open it in ui.perfetto.dev).

Layout: one process per GPU and one per switch chip. In a GPU:
- a track per kernel stream with the kernel launches as spans, and a track per MoE layer phase
  (mediation, dispatch, expert, combine: first kernel start to last kernel end on that GPU);
- a track per thread-block slot ("SM 5.2": SM 5, slot 2) with the resident TB as a span (named
  after its kernel) and, nested in it, what the TB is doing: run, compute, communicate, memory,
  or wait flag / fence / remote result / hub room / claim;
- counters: TBs resident and waiting, link utilisation per NVLink direction, hub queue and MoE-Hub
  window occupancy. A switch process holds its ports' input and output queue counters.

Thread-block spans come from the engine's trace records (components/trace.py); counters are
sampled every `trace.counter_period` at the exact simulated instant; launches and phases are read
from the launch table at the end. `trace.start` / `trace.stop` bound the window (recording is
switched on and off there, so nothing outside costs buffer space), `trace.gpus` and
`trace.components` filter, and `trace.max_events` bounds the file.
"""
import sys

import numpy as np

from ..components.trace import (ACT_RUN, ACTIVITY_NAMES, CAT_SM, TR_TB_ACT, TR_TB_EXIT,
                                TR_TB_PLACE, TR_TB_RESUME, TR_TB_WAIT)
from ..engine.state import TB_EMPTY, WAIT_NAMES
from ..isa.encoding import REG_TB
from ..observer import RunObserver
from .chrome import ChromeTraceWriter
from .counters import GPU_PID_BASE, SWITCH_PID_BASE, CounterSampler
from .records import select

STREAM_TID_BASE = 1       # thread ids: kernel streams, then phases, then TB slots
PHASE_TID_BASE = 100
SLOT_TID_BASE = 1000


class Timeline(RunObserver):
    """Writes `path` while the simulation runs (see the module docstring)."""

    def __init__(self, trace_cfg, path, num_gpus, quiet=False):
        self.cfg = trace_cfg
        self.path = path
        self.quiet = quiet
        self.gpus = sorted(set(trace_cfg.gpus)) if trace_cfg.gpus else list(range(num_gpus))
        self.components = set(trace_cfg.components)
        self.active = False
        self.done = False
        self.window_start = trace_cfg.start
        self.window_end = None
        self.next_sample = None
        self.last_values = None
        self.open_tb = {}      # slot -> [start tick, kernel name, TB index, launch]
        self.open_act = {}     # slot -> [start tick, activity name]
        self.named_slots = set()
        self.truncated = False

    # ---- run hooks --------------------------------------------------------------------------
    def on_start(self, sim):
        p = sim.state.p[0]
        self.S, self.T = int(p.sms_per_gpu), int(p.slots_per_sm)
        self.writer = ChromeTraceWriter(self.path, self.cfg.max_events)
        for g in self.gpus:
            self.writer.process(GPU_PID_BASE + g, f"GPU {g}", g)
        if "switch" in self.components:
            for s in range(int(p.num_switches)):
                self.writer.process(SWITCH_PID_BASE + s, f"NVSwitch {s}", 1000 + s)
        self.sampler = CounterSampler(sim.state, self.gpus, self.components)
        if "sm" in self.components:
            sim.enable_trace()
        if self.window_start == 0:
            self._open_window(sim, 0)

    def next_stop(self, sim):
        if self.done:
            return None
        if not self.active:
            return self.window_start
        stops = [] if self.truncated else [self.next_sample]
        if self.cfg.stop:
            stops.append(self.cfg.stop)
        return min(stops) if stops else None

    def on_pause(self, sim, tick, events, wall_seconds):
        t = sim.exact_tick
        if t is None or self.done:
            return
        if not self.active and t == self.window_start:
            self._open_window(sim, t)
        elif self.active and t == self.cfg.stop:
            self._close_window(sim, t)
        elif self.active and t == self.next_sample and not self.truncated:
            self._sample(sim, t)
            self.next_sample = t + self.cfg.counter_period

    def on_records(self, sim, records):
        if not self.active or "sm" not in self.components:
            return
        per_gpu = self.S * self.T
        recs = select(records, CAT_SM)
        if len(self.gpus) < sim.state.p[0].num_gpus:
            recs = recs[np.isin(recs[:, 2] // per_gpu, self.gpus)]
        for tick, kind, slot, v0, v1 in recs.tolist():
            if kind == TR_TB_PLACE:
                self._end_tb(slot, tick)
                self.open_tb[slot] = [tick, sim.launches[v0].kernel, v1, v0]
                self.open_act[slot] = [tick, ACTIVITY_NAMES[ACT_RUN]]
            elif kind == TR_TB_EXIT:
                self._end_tb(slot, tick)
            elif kind == TR_TB_ACT:
                self._switch_activity(slot, tick, ACTIVITY_NAMES[v0])
            elif kind == TR_TB_WAIT:
                self._switch_activity(slot, tick, WAIT_NAMES.get(v0, "wait"))
            elif kind == TR_TB_RESUME:
                self._switch_activity(slot, tick, ACTIVITY_NAMES[ACT_RUN])
        if self.writer.full:
            self._truncate(sim)

    def on_finish(self, sim):
        end = int(sim.state.sys[0].q_now)
        if self.active:
            self._close_window(sim, end)
        if not self.done:   # the run ended before the window opened
            self.window_end = self.window_start
            self.done = True
        self._launches_and_phases(sim)
        self.writer.close({"simulator": "moehub-arch", "ticks_per_us": 1_000_000,
                           "window_ps": [self.window_start, self.window_end],
                           "counter_period_ps": self.cfg.counter_period,
                           "gpus": self.gpus, "components": sorted(self.components),
                           "events": self.writer.events, "dropped_events": self.writer.dropped})
        if self.writer.dropped and not self.quiet:
            print(f"moehub-sim: warning: {self.path}: trace.max_events ({self.cfg.max_events}) "
                  f"reached, {self.writer.dropped} events dropped; narrow trace.start/stop, "
                  f"trace.gpus or trace.components", file=sys.stderr)

    # ---- window -----------------------------------------------------------------------------
    def _open_window(self, sim, tick):
        self.active = True
        st = sim.state
        if "sm" in self.components:
            sim.set_trace_categories(self, CAT_SM)
            # thread blocks already resident when the window opens start their spans here
            for g in self.gpus:
                lo = g * self.S * self.T
                for slot in range(lo, lo + self.S * self.T):
                    tb = st.tb[slot]
                    if tb.state == TB_EMPTY:
                        continue
                    launch = int(tb.launch)
                    self.open_tb[slot] = [tick, sim.launches[launch].kernel,
                                          int(st.regs[slot, REG_TB]), launch]
                    name = WAIT_NAMES.get(int(tb.state), ACTIVITY_NAMES[ACT_RUN])
                    self.open_act[slot] = [tick, name]
        self._sample(sim, tick)
        self.next_sample = tick + self.cfg.counter_period

    def _close_window(self, sim, tick):
        self._sample(sim, tick)
        for slot in list(self.open_tb):
            self._end_tb(slot, tick)
        sim.set_trace_categories(self, 0)
        self.active = False
        self.done = True
        self.window_end = tick

    def _truncate(self, sim):
        """The event budget is spent: stop recording and sampling (the file stays valid; the
        launch and phase spans are still written at the end)."""
        sim.set_trace_categories(self, 0)
        self.components.discard("sm")
        self.truncated = True

    # ---- thread-block spans -----------------------------------------------------------------
    def _slot_track(self, slot):
        g = slot // (self.S * self.T)
        local = slot - g * self.S * self.T
        tid = SLOT_TID_BASE + local
        if slot not in self.named_slots:
            self.named_slots.add(slot)
            self.writer.thread(GPU_PID_BASE + g, tid, f"SM {local // self.T}.{local % self.T}")
        return GPU_PID_BASE + g, tid

    def _switch_activity(self, slot, tick, name):
        act = self.open_act.get(slot)
        if act is None or act[1] == name:
            return
        if tick > act[0]:
            pid, tid = self._slot_track(slot)
            self.writer.span(pid, tid, act[1], act[0], tick, cat="tb")
        self.open_act[slot] = [tick, name]

    def _end_tb(self, slot, tick):
        res = self.open_tb.pop(slot, None)
        act = self.open_act.pop(slot, None)
        if res is None:
            return
        pid, tid = self._slot_track(slot)
        if tick > res[0]:
            self.writer.span(pid, tid, res[1], res[0], tick,
                             args={"tb": res[2], "launch": res[3]}, cat="residency")
        if act is not None and tick > act[0]:
            self.writer.span(pid, tid, act[1], act[0], tick, cat="tb")

    # ---- counters ---------------------------------------------------------------------------
    def _sample(self, sim, tick):
        if self.truncated:
            return
        values = self.sampler.sample(sim.state, tick)
        if self.last_values is None:
            changed = range(len(values))
        else:   # changes only: a counter that holds still costs nothing
            changed = np.nonzero(values != self.last_values)[0].tolist()
        self.last_values = values
        keys = self.sampler.keys
        for i in changed:
            pid, name = keys[i]
            v = float(values[i])
            self.writer.counter(pid, name, tick, {"value": int(v) if v.is_integer() else v})
        if self.writer.full:
            self._truncate(sim)

    # ---- launches and phases (from the launch table, exact) ---------------------------------
    def _clip(self, start, end):
        lo = max(start, self.window_start)
        hi = min(end, self.window_end)
        return (lo, hi) if hi > lo else None

    def _launches_and_phases(self, sim):
        ln = sim.state.ln
        gpus = set(self.gpus)
        if "launches" in self.components:
            named = set()
            for li in sim.launches:
                if li.gpu not in gpus or ln[li.index].end < 0:
                    continue
                span = self._clip(int(ln[li.index].start), int(ln[li.index].end))
                if span is None:
                    continue
                pid, tid = GPU_PID_BASE + li.gpu, STREAM_TID_BASE + li.stream
                if (pid, tid) not in named:
                    named.add((pid, tid))
                    self.writer.thread(pid, tid, f"stream {li.stream} kernels")
                self.writer.span(pid, tid, li.kernel, *span, cat="launch", force=True,
                                 args={"launch": li.index, "tbs": li.grid})
        layer = sim.layer
        if "phases" in self.components and layer is not None and hasattr(layer, "plan"):
            for i, (phase, kernels) in enumerate(layer.plan.phases.items()):
                extra = layer.plan.mediation_extra_ps if phase == "mediation" else 0
                for g in self.gpus:
                    mine = [li.index for li in sim.launches if li.gpu == g and li.kernel in kernels
                            and ln[li.index].end >= 0]
                    if not mine:
                        continue
                    start = min(int(ln[k].start) for k in mine)
                    end = max(int(ln[k].end) for k in mine) + extra
                    span = self._clip(start, end)
                    if span is None:
                        continue
                    pid, tid = GPU_PID_BASE + g, PHASE_TID_BASE + i
                    self.writer.thread(pid, tid, f"phase {phase}")
                    self.writer.span(pid, tid, phase, *span, cat="phase", force=True,
                                     args={"kernels": list(kernels)})
