"""System x workload composition (`system: FILE`, `--system FILE`), override warnings, where each
value came from, and the one path rule (a config's folder first, then the shipped data folders)
from a working directory outside the checkout."""
import json

import pytest

from conftest import CONFIGS, REPO, run_cli

MYSYS = """extends: configs/systems/dgx_h100.yaml
system:
  name: mysys
  num_gpus: 2
  nvlink: {links_per_gpu: 4}
  switch: {gpu_link_switch: [0, 1, 2, 3]}
"""
SHORT = "workload.launches.0.params.chunks_per_tb=4"


def p2p_expected_GBps(links):
    return links * 25 * 128 / (128 + 16)     # DGX H100 link rate x payload share of a 128 B store packet


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    (tmp_path / "mysys.yaml").write_text(MYSYS)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_system_reference_replaces_the_benchmarks_system(user_dir):
    from moehub_arch.config import load_config
    (user_dir / "bench.yaml").write_text("extends: configs/ubench/p2p_bandwidth.yaml\n"
                                         "system: mysys.yaml\n")
    cfg = load_config(user_dir / "bench.yaml")
    assert (cfg.system.name, cfg.system.num_gpus, cfg.system.nvlink.links_per_gpu) == ("mysys", 2, 4)
    assert cfg.load_warnings == ()
    assert cfg.workload.kernel_files == (str(REPO / "workloads/kernels/ubench/p2p_bandwidth.s"),)
    same = load_config(CONFIGS / "ubench/p2p_bandwidth.yaml", system_file="mysys.yaml")
    assert same.to_dict()["system"] == cfg.to_dict()["system"]
    assert same.to_dict()["value_sources"]["system.nvlink.links_per_gpu"] == "mysys.yaml"
    from moehub_arch import api
    assert api.load_config(CONFIGS / "ubench/p2p_bandwidth.yaml", system="mysys.yaml").system == same.system


def test_a_later_extends_entry_overriding_the_users_system_warns(user_dir):
    from moehub_arch.config import load_config
    (user_dir / "bad.yaml").write_text("extends: [mysys.yaml, configs/ubench/p2p_bandwidth.yaml]\n")
    cfg = load_config(user_dir / "bad.yaml")
    assert cfg.system.nvlink.links_per_gpu == 18       # what the user did not mean: and it says so
    (warning,) = cfg.load_warnings
    for key in ("system.num_gpus (2 -> 8", "system.nvlink.links_per_gpu (4 -> 18",
                "set in mysys.yaml", "--system FILE"):
        assert key in warning
    # a file overriding its own bases, or a later entry writing a key itself, is no accident
    assert load_config(CONFIGS / "experiments/layer/deepseek_v3_1024_moehub.yaml").load_warnings == ()


def test_workload_system_keys_over_a_named_system_warn(user_dir):
    from moehub_arch.config import load_config
    cfg = load_config(CONFIGS / "experiments/functional.yaml", system_file="mysys.yaml")
    assert cfg.system.name == "mysys" and cfg.system.num_gpus == 4   # the workload's own key
    (warning,) = cfg.load_warnings
    assert "system.num_gpus (2 -> 4, set in mysys.yaml)" in warning


def test_system_file_errors_name_the_file(user_dir):
    from moehub_arch.config import ConfigError, load_config
    (user_dir / "notsys.yaml").write_text("extends: configs/systems/dgx_h100.yaml\n"
                                          "workload: {mode: timing}\n")
    with pytest.raises(ConfigError, match="notsys.yaml: a system file .* holds only system:"):
        load_config(CONFIGS / "ubench/p2p_latency.yaml", system_file="notsys.yaml")
    with pytest.raises(ConfigError, match="--system none.yaml: file not found"):
        load_config(CONFIGS / "ubench/p2p_latency.yaml", system_file="none.yaml")
    (user_dir / "c.yaml").write_text("extends: configs/ubench/p2p_latency.yaml\nsystem: nope.yaml\n")
    with pytest.raises(ConfigError, match="c.yaml: system: file 'nope.yaml' not found"):
        load_config(user_dir / "c.yaml")


def test_relative_paths_next_to_a_config_outside_the_checkout(user_dir):
    """Issue 24 item 3: `extends: configs/...` from outside the checkout used to look for
    configs/configs/...; kernel and ISA files next to one's own config needed absolute paths."""
    from moehub_arch.config import load_config
    sub = user_dir / "exp"
    sub.mkdir()
    (sub / "mine.s").write_text(".kernel k\n    exit\n")
    (sub / "mine_isa.yaml").write_text("instructions: {}\n")
    (sub / "c.yaml").write_text(
        "extends: configs/ubench/p2p_latency.yaml\n"
        "workload:\n  kernel_files: [mine.s, workloads/kernels/ubench/p2p_bandwidth.s]\n"
        "  isa_files: [mine_isa.yaml]\n")
    cfg = load_config(sub / "c.yaml")
    assert cfg.workload.kernel_files == (str(sub / "mine.s"),
                                         str(REPO / "workloads/kernels/ubench/p2p_bandwidth.s"))
    assert cfg.workload.isa_files == (str(sub / "mine_isa.yaml"),)
    assert cfg.source_files[-2] == str(REPO / "configs/ubench/p2p_latency.yaml")
    # --set paths are relative to the working directory, then the shipped folders
    cfg = load_config(sub / "c.yaml", ["workload.isa_files=[exp/mine_isa.yaml]"])
    assert cfg.workload.isa_files == (str(sub / "mine_isa.yaml"),)


def test_run_from_a_temporary_folder_keeps_the_users_four_links(user_dir):
    r = run_cli("run", "configs/ubench/p2p_bandwidth.yaml", "--system", "mysys.yaml",
                "--set", SHORT, "-o", "out", cwd=user_dir)
    assert r.returncode == 0, r.stderr
    stats = json.loads((user_dir / "out/stats.json").read_text())
    bw = stats["system.report.p2p_bandwidth_GBps"]["value"]
    # about 4/18 of the DGX H100's 18-link figure (within 1% of the 4-link line rate)
    assert abs(bw - p2p_expected_GBps(4)) < 0.01 * bw
    assert abs(bw / p2p_expected_GBps(18) - 4 / 18) < 0.01
    assert stats["system.ubench.p2p_bandwidth_GBps"]["value"] == bw     # the former name, an alias
    assert "system.report.p2p_bandwidth_GBps = " in r.stdout
    config = json.loads((user_dir / "out/config.json").read_text())
    assert config["key_units"]["system.gpu.hub.moe.rpm.flush_timeout"] == "ps"
    assert config["key_units"]["system.nvlink.bandwidth"] == "B/s"
    assert config["value_sources"]["system.nvlink.links_per_gpu"] == "mysys.yaml"
    # the extends-list accident: same run, a warning on stderr naming the keys
    (user_dir / "bad.yaml").write_text("extends: [mysys.yaml, configs/ubench/p2p_bandwidth.yaml]\n")
    r = run_cli("stats", "--list", "bad.yaml", "report", cwd=user_dir)
    assert r.returncode == 0 and "warning:" in r.stderr and "links_per_gpu (4 -> 18" in r.stderr


def test_config_json_reads_back_with_units_and_sources(tmp_path):
    from moehub_arch.config import config_from_dict, load_config
    cfg = load_config(CONFIGS / "hub/tiny_tables.yaml")
    back = config_from_dict(json.loads(json.dumps(cfg.to_dict())), "config.json")
    assert back.to_dict()["system"] == cfg.to_dict()["system"]
