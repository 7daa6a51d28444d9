"""Tutel's 2-D hierarchical all-to-all (scheme tutel, workload.layer.tutel.all_to_all;
moehub_arch/workloads/schemes/tutel.py TwoDH, kernel a2a_put_group) on configs/systems/tiny_2x2.yaml
(2 nodes x 2 GPUs): the layer output equals the NumPy reference, and the bytes and RDMA work
requests per level are the hand counts of the algorithm - every GPU's rows for another node leave
in one message per peer node (per local expert in the dispatch), over the same total InfiniBand
bytes as the flat all-to-all, while NVLink carries each GPU's slice for the other local ranks of
every node. In training the backward runs the same steps with the gradient rows (exact
gradients, twice the forward's bytes and messages)."""
import math

import pytest

from conftest import cli_stats_per_engine, run_cli
from moehub_arch.workloads.schemes.tutel import capacity, expected_drops

TINY = "systems/tiny_2x2.yaml"
T, K, E, RB = 64, 2, 8, 128        # configs/experiments/functional.yaml: tiny_functional, bf16 x 64
CHUNK = 65536                      # workload.layer.tutel.a2a_chunk_bytes default


def _simulate(*extra):
    from conftest import CONFIGS
    from moehub_arch.config import load_config
    from moehub_arch.simulation import Simulation
    cfg = load_config(CONFIGS / "experiments/functional.yaml", ["scheme=tutel", *extra],
                      system_file=CONFIGS / TINY)
    sim = Simulation(cfg)
    sim.run()
    return sim


# the shapes of the 2-D all-to-all checked forward and in training
SHAPES = [
    (),                                                                   # 2 slices
    ("workload.layer.tutel.chunks=1",),                   # the combine lands in tu_ret / tu_dret
    ("workload.layer.tutel.chunks=3", "workload.layer.tutel.capacity_factor=0.75"),   # drops
    ("system.nodes.count=4", "system.num_gpus=8"),                        # 4 nodes x 2, El = 1
    ("system.nodes.gpus_per_node=4", "system.nic.per_node=4", "system.num_gpus=8"),   # 2 x 4
]


@pytest.mark.parametrize("extra", SHAPES)
def test_2dh_layer_output_is_exact(extra):
    sim = _simulate(*extra)
    s, shape = sim.stats, sim.layer.shape
    assert s["system.moe.tutel.all_to_all_2dh"] == 1
    C = s["system.moe.tutel.capacity"]
    dropped = expected_drops(sim.layer.routing.topk_idx, shape.experts, C)
    assert s["system.moe.rows_dropped"] == dropped
    assert s["system.moe.rows_sent"] == shape.num_gpus * shape.pairs - dropped
    assert s["system.moe.output_max_abs_error_kept"] == 0.0
    assert (s["system.moe.output_max_abs_error"] == 0.0) == (dropped == 0)


@pytest.mark.parametrize("extra", SHAPES)
def test_2dh_backward_gradients_are_exact(extra):
    """The backward runs the forward's 2-D hierarchical steps with the gradient rows (dO out
    through the dispatch's A-D, dX home through the combine's A-E), slice by slice: every
    gradient equals the NumPy reference, the kept pairs' rows go out and come back once."""
    sim = _simulate("workload.layer.passes=training", *extra)
    s, shape = sim.stats, sim.layer.shape
    assert s["system.moe.tutel.all_to_all_2dh"] == 1
    kept = shape.num_gpus * shape.pairs - s["system.moe.rows_dropped"]
    for g in ("dx", "dw", "dw_gate", "dw_up", "dw_down", "ds_gate", "ds_up", "ds_down"):
        assert s[f"system.moe.backward.{g}_max_abs_error"] == 0.0, g
    assert s["system.moe.backward.rows_dispatched"] == s["system.moe.backward.rows_combined"] \
        == kept
    assert s["system.moe.backward.rows_computed"] == s["system.moe.rows_computed"]
    assert any(l.kernel == "a2a_put_group" and l.stream == 3 for l in sim.launches)
    assert not any(l.kernel == "a2a_put" for l in sim.launches)       # no flat all-to-all left


def test_2dh_backward_moves_the_forwards_bytes_again():
    """Bytes and messages in both directions: the gradient dispatch is the dispatch's steps and
    the gradient combine the combine's, with the same tables, arrivals and done flags - so a
    training run's NVLink, PCIe and InfiniBand bytes and RDMA work requests per GPU are exactly
    twice the forward-only run's."""
    fwd, train = _simulate(), _simulate("workload.layer.passes=training")
    assert train.stats["system.moe.backward.dx_max_abs_error"] == 0.0
    for g in range(4):
        assert _counts(train, g) == tuple(2 * x for x in _counts(fwd, g)), g


def _counts(sim, g):
    s = sim.stats
    nvlink = sum(st.value for st in s if st.name.startswith(f"system.gpu{g}.nvlink")
                 and st.name.endswith(".tx_payload_bytes"))
    return (nvlink, s[f"system.gpu{g}.pcie.tx_payload_bytes"], s[f"system.nic{g}.work_requests"],
            s[f"system.nic{g}.rdma_payload_bytes"])


