"""The newcomer's frictions (issue 46), each fixed: a value the hardware caps is a warning recorded
in config.json, never silent; `config --list` names the file that set each key itself and searches
descriptions; a modified copy of a scheme's kernel file runs in its place; `compare` marks
overlapping phases and warns about a pattern that matches nothing."""
import json

from conftest import CONFIGS, REPO, read_stats_json, run_cli, simulate

from moehub_arch.config import load_config

H800 = CONFIGS / "experiments" / "layer" / "base_dgx_h800.yaml"
PACKET = "system.gpu.hub.moe.rpm.packet_bytes"


def test_a_capped_value_is_a_warning_recorded_in_config_json(tmp_path):
    cfg = load_config(H800, [f"{PACKET}=256B"])
    capped = [w for w in cfg.load_warnings if w.startswith(PACKET)]
    assert len(capped) == 1 and "256B" in capped[0] and "used as 128B" in capped[0]
    assert "system.nvlink.max_payload_bytes = 128B" in capped[0] and "dgx_h800.yaml" in capped[0]
    assert capped[0] in cfg.to_dict()["load_warnings"]
    assert not load_config(H800).load_warnings           # the shipped point asks for 128 B
    # the command line prints it, and the run's config.json keeps it
    r = run_cli("layer", "--model", "qwen3_30b_a3b", "--tokens", "64", "--scheme", "moehub",
                "--system", "dgx_h800", "--set", f"{PACKET}=256B", "--dry-run")
    assert r.returncode == 0 and f"warning: {PACKET} = 256B" in r.stderr, r.stderr
    store = load_config(CONFIGS / "ubench" / "p2p_bandwidth.yaml",
                        ["system.nvlink.store_packet_bytes=512B"])
    assert any(w.startswith("system.nvlink.store_packet_bytes = 512B") and "used as 256B" in w
               for w in store.load_warnings)


def test_config_list_names_the_file_that_set_the_key_itself():
    layer = CONFIGS / "experiments" / "layer" / "deepseek_v3_1024_moehub_dgx_h800.yaml"
    cfg = load_config(layer)
    sources = cfg.to_dict()["value_sources"]
    # routing is written by layer_common.yaml; published.yaml only writes other workload.layer keys
    assert sources["workload.layer.routing.kind"].endswith("layer_common.yaml")
    assert sources[PACKET].endswith("dgx_h800.yaml")
    r = run_cli("config", "--list", "routing.kind", "--config", layer)
    assert "layer_common.yaml" in r.stdout and "published.yaml" not in r.stdout, r.stdout
    # a key no file writes is a default, whichever file wrote the mapping holding it
    r = run_cli("config", "--list", "workload.layer.routing.kind", "--config",
                CONFIGS / "ubench" / "alltoall.yaml")
    assert "value: uniform   (default)" in r.stdout, r.stdout


def test_config_list_searches_descriptions():
    r = run_cli("config", "--list", "row_table")
    assert r.returncode == 0, r.stderr
    assert "system.gpu.hub.moe.aau.overflow" in r.stdout


def test_a_modified_copy_of_a_scheme_kernel_runs_in_its_place(tmp_path):
    shipped = REPO / "workloads" / "kernels" / "moehub" / "moe_layer.s"
    copy = tmp_path / "moe_layer.s"
    # the copy keeps the shipped names; its dispatch now sleeps 2000 cycles before routing
    text = shipped.read_text()
    assert "\n    route_tokens " in text
    copy.write_text(text.replace("\n    route_tokens ", "\n    sleep 2000\n    route_tokens "))
    base = simulate("experiments/functional.yaml", "scheme=moehub").stats
    mine = simulate("experiments/functional.yaml", "scheme=moehub",
                    f"workload.layer.kernel_files=[{copy}]").stats
    # every routed row leaves 2000 SM cycles (1.09 us at 1.83 GHz) later: so does the layer end
    assert mine["system.moe.layer_time_us"] >= base["system.moe.layer_time_us"] + 1.0
    assert mine["system.moe.output_max_abs_error"] == 0.0
    wrong = tmp_path / "my_layer.s"
    wrong.write_text(copy.read_text())
    r = run_cli("run", "configs/experiments/functional.yaml", "--set", "scheme=moehub",
                "--set", f"workload.layer.kernel_files=[{wrong}]", "-o", tmp_path / "out")
    assert r.returncode == 2 and "replaces no kernel file of scheme moehub" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def _run_dir(path, layer, phases):
    path.mkdir()
    stats = {"system.moe.layer_time_us": {"value": layer, "unit": "us", "desc": ""}}
    stats.update({f"system.moe.phase.{p}_us": {"value": v, "unit": "us", "desc": ""}
                  for p, v in phases.items()})
    (path / "stats.json").write_text(json.dumps(stats))
    return path


def test_compare_marks_overlapping_phases_and_warns_on_an_empty_pattern(tmp_path):
    serial = _run_dir(tmp_path / "serial", 100.0, {"dispatch": 30.0, "expert": 50.0, "combine": 20.0})
    fused = _run_dir(tmp_path / "fused", 80.0, {"dispatch": 40.0, "expert": 70.0, "combine": 10.0})
    r = run_cli("compare", serial, fused, "--stats", "system.moe.*", "--stats", "system.nope.*")
    assert r.returncode == 0, r.stderr
    assert "warning: --stats system.nope.*: no stat" in r.stderr
    assert "system.moe.phase.expert_us (overlapping)" in r.stdout
    assert "the phases of fused overlap" in r.stdout
    assert "system.moe.layer_time_us " in r.stdout and "layer_time_us (overlapping)" not in r.stdout
    r = run_cli("compare", serial, serial)
    assert "(overlapping)" not in r.stdout
    r = run_cli("compare", serial, fused, "--stats", "system.nope.*")
    assert r.returncode == 2 and "no stat of" in r.stderr
