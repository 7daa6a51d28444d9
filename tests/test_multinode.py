"""Multi-node fabrics (moehub_arch/topology.py, components/fabric.py, pcie.py, nic.py,
infiniband.py) on configs/systems/tiny_2x2.yaml: 2 nodes x 2 GPUs, NVSwitch inside a node, one
ConnectX-7 per GPU on PCIe 5.0, a rail-optimised NDR fabric (2 leaves, 2 spines).

The counts below are worked out by hand from the workload and the public wire formats (PCIe TLP
overhead 26 B per TLP of at most 256 B; an IB data packet 42 B of headers per MTU of a message),
not from the engine's formulas.
"""
import numpy as np
import pytest

from conftest import cli_stats_per_engine, run_cli
from internode_setup import TINY, alltoall_on_tiny, hub_put_sends, simulate_on_tiny

BYTES = 5000           # put_get_exchange: 39 packets of 128 B and one of 8 B per transfer


def test_routes_cross_nodes_over_pcie_nic_and_infiniband():
    from conftest import load
    from moehub_arch.topology import (LINK_IB, LINK_NVLINK, LINK_PCIE, NODE_NAMES, build_fabric,
                                      build_routes, channel_arrays)
    cfg = load(TINY)
    fab = build_fabric(cfg)
    gpu_routes, sw_routes, _ = build_routes(cfg, fab)
    cols = channel_arrays(fab, 4)
    G = 4
    first = lambda g, h: gpu_routes[g * G + h, 2:2 + gpu_routes[g * G + h, 0]]  # noqa: E731
    # inside a node: every NVLink; across nodes: the GPU's PCIe link to its NIC
    assert all(cols["link_class"][c] == LINK_NVLINK for c in first(0, 1))
    assert len(first(0, 1)) == cfg.system.nvlink.links_per_gpu
    (c,) = first(0, 2)
    assert cols["link_class"][c] == LINK_PCIE
    # follow GPU 0 -> GPU 3 (another rail): NIC 0, leaf 0, a spine, leaf 1, NIC 3, GPU 3
    path, node = [], cols["switch"][c]
    for _ in range(8):
        kind, index = fab.nodes[node][0], fab.nodes[node][1]
        path.append(f"{NODE_NAMES[kind]}{index}")
        row = sw_routes[node * G + 3]
        nxt = row[2]
        if not cols["to_switch"][nxt]:
            assert cols["gpu"][nxt] == 3 and cols["link_class"][nxt] == LINK_PCIE
            break
        assert cols["link_class"][nxt] == LINK_IB or kind == 4
        node = cols["switch"][nxt]
    assert path[0] == "nic0" and path[1] == "ibleaf0" and path[2].startswith("ibspine")
    assert path[3:] == ["ibleaf1", "nic3"]
    # one spine per destination NIC (system.infiniband.routing: ftree; tests/test_ib_routing.py)
    leaf0 = [n for n, x in enumerate(fab.nodes) if NODE_NAMES[x[0]] == "ibleaf" and x[1] == 0][0]
    assert sw_routes[leaf0 * G + 3, 0] == 1 and path[2] == "ibspine1"


