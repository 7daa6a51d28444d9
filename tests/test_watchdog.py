"""Stuck runs explain themselves (exit status 3, stats so far written) and limits stop runs cleanly.

Real deadlocks: a flag nobody sets; an MoE-Hub expert window (a ring of slots) too small for a
protocol that sends every row before its consumer starts. A real hang without a deadlock: a
thread block that sleeps far longer than the watchdog interval.
"""
import json

import pytest

from conftest import CONFIGS, load, mini_system, p2p_kernel, read_stats_json, run_cli

P2P = "ubench/p2p_latency.yaml"
_kernel = p2p_kernel


def _stuck(config, *overrides):
    """Run in-process; returns (SimulationError, Simulation)."""
    from moehub_arch.simulation import Simulation, SimulationError
    sim = Simulation(load(config, *overrides))
    with pytest.raises(SimulationError) as e:
        sim.run()
    return e.value, sim


def test_flag_nobody_sets_is_a_deadlock_naming_the_flag(tmp_path):
    # GPU 1 exits at once; GPU 0 waits for word 1 of buffer 'flag' to reach 1: nobody writes it
    kernel = _kernel(tmp_path, "    beq %gpu, 1, out\n    wait.ge [%flag+8], 1\nout:\n    exit\n")
    r = run_cli("run", CONFIGS / P2P, "-o", tmp_path / "out", *[f"--set={s}" for s in mini_system()],
                "--set", kernel)
    assert r.returncode == 3, r.stderr
    assert "Traceback" not in r.stderr
    err = r.stderr
    assert "deadlock at tick" in err and "1 kernel launch(es) unfinished ('pingpong' on GPU 0)" in err
    assert "Likely cause:" in err
    assert ("1 thread block(s) wait for buffer 'flag' word 1 on GPU 0 to become >= 1 (it holds 0); "
            "nothing still in flight writes it: a flag nobody sets") in err
    assert "kernel 'pingpong' (GPU 0, SM 0, TB 0) at " in err and "k.s:7: waiting on a flag" in err
    assert "kernel 'pingpong' on GPU 0: running, 0 of 1 thread blocks exited" in err
    # the stats so far are dumped as usual
    stats = read_stats_json(tmp_path / "out")
    assert stats["simCompleted"] == 0 and stats["system.gpu1.launch1.end_tick"] > 0
    assert stats["system.gpu0.launch0.end_tick"] == -1
    assert json.loads((tmp_path / "out" / "config.json").read_text())["system"]["num_gpus"] == 2


def test_expert_window_too_small_for_send_all_then_consume_deadlocks():
    """The expert kernel queued behind the dispatch kernel on one stream: dispatch must land every
    row before any tile is claimed, but each expert's window holds 8 rows (one tile)."""
    err, sim = _stuck("hub/dispatch_combine.yaml", "workload.launches.1.stream=0",
                      "workload.moe.window_rows=8")
    assert err.exit_code == 3
    msg = str(err)
    assert msg.startswith("deadlock at tick")
    assert ("the windows of expert(s) 0, 1 on GPU 0 are full and no thread block claims from "
            "them") in msg
    assert "workload.moe.window_rows is too small for a protocol that sends everything" in msg
    assert "system.gpu0.hub.aau: window of expert 0 full (8 of 8 rows live" in msg
    assert "packet(s) waiting for window or record-table space" in msg
    assert "kernel 'moe_expert' on GPU 0: not started (stream 0: waits for 'moe_dispatch')" in msg
    assert "waiting in fence" in msg and "send_to_expert row(s) not yet landed" in msg
    # stats so far: rows accepted but not all landed
    s = sim.stats
    accepted = sum(s[f"system.gpu{g}.hub.rpm.rows_accepted"] for g in range(4))
    landed = sum(s[f"system.gpu{g}.hub.aau.records_written"] for g in range(4))
    assert accepted == 4 * 32 * 2 and landed == 4 * 2 * 8 < accepted   # 2 experts x 8 rows per GPU
    assert s["simCompleted"] == 0


def test_row_ring_full_names_the_destination():
    """Tiny row rings: the producers block in send_to_expert, and the report says toward where."""
    err, _ = _stuck("hub/dispatch_combine.yaml", "workload.launches.1.stream=0",
                    "workload.moe.window_rows=8", "system.gpu.hub.moe.rpm.row_queue_depth=2")
    msg = str(err)
    assert "send_to_expert" in msg and "blocked: the RPM row ring toward GPU" in msg
    assert "(2 of 2 rows accepted but not yet landed; system.gpu.hub.moe.rpm.row_queue_depth)" in msg
    assert "system.gpu0.hub.rpm: row ring toward GPU" in msg


def test_watchdog_stops_a_run_where_no_instruction_issues(tmp_path):
    # 10^11 cycles of sleep: events remain (the wake-up), but nothing issues for ~55 s
    kernel = _kernel(tmp_path, "    sleep 100000000000\n    exit\n")
    err, sim = _stuck(P2P, *mini_system(), kernel, "run.watchdog_interval=20us")
    assert err.exit_code == 3
    msg = str(err)
    assert msg.startswith("watchdog: no instruction issued for 20 us of simulated time")
    assert "run.watchdog_interval = 20 us" in msg
    assert "ready, next instruction at tick" in msg and "(sleeping or waiting for memory)" in msg
    assert "Event queue: 2 event(s), the next at tick" in msg and "(sm_issue)" in msg
    # it fired within two intervals of the last instruction, with the stats so far
    assert 20_000_000 <= sim.stats["simTicks"] <= 40_000_000
    assert sim.stats["simCompleted"] == 0


