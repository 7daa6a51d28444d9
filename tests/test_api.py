"""The Python API (moehub_arch/api.py): the same stats as `moehub-sim run`, sweeps as DataFrames,
results read back from directories, and the CLI's errors as exceptions."""
import json

import pytest

import moehub_arch as mh
from conftest import CONFIGS, mini_system, model_stats, read_stats_json, run_cli

P2P = "configs/ubench/p2p_latency.yaml"
SMALL = mini_system(num_gpus=2, num_sms=2, links=2) + ["workload.launches.0.params.iters=3"]
LAYER = "configs/experiments/functional.yaml"
LAYER_SMALL = ["scheme=deepep", "workload.layer.tokens_per_gpu=32"]


def _model_values(path):
    return {k: v for k, v in read_stats_json(path).items() if not k.startswith("host")}


def test_api_run_matches_the_command_line_bit_for_bit(tmp_path):
    r = run_cli("run", LAYER, "-o", tmp_path / "cli", "--quiet",
                *[f"--set={o}" for o in LAYER_SMALL])
    assert r.returncode == 0, r.stderr
    cli = _model_values(tmp_path / "cli")
    api = mh.run(LAYER, LAYER_SMALL, outdir=tmp_path / "api")
    assert _model_values(tmp_path / "api") == cli
    assert model_stats(api.stats) == cli
    assert json.loads((tmp_path / "api" / "config.json").read_text()) == \
        json.loads((tmp_path / "cli" / "config.json").read_text())
    # in memory (no outdir, overrides as a mapping): same stats, nothing written
    mem = mh.run(LAYER, {"scheme": "deepep", "workload.layer.tokens_per_gpu": 32})
    assert mem.outdir is None and model_stats(mem.stats) == cli
    assert mem["system.moe.rows_combined"] == 32 * 2 * 4
    assert mem["system.moe.output_max_abs_error"] <= \
        1e-6 * mem["system.moe.output_max_abs_reference"]
    # read back: values, units and descriptions as the run had them
    back = mh.load_results(tmp_path / "api")
    assert [(s.name, s.value, s.unit, s.desc) for s in back] == \
        [(s.name, s.value, s.unit, s.desc) for s in api.stats]
    assert back.config == api.config and back.config["scheme"] == "deepep"


def test_results_views_and_report_figures():
    r = mh.run(P2P, SMALL, seed=3)
    assert r.config["run"]["seed"] == 3 and r.cfg.run.seed == 3
    assert set(r.report) == {"p2p_latency_us"} and r.report["p2p_latency_us"] > 0
    assert r.unit("simTicks") == "ps" and "simulated time" in r.description("simTicks")
    with pytest.raises(KeyError, match="did you mean 'simTicks'"):
        r["simTick"]
    links = r.match("system.gpu1.nvlink*.rx_packets")
    assert list(links) == ["system.gpu1.nvlink0.rx_packets", "system.gpu1.nvlink1.rx_packets"]
    long = r.to_pandas()
    assert list(long.columns) == ["name", "component", "stat", "value", "unit", "description"]
    assert len(long) == len(r.stats)
    row = long[long.name == "system.gpu1.nvlink0.rx_packets"].iloc[0]
    assert (row.component, row.stat, row.unit) == ("system.gpu1.nvlink0", "rx_packets", "packets")
    wide = r.to_pandas("wide", "system.gpu1.nvlink*.rx_packets")
    assert wide.shape == (1, 2) and wide.iloc[0].tolist() == list(links.values())
    assert wide.attrs["units"]["system.gpu1.nvlink0.rx_packets"] == "packets"
    with pytest.raises(ValueError, match="'long' or 'wide'"):
        r.to_pandas("tall")
    # a limit ends the run early: results, with the reason
    stopped = mh.run(P2P, SMALL + ["run.max_ticks=1us"])
    assert stopped.stopped and "max_ticks" in stopped.stopped and stopped["simTicks"] <= 10 ** 6


