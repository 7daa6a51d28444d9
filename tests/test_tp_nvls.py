"""TP schemes on the NVSwitch's NVLink SHARP engine (workload.block schemes tp_nvls and sp_nvls;
workloads/kernels/lib/nvls_allreduce.s nvls_collective, kernel nvls_tp_collective):

- functional: every GPU's output is the NumPy reference in the switch's order (FP32 accumulation
  over the ranks in rank order, one rounding to bf16) bit for bit, not the ring's order; and that
  order - or any other rank order a real switch might use - is within the documented bound of
  the exact sum;
- conservation: per all-reduce each GPU's uplink carries its chunk once (multimem.st) and its
  values for every rank's reduction, its downlink the same, plus 8 B per barrier flag to each peer;
  sp_nvls moves exactly tp_nvls's bytes and its output shards are tp_nvls's output;
- bad input (t = 1, an FFN block under sequence parallelism) -> exit 2 naming the key;
- the Numba and pure-Python engines give identical stats.
"""
import numpy as np
import pytest

from conftest import cli_stats_per_engine, run_cli, simulate
from moehub_arch.workloads.reference import (nvls_allreduce_reference, ring_allreduce_reference,
                                             to_bf16)

FFN = "experiments/tp/functional.yaml"
LAYER = "experiments/tp/functional_transformer.yaml"


def _tx_payload(sim, g):
    links = sim.cfg.system.nvlink.links_per_gpu
    return sum(sim.stats[f"system.gpu{g}.nvlink{l}.tx_payload_bytes"] for l in range(links))


@pytest.fixture(scope="module")
def ffn():
    return simulate(FFN, "workload.block.scheme=tp_nvls")


@pytest.fixture(scope="module")
def layer():
    return simulate(LAYER, "workload.block.scheme=tp_nvls")


def test_ffn_block_tp_nvls_is_the_switch_order_sum_bit_for_bit(ffn):
    sim, s = ffn, ffn.layer.shape
    assert sim.stats["system.block.output_max_abs_error"] == 0.0
    assert not sim.violations
    n = s.tokens * s.hidden
    parts = np.stack([sim.read_buffer(g, "ys")[:n] for g in range(s.tp)])
    want = nvls_allreduce_reference(parts, bf16=True)
    for g in range(s.tp):
        assert np.array_equal(sim.read_buffer(g, "out")[:n], want), g
    # the ring's order (a bf16 rounding after every add) gives a different result: the check
    # pins the switch's FP32 accumulation
    assert not np.array_equal(ring_allreduce_reference(parts, bf16=True), want)


def test_the_switch_order_and_any_other_rank_order_stay_within_the_documented_bound(ffn):
    """nvls_allreduce_reference's bound: |err| <= (t - 1) 2^-24 sum|x_i| + 2^-8 |sum| against
    the exact sum. NVIDIA does not publish the order in which the switch adds; every order of
    the ranks satisfies the bound, so a hardware result differs from ours by at most twice it."""
    sim, s = ffn, ffn.layer.shape
    n = s.tokens * s.hidden
    parts = np.stack([sim.read_buffer(g, "ys")[:n] for g in range(s.tp)]).astype(np.float64)
    exact = parts.sum(axis=0)
    bound = (s.tp - 1) * 2.0 ** -24 * np.abs(parts).sum(axis=0) + 2.0 ** -8 * np.abs(exact)
    got = sim.read_buffer(0, "out")[:n].astype(np.float64)
    assert np.all(np.abs(got - exact) <= bound)
    assert np.abs(got - exact).max() > 0          # the bound is exercised, not vacuous
    for order in ([3, 2, 1, 0], [1, 3, 0, 2]):
        other = nvls_allreduce_reference(parts[order].astype(np.float32), bf16=True)
        assert np.all(np.abs(other - exact) <= bound)


