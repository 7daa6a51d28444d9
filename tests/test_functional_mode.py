"""Functional mode computes real results (checked against NumPy) with the same timing as
timing-only mode: a tiled GEMM over several SMs and a put/flag/get exchange between GPUs."""
import numpy as np
import pytest

from conftest import model_stats, read_stats_json, run_cli, simulate


@pytest.fixture(scope="module")
def gemm():
    return simulate("examples/tiled_gemm.yaml")


@pytest.fixture(scope="module")
def exchange():
    return simulate("examples/put_get_exchange.yaml")


def test_tiled_gemm_equals_numpy(gemm):
    M = N = K = 128
    a = gemm.read_buffer(0, "a").reshape(M, K)      # bf16 values widened to f32 (exact)
    b = gemm.read_buffer(0, "b").reshape(K, N)
    c = gemm.read_buffer(0, "c").reshape(M, N)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    # fp32 accumulation over k = 128 of products of values in [-1, 1)
    np.testing.assert_allclose(c, ref, rtol=0, atol=K * np.finfo(np.float32).eps)
    assert np.abs(c).max() > 1.0                    # a real product, not zeros
    used = [i for i in range(132) if gemm.stats[f"system.gpu0.sm{i}.tensor_busy_ticks"] > 0]
    assert len(used) == 8                           # spread over 8 SMs, one TB each
    assert sum(gemm.stats[f"system.gpu0.sm{i}.tbs_launched"] for i in used) == 8


def test_put_get_exchange_moves_every_byte(exchange):
    G, B = 4, 5000
    src = [exchange.buffer_bytes(g, "src").copy() for g in range(G)]
    assert len({s.tobytes() for s in src}) == G     # different data on every GPU
    for g in range(G):
        recv = exchange.buffer_bytes(g, "recv").reshape(G, B)
        pulled = exchange.buffer_bytes(g, "pulled").reshape(G, B)
        flags = exchange.read_buffer(g, "flags", "i64")[:G]
        for p in range(G):
            if p == g:
                assert not recv[p].any() and not pulled[p].any() and flags[p] == 0
            else:
                assert np.array_equal(recv[p], src[p]), (g, p)      # put from p
                assert np.array_equal(pulled[p], src[g]), (g, p)    # get of what g put on p
                assert flags[p] == 1
    # 5000 B = 19 full packets + one of 136 B, per pair, for the puts and for the get responses
    s = exchange.stats
    assert sum(s[f"system.gpu{g}.hub.rx_payload_bytes"] for g in range(G)) == 2 * G * (G - 1) * B + \
        G * (G - 1) * 8   # puts + get data + flag words


@pytest.mark.parametrize("config, fixture", [("examples/tiled_gemm.yaml", "gemm"),
                                             ("examples/put_get_exchange.yaml", "exchange")])
def test_timing_mode_gives_the_same_timing(request, config, fixture):
    functional = request.getfixturevalue(fixture)
    timing = simulate(config, "workload.mode=timing")
    assert model_stats(timing.stats) == model_stats(functional.stats)


def test_python_engine_computes_the_same_exchange(tmp_path):
    # 1000 B per peer instead of 5000 (a fifth of the packets; still a partial last packet)
    small = "workload.launches.0.params.bytes=1000"
    r = run_cli("run", "configs/examples/put_get_exchange.yaml", "-o", tmp_path, "--engine",
                "python", "--quiet", "--set", small)
    assert r.returncode == 0, r.stderr
    slow = {k: v for k, v in read_stats_json(tmp_path).items() if not k.startswith("host")}
    fast = simulate("examples/put_get_exchange.yaml", small)
    assert slow == model_stats(fast.stats)
    for g in range(4):     # the functional result of the smaller exchange, on both engines alike
        for p in range(4):
            if p != g:
                assert np.array_equal(fast.read_buffer(g, "recv")[p * 1000:(p + 1) * 1000],
                                      fast.read_buffer(p, "src")[:1000])
