"""Scheme overlap (Comet / FlashDMoE-style software overlap): the layer's output equals the NumPy
reference, every token-expert pair is sent, received, computed and combined exactly once, GEMM
tiles start while rows are still arriving, and timing mode runs the same protocol."""
import pytest

import conftest
from conftest import model_stats, simulate

CONFIG = "experiments/functional.yaml"
P, T, K = 4, 64, 2                      # configs/experiments/functional.yaml (tiny_functional)


def run(*overrides):
    return simulate(CONFIG, "scheme=overlap", *overrides)


@pytest.fixture(scope="module")
def uniform():
    return run()


def check_layer(sim, gpus=P, tokens=T, k=K):
    conftest.check_layer(sim, gpus, tokens, k, min_reference=1.0)


def test_uniform_output_and_accounting(uniform):
    check_layer(uniform)
    assert uniform.stats["system.moe.output_max_abs_error"] == 0.0   # same arithmetic order


@pytest.mark.parametrize("routing", ["skewed", "balanced"])
def test_other_routings(routing):
    check_layer(run(f"workload.layer.routing.kind={routing}"))


def test_tiny_rings_one_channel_one_gemm_block():
    # one ring row, one channel, one GEMM block: every protocol step waits on another
    check_layer(run("workload.layer.overlap.ring_rows=1", "workload.layer.overlap.comm_sms=2",
                    "workload.layer.overlap.compute_tbs=1"))


def test_gemm_overlaps_dispatch_and_needs_no_host_round_trip(uniform):
    s = uniform.stats
    launches = {l.kernel: l.index for l in uniform.launches if l.gpu == 0}
    ln = uniform.state.ln
    dispatch, expert = launches["deepep_dispatch"], launches["overlap_expert"]
    notify = launches["deepep_notify"]
    # the senders start one launch latency after the count exchange: no host round trip
    gap = int(ln[dispatch].start) - int(ln[notify].end)
    assert gap == uniform.cfg.system.gpu.kernel_launch_latency
    # the persistent GEMM blocks are resident before any row moves
    assert int(ln[expert].start) < int(ln[dispatch].start)
    assert s["system.moe.phase.mediation_us"] > 0
    # same kernels for mediation and dispatch as deepep, minus the host round trip and the bulk
    # phases: the layer is shorter
    deepep = simulate(CONFIG, "scheme=deepep", "workload.mode=timing")
    assert s["system.moe.layer_time_us"] < deepep.stats["system.moe.layer_time_us"]


def test_timing_mode_runs_the_same_protocol(uniform):
    timing = run("workload.mode=timing")
    check_layer(timing)
    strip = lambda st: {k: v for k, v in model_stats(st).items() if "output_max" not in k}
    assert strip(timing.stats) == strip(uniform.stats)


def test_communication_blocks_and_gemm_blocks_fill_the_sms_exactly():
    # 8 SMs: 2 sender and 2 receiver channel blocks (DeepEP's 192 KB of shared memory each) and
    # 4 persistent 160 KB GEMM blocks - each on an SM of its own, none beside another
    sim = run("system.gpu.num_sms=8", "workload.layer.overlap.compute_tbs=4",
              "workload.layer.overlap.comm_sms=4")
    check_layer(sim)


def test_gemm_blocks_that_leave_no_sm_to_the_senders_are_an_input_error():
    from moehub_arch.workloads.layer import LayerError
    with pytest.raises(LayerError, match=r"workload.layer.overlap.compute_tbs: 5 .* at most 4 GEMM"):
        run("system.gpu.num_sms=8", "workload.layer.overlap.compute_tbs=5",
            "workload.layer.overlap.comm_sms=4")
