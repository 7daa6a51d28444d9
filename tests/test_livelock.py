"""Livelock detection (watchdog.LivelockWatchdog, run.livelock_interval): thread blocks that keep
issuing instructions but neither touch memory, the hub or the links nor exit are reported with
their kernel, line and loop (exit status 3, stats so far written); loops that do touch memory,
and thread blocks that wait (the NoProgressWatchdog's concern), are not livelocks.
"""
import pytest

from conftest import CONFIGS, load, mini_system, p2p_kernel, read_stats_json, run_cli

P2P = "ubench/p2p_latency.yaml"
# GPU 1 exits at once; GPU 0 runs the body (line 6 is the first line after the kernel's head)
SPIN = "    beq %gpu, 1, out\ntop:\n    add r1, r1, 1\n    bra top\nout:\n    exit\n"
_kernel = p2p_kernel


def _run(tmp_path, body, *overrides):
    from moehub_arch.simulation import Simulation
    sim = Simulation(load(P2P, *mini_system(), _kernel(tmp_path, body),
                          "run.watchdog_interval=50us", *overrides))
    return sim


def test_register_only_loop_is_a_livelock_naming_kernel_line_and_loop(tmp_path):
    r = run_cli("run", CONFIGS / P2P, "-o", tmp_path / "out", *[f"--set={s}" for s in mini_system()],
                "--set", _kernel(tmp_path, SPIN), "--set", "run.livelock_interval=5us")
    assert r.returncode == 3, r.stderr
    err = r.stderr
    assert "Traceback" not in err and err.startswith("moehub-sim: error: livelock: ")
    assert "1 thread block(s) kept issuing instructions for 5 us" in err
    assert "(run.livelock_interval)" in err
    assert ("kernel 'pingpong' (GPU 0, SM 0, TB 0) at " in err
            and "in the loop of lines 8-9 (branch at line 9 back to line 8)" in err)
    assert "1 kernel launch(es) unfinished" in err
    stats = read_stats_json(tmp_path / "out")
    assert stats["simCompleted"] == 0
    # stopped exactly when the interval since the TB's start (its last progress) ran out
    import re
    since = int(re.search(r"no memory, hub or link access since tick (\d+) \(5 us\)", err).group(1))
    assert 0 < since < 5_000_000 and stats["simTicks"] == since + 5_000_000
    assert stats["system.gpu0.launch0.end_tick"] == -1


def test_sleeping_is_waiting_not_a_livelock(tmp_path):
    # a TB that sleeps (a back-off) waits for time as others wait for a flag: only the limits
    # end a sleep loop that counts its rounds; one long sleep longer than the interval is no
    # livelock either. (A sleep loop that changes nothing at all can never end: a livelock,
    # tests/test_robustness_edges.py.)
    sim = _run(tmp_path, "    beq %gpu, 1, out\ntop:\n    sleep 100\n    add r2, r2, 1\n"
                         "    bra top\nout:\n    exit\n",
               "run.livelock_interval=3us", "run.max_ticks=20us")
    sim.run()
    assert sim.stopped and "simulated-time limit" in sim.stopped
    sim = _run(tmp_path, "    sleep 20000\n    exit\n", "run.livelock_interval=3us")
    sim.run()
    assert sim.completed


def test_polling_memory_is_not_a_livelock(tmp_path):
    # a loop that loads a word every iteration touches memory: it runs until its bound ends it
    from moehub_arch.simulation import Simulation
    body = ("    beq %gpu, 1, out\n    mov r2, 0\ntop:\n    ld r1, [%flag]\n    add r2, r2, 1\n"
            "    blt r2, 200, top\nout:\n    exit\n")
    sim = _run(tmp_path, body, "run.livelock_interval=1us")
    sim.run()
    assert sim.completed and sim.stats["simTicks"] > 2_000_000


def test_a_register_loop_shorter_than_the_interval_finishes(tmp_path):
    body = ("    beq %gpu, 1, out\n    mov r2, 0\ntop:\n    add r2, r2, 1\n"
            "    blt r2, 500, top\nout:\n    exit\n")
    sim = _run(tmp_path, body, "run.livelock_interval=20us")
    sim.run()
    assert sim.completed


def test_livelock_check_can_be_switched_off(tmp_path):
    from moehub_arch.simulation import Simulation
    sim = _run(tmp_path, SPIN, "run.livelock_interval=0ps", "run.max_ticks=10us")
    sim.run()
    assert sim.stopped and not sim.completed


def test_a_wait_then_spin_counts_from_the_wake_up(tmp_path):
    # GPU 0 waits 8 us for GPU 1's flag (no issue, no livelock), then spins: reported only once
    # it has spun for the whole interval after the wake-up
    from moehub_arch.simulation import SimulationError
    body = ("    beq %gpu, 1, setter\n    wait.ge [%flag], 1\ntop:\n    add r1, r1, 1\n    bra top\n"
            "setter:\n    sleep 15000\n    flag.set 0, [%flag], 1\n    exit\n")
    sim = _run(tmp_path, body, "run.livelock_interval=4us")
    with pytest.raises(SimulationError) as e:
        sim.run()
    assert "livelock" in str(e.value) and "in the loop of lines 9-10" in str(e.value)
    from moehub_arch.engine.state import TB_READY
    woke = int(sim.state.tb.progress[sim.state.tb.state == TB_READY].max())
    assert woke > 4_000_000 and sim.stats["simTicks"] >= woke + 4_000_000
