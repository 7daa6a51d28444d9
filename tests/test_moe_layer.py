"""An MoE layer of a model as a workload (moehub_arch/workloads/layer.py), run with scheme moehub:
functional output equal to the NumPy reference, token accounting, timing mode, the engines agree,
and clear errors for bad layer inputs (routing traces, scheme/launch mix-ups)."""
import numpy as np
import pytest
from conftest import model_stats, read_stats_json, run_cli, simulate

FUNCTIONAL = "experiments/functional.yaml"
PAIRS = 4 * 64 * 2           # GPUs x tokens x top-k of the functional config


def _accounting(stats):
    return [stats[f"system.moe.rows_{n}"] for n in ("sent", "received", "computed", "combined")]


@pytest.fixture(scope="module")
def uniform():
    return simulate(FUNCTIONAL)


@pytest.mark.parametrize("routing", ["uniform", "skewed", "balanced"])
def test_moehub_layer_output_equals_numpy_reference(request, routing):
    sim = request.getfixturevalue("uniform") if routing == "uniform" else simulate(
        FUNCTIONAL, f"workload.layer.routing.kind={routing}")
    s = sim.stats
    assert s["system.moe.output_max_abs_reference"] > 1.0      # real numbers, not zeros
    assert s["system.moe.output_max_abs_error"] <= 1e-6 * s["system.moe.output_max_abs_reference"]
    assert _accounting(s) == [PAIRS] * 4


def test_layer_rows_move_through_the_hub_exactly_once(uniform):
    s = uniform.stats
    G = 4
    assert sum(s[f"system.gpu{g}.hub.rpm.rows_accepted"] for g in range(G)) == PAIRS
    assert sum(s[f"system.gpu{g}.hub.dam.claims"] for g in range(G)) > 0
    # no mediation in this scheme; the phases and SM fractions are filled in
    assert s["system.moe.phase.mediation_us"] == 0.0
    assert s["system.moe.phase.dispatch_us"] > 0 and s["system.moe.phase.expert_us"] > 0
    assert 0 < s["system.moe.sm.idle"] < 1
    assert s["system.moe.layer_time_us"] >= s["system.moe.phase.expert_us"]


def test_routing_table_is_in_simulated_memory(uniform):
    idx = np.stack([uniform.read_buffer(g, "topk_idx", "i64")[:64 * 2] for g in range(4)])
    assert (idx.reshape(4, 64, 2) == uniform.layer.routing.topk_idx).all()
    w = np.stack([uniform.read_buffer(g, "topk_w", "f32") for g in range(4)])
    assert (w.reshape(4, 64, 2) == uniform.layer.routing.topk_weight).all()


def test_layer_timing_mode_matches_functional_timing(uniform):
    timing = simulate(FUNCTIONAL, "workload.mode=timing")
    skip = ("system.moe.output_max_abs",)
    a = {k: v for k, v in model_stats(timing.stats).items() if not k.startswith(skip)}
    b = {k: v for k, v in model_stats(uniform.stats).items() if not k.startswith(skip)}
    assert a == b
    assert "system.moe.output_max_abs_error" not in timing.stats


def test_layer_python_engine_gives_identical_stats(tmp_path):
    # the whole layer (dispatch, DAM, GEMMs, combine) on 2 GPUs at 8 tokens each: ~11 k events,
    # what the interpreted engine runs in seconds rather than minutes
    small = ("system.num_gpus=2", "workload.layer.tokens_per_gpu=8")
    r = run_cli("run", f"configs/{FUNCTIONAL}", "-o", tmp_path, "--engine", "python", "--quiet",
                *(a for o in small for a in ("--set", o)))
    assert r.returncode == 0, r.stderr
    slow = {k: v for k, v in read_stats_json(tmp_path).items() if not k.startswith("host")}
    fast = model_stats(simulate(FUNCTIONAL, *small).stats)
    assert slow == fast
    assert fast["system.moe.output_max_abs_error"] == 0.0 and fast["system.moe.rows_combined"] == 32


