"""DAM-launched consumers (system.gpu.hub.moe.dam.consumers: launch, MoE-Hub arXiv 2605.05888):
the DAM starts moehub_tile's blocks per ready tile, no claimer runs; the layer is exact on uniform
and skewed routing, alone and with the spilling row table (the published design so far), both
engines agree, and inconsistent launch setups are clear errors."""
import pytest

from conftest import load, model_stats, read_stats_json, run_cli, simulate
from moehub_arch.components.trace import CAT_SM, TR_TB_EXIT, TR_TB_PLACE, TR_TB_WAIT
from moehub_arch.engine.state import TB_WAIT_FLAG
from moehub_arch.simulation import RunObserver, Simulation

FUNCTIONAL = "experiments/functional.yaml"
LAUNCH = "system.gpu.hub.moe.dam.consumers=launch"
SPILL = ("system.gpu.hub.moe.aau.overflow=spill", "system.gpu.hub.moe.aau.record_table_entries=4")
G = 4


JU, JD = 128 // 32, 64 // 32      # gate/up and down jobs per tile of tiny_functional (n_tile 32)
TOGETHER = "workload.layer.moehub.tile_groups=together"


@pytest.mark.parametrize("routing, spill, groups", [
    ("uniform", False, "split"), ("skewed", False, "split"), ("uniform", True, "split"),
    ("skewed", True, "split"), ("uniform", False, "together"), ("skewed", True, "together")])
def test_dam_launched_layer_is_exact(routing, spill, groups):
    sim = simulate(FUNCTIONAL, f"workload.layer.routing.kind={routing}", LAUNCH,
                   f"workload.layer.moehub.tile_groups={groups}", *(SPILL if spill else ()))
    s = sim.stats
    assert s["system.moe.output_max_abs_error"] == 0.0        # invariants ran in simulate() too
    assert {l.kernel for l in sim.launches} >= {"moehub_tile"}
    assert not {"moehub_claim", "moehub_expert"} & {l.kernel for l in sim.launches}
    for l in sim.launches:
        if l.kernel == "moehub_tile":
            g, ln = l.gpu, sim.state.ln[l.index]
            tiles = s[f"system.gpu{g}.hub.dam.claims"]
            # every ready tile was started, Ju + Jd blocks each, plus the last block
            assert tiles == s[f"system.gpu{g}.hub.dam.tiles_ready"] > 0
            assert int(ln.grid) == int(ln.granted) == int(ln.dispatched) == int(ln.finished) \
                == tiles * (JU + JD) + 1 == s[f"system.gpu{g}.hub.dam.blocks_started"]
            # split: each tile's down group started once its gate/up group's counter hit zero
            assert s[f"system.gpu{g}.hub.dam.groups_started"] == (tiles if groups == "split" else 0)
            assert int(ln.dam_first_group) == (JU if groups == "split" else JU + JD)
    if spill:
        assert sum(s[f"system.gpu{g}.hub.aau.spills"] for g in range(G)) > 0


class _TileBlocks(RunObserver):
    """Placement and exit tick of every moehub_tile block, and the flag waits of its blocks."""

    def on_start(self, sim):
        sim.enable_trace()
        sim.set_trace_categories(self, CAT_SM)
        self.launches = {l.index: l.gpu for l in sim.launches if l.kernel == "moehub_tile"}
        self.held = {}                      # slot -> (gpu, block index)
        self.placed, self.exited, self.flag_waits = {}, {}, []

    def on_records(self, sim, records):
        for tick, kind, slot, v0, v1 in records.tolist():
            if kind == TR_TB_PLACE and v0 in self.launches:
                key = (self.launches[v0], v1)
                self.held[slot] = key
                self.placed[key] = tick
            elif kind == TR_TB_EXIT and slot in self.held:
                self.exited[self.held.pop(slot)] = tick
            elif kind == TR_TB_WAIT and v0 == TB_WAIT_FLAG and slot in self.held:
                self.flag_waits.append(self.held[slot])


@pytest.mark.parametrize("groups", ["split", "together"])
def test_down_group_starts_when_gate_up_group_is_done(groups):
    """The group counter: with split groups no down block of a tile is placed before every
    gate/up block of that tile exited, so none waits for them; with together some are and do."""
    ob = _TileBlocks()
    sim = Simulation(load(FUNCTIONAL, LAUNCH, f"workload.layer.moehub.tile_groups={groups}"))
    sim.run(observers=[ob])
    assert sim.stats["system.moe.output_max_abs_error"] == 0.0
    jobs = JU + JD
    last = {g: max(b for gg, b in ob.placed if gg == g) for g, _ in ob.placed}
    tiles = {(g, b // jobs) for g, b in ob.placed if b != last[g]}
    assert len(tiles) == sum(sim.stats[f"system.gpu{g}.hub.dam.claims"] for g in range(G))
    early = 0
    for g, t in tiles:
        gate_up_done = max(ob.exited[(g, t * jobs + j)] for j in range(JU))
        first_down = min(ob.placed[(g, t * jobs + j)] for j in range(JU, jobs))
        early += first_down < gate_up_done
    down_waits = [(g, b) for g, b in ob.flag_waits if b != last[g] and b % jobs >= JU]
    if groups == "split":
        assert early == 0 and down_waits == []
    else:
        assert early > 0 and down_waits


def test_published_design_engines_agree(tmp_path):
    """spill + launch + the RPM's full-first schedule: both engines, the same stats."""
    # 2 GPUs at 8 tokens each (~8 k events, still spilling) keep the interpreted run short
    overrides = [LAUNCH, *SPILL, "system.gpu.hub.moe.rpm.schedule=full_first",
                 "system.num_gpus=2", "workload.layer.tokens_per_gpu=8"]
    fast = model_stats(simulate(FUNCTIONAL, *overrides).stats)
    assert sum(v for k, v in fast.items() if k.endswith(".hub.aau.spills")) > 0
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
    # thread-block groups: only for a launch the DAM starts, and they must add up to its blocks
    r = run_cli("run", "configs/hub/dispatch_combine.yaml", "-o", tmp_path, "--set",
                "workload.launches.1.dam_groups=[1, 2]")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "workload.launches[1].dam_groups" in r.stderr and "dam_tile_tbs > 0" in r.stderr
    r = run_cli("run", "configs/experiments/functional.yaml", "-o", tmp_path, "--set", LAUNCH,
                "--set", "workload.layer.moehub.tile_groups=halves")
    assert r.returncode == 2 and "workload.layer.moehub.tile_groups" in r.stderr
