"""The per-event work that used to grow with the number of GPUs (issue 23): bit sets over the
GPUs visited in round-robin order (engine/bitset.py: the RPM's streams with work, the link
responses a hub owes), the destinations a fabric channel serves (components/fabric.py), the
address bounds of a GPU's flag waiters (components/waiters.py) and the transmit FIFOs' head
packet kept in the channel record (components/nvlink.py). Each replaces a scan and must visit
the same things in the same order: the golden fingerprints (test_golden_stats.py, simEvents
included) pin the single-node cases; these tests pin the pieces and a multi-node run.
"""
import random

import numpy as np
import pytest

from conftest import CONFIGS


def _walk(row, base, n):
    from moehub_arch.engine.bitset import cyclic_next
    out, k = [], -1
    while True:
        k = cyclic_next(row, base, k + 1, n)
        if k >= n:
            return out
        out.append((base + k) % n)


@pytest.mark.parametrize("n", [1, 2, 5, 31, 32, 33, 64, 65, 100])
def test_bit_set_walk_is_the_round_robin_scan(n):
    """Visiting the set bits with cyclic_next from every start gives exactly the indices a scan
    of all n from that start would find set, in the scan's order (words of 32 bits: 33, 64, 65
    and 100 cross words)."""
    from moehub_arch.engine.bitset import bit_clear, bit_set, first_set, words_for
    rng = random.Random(n)
    for density in (0.0, 0.1, 0.5, 1.0):
        row = np.zeros(words_for(n), np.int64)
        members = set()
        for i in range(n):
            if rng.random() < density:
                bit_set(row, i)
                members.add(i)
        # clearing a member and setting it again leaves the set as it was
        for i in list(members)[:3]:
            bit_clear(row, i)
            bit_set(row, i)
        for base in range(n):
            assert _walk(row, base, n) == [(base + k) % n for k in range(n) if (base + k) % n in members]
        assert first_set(row, 0, n) == (min(members) if members else -1)
        assert (row >= 0).all() and (row < 2 ** 32).all()   # the sign bit is never used


def test_fabric_destinations_are_the_routes_through_each_channel():
    """Each channel between two forwarding nodes lists, in GPU order, exactly the destinations
    whose routes from the node it leaves include it (what fabric_output_freed used to find by
    scanning every destination's routes); one-node systems keep a placeholder."""
    from conftest import load
    from moehub_arch.simulation import Simulation
    from moehub_arch.config import load_config
    cfg = load_config(CONFIGS / "examples/put_get_exchange.yaml", [],
                      system_file=CONFIGS / "systems/tiny_2x2.yaml")
    st = Simulation(cfg).state
    G = int(st.p[0].num_gpus)
    between = 0
    for c in range(st.ch.shape[0]):
        s = int(st.ch[c].src_switch)
        if not st.ch[c].to_switch or s < 0:
            continue
        between += 1
        want = [h for h in range(G)
                if c in st.sw_routes[s * G + h, 2:2 + st.sw_routes[s * G + h, 0]].tolist()]
        row = st.fabric_dests[c]
        assert row[1:1 + row[0]].tolist() == want
    assert between > 0
    assert Simulation(load("examples/put_get_exchange.yaml")).state.fabric_dests.shape == (1, 1)

