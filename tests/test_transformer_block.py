"""Transformer blocks under tensor parallelism (workload.block kinds attention and transformer,
moehub_arch/workloads/block.py): functional output bit-identical to the NumPy reference in the
kernels' order (block_reference.py), that reference within its documented bound of exact
float64 attention, t = 1 without a collective, conservation of the all-reduce bytes, and clear
errors for shapes the kernels cannot tile."""
import numpy as np
import pytest

from conftest import cli_stats_per_engine, run_cli, simulate
from moehub_arch.workloads.block_reference import attention_exact, flash_attention, norm
from moehub_arch.workloads.reference import to_bf16

LAYER = "experiments/tp/functional_transformer.yaml"
LN_MODEL = """block_model:
  name: tiny_ln
  hidden: 64
  ffn: 128
  heads: 2
  layers: 1
  seq: 32
  batch: 2
  norm: layernorm
  norm_eps: 1.0e-5
"""


@pytest.fixture(scope="module")
def layer():
    return simulate(LAYER)


def test_transformer_layer_tp4_is_the_numpy_reference_bit_for_bit(layer):
    st = layer.stats
    assert st["system.block.output_max_abs_error"] == 0.0
    assert not layer.violations
    outs = [layer.read_buffer(g, "out")[:32 * 64] for g in range(4)]
    assert np.abs(outs[0]).max() > 0
    assert all(np.array_equal(outs[0], o) for o in outs)      # every TP rank holds the layer output
    # the attention residual differs from its input: attention and the all-reduce did something
    assert not np.array_equal(layer.read_buffer(0, "h1")[:2048], layer.read_buffer(0, "x")[:2048])
    for phase in ("norm", "qkv", "attention", "o_proj", "residual", "ffn", "allreduce"):
        assert st[f"system.block.{phase}_time_us"] > 0, phase


