"""The paced-arbitration calendar (components/hbm.py) against its first, plain implementation.

The calendar was made cheaper (issue 23: the window walk inlined, a mask for the ring row, the
horizon and a stream's whole-window pace computed once, a write-only column dropped, the long
access's per-channel modulos replaced by counters). REFERENCE below is the pre-change code
transcribed to plain Python on its own arrays (5 calendar columns, as it had); the driver feeds
the same random accesses (whole and paced, short and long, on HBM channels and the L2 read port,
with the current tick advancing so that ring rows are reused and work runs past the horizon) to
both and records every end tick, the channel queues and busy time, the beyond-horizon counter and
the calendar's work columns. They must be identical, under the Numba and the pure-Python engine.
"""

import pytest

from conftest import REPO, drive_both_engines

# 4 channels, 1 ns windows (the 1024-window ring is a 1 us horizon), 64 B interleave, 1 B/ps per
# channel: small numbers so that random accesses saturate windows, cross the horizon and reuse rows
SYSTEM = ["system.gpu.hbm.queue_depth=8", "system.gpu.hbm.channels=4", "system.gpu.hbm.bandwidth=4TB/s",
          "system.gpu.hbm.interleave_bytes=64B", "system.gpu.hbm.arbitration_window=1ns",
          "system.num_gpus=2", "system.gpu.num_sms=2"]

REFERENCE = r'''
class Reference:
    """components/hbm.py's calendar before issue 23 (the 271a9a8 code), on its own arrays."""
    TAG, PACED, WHOLE, STREAMS, NEXT = 0, 1, 2, 3, 4

    def __init__(self, st):
        p = st.p[0]
        self.C, self.Q, self.fs = int(p.hbm_channels), int(p.hbm_interleave), int(p.hbm_fs_per_byte_channel)
        self.W, self.min_access = int(p.mem_window_ticks), int(p.hbm_min_access)
        self.queue_ticks, self.l2_queue_ticks = int(p.hbm_queue_ticks), int(p.l2_queue_ticks)
        self.l2_fs = int(p.l2_fs_per_byte)
        self.G = int(p.num_gpus)
        nsrv, nw = st.mem_cal.shape[0], st.mem_cal.shape[1]
        self.cal = [[[-1, 0, 0, 0, 0] for _ in range(nw)] for _ in range(nsrv)]
        self.free = [0] * (self.G * self.C)
        self.busy = [0] * (self.G * self.C)
        self.l2_free = [0] * self.G
        self.beyond = [0] * self.G
        self.q_now = 0
        self.skip_links = 0             # skip links set (the test checks the path ran)

    def window(self, srv, i):
        nw = len(self.cal[srv])
        if i >= self.q_now // self.W + nw:
            return -1
        r = self.cal[srv][i % nw]
        if r[self.TAG] != i:
            if r[self.TAG] > i:
                return -1
            r[:] = [i, 0, 0, 0, 0]
        return i % nw

    def whole(self, g, srv, free, busy, tick, queue_ticks):
        W, cal = self.W, self.cal[srv]
        start = max(free, tick)
        limit = start + busy + queue_ticks
        t, rem = start, busy
        while rem > 0:
            i = t // W
            row = self.window(srv, i)
            if row < 0:
                self.beyond[g] += rem
                return t + rem
            w_end = (i + 1) * W
            stop = min(w_end, limit)
            left = W - cal[row][self.PACED]
            end, got = -1, 0
            if left > 0 and t + (rem * W + left - 1) // left <= stop:
                got, end = rem, t + (rem * W + left - 1) // left
            elif stop == limit:
                got, end = rem, limit
            elif left > 0:
                got = (w_end - t) * left // W
            used = cal[row][self.WHOLE] + got
            over = used + cal[row][self.PACED] - W
            if over > 0:
                used -= over
                nxt = self.window(srv, i + 1)
                if nxt >= 0:
                    cal[nxt][self.WHOLE] += over
                else:
                    self.beyond[g] += over
            cal[row][self.WHOLE] = used
            if end >= 0:
                return end
            rem -= got
            t = w_end
        return t

    def paced(self, g, srv, busy, tick, pace_ticks):
        W, cal = self.W, self.cal[srv]
        t, rem, first_full = tick, busy, -1
        while True:
            i = t // W
            row = self.window(srv, i)
            if row < 0:
                self.beyond[g] += rem
                return t + (rem * pace_ticks + busy - 1) // busy
            w_end = (i + 1) * W
            room = W - cal[row][self.PACED] - cal[row][self.WHOLE]
            if room <= 0:
                if first_full < 0:
                    first_full = row
                nxt = cal[row][self.NEXT]
                t = nxt * W if nxt > i else w_end
                continue
            if first_full >= 0:
                cal[first_full][self.NEXT] = i
                self.skip_links += 1
                first_full = -1
            cap = ((w_end - t) * busy + pace_ticks - 1) // pace_ticks
            cal[row][self.STREAMS] += 1
            if rem <= cap and rem <= room:
                cal[row][self.PACED] += rem
                end = t + (rem * pace_ticks + busy - 1) // busy
                return min(end, w_end)
            take = min(cap, room)
            cal[row][self.PACED] += take
            rem -= take
            t = w_end

    def channel(self, g, c, busy, tick, pace_ticks):
        self.busy[c] += busy
        if pace_ticks > busy:
            return -self.paced(g, c, busy, tick, pace_ticks)
        end = self.whole(g, c, self.free[c], busy, tick, self.queue_ticks)
        self.free[c] = max(self.free[c], tick) + busy
        return end

    def transfer(self, g, addr, nbytes, tick, pace_ticks):
        C, Q = self.C, self.Q
        n = max(nbytes, self.min_access)
        last_done = tick
        fg, lg = addr // Q, (addr + n - 1) // Q
        ng = lg - fg + 1
        short = ng <= C
        head, tail, inner = Q - addr % Q, (addr + n) - lg * Q, ng - 2
        for j in range(ng if short else C):
            if short:
                gi = fg + j
                k = gi % C
                ch_bytes = min((gi + 1) * Q, addr + n) - max(gi * Q, addr)
            else:
                k = j
                ch_bytes = (inner // C) * Q
                if (k - (fg + 1)) % C < inner % C:
                    ch_bytes += Q
                if fg % C == k:
                    ch_bytes += head
                if lg % C == k:
                    ch_bytes += tail
                if ch_bytes == 0:
                    continue
            done = self.channel(g, g * C + k, (ch_bytes * self.fs + 999) // 1000, tick, pace_ticks)
            last_done = max(last_done, abs(done))
        return last_done

    def l2_port(self, g, nbytes, tick, pace_ticks):
        busy = (nbytes * self.l2_fs + 999) // 1000
        srv = self.G * self.C + g
        if pace_ticks > busy:
            return self.paced(g, srv, busy, tick, pace_ticks)
        end = self.whole(g, srv, self.l2_free[g], busy, tick, self.l2_queue_ticks)
        self.l2_free[g] = max(self.l2_free[g], tick) + busy
        return end
'''

