"""DAM-launched consumers (system.gpu.hub.moe.dam.consumers: launch, MoE-Hub arXiv 2605.05888):
the DAM starts moehub_tile's blocks per ready tile, no claimer runs; the layer is exact on uniform
and skewed routing, alone and with the spilling row table (the published design so far), both
engines agree, and inconsistent launch setups are clear errors."""
import pytest

from conftest import model_stats, read_stats_json, run_cli, simulate

FUNCTIONAL = "experiments/functional.yaml"
LAUNCH = "system.gpu.hub.moe.dam.consumers=launch"
SPILL = ("system.gpu.hub.moe.aau.overflow=spill", "system.gpu.hub.moe.aau.record_table_entries=4")
G = 4


@pytest.mark.parametrize("routing", ["uniform", "skewed"])
@pytest.mark.parametrize("spill", [False, True])
def test_dam_launched_layer_is_exact(routing, spill):
    sim = simulate(FUNCTIONAL, f"workload.layer.routing.kind={routing}", LAUNCH,
                   *(SPILL if spill else ()))
    s = sim.stats
    assert s["system.moe.output_max_abs_error"] == 0.0        # invariants ran in simulate() too
    assert {l.kernel for l in sim.launches} >= {"moehub_tile"}
    assert not {"moehub_claim", "moehub_expert"} & {l.kernel for l in sim.launches}
    jobs = 128 // 32 + 64 // 32      # Ju + Jd of tiny_functional with gemm_n_tile 32
    for l in sim.launches:
        if l.kernel == "moehub_tile":
            g, ln = l.gpu, sim.state.ln[l.index]
            tiles = s[f"system.gpu{g}.hub.dam.claims"]
            # every ready tile was started, Ju + Jd blocks each, plus the last block
            assert tiles == s[f"system.gpu{g}.hub.dam.tiles_ready"] > 0
            assert int(ln.grid) == int(ln.granted) == int(ln.finished) == tiles * jobs + 1
    if spill:
        assert sum(s[f"system.gpu{g}.hub.aau.spills"] for g in range(G)) > 0


def test_published_design_engines_agree(tmp_path):
    """spill + launch + the RPM's full-first schedule: both engines, the same stats."""
    overrides = [LAUNCH, *SPILL, "system.gpu.hub.moe.rpm.schedule=full_first",
                 "workload.layer.tokens_per_gpu=16"]
    fast = model_stats(simulate(FUNCTIONAL, *overrides).stats)
    args = [a for o in overrides for a in ("--set", o)]
    r = run_cli("run", f"configs/{FUNCTIONAL}", "-o", tmp_path, "--engine", "python", "--quiet", *args)
    assert r.returncode == 0, r.stderr
    slow = {k: v for k, v in read_stats_json(tmp_path).items() if not k.startswith("host")}
    assert slow == fast
    assert fast["system.moe.output_max_abs_error"] == 0.0


def test_launch_setups_that_cannot_work_are_clear_errors(tmp_path):
    # the hand-written dispatch/combine kernels claim tiles themselves: no launch for the DAM
    r = run_cli("run", "configs/hub/dispatch_combine.yaml", "-o", tmp_path, "--set", LAUNCH)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "system.gpu.hub.moe.dam.consumers: launch" in r.stderr and "dam_tile_tbs" in r.stderr
    r = run_cli("run", "configs/experiments/functional.yaml", "-o", tmp_path, "--set",
                "system.gpu.hub.moe.dam.consumers=start")
    assert r.returncode == 2 and "system.gpu.hub.moe.dam.consumers" in r.stderr