def test_same_seed_same_stats_other_seed_other_routing():
    a = simulate(FUNCTIONAL, "workload.layer.tokens_per_gpu=16")
    b = simulate(FUNCTIONAL, "workload.layer.tokens_per_gpu=16")
    c = simulate(FUNCTIONAL, "workload.layer.tokens_per_gpu=16", "run.seed=7")
    assert model_stats(a.stats) == model_stats(b.stats)
    assert not (a.layer.routing.topk_idx == c.layer.routing.topk_idx).all()


def test_routing_trace_replays_and_broken_traces_are_clear_errors(tmp_path):
    from moehub_arch.workloads.routing import generate_routing, write_trace
    good = generate_routing("balanced", num_gpus=4, tokens_per_gpu=16, num_experts=8, top_k=2, seed=3)
    write_trace(tmp_path / "good.npz", good)
    out = tmp_path / "o"
    base = ["--set", "workload.layer.tokens_per_gpu=16", "--set", "workload.layer.routing.kind=trace"]
    r = run_cli("run", f"configs/{FUNCTIONAL}", "-o", out, "--quiet", *base,
                "--set", f"workload.layer.routing.trace={tmp_path / 'good.npz'}")
    assert r.returncode == 0, r.stderr
    s = read_stats_json(out)
    assert s["system.moe.output_max_abs_error"] == 0.0 and s["system.moe.rows_combined"] == 128

    bad = good.topk_idx.copy()
    bad[1, 5, 1] = 8                                      # expert 8 of 8: out of range
    np.save(tmp_path / "bad.npy", bad)
    r = run_cli("run", f"configs/{FUNCTIONAL}", "-o", out, *base,
                "--set", f"workload.layer.routing.trace={tmp_path / 'bad.npy'}")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "bad.npy" in r.stderr and "range" in r.stderr
    np.save(tmp_path / "short.npy", good.topk_idx[:, :8])   # 8 tokens per GPU instead of 16
    r = run_cli("run", f"configs/{FUNCTIONAL}", "-o", out, *base,
                "--set", f"workload.layer.routing.trace={tmp_path / 'short.npy'}")
    assert r.returncode == 2 and "short.npy" in r.stderr and "shape" in r.stderr
    r = run_cli("run", f"configs/{FUNCTIONAL}", "-o", out, *base,
                "--set", "workload.layer.routing.trace=missing.npz")
    assert r.returncode == 2 and "workload.layer.routing.trace" in r.stderr and "not found" in r.stderr


@pytest.mark.parametrize("overrides, key, words", [
    (["scheme=none"], "scheme", "no scheme"),
    (["workload.layer.model=nonexistent"], "workload.layer.model", "expected one of"),
    (["workload.layer.tokens_per_gpu=0"], "workload.layer.tokens_per_gpu", "positive"),
    (["scheme=fastest"], "scheme", "expected one of"),
    (["system.num_gpus=3"], "num_gpus", "multiple"),
])
def test_layer_config_errors_are_clear(tmp_path, overrides, key, words):
    args = [a for o in overrides for a in ("--set", o)]
    r = run_cli("run", f"configs/{FUNCTIONAL}", "-o", tmp_path, *args)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and key in r.stderr and words in r.stderr


@pytest.mark.parametrize("scheme", ["moehub", "deepep", "overlap", "megatron", "tutel", "nvls"])
def test_packet_trains_keep_every_scheme_correct(scheme):
    """run.packet_train > 1 is a timing approximation only: every row still lands once and the
    layer output still equals the reference."""
    s = simulate(FUNCTIONAL, f"scheme={scheme}", "run.packet_train=4").stats
    assert s["system.moe.output_max_abs_error"] <= 1e-6 * s["system.moe.output_max_abs_reference"]
    assert s["system.moe.rows_combined"] == PAIRS
