"""End-of-run invariants (checks.py): on by default, a violation is exit status 4 with the numbers.

Violations are produced for real: an observer corrupts a counter in the middle of a run (as a
buggy component would), or a kernel forgets to release the MoE-Hub tiles it claimed.
"""
import pytest

from conftest import CONFIGS, load, mini_system, read_stats_json, run_cli
from moehub_arch.simulation import RunObserver

SMALL = mini_system(num_gpus=4)


class Corrupt(RunObserver):
    """At `tick`, apply `change(state)` once (a stand-in for a component bug)."""

    def __init__(self, tick, change):
        self.tick, self.change, self.done = tick, change, False

    def next_stop(self, sim):
        return None if self.done else self.tick

    def on_pause(self, sim, tick, events, wall_seconds):
        if not self.done and tick >= self.tick:
            self.change(sim.state)
            self.done = True


def _run(config, *overrides, observers=()):
    from moehub_arch.simulation import Simulation
    sim = Simulation(load(config, *overrides))
    sim.run(list(observers))
    return sim


def test_invariants_hold_after_real_runs():
    from moehub_arch.checks import run_invariants
    for config, overrides in (("ubench/alltoall.yaml", SMALL),
                              ("hub/dispatch_combine.yaml", ()),
                              ("hub/tiny_tables.yaml", ())):
        sim = _run(config, *overrides)
        assert sim.completed and sim.violations == [] and run_invariants(sim) == []


def test_link_and_packet_violations_are_errors_with_numbers():
    from moehub_arch.simulation import InvariantError, Simulation

    def bug(st):
        st.ch.tx_wire_bytes[0] += 16      # a transmitter that counts a flit it never sent
        st.sys[0].pk_fresh += 1           # a packet handed out and never freed
    sim = Simulation(load("ubench/alltoall.yaml", *SMALL))
    with pytest.raises(InvariantError) as e:
        sim.run([Corrupt(5_000_000, bug)])
    assert e.value.exit_code == 4
    msg = str(e.value)
    sent = sim.stats["system.gpu0.nvlink0.tx_wire_bytes"]
    assert msg.startswith("2 end-of-run invariant(s) violated (--no-check skips the checks):")
    assert (f"link wire bytes sent != received (1): system.gpu0.nvlink0 -> system.switch0.port0 "
            f"sent {sent}, received {sent - 16}") in msg
    assert f"packets still allocated (pool entries free at the end, of {sim.state.pk_free.shape[0]})" in msg
    assert sim.stats is not None and sim.stats["simCompleted"] == 1   # the run itself finished


def test_no_check_skips_the_invariants():
    sim = _run("ubench/alltoall.yaml", *SMALL, "run.check_invariants=false",
               observers=[Corrupt(5_000_000, lambda st: st.ch.rx_packets.__setitem__(3, 0))])
    assert sim.completed and sim.violations == []


def test_token_accounting_is_an_invariant():
    """A row counted twice as computed: the MoE layer's accounting catches it."""
    from moehub_arch.simulation import InvariantError, Simulation
    sim = Simulation(load("experiments/functional.yaml", "workload.layer.tokens_per_gpu=16"))
    acct = sim.buffers["acct"].addr

    def bug(st):
        words = st.hbm_mem[0, acct:acct + 64].view("i8")
        words[2] += 1                          # ACCT_COMPUTED on GPU 0
    with pytest.raises(InvariantError) as e:
        sim.run([Corrupt(1, bug)])
    msg = str(e.value)
    assert "token accounting in scheme 'moehub': each of the 128 token-expert pairs" in msg
    assert "found computed 129" in msg
    assert sim.stats["system.moe.rows_computed"] == 129


def test_tiles_never_released_exit_4_through_the_command(tmp_path):
    """An expert kernel that forgets notify_ready.release: the run completes, but the hub's
    completion records are never freed. --no-check accepts the run."""
    src = (CONFIGS.parent / "workloads/kernels/hub/dispatch_combine.s").read_text()
    assert src.count("    notify_ready.release r1, r4\n    bra next\n") == 1
    kernel = tmp_path / "leaky.s"
    kernel.write_text(src.replace("    notify_ready.release r1, r4\n    bra next\n", "    bra next\n"))
    args = ("run", CONFIGS / "hub/dispatch_combine.yaml", "--quiet", "--set",
            f"workload.kernel_files=[{kernel}]")
    r = run_cli(*args, "-o", tmp_path / "a")
    assert r.returncode == 4, r.stderr
    assert "Traceback" not in r.stderr
    assert "MoE-Hub completion records never released (claimed tiles without " \
           "notify_ready.release) (4): system.gpu0.hub.aau: 64 live records" in r.stderr
    assert read_stats_json(tmp_path / "a")["simCompleted"] == 1
    r = run_cli(*args, "-o", tmp_path / "b", "--no-check")
    assert r.returncode == 0, r.stderr