def test_exchange_across_nodes_exact_bytes_and_work_requests():
    sim = simulate_on_tiny("examples/put_get_exchange.yaml")
    st = sim.stats
    # every byte arrived, both ways, from local and remote peers
    for g in range(4):
        for p in range(4):
            if p == g:
                continue
            recv = sim.read_buffer(g, "recv", "u8").reshape(-1, BYTES)
            pulled = sim.read_buffer(g, "pulled", "u8").reshape(-1, BYTES)
            assert (recv[p] == sim.read_buffer(p, "src", "u8")).all()
            assert (pulled[p] == sim.read_buffer(g, "src", "u8")).all()
    # per remote peer, GPU g's PCIe link carries: its put (40 hub packets; the NIC reads the
    # 5000 B message as 20 completions of at most 256 B: ceil(5000 / 256)), its flag (1), its
    # get's read requests (40, header only), one write response to each of the peer's put and
    # flag (an RDMA write completes once per message, not per packet: 2) and the peer's get data
    # (40 packets, 20 TLPs): 123 packets, 83 TLPs of 26 B overhead; payload 5000 + 8 + 5000
    for g in range(4):
        assert st[f"system.gpu{g}.pcie.tx_packets"] == 2 * 123
        assert st[f"system.gpu{g}.pcie.tx_payload_bytes"] == 2 * (BYTES + 8 + BYTES)
        assert st[f"system.gpu{g}.pcie.tx_wire_bytes"] == 2 * (BYTES + 8 + BYTES) + 2 * 83 * 26
        # the NIC starts a work request per put (1), flag store (1) and read request (40)
        assert st[f"system.nic{g}.work_requests"] == 2 * 42
        # onto InfiniBand: a 5000 B message is 2 IB packets (MTU 4096) of 42 B headers, for the
        # put and for the get data; the flag and each read request one packet each; one 30 B
        # acknowledgement for each of the peer's put and flag
        fixed = 2 * ((BYTES + 2 * 42) + (8 + 42) + 40 * 42 + (BYTES + 2 * 42))
        assert st[f"system.nic{g}.ib.tx_wire_bytes"] == fixed + 2 * 2 * 30
        assert st[f"system.nic{g}.ib.tx_payload_bytes"] == 2 * (BYTES + 8 + BYTES)
        # write responses received: the node peer's NVLink put answers each of its 40 packets
        # (non-posted), its flag 1; each remote peer's put and flag 1 each
        assert st[f"system.gpu{g}.hub.acks_received"] == 40 + 1 + 2 * 2
    # GPUs talk to their node peer over NVLink only: nothing else crosses PCIe
    assert sum(st[f"system.nic{n}.rdma_payload_bytes"] for n in range(4)) == 4 * 2 * (2 * BYTES + 8)


def test_fabric_engines_identical(tmp_path):
    """A small all-to-all across both nodes: the Numba and pure-Python engines agree on every
    stat (fabric links, NICs and IB switches included)."""
    cfg = alltoall_on_tiny(tmp_path, 4096, 2048)
    out = cli_stats_per_engine(cfg, tmp_path)
    assert out["numba"] == out["python"]
    assert out["numba"]["system.nic0.ib.tx_payload_bytes"] == 2 * 4096
    assert any(k.startswith("system.ibspine") for k in out["numba"])


