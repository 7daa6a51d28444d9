"""Schemes fastermoe (FasterMoE's group-wise exchange and shadow experts) and ccfuser (rows read
straight from the source GPUs' memory into the GEMM tiles, outputs stored home): the layer output
equals the NumPy reference, token accounting is exact, the shadow policy follows FasterMoE's
formula, the broadcast copies equal the owners' weights, bad sizes are input errors, and both
engines agree."""
import numpy as np
import pytest

import conftest
from conftest import model_stats, simulate
from moehub_arch.workloads.layer import layer_shape
from moehub_arch.workloads.schemes.fastermoe import shadow_policy

CONFIG = "experiments/functional.yaml"
P, T, K, E = 4, 64, 2, 8                 # configs/experiments/functional.yaml (tiny_functional)
SKEWED = ("workload.layer.routing.kind=skewed", "workload.layer.routing.gini=0.5")


def run(scheme, *overrides):
    return simulate(CONFIG, f"scheme={scheme}", *overrides)


def check_exact(sim, unchecked):
    s = sim.stats
    assert s["system.moe.output_max_abs_error"] == 0.0
    assert s["system.moe.output_max_abs_reference"] > 1.0
    for name in ("sent", "received", "computed", "combined"):
        if name != unchecked:
            assert s[f"system.moe.rows_{name}"] == P * T * K, name


@pytest.mark.parametrize("group", [1, 2, 4])
def test_fastermoe_group_wise_exchange_is_exact(group):
    sim = run("fastermoe", f"workload.layer.fastermoe.group_size={group}",
              "workload.layer.fastermoe.shadow=none")
    check_exact(sim, "received")
    s = sim.stats
    assert s["system.moe.fastermoe.steps"] == P // group
    assert s["system.moe.fastermoe.shadowed_experts"] == 0
    # one send and one return launch per step and GPU, each of `group` thread blocks
    steps = [l for l in sim.launches if l.kernel == "fm_put_step" and l.gpu == 0]
    assert len(steps) == 2 * (P // group)
    # step s's expert GEMM starts only after step s's rows arrived: its first gate/up kernel
    # starts after the send of that step ended on every GPU of the group it came from
    ln = sim.state.ln
    n = P // group
    sends = {}                       # (gpu, step) -> the send launch (each GPU's first n)
    for g in range(P):
        mine = sorted((l for l in sim.launches if l.kernel == "fm_put_step" and l.gpu == g),
                      key=lambda l: l.config_index)
        sends.update({(g, st): l for st, l in enumerate(mine[:n])})
    gemms = sorted((l for l in sim.launches if l.kernel == "grouped_gate_up" and l.gpu == 0),
                   key=lambda l: l.config_index)
    for st, g in enumerate(gemms):
        src_group = ((0 // group - st) % n) * group
        ends = [int(ln[sends[(src, st)].index].end) for src in range(src_group, src_group + group)]
        assert ends and int(ln[g.index].start) >= max(ends)


def test_fastermoe_shadows_the_hot_experts_exactly():
    sim = run("fastermoe", "workload.layer.fastermoe.group_size=2", *SKEWED)
    check_exact(sim, "received")
    s = sim.stats
    idx = sim.layer.routing.topk_idx
    loads = np.bincount(idx.reshape(-1), minlength=E)
    chosen = shadow_policy(loads, sim.layer.shape, sim.cfg)
    assert len(chosen) >= 1 and s["system.moe.fastermoe.shadowed_experts"] == len(chosen)
    assert chosen[0] == int(np.argmax(loads))
    assert s["system.moe.fastermoe.shadowed_rows"] == int(loads[chosen].sum())
    # every GPU's copy of each shadowed expert equals its owner's weights
    El = E // P
    for i, e in enumerate(chosen):
        owner, le = divmod(e, El)
        for w, copy in (("w_gate", "fm_swg"), ("w_up", "fm_swu"), ("w_down", "fm_swd")):
            mine = sim.read_buffer(owner, w).reshape(El, -1)[le]
            for g in range(P):
                got = sim.read_buffer(g, copy).reshape(len(chosen), -1)[i]
                assert np.array_equal(got, mine), (e, w, g)


def test_shadow_policy_follows_fastermoes_formula():
    cfg = conftest.load(CONFIG, "scheme=fastermoe")
    s, _ = layer_shape(cfg)
    # a flat load shadows nothing (each step would only add a broadcast)
    assert shadow_policy(np.full(E, 100), s, cfg) == []
    # one expert far above the rest: shadowed; the next ones are not worth their broadcast
    loads = np.array([5000, 120, 110, 100, 90, 80, 70, 60])
    assert shadow_policy(loads, s, cfg) == [0]
    # two hot experts: both, most loaded first
    loads = np.array([100, 9000, 40, 30, 8000, 20, 10, 5])
    assert shadow_policy(loads, s, cfg) == [1, 4]


def test_fastermoe_bad_group_size_is_an_input_error(tmp_path):
    r = conftest.run_cli("run", "configs/experiments/functional.yaml", "--set",
                         "scheme=fastermoe", "--set", "workload.layer.fastermoe.group_size=3",
                         "-o", tmp_path)
    assert r.returncode == 2
    assert "workload.layer.fastermoe.group_size" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("overrides", [(), SKEWED, ("system.num_gpus=8",)])
def test_ccfuser_is_exact(overrides):
    sim = run("ccfuser", *overrides)
    P_ = sim.layer.shape.num_gpus
    s = sim.stats
    assert s["system.moe.output_max_abs_error"] == 0.0
    for name in ("received", "computed", "combined"):
        assert s[f"system.moe.rows_{name}"] == P_ * T * K, name
    # the expert GPUs read the rows: no send buffer, so each GPU's pulled rows are its experts'
    idx = sim.layer.routing.topk_idx
    El = E // P_
    for r in range(P_):
        want = int(np.isin(idx, np.arange(r * El, (r + 1) * El)).sum())
        tiles = sim.read_buffer(r, "ccf_tiles", "i64").reshape(-1, 4)
        ntiles = int(sim.read_buffer(r, "ccf_info", "i64")[1])
        assert int(tiles[:ntiles, 1].sum()) == want


def test_ccfuser_too_many_gemm_blocks_is_an_input_error(tmp_path):
    r = conftest.run_cli("run", "configs/experiments/functional.yaml", "--set", "scheme=ccfuser",
                         "--set", "workload.layer.ccfuser.compute_tbs=500", "-o", tmp_path)
    assert r.returncode == 2
    assert "workload.layer.ccfuser.compute_tbs" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("scheme,extra", [
    ("fastermoe", ("workload.layer.fastermoe.permute_tbs=2",
                   "workload.layer.fastermoe.group_size=1")),
    ("ccfuser", ("workload.layer.ccfuser.pull_tbs=2", "workload.layer.ccfuser.compute_tbs=2")),
])
def test_engines_agree(scheme, extra):
    small = ("workload.layer.tokens_per_gpu=8", "system.num_gpus=2", "system.gpu.num_sms=4",
             "workload.layer.combine_tbs=2", "workload.layer.shared_tbs=2") + extra
    a = model_stats(run(scheme, *small).stats)
    b = model_stats(run(scheme, *small, "run.engine=python").stats)
    assert a == b
    assert a["system.moe.output_max_abs_error"] == 0.0
