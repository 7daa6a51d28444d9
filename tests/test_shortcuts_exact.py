"""The engine's exact shortcuts (run.shortcuts; docs/engine_order.md) change no result: on small
layer and MoE-Hub configs every model stat is the same with and without each shortcut, and with
all of them, except the event counts (simEvents and system.engine.events.*), which must fall; on
every golden case (tools/golden_stats.py) the same holds for back_to_back, which sends ahead on
the GPUs' own links (the hub's and the RPM's room checks) as on the switches' outputs."""
import re

import pytest

from conftest import REPO, drive_both_engines, load, load_script, model_stats

SHORTCUTS = ("tx_wake", "idle_output", "sm_fold", "back_to_back", "credit_wake", "arrival_hub",
             "hub_again")
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


GOLDEN = load_script(REPO / "tools" / "golden_stats.py")


@pytest.mark.parametrize("case", sorted(GOLDEN.CASES))
def test_back_to_back_changes_no_model_stat_of_the_golden_cases(case):
    config, overrides = GOLDEN.CASES[case]
    without = _run(config, overrides, [n for n in SHORTCUTS if n != "back_to_back"])
    taken = _run(config, overrides, SHORTCUTS)
    assert taken.keys() == without.keys()
    moved = sorted(k for k in without if not _is_event_count(k) and taken[k] != without[k])
    assert not moved, [(k, without[k], taken[k]) for k in moved[:10]]
    assert taken["system.engine.events.ch_tx"] <= without["system.engine.events.ch_tx"]


def test_back_to_back_changes_no_occupancy_sample():
    # the occupancy monitor reads the GPUs' link backlogs (a heap event: before every transmit of
    # its tick), so a packet sent ahead counts in them until the transmit that would have sent it
    overrides = ["system.num_gpus=4", "system.gpu.num_sms=4", "system.nvlink.links_per_gpu=2",
                 "system.switch.count=2", "system.switch.gpu_link_switch=[0, 1]",
                 "workload.launches.0.params.bytes_per_peer=65536",
                 "workload.launches.0.params.chunk=8192", "stats.occupancy.period=100000ps"]
    without = _run("ubench/alltoall.yaml", overrides, [n for n in SHORTCUTS if n != "back_to_back"])
    taken = _run("ubench/alltoall.yaml", overrides, SHORTCUTS)
    moved = sorted(k for k in without if not _is_event_count(k) and taken[k] != without[k])
    assert not moved, [(k, without[k], taken[k]) for k in moved[:10]]
    assert taken["system.engine.events.ch_tx"] < without["system.engine.events.ch_tx"]
    assert taken["system.gpu0.occupancy.link_tx_queue_peak"] > 0


# a small all-to-all whose receive buffers hold one largest packet (17 flits): a switch output's
# head packet waits for the credits of several smaller packets before it, so the reference path's
# transmitter looks at every credit return, most of them too few
SMALL_BUFFERS = ["system.num_gpus=4", "system.gpu.num_sms=4", "system.nvlink.links_per_gpu=2",
                 "system.switch.count=2", "system.switch.gpu_link_switch=[0, 1]",
                 "workload.launches.0.params.bytes_per_peer=16384",
                 "workload.launches.0.params.chunk=8192", "system.nvlink.rx_buffer_flits=17"]


def test_credit_wake_leaves_out_the_looks_short_of_credits():
    # every model stat the same; the looks left out are those that found a ready head still
    # short of credits (8,648 -> 7,624 transmit events with every other shortcut on)
    without = _run("ubench/alltoall.yaml", SMALL_BUFFERS,
                   [n for n in SHORTCUTS if n != "credit_wake"])
    taken = _run("ubench/alltoall.yaml", SMALL_BUFFERS, SHORTCUTS)
    moved = sorted(k for k in without if not _is_event_count(k) and taken[k] != without[k])
    assert not moved, [(k, without[k], taken[k]) for k in moved[:10]]
    assert taken["system.engine.events.ch_tx"] < 0.9 * without["system.engine.events.ch_tx"]
    assert sum(v for k, v in taken.items() if k.endswith(".tx_credit_stall_ticks")) > 0