def test_compare_runs_in_memory_and_on_disk(tmp_path):
    fast = mh.run(P2P, SMALL, outdir=tmp_path / "fast")
    slow = mh.run(P2P, SMALL + ["system.nvlink.latency=500ns"])
    slow.label = "slow links"
    df = mh.compare([tmp_path / "fast", slow, fast], ["simTicks", "system.report.*"])
    assert list(df.columns) == ["stat", "unit", "fast", "slow links", "fast #2",
                                "slow links vs first", "fast #2 vs first"]
    ticks = df.set_index("stat").loc["simTicks"]
    assert ticks["fast"] == fast["simTicks"] and ticks["slow links"] == slow["simTicks"]
    assert ticks["slow links vs first"] == f"{slow['simTicks'] / fast['simTicks']:.3f}x slower"
    assert ticks["fast #2 vs first"] == "same"
    assert list(df.stat) == ["simTicks", "system.report.p2p_latency_us"]
    from moehub_arch.analysis import AnalysisError
    with pytest.raises(AnalysisError, match="--stats nothing.here: no stat of"):
        mh.compare([fast, slow], "nothing.here")
    with pytest.raises(ValueError, match="no runs"):
        mh.compare([])


def test_reference_engine_runs_in_a_child_process_with_identical_stats():
    from moehub_arch.frontend import jit_disabled
    assert not jit_disabled()   # the tests run compiled: python is the other engine
    numba = mh.run(P2P, SMALL)
    python = mh.run(P2P, SMALL, engine="python")
    assert python.sim is None and python.config["run"]["engine"] == "python"
    assert model_stats(python.stats) == model_stats(numba.stats)


def test_system_file_and_load_warnings(tmp_path, monkeypatch):
    """`system=` is `--system`; the CLI's load warnings are Python warnings."""
    (tmp_path / "mysys.yaml").write_text(
        "extends: configs/systems/dgx_h100.yaml\nsystem:\n  name: mysys\n  num_gpus: 2\n"
        "  nvlink: {links_per_gpu: 2}\n  switch: {gpu_link_switch: [0, 1]}\n")
    monkeypatch.chdir(tmp_path)   # shipped configs are found from any directory
    r = mh.run(P2P, {"workload.launches.0.params.iters": 2}, system="mysys.yaml")
    assert r.config["system"]["name"] == "mysys" and r.cfg.system.nvlink.links_per_gpu == 2
    assert "system.gpu1.nvlink1.rx_packets" in r and "system.gpu1.nvlink2.rx_packets" not in r
    (tmp_path / "late.yaml").write_text(f"extends: [mysys.yaml, {P2P}]\n")
    with pytest.warns(UserWarning, match=r"system.num_gpus \(2 -> 8"):
        cfg = mh.load_config("late.yaml")
    assert len(cfg.load_warnings) == 1


def test_sweep_of_four_points_is_a_dataframe_of_four_rows(tmp_path):
    spec = {"config": str(CONFIGS / "ubench/p2p_latency.yaml"),
            "set": dict(o.split("=", 1) for o in SMALL),
            "grid": {"workload.launches.0.params.iters": [2, 3],
                     "system.nvlink.latency": ["250ns", "500ns"]},
            "stats": ["simTicks", "system.report.*"]}
    df = mh.sweep(spec, outdir=tmp_path / "sw", workers=2, progress=False)
    assert len(df) == 4 and list(df.status) == ["ok"] * 4
    assert list(df.columns) == ["point", "status", "workload.launches.0.params.iters",
                                "system.nvlink.latency", "simTicks",
                                "system.report.p2p_latency_us", "outdir", "error"]
    assert sorted(zip(df["workload.launches.0.params.iters"], df["system.nvlink.latency"])) == \
        [(2, "250ns"), (2, "500ns"), (3, "250ns"), (3, "500ns")]
    # longer links, longer latency; each row's run directory reads back with the same stats
    by = df.set_index(["workload.launches.0.params.iters", "system.nvlink.latency"])
    assert by.loc[(3, "500ns"), "system.report.p2p_latency_us"] > \
        by.loc[(3, "250ns"), "system.report.p2p_latency_us"]
    for row in df.itertuples():
        assert mh.load_results(row.outdir)["simTicks"] == row.simTicks
    # the same point run alone gives the same numbers
    one = mh.run(P2P, SMALL + ["workload.launches.0.params.iters=2", "system.nvlink.latency=500ns"])
    assert one["simTicks"] == by.loc[(2, "500ns"), "simTicks"]
    # a sweep file through the same call, resumed: every point found finished
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(spec))   # JSON is YAML
    again = mh.sweep(path, outdir=tmp_path / "sw", workers=1, progress=False)
    assert list(again.status) == ["ok (earlier run)"] * 4
    assert again.simTicks.tolist() == df.simTicks.tolist()


