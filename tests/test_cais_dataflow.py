"""CAIS's graph-level dataflow (workload.block.cais_dataflow; workloads/kernels/tp/cais_dataflow.s
kernel tp_cais_dataflow): after the QKV AG-GEMM and attention, one persistent kernel runs the
output projection as a GEMM-RS (red.cais), the residual and the second norm on each row tile's
home as soon as the tile's sums are in, the FFN's gate/up as an AG-GEMM (ld.cais of the normed
tile), the down GEMM as a GEMM-RS and the last residual - per-row-tile dependencies in memory.

- the tiny layer at t = 4 (configs/experiments/tp/functional_transformer.yaml) gives the NumPy
  reference bit for bit (the merge unit's order: FP32 in rank order, one rounding at the home);
- exact merge counts: the same lines as the collective kernels (2 gathers + 2 reductions of
  T x H bf16), each completed by all four GPUs, read or written home once; no eviction; also with
  three groups of row tiles and LayerNorm;
- five launches (norm, all-gather, QKV, attention, the dataflow kernel) instead of cais's twelve,
  four with cais_fusion (the QKV projection an AG-GEMM);
- the Numba and pure-Python engines give identical stats;
- cais_dataflow is scheme cais's default for kind transformer; kind attention and the other
  schemes ignore it (their kernels unchanged);
- bad input (exit 2, naming the key): more thread blocks than SMs (the dataflow's jobs wait across
  thread blocks: every one must be resident), a window of 0 jobs or of more than 4095.
"""
import pytest

from conftest import (CONFIGS, assert_cais_lines_merged, cli_stats_per_engine, load, run_cli,
                      simulate)

LAYER = "experiments/tp/functional_transformer.yaml"
DATAFLOW = ("workload.block.scheme=cais",)      # the dataflow is cais's default
LINE = 128


@pytest.mark.parametrize("fusion, kernels, syncs", [
    # the first norm's all-gather stays a kernel (2 channels x 4 slices: one group sync each)
    (False, ["tp_norm", "cais_tp_collective", "tp_gemm", "attention", "tp_cais_dataflow"], 8),
    # cais_fusion: the QKV projection pulls its row tiles itself (one sync per row tile of 16)
    (True, ["tp_norm", "tp_gemm_cais", "attention", "tp_cais_dataflow"], 2)])
def test_dataflow_layer_is_the_reference_bit_for_bit_with_every_line_merged(fusion, kernels,
                                                                             syncs):
    sim = simulate(LAYER, *DATAFLOW, f"workload.block.cais_fusion={str(fusion).lower()}")
    st = sim.stats
    # the gathers of xn and hn and the reductions into ar1 and ar2: 4 buffers of 32 tokens x 64
    # hidden x 2 B, each line allocated once (on the switch its address hashes to)
    assert_cais_lines_merged(sim, 4 * 32 * 64 * 2 // LINE, 4)
    assert [l.kernel for l in sim.cfg.workload.launches] == kernels
    # the group syncs are the QKV side's: the dataflow kernel coordinates through its window
    assert (st["system.cais.sync_releases"], st["system.cais.sync_arrivals"]) == (syncs, 4 * syncs)
    assert st["system.block.dataflow_time_us"] > 0.0
    assert st["system.block.o_proj_time_us"] == st["system.block.ffn_time_us"] == 0.0


def test_dataflow_with_several_groups_of_row_tiles_and_layernorm(tmp_path):
    """96 tokens in row tiles of 8: 12 tiles, 3 groups of one tile per home (the tiny layer has
    one); LayerNorm instead of RMSNorm (the second norm runs inside the dataflow kernel)."""
    from moehub_arch.paths import data_root
    model = tmp_path / "tiny_ln.yaml"
    model.write_text((data_root() / "workloads/blocks/tiny_dense.yaml").read_text()
                     .replace("norm: rmsnorm", "norm: layernorm")
                     .replace("name: tiny_dense", "name: tiny_dense_ln"))
    sim = simulate(LAYER, *DATAFLOW, f"workload.block.model={model}", "workload.block.tokens=96",
                   "workload.block.tile_rows=8")
    assert_cais_lines_merged(sim, 4 * 96 * 64 * 2 // LINE, 4)


def test_dataflow_is_cais_default_for_whole_layers_only():
    def kernels(*sets):
        return [l.kernel for l in _expanded(LAYER, *sets).workload.launches]
    assert "tp_cais_dataflow" in kernels(*DATAFLOW)
    assert "tp_cais_dataflow" not in kernels(*DATAFLOW, "workload.block.cais_dataflow=false")
    assert "tp_cais_dataflow" not in kernels(*DATAFLOW, "workload.block.kind=attention")
    assert "tp_cais_dataflow" not in kernels("workload.block.scheme=sp_ring")


def _expanded(config, *sets):
    from moehub_arch.workloads.block import TransformerBlock
    return TransformerBlock(load(config, *sets)).expanded_config()


def test_dataflow_engines_agree(tmp_path):
    out = cli_stats_per_engine(CONFIGS / LAYER, tmp_path, *(f"--set={s}" for s in DATAFLOW))
    assert out["numba"]["system.block.output_max_abs_error"] == 0.0
    assert out["numba"] == out["python"]


@pytest.mark.parametrize("sets, key", [
    (DATAFLOW + ("workload.block.gemm_tbs=200",), "workload.block.gemm_tbs"),
    (DATAFLOW + ("workload.block.cais_window=0",), "workload.block.cais_window"),
    (DATAFLOW + ("workload.block.cais_window=5000",), "workload.block.cais_window"),
])
def test_dataflow_bad_input_exits_2(tmp_path, sets, key):
    r = run_cli("run", CONFIGS / LAYER, *(a for s in sets for a in ("--set", s)), "-o", tmp_path)
    assert r.returncode == 2, r.stderr
    assert key in r.stderr and "Traceback" not in r.stderr