def test_two_all_reduces_move_two_n_minus_one_over_n_each(layer):
    s = layer.layer.shape
    st = layer.stats
    links = layer.cfg.system.nvlink.links_per_gpu
    flags = s.channels * 2 * (s.tp - 1) * (s.tokens * s.hidden // (s.tp * s.channels * s.slice))
    for g in range(4):
        tx = sum(st[f"system.gpu{g}.nvlink{l}.tx_payload_bytes"] for l in range(links))
        assert tx == 2 * (s.tokens * s.hidden * 2 * 2 * (s.tp - 1) // s.tp + 8 * flags)


def test_attention_block_with_layernorm_and_two_sequences(tmp_path):
    model = tmp_path / "tiny_ln.yaml"
    model.write_text(LN_MODEL)
    sim = simulate(LAYER, f"workload.block.model={model}", "workload.block.kind=attention",
                   "system.num_gpus=2", "workload.block.tp=2")
    assert sim.layer.shape.batch == 2 and sim.layer.shape.heads_t == 1
    assert sim.stats["system.block.output_max_abs_error"] == 0.0
    assert np.abs(sim.read_buffer(1, "h1")[:64 * 64]).max() > 0


def test_attention_block_tp_none_single_gpu():
    sim = simulate(LAYER, "system.num_gpus=1", "workload.block.tp=1",
                   "workload.block.scheme=tp_none", "workload.block.kind=attention")
    assert sim.stats["system.block.output_max_abs_error"] == 0.0
    assert sim.stats["system.block.allreduce_time_us"] == 0.0


def test_reference_attention_is_within_its_bound_of_exact_attention():
    """block_reference's online-softmax order against float64 softmax(Q K^T / sqrt(d)) V: the
    bound its docstring derives ((tiles + Bc + d) fp32 roundings of convex combinations of V,
    then one bf16 rounding of the output)."""
    rng = np.random.default_rng(5)
    S, d, tile = 64, 32, 16
    q, k, v = (to_bf16(rng.uniform(-2, 2, (S, d)).astype(np.float32)) for _ in range(3))
    scale = np.float32(1 / np.sqrt(d))
    got = flash_attention(q, k, v, tile, scale)
    exact = attention_exact(q, k, v, scale)
    vmax = np.abs(v).max()
    # bf16(P) rounding (2^-8 relative on each weight) dominates the fp32 terms
    bound = ((S // tile + tile + d) * 2.0 ** -24 + 2.0 ** -8) * vmax + 2.0 ** -8 * np.abs(exact)
    assert (np.abs(got - exact) <= bound).all()
    # and it is a real check: not all outputs equal the first row's value
    assert np.abs(got - exact).max() > 0


def test_reference_norms():
    rng = np.random.default_rng(6)
    x = to_bf16(rng.uniform(-3, 3, (4, 64)).astype(np.float32))
    g, b = np.ones(64, np.float32), np.zeros(64, np.float32)
    rms = norm(x, g, b, "rmsnorm", 1e-6)
    want = x / np.sqrt((x.astype(np.float64) ** 2).mean(axis=1, keepdims=True) + 1e-6)
    assert np.abs(rms - want).max() <= 2.0 ** -8 * np.abs(want).max()
    ln = norm(x, g, b, "layernorm", 1e-5)
    xc = x - x.astype(np.float64).mean(axis=1, keepdims=True)
    want = xc / np.sqrt((xc ** 2).mean(axis=1, keepdims=True) + 1e-5)
    assert np.abs(ln - want).max() <= 2.0 ** -8 * np.abs(want).max()


@pytest.mark.parametrize("sets, words", [
    (["workload.block.tp=8", "system.num_gpus=8"],
     "workload.block.tp: 8 does not divide tiny_dense's heads (4)"),
    (["workload.block.attention_tile=12"], "workload.block.attention_tile: 12 does not divide"),
    (["workload.block.attention_tile=256"], "workload.block.attention_tile: 256 does not divide"),
    (["workload.block.tokens=48"], "workload.block.tokens: 48 is not a whole number"),
])
def test_attention_bad_input_exits_2_naming_the_key(tmp_path, sets, words):
    args = [a for s in sets for a in ("--set", s)]
    r = run_cli("run", f"configs/{LAYER}", "-o", tmp_path / "o", "--quiet", *args)
    assert r.returncode == 2, r.stderr
    assert words in r.stderr and "Traceback" not in r.stderr


def test_a_model_whose_heads_do_not_divide_hidden_is_rejected(tmp_path):
    model = tmp_path / "bad.yaml"
    model.write_text(LN_MODEL.replace("heads: 2", "heads: 3"))
    r = run_cli("run", f"configs/{LAYER}", "-o", tmp_path / "o", "--quiet",
                "--set", f"workload.block.model={model}")
    assert r.returncode == 2
    assert "block_model.heads: 3 does not divide hidden (64)" in r.stderr
    assert "Traceback" not in r.stderr


def test_attention_block_engines_agree(tmp_path):
    """The Numba and pure-Python engines give identical stats (the new vector semantics and the
    transposed mma included)."""
    sets = [a for s in ("workload.block.kind=attention", "system.num_gpus=2", "workload.block.tp=2")
            for a in ("--set", s)]
    out = cli_stats_per_engine(f"configs/{LAYER}", tmp_path, *sets)
    assert out["numba"]["system.block.output_max_abs_error"] == 0.0
    assert out["numba"] == out["python"]


def test_sequence_parallel_layer_is_exact_on_every_shard_and_moves_the_same_bytes(layer):
    """sp_ring: reduce-scatter + all-gather instead of each all-reduce; GPU g's output shard
    (chunk (g + 1) % t) is the tp_ring layer's output bit for bit, and the ring halves together put
    the all-reduce's 2(t-1)/t of the buffer (plus flags) on each GPU's links."""
    sim = simulate(LAYER, "workload.block.scheme=sp_ring")
    st = sim.stats
    assert st["system.block.output_max_abs_error"] == 0.0
    assert not sim.violations
    n = 32 * 64 // 4
    for g in range(4):
        c = (g + 1) % 4
        assert np.array_equal(sim.read_buffer(g, "out")[c * n:(c + 1) * n],
                              layer.read_buffer(g, "out")[c * n:(c + 1) * n])
    assert st["system.block.reduce_scatter_time_us"] > 0 and st["system.block.all_gather_time_us"] > 0
    links = sim.cfg.system.nvlink.links_per_gpu
    for g in range(4):
        sp = sum(st[f"system.gpu{g}.nvlink{l}.tx_payload_bytes"] for l in range(links))
        tp = sum(layer.stats[f"system.gpu{g}.nvlink{l}.tx_payload_bytes"] for l in range(links))
        assert sp == tp


def test_sequence_parallelism_needs_an_attention_block(tmp_path):
    r = run_cli("run", "configs/experiments/tp/functional.yaml", "-o", tmp_path / "o", "--quiet",
                "--set", "workload.block.scheme=sp_ring")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "workload.block.scheme: sp_ring shards the norms" in r.stderr


def test_ring_slice_is_the_largest_divisor_under_the_cap():
    from moehub_arch.workloads.tp.shape import _ring_slice
    assert _ring_slice(262144, 65536) == 65536            # Mega-GPT-4B: a power of two
    assert _ring_slice(294912, 65536) == 49152            # Mega-GPT-8B, LLaMA-7B: 2^15 x 9
    assert _ring_slice(256, 65536) == 256
    assert _ring_slice(64 * 7 * 11, 1000) == 704          # the largest multiple of 64 dividing 4928
    assert _ring_slice(21, 65536) == 21                   # no multiple of 64: the largest divisor