def test_a_script_without_a_main_guard_can_sweep(tmp_path):
    """Worker processes start fresh (spawn) and must not run the user's script again."""
    import subprocess
    import sys
    script = tmp_path / "study.py"
    spec = {"config": str(CONFIGS / "ubench/p2p_latency.yaml"),
            "set": dict(o.split("=", 1) for o in SMALL), "stats": ["simTicks"],
            "grid": {"workload.launches.0.params.iters": [2]}}
    script.write_text("import moehub_arch as mh\n"
                      f"df = mh.sweep({spec!r}, outdir='sw', workers=1, progress=False)\n"
                      "print('rows', len(df), df.status[0])\n")
    r = subprocess.run([sys.executable, script], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "rows 1 ok\n"


def test_sweep_without_stats_selects_the_default_columns(tmp_path):
    from moehub_arch.sweep.spec import DEFAULT_STATS, load_sweep, sweep_from_dict
    path = tmp_path / "nostats.yaml"
    path.write_text(f"config: {CONFIGS / 'experiments/functional.yaml'}\n"
                    "grid: {scheme: [deepep, moehub]}\n")
    assert load_sweep(path).stats == DEFAULT_STATS
    spec = sweep_from_dict({"config": LAYER, "grid": {"scheme": ["deepep"]},
                            "stats": ("simTicks",)})
    assert spec.stats == ("simTicks",) and spec.name == "sweep" and spec.file is None
    assert str(spec.outdir) == "sweep-out/sweep"


def test_bad_input_raises_the_command_lines_error(tmp_path):
    from moehub_arch.config import ConfigError
    from moehub_arch.sweep.spec import SweepError

    bad = tmp_path / "bad.yaml"
    bad.write_text(f"extends: {CONFIGS / 'ubench/p2p_latency.yaml'}\n"
                   "system:\n  switch:\n    traversal_latency: 250 parsecs\n")
    with pytest.raises(ConfigError) as e:
        mh.run(bad)
    assert "bad.yaml" in str(e.value) and "system.switch.traversal_latency" in str(e.value)
    assert e.value.exit_code == 2
    cli = run_cli("run", bad, "-o", tmp_path / "o")
    assert cli.returncode == 2
    assert cli.stderr.strip() == f"moehub-sim: error: {e.value}"

    with pytest.raises(ConfigError, match="bandwith.*did you mean 'bandwidth'"):
        mh.load_config(P2P, {"system.nvlink.bandwith": "20GB/s"})
    with pytest.raises(ConfigError, match="missing.yaml: config file not found"):
        mh.run(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="trace.enabled: .*output directory"):
        mh.run(P2P, SMALL + ["trace.enabled=true"])
    with pytest.raises(SweepError, match="sweep spec: gird: unknown key; did you mean 'grid'"):
        mh.sweep({"config": P2P, "gird": {}}, outdir=tmp_path / "s", progress=False)
    with pytest.raises(SweepError,
                       match=r"sweep spec: point \{'system.nvlink.latency': '1 fortnight'"):
        mh.sweep({"config": str(CONFIGS / "ubench/p2p_latency.yaml"),
                  "grid": {"system.nvlink.latency": ["1 fortnight"]}},
                 outdir=tmp_path / "s", progress=False)
    with pytest.raises(ValueError, match="engine"):
        mh.run(P2P, SMALL, engine="verilog")
    with pytest.raises(TypeError, match="key.path=value"):
        mh.run(P2P, ["system.num_gpus"])
    from moehub_arch.analysis import AnalysisError
    with pytest.raises(AnalysisError, match="no stats.json"):
        mh.load_results(tmp_path)


def test_a_failed_run_carries_its_stats(tmp_path):
    """A runtime error in a kernel: the CLI's message and exit code, and the stats so far."""
    from moehub_arch.simulation import SimulationError

    kernel = tmp_path / "k.s"
    kernel.write_text(".kernel pingpong\n.param peer\n.param flag\n.param iters\n.param times\n"
                      "    ld r1, [%flag+4]      # misaligned word\n    exit\n")
    with pytest.raises(SimulationError) as e:
        mh.run(P2P, SMALL + [f"workload.kernel_files=[{kernel}]"], outdir=tmp_path / "o")
    assert "k.s:6: runtime error in kernel 'pingpong'" in str(e.value)
    assert f"{tmp_path / 'o'}/stats.txt" in str(e.value) and e.value.exit_code == 2
    assert e.value.results["simTicks"] == read_stats_json(tmp_path / "o")["simTicks"]
    # the same from the reference engine's child process
    with pytest.raises(SimulationError) as child:
        mh.run(P2P, SMALL + [f"workload.kernel_files=[{kernel}]"], engine="python")
    assert "k.s:6: runtime error in kernel 'pingpong'" in str(child.value)
    assert child.value.results["simTicks"] == e.value.results["simTicks"]
