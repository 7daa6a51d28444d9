"""The tile-streaming expert kernel (workloads/kernels/lib/streaming.s, run alone by
workloads/kernels/ubench/streaming_gemm.s): every job done exactly once and the SwiGLU FFN equal
to the NumPy reference, whatever the lag between a tile's gate/up and down jobs."""
import numpy as np
import pytest

from conftest import mini_system, simulate
from moehub_arch.workloads.reference import expert_ffn

E, ROWS, H, I, TILE, N = 2, 32, 64, 32, 16, 16      # 4 row tiles; Ju = 2, Jd = 4 jobs per tile


def _run(lag, sms=4, swizzle=16):
    buf = "workload.buffers."
    return simulate("ubench/streaming_gemm.yaml", *mini_system(num_gpus=2, num_sms=sms),
                    "workload.mode=functional",
                    *(f"{buf}{b}={{bytes: {n}B, init: random, dtype: bf16}}"
                      for b, n in (("x", E * ROWS * H * 2), ("wg", E * H * I * 2), ("wu", E * H * I * 2),
                                   ("wd", E * I * H * 2))),
                    f"{buf}hh={{bytes: {E * ROWS * I * 2}B, dtype: bf16}}",
                    f"{buf}y={{bytes: {E * ROWS * H * 2}B, dtype: bf16}}",
                    f"{buf}jobs={{bytes: {8 * (1 + E * ROWS // TILE)}B, region: control, dtype: i64}}",
                    *(f"workload.launches.0.params.{k}={v}" for k, v in
                      (("experts", E), ("rows", ROWS), ("hidden", H), ("ffn", I), ("tile_rows", TILE),
                       ("n_tile", N), ("lag", lag), ("swizzle", swizzle))))


def _columns(tiles, k, n):
    """[E][cols / N][k][N] column tiles -> [E][k][cols]."""
    return tiles.reshape(E, n // N, k, N).transpose(0, 2, 1, 3).reshape(E, k, n)


@pytest.mark.parametrize("lag, swizzle", [(0, 16), (1, 16), (3, 16), (7, 16),   # lag 0: the
                                          (0, 1), (1, 3), (0, 3)])   # scheduler's choice; 7: more
def test_streaming_kernel_computes_every_tile_once(lag, swizzle):  # than the tiles; swizzle 3:
    sim = _run(lag, swizzle=swizzle)                                # groups of 3 and 1 tiles
    x = sim.read_buffer(0, "x").reshape(E, ROWS, H)
    wg = _columns(sim.read_buffer(0, "wg"), H, I)
    wu = _columns(sim.read_buffer(0, "wu"), H, I)
    wd = _columns(sim.read_buffer(0, "wd"), I, H)
    y = sim.read_buffer(0, "y").reshape(E, ROWS, H)
    for e in range(E):
        ref = expert_ffn(x[e], wg[e], wu[e], wd[e])
        assert np.array_equal(y[e], ref), e          # bit-identical (the kernels' arithmetic)
    assert np.abs(y).max() > 0
    jobs = sim.read_buffer(0, "jobs", "i64")
    tiles = E * ROWS // TILE
    assert list(jobs[1:1 + tiles]) == [I // N] * tiles      # every gate/up job once per tile
    # the counter: every job of the tiles + lag blocks, plus the one each worker took past the end
    assert jobs[0] >= tiles * (I // N + H // N) + 4


def test_lag_changes_the_order_not_the_bytes():
    a, b = _run(1), _run(0)
    for stat in ("system.gpu0.l2.shared_read_bytes", "system.gpu0.hbm.read_bytes"):
        assert a.stats[stat] == b.stats[stat], stat
    # writes differ only by the job counter's atomics: a larger lag adds blocks of empty job slots