def test_ffn_block_tp_nvls_moves_each_chunk_once_up_and_down_plus_barrier_flags(ffn):
    sim, s = ffn, ffn.layer.shape
    N = s.tokens * s.hidden * 2
    flags = 2 * s.channels * (s.tp - 1) * 8       # two barriers, a flag to every peer per channel
    for g in range(s.tp):
        assert _tx_payload(sim, g) == N // s.tp + N + flags
    st = sim.stats
    assert st["system.nvls.multicast_fanout"] == s.tp
    store = sim.cfg.system.nvlink.store_packet_bytes * sim.cfg.run.packet_train
    assert st["system.nvls.reductions"] == N // store


def test_transformer_layer_tp_nvls_is_exact_and_sp_nvls_matches_it_shard_by_shard(layer):
    st = layer.stats
    assert st["system.block.output_max_abs_error"] == 0.0
    assert not layer.violations
    outs = [layer.read_buffer(g, "out")[:32 * 64] for g in range(4)]
    assert np.abs(outs[0]).max() > 0 and all(np.array_equal(outs[0], o) for o in outs)
    assert st["system.block.allreduce_time_us"] > 0
    sp = simulate(LAYER, "workload.block.scheme=sp_nvls")
    assert sp.stats["system.block.output_max_abs_error"] == 0.0
    assert not sp.violations
    assert sp.stats["system.block.reduce_scatter_time_us"] > 0
    assert sp.stats["system.block.all_gather_time_us"] > 0
    n = 32 * 64 // 4
    for g in range(4):
        c = (g + 1) % 4           # GPU g's sequence shard, as sp_ring's
        assert np.array_equal(sp.read_buffer(g, "out")[c * n:(c + 1) * n], outs[0][c * n:(c + 1) * n])
        # the reduce-scatter and all-gather are the all-reduce's two halves, one barrier each
        assert _tx_payload(sp, g) == _tx_payload(layer, g)


@pytest.mark.parametrize("config, sets, words", [
    (FFN, ["workload.block.scheme=tp_nvls", "workload.block.tp=1", "system.num_gpus=1"],
     "workload.block.scheme: tp_nvls reduces in the NVSwitch over a multicast group of t > 1"),
    (FFN, ["workload.block.scheme=sp_nvls"], "workload.block.scheme: sp_nvls shards the norms"),
    (LAYER, ["workload.block.scheme=tp_nvls", "workload.block.allreduce_channels=3"],
     "workload.block.allreduce_channels: the all-reduce"),
])
def test_nvls_block_bad_input_exits_2_naming_the_key(tmp_path, config, sets, words):
    args = [a for s in sets for a in ("--set", s)]
    r = run_cli("run", f"configs/{config}", "-o", tmp_path / "o", "--quiet", *args)
    assert r.returncode == 2, r.stderr
    assert words in r.stderr and "Traceback" not in r.stderr


def test_sp_nvls_engines_agree(tmp_path):
    sets = [a for s in ("workload.block.kind=attention", "system.num_gpus=2", "workload.block.tp=2",
                        "workload.block.scheme=sp_nvls") for a in ("--set", s)]
    out = cli_stats_per_engine(f"configs/{LAYER}", tmp_path, *sets)
    assert out["numba"]["system.block.output_max_abs_error"] == 0.0
    assert out["numba"] == out["python"]


def test_nvls_schemes_take_their_own_slice():
    """tp_nvls / sp_nvls move multimem operations of workload.block.nvls_slice elements (the
    NVLS microbenchmark's 64 KB), the ring schemes puts of allreduce_slice (128 KB)."""
    from conftest import load
    from moehub_arch.workloads.tp.shape import block_shape
    for scheme, want in (("tp_nvls", 32768), ("sp_nvls", 32768), ("tp_ring", 65536)):
        cfg = load("experiments/tp/mega_gpt_4b_layer_tp_nvls.yaml", f"workload.block.scheme={scheme}")
        assert block_shape(cfg)[0].slice == want, scheme
    cfg = load("experiments/tp/mega_gpt_4b_layer_tp_nvls.yaml", "workload.block.nvls_slice=16384")
    assert block_shape(cfg)[0].slice == 16384
