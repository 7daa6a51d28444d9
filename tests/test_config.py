"""Config package: units, YAML loading (extends, --set), validation messages, system files."""
import json
from pathlib import Path

import pytest

from moehub_arch.config import ConfigError, Config, flat_params, load_config, parse_quantity
from moehub_arch.config.units import UnitError
from moehub_arch.paths import data_root

SYSTEMS = data_root() / "configs" / "systems"


# ------------------------------------------------------------------------------------ units
@pytest.mark.parametrize("text,kind,expected", [
    ("300ns", "time", 300_000), ("3us", "time", 3_000_000), ("1.5 ps", "time", 2),
    ("2ms", "time", 2_000_000_000), ("1s", "time", 10 ** 12), ("0.25ns", "time", 250),
    ("1.83GHz", "frequency", 1_830_000_000), ("100 MHz", "frequency", 100_000_000),
    ("5kHz", "frequency", 5000), ("7Hz", "frequency", 7),
    ("256B", "size", 256), ("228KB", "size", 228 * 1024), ("1KiB", "size", 1024),
    ("80GB", "size", 80 * 2 ** 30), ("64MiB", "size", 64 * 2 ** 20), ("1.5KB", "size", 1536),
    ("25GB/s", "bandwidth", 25e9), ("3.35TB/s", "bandwidth", 3.35e12),
    ("1KiB/s", "bandwidth", 1024.0), ("100Gbps", "bandwidth", 12.5e9),
    ("10 MB/s", "bandwidth", 1e7),
])
def test_parse_quantity(text, kind, expected):
    v = parse_quantity(text, kind)
    assert v == pytest.approx(expected)
    assert isinstance(v, float if kind == "bandwidth" else int)


def test_sizes_binary_bandwidth_decimal():
    assert parse_quantity("1KB", "size") == 1024
    assert parse_quantity("1KB/s", "bandwidth") == 1000.0
    assert parse_quantity("1GB", "size") == 2 ** 30
    assert parse_quantity("1GB/s", "bandwidth") == 1e9


@pytest.mark.parametrize("value,kind,fragment", [
    (25, "bandwidth", "expected a quantity with a unit such as '25GB/s'"),
    ("25", "bandwidth", "bare number"),
    ("25GHz", "bandwidth", "is a frequency, expected a bandwidth"),
    ("25GHz", "bandwidth", "GB/s"),
    ("300ns", "size", "is a time, expected a size"),
    ("5 parsecs", "time", "unknown unit 'parsecs'"),
    ("fast", "bandwidth", "expected a bandwidth such as"),
    ("0.5B", "size", "whole number of bytes"),
    ("-3ns", "time", "negative"),
    (None, "time", "expected a time"),
])
def test_parse_quantity_errors(value, kind, fragment):
    with pytest.raises(UnitError) as e:
        parse_quantity(value, kind)
    assert fragment in str(e.value)
    assert isinstance(e.value, ValueError)


# ----------------------------------------------------------------------------- system files
@pytest.mark.parametrize("name,gpus,links,switches", [
    ("dgx_h100", 8, 18, 4), ("hgx_h800", 8, 8, 4), ("gh200_nvl32", 32, 18, 18)])
def test_system_files_load(name, gpus, links, switches):
    cfg = load_config(SYSTEMS / f"{name}.yaml")
    s = cfg.system
    assert (s.name, s.num_gpus, s.nvlink.links_per_gpu, s.switch.count) == (name, gpus, links,
                                                                             switches)
    assert len(s.switch.gpu_link_switch) == links
    assert s.gpu.num_sms == 132 and s.gpu.sm_clock == 1_830_000_000
    assert s.nvlink.bandwidth == 25e9
    assert s.gpu.sm.smem_bytes == 228 * 1024
    assert cfg.workload.launches == () and cfg.run.seed == 1


