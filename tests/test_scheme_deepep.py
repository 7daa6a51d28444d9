"""Scheme deepep (DeepEP normal-mode baseline): the layer's output matches the NumPy reference with
DeepEP's per-rank combine order, every token-expert pair is sent, received, computed and combined
exactly once, timing mode runs the same protocol, and the mediation phase shows up."""
import numpy as np
import pytest

import conftest
from conftest import model_stats, simulate

CONFIG = "experiments/functional.yaml"
P, T, K = 4, 64, 2                      # configs/experiments/functional.yaml (tiny_functional)


def run(*overrides):
    return simulate(CONFIG, "scheme=deepep", *overrides)


@pytest.fixture(scope="module")
def uniform():
    return run()


def check_layer(sim, gpus=P, tokens=T, k=K):
    conftest.check_layer(sim, gpus, tokens, k, min_reference=0)


def test_uniform_output_and_accounting(uniform):
    check_layer(uniform)
    assert uniform.stats["system.moe.output_max_abs_error"] == 0.0


@pytest.mark.parametrize("routing", ["skewed", "balanced"])
def test_other_routings(routing):
    check_layer(run(f"workload.layer.routing.kind={routing}"))


def test_tiny_rings_and_one_channel_back_pressure():
    # one ring row and one channel: every token waits for the receiver to free the slot
    sim = run("workload.layer.deepep.ring_rows=1", "workload.layer.deepep.comm_sms=2")
    check_layer(sim)


def test_more_channels_than_tokens_per_channel():
    # 50 channels of 2 tokens (the last ones empty), 37 tokens, 2 GPUs
    sim = run("workload.layer.deepep.comm_sms=100", "system.num_gpus=2",
              "workload.layer.tokens_per_gpu=37")
    check_layer(sim, gpus=2, tokens=37)


def test_timing_mode_runs_the_same_protocol(uniform):
    timing = run("workload.mode=timing")
    check_layer(timing)
    s = timing.stats
    opts = timing.cfg.workload.layer.deepep
    launch = timing.cfg.system.gpu.kernel_launch_latency
    # mediation = layout + notify kernels + the host round trip + the dispatch launch
    assert s["system.moe.phase.mediation_us"] > (opts.host_sync_latency + launch) * 1e-6
    for phase in ("dispatch", "expert", "combine"):
        assert s[f"system.moe.phase.{phase}_us"] > 0
    # timing mode keeps only the control region, which is all the protocol reads: same timeline
    strip = lambda st: {k: v for k, v in model_stats(st).items() if "output_max" not in k}
    assert strip(timing.stats) == strip(uniform.stats)


def test_host_round_trip_delays_dispatch():
    fast = run("workload.mode=timing", "workload.layer.deepep.host_sync_latency=0ns")
    slow = run("workload.mode=timing", "workload.layer.deepep.host_sync_latency=20us")
    d = slow.stats["system.moe.layer_time_us"] - fast.stats["system.moe.layer_time_us"]
    assert d == pytest.approx(20.0, abs=2.0)