def test_watchdog_interval_is_configurable_and_can_be_disabled(tmp_path):
    from moehub_arch.config import ConfigError
    from moehub_arch.simulation import Simulation
    # a 2 ms sleep (1.83 GHz): the default interval (1 ms) fires, a 5 ms one or 0ps does not
    kernel = _kernel(tmp_path, "    sleep 3660000\n    exit\n")
    err, _ = _stuck(P2P, *mini_system(), kernel)
    assert "run.watchdog_interval = 1 ms" in str(err)
    for interval in ("5ms", "0ps"):
        sim = Simulation(load(P2P, *mini_system(), kernel, f"run.watchdog_interval={interval}"))
        sim.run()
        assert sim.completed and sim.stats["simTicks"] > 2_000_000_000
    with pytest.raises(ConfigError, match="run.watchdog_interval: expected a quantity with a unit"):
        load(P2P, "run.watchdog_interval=5")


def test_max_ticks_stops_cleanly_with_stats(tmp_path):
    r = run_cli("run", CONFIGS / "ubench/alltoall.yaml", "-o", tmp_path, "--quiet",
                *[f"--set={s}" for s in mini_system(num_gpus=4)], "--max-ticks", "20us")
    assert r.returncode == 0, r.stderr
    assert "stopped at the simulated-time limit 20 us (run.max_ticks, --max-ticks)" in r.stderr
    stats = read_stats_json(tmp_path)
    assert stats["simCompleted"] == 0 and 0 < stats["simTicks"] <= 20_000_000
    assert json.loads((tmp_path / "config.json").read_text())["run"]["max_ticks"] == 20_000_000


def test_limits_in_process():
    from moehub_arch.simulation import Simulation
    small = mini_system(num_gpus=4)
    full = Simulation(load("ubench/alltoall.yaml", *small))
    full.run()
    # a tick limit beyond the end changes nothing; one inside stops exactly there
    late = Simulation(load("ubench/alltoall.yaml", *small, f"run.max_ticks={full.stats['simTicks'] + 1}ps"))
    late.run()
    assert late.completed and late.stopped is None and late.stats["simInsts"] == full.stats["simInsts"]
    cut = Simulation(load("ubench/alltoall.yaml", *small, "run.max_ticks=10us"))
    cut.run()
    assert not cut.completed and "10 us" in cut.stopped
    assert cut.stats["simInsts"] < full.stats["simInsts"]
    from moehub_arch.watchdog import next_event
    assert int(cut.state.sys[0].q_now) <= 10_000_000 < next_event(cut.state)[1]
    # the wall-clock limit is checked between batches: 1 ps of host time stops after the first
    wall = Simulation(load("ubench/alltoall.yaml", *small, "run.max_wall=1ps", "run.batch_events=200"))
    wall.run()
    assert "wall-clock limit" in wall.stopped and wall.stats["simEvents"] == 200
    assert wall.stats["simCompleted"] == 0


def test_watchdog_ignores_time_without_resident_thread_blocks():
    """A 3 ms host delay before a launch is not a hang: no thread block is resident meanwhile."""
    from moehub_arch.simulation import Simulation
    sim = Simulation(load(P2P, *mini_system(), "workload.launches.0.host_delay=3ms"))
    sim.run()
    assert sim.completed and sim.stats["system.gpu0.launch0.start_tick"] > 3_000_000_000


def test_full_record_table_is_named_before_the_flags_it_leaves_unset():
    """A record table smaller than a tile can need, built around the load-time check (which
    refuses it, see test_bad_inputs): the report puts the full table with waiting packets first,
    and the flags nobody sets after it, as its consequence."""
    import attrs
    from moehub_arch.simulation import Simulation, SimulationError
    cfg = load("experiments/functional.yaml", "scheme=moehub")
    aau = attrs.evolve(cfg.system.gpu.hub.moe.aau, record_table_entries=8)
    moe = attrs.evolve(cfg.system.gpu.hub.moe, aau=aau)
    cfg = attrs.evolve(cfg, system=attrs.evolve(cfg.system, gpu=attrs.evolve(
        cfg.system.gpu, hub=attrs.evolve(cfg.system.gpu.hub, moe=moe))))
    sim = Simulation(cfg)
    with pytest.raises(SimulationError) as e:
        sim.run()
    msg = str(e.value)
    causes = msg[msg.index("Likely cause:"):msg.index("Thread blocks resident:")].splitlines()[1:]
    assert causes[0].strip().startswith("the completion-record table of GPU 0's AAU is full (8 of 8)")
    assert "record_table_entries needs at least 31 with system.gpu.hub.moe.dam.tile_rows = 16" in causes[0]
    flags = [c for c in causes if "a flag nobody sets" in c]
    assert flags and all("likely a consequence of the above" in c for c in flags)
    assert causes.index(flags[0]) > max(i for i, c in enumerate(causes) if "record table" in c)
