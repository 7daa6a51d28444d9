"""The Blackwell systems (configs/systems/hgx_b200.yaml, gb200_nvl72.yaml; docs/blackwell.md):
they load, their aggregates are the data sheets' (links, switch ports, peak tensor rate, HBM), every
NVL72 GPU reaches every switch chip, `config --list` shows each number's source, and the layer grid
places the same layer on 8-72 GPUs. No simulation here (the ubench figures are in docs/blackwell.md)."""
import pytest

from conftest import CONFIGS, load_script, run_cli

SYSTEMS = CONFIGS / "systems"


def _system(name):
    from moehub_arch.config import load_config
    return load_config(SYSTEMS / f"{name}.yaml").system


@pytest.mark.parametrize("name, gpus, switches, bf16_peak, hbm", [
    ("hgx_b200", 8, 2, 2.25e15, 7.67e12),      # HGX B200 data sheet (dense = sparse / 2)
    ("gb200_nvl72", 72, 18, 2.5e15, 8e12)])    # GB200 NVL72 data sheet, per GPU
def test_blackwell_systems_match_their_data_sheets(name, gpus, switches, bf16_peak, hbm):
    s = _system(name)
    assert (s.name, s.num_gpus, s.switch.count, s.switch.ports) == (name, gpus, switches, 72)
    assert s.nvlink.links_per_gpu * s.nvlink.bandwidth == 900e9     # NVLink 5: 1.8 TB/s bidir
    # every switch port is used once: links per chip x GPUs = 72
    per_chip = [s.switch.gpu_link_switch.count(c) for c in range(switches)]
    assert all(n * gpus == s.switch.ports for n in per_chip)
    peak = s.gpu.num_sms * s.gpu.sm.tensor_bf16_flops_per_cycle * s.gpu.sm_clock
    assert abs(peak / bf16_peak - 1) < 0.01
    assert s.gpu.sm.tensor_fp8_flops_per_cycle == 2 * s.gpu.sm.tensor_bf16_flops_per_cycle
    assert s.gpu.num_sms == 148 and s.gpu.hbm.bandwidth == hbm


def test_every_nvl72_gpu_reaches_every_switch_chip():
    assert sorted(_system("gb200_nvl72").switch.gpu_link_switch) == list(range(18))


def test_config_list_shows_the_blackwell_sources():
    r = run_cli("config", "--list", "system.nvlink.bandwidth", "--config",
                SYSTEMS / "gb200_nvl72.yaml")
    assert r.returncode == 0, r.stderr
    assert "50GB/s" in r.stdout and "100 GB/s per link bidirectional" in r.stdout
    r = run_cli("config", "--list", "system.gpu.sm_clock", "--config", SYSTEMS / "gb200_nvl72.yaml")
    assert "2.06GHz" in r.stdout and "derived:" in r.stdout and "gb200_nvl72.yaml" in r.stdout


def test_the_blackwell_grids_place_one_layer_on_8_to_72_gpus():
    from conftest import REPO
    grid = load_script(REPO / "tools" / "layer_grid.py")
    cells = grid.cells(grid.GRIDS["blackwell_gb200_nvl72"], False)
    assert [(p, t, why) for _, p, t, _, why in cells] == [
        (8, 128, None), (16, 256, None), (32, 512, None), (72, 576, None)]
    assert "counted" in grid.GRIDS["blackwell_gb200_nvl72"]["schemes"]
