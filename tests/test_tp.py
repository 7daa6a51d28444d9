"""Tensor parallelism: the ring all-reduce of scheme tp_ring (workloads/kernels/lib/ring_allreduce.s).

- functional: every GPU's result is bit-identical to the NumPy sum in the ring's reduction order
  (reference.ring_allreduce_reference), in bf16 and fp32;
- conservation: each GPU puts exactly 2(P-1)/P of the buffer on its links (the ring's defining
  property, nccl-tests' busbw factor), plus one 8-byte flag per slice and step;
- the busbw report is algbw x 2(n-1)/n;
- the Numba and pure-Python engines give identical stats.
"""
import numpy as np
import pytest

from conftest import check_allreduce_output, cli_stats_per_engine, run_cli, simulate
from moehub_arch.workloads.reference import ring_allreduce_reference

CONFIG = "ubench/allreduce_ring.yaml"


def tiny(P=4, channels=2, slice_elems=256, slices=2, bf16=1, mode="functional"):
    elems = P * channels * slice_elems * slices
    return (f"system.num_gpus={P}", f"workload.mode={mode}", f"workload.launches.0.grid={channels}",
            f"workload.launches.0.params.elems={elems}",
            f"workload.launches.0.params.slice={slice_elems}",
            f"workload.launches.0.params.bf16={bf16}",
            f"workload.buffers.send.dtype={'bf16' if bf16 else 'f32'}")


@pytest.mark.parametrize("bf16", [1, 0])
def test_ring_allreduce_equals_numpy_in_ring_order(bf16):
    P = 4
    sim = simulate(CONFIG, *tiny(P=P, bf16=bf16))
    # the order matters in bf16: GPU 0 first for every chunk rounds differently somewhere
    check_allreduce_output(sim, P, P * 2 * 256 * 2, bf16, ring_allreduce_reference)


def test_ring_allreduce_moves_two_n_minus_one_over_n_of_the_buffer():
    P, C, S, J = 4, 2, 1024, 2
    sim = simulate(CONFIG, *tiny(P=P, channels=C, slice_elems=S, slices=J, mode="timing"))
    nbytes = P * C * S * J * 2
    flags = C * 2 * (P - 1) * J
    links = sim.cfg.system.nvlink.links_per_gpu
    for g in range(P):
        tx = sum(sim.stats[f"system.gpu{g}.nvlink{l}.tx_payload_bytes"] for l in range(links))
        assert tx == nbytes * 2 * (P - 1) // P + 8 * flags
    st = sim.stats
    assert st["system.report.allreduce_busbw_GBps"] == pytest.approx(
        st["system.report.allreduce_algbw_GBps"] * 2 * (P - 1) / P)


def test_ring_allreduce_engines_agree(tmp_path):
    sets = [a for s in tiny(P=4, channels=1, slice_elems=128, slices=1) for a in ("--set", s)]
    out = cli_stats_per_engine(f"configs/{CONFIG}", tmp_path, *sets)
    assert out["numba"] == out["python"]


# ---------------------------------------------------------------- transformer block (workload.block)
BLOCK = "experiments/tp/functional.yaml"


def test_ffn_block_tp4_tp_ring_output_is_the_numpy_reference_bit_for_bit():
    sim = simulate(BLOCK)
    st = sim.stats
    assert st["system.block.output_max_abs_error"] == 0.0
    assert not sim.violations
    outs = [sim.read_buffer(g, "out") for g in range(4)]
    assert np.abs(outs[0]).max() > 0                       # a real result, not zeros
    assert all(np.array_equal(outs[0], o) for o in outs)   # every TP rank holds the same sum
    # the all-reduce added the four partials: the output is not any single GPU's partial
    assert not np.array_equal(outs[0], sim.read_buffer(0, "ys"))
    # conservation: each GPU put 2(t-1)/t of the T x H bf16 output on NVLink (+ 8 B flags)
    s = sim.layer.shape
    flags = s.channels * 2 * (s.tp - 1) * (s.tokens * s.hidden // (s.tp * s.channels * s.slice))
    links = sim.cfg.system.nvlink.links_per_gpu
    for g in range(4):
        tx = sum(st[f"system.gpu{g}.nvlink{l}.tx_payload_bytes"] for l in range(links))
        assert tx == s.tokens * s.hidden * 2 * 2 * (s.tp - 1) // s.tp + 8 * flags


def test_ffn_block_tp_none_single_gpu_reference():
    sim = simulate(BLOCK, "system.num_gpus=1", "workload.block.tp=1",
                   "workload.block.scheme=tp_none")
    assert sim.stats["system.block.output_max_abs_error"] == 0.0
    assert sim.stats["system.block.allreduce_time_us"] == 0.0
    assert np.abs(sim.read_buffer(0, "ys")).max() > 0


@pytest.mark.parametrize("sets, words", [
    (["workload.block.tp=3", "system.num_gpus=3"],
     "workload.block.tp: 3 does not divide tiny_dense's heads (4)"),
    (["workload.block.tp=2"], "workload.block.tp: 2, but system.num_gpus is 4"),
    (["workload.block.scheme=tp_none"], "workload.block.scheme: tp_none is the single-GPU"),
    (["workload.block.model=no_such_model"], "workload.block.model: no block model 'no_such_model'"),
    (["workload.block.allreduce_channels=3"], "workload.block.allreduce_channels: the all-reduce"),
])
def test_block_bad_input_exits_2_naming_the_key(tmp_path, sets, words):
    args = [a for s in sets for a in ("--set", s)]
    r = run_cli("run", f"configs/{BLOCK}", "-o", tmp_path / "o", "--quiet", *args)
    assert r.returncode == 2
    assert words in r.stderr and "Traceback" not in r.stderr
