"""The component timers' wheel (engine/events.py) on whole runs: the same events in the same
(tick, seq) order whatever the wheel's pool size. With a pool of one entry more than there are
timers the wheel runs dry at almost every set and drops its stale entries each time
(_wheel_collect), which must change nothing: the same stats, simEvents and the events of every
kind included, on layer configs of the schemes whose same-tick order is part of the model
(MoE-Hub's RPM, AAU and link responses act on the same ticks). After a run every timer is off
and every entry of the pool is back on its free list (conservation of entries)."""
import numpy as np
import pytest

from conftest import load, model_stats


def _run(config, overrides, pool=None):
    from moehub_arch.engine.events import TE_NEXT
    from moehub_arch.simulation import Simulation
    sim = Simulation(load(config, *overrides))
    if pool is not None:
        entry = sim.state.timer_entry[:pool].copy()
        entry[-1, TE_NEXT] = -1
        sim.state = sim.state._replace(timer_entry=entry)
    stats = sim.run()
    return sim, model_stats(stats)


CASES = {
    "functional_moehub": ("experiments/functional.yaml", ["scheme=moehub", "workload.mode=timing"]),
    "functional_deepep": ("experiments/functional.yaml", ["scheme=deepep", "workload.mode=timing"]),
    "hub_dispatch_combine": ("hub/dispatch_combine.yaml", []),
    "hub_tiny_tables": ("hub/tiny_tables.yaml", []),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_wheel_that_keeps_running_dry_gives_the_same_run(case):
    config, overrides = CASES[case]
    sim, reference = _run(config, overrides)
    _, tight = _run(config, overrides, pool=sim.state.timer.shape[0] + 1)
    assert tight == reference
    kinds = {k: v for k, v in tight.items() if k.startswith("system.engine.events.")}
    assert sum(kinds.values()) == tight["simEvents"] > 0


def test_every_timer_is_off_and_every_entry_free_after_the_run():
    from moehub_arch.engine.events import TE_NEXT, TIMER_OFF, TM_TICK
    sim, _ = _run(*CASES["hub_dispatch_combine"])
    st = sim.state
    assert np.all(st.timer[:, TM_TICK] == TIMER_OFF)
    assert np.all(st.timer_level == 0)
    free, e = 0, int(st.sys[0].tw_free)
    while e >= 0:
        free += 1
        e = int(st.timer_entry[e, TE_NEXT])
    assert free == st.timer_entry.shape[0]