@pytest.mark.parametrize("scheme, extra", [
    ("moehub", ()),
    ("deepep", ()),                                              # internode: forward (DeepEP's)
    ("deepep", ("workload.layer.deepep.internode=direct",)),     # one hop, puts through the NIC
    ("deepep_ll", ()),                                           # fixed slots, counts after data
])
def test_functional_layer_across_nodes_is_exact(scheme, extra):
    """moehub (the RPM hands a remote expert's stream to the NIC), deepep's internode kernels
    (RDMA to the same local rank, NVLink forwarding, node partials reduced at the forwarder) and
    deepep's direct puts compute the reference layer exactly across two nodes."""
    sim = simulate_on_tiny("experiments/functional.yaml", f"scheme={scheme}",
                            "workload.layer.tokens_per_gpu=16", *extra)
    kernels = {st.name.split(".")[-1] for st in sim.stats
               if st.name.startswith("system.moe.kernel.")}
    if scheme == "deepep":
        forward = not extra
        assert ("deepep_dispatch_internode_us" in kernels) == forward
        assert ("deepep_combine_internode_us" in kernels) == forward
    assert sim.stats["system.moe.output_max_abs_error"] == 0.0
    assert sim.stats["system.nic0.rdma_payload_bytes"] > 0
    # the routing's deduplication per level (workloads/dedup.py), from the layer's routing
    from moehub_arch.workloads.dedup import dedup_rows
    layer = sim.layer
    eg = [e // layer.shape.local_experts for e in range(layer.shape.experts)]
    before, after = dedup_rows(layer.routing.topk_idx, eg, 2)
    assert sim.stats["system.moe.dedup.level1_bytes_saved"] == (before - after) * layer.shape.row_bytes


@pytest.mark.parametrize("sets, key", [
    (["system.nic.per_node=1"], "system.nic.per_node"),            # GPU 1 of a node has no NIC
    (["system.nic.per_node=3"], "system.nic.per_node"),            # a NIC attached to nothing
    (["system.nodes.gpus_per_node=0"], "system.nodes.gpus_per_node"),
    (["system.infiniband.spine_switches=0"], "system.infiniband.spine_switches"),
    (["system.pcie.bandwidth=0"], "system.pcie.bandwidth"),
    (["system.switch.topology=bridge_pairs", "system.nic.gpus_per_nic=2", "system.nic.per_node=1",
      "system.nodes.gpus_per_node=4", "system.nodes.count=1"], "system.switch.topology"),
])
def test_bad_fabric_exits_2_naming_the_key(sets, key):
    args = ["run", "configs/ubench/alltoall.yaml", "--system", "configs/systems/tiny_2x2.yaml"]
    for s in sets:
        args += ["--set", s]
    r = run_cli(*args)
    assert r.returncode == 2, r.stderr
    assert key in r.stderr and "Traceback" not in r.stderr


def test_a6000_bridges_pairs_and_pcie_switch():
    """HierMoE's testbed: a GPU reaches its bridge partner over the bridge (all 4 links), the
    other GPUs of its node through the PCIe switch it shares with the node's NIC, and other nodes
    through that NIC."""
    from conftest import load
    from moehub_arch.topology import (LINK_NVLINK, LINK_PCIE, NODE_BRIDGE, NODE_PCIE_SWITCH,
                                      build_fabric, build_routes, channel_arrays)
    cfg = load("systems/a6000_x4.yaml")
    G = cfg.system.num_gpus
    assert G == 32
    fab = build_fabric(cfg)
    gpu_routes, sw_routes, _ = build_routes(cfg, fab)
    cols = channel_arrays(fab, G)
    hops = lambda g, h: list(gpu_routes[g * G + h, 2:2 + gpu_routes[g * G + h, 0]])  # noqa: E731
    assert len(hops(0, 1)) == 4
    assert all(cols["link_class"][c] == LINK_NVLINK and cols["dst_kind"][c] == NODE_BRIDGE
               for c in hops(0, 1))
    for h in (2, 7, 8, 31):
        (c,) = hops(0, h)
        assert cols["link_class"][c] == LINK_PCIE and cols["dst_kind"][c] == NODE_PCIE_SWITCH


@pytest.mark.parametrize("nodes", [2, 4, 8])
def test_hgx_h800_node_count_gives_ep(nodes):
    from conftest import load
    from moehub_arch.topology import build_fabric, build_routes
    cfg = load("systems/hgx_h800_x4.yaml", f"system.nodes.count={nodes}")
    assert cfg.system.num_gpus == 8 * nodes
    gpu_routes, _, _ = build_routes(cfg, build_fabric(cfg))
    assert (gpu_routes[:, 0].reshape(8 * nodes, 8 * nodes) > 0).sum() == (8 * nodes) ** 2


def test_dedup_rows_of_a_hand_written_routing_at_each_level():
    """2 nodes x 2 GPUs, 8 experts (GPU g holds experts 2g, 2g+1), top-3; counts by hand:
    GPU0 [1,4,5] -> GPUs 0,2,2: level 0 2 rows -> 1, level 1 (node) 2 -> 1
    GPU0 [2,6,7] -> GPUs 1,3,3: level 0 3 -> 2,              level 1 2 -> 1
    GPU1 [2,3,0], [3,2,1] -> GPUs 1,1,0: level 0 1 -> 1 each, level 1 0
    GPU2 [4,5,6], [5,4,7] -> GPUs 2,2,3: level 0 1 -> 1 each, level 1 0
    GPU3 [0,3,4] -> GPUs 0,1,2: level 0 3 -> 3,              level 1 2 -> 1
    GPU3 [6,7,1] -> GPUs 3,3,0: level 0 1 -> 1,              level 1 1 -> 1"""
    from conftest import load
    from moehub_arch.workloads.dedup import dedup_rows, topology_levels
    topk = [[[1, 4, 5], [2, 6, 7]], [[2, 3, 0], [3, 2, 1]],
            [[4, 5, 6], [5, 4, 7]], [[0, 3, 4], [6, 7, 1]]]
    expert_gpu = [e // 2 for e in range(8)]
    levels = topology_levels(load(TINY))
    assert levels == [("gpu", 1), ("node", 2)]
    assert dedup_rows(topk, expert_gpu, 1) == (13, 11)
    assert dedup_rows(topk, expert_gpu, 2) == (7, 4)
    a6000 = topology_levels(load("systems/a6000_x4.yaml"))
    assert a6000 == [("gpu", 1), ("nvlink_pair", 2), ("node", 8)]


def test_nested_dedup_rows_of_a_hand_written_routing_at_each_level():
    """Deduplicating at every level at once (workloads/dedup.py nested_hop_rows) on 2 nodes of 4
    GPUs in bridge pairs (a6000_x4's levels, 8 GPUs), 3 experts per GPU, top-3; the row enters
    each group at the sender's own position in it. By hand:
    GPU0 -> GPUs {1, 2, 7}: node 1 (hop 3) entering at GPU 4, pair {6,7} (hop 2) at GPU 6,
      GPU 7 (hop 1); inside node 0: GPU 1 (hop 1), pair {2,3} at GPU 2 (hop 2): 2, 2, 1
    GPU5 -> {4, 0, 1}: GPU 4 (hop 1); node 0 (hop 3) at GPU 1, GPU 0 (hop 1): 2, 0, 1
    GPU3 -> {3, 6, 5}: node 1 (hop 3) at GPU 7, GPU 6 (hop 1), pair {4,5} at GPU 5 (hop 2): 1, 1, 1
    every other GPU's token stays on its own experts.
    Hops 1, 2, 3: 5, 3, 3 transfers; rows leaving a GPU / pair / node 11, 6, 3. One row per
    (token, expert) pair leaves GPUs 8 times, pairs 6, nodes 5: nested saves -3, 0 and 2 rows
    (the relays through entry GPUs that hold none of the token's experts cost GPU-level rows)."""
    from moehub_arch.workloads.dedup import dedup_rows, nested_hop_rows
    topk = [[[3 * g, 3 * g + 1, 3 * g + 2]] for g in range(8)]
    topk[0] = [[3, 6, 21]]
    topk[5] = [[12, 0, 3]]
    topk[3] = [[9, 18, 15]]
    expert_gpu = [e // 3 for e in range(24)]
    hops = nested_hop_rows(topk, expert_gpu, [1, 2, 4])
    assert hops == [5, 3, 3]
    before = [dedup_rows(topk, expert_gpu, size)[0] for size in (1, 2, 4)]
    assert before == [8, 6, 5]
    assert [sum(hops[i:]) for i in range(3)] == [11, 6, 3]
    assert [b - sum(hops[i:]) for i, b in enumerate(before)] == [-3, 0, 2]
    # the two-level case of the test above: hop 1 (inside a node) 9, hop 2 (between nodes) 4
    topk2 = [[[1, 4, 5], [2, 6, 7]], [[2, 3, 0], [3, 2, 1]],
             [[4, 5, 6], [5, 4, 7]], [[0, 3, 4], [6, 7, 1]]]
    assert nested_hop_rows(topk2, [e // 2 for e in range(8)], [1, 2]) == [9, 4]


def test_deepep_internode_engines_identical_and_rdma_rows(tmp_path):
    """DeepEP's internode kernels give identical stats on both engines (communication only,
    top-2 of 8 experts on 2 x 2 GPUs) and compute the reference output exactly."""
    out = cli_stats_per_engine("configs/experiments/functional.yaml", tmp_path,
                               "--system", f"configs/{TINY}", "--set", "scheme=deepep",
                               "--set", "workload.layer.tokens_per_gpu=8",
                               "--set", "workload.layer.deepep.kernels=communication")
    assert out["numba"] == out["python"]
    st = out["numba"]
    assert st["system.moe.output_max_abs_error"] == 0.0
    # DeepEP's figure counts one row per (token, node), own node included (hand check below)
    assert st["system.moe.deepep.rdma_send_bytes"] > 0
    assert st["system.moe.deepep.dispatch_rdma_GBps"] > 0


def test_node_rows_sent_per_rank_by_hand():
    """DeepEP's num_rdma_token_sent on 2 nodes x 2 GPUs, 8 experts (2 per GPU, 4 per node):
    GPU 0: [1, 4] -> nodes 0, 1; [2, 3] -> node 0          -> 3 rows
    GPU 1: [5, 6] -> node 1; [0, 7] -> nodes 0, 1          -> 3 rows
    GPU 2: [4, 5] -> node 1; [6, 7] -> node 1              -> 2 rows
    GPU 3: [0, 1] -> node 0; [2, 4] -> nodes 0, 1          -> 3 rows"""
    from moehub_arch.workloads.bandwidth import node_rows_sent_per_rank
    topk = [[[1, 4], [2, 3]], [[5, 6], [0, 7]], [[4, 5], [6, 7]], [[0, 1], [2, 4]]]
    assert list(node_rows_sent_per_rank(topk, 2, 2)) == [3, 3, 2, 3]


def test_deepep_ll_engines_identical(tmp_path):
    """DeepEP's low-latency kernels: identical stats on both engines across two nodes
    (communication only), the reference output exactly, every pair sent once per expert."""
    out = cli_stats_per_engine("configs/experiments/functional.yaml", tmp_path,
                               "--system", f"configs/{TINY}", "--set", "scheme=deepep_ll",
                               "--set", "workload.layer.tokens_per_gpu=8",
                               "--set", "workload.layer.deepep_ll.kernels=communication")
    assert out["numba"] == out["python"]
    st = out["numba"]
    assert st["system.moe.output_max_abs_error"] == 0.0
    assert st["system.moe.rows_sent"] == st["system.moe.rows_received"] == 4 * 8 * 2
    assert st["system.moe.deepep_ll.dispatch_us"] > 0 and st["system.moe.deepep_ll.combine_us"] > 0


def test_deepep_ll_fp8_layer_is_a_config_error():
    r = run_cli("run", "configs/experiments/functional.yaml", "--set", "scheme=deepep_ll",
                "--set", "workload.layer.deepep_ll.dispatch_dtype=fp8")
    assert r.returncode == 2, r.stderr
    assert "workload.layer.deepep_ll.dispatch_dtype" in r.stderr and "Traceback" not in r.stderr


def test_hiermoe_level_rows_of_a_hand_written_routing():
    """HierMoE's performance model inputs on 2 nodes x 2 GPUs, 8 experts (2 per GPU), top-2,
    the routing of test_node_rows_sent_per_rank_by_hand. Per GPU (NIC rows, NVLink rows):
    gpu level - one row per (token, other GPU): GPU0 [1,4]->{0,2}, [2,3]->{1}: NIC 1, NVLink 1;
      GPU1 [5,6]->{2,3}, [0,7]->{0,3}: NIC 3, NVLink 1; GPU2 [4,5]->{2}, [6,7]->{3}: 0, 1;
      GPU3 [0,1]->{0}, [2,4]->{1,2}: NIC 2, NVLink 1.
    node level - one NIC row per (token, other node): 1, 2, 0, 2; NVLink rows are the fan-out at
      the forwarder (the GPU of the origin's local rank on the destination node) to the other
      GPUs of that node: GPU0 forwards GPU0's [2,3] to GPU1; GPU1 forwards GPU1's [0,7] and
      GPU3's [0,1] to GPU0; GPU2 forwards GPU2's [6,7] to GPU3; GPU3 forwards GPU1's [5,6] and
      GPU3's [2,4] to GPU2: 1, 2, 1, 2."""
    from moehub_arch.workloads.schemes.hiermoe import level_rows
    topk = [[[1, 4], [2, 3]], [[5, 6], [0, 7]], [[4, 5], [6, 7]], [[0, 1], [2, 4]]]
    nic, nvl = level_rows(topk, 2, 2, "gpu")
    assert list(nic) == [1, 3, 0, 2] and list(nvl) == [1, 1, 1, 1]
    nic, nvl = level_rows(topk, 2, 2, "node")
    assert list(nic) == [1, 2, 0, 2] and list(nvl) == [1, 2, 1, 2]


def test_hiermoe_expert_swap_lowers_the_busiest_gpu():
    """Loads (rows per expert) 9,8 | 1,1 | 5,0 | 0,0 on 4 GPUs: GPU 0 holds 17 rows. The greedy
    swaps move the hot experts apart until no swap between the busiest and the idlest GPU
    lowers the larger of their loads; the result is a permutation."""
    from moehub_arch.workloads.schemes.hiermoe import expert_swap, gpu_rows
    topk = np.array([0] * 9 + [1] * 8 + [2, 3] + [4] * 5).reshape(1, -1, 1)
    new_id, swaps = expert_swap(topk, 4, 2)
    assert sorted(new_id) == list(range(8)) and swaps >= 1
    before = gpu_rows(topk, 2)
    after = np.bincount(new_id[topk.reshape(-1)] // 2, minlength=4)
    assert before.max() == 17 and after.max() == 9


@pytest.mark.parametrize("level", ["gpu", "node"])
def test_hiermoe_exact_across_nodes(level):
    """hiermoe on 2 x 2 GPUs with skewed routing (so the expert swap moves experts): the output is
    the reference's on the swapped routing, at either deduplication level."""
    sim = simulate_on_tiny("experiments/functional.yaml", "scheme=hiermoe",
                            "workload.layer.tokens_per_gpu=16", "workload.layer.routing.kind=skewed",
                            "workload.layer.routing.gini=0.5", f"workload.layer.hiermoe.level={level}")
    st = sim.stats
    assert st["system.moe.output_max_abs_error"] == 0.0
    assert st["system.moe.hiermoe.level"] == ["gpu", "node"].index(level)
    assert st["system.moe.hiermoe.swap_max_gpu_rows_after"] < st["system.moe.hiermoe.swap_max_gpu_rows_before"]


def test_expert_parallelism_wider_than_the_experts_exits_2():
    """EP is the system's GPU count: 16 GPUs (2 HGX H800 nodes) for a model of 8 routed experts
    is an error naming the model key, not a crash."""
    r = run_cli("run", "configs/experiments/functional.yaml", "--system",
                "configs/systems/hgx_h800_x4.yaml", "--set", "system.nodes.count=2")
    assert r.returncode == 2, r.stderr
    assert "workload.layer.model" in r.stderr and "system.num_gpus (16)" in r.stderr
    assert "Traceback" not in r.stderr


def _a2a_8k(tmp_path):
    return alltoall_on_tiny(tmp_path, 8192, 8192)


def _put_order(debug_file, g):
    """(destination, packets) runs of GPU g's hub put packets, in the order it sent them."""
    runs = []
    for _, dst in hub_put_sends(debug_file, g):
        if runs and runs[-1][0] == dst:
            runs[-1][1] += 1
        else:
            runs.append([dst, 1])
    return [tuple(r) for r in runs]


@pytest.mark.parametrize("scheduling, order, interleaved", [
    # round-robin by queue pair, one IB packet (4096 B MTU = 32 hub packets of 128 B) per turn
    ("qp_round_robin", [(1, 64), (2, 32), (3, 32), (2, 32), (3, 32)], 2),
    # whole messages in issue order (the model before)
    ("message_fifo", [(1, 64), (2, 64), (3, 64)], None),
])
def test_nic_send_scheduler_interleaves_queue_pairs(tmp_path, scheduling, order, interleaved):
    """Each GPU of 2 x 2 puts one 8 KB message to every peer (alltoall, one put per peer): with
    qp_round_robin the two RDMA messages (to the other node's GPUs) leave GPU 0 one MTU at a time
    in turn, the NVLink put to the node peer whole; every byte, packet and credit is accounted
    for (the run's end-of-run invariants) and the IB wire bytes do not depend on the order."""
    cfg = _a2a_8k(tmp_path)
    r = run_cli("run", cfg, "-o", tmp_path / "out", "--quiet", "--set",
                f"system.nic.send_scheduling={scheduling}", "--debug-flags", "Hub",
                "--debug-file", tmp_path / "dbg.txt")
    assert r.returncode == 0, r.stderr
    assert _put_order(tmp_path / "dbg.txt", 0) == order
    from conftest import read_stats_json
    st = read_stats_json(tmp_path / "out")
    for g in range(4):
        assert st.get(f"system.gpu{g}.rdma_send.interleaved_messages") == interleaved
        # two messages of 8192 B, 2 IB packets of 42 B headers each; one 30 B acknowledgement
        # for each message of the other node's two GPUs
        assert st[f"system.nic{g}.ib.tx_payload_bytes"] == 2 * 8192
        assert st[f"system.nic{g}.ib.tx_wire_bytes"] == 2 * (8192 + 2 * 42) + 2 * 30
        assert st[f"system.nic{g}.ib.rx_payload_bytes"] == 2 * 8192
        assert st[f"system.gpu{g}.hub.rx_payload_bytes"] == 3 * 8192
    if interleaved:
        assert st["system.gpu0.rdma_send.messages_peak"] == 2


def test_nic_send_scheduler_engines_identical(tmp_path):
    out = cli_stats_per_engine(_a2a_8k(tmp_path), tmp_path)
    assert out["numba"] == out["python"]
    assert out["numba"]["system.gpu0.rdma_send.interleaved_messages"] == 2


def test_nic_queue_pair_request_kinds_are_the_hubs():
    from moehub_arch.components import hub, nic
    assert (nic.QP_REQ_PUT, nic.QP_REQ_STORE, nic.QP_REQ_ATOM) == (
        hub.REQ_PUT, hub.REQ_STORE, hub.REQ_ATOM)


def test_unknown_nic_send_scheduling_exits_2(tmp_path):
    r = run_cli("run", _a2a_8k(tmp_path), "-o", tmp_path / "out", "--quiet", "--set",
                "system.nic.send_scheduling=fifo")
    assert r.returncode == 2, r.stderr
    assert "system.nic.send_scheduling" in r.stderr and "qp_round_robin" in r.stderr
    assert "Traceback" not in r.stderr
