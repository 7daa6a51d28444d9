"""The L2 with capacity (components/l2.py): mma operand regions are resident or not, the least
recently used evicted to fit system.gpu.l2.capacity; a marked read of a resident region hits (the
L2 read port serves it), any other is read from HBM and filled.

The exact byte counts below are on a 4 KiB L2 with 1 KiB operand regions, driving the L2 model
directly (the same calls an mma makes) in both engines.
"""

import pytest

from conftest import REPO, drive_both_engines, run_cli

SYSTEM = ["system.num_gpus=2", "system.gpu.num_sms=2", "system.gpu.l2.capacity=4KiB",
          "system.gpu.l2.tracked_regions=8"]
KIB = 1024

# Runs in a fresh interpreter (NUMBA_DISABLE_JIT decides the engine when the package is imported).
DRIVER = r"""
import json, sys
sys.path.insert(0, {tests!r})
from conftest import load
from moehub_arch.simulation import Simulation
from moehub_arch.components.l2 import l2_operand_read_span


def l2_operand_read(st, g, addr, nbytes, tick, pace_ticks, marked):
    return l2_operand_read_span(st, g, addr, nbytes, nbytes, tick, pace_ticks, marked)   # dense

KIB = 1024

def fresh():
    return Simulation(load("ubench/p2p_latency.yaml", *{system!r})).state

def counters(st):
    g = st.gpu[0]
    return dict(hit=int(g.l2_hit_bytes), miss=int(g.l2_miss_bytes), evicted=int(g.l2_evicted_bytes),
                served=int(g.l2_read_bytes), hbm_read=int(g.hbm_read_bytes),
                resident=int(g.l2_resident_bytes), regions=int(g.l2_regions))

def passes(regions, marked_first=True):
    st = fresh()
    t = 0
    for p in range(2):
        for r in range(regions):
            t = l2_operand_read(st, 0, (1 << 20) + r * KIB, KIB, t, 0, marked_first or p > 0)
    return counters(st)

out = dict(small=passes(3), large=passes(5), cold_then_marked=passes(3, marked_first=False))
st = fresh()
l2_operand_read(st, 0, 1 << 20, 8 * KIB, 0, 0, True)          # larger than the L2: never filled
l2_operand_read(st, 0, 1 << 20, 8 * KIB, 0, 0, True)
out["too_large"] = counters(st)
st = fresh()
l2_operand_read(st, 0, 1 << 20, 2 * KIB, 0, 0, False)          # a cold 2 KiB read fills
l2_operand_read(st, 0, (1 << 20) + KIB, KIB, 0, 0, True)        # its second half: inside, a hit
l2_operand_read(st, 0, (1 << 20) + KIB, 2 * KIB, 0, 0, True)    # overlapping it: a miss, replaces it
l2_operand_read(st, 0, 1 << 20, KIB, 0, 0, True)                # the first half is gone
out["overlap"] = counters(st)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def both_engines():
    return drive_both_engines(DRIVER.format(tests=str(REPO / "tests"), system=SYSTEM))


def test_a_working_set_smaller_than_the_l2_hits_on_its_second_pass(both_engines):
    numba, python = both_engines
    assert numba == python
    # 3 KiB in a 4 KiB L2: the first pass misses (HBM reads, filled), the second hits
    assert numba["small"] == dict(hit=3 * KIB, miss=3 * KIB, evicted=0, served=3 * KIB,
                                  hbm_read=3 * KIB, resident=3 * KIB, regions=3)


def test_a_working_set_larger_than_the_l2_misses_every_time(both_engines):
    numba, python = both_engines
    # 5 KiB in a 4 KiB L2 read in order twice: LRU evicts each region just before it is read
    # again, so all ten reads miss (the textbook LRU loop), six regions evicted
    assert numba["large"] == dict(hit=0, miss=10 * KIB, evicted=6 * KIB, served=0,
                                  hbm_read=10 * KIB, resident=4 * KIB, regions=4)


def test_cold_reads_fill_the_l2_for_the_marked_reads_after_them(both_engines):
    numba, _ = both_engines
    # unmarked (the kernel's first touch): read from HBM, not counted as misses, but filled
    assert numba["cold_then_marked"] == dict(hit=3 * KIB, miss=0, evicted=0, served=3 * KIB,
                                             hbm_read=3 * KIB, resident=3 * KIB, regions=3)


def test_regions_larger_than_the_l2_and_overlapping_ranges(both_engines):
    numba, _ = both_engines
    assert numba["too_large"] == dict(hit=0, miss=16 * KIB, evicted=0, served=0,
                                      hbm_read=16 * KIB, resident=0, regions=0)
    # a range inside a resident region hits; one overlapping it misses and replaces it (the
    # overlapped bytes are not evictions), so the first half misses afterwards
    assert numba["overlap"] == dict(hit=KIB, miss=3 * KIB, evicted=0, served=KIB,
                                    hbm_read=5 * KIB, resident=3 * KIB, regions=2)


def test_stats_list_names_the_l2_hit_and_miss_stats():
    r = run_cli("stats", "--list", "configs/ubench/grouped_gemm.yaml", "system.gpu0.l2.*")
    assert r.returncode == 0, r.stderr
    for name in ("hit_bytes", "miss_bytes", "evicted_bytes"):
        assert f"system.gpu0.l2.{name}" in r.stdout
