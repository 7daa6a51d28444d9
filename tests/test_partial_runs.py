"""A run stopped by a limit (run.max_ticks, max_wall, max_events, a signal) reports what finished:
the stats and figures of the kernels and phases whose every launch ended, equal to the complete
run's, marked partial with the stop reason (simStopped, system.moe.launches_finished); nothing of
what had not finished (moehub_arch/workloads/layer_stats.py, schemes' extra_stats).

The case is DeepEP's internode kernels (the EP 16 figure's kernels) on 2 nodes x 2 GPUs, stopped
at the tick the last rank's dispatch ends: the dispatch figure must be the complete run's, bit
for bit, and no combine figure may appear."""
import pytest

from conftest import run_cli, read_stats_json

TINY_DEEPEP = ("scheme=deepep", "workload.layer.tokens_per_gpu=8",
               "workload.layer.deepep.kernels=communication")
DISPATCH = "deepep_dispatch_internode"
COMBINE = ("deepep_combine_internode", "deepep_reduce_nodes")


def _simulate(*extra):
    from conftest import CONFIGS
    from moehub_arch.config import load_config
    from moehub_arch.simulation import Simulation
    cfg = load_config(CONFIGS / "experiments/functional.yaml", list(TINY_DEEPEP + extra),
                      system_file=CONFIGS / "systems/tiny_2x2.yaml")
    sim = Simulation(cfg)
    sim.run()
    return sim


def _ends(sim, kernels):
    return [int(sim.state.ln[l.index].end) for l in sim.launches if l.kernel in kernels]


@pytest.fixture(scope="module")
def whole_and_stopped():
    whole = _simulate()
    stop = max(_ends(whole, (DISPATCH,)))           # the last rank's dispatch ends here
    assert stop < min(_ends(whole, COMBINE))        # ... before any combine kernel ends
    return whole, _simulate(f"run.max_ticks={stop}ps"), stop


def test_stopped_run_reports_the_finished_dispatch_exactly(whole_and_stopped):
    whole, part, stop = whole_and_stopped
    assert whole.stopped is None and part.stopped and "run.max_ticks" in part.stopped
    w, p = whole.stats, part.stats
    assert p["simTicks"] == stop and p["simCompleted"] == 0
    # marked partial, with the reason in the stat's description
    assert p["simStopped"] == 1 and "simStopped" not in w
    assert part.stopped in p.match("simStopped")[0].desc
    finished = sum(int(whole.state.ln[l.index].end) <= stop for l in whole.launches)
    assert p["system.moe.launches_finished"] == finished < len(whole.launches)
    assert "system.moe.launches_finished" not in w
    # what finished on every rank: the same numbers as the complete run
    same = ["system.moe.deepep.rdma_send_bytes", "system.moe.deepep.dispatch_rdma_GBps",
            "system.moe.deepep.dispatch_recv_bytes", "system.moe.deepep.dispatch_GBps",
            f"system.moe.kernel.{DISPATCH}_us", "system.moe.phase.mediation_us",
            "system.moe.phase.dispatch_us", "system.moe.dispatch_link_efficiency",
            "system.moe.ideal_compute_us", "system.moe.dedup.level1_bytes_saved"]
    for name in same:
        assert p[name] == w[name], name
    assert w["system.moe.deepep.dispatch_rdma_GBps"] > 0
    # what had not finished: absent, not a number made of unfinished kernels
    for name in ("system.moe.deepep.combine_rdma_GBps", "system.moe.deepep.combine_GBps",
                 "system.moe.phase.combine_us", "system.moe.layer_time_us",
                 "system.moe.overhead_us", "system.moe.sm.idle",
                 "system.moe.output_max_abs_error",
                 *(f"system.moe.kernel.{k}_us" for k in COMBINE)):
        assert name in w and name not in p, name


def test_stopped_run_before_any_kernel_ends_has_no_figures():
    part = _simulate("run.max_ticks=1us")
    p = part.stats
    assert p["simStopped"] == 1 and p["system.moe.launches_finished"] == 0
    assert not p.match("system.moe.kernel.*") and not p.match("system.moe.phase.*")
    assert not p.match("system.moe.deepep.*")


def test_cli_says_the_run_is_partial_and_writes_the_finished_figures(tmp_path,
                                                                     whole_and_stopped):
    _, part, stop = whole_and_stopped
    r = run_cli("run", "configs/experiments/functional.yaml", "--system",
                "configs/systems/tiny_2x2.yaml", *(a for s in TINY_DEEPEP for a in ("--set", s)),
                "--max-ticks", f"{stop}", "-o", tmp_path)
    assert r.returncode == 0, r.stderr
    assert "stats cover the run up to there" in r.stderr
    assert f"partial layer: {int(part.stats['system.moe.launches_finished'])} of " in r.stdout
    st = read_stats_json(tmp_path)
    assert st["simStopped"] == 1
    assert st["system.moe.deepep.dispatch_rdma_GBps"] == part.stats[
        "system.moe.deepep.dispatch_rdma_GBps"]
    assert "system.moe.deepep.combine_rdma_GBps" not in st
