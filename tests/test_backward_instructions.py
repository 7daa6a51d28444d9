"""The training backward's instructions (isa/base.yaml, "Backward GEMMs"; vdsilu_mul): the mma
variants with A or B given transposed and the row strides lda / ldb checked against NumPy's
sequential-k product (reference.gemm_seq), vdsilu_mul element for element against
reference.dsilu (float64, rounded once), and a clear error for a stride shorter than a row."""
import numpy as np
import pytest
from conftest import CONFIGS, run_cli

from moehub_arch.workloads.reference import dsilu, gemm_seq

# x: bf16 [6][10] (a row-major matrix the GEMMs read column blocks of); y: bf16 [6][12];
# s, v: f32 [32]; o: f32 results; c*: f32 [.][.] accumulators
KERNEL = """
.kernel ops
.param x
.param y
.param s
.param v
.param o
.param c1
.param c2
.param c3
    add r1, %x, 4
    add r2, %y, 6
    mma.bf16.at %c1, r1, r2, 4, 5, 6, 10, 12
    mma.bf16.bt %c2, %x, %y, 3, 4, 5, 10, 12
    mma.bf16.s %c3, r1, r2, 3, 5, 4, 10, 12
    vdsilu_mul.f32 %o, %s, %v, 32
    exit
"""


def _config(tmp_path, kernel=KERNEL):
    (tmp_path / "k.s").write_text(kernel)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"""extends: {CONFIGS / 'systems' / 'dgx_h100.yaml'}
system: {{num_gpus: 2}}
workload:
  mode: functional
  kernel_files: [{tmp_path / 'k.s'}]
  buffers:
    x: {{bytes: 120B, init: random, dtype: bf16}}
    y: {{bytes: 144B, init: random, dtype: bf16}}
    s: {{bytes: 128B, init: random, dtype: f32}}
    v: {{bytes: 128B, init: random, dtype: f32}}
    o: {{bytes: 128B, dtype: f32}}
    c1: {{bytes: 80B, dtype: f32}}
    c2: {{bytes: 48B, dtype: f32}}
    c3: {{bytes: 60B, dtype: f32}}
  launches:
    - kernel: ops
      grid: 1
      gpus: [0]
      params: {{x: "@x", y: "@y", s: "@s", v: "@v", o: "@o", c1: "@c1", c2: "@c2", c3: "@c3"}}
""")
    return cfg


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    from moehub_arch.config import load_config
    from moehub_arch.simulation import Simulation
    sim = Simulation(load_config(_config(tmp_path_factory.mktemp("bwd_ops"))))
    sim.run()
    return sim


def test_mma_with_transposed_operands_and_strides_is_numpys_product(ops):
    x = ops.read_buffer(0, "x")[:60].reshape(6, 10)
    y = ops.read_buffer(0, "y")[:72].reshape(6, 12)
    c1 = ops.read_buffer(0, "c1")[:20].reshape(4, 5)
    c2 = ops.read_buffer(0, "c2")[:12].reshape(3, 4)
    c3 = ops.read_buffer(0, "c3")[:15].reshape(3, 5)
    assert min(np.abs(c).max() for c in (c1, c2, c3)) > 0
    # at: A^T with A = x[0:6, 2:6] (stored [k=6][m=4], stride 10), B = y[0:6, 3:8] (stride 12)
    assert np.array_equal(c1, gemm_seq(x[:, 2:6].T, y[:, 3:8]))
    # bt: A = x[0:3, 0:5] (stride 10), B^T = y[0:4, 0:5] (stored [n=4][k=5], stride 12)
    assert np.array_equal(c2, gemm_seq(x[:3, :5], y[:4, :5].T))
    # s: A = x[0:3, 2:6], B = y[0:4, 3:8]
    assert np.array_equal(c3, gemm_seq(x[:3, 2:6], y[:4, 3:8]))


def test_dsilu_mul_is_the_silu_derivative_times_b(ops):
    s = ops.read_buffer(0, "s")[:32]
    v = ops.read_buffer(0, "v")[:32]
    got = ops.read_buffer(0, "o")[:32]
    assert np.array_equal(got, (dsilu(s) * v).astype(np.float32))
    # the derivative itself: a central difference of silu in float64
    xd = s.astype(np.float64)
    silu = lambda z: z / (1 + np.exp(-z))
    fd = (silu(xd + 1e-6) - silu(xd - 1e-6)) / 2e-6
    assert np.allclose(dsilu(s), fd, rtol=1e-6, atol=1e-7)


def test_a_row_stride_shorter_than_the_row_is_a_clear_runtime_error(tmp_path):
    kernel = KERNEL.replace("mma.bf16.at %c1, r1, r2, 4, 5, 6, 10, 12",
                            "mma.bf16.at %c1, r1, r2, 4, 5, 6, 3, 12")
    r = run_cli("run", _config(tmp_path, kernel), "-o", tmp_path / "o")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "k.s:" in r.stderr
