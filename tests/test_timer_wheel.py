"""The component timers' wheel (engine/events.py) on whole runs. Between small batches of events
(run.batch_events) the wheel must be consistent (conftest.check_timer_wheel: every armed timer
in the list of its slot, once, lists in sequence order, occupancy masks exact), on layer configs
of the schemes whose same-tick order is part of the model (MoE-Hub's RPM, AAU and link responses
act on the same ticks); the batches change nothing (the same stats, simEvents and the events of
every kind included); after the run every timer is off and every list empty."""
import numpy as np
import pytest

from conftest import check_timer_wheel, load, model_stats
from moehub_arch.observer import RunObserver


class _CheckWheel(RunObserver):
    """Checks the wheel at every pause between batches."""
    def __init__(self):
        self.checks = 0

    def on_pause(self, sim, tick, events, wall_seconds):
        check_timer_wheel(sim.state)
        self.checks += 1


def _run(config, overrides, observers=()):
    from moehub_arch.simulation import Simulation
    sim = Simulation(load(config, *overrides))
    stats = sim.run(observers)
    return sim, model_stats(stats)


CASES = {
    "functional_moehub": ("experiments/functional.yaml", ["scheme=moehub", "workload.mode=timing"]),
    "functional_deepep": ("experiments/functional.yaml", ["scheme=deepep", "workload.mode=timing"]),
    "hub_dispatch_combine": ("hub/dispatch_combine.yaml", []),
    "hub_tiny_tables": ("hub/tiny_tables.yaml", []),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_wheel_is_consistent_between_batches_and_batches_change_nothing(case):
    config, overrides = CASES[case]
    _, reference = _run(config, overrides)
    check = _CheckWheel()
    sim, batched = _run(config, overrides + ["run.batch_events=997"], [check])
    assert batched == reference
    kinds = {k: v for k, v in batched.items() if k.startswith("system.engine.events.")}
    assert sum(kinds.values()) == batched["simEvents"] > 0
    assert check.checks >= batched["simEvents"] // 997
    check_timer_wheel(sim.state)


def test_every_timer_is_off_and_every_list_empty_after_the_run():
    from moehub_arch.engine.events import TIMER_OFF, TM_NEXT, TM_PREV, TM_TICK, WHEEL_LISTS
    sim, _ = _run(*CASES["hub_dispatch_combine"])
    st = sim.state
    assert np.all(st.timer[:, TM_TICK] == TIMER_OFF)
    assert np.all(st.timer_level == 0)
    heads = np.arange(st.timer.shape[0] - WHEEL_LISTS, st.timer.shape[0])
    assert np.array_equal(st.timer[heads, TM_NEXT], heads)
    assert np.array_equal(st.timer[heads, TM_PREV], heads)