def test_system_aggregate_bandwidths():
    h100 = load_config(SYSTEMS / "dgx_h100.yaml").system
    assert h100.nvlink.links_per_gpu * h100.nvlink.bandwidth == 450e9
    assert h100.switch.gpu_link_switch == (0,) * 5 + (1,) * 4 + (2,) * 4 + (3,) * 5
    assert h100.gpu.hbm.bandwidth == 3.35e12
    h800 = load_config(SYSTEMS / "hgx_h800.yaml")
    assert h800.system.nvlink.links_per_gpu * h800.system.nvlink.bandwidth == 200e9
    assert [Path(f).name for f in h800.source_files] == ["dgx_h100.yaml", "hgx_h800.yaml"]
    gh = load_config(SYSTEMS / "gh200_nvl32.yaml").system
    assert gh.gpu.hbm.bandwidth == 4e12
    assert sorted(gh.switch.gpu_link_switch) == list(range(18))


def test_system_files_comment_every_number():
    """Every line with a number in a system file names its source or says 'assumption'."""
    import re
    for path in SYSTEMS.glob("*.yaml"):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            body = line.split("#")[0]
            if re.search(r":\s*\[?\s*[\d.]", body) and "#" not in line:
                prev = path.read_text().splitlines()[i - 2]
                assert prev.strip().startswith("#"), f"{path.name}:{i} has no source comment"


def test_to_dict_is_json_and_in_base_units():
    cfg = load_config(SYSTEMS / "dgx_h100.yaml")
    d = json.loads(json.dumps(cfg.to_dict()))
    assert d["units"] == {"time": "ps", "frequency": "Hz", "size": "B", "bandwidth": "B/s"}
    assert d["system"]["nvlink"]["latency"] == 100_000
    assert d["system"]["switch"]["gpu_link_switch"][0] == 0
    assert d["run"]["engine"] == "numba"
    assert d["source_files"] and d["source_files"][0].endswith("dgx_h100.yaml")


def test_flat_params():
    p = flat_params(load_config(SYSTEMS / "dgx_h100.yaml"))
    assert p["system.num_gpus"] == 8 and p["gpu.num_sms"] == 132
    assert p["gpu.sm_clock"] == 1_830_000_000 and p["gpu.kernel_launch_latency"] == 3_000_000
    assert p["sm.tensor_bf16_flops_per_cycle"] == 4096
    assert p["nvlink.bandwidth"] == 25e9 and p["hbm.interleave_bytes"] == 256
    assert p["switch.count"] == 4 and "switch.gpu_link_switch" not in p
    assert "gpu.name" not in p and all(isinstance(v, (int, float)) for v in p.values())


# ------------------------------------------------------------------------ extends + overrides
def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _small(tmp_path, body="", name="exp.yaml"):
    """A config extending the DGX H100 system file by absolute path."""
    return _write(tmp_path / name, f"extends: {SYSTEMS / 'dgx_h100.yaml'}\n{body}")


def test_extends_relative_and_deep_merge(tmp_path):
    _write(tmp_path / "base.yaml", f"extends: {SYSTEMS / 'dgx_h100.yaml'}\n"
           "system:\n  nvlink: {bandwidth: 20GB/s, latency: 50ns}\nrun: {seed: 3}\n")
    top = _write(tmp_path / "sub" / "top.yaml",
                 "extends: ../base.yaml\nsystem:\n  nvlink: {latency: 80ns}\n"
                 "  switch: {count: 2, ports: 128, gpu_link_switch: [0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,"
                 " 0, 1, 0, 1]}\n")
    cfg = load_config(top)
    nv = cfg.system.nvlink
    assert nv.bandwidth == 20e9            # from base.yaml
    assert nv.latency == 80_000            # top.yaml wins
    assert nv.links_per_gpu == 18          # from dgx_h100.yaml, merged under both
    assert cfg.system.switch.count == 2 and cfg.system.switch.gpu_link_switch[:2] == (0, 1)
    assert cfg.run.seed == 3
    assert [Path(f).name for f in cfg.source_files] == ["dgx_h100.yaml", "base.yaml", "top.yaml"]


def test_extends_falls_back_to_data_root_configs(tmp_path):
    cfg = load_config(_write(tmp_path / "x.yaml", "extends: systems/hgx_h800.yaml\n"))
    assert cfg.system.name == "hgx_h800"


