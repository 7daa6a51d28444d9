"""The attention and norm instructions (isa/base.yaml, "attention and norms"): each checked
element for element against NumPy (block_reference: fp32 rounding once per operation, exp and
rsqrt in float64 rounded once), mma.bf16.bt.bl2 against the transposed product, the special-function
unit's throughput in the timing, and a clear error for rows that do not tile n."""
import numpy as np
import pytest
from conftest import CONFIGS, run_cli

from moehub_arch.workloads.block_reference import exp_f32, row_sum, row_sumsq, rsqrt_f32
from moehub_arch.workloads.reference import gemm_seq, to_bf16

# s: f32 [4][8]; v: f32 [4]; q: bf16 [4][16]; k: bf16 [8][16]; o: f32 results (word offsets below)
KERNEL = """
.kernel ops
.param s
.param v
.param q
.param k
.param o
.param c
    vrow_max.f32 %o, %s, 8, 32
    add r1, %o, 16
    vrow_sum.f32 r1, %s, 8, 32
    add r1, %o, 32
    vrow_sumsq.f32 r1, %s, 8, 32
    add r1, %o, 64
    vrow_sub.f32 r1, %s, %v, 8, 32
    add r1, %o, 192
    vrow_mul.f32 r1, %s, %v, 8, 32
    add r1, %o, 320
    vrow_div.f32 r1, %s, %v, 8, 32
    add r1, %o, 448
    vrow_add.f32 r1, %s, %v, 8, 32
    add r1, %o, 576
    vcol_mul.f32 r1, %s, %s, 8, 32
    add r1, %o, 704
    vcol_add.f32 r1, %s, %s, 8, 32
    add r1, %o, 832
    vexp.f32 r1, %s, 32
    add r1, %o, 960
    add r2, %o, 32
    vrsqrt.f32 r1, r2, 4
    add r1, %o, 1088
    vsub.f32 r1, %s, %v, 4
    add r1, %o, 1104
    vmax.f32 r1, %s, %v, 4
    add r1, %o, 1120
    vcvt.f32.bf16 r1, %q, 16
    add r1, %o, 1184
    vrow_mul.f32 r1, %s, %v, 32, 32
    mma.bf16.bt.bl2 %c, %q, %k, 4, 8, 16
    exit
"""


def _config(tmp_path, kernel=KERNEL, mode="functional"):
    (tmp_path / "k.s").write_text(kernel)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"""extends: {CONFIGS / 'systems' / 'dgx_h100.yaml'}
system: {{num_gpus: 2}}
workload:
  mode: {mode}
  kernel_files: [{tmp_path / 'k.s'}]
  buffers:
    s: {{bytes: 128B, init: random, dtype: f32}}
    v: {{bytes: 16B, init: random, dtype: f32}}
    q: {{bytes: 128B, init: random, dtype: bf16}}
    k: {{bytes: 256B, init: random, dtype: bf16}}
    o: {{bytes: 2KB, dtype: f32}}
    c: {{bytes: 128B, dtype: f32}}
  launches:
    - kernel: ops
      grid: 1
      gpus: [0]
      params: {{s: "@s", v: "@v", q: "@q", k: "@k", o: "@o", c: "@c"}}
""")
    return cfg


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    from moehub_arch.config import load_config
    from moehub_arch.simulation import Simulation
    sim = Simulation(load_config(_config(tmp_path_factory.mktemp("attn_ops"))))
    sim.run()
    return sim


