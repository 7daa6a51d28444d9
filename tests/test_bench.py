"""tools/bench.py without simulating: the suites' cases are valid configs (the quick suite has the
H800 layer and a 64-GPU case), a sweep point that is also a case runs once, and the report states
what the whole suite cost. (A real run of the suite takes minutes: not here.)"""
from conftest import REPO, load_script

bench = load_script(REPO / "tools" / "bench.py")


def _config(config, overrides):
    from moehub_arch.config import load_config
    return load_config(REPO / config, list(overrides))


def test_every_case_of_both_suites_is_a_valid_config():
    for suite in (bench.QUICK_CASES, bench.FULL_CASES):
        for name, (config, overrides) in suite.items():
            assert _config(config, overrides).system.num_gpus >= 2, name   # loads, or raises


def test_the_quick_suite_has_an_h800_layer_and_64_gpus():
    gpus = {n: _config(c, o).system.num_gpus for n, (c, o) in bench.QUICK_CASES.items()}
    assert gpus["dsv3_64gpu_moehub"] == 64
    h800 = _config(*bench.QUICK_CASES["dsv3_hgx_h800_moehub"])
    assert h800.system.num_gpus == 8 and "h800" in bench.QUICK_CASES["dsv3_hgx_h800_moehub"][0]


def test_a_run_is_made_once_per_config_and_overrides_in_any_order(monkeypatch):
    calls = []

    def fake_run_sim(config, overrides, engine="numba", env_extra=None):
        calls.append((config, list(overrides)))
        return {"simEvents": len(calls)}, 1.0, 1.0
    monkeypatch.setattr(bench, "run_sim", fake_run_sim)
    monkeypatch.setattr(bench, "_RUNS", {})
    a = bench.run_once("c.yaml", ["x=1", "y=2"])
    b = bench.run_once("c.yaml", ["y=2", "x=1"])
    c = bench.run_once("c.yaml", ["x=1"])
    d = bench.run_once("d.yaml", ["x=1", "y=2"])
    assert a is b and len(calls) == 3
    assert {r[0]["simEvents"] for r in (a, c, d)} == {1, 2, 3}


def test_the_tokens_sweep_reuses_the_quick_case_it_shares():
    config, key, points, fixed = bench.QUICK_SWEEPS["tokens"]
    case_config, case_over = bench.QUICK_CASES["dsv3_dgx_h100_moehub"]
    shared = [x for x in points
              if (config, tuple(sorted(fixed + [f"{key}={x}"]))) == (case_config, tuple(sorted(case_over)))]
    assert shared == [512]


def test_the_report_states_the_suite_cost():
    out = {"suite": "quick", "overrides": [], "machine": {"cpu": "x", "cores": 2, "python": "3",
                                                          "numba": "0"},
           "cold_compile_s": None, "cases": {}, "sweeps": {}, "events_per_s": None,
           "suite_wall_s": 171.4, "suite_cpu_s": 160.2}
    assert "- the whole quick suite: 171 s wall, 160 CPU s in its runs" in bench.render(out)


def test_the_full_suite_has_the_issue_45_cases_and_the_validation_run():
    gpus = {n: _config(c, o).system.num_gpus for n, (c, o) in bench.FULL_CASES.items()}
    assert gpus["dsv3_64gpu_moehub_1024tok"] == 64 and gpus["dsv3_gh200_nvl32"] == 32
    assert _config(*bench.FULL_CASES["dsv3_dgx_h100_deepep"]).workload.layer.tokens_per_gpu == 4096
    # the 64-GPU case is the GPU sweep's last point: it runs once for both
    config, key, points, fixed = bench.FULL_SWEEPS["gpus"]
    case_config, case_over = bench.FULL_CASES["dsv3_64gpu_moehub_1024tok"]
    assert (config, sorted(fixed + [f"{key}={points[-1]}"])) == (case_config, sorted(case_over))
    assert all((REPO / bench.TOOL_CASES[n][0]).is_file() for n in bench.TOOL_CASES)


def test_the_report_gives_events_per_packet_ns_per_event_and_whole_tool_times():
    case = {"wall_s": 2.0, "cpu_s": 1.9, "events": 10_000_000, "events_per_packet": 2.5,
            "ns_per_event": 200.0, "cpu_ns_per_event": 190.0, "insts_per_s": 1e6,
            "peak_mem_mb": 300, "slowdown": 1000, "warm_start_s": 1.0}
    out = {"suite": "full", "overrides": [], "machine": {"cpu": "x", "cores": 2, "python": "3",
                                                         "numba": "0"},
           "cold_compile_s": None, "cases": {"a": case},
           "tools": {"validate": {"command": "tools/validate.py", "wall_s": 900.0, "cpu_s": 1700.0}},
           "sweeps": {}, "events_per_s": None}
    text = bench.render(out)
    assert "| a | 2.00 | 1.90 | 10,000,000 | 2.50 | 200 | 190 |" in text
    assert "| validate (`tools/validate.py`) | 900.0 (whole tool) | 1700.0 (whole tool) |" in text
