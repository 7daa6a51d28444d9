"""The current tick's timer FIFO (engine/events.py): timers set for the tick being processed skip
the tournament tree, and the run loop still takes every event in the same (tick, seq) order. The
reference path is the tree alone (a FIFO of no entries: every timer goes to the tree); both must
give the same stats, simEvents and the events of every kind included, on layer configs of the
schemes whose same-tick order is part of the model (MoE-Hub's RPM, AAU and link responses act on
the same ticks)."""
import numpy as np
import pytest

from conftest import load, model_stats


def _run(config, overrides, fifo):
    from moehub_arch.simulation import Simulation
    sim = Simulation(load(config, *overrides))
    assert int(sim.state.sys[0].tn_count) == 0     # nothing set a timer before the run
    if not fifo:
        sim.state = sim.state._replace(timer_now=np.zeros((0, 2), np.int64))
    stats = sim.run()
    return sim, model_stats(stats)


CASES = {
    "functional_moehub": ("experiments/functional.yaml", ["scheme=moehub", "workload.mode=timing"]),
    "functional_deepep": ("experiments/functional.yaml", ["scheme=deepep", "workload.mode=timing"]),
    "hub_dispatch_combine": ("hub/dispatch_combine.yaml", []),
    "hub_tiny_tables": ("hub/tiny_tables.yaml", []),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_fifo_gives_the_tree_only_order(case):
    config, overrides = CASES[case]
    sim, fast = _run(config, overrides, fifo=True)
    _, reference = _run(config, overrides, fifo=False)
    assert fast == reference
    kinds = {k: v for k, v in fast.items() if k.startswith("system.engine.events.")}
    assert sum(kinds.values()) == fast["simEvents"] > 0
    assert int(sim.state.sys[0].tn_count) == 0     # drained: no event left behind


def test_the_tree_holds_no_timer_after_the_run():
    """Every timer a run set, through the tree or the FIFO, was taken or cleared by its end."""
    from moehub_arch.engine.events import TIMER_OFF, TM_TICK, TT_TICK
    sim, _ = _run(*CASES["hub_dispatch_combine"], fifo=True)
    assert np.all(sim.state.timer_tree[1:, TT_TICK] == TIMER_OFF)
    assert np.all(sim.state.timer[:, TM_TICK] == TIMER_OFF)
