"""Per-launch shared memory (`.smem_job`, builder.launch_smem): a GEMM kernel declares `.smem`
for its largest job (160 KB: 128 x 128 elements of 10 bytes) and `.smem_job 10`; where `.smem`
fits the SM (H100, H800: 228 KB) it is kept, so nothing moves there; on a smaller SM (an RTX A6000:
100 KB) a launch's blocks reserve tile_rows x n_tile x 10 bytes, so HierMoE's testbed runs with
128 x 64 jobs, and a job that still does not fit is a clear error."""
import pytest

import conftest
from conftest import simulate
from moehub_arch.builder import launch_smem
from moehub_arch.config import flat_params
from moehub_arch.isa import AsmError, assemble_text, default_isa_paths, load_isa

KERNEL = ".kernel k\n.param tile_rows\n{extra}.smem 160KB\n.smem_job 10\n    exit\n"


@pytest.fixture(scope="module")
def isa():
    return load_isa(default_isa_paths()).resolve(flat_params(conftest.load("ubench/alltoall.yaml")))


def test_a_kernel_that_fits_keeps_its_smem_and_one_that_does_not_takes_its_jobs(isa):
    k = assemble_text(KERNEL.format(extra=".param n_tile\n"), isa, file="k.s").kernels["k"]
    assert (k.smem_bytes, k.smem_job) == (160 * 1024, 10)
    assert launch_smem(k, (128, 128), 228 * 1024) == 160 * 1024     # H100: unchanged
    assert launch_smem(k, (16, 32), 228 * 1024) == 160 * 1024       # small jobs too
    assert launch_smem(k, (128, 64), 100 * 1024) == 128 * 64 * 10   # A6000: 80 KB
    assert launch_smem(k, (128, 128), 100 * 1024) == 160 * 1024     # still too big: the builder says so


def test_smem_job_needs_the_parameters_that_size_the_job(isa):
    with pytest.raises(AsmError) as e:
        assemble_text(KERNEL.format(extra=""), isa, file="k.s")
    assert "k.s:" in str(e.value) and "tile_rows and n_tile" in str(e.value)
    with pytest.raises(AsmError, match="integer >= 1"):
        assemble_text(".kernel k\n.smem_job x\n    exit\n", isa, file="k.s")


@pytest.mark.parametrize("scheme", ["megatron", "deepep", "dysharp"])
def test_gemm_blocks_sized_by_their_jobs_compute_exactly(scheme):
    """On SMs of 100 KB (an A6000's) the 160 KB GEMM kernels reserve only their functional jobs'
    tile_rows x n_tile x 10 bytes: several GEMM blocks share an SM; the output is still exact."""
    sim = simulate("experiments/functional.yaml", f"scheme={scheme}",
                   "system.gpu.sm.smem_bytes=100KB")
    assert sim.stats["system.moe.output_max_abs_error"] == 0.0


A6000 = ("experiments/hiermoe/base_a6000_x4.yaml", "scheme=megatron", "system.nodes.count=2",
         "workload.layer.model=qwen3_30b_a3b", "workload.layer.tokens_per_gpu=16",
         "workload.mode=timing")


def test_the_a6000_testbed_runs_its_layer_with_128_by_64_jobs():
    sim = simulate(*A6000)
    assert sim.stats["system.moe.layer_time_us"] > 0


def test_a_job_too_big_for_the_a6000_is_a_clear_error(tmp_path):
    r = conftest.run_cli("run", f"configs/{A6000[0]}", *[a for s in A6000[1:] for a in ("--set", s)],
                         "--set", "workload.layer.gemm_n_tile=128", "-o", tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert ".smem_job" in r.stderr and "system.gpu.sm.smem_bytes" in r.stderr
