"""Instructions the MoE layer kernels rely on: vector loads (ld.v8), posted reductions (red.add),
mixed-type vector ops (vcvt.bf16.f32, vsilu_mul.bf16.f32, vaxpy.f32.bf16), mma operands read
through the L2, and launch host delays - each checked against NumPy or exact counts, plus clear
runtime errors for misuse."""
import numpy as np
import pytest
from conftest import CONFIGS, read_stats_json, run_cli

from moehub_arch.workloads.reference import silu, to_bf16

KERNEL = """
.kernel ops
.param words
.param out
.param f
.param h
.param acc
.param w
.param a
.param b
.param c1
.param c2
    ld.v8 r8, [%words]
    mov r1, 0
store:
    shl r2, r1, 3
    add r2, r2, %out
    st [r2], r8
    mov r8, r9
    mov r9, r10
    mov r10, r11
    mov r11, r12
    mov r12, r13
    mov r13, r14
    mov r14, r15
    add r1, r1, 1
    blt r1, 8, store
    red.add %gpu, [%out+64], 5
    red.add %gpu, [%out+64], 7
    vcvt.bf16.f32 %h, %f, 64
    add r3, %h, 128
    add r4, %f, 256
    vsilu_mul.bf16.f32 r3, %f, r4, 64
    vaxpy.f32.bf16 %acc, %h, %w, 64
    mma.bf16 %c1, %a, %b, 16, 16, 32
    mma.bf16.l2 %c2, %a, %b, 16, 16, 32
    exit
"""


def _config(tmp_path, kernel=KERNEL, gpus="[0]", extra=""):
    (tmp_path / "k.s").write_text(kernel)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"""extends: {CONFIGS / 'systems' / 'dgx_h100.yaml'}
system: {{num_gpus: 2}}
workload:
  mode: functional
  kernel_files: [{tmp_path / 'k.s'}]
  buffers:
    words: {{bytes: 64B, init: arange, dtype: i64, region: control}}
    out: {{bytes: 128B, region: control, dtype: i64}}
    f: {{bytes: 512B, init: random, dtype: f32}}
    h: {{bytes: 256B, dtype: bf16}}
    acc: {{bytes: 256B, init: random, dtype: f32}}
    w: {{bytes: 8B, init: fill, value: 0.75, dtype: f32}}
    a: {{bytes: 1KB, init: random, dtype: bf16}}
    b: {{bytes: 1KB, init: random, dtype: bf16}}
    c1: {{bytes: 1KB, dtype: f32}}
    c2: {{bytes: 1KB, dtype: f32}}
  launches:
    - kernel: ops
      grid: 1
      gpus: {gpus}
      {extra}
      params: {{words: "@words", out: "@out", f: "@f", h: "@h", acc: "@acc", w: "@w", a: "@a",
               b: "@b", c1: "@c1", c2: "@c2"}}
""")
    return cfg


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    from moehub_arch.config import load_config
    from moehub_arch.simulation import Simulation
    tmp = tmp_path_factory.mktemp("ops")
    sim = Simulation(load_config(_config(tmp)))
    acc0 = sim.read_buffer(0, "acc").copy()
    sim.run()
    return sim, acc0


def test_vector_load_and_posted_reductions(ops):
    sim, _ = ops
    out = sim.read_buffer(0, "out", "i64")
    assert list(out[:8]) == list(range(8))          # ld.v8 filled r8..r15 with words 0..7
    assert out[8] == 12                              # two red.add: 5 + 7
    assert sim.stats["system.gpu0.hbm.atomics"] == 2


def test_mixed_type_vector_ops_match_numpy(ops):
    sim, acc0 = ops
    f = sim.read_buffer(0, "f")
    h = sim.read_buffer(0, "h")
    assert (h[:64] == to_bf16(f[:64])).all()
    assert (h[64:] == to_bf16((silu(f[:64]) * f[64:128]).astype(np.float32))).all()
    acc = sim.read_buffer(0, "acc")
    want = (acc0 + (np.float32(0.75) * h[:64]).astype(np.float32)).astype(np.float32)
    assert (acc == want).all()


def test_mma_through_l2_computes_the_same_and_charges_the_l2(ops):
    sim, _ = ops
    c1 = sim.read_buffer(0, "c1")
    c2 = sim.read_buffer(0, "c2")
    assert np.abs(c1).max() > 0 and (c1 == c2).all()
    # A (16x32) and B (32x16) bf16 of the second mma went through the L2
    assert sim.stats["system.gpu0.l2.shared_read_bytes"] == 2 * (16 * 32 * 2)


@pytest.mark.parametrize("bad, message", [
    ("    ld.v8 r28, [%words]\n    exit\n", "vector load past r31"),
    ("    red.add 1, [%out], 1\n    exit\n", "posted reductions are local"),
])
def test_misuse_is_a_clear_runtime_error(tmp_path, bad, message):
    kernel = KERNEL[:KERNEL.index("    ld.v8")] + bad
    r = run_cli("run", _config(tmp_path, kernel), "-o", tmp_path / "o")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "k.s:" in r.stderr and message in r.stderr


def test_launch_host_delay_postpones_the_kernel(tmp_path):
    r = run_cli("run", _config(tmp_path, extra="host_delay: 7us"), "-o", tmp_path / "o", "--quiet")
    assert r.returncode == 0, r.stderr
    s = read_stats_json(tmp_path / "o")
    launch = 3_000_000                                   # dgx_h100 kernel_launch_latency: 3 us
    assert s["system.gpu0.launch0.start_tick"] == launch + 7_000_000
