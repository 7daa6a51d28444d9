"""Memory arbitration (components/hbm.py, system.gpu.hbm.arbitration): an SM instruction's bulk
traffic is paced over the instruction's duration, and a small access issued after it is served
with the bandwidth the stream leaves instead of waiting for the whole stream (fifo); a small
access waits behind other whole accesses for their bytes only (the queue drain is latency).

The exact ticks below follow from one channel of 1 byte per ps (1 TB/s) and 1 ns windows:
a paced read of 4000 B over 10 ns takes 400 ps of each window (its pace); a 256 B write at
100 ps gets the 600 ps per window left, so it lasts ceil(256 * 1000 / 600) = 427 ps.
"""

import pytest

from conftest import REPO, drive_both_engines

SYSTEM = ["system.gpu.hbm.queue_depth=64", "system.gpu.hbm.channels=1", "system.gpu.hbm.bandwidth=1TB/s",
          "system.gpu.hbm.arbitration_window=1ns", "system.num_gpus=2", "system.gpu.num_sms=2"]

# Runs in a fresh interpreter (NUMBA_DISABLE_JIT decides the engine when the package is imported):
# builds the tiny system, drives the HBM model directly, prints the ticks and byte counters.
DRIVER = r"""
import json, sys
sys.path.insert(0, {tests!r})
from conftest import load
from moehub_arch.simulation import Simulation
from moehub_arch.components.hbm import _transfer, hbm_transfer

def fresh(arbitration):
    return Simulation(load("ubench/p2p_latency.yaml", *{system!r},
                           f"system.gpu.hbm.arbitration={{arbitration}}")).state

out = {{}}
for arb in ("paced", "fifo"):
    st = fresh(arb)
    read = _transfer(st, 0, 0, 4000, 0, False, 10000)      # 4000 B paced over 10 ns
    write = hbm_transfer(st, 0, 8192, 256, 100, True)       # a 256 B write 100 ps later
    out[arb] = dict(read=int(read), write=int(write))
# saturation: three streams of 40% each oversubscribe the channel; a write gets a fair share
st = fresh("paced")
ends = [int(_transfer(st, 0, 0, 4000, 0, False, 10000)) for _ in range(3)]
write = int(hbm_transfer(st, 0, 8192, 256, 100, True))
g = st.gpu[0]
out["saturated"] = dict(ends=ends, write=write, read_bytes=int(g.hbm_read_bytes),
                        write_bytes=int(g.hbm_write_bytes), busy=int(st.hbm_chan[0].busy),
                        paced=int(g.hbm_paced_accesses))
# a burst of four writes while the streams saturate the channel: each waits one queue drain
# behind the streams, but behind the other writes only for their bytes
st = fresh("paced")
for _ in range(3):
    _transfer(st, 0, 0, 4000, 0, False, 10000)
burst = [int(hbm_transfer(st, 0, 8192 + 256 * k, 256, 100, True)) for k in range(4)]
g = st.gpu[0]
out["burst"] = dict(ends=burst, free=int(st.hbm_chan[0].free), write_bytes=int(g.hbm_write_bytes),
                    busy=int(st.hbm_chan[0].busy),
                    calendar=int(st.mem_cal[0, :, 1].sum() + st.mem_cal[0, :, 2].sum()))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def both_engines():
    return drive_both_engines(DRIVER.format(tests=str(REPO / "tests"), system=SYSTEM))


def test_a_small_write_after_a_paced_read_uses_the_bandwidth_left(both_engines):
    numba, python = both_engines
    assert numba == python
    # paced: the read streams over its 10 ns; the write waits for no part of it
    assert numba["paced"] == {"read": 10000, "write": 100 + 427}
    # fifo (the first model): the read is served whole at once, the write queues behind it
    assert numba["fifo"] == {"read": 4000, "write": 4000 + 256}


def test_oversubscribed_streams_spill_and_a_write_waits_one_queue_drain(both_engines):
    numba, python = both_engines
    assert numba == python
    sat = numba["saturated"]
    # windows 0-9: two streams take 400 ps each, the third the 200 ps left; its remaining
    # 2000 ps take 400 ps of windows 10-14 (its pace), so it ends at 15 ns
    assert sat["ends"] == [10000, 10000, 15000]
    # windows 0-9 are full: the write waits for a full controller queue (64 requests of 32 B,
    # 2048 ps at 1 B/ps) and its own 256 ps, not for the streams' 15 ns
    assert sat["write"] == 100 + 2048 + 256
    # bytes and channel work are conserved exactly
    assert sat["read_bytes"] == 3 * 4000 and sat["write_bytes"] == 256
    assert sat["busy"] == 3 * 4000 + 256 and sat["paced"] == 3


def test_queued_whole_accesses_wait_behind_each_others_bytes_not_their_waits(both_engines):
    numba, python = both_engines
    assert numba == python
    burst = numba["burst"]
    # write k starts after the k writes ahead of it have moved their 256 B (the queue of whole
    # accesses advances by bytes only) and waits one controller-queue drain (2048 ps) for the
    # stream requests already queued; before, each write waited behind the previous one's whole
    # bounded time: 100 + (k + 1) * (2048 + 256)
    assert burst["ends"] == [100 + 256 * k + 2048 + 256 for k in range(4)]
    assert burst["free"] == 100 + 4 * 256
    # the channel work is conserved: in the busy counter and in the calendar (streams + writes)
    assert burst["write_bytes"] == 4 * 256
    assert burst["busy"] == 3 * 4000 + 4 * 256
    assert burst["calendar"] == 3 * 4000 + 4 * 256