@pytest.mark.parametrize("shortcut, case", [("arrival_hub", "hub_dispatch_combine"),
                                             ("hub_again", "ubench_alltoall"),
                                             ("hub_again", "functional_deepep")])
def test_the_hub_shortcuts_leave_out_only_hub_events(shortcut, case):
    # arrival_hub: a MoE-Hub stream packet's arrival owes its link response at once
    # (owe_link_responses), so the receiving hub's packetizer is armed for the arrival's tick;
    # hub_again: a hub that sent a response arms itself again for the same tick (another
    # response, or its request FIFO's head). Where that timer is the next event it runs in the
    # event before it: every model stat the same, fewer hub events, no other kind of event moves
    config, overrides = GOLDEN.CASES[case]
    without = _run(config, overrides, [n for n in SHORTCUTS if n != shortcut])
    taken = _run(config, overrides, SHORTCUTS)
    moved = sorted(k for k in without if not _is_event_count(k) and taken[k] != without[k])
    assert not moved, [(k, without[k], taken[k]) for k in moved[:10]]
    assert taken["system.engine.events.hub_tx"] < without["system.engine.events.hub_tx"]
    others = [k for k in without if k.startswith("system.engine.events.")
              and k != "system.engine.events.hub_tx" and taken[k] != without[k]]
    assert not others, others
    assert (without["simEvents"] - taken["simEvents"]
            == without["system.engine.events.hub_tx"] - taken["system.engine.events.hub_tx"])


def test_shortcuts_are_on_by_default_and_an_unknown_one_is_an_input_error():
    from moehub_arch.config import ConfigError
    assert load("ubench/alltoall.yaml").run.shortcuts == SHORTCUTS
    with pytest.raises(ConfigError, match="run.shortcuts"):
        load("ubench/alltoall.yaml", "run.shortcuts=[nope]")


def test_a_busy_links_queued_run_takes_one_transmit_event():
    # back_to_back alone on the MoE-Hub dispatch (97,596 packet hops): with one packet sent ahead
    # a look sends at most two packets (55,705 looks); the ring of packets sent ahead sends a
    # busy link's queued run in one look (29,505)
    config, overrides = GOLDEN.CASES["hub_dispatch_only"]
    s = _run(config, overrides, ["back_to_back"])
    hops = sum(v for k, v in s.items()
               if re.fullmatch(r"system\.(gpu\d+\.nvlink|switch\d+\.port)\d+\.tx_packets", k))
    assert hops == 97596
    assert 2 * s["system.engine.events.ch_tx"] < hops


ENGINES = r"""
import json, sys
sys.path.insert(0, {tests!r})
from conftest import REPO, drive_both_engines, load, load_script, model_stats
from moehub_arch.simulation import Simulation
G = load_script(REPO / "tools" / "golden_stats.py")
out = {{}}
for case in ("hub_tiny_tables", "ubench_alltoall"):
    config, overrides = G.CASES[case]
    out[case] = model_stats(Simulation(load(config, *overrides)).run())
out["small_buffers"] = model_stats(Simulation(load("ubench/alltoall.yaml", *{small!r})).run())
print(json.dumps(out, default=str))
"""


def test_the_engines_agree_on_runs_sent_ahead():
    # the MoE-Hub with tiny tables (switch inputs waiting for outputs, both virtual channels),
    # the all-to-all and the all-to-all short of credits (credit_wake), every shortcut on: every
    # stat, the event counts included
    numba, python = drive_both_engines(ENGINES.format(tests=str(REPO / "tests"),
                                                      small=SMALL_BUFFERS))
    assert numba["ubench_alltoall"]["system.engine.events.ch_tx"] > 0
    assert numba == python
