"""MoE-Hub across nodes deduplicated per node (system.gpu.hub.moe.internode: per_node;
moehub_arch/components/moehub/forward.py, the moehub_dispatch[_rowsp]_pernode kernels): a token row
crosses InfiniBand once per other node holding any of its experts, to the forwarding hub with the
sender's local rank there, which fans it out over NVLink. The layer output is the NumPy reference's
exactly (2 x 2 and 2 x 4 GPUs, both store kinds, the published hub design); on a hand-written
routing the forwarders' row counts, every NIC's InfiniBand payload and its RDMA work requests are
the hand counts (one row per (token, other node) instead of one per (token, expert there)); both
engines agree; bad combinations exit 2 naming the key."""
import math

import numpy as np
import pytest

from conftest import CONFIGS, cli_stats_per_engine, run_cli

TINY_2X2 = "experiments/hiermoe/functional_tiny_2x2.yaml"
TINY_2X4 = "experiments/hiermoe/functional_tiny_2x4.yaml"
PER_NODE = "system.gpu.hub.moe.internode=per_node"
ROWSP = "workload.layer.moehub.stores=row_sparse"
# configs/hub/designs/published.yaml as overrides (the layer tables' hub design)
PUBLISHED = ["system.gpu.hub.moe.rpm.schedule=paper", "system.gpu.hub.moe.aau.overflow=spill",
             "system.gpu.hub.moe.aau.record_table_entries=1024",
             "system.gpu.hub.moe.dam.consumers=launch", ROWSP]
ROW = 128          # tiny_functional: hidden 64, bf16 rows
MTU = 4096         # configs/systems/fabrics/ndr400_rail.yaml: ib.mtu_bytes


def _simulate(config, *extra):
    from moehub_arch.config import load_config
    from moehub_arch.simulation import Simulation
    sim = Simulation(load_config(CONFIGS / config, ["scheme=moehub", *extra]))
    sim.run()
    return sim


