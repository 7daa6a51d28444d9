"""The hub's choice of a link toward a GPU (components/hub.py pick_channel_vc) against the plain
round robin it replaced.

pick_channel_vc now steps its round-robin pointer by counting and checks a transmit FIFO's room in
place (issue 23: no division per candidate link, no call to link_room.txq_room). The driver sets
random occupancies on the transmit FIFOs of both virtual channels of a DGX H100's 18 links per GPU
(about half full), asks 1,000 times for links toward random GPUs with and without advancing the
pointer, and compares every answer and every pointer with the first implementation (REFERENCE: `%`
and txq_room), under the Numba and the pure-Python engine.
"""

import pytest

from conftest import REPO, drive_both_engines

DRIVER = r"""
import json, random, sys
sys.path.insert(0, {tests!r})
from conftest import load
from moehub_arch.simulation import Simulation
from moehub_arch.components.hub import pick_channel_vc
from moehub_arch.components.link_room import txq_room
from moehub_arch.engine.state import ROUTE_FIRST, ROUTE_N, ROUTE_RR

def reference(routes, st, g, dst, advance, vc, G):
    # the first implementation (main at 271a9a8), on a copy of the route table
    route = routes[g * G + dst]
    n = route[ROUTE_N]
    for k in range(n):
        c = route[ROUTE_FIRST + (route[ROUTE_RR] + k) % n]
        if txq_room(st, c, vc):
            if advance:
                route[ROUTE_RR] = (route[ROUTE_RR] + k + 1) % n
            return c
    return -1

st = Simulation(load("ubench/p2p_latency.yaml", "system.num_gpus=4")).state
G = 4
routes = st.gpu_routes.copy()
rng = random.Random(23)
mismatches, found, none, widths = [], 0, 0, set()
ch = st.ch
for step in range(1000):
    # room for a packet or not, about half the time in each virtual channel: channel c's draws
    # are the (2c)th and (2c + 1)th of the step, set field by field (a whole column at a time:
    # a record's attribute, one at a time, costs about ten times the draw)
    free = [rng.choice((0, 0, 1, 2)) for _ in range(2 * len(ch))]
    ch.txq_pkts[:] = ch.txq_cap - free[0::2]
    ch.rsq_pkts[:] = ch.rsq_cap - free[1::2]
    if rng.random() < 0.1:          # now and then no link has room
        ch.txq_pkts[:] = ch.txq_cap
    g = rng.randrange(G)
    dst = rng.choice([d for d in range(G) if d != g])
    advance = rng.random() < 0.7
    vc = rng.randrange(2)
    want = reference(routes, st, g, dst, advance, vc, G)
    got = int(pick_channel_vc(st, g, dst, advance, vc))
    widths.add(int(routes[g * G + dst][ROUTE_N]))
    found += got >= 0
    none += got < 0
    if got != want or list(st.gpu_routes[g * G + dst]) != list(routes[g * G + dst]):
        mismatches.append((step, got, want))
print(json.dumps(dict(mismatches=mismatches[:5], found=found, none=none, widths=sorted(widths),
                      routes_equal=st.gpu_routes.tolist() == routes.tolist())))
"""


@pytest.fixture(scope="module")
def both_engines():
    return drive_both_engines(DRIVER.format(tests=str(REPO / "tests")))


def test_pick_channel_matches_the_plain_round_robin(both_engines):
    numba, python = both_engines
    assert numba == python
    assert numba["mismatches"] == [] and numba["routes_equal"]
    # the runs chose links and found none; routes had several parallel links (1,000 steps: each
    # step's call of the compiled function from Python unpacks the whole State, about 7 ms)
    assert numba["found"] > 250 and numba["none"] > 25
    assert max(numba["widths"]) > 1
