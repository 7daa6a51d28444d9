"""The engine's exact shortcuts (run.shortcuts; docs/engine_order.md) change no result: on small
layer and MoE-Hub configs every model stat is the same with and without each shortcut, and with
all of them, except the event counts (simEvents and system.engine.events.*), which must fall."""
import pytest

from conftest import load, model_stats

SHORTCUTS = ("tx_wake", "idle_output", "sm_fold", "back_to_back")
LAYER = "experiments/layer"
CASES = {
    "moehub_layer": (f"{LAYER}/deepseek_v3_4096_moehub.yaml", ["workload.layer.tokens_per_gpu=16"]),
    "deepep_layer": (f"{LAYER}/deepseek_v3_4096_deepep.yaml", ["workload.layer.tokens_per_gpu=16"]),
    "nvl32_layer_16gpu": (f"{LAYER}/deepseek_v3_4096_moehub_gh200_nvl32.yaml",
                          ["system.num_gpus=16", "workload.layer.tokens_per_gpu=4"]),
    "hub_dispatch_combine": ("hub/dispatch_combine.yaml", []),
    "hub_tiny_tables": ("hub/tiny_tables.yaml", []),
}


def _is_event_count(name):
    return name == "simEvents" or name.startswith("system.engine.events.")


def _run(config, overrides, shortcuts):
    from moehub_arch.simulation import Simulation
    sim = Simulation(load(config, *overrides, f"run.shortcuts=[{', '.join(shortcuts)}]"))
    return model_stats(sim.run())


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_shortcut_gives_the_stats_of_the_path_without_it(case):
    config, overrides = CASES[case]
    reference = _run(config, overrides, ())
    events = {}
    for taken in [(name,) for name in SHORTCUTS] + [SHORTCUTS]:
        got = _run(config, overrides, taken)
        assert got.keys() == reference.keys()
        moved = sorted(k for k in reference if not _is_event_count(k) and got[k] != reference[k])
        assert not moved, (taken, [(k, reference[k], got[k]) for k in moved[:10]])
        assert got["simEvents"] <= reference["simEvents"], taken
        events[taken] = got["simEvents"]
    # all of them together leave out events on every case
    assert events[SHORTCUTS] < reference["simEvents"]


def test_shortcuts_are_on_by_default_and_an_unknown_one_is_an_input_error():
    from moehub_arch.config import ConfigError
    assert load("ubench/alltoall.yaml").run.shortcuts == SHORTCUTS
    with pytest.raises(ConfigError, match="run.shortcuts"):
        load("ubench/alltoall.yaml", "run.shortcuts=[nope]")
