"""InfiniBand routing across rails (topology.py, `system.infiniband.routing`): static forwarding
tables - one output port per destination NIC at every IB switch, as OpenSM's fat-tree engine
(ftree: one spine per NIC, reached from every leaf) or its default Min Hop engine (each switch the
least-loaded equal-cost port, LIDs in order) assign them - against per-packet adaptive spreading,
on configs/systems/tiny_2x2.yaml (2 nodes x 2 GPUs, NIC i of each node on leaf i, 2 spines) and
hgx_h800_x4 (4 x 8 GPUs, 8 rails, 8 spines). Expected routes and bytes are worked out by hand from
the topology and the IB wire format (4096 B MTU, 42 B of headers per IB packet, a 30 B
acknowledgement per message)."""
from collections import Counter

import pytest

from conftest import CONFIGS, read_stats_json, run_cli
from internode_setup import TINY, puts_on_tiny


def _ib_routes(system, routing):
    """{(IB switch name, destination GPU): [names of the fabric nodes its candidates lead to]}."""
    from moehub_arch.config import load_config
    from moehub_arch.topology import NODE_NAMES, build_fabric, build_routes
    cfg = load_config(CONFIGS / "ubench/alltoall.yaml", [f"system.infiniband.routing={routing}"],
                      system_file=CONFIGS / system)
    fab = build_fabric(cfg)
    _, sw_routes, _ = build_routes(cfg, fab)
    G = cfg.system.num_gpus

    def name(s):
        kind, index = fab.nodes[s][:2]
        return f"{NODE_NAMES[kind]}{index}"

    out = {}
    for s, node in enumerate(fab.nodes):
        if NODE_NAMES[node[0]] in ("ibleaf", "ibspine"):
            for h in range(G):
                row = sw_routes[s * G + h]
                out[(name(s), h)] = [name(fab.channels[c]["dst"][1]) for c in row[2:2 + row[0]]]
    return out


@pytest.mark.parametrize("routing", ["ftree", "minhop"])
def test_static_routing_one_spine_per_destination_nic(routing):
    """2 x 2: NICs 0..3 (LIDs in NIC order: node 0's rails 0, 1, then node 1's). Leaf 0 reaches
    the rail-1 NICs (GPUs 1 and 3) over a spine. ftree: leaf 1's NICs in port order (node 0's,
    node 1's) take spines 0 and 1, and leaf 0 climbs to those; Min Hop: leaf 0 gives GPU 1 (the
    lower LID) the first of its two equally loaded spine ports, GPU 3 the other - the same here.
    Leaf 1 likewise GPUs 0 and 2; a spine has one port to each leaf. Adaptive keeps both spines
    as candidates."""
    static = _ib_routes(TINY, routing)
    assert static[("ibleaf0", 1)] == ["ibspine0"] and static[("ibleaf0", 3)] == ["ibspine1"]
    assert static[("ibleaf1", 0)] == ["ibspine0"] and static[("ibleaf1", 2)] == ["ibspine1"]
    assert static[("ibleaf0", 2)] == ["nic2"] and static[("ibspine1", 3)] == ["ibleaf1"]
    assert all(len(c) == 1 for c in static.values())
    adaptive = _ib_routes(TINY, "adaptive")
    cross_rail = {("ibleaf0", 1), ("ibleaf0", 3), ("ibleaf1", 0), ("ibleaf1", 2)}
    for key, cands in adaptive.items():
        assert cands == (["ibspine0", "ibspine1"] if key in cross_rail else static[key])


def test_ftree_reaches_each_nic_through_one_spine():
    """4 x 8 (hgx_h800_x4), ftree: leaf r' holds the rail-r' NICs of nodes 0..3 on its ports
    0..3, so node n's NICs take spine n (of 8; spines 4-7 carry nothing with 4 nodes) and every
    other leaf climbs to that spine: leaf r sends node n's 7 other-rail NICs up one port, and a
    spine's link down to leaf r' carries one NIC's traffic."""
    routes = _ib_routes("systems/hgx_h800_x4.yaml", "ftree")
    for h in range(32):
        spines = {routes[(f"ibleaf{r}", h)][0] for r in range(8) if r != h % 8}
        assert spines == {f"ibspine{h // 8}"}
        assert routes[(f"ibleaf{h % 8}", h)] == [f"nic{h}"]
        assert all(routes[(f"ibspine{k}", h)] == [f"ibleaf{h % 8}"] for k in range(8))


