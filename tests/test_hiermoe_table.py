"""tools/hiermoe_table.py: the EP-32 layer tables' figures are the runs' stats, computed exactly
(per level: NVLink, PCIe and InfiniBand busy fractions over the layer time, NIC queue waits, the
deduplicated rows and bytes), on a tiny 2 x 2 run put where the tool looks for an EP-32 run;
--no-run marks a run of other inputs `stale`; a missing config exits 2 naming it."""
import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import REPO, run_cli

sys.path.insert(0, str(REPO / "tools"))
import hiermoe_table  # noqa: E402


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    r = run_cli("run", "configs/experiments/functional.yaml", "--system",
                "configs/systems/tiny_2x2.yaml", "--set", "scheme=deepep", "--set",
                "workload.layer.tokens_per_gpu=8", "--set",
                "workload.layer.deepep.kernels=communication", "-o", out, "--quiet")
    assert r.returncode == 0, r.stderr
    return out


def test_table_figures_are_the_stats(tiny_run, tmp_path, capsys):
    stats = json.loads((tiny_run / "stats.json").read_text())
    run = hiermoe_table.run_dir(tmp_path, "qwen3_30b_a3b", 128, "hgx_h800_x4", "deepep")
    run.mkdir(parents=True)
    shutil.copy(tiny_run / "stats.json", run / "stats.json")
    rc = hiermoe_table.main(["--no-run", "--outdir", str(tmp_path), "--models", "qwen3_30b_a3b",
                             "--tokens", "128", "--systems", "hgx_h800_x4", "--schemes",
                             "deepep", "--json", str(tmp_path / "t.json")])
    assert rc == 0
    row, = json.loads((tmp_path / "t.json").read_text())
    assert row["state"] == "stale"          # not made from the EP-32 config's inputs
    v = lambda k: stats[k]["value"]
    span = v("system.moe.layer_time_us") * 1e6
    gpus = [g for g in range(4)]
    assert row["layer_us"] == v("system.moe.layer_time_us")
    assert row["dispatch_us"] == v("system.moe.phase.dispatch_us")
    assert row["nvlink_busy"] == v("system.moe.nvlink.tx_utilization_mean")
    assert row["pcie_busy"] == pytest.approx(
        sum(v(f"system.gpu{g}.pcie.tx_busy_ticks") for g in gpus) / 4 / span, rel=1e-12)
    assert row["ib_busy"] == pytest.approx(
        sum(v(f"system.nic{g}.ib.tx_busy_ticks") for g in gpus) / 4 / span, rel=1e-12)
    assert row["ib_busy"] > 0 and row["pcie_busy"] > 0
    assert row["nic_wait_ns_per_wr"] == pytest.approx(
        sum(v(f"system.nic{g}.wr_wait_ticks") + v(f"system.nic{g}.doorbell_wait_ticks")
            for g in gpus) / sum(v(f"system.nic{g}.work_requests") for g in gpus) / 1e3,
        rel=1e-12)
    assert row["wr_per_nic"] == sum(v(f"system.nic{g}.work_requests") for g in gpus) / 4
    # per level: GPU (groups of 1), node (groups of 2); rows and bytes as the stats count them
    assert [(lv[0], lv[1], lv[2]) for lv in row["dedup"]] == [(0, "gpu", 1), (1, "node", 2)]
    for i, _, _, before, after, saved in row["dedup"]:
        assert before == v(f"system.moe.dedup.level{i}_rows_before")
        assert after == v(f"system.moe.dedup.level{i}_rows_after")
        assert saved == v(f"system.moe.dedup.level{i}_bytes_saved") == (before - after) * 128
    out = capsys.readouterr().out
    assert "| deepep |" in out and "| 1 | node (2 GPUs) |" in out


def test_missing_config_exits_2_naming_it(tmp_path, capsys):
    rc = hiermoe_table.main(["--no-run", "--outdir", str(tmp_path), "--tokens", "7"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "configs/experiments/hiermoe/qwen3_30b_a3b_7_hgx_h800_x4.yaml" in err


def test_tutel_flat_is_tutel_with_the_flat_all_to_all():
    assert hiermoe_table.scheme_sets("tutel") == ["scheme=tutel"]
    assert hiermoe_table.scheme_sets("tutel_flat") == ["scheme=tutel",
                                                       "workload.layer.tutel.all_to_all=flat"]


def test_moehub_node_is_moehub_deduplicating_per_node():
    assert hiermoe_table.scheme_sets("moehub") == ["scheme=moehub"]
    assert hiermoe_table.scheme_sets("moehub_node") == ["scheme=moehub",
                                                        "system.gpu.hub.moe.internode=per_node"]