DRIVER = r"""
import json, random, sys
sys.path.insert(0, {tests!r})
from conftest import load
from moehub_arch.simulation import Simulation
from moehub_arch.components.hbm import _transfer
from moehub_arch.components.l2 import l2_port_transfer
{reference}
st = Simulation(load("ubench/p2p_latency.yaml", *{system!r})).state
ref = Reference(st)
rng = random.Random(23)
mismatches, ends, tick = [], [], 0
for step in range({accesses}):
    tick += rng.choice((0, 0, 50, 300, 2000))          # bursts at one tick, and time moving on
    if rng.random() < 0.02:
        tick += rng.randrange(200000, 900000)           # jumps that make rows of the ring reused
    # the current tick is at most the issue tick (the run loop pops events in time order;
    # accesses may be issued for a later tick, as an instruction's write-back is)
    q_now = tick - rng.choice((0, 0, 700))
    st.sys[0].q_now = max(q_now, 0)
    ref.q_now = max(q_now, 0)
    g = rng.randrange(2)
    addr = rng.randrange(0, 1 << 20)
    nbytes = rng.choice((8, 32, 100, 256, 1000, 4096, 20000, 300000))
    pace = rng.choice((0, 0, nbytes * 60, nbytes * 400, nbytes * 3000))
    if rng.random() < 0.15:
        got = int(l2_port_transfer(st, g, nbytes, tick, pace))
        want = ref.l2_port(g, nbytes, tick, pace)
    else:
        got = int(_transfer(st, g, addr, nbytes, tick, False, pace))
        want = ref.transfer(g, addr, nbytes, tick, pace)
    ends.append(got)
    if got != want:
        mismatches.append((step, got, want))
cal = [[[int(st.mem_cal[s, r, c]) for c in (0, 1, 2, 3)] for r in range(st.mem_cal.shape[1])]
       for s in range(st.mem_cal.shape[0])]
ref_cal = [[[r[0], r[1], r[2], r[4]] for r in rows] for rows in ref.cal]
print(json.dumps(dict(
    mismatches=mismatches[:5], ends=ends,
    calendar_equal=cal == ref_cal,
    free_equal=[int(c.free) for c in st.hbm_chan] == ref.free,
    busy_equal=[int(c.busy) for c in st.hbm_chan] == ref.busy,
    l2_free_equal=[int(g.l2_free) for g in st.gpu] == ref.l2_free,
    beyond=[int(g.mem_beyond_calendar) for g in st.gpu], ref_beyond=ref.beyond,
    skip_links=ref.skip_links,
    paced=sum(int(g.hbm_paced_accesses) for g in st.gpu))))
"""

ACCESSES = 3000


@pytest.fixture(scope="module")
def both_engines():
    return drive_both_engines(DRIVER.format(tests=str(REPO / "tests"), system=SYSTEM,
                                            reference=REFERENCE, accesses=ACCESSES))


def test_the_calendar_matches_its_reference_on_random_accesses(both_engines):
    for run in both_engines:
        assert run["mismatches"] == []
        assert run["calendar_equal"] and run["free_equal"] and run["busy_equal"]
        assert run["l2_free_equal"]
        assert run["beyond"] == run["ref_beyond"]


def test_the_random_accesses_exercise_every_path(both_engines):
    numba, python = both_engines
    assert numba == python
    # streams were paced, windows filled up (skip links were set) and work ran past the horizon
    assert numba["paced"] > 100
    assert numba["skip_links"] > 10
    assert all(b > 0 for b in numba["beyond"])