def test_reference_per_rank_order():
    from moehub_arch.workloads.reference import moe_layer_reference, to_bf16, expert_ffn
    rng = np.random.default_rng(0)
    p, t, h, i, e, k, el = 1, 5, 8, 16, 4, 3, 2
    bf = lambda *shape: to_bf16(rng.uniform(-1, 1, shape).astype(np.float32))
    x, wg, wu, wd = bf(p, t, h), bf(e, h, i), bf(e, h, i), bf(e, i, h)
    idx = np.array([[[0, 1, 2], [3, 2, 0], [1, 3, 0], [2, 0, 3], [0, 1, 3]]])
    w = rng.uniform(0, 1, (p, t, k)).astype(np.float32)
    default = moe_layer_reference(x, idx, w, wg, wu, wd)
    assert np.array_equal(default, moe_layer_reference(x, idx, w, wg, wu, wd, combine="per_slot"))
    got = moe_layer_reference(x, idx, w, wg, wu, wd, combine="per_rank", local_experts=el)
    f32 = np.float32
    for tok in range(t):
        out = np.zeros(h, f32)
        for r in range(e // el):          # ranks ascending; slots ascending within a rank
            js = [j for j in range(k) if idx[0, tok, j] // el == r]
            if not js:
                continue
            part = np.zeros(h, f32)
            for j in js:
                y = expert_ffn(x[0, tok][None], wg[idx[0, tok, j]], wu[idx[0, tok, j]],
                               wd[idx[0, tok, j]])[0]
                part = (part + (w[0, tok, j] * y).astype(f32)).astype(f32)
            out = (out + to_bf16(part)).astype(f32)
        assert np.array_equal(got[0, tok], out), tok
    with pytest.raises(ValueError):
        moe_layer_reference(x, idx, w, wg, wu, wd, combine="per_rank")


def test_reference_rank_rows():
    # DeepEP's intranode benchmark combine (tests/test_intranode.py: the rows each rank received,
    # unweighted): per rank ascending holding any of the token's experts, the bf16 output row of
    # the token's lowest slot there, added in fp32; the weights are not used
    from moehub_arch.workloads.reference import moe_layer_reference, to_bf16, expert_ffn
    rng = np.random.default_rng(1)
    p, t, h, i, e, k, el = 1, 5, 8, 16, 4, 3, 2
    bf = lambda *shape: to_bf16(rng.uniform(-1, 1, shape).astype(np.float32))
    x, wg, wu, wd = bf(p, t, h), bf(e, h, i), bf(e, h, i), bf(e, i, h)
    idx = np.array([[[0, 1, 2], [3, 2, 0], [1, 3, 0], [2, 0, 3], [3, 1, 2]]])
    w = rng.uniform(0, 1, (p, t, k)).astype(np.float32)
    got = moe_layer_reference(x, idx, w, wg, wu, wd, combine="rank_rows", local_experts=el)
    assert np.array_equal(got, moe_layer_reference(x, idx, 2 * w, wg, wu, wd,
                                                   combine="rank_rows", local_experts=el))
    for tok in range(t):
        out = np.zeros(h, np.float32)
        for r in range(e // el):
            js = [j for j in range(k) if idx[0, tok, j] // el == r]
            if js:
                ex = idx[0, tok, js[0]]
                y = expert_ffn(x[0, tok][None], wg[ex], wu[ex], wd[ex])[0]
                out = (out + to_bf16(y)).astype(np.float32)
        assert np.array_equal(got[0, tok], out), tok
    ident = moe_layer_reference(x, idx, w, None, None, None, combine="rank_rows",
                                local_experts=el, identity_experts=True)
    ranks = [len({int(v) // el for v in idx[0, tok]}) for tok in range(t)]
    assert np.array_equal(ident[0], np.float32(ranks)[:, None] * x[0])
    with pytest.raises(ValueError):
        moe_layer_reference(x, idx, w, wg, wu, wd, combine="rank_rows")


def _combine_launch(sim):
    return next(li for li in sim.launches if li.kernel == "deepep_combine" and li.gpu == 0)


@pytest.mark.parametrize("smem", ["228KB", "100KB"])
def test_combine_per_channel_and_rank_fallback(smem):
    # DeepEP's benchmark setting (dispatch and combine alone, identity experts); 4 channels.
    # 228 KB: the 4 ranks' fp32 accumulators (4 x 28 KB) fit, one block of 4 warp groups per
    # channel side (sender, receiver). 100 KB (an Ampere-sized SM): they do not, one thread block
    # per stream - the same instruction streams, the same output, exactly.
    sim = run("workload.layer.deepep.kernels=communication", f"system.gpu.sm.smem_bytes={smem}")
    s, C = sim.stats, 4
    # DeepEP's benchmark combines the received rows unweighted (the reference's rank_rows): with
    # identity experts a token comes home as (ranks holding it) x its row, exactly
    assert sim.layer.plan.reference_kwargs["combine"] == "rank_rows"
    el = sim.layer.shape.local_experts
    for g in range(P):
        x = sim.read_buffer(g, "x", "bf16").reshape(T, -1).astype(np.float32)
        ranks = [len(set((sim.layer.routing.topk_idx[g, t] // el).tolist())) for t in range(T)]
        out = sim.read_buffer(g, "out", "f32").reshape(T, -1)
        assert np.array_equal(out, np.float32(ranks)[:, None] * x), g
    li = _combine_launch(sim)
    groups = int(sim.state.ln[li.index].groups)
    assert (groups, li.grid) == ((P, 2 * C) if smem == "228KB" else (1, 2 * C * P))
    assert s[f"system.gpu0.launch{li.index}.tbs"] == li.grid
    for name in ("sent", "received", "combined"):
        assert s[f"system.moe.rows_{name}"] == P * T * K, name
    assert s["system.moe.output_max_abs_reference"] > 0
    assert s["system.moe.output_max_abs_error"] == 0.0
    # shared memory: DeepEP's 192 KB of TMA staging on a Hopper-sized SM, none where it cannot
    # fit (a pre-Hopper build); the combine's 4 x 28 KB of accumulators exceed DeepEP's 96 KB, so
    # they are the channel block's whole footprint
    dispatch = next(l for l in sim.launches if l.kernel == "deepep_dispatch" and l.gpu == 0)
    assert int(sim.state.ln[dispatch.index].dynamic_smem) == (192 * 1024 if smem == "228KB" else 0)
    assert int(sim.state.ln[li.index].dynamic_smem) == 0
    # registers: DeepEP's 768 x 80 on a channel block; the per-stream fallback blocks are not
    # DeepEP's launch shape and hold none
    assert int(sim.state.ln[li.index].block_regs) == (61440 if smem == "228KB" else 0)
    assert int(sim.state.ln[dispatch.index].block_regs) == 61440


def test_a_run_stopped_before_its_kernels_end_reports_no_bandwidth():
    # --max-ticks / --max-wall stop a run with kernels unfinished: DeepEP's figures divide bytes by
    # kernel times, so the run ends cleanly without those of unfinished kernels (it once raised
    # from the stats code; what finished is reported: tests/test_partial_runs.py)
    sim = run("run.max_ticks=20us")
    assert sim.stopped and "max_ticks" in sim.stopped
    assert "system.moe.deepep.dispatch_GBps" not in sim.stats
    assert "system.moe.deepep.combine_GBps" not in sim.stats
