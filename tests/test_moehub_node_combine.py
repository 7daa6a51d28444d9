"""The per-node MoE-Hub combine (system.gpu.hub.moe.internode_combine: per_node, with internode:
per_node; kernels moehub_{expert,tile}_combnode, moehub_forward_combine and moe_combine_pernode in
workloads/kernels/moehub/moe_layer.s): an expert output for a token of another node goes over
NVLink to that token's forwarder (the origin's local rank on the expert's node), which sums the
node's weighted outputs in fp32 and puts one bf16 row per (token, node) home over RDMA. The layer
output is the NumPy reference's (combine="node_slots") bit for bit on 2 x 2 and 2 x 4 GPUs, both
expert-kernel kinds; on a hand-written routing each NIC's InfiniBand payload drops by exactly the
hand count; both engines agree; a per-node combine without the per-node dispatch exits 2."""
import numpy as np
import pytest

from conftest import cli_stats_per_engine, run_cli
from test_moehub_internode import (PER_NODE, PUBLISHED, ROW, ROWSP, TINY_2X2, TINY_2X4,
                                   _hand_routing, _node_rows, _simulate)

COMBINE = "system.gpu.hub.moe.internode_combine=per_node"


@pytest.mark.parametrize("config, extra", [
    (TINY_2X2, ()),
    (TINY_2X2, tuple(PUBLISHED)),
    (TINY_2X4, ()),
    (TINY_2X4, tuple(PUBLISHED)),
])
def test_layer_is_the_node_slots_reference_bit_for_bit(config, extra):
    sim = _simulate(config, PER_NODE, COMBINE, *extra)
    s = sim.stats
    assert sim.layer.plan.reference_kwargs["combine"] == "node_slots"
    assert s["system.moe.output_max_abs_error"] == 0.0
    assert s["system.moe.output_max_abs_reference"] > 0.0
    # no expert output goes home on its own put across nodes: send_home serves the own node only
    G, gpn = sim.layer.shape.num_gpus, sim.cfg.system.nodes.gpus_per_node
    E = sim.layer.shape.experts
    topk = sim.layer.routing.topk_idx
    own = sum(int(e) // (E // G) // gpn == g // gpn for g in range(G) for e in topk[g].ravel())
    assert sum(s[f"system.gpu{g}.hub.combine_rows"] for g in range(G)) == own


def test_node_slots_reference_differs_from_per_slot_only_by_its_roundings():
    """The node rows are rounded to bf16 once per (token, node): against the per-slot fp32 sum the
    difference is one bf16 rounding (unit 2^-8) of each node row plus fp32 reorderings (2^-24
    units). A sanity check of that size on a random layer (2 nodes: two roundings of rows the
    size of the output), not a proof: cancellation inside a node row could exceed it."""
    from moehub_arch.workloads.reference import moe_layer_reference, to_bf16
    rng = np.random.default_rng(3)
    P, T, H, I, E, k = 4, 8, 16, 8, 8, 4
    x = to_bf16(rng.standard_normal((P, T, H)).astype(np.float32))
    idx = np.stack([np.stack([rng.choice(E, k, replace=False) for _ in range(T)])
                    for _ in range(P)])
    w = rng.random((P, T, k)).astype(np.float32)
    wg, wu = (to_bf16(rng.standard_normal((E, H, I)).astype(np.float32) * 0.3) for _ in range(2))
    wd = to_bf16(rng.standard_normal((E, I, H)).astype(np.float32) * 0.3)
    ref = moe_layer_reference(x, idx, w, wg, wu, wd)
    node = moe_layer_reference(x, idx, w, wg, wu, wd, combine="node_slots", local_experts=2,
                               node_gpus=2)
    assert not np.array_equal(ref, node)
    # two nodes: at most two bf16 roundings of rows no larger than the per-slot magnitudes
    bound = 2 * 2.0 ** -8 * np.abs(ref).max() + 1e-5
    assert np.abs(ref - node).max() <= bound


def test_hand_routing_combine_ib_payload():
    """With the per-node dispatch on both sides, the per-node combine moves each NIC's combine
    payload from one 128 B row per (token of the other node, expert here) to one row per (token
    of the rail peer, this node) - minus what the forwarder adds: the RDMA reads of its origin's
    routing (T x k ids of 8 B and weights of 4 B, sent by the origin's NIC) and one 8 B flag."""
    import tempfile
    from pathlib import Path
    G, T, E, k, gpn = 4, 64, 8, 2, 2
    topk = _hand_routing(G, T, E, k)
    trace = Path(tempfile.mkdtemp()) / "hand.npy"
    np.save(trace, topk)
    base = [ROWSP, PER_NODE, "workload.layer.tokens_per_gpu=64",
            "workload.layer.routing.kind=trace", f"workload.layer.routing.trace={trace}"]
    expert = _simulate(TINY_2X2, *base).stats
    node = _simulate(TINY_2X2, *base, COMBINE).stats
    assert expert["system.moe.output_max_abs_error"] == node["system.moe.output_max_abs_error"] == 0
    _, rows, to_gpu = _node_rows(topk, G, gpn, E)
    saved = 0
    for g in range(G):
        peer = (g + gpn) % G             # the rail peer: the one origin g forwards for
        outputs_home = sum(to_gpu[o, g] for o in range(G) if o // gpn != g // gpn)
        node_rows = rows[peer]
        routing_read = T * k * (8 + 4)   # the peer's forwarder reads g's ids and weights
        flag = 8                         # fdone on the peer
        assert (expert[f"system.nic{g}.rdma_payload_bytes"]
                - node[f"system.nic{g}.rdma_payload_bytes"]
                == (outputs_home - node_rows) * ROW - routing_read - flag)
        saved += outputs_home - node_rows
    assert saved > 0


def test_engines_agree(tmp_path):
    args = ["--set", "scheme=moehub", "--set", PER_NODE, "--set", COMBINE,
            "--set", "workload.layer.tokens_per_gpu=16"]
    stats = cli_stats_per_engine(f"configs/{TINY_2X2}", tmp_path, *args)
    assert stats["python"] == stats["numba"]
    assert stats["numba"]["system.moe.output_max_abs_error"] == 0.0


def test_per_node_combine_needs_the_per_node_dispatch():
    r = run_cli("run", f"configs/{TINY_2X2}", "--set", "scheme=moehub", "--set", COMBINE)
    assert r.returncode == 2, r.stderr
    assert "system.gpu.hub.moe.internode_combine" in r.stderr and "Traceback" not in r.stderr