def test_minhop_spreads_a_leafs_destinations_over_the_spines():
    """4 x 8 (hgx_h800_x4), Min Hop: leaf r reaches the 28 NICs of the other 7 rails over its 8
    spine ports, handed out in LID order to the least-loaded port, so the spines carry 4, 4, 4, 4,
    3, 3, 3, 3 destinations (the first four one more), at every leaf; each leaf decides on its
    own, so GPU 9 (node 1, rail 1) is reached through spine 7 from leaf 0, spine 0 from leaf 2."""
    routes = _ib_routes("systems/hgx_h800_x4.yaml", "minhop")
    for r in range(8):
        up = {h: routes[(f"ibleaf{r}", h)][0] for h in range(32) if h % 8 != r}
        assert all(s.startswith("ibspine") for s in up.values())
        assert sorted(Counter(up.values()).values(), reverse=True) == [4] * 4 + [3] * 4
        assert all(routes[(f"ibleaf{r}", h)] == [f"nic{h}"] for h in range(r, 32, 8))
    # leaf 0's first destinations in LID order: GPUs 1..7 of node 0 on spines 0..6, GPU 9 on 7
    assert [routes[("ibleaf0", h)][0] for h in (1, 2, 7, 9, 10)] == \
        ["ibspine0", "ibspine1", "ibspine6", "ibspine7", "ibspine0"]
    assert routes[("ibleaf2", 9)] == ["ibspine0"]


@pytest.mark.parametrize("routing", ["ftree", "minhop", "adaptive"])
def test_a_cross_rail_put_follows_one_path(tmp_path, routing):
    """GPU 0 (rail 0) puts 64 KB to GPU 3 (node 1, rail 1): one RDMA write of 16 IB packets,
    16 x (4096 + 42) = 66208 wire bytes, and one 30 B acknowledgement back. Static (ftree and
Min Hop route the 2 x 2 alike): the write
    climbs leaf 0's port to spine 1 (GPU 3's spine) and comes down spine 1's port to leaf 1, all
    of it; the acknowledgement takes GPU 0's spine 0 the other way. Adaptive: the hub's 128 B
    packets alternate between the two spines (the IB headers counted with each MTU's first
    packet, all on spine 0). The same bytes reach GPU 3 either way."""
    cfg = puts_on_tiny(tmp_path, peer=3, blocks=1, chunk=65536)
    r = run_cli("run", cfg, "-o", tmp_path / "out", "--quiet", "--set",
                f"system.infiniband.routing={routing}")
    assert r.returncode == 0, r.stderr
    st = read_stats_json(tmp_path / "out")
    wire = {k: st.get(f"system.{k}.tx_wire_bytes", 0) for k in (
        "ibleaf0.port2", "ibleaf0.port3", "ibspine0.port1", "ibspine1.port1", "ibspine0.port0",
        "ibleaf1.port1")}
    if routing != "adaptive":
        assert wire == {"ibleaf0.port2": 0, "ibleaf0.port3": 66208, "ibspine0.port1": 0,
                        "ibspine1.port1": 66208, "ibspine0.port0": 30, "ibleaf1.port1": 66208}
    else:
        assert wire == {"ibleaf0.port2": 33440, "ibleaf0.port3": 32768, "ibspine0.port1": 33440,
                        "ibspine1.port1": 32768, "ibspine0.port0": 30, "ibleaf1.port1": 66208}
    assert st["system.gpu3.hub.rx_payload_bytes"] == 65536


def test_unknown_routing_exits_2(tmp_path):
    r = run_cli("run", "configs/ubench/alltoall.yaml", "--system", "configs/systems/tiny_2x2.yaml",
                "-o", tmp_path / "out", "--quiet", "--set", "system.infiniband.routing=ecmp")
    assert r.returncode == 2, r.stderr
    assert "system.infiniband.routing" in r.stderr and "adaptive" in r.stderr
    assert "Traceback" not in r.stderr
