"""tools/layer_table.py --grid (tools/layer_grid.py): the grid's cells and skips, the sweep it
writes and runs (resume included), and the speedup table's arithmetic."""
import json
import math

import pytest

from conftest import REPO, load_script


@pytest.fixture(scope="module")
def grid_tool():
    return load_script(REPO / "tools" / "layer_grid.py")


def test_moehub_paper_cells_and_skips(grid_tool):
    grid = grid_tool.GRIDS["moehub_paper"]
    cells = grid_tool.cells(grid, quick=False)
    assert len(cells) == 3 * 4 * 9 * 3
    skipped = {(m, p) for m, p, _, _, why in cells if why}
    # 60 experts on 8 or 16 GPUs, 8 experts on 16 GPUs cannot be placed
    assert skipped == {("qwen1_5_moe_a2_7b", 8), ("qwen1_5_moe_a2_7b", 16), ("mixtral_8x7b", 16)}
    quick = grid_tool.cells(grid, quick=True)
    assert {(t, s) for _, _, t, s, _ in quick} == {(1024, 0.032), (8192, 0.032)}
    assert sum(why is None for *_, why in quick) * len(grid["schemes"]) == 50


def test_summary_arithmetic(grid_tool):
    grid = {"schemes": ["moehub", "a", "b"]}
    cs = [("m", 4, 128, 0.0, None), ("m", 4, 256, 0.0, None), ("m", 3, 128, 0.0, "no")]

    def st(us):
        return {"system.moe.layer_time_us": us, "system.moe.ideal_layer_fraction": 0.5,
                "system.moe.rows_dropped": 0}
    results = {("m", 4, 128, 0.0, "moehub"): st(10.0), ("m", 4, 128, 0.0, "a"): st(20.0),
               ("m", 4, 128, 0.0, "b"): st(5.0), ("m", 4, 256, 0.0, "moehub"): st(10.0),
               ("m", 4, 256, 0.0, "a"): st(80.0), ("m", 4, 256, 0.0, "b"): None}
    table, summary = grid_tool.summarize(grid, cs, results)
    assert table[0]["speedup"] == {"a": 2.0, "b": 0.5}
    assert summary["a"] == {"cells": 2, "min": 2.0, "max": 8.0, "geomean": pytest.approx(4.0)}
    assert summary["b"]["cells"] == 1 and summary["b"]["geomean"] == pytest.approx(0.5)
    lines = grid_tool.markdown(grid, table, summary)
    assert any("| 2.00x | 0.50x |" in line for line in lines)
    assert any("failed" in line for line in lines)
    assert any("skipped: no" in line for line in lines)
    assert "| a | 2 | 2.00x | 4.00x | 8.00x |" in lines


def test_small_grid_runs_as_a_sweep_and_resumes(grid_tool, tmp_path, monkeypatch):
    small = {"config": "configs/experiments/functional.yaml", "set": {
        "workload.layer.routing.kind": "normal"}, "schemes": ["moehub", "megatron", "tutel"],
        "models": ["tiny_functional"], "total_tokens": [64], "gpus": [3, 4], "std": [0.032],
        "quick": {}}
    monkeypatch.setitem(grid_tool.GRIDS, "moehub_paper", small)
    out = tmp_path / "g"
    args = ["--grid", "moehub_paper", "--outdir", str(out), "--workers", "1", "--quiet",
            "--json", str(tmp_path / "g.json")]
    assert grid_tool.main(args) == 0
    data = json.loads((tmp_path / "g.json").read_text())
    run, skip = [c for c in data["cells"] if not c["skipped"]], [c for c in data["cells"] if c["skipped"]]
    assert len(run) == 1 and skip[0]["gpus"] == 3
    cell = run[0]
    hub = cell["schemes"]["moehub"]["system.moe.layer_time_us"]
    for b in ("megatron", "tutel"):
        assert math.isclose(cell["speedup"][b], cell["schemes"][b]["system.moe.layer_time_us"] / hub)
    assert (out / "moehub_paper.yaml").is_file()
    # a second call reuses every finished point
    marks = sorted(p.stat().st_mtime_ns for p in (out / "points").glob("*/done.json"))
    assert len(marks) == 3
    assert grid_tool.main(args) == 0
    assert sorted(p.stat().st_mtime_ns for p in (out / "points").glob("*/done.json")) == marks
    # --report runs nothing: the same table from the finished points; a point not run is marked
    report = ["--grid", "moehub_paper", "--outdir", str(out), "--report", "--markdown",
              str(tmp_path / "r.md")]
    assert grid_tool.main(report) == 0
    (full,) = [line for line in (tmp_path / "r.md").read_text().splitlines() if "| 4 | 64 |" in line]
    assert "not run" not in full and f"{hub:.1f}" in full
    tutel = next(p for p in (out / "points").iterdir() if p.name.startswith("scheme=tutel"))
    (tutel / "done.json").unlink()
    assert grid_tool.main(report + ["--json", str(tmp_path / "r.json")]) == 0
    (part,) = [line for line in (tmp_path / "r.md").read_text().splitlines() if "| 4 | 64 |" in line]
    assert part.endswith("| not run |") and f"{hub:.1f}" in part
    data = json.loads((tmp_path / "r.json").read_text())
    assert (data["points"], data["points_finished"]) == (3, 2)
    assert data["summary"]["megatron"]["cells"] == 1 and "tutel" not in data["summary"]



def test_a_hub_design_goes_into_the_sweeps_fixed_overrides(grid_tool, tmp_path):
    """--hub-design NAME: the design file's keys join the grid's own fixed overrides; an unknown
    design is refused by the argument parser."""
    import yaml
    grid = grid_tool.GRIDS["moehub_paper"]
    path, _ = grid_tool.write_sweep("moehub_paper_expert_order", grid, True, tmp_path,
                                    "expert_order")
    fixed = yaml.safe_load(path.read_text())["set"]
    assert fixed == {**grid["set"], "system.gpu.hub.moe.dam.order": "expert"}
    first = grid_tool.design_overrides("first_reading")
    assert first["workload.layer.moehub.stores"] == "send_to_expert"
    path, _ = grid_tool.write_sweep("moehub_paper", grid, True, tmp_path)
    assert yaml.safe_load(path.read_text())["set"] == grid["set"]
    with pytest.raises(SystemExit) as e:
        grid_tool.main(["--grid", "moehub_paper", "--hub-design", "nonesuch"])
    assert e.value.code == 2