def _node_rows(topk, G, gpn, E):
    """Per GPU: (token, expert) pairs on other nodes, (token, other node) rows, and per other
    GPU d the pairs for d - counted from the routing."""
    epg = E // G
    pairs, rows, to_gpu = [0] * G, [0] * G, np.zeros((G, G), np.int64)
    for g in range(G):
        for experts in topk[g]:
            nodes = set()
            for e in experts:
                d = int(e) // epg
                to_gpu[g, d] += 1
                if d // gpn != g // gpn:
                    pairs[g] += 1
                    nodes.add(d // gpn)
            rows[g] += len(nodes)
    return pairs, rows, to_gpu


@pytest.mark.parametrize("config, extra", [
    (TINY_2X2, ()),
    (TINY_2X2, (ROWSP,)),
    (TINY_2X2, tuple(PUBLISHED)),
    (TINY_2X4, tuple(PUBLISHED)),
])
def test_layer_is_exact_and_rows_cross_once_per_node(config, extra):
    sim = _simulate(config, PER_NODE, *extra)
    s, shape = sim.stats, sim.layer.shape
    assert s["system.moe.output_max_abs_error"] == 0.0
    G = shape.num_gpus
    gpn = sim.cfg.system.nodes.gpus_per_node
    pairs, rows, _ = _node_rows(sim.layer.routing.topk_idx, G, gpn, shape.experts)
    # GPU g's rows for the other node reach the GPU with its local rank there (2 nodes: g +- gpn)
    for g in range(G):
        peer = (g + gpn) % G
        assert s[f"system.gpu{g}.hub.forward.rows_received"] == rows[peer]
        assert s[f"system.gpu{g}.hub.forward.copies_received"] == pairs[peer]
        assert s[f"system.gpu{g}.hub.forward.copies_forwarded"] == pairs[peer]
    # every token-expert pair still lands once, with its record; nothing is left waiting
    assert sum(s[f"system.gpu{g}.hub.aau.records_written"] for g in range(G)) == G * shape.pairs
    from moehub_arch.components.moehub.forward import forward_findings
    assert forward_findings(sim) == []


def _hand_routing(G, T, E, k):
    """Token t of GPU g: experts (3g + t) mod E, (5t + 1) mod E, ... (distinct): a routing whose
    tokens reach one or both nodes with one or two experts on each."""
    topk = np.zeros((G, T, k), np.int64)
    for g in range(G):
        for t in range(T):
            chosen = []
            e = (3 * g + t) % E
            step = 5 * t + 1
            while len(chosen) < k:
                if e not in chosen:
                    chosen.append(e)
                e = (e + step) % E
                step = step % E or 1
            topk[g, t] = chosen
    return topk


def test_hand_routing_ib_bytes_and_work_requests(tmp_path):
    """The same hand-written routing with one stream per expert GPU and per node: each NIC puts
    (pairs - rows) x 128 B less payload on InfiniBand, and its RDMA work requests drop from one
    per MTU of each other-node GPU's stream to one per MTU of the forwarder's (each stream's
    end-of-stream marker is a message of its own, sent in both designs); everything else (the
    combine's puts, the flags) is the same."""
    G, T, E, k, gpn = 4, 64, 8, 2, 2
    topk = _hand_routing(G, T, E, k)
    trace = tmp_path / "hand.npy"
    np.save(trace, topk)
    base = [ROWSP, "workload.layer.tokens_per_gpu=64", "workload.layer.routing.kind=trace",
            f"workload.layer.routing.trace={trace}"]
    expert = _simulate(TINY_2X2, *base).stats
    node = _simulate(TINY_2X2, PER_NODE, *base).stats
    assert expert["system.moe.output_max_abs_error"] == node["system.moe.output_max_abs_error"] == 0
    pairs, rows, to_gpu = _node_rows(topk, G, gpn, E)
    assert sum(pairs) - sum(rows) > 0
    for g in range(G):
        # a row-sparse store's 128 B row is one packet: stream offsets stay 128 B aligned
        others = [d for d in range(G) if d // gpn != g // gpn]
        wr_expert = sum(math.ceil(ROW * to_gpu[g, d] / MTU) for d in others)
        wr_node = math.ceil(ROW * rows[g] / MTU)
        assert (expert[f"system.nic{g}.rdma_payload_bytes"] - node[f"system.nic{g}.rdma_payload_bytes"]
                == (pairs[g] - rows[g]) * ROW)
        assert (expert[f"system.nic{g}.work_requests"] - node[f"system.nic{g}.work_requests"]
                == wr_expert - wr_node)


def test_engines_agree(tmp_path):
    args = ["--set", "scheme=moehub", "--set", PER_NODE, "--set", "workload.layer.tokens_per_gpu=16"]
    for o in PUBLISHED:
        args += ["--set", o]
    stats = cli_stats_per_engine(f"configs/{TINY_2X2}", tmp_path, *args)
    assert stats["python"] == stats["numba"]
    assert stats["numba"]["system.moe.output_max_abs_error"] == 0.0
    assert sum(stats["numba"][f"system.gpu{g}.hub.forward.rows_received"] for g in range(4)) > 0


def test_per_expert_keeps_its_stats_free_of_forwarding():
    """The default design shows no forwarding stats and sends no rows through a forwarder."""
    s = _simulate(TINY_2X2).stats
    assert s["system.moe.output_max_abs_error"] == 0.0
    assert not any(".hub.forward." in st.name for st in s)


@pytest.mark.parametrize("config, sets, key", [
    ("configs/experiments/functional.yaml", [PER_NODE], "system.gpu.hub.moe.internode"),
    (f"configs/{TINY_2X2}", [PER_NODE, "workload.moe.placement=[0,0,1,1,2,2,3,3]",
                             "scheme=none"], "workload.moe.placement"),
    (f"configs/{TINY_2X2}", [PER_NODE, "scheme=moehub", ROWSP,
                             "workload.layer.moehub.nop_choices=1"],
     "workload.layer.moehub.nop_choices"),
])
def test_bad_combinations_exit_2_naming_the_key(config, sets, key):
    args = ["run", config]
    for s in sets:
        args += ["--set", s]
    r = run_cli(*args)
    assert r.returncode == 2, r.stderr
    assert key in r.stderr and "Traceback" not in r.stderr


def test_forwarded_rows_share_a_stream_with_the_forwarders_own(tmp_path):
    """Every GPU routes token t alike, so the forwarder's own store of (allocation id e, row
    t * k + j) and a rail peer's row with the same id and row, forwarded, travel in one stream:
    they are different rows (ids and rows name the origin's allocations), neither refused as a
    second store of one row nor kept in order as one under the paper's RPM order."""
    G, T, E, k = 4, 64, 8, 2
    topk = np.repeat(_hand_routing(1, T, E, k), G, axis=0)
    trace = tmp_path / "alike.npy"
    np.save(trace, topk)
    sim = _simulate(TINY_2X2, PER_NODE, *PUBLISHED, "workload.layer.tokens_per_gpu=64",
                    "workload.layer.routing.kind=trace", f"workload.layer.routing.trace={trace}")
    s = sim.stats
    assert s["system.moe.output_max_abs_error"] == 0.0
    pairs, rows, _ = _node_rows(topk, G, 2, E)
    assert sum(s[f"system.gpu{g}.hub.forward.rows_received"] for g in range(G)) == sum(rows)


def test_small_buffer_and_rings_park_and_wait_yet_every_row_lands():
    """A forwarding buffer of 2 rows and rings of 4 descriptors: rows park in the AAU's staging
    store for a buffer slot and forwarding requests wait for ring room - the output is still
    exact and every check holds (queues empty, every slot released)."""
    sim = _simulate(TINY_2X2, PER_NODE, *PUBLISHED, "system.gpu.hub.moe.forward_buffer_rows=2",
                    "system.gpu.hub.moe.rpm.row_queue_depth=4")
    s = sim.stats
    assert s["system.moe.output_max_abs_error"] == 0.0
    assert all(s[f"system.gpu{g}.hub.forward.buffer_peak_rows"] == 2 for g in range(4))
    assert sum(s[f"system.gpu{g}.hub.forward.ring_waits"] for g in range(4)) > 0
    assert sum(s[f"system.gpu{g}.hub.aau.alloc_stalls"] for g in range(4)) > 0
    assert sum(s[f"system.gpu{g}.hub.rpm.accept_stalls"] for g in range(4)) > 0
