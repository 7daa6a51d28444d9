"""Switch counters (components/switch_counter.py), the worked example of a block with its own
packets and instruction (docs/adding_a_block.md): every ticket ctr.add hands out is handed out
once (the tickets of all GPUs' blocks are 0 .. n - 1, each once), the switch serves each request
once and answers it once, both engines agree; off (the default) the block has no stat; a counter
out of range and a system without switches are named errors (exit 2). Every other config's
stats with the block off are the golden ones (tests/test_golden_stats.py)."""
import numpy as np
import pytest

from conftest import CONFIGS, cli_stats_per_engine, mini_system, run_cli, simulate

CONFIG = "ubench/switch_counter.yaml"


def small(gpus=2, grid=2, iters=3):
    return tuple(mini_system(gpus, 2, 2)) + (
        f"workload.launches.0.grid={grid}", f"workload.launches.0.params.iters={iters}")


@pytest.mark.parametrize("gpus, grid, iters, counter", [(8, 4, 8, 0), (4, 2, 5, 3)])
def test_every_ticket_is_handed_out_once(gpus, grid, iters, counter):
    sets = ([] if gpus == 8 else list(small(gpus, grid, iters))) + [
        f"workload.launches.0.params.counter={counter}"]
    sim = simulate(CONFIG, *sets)
    n = gpus * grid * iters
    tickets = np.concatenate([sim.read_buffer(g, "tickets")[:grid * iters] for g in range(gpus)])
    assert sorted(tickets.tolist()) == list(range(n))
    stats = {s.name: s.value for s in sim.stats}
    assert stats["system.switch_counter.counter_sum"] == n
    assert stats["system.switch_counter.adds_served"] == n
    for g in range(gpus):
        assert stats[f"system.gpu{g}.switch_counter.adds"] == grid * iters
        assert stats[f"system.gpu{g}.switch_counter.replies"] == grid * iters
    # one counter of one switch holds them all
    st = sim.state
    assert int(np.count_nonzero(st.ctr_table)) == 1 and int(st.ctr_table.max()) == n


def test_off_by_default_it_has_no_stats():
    sim = simulate("ubench/p2p_latency.yaml", "workload.launches.0.params.iters=2")
    assert not [s.name for s in sim.stats if "switch_counter" in s.name]


def test_numba_and_python_engines_agree(tmp_path):
    out = cli_stats_per_engine(CONFIGS / CONFIG, tmp_path, *(f"--set={a}" for a in small()))
    assert out["numba"]["system.switch_counter.counter_sum"] == 2 * 2 * 3
    assert out["numba"] == out["python"]


def test_a_counter_out_of_range_is_an_error_naming_the_line(tmp_path):
    r = run_cli("run", CONFIGS / CONFIG, *(f"--set={a}" for a in small()),
                "--set", "workload.launches.0.params.counter=16", "-o", tmp_path)
    assert r.returncode == 2, r.stderr
    assert "switch_counter.s:16" in r.stderr and "system.switch.counter.entries" in r.stderr
    assert "(value 16," in r.stderr and "Traceback" not in r.stderr
    r = run_cli("run", CONFIGS / CONFIG, *(f"--set={a}" for a in small()),
                "--set", "system.switch.counter.entries=0", "-o", tmp_path / "off")
    assert r.returncode == 2 and "switch_counter.s:16" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_a_system_without_switches_is_refused(tmp_path):
    r = run_cli("run", CONFIGS / CONFIG, "--set", "system.num_gpus=2",
                "--set", "system.switch.topology=bridge_pairs", "-o", tmp_path)
    assert r.returncode == 2, r.stderr
    assert "system.switch.counter.entries" in r.stderr and "Traceback" not in r.stderr


def test_blocks_command_prints_it():
    r = run_cli("blocks", "switch_counter")
    assert r.returncode == 0, r.stderr
    assert "ctr_entries (counters) <- system.switch.counter.entries" in r.stdout
    assert "stat [system].switch_counter.counter_sum (count)" in r.stdout
