"""Counters sampled from State at a simulated instant: link utilisation, hub queue and window
occupancy, SM occupancy, switch port queues.

Occupancies are the exact values at the sampled tick (the run pauses there). Link utilisation is
the exact busy fraction of each transmitter since the previous sample: ``tx_busy`` counts a
packet's whole serialisation when it starts, so the part still ahead of the sample instant
(``busy_until - tick``) is taken off.
"""
import numpy as np

from ..engine.state import TB_EMPTY, TB_READY

GPU_PID_BASE = 1        # process ids in the trace: GPU g -> 1 + g, switch s -> SWITCH_PID_BASE + s
SWITCH_PID_BASE = 1001


def link_util_name(link, direction):
    return f"nvlink{link} {direction} util %"


HUB_COUNTERS = ("hub request queue", "hub response queue", "hub requests in flight",
                "rpm unsent bytes", "rpm rows in flight", "aau waiting packets", "aau window rows",
                "aau records live", "dam tiles ready unclaimed")


class CounterSampler:
    """Samples the counters of the selected GPUs (and their links' switch ports). `keys` lists
    (process id, counter name) in the order of the values `sample` returns."""

    def __init__(self, st, gpus, components):
        p = st.p[0]
        self.G, self.S, self.T, self.L = (int(p.num_gpus), int(p.sms_per_gpu),
                                          int(p.slots_per_sm), int(p.links_per_gpu))
        self.gpus = np.array(sorted(gpus), np.int64)
        self.components = set(components)
        self.up = np.array([2 * (g * self.L + l) for g in self.gpus for l in range(self.L)], np.int64)
        self.down = self.up + 1
        self.prev_tick = 0
        self.prev_busy = np.zeros(2 * len(self.up))
        keys = []
        if "nvlink" in self.components:
            for g in self.gpus:
                keys += [(GPU_PID_BASE + int(g), link_util_name(l, d))
                         for l in range(self.L) for d in ("tx", "rx")]
        if "sm" in self.components:
            for g in self.gpus:
                keys += [(GPU_PID_BASE + int(g), "TBs resident"), (GPU_PID_BASE + int(g), "TBs waiting")]
        if "hub" in self.components:
            for g in self.gpus:
                keys += [(GPU_PID_BASE + int(g), name) for name in HUB_COUNTERS]
        if "switch" in self.components:
            for c in self.up.tolist():
                pid, port = SWITCH_PID_BASE + int(st.ch.switch[c]), int(st.ch.port[c])
                keys += [(pid, f"port{port} input queue"), (pid, f"port{port} output queue")]
        self.keys = keys

    def sample(self, st, tick):
        """Values of `keys` at `tick` (the state must be exactly that of `tick`)."""
        parts = []
        if "nvlink" in self.components:
            ch = st.ch
            chans = np.stack([self.up, self.down], axis=1).ravel()   # tx, rx of each link
            busy = ch.tx_busy[chans] - np.clip(ch.busy_until[chans] - tick, 0, None)
            dt = tick - self.prev_tick
            parts.append((busy - self.prev_busy) * 100.0 / dt if dt > 0 else np.zeros(len(chans)))
            self.prev_busy = busy
        self.prev_tick = tick
        if "sm" in self.components:
            state = st.tb.state.reshape(self.G, self.S * self.T)[self.gpus]
            resident = (state != TB_EMPTY)
            waiting = resident & (state != TB_READY)
            parts.append(np.stack([resident.sum(axis=1), waiting.sum(axis=1)], axis=1).ravel())
        if "hub" in self.components:
            parts.append(np.array([v for g in self.gpus.tolist() for v in self._hub(st, g)]))
        if "switch" in self.components:
            ch = st.ch
            parts.append(np.stack([ch.rxq_count[self.up], ch.txq_count[self.down]], axis=1).ravel())
        if not parts:
            return np.zeros(0)
        return np.round(np.concatenate(parts).astype(np.float64), 3)

    def _hub(self, st, g):
        """HUB_COUNTERS of GPU g."""
        p, gp = st.p[0], st.gpu[g]
        G, LE = self.G, int(p.local_experts)
        streams = st.stream[g * G:(g + 1) * G]
        win = st.win[g * LE:(g + 1) * LE]
        window_rows = int((win.alloc - win.released_tiles * p.tile_rows).sum()) if p.num_experts else 0
        return (gp.reqq_count, gp.respq_count, p.reqs_per_gpu - gp.free_top,
                int((streams.accepted - streams.sent).sum()), int((streams.head - streams.tail).sum()),
                gp.aau_q_count, window_rows, gp.records_live, gp.dam_tiles_ready - gp.dam_claims)