def test_extends_cycle(tmp_path):
    _write(tmp_path / "a.yaml", "extends: b.yaml\n")
    _write(tmp_path / "b.yaml", "extends: a.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_config(tmp_path / "a.yaml")


def test_extends_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml' not found"):
        load_config(_write(tmp_path / "a.yaml", "extends: nope.yaml\n"))


def test_overrides(tmp_path):
    cfg = load_config(_small(tmp_path), ["system.nvlink.bandwidth=20GB/s", "run.seed=7",
                                         "workload.mode=functional", "run.engine = python"])
    assert cfg.system.nvlink.bandwidth == 20e9
    assert (cfg.run.seed, cfg.workload.mode, cfg.run.engine) == (7, "functional", "python")
    cfg = load_config(SYSTEMS / "dgx_h100.yaml", ["system.switch.gpu_link_switch=[0,0,0,0,0,1,1,"
                                                  "1,1,2,2,2,2,3,3,3,3,0]"])
    assert cfg.system.switch.gpu_link_switch[-1] == 0


def test_override_unknown_key_names_set(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(_small(tmp_path), ["system.nvlink.bandwith=20GB/s"])
    msg = str(e.value)
    assert "--set system.nvlink.bandwith=20GB/s" in msg and "did you mean 'bandwidth'" in msg


def test_override_into_list_index(tmp_path):
    p = _small(tmp_path, "workload:\n  launches:\n    - {kernel: k, grid: 2}\n")
    cfg = load_config(p, ["workload.launches.0.grid=9"])
    assert cfg.workload.launches[0].grid == 9


@pytest.mark.parametrize("override,fragment", [
    ("run.seed", "expected key.path=value"),
    ("system.num_gpus.x=1", "not a mapping"),
    ("run.seed.x=1", "run.seed: expected an integer, found a mapping"),
    ("workload.mode=fast", "expected one of functional, timing"),
])
def test_override_errors(tmp_path, override, fragment):
    with pytest.raises(ConfigError, match=fragment):
        load_config(_small(tmp_path), [override])


# ------------------------------------------------------------------------------ error messages
def test_unknown_key_did_you_mean(tmp_path):
    p = _small(tmp_path, "system:\n  nvlink:\n    bandwith: 20GB/s\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert "exp.yaml" in msg and "system.nvlink.bandwith" in msg
    assert "did you mean 'bandwidth'?" in msg and "known keys:" in msg
    assert "\n" not in msg and e.value.key == "system.nvlink.bandwith"


def test_unknown_top_level_key(tmp_path):
    with pytest.raises(ConfigError, match="did you mean 'workload'"):
        load_config(_small(tmp_path, "workloads: {}\n"))


def test_bad_unit_message_names_file_and_key(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(_small(tmp_path, "system:\n  nvlink: {bandwidth: 25GHz}\n"))
    msg = str(e.value)
    assert "exp.yaml: system.nvlink.bandwidth:" in msg
    assert "is a frequency, expected a bandwidth" in msg and "GB/s" in msg


def test_bare_number_for_unit_field(tmp_path):
    with pytest.raises(ConfigError, match="such as '300ns'"):
        load_config(_small(tmp_path, "system:\n  nvlink: {latency: 100}\n"))


def test_missing_required_key(tmp_path):
    text = (SYSTEMS / "dgx_h100.yaml").read_text().replace("    latency: 100ns", "    #")
    p = _write(tmp_path / "nolat.yaml", text)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert "system.nvlink.latency" in msg and "required key is missing" in msg
    assert "nolat.yaml" in msg and "such as '300ns'" in msg


def test_missing_system_section(tmp_path):
    with pytest.raises(ConfigError, match="system: required key is missing"):
        load_config(_write(tmp_path / "empty.yaml", "run: {seed: 2}\n"))


def test_wrong_type_integer(tmp_path):
    with pytest.raises(ConfigError, match=r"system.num_gpus: expected an integer, found '4.5'"):
        load_config(_small(tmp_path, "system: {num_gpus: 4.5}\n"))


def test_error_names_the_file_that_set_the_value(tmp_path):
    _write(tmp_path / "base.yaml", f"extends: {SYSTEMS / 'dgx_h100.yaml'}\nrun: {{seed: -1}}\n")
    top = _write(tmp_path / "top.yaml", "extends: base.yaml\n")
    with pytest.raises(ConfigError, match=r"^base.yaml: run.seed: expected an integer >= 0"):
        import os
        old = os.getcwd()
        os.chdir(tmp_path)
        try:
            load_config(top)
        finally:
            os.chdir(old)


def test_yaml_syntax_error_has_line(tmp_path):
    p = _write(tmp_path / "bad.yaml", "system:\n  name: x\n  gpu: [1, 2\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:\d+:\d+: YAML syntax error"):
        load_config(p)


def test_duplicate_key(tmp_path):
    p = _write(tmp_path / "dup.yaml", "run:\n  seed: 1\n  seed: 2\n")
    with pytest.raises(ConfigError, match=r"dup.yaml:3: key 'seed' appears twice"):
        load_config(p)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nothing.yaml")
    # a path that exists but is no file says what it is, not "not found"
    with pytest.raises(ConfigError, match="is a directory, not a config file"):
        load_config(tmp_path)
    with pytest.raises(ConfigError, match="is not a regular file"):
        load_config("/dev/null")


@pytest.mark.parametrize("override,fragment", [
    ("system.switch.gpu_link_switch=[0, 1]", "one switch index per link"),
    ("system.switch.count=3", "switch index 3 out of range"),
    ("system.nvlink.header_bytes=20B", "multiple of system.nvlink.flit_bytes"),
    ("system.nvlink.rx_buffer_flits=8", "at least 17 flits"),
    ("system.switch.ports=16", "switch 0 needs 40 ports"),
    ("system.num_gpus=0", "expected an integer >= 1"),
])
def test_cross_field_checks(override, fragment):
    with pytest.raises(ConfigError, match=fragment):
        load_config(SYSTEMS / "dgx_h100.yaml", [override])


# ------------------------------------------------------------------------------------ workload
WORKLOAD = """
workload:
  mode: functional
  kernel_files: [./k.s]
  buffers:
    ctrl: {bytes: 4KB, region: control}
    x: {bytes: 1MB, init: random, dtype: bf16, seed: 5}
    y: {bytes: 256B, init: fill, value: 2.5}
  launches:
    - kernel: send
      grid: 4
      gpus: [0, 3]
      params: {dst: "@x + 64", peer: "(gpu + 1) % ngpu", n: 8}
    - {kernel: recv, grid: "4 * nsm", stream: 1}
  report:
    bw: {expr: "stat('a') / 2", unit: GB/s, desc: bandwidth}
run: {seed: 11, engine: python, max_events: 1000}
"""


def test_workload_section(tmp_path):
    _write(tmp_path / "k.s", "; kernel\n")
    cfg = load_config(_small(tmp_path, WORKLOAD))
    w = cfg.workload
    assert w.mode == "functional"
    assert w.kernel_files == (str((tmp_path / "k.s").resolve()),)
    assert [b.name for b in w.buffers] == ["ctrl", "x", "y"]     # YAML order kept
    ctrl, x, y = w.buffers
    assert (ctrl.bytes, ctrl.region, ctrl.init, ctrl.dtype) == (4096, "control", "zeros", "f32")
    assert (x.bytes, x.init, x.dtype, x.seed) == (2 ** 20, "random", "bf16", 5)
    assert (y.init, y.value, y.seed) == ("fill", 2.5, None)
    send, recv = w.launches
    assert send.gpus == (0, 3) and send.stream == 0
    assert send.params == (("dst", "@x + 64"), ("peer", "(gpu + 1) % ngpu"), ("n", 8))
    assert recv.gpus is None and recv.stream == 1 and recv.grid == "4 * nsm"
    assert w.report[0].name == "bw" and w.report[0].unit == "GB/s"
    assert (cfg.run.seed, cfg.run.engine, cfg.run.max_events, cfg.run.batch_events) == \
        (11, "python", 1000, 2_000_000)
    d = json.loads(json.dumps(cfg.to_dict()))
    assert d["workload"]["buffers"]["x"]["dtype"] == "bf16"
    assert d["workload"]["launches"][0]["params"]["n"] == 8
    assert d["workload"]["report"]["bw"]["expr"] == "stat('a') / 2"


def test_kernel_file_data_root_relative(tmp_path):
    kernels = sorted((data_root() / "workloads" / "kernels").rglob("*.s"))
    if not kernels:
        pytest.skip("no kernel files in the data root yet")
    rel = kernels[0].relative_to(data_root()).as_posix()
    cfg = load_config(_small(tmp_path, f"workload: {{kernel_files: [{rel}]}}\n"))
    assert cfg.workload.kernel_files == (str(kernels[0].resolve()),)


def test_kernel_file_missing(tmp_path):
    with pytest.raises(ConfigError, match=r"workload.kernel_files\[0\]: kernel file './nope.s' "
                                          r"not found"):
        load_config(_small(tmp_path, "workload: {kernel_files: [./nope.s]}\n"))


@pytest.mark.parametrize("body,fragment", [
    ("workload: {launches: [{kernel: k, grid: 1, gpus: [8]}]}", r"launches\[0\].gpus\[0\]: GPU 8 "
                                                               "out of range"),
    ("workload: {launches: [{kernel: '', grid: 1}]}", "expected a kernel name"),
    ("workload: {launches: [{kernel: k, grid: 0}]}", "expected an integer >= 1, found 0"),
    ("workload: {launches: [{kernel: k}]}", r"launches\[0\].grid: required key is missing"),
    ("workload: {launches: [{kernel: k, grid: 1, params: {a: [1]}}]}", "expected an integer or "
                                                                       "an expression"),
    ("workload: {buffers: {b: {bytes: 1KB, init: randm}}}", "did you mean 'random'"),
    ("workload: {buffers: {b: {bytes: 1KB, dtyp: f32}}}", "did you mean 'dtype'"),
    ("workload: {buffers: {b: {init: zeros}}}", r"buffers.b.bytes: required key is missing"),
    ("workload: {mode: timeing}", "did you mean 'timing'"),
    ("run: {engine: numbaa}", "did you mean 'numba'"),
])
def test_workload_errors(tmp_path, body, fragment):
    with pytest.raises(ConfigError, match=fragment):
        load_config(_small(tmp_path, body + "\n"))


def test_config_is_frozen():
    cfg = load_config(SYSTEMS / "dgx_h100.yaml")
    assert isinstance(cfg, Config)
    with pytest.raises(Exception):
        cfg.system.num_gpus = 4


def test_every_shipped_config_loads():
    """Every run config under configs/ (sweep files, the validation figure list and the
    layer_common.yaml, systems/fabrics/ and hub/designs/ fragments aside) loads without error; the layer experiments keep their
    settings when they change system."""
    root = data_root() / "configs"
    paths = [p for p in sorted(root.rglob("*.yaml"))
             if "sweeps" not in p.parts and "fabrics" not in p.parts  # fragments
             and "designs" not in p.parts
             and "e2e" not in p.parts                  # e2e settings (tests/test_e2e_settings.py)
             and p.name not in ("layer_common.yaml", "figures.yaml")]
    assert len(paths) > 30
    for p in paths:
        load_config(p)
    layer = root / "experiments" / "layer"
    dgx = load_config(layer / "deepseek_v3_4096_moehub.yaml")
    gh = load_config(layer / "deepseek_v3_4096_moehub_gh200_nvl32.yaml")
    assert (dgx.system.num_gpus, gh.system.num_gpus) == (8, 32)
    for cfg in (dgx, gh):
        assert cfg.system.gpu.hub.moe.dam.tile_rows == 128
        assert cfg.workload.layer.moehub.expert_tbs == 132