def test_2dh_bytes_and_messages_per_level_by_hand():
    """Per GPU of 2 x 2 (N = 2 nodes, G = 2 local ranks, El = 2 local experts, n = 2 slices of
    Cc rows; u = one (GPU pair, expert, slice) block). A put is one RDMA work request (puts of at
    most 64 KB; every range here is smaller); an arrival atom.add is a request (8 B) and an
    answer (8 B) over the same links; a done flag.set 8 B."""
    N, G, n = 2, 2, 2
    El = E // (N * G)
    Cc = capacity(T, K, E, 2.0, n) // n               # functional.yaml: capacity_factor 2.0
    u = Cc * RB
    assert max(u, G * u, G * El * u) <= CHUNK
    flat, hier = _simulate("workload.layer.tutel.all_to_all=flat"), _simulate()
    assert hier.stats["system.moe.tutel.capacity"] == n * Cc
    assert flat.stats["system.moe.tutel.all_to_all_2dh"] == 0
    assert flat.stats["system.moe.output_max_abs_error"] == 0.0
    assert hier.stats["system.moe.output_max_abs_error"] == 0.0
    ib_data = 2 * n * (N - 1) * G * El * u          # both directions: the other node's GPUs' rows
    for g in range(N * G):
        # flat: every peer GPU gets El puts per slice and direction; dispatch slices count their
        # arrivals at each peer (atom.add), the combine's last slice raises done[g] on each peer
        f_nv, f_pcie, f_wr, f_ib = _counts(flat, g)
        f_atoms, f_flags = n * (N - 1) * G, (N - 1) * G
        assert f_wr == 2 * n * (N - 1) * G * El + f_atoms + f_flags            # 22
        assert f_ib == f_pcie == ib_data + 8 * (2 * f_atoms + f_flags)
        assert f_nv == 2 * n * (G - 1) * El * u + 8 * (2 * n * (G - 1) + (G - 1))
        # 2dh: across nodes only the peer of the same local rank on each other node: the
        # dispatch's El ranges of G x Cc rows, the combine's one range of G x El x Cc rows, an
        # arrival per slice and direction, and the last slice's done flags for the G GPUs of the
        # node the rows came from
        h_nv, h_pcie, h_wr, h_ib = _counts(hier, g)
        h_atoms, h_flags = 2 * n * (N - 1), (N - 1) * G
        assert h_wr == n * (N - 1) * El + n * (N - 1) + h_atoms + h_flags      # 12
        assert h_ib == h_pcie == ib_data + 8 * (2 * h_atoms + h_flags)
        # inside the node each GPU sends every other local rank the blocks bound for it on all N
        # nodes (N x El blocks per slice and direction), one arrival each
        assert h_nv == 2 * n * (G - 1) * N * El * u + 8 * 2 * (2 * n * (G - 1))
        assert h_wr < f_wr


@pytest.mark.parametrize("passes", ["forward", "training"])
def test_2dh_engines_agree(tmp_path, passes):
    out = cli_stats_per_engine("configs/experiments/functional.yaml", tmp_path,
                               "--system", f"configs/{TINY}", "--set", "scheme=tutel",
                               "--set", f"workload.layer.passes={passes}",
                               "--set", "workload.layer.tokens_per_gpu=8",
                               "--set", "system.gpu.num_sms=4",
                               "--set", "workload.layer.combine_tbs=2",
                               "--set", "workload.layer.shared_tbs=2",
                               "--set", "workload.layer.tutel.permute_tbs=2")
    assert out["numba"] == out["python"]
    assert out["numba"]["system.moe.tutel.all_to_all_2dh"] == 1
    assert out["numba"]["system.moe.output_max_abs_error_kept"] == 0.0   # 8 tokens: some dropped
    if passes == "training":
        assert out["numba"]["system.moe.backward.dx_max_abs_error"] == 0.0


def test_2dh_on_one_node_exits_2_naming_the_key(tmp_path):
    r = run_cli("run", "configs/experiments/functional.yaml", "--set", "scheme=tutel",
                "--set", "workload.layer.tutel.all_to_all=2dh", "-o", tmp_path)
    assert r.returncode == 2
    assert "workload.layer.tutel.all_to_all" in r.stderr and "Traceback" not in r.stderr


def test_one_node_auto_is_flat():
    """auto on one node keeps the flat all-to-all (no multi-node stat; golden stats pin it)."""
    from conftest import simulate
    sim = simulate("experiments/functional.yaml", "scheme=tutel")
    names = {st.name for st in sim.stats}
    assert "system.moe.tutel.all_to_all_2dh" not in names
    assert not any(l.kernel == "a2a_put_group" for l in sim.launches)
    assert math.isclose(sim.stats["system.moe.output_max_abs_error"], 0.0)
