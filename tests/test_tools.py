"""The benchmark tool's arithmetic and report (tools/bench.py); its runs are measured, not tested."""

import pytest

from conftest import REPO, load_script


@pytest.fixture(scope="module")
def bench():
    return load_script(REPO / "tools" / "bench.py")


def test_growth_exponent_is_the_log_log_slope(bench):
    xs = [1024, 2048, 4096, 8192]
    assert bench.fit_exponent(xs, [3.0 * x for x in xs]) == pytest.approx(1.0)
    assert bench.fit_exponent(xs, [0.5 * x ** 1.5 for x in xs]) == pytest.approx(1.5)
    assert bench.fit_exponent(xs, [7.0] * 4) == pytest.approx(0.0, abs=1e-12)


def test_case_figures_and_table(bench):
    stats = {"hostSeconds": 2.0, "hostCpuSeconds": 1.6, "hostCompileSeconds": 0.25, "simSeconds": 1e-3,
             "simEvents": 8_000_000, "simInsts": 1_000_000,
             # injected packets: the GPUs' link tx counters only (not switch ports, not hub totals)
             "system.gpu0.nvlink0.tx_packets": 300_000, "system.gpu1.nvlink17.tx_packets": 100_000,
             "system.switch0.port0.tx_packets": 999, "system.gpu0.hub.tx_packets": 999,
             "system.engine.events.sm_issue": 6_000_000, "system.engine.events.ch_tx": 2_000_000,
             "system.engine.events.xbar": 0}
    fig = bench.case_figures(stats, peak_mb=300.0, wall=3.1)
    assert (fig["events_per_s"], fig["insts_per_s"], fig["slowdown"]) == (4_000_000, 500_000, 2000)
    assert (fig["packets"], fig["events_per_packet"]) == (400_000, 20.0)
    # per kind, largest first; kinds that never ran are left out
    assert list(fig["events_per_packet_by_kind"].items()) == [("sm_issue", 15.0), ("ch_tx", 5.0)]
    out = {"suite": "quick", "overrides": [], "cold_compile_s": None, "events_per_s": 4_000_000,
           "machine": {"cpu": "x", "cores": 2, "python": "3", "numba": "0"},
           "cases": {"alltoall": fig}, "sweeps": {},
           "packet_train": {"alltoall": {"train": 4, "sim_us_exact": 100.0, "sim_us_train": 104.0,
                                         "error_pct": 4.0, "events_ratio": 3.5, "speedup": 3.0}}}
    table = bench.render(out)
    assert "alltoall with run.packet_train=4: simulated time 104.0 us vs 100.0 us exact (+4.00%)" in table
    # wall s, run-loop CPU s, events, events/packet, ns/event (2.0 s / 8 M), CPU ns/event
    # (1.6 s / 8 M), k insts/s, peak MB, slowdown
    assert "| alltoall | 2.00 | 1.60 | 8,000,000 | 20.00 | 250 | 200 | 500 | 300 | 2,000 |" in table
    assert "not measured (--cold)" in table
    assert "- alltoall events per packet by kind: sm_issue 15.00, ch_tx 5.00" in table


def test_sweep_line_reports_wall_and_cpu_exponents(bench):
    out = {"suite": "quick", "overrides": [], "cold_compile_s": None, "events_per_s": None,
           "machine": {"cpu": "x", "cores": 2, "python": "3", "numba": "0"}, "cases": {},
           "sweeps": {"tokens": {"key": "workload.layer.tokens_per_gpu", "points": [128, 256],
                                 "wall_s": [1.0, 2.5], "cpu_s": [0.9, 1.8], "events": [10, 20],
                                 "exponent": 1.322, "cpu_exponent": 1.0, "events_exponent": 1.0}}}
    assert ("- tokens sweep (workload.layer.tokens_per_gpu; 128: 1.00 s, 256: 2.50 s): "
            "wall ~ x^1.32, CPU seconds ~ x^1.00, events ~ x^1.00") in bench.render(out)


def test_a_run_reports_its_cpu_seconds_as_a_host_stat():
    """hostCpuSeconds (what the sweeps fit): the run loop's process CPU time, a host-side stat
    (so left out of every model-stat comparison and golden fingerprint)."""
    import moehub_arch as mh
    from conftest import mini_system
    r = mh.run("configs/ubench/p2p_latency.yaml",
               mini_system(num_gpus=2, num_sms=2, links=2) + ["workload.launches.0.params.iters=3"])
    names = [s.name for s in r.stats]
    assert "hostCpuSeconds" in names and names.index("hostCpuSeconds") > names.index("hostSeconds")
    assert 0.0 <= r["hostCpuSeconds"] < 60.0