def test_row_and_column_ops_match_numpy(ops):
    s = ops.read_buffer(0, "s")[:32].reshape(4, 8)
    v = ops.read_buffer(0, "v")[:4]
    o = ops.read_buffer(0, "o")
    f = np.float32
    assert np.array_equal(o[0:4], s.max(axis=1))
    assert np.array_equal(o[4:8], row_sum(s))
    assert np.array_equal(o[8:12], row_sumsq(s))
    assert np.array_equal(o[16:48].reshape(4, 8), (s - v[:, None]).astype(f))
    assert np.array_equal(o[48:80].reshape(4, 8), (s * v[:, None]).astype(f))
    assert np.array_equal(o[80:112].reshape(4, 8), (s / v[:, None]).astype(f))
    assert np.array_equal(o[112:144].reshape(4, 8), (s + v[:, None]).astype(f))
    assert np.array_equal(o[144:176].reshape(4, 8), (s * s[0][None, :]).astype(f))
    assert np.array_equal(o[176:208].reshape(4, 8), (s + s[0][None, :]).astype(f))
    # cols = n: a row operation with one row is a scalar one (b[0] for every element)
    assert np.array_equal(o[296:328], (s.reshape(-1) * v[0]).astype(f))


def test_elementwise_exp_rsqrt_sub_max_cvt_match_numpy(ops):
    s = ops.read_buffer(0, "s")[:32]
    v = ops.read_buffer(0, "v")[:4]
    o = ops.read_buffer(0, "o")
    assert np.array_equal(o[208:240], exp_f32(s))
    assert np.array_equal(o[240:244], rsqrt_f32(o[8:12]))
    # float64-then-round is within one ulp of NumPy's float32 functions (rtol: 2 ulp at worst)
    assert np.allclose(o[208:240], np.exp(s), rtol=2 ** -22, atol=0)
    assert np.allclose(o[240:244], 1 / np.sqrt(o[8:12]), rtol=2 ** -22, atol=0)
    assert np.array_equal(o[272:276], (s[:4] - v).astype(np.float32))
    assert np.array_equal(o[276:280], np.maximum(s[:4], v))
    assert np.array_equal(o[280:296], ops.read_buffer(0, "q")[:16])


def test_mma_bt_is_the_product_with_the_transposed_tile(ops):
    q = ops.read_buffer(0, "q")[:64].reshape(4, 16)
    k = ops.read_buffer(0, "k")[:128].reshape(8, 16)
    c = ops.read_buffer(0, "c")[:32].reshape(4, 8)
    assert np.abs(c).max() > 0
    assert np.array_equal(c, gemm_seq(q, k.T))


def test_exp_runs_on_the_special_function_unit(tmp_path):
    """vexp over n elements occupies the vector unit n / 16 cycles (16 SFU results per clock per
    SM), vsub n / 128 (the fp32 lanes): eight times less."""
    from moehub_arch.config import load_config
    from moehub_arch.simulation import Simulation
    busy = {}
    for op in ("vexp.f32 %smem, %smem, 4096", "vsub.f32 %smem, %smem, %smem, 4096"):
        kernel = KERNEL[:KERNEL.index("    vrow_max")] + f".smem 32KB\n    {op}\n    exit\n"
        sim = Simulation(load_config(_config(tmp_path, kernel, mode="timing")))
        sim.run()
        busy[op.split()[0]] = sum(sim.stats[f"system.gpu0.sm{i}.vector_busy_ticks"]
                                  for i in range(sim.cfg.system.gpu.num_sms))
    period = 1e12 / 1.83e9
    assert busy["vexp.f32"] == pytest.approx(4096 / 16 * period, abs=2)
    assert busy["vsub.f32"] == pytest.approx(4096 / 128 * period, abs=2)


def test_rows_that_do_not_tile_n_are_a_clear_runtime_error(tmp_path):
    kernel = KERNEL[:KERNEL.index("    vrow_max")] + "    vrow_max.f32 %o, %s, 5, 32\n    exit\n"
    r = run_cli("run", _config(tmp_path, kernel), "-o", tmp_path / "o")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "k.s:" in r.stderr


def test_a_row_op_without_cols_is_an_isa_error(tmp_path):
    isa = tmp_path / "x.yaml"
    isa.write_text("instructions:\n  vrm: {semantic: vec, subop: row_max, unit: vector, dtype: f32, "
                   "operands: [dst, a, n], latency: 1, ii: 1, description: bad}\n")
    from moehub_arch.isa.loader import IsaError, load_isa
    with pytest.raises(IsaError, match="needs operand 'cols'"):
        load_isa([isa])
