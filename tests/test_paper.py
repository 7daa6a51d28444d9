"""`moehub-sim paper NAME`: the papers' published figures as data (every value cites its source;
bad files are errors naming the file and key), the comparison arithmetic, and each paper's
`--quick` grid run end to end - every cell and every published figure in the report, resumable,
and its report rewritten from the finished points alone (`--report-only`)."""
import json
import math

import pytest
import yaml

from moehub_arch.cli import main as cli_main
from moehub_arch.papers import PAPER_NAMES
from moehub_arch.papers.data import PaperDataError, load_paper_data, paper_data_path
from moehub_arch.papers.grid import (Cell, Compare, PaperGrid, Scheme, aggregate, check_grid,
                                     compare_rows, points)
from moehub_arch.paths import sources_digest
from moehub_arch.papers.run import PAPERS, paper_grid, report_paper, run_paper

GOOD = """\
paper: {key: p, title: A paper, arxiv: "2605.05607", venue: X 2026, address: https://arxiv.org/abs/2605.05607}
figures:
  f1:
    what: speedup over b
    value: 2.0
    unit: x
    source: {location: abstract, address: https://arxiv.org/abs/2605.05607}
  f2:
    what: range over b
    value: [1.5, 3.0]
    unit: x
    source: {location: "evaluation, Fig. 9", address: https://arxiv.org/abs/2605.05607}
not_published:
  - {what: the table, why: not public}
"""


def test_registry_matches_the_cli_names():
    assert tuple(PAPERS) == PAPER_NAMES


@pytest.mark.parametrize("name", PAPER_NAMES)
def test_shipped_figures_load_cite_and_match_the_grid(name):
    data = load_paper_data(paper_data_path(name))
    assert data.key == name and data.address.startswith("https://arxiv.org/abs/")
    for f in data.figures:
        assert f.location and f.address.startswith("https://") and f.what
    for quick in (True, False):
        grid, _ = paper_grid(name, quick)      # check_grid: one comparison per figure
        assert points(grid)


def test_good_file_loads(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text(GOOD)
    d = load_paper_data(p)
    assert [f.id for f in d.figures] == ["f1", "f2"]
    assert d.figure("f2").value == (1.5, 3.0) and d.figure("f2").is_range
    assert d.figure("f1").text() == "2x" and d.figure("f2").text() == "1.5-3x"
    assert d.figure("f2").location == "evaluation, Fig. 9"
    assert d.not_published == (("the table", "not public"),)


@pytest.mark.parametrize("old, new, key", [
    ("    value: 2.0\n", "", "figures.f1.value: required key is missing"),
    ("    value: 2.0\n", "    value: two\n", "figures.f1.value: expected a finite number"),
    ("[1.5, 3.0]", "[3.0, 1.5]", "figures.f2.value: range low end 3 is above its high end 1.5"),
    ("[1.5, 3.0]", "[1, 2, 3]", "figures.f2.value: a range is [low, high]"),
    ("    unit: x\n    source: {location: abstract", "    unit: x\n    colour: red\n"
     "    source: {location: abstract", "figures.f1.colour: unknown key"),
    ('arxiv: "2605.05607"', "arxiv: 2605.05607", "paper.arxiv: expected an arXiv id"),
    ("{location: abstract, address: https://arxiv.org/abs/2605.05607}",
     "{location: abstract, address: arxiv 2605.05607}", "figures.f1.source.address: expected a "
                                                        "public http(s) address"),
    ("{location: abstract, address:", "{address:", "figures.f1.source.location: expected a "
                                                   "non-empty string"),
    ("    value: 2.0\n", "    value: 2.0\n    bound: above\n", "figures.f1.bound: expected one of"),
    ("  - {what: the table, why: not public}", "  - {what: the table}",
     "not_published[0].why: expected a non-empty string"),
])
def test_bad_file_names_file_and_key(tmp_path, old, new, key):
    assert old in GOOD
    p = tmp_path / "bad.yaml"
    p.write_text(GOOD.replace(old, new, 1))
    with pytest.raises(PaperDataError) as e:
        load_paper_data(p)
    assert str(p) in str(e.value) and key in str(e.value)
    assert e.value.exit_code == 2


def test_unparsable_and_missing_files(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("paper: [unclosed\n")
    with pytest.raises(PaperDataError, match="bad.yaml"):
        load_paper_data(p)
    with pytest.raises(PaperDataError, match="nonesuch.yaml"):
        load_paper_data(tmp_path / "nonesuch.yaml")


def test_unknown_paper_is_a_usage_error():
    with pytest.raises(SystemExit) as e:
        cli_main(["paper", "nonesuch", "--quick"])
    assert e.value.code == 2


def _tiny_grid():
    schemes = (Scheme("hub", "Hub", "proposed", (("scheme", "h"),)),
               Scheme("a", "A", "baseline", (("scheme", "a"),)),
               Scheme("b", "B", "baseline", (("scheme", "b"),)),
               Scheme("c", "C", "baseline", not_modelled="no such scheme"))
    cells = (Cell((("n", 1),), (("k", 1),)), Cell((("n", 2),), (("k", 2),)),
             Cell((("n", 3),), (("k", 3),), (("b", "too big"),)))
    compares = (Compare("f1", "speedup", over=("a",)),
                Compare("f2", "speedup", over=("a", "b"), agg="range"),
                Compare("f3", "speedup", over=("c",)),
                Compare("f4", "stat", metric="s", agg="max", scale=0.5))
    return PaperGrid("p", "configs/experiments/functional.yaml", (), "sys", "desc", ("n",),
                     schemes, cells, compares)


def test_comparison_arithmetic(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text(GOOD.replace("not_published:", """\
  f3: {what: w, value: 1.0, unit: x, source: {location: l, address: "https://x.org"}}
  f4: {what: w, value: 4.0, unit: KB, source: {location: l, address: "https://x.org"}}
not_published:"""))
    data = load_paper_data(p)
    grid = _tiny_grid()
    check_grid(grid, data)
    # cell 3: b skipped; every other modelled point runs
    assert len(points(grid)) == 3 * 3 - 1

    def st(t, s=0.0):
        return {"system.moe.layer_time_us": t, "s": s}
    results = {(0, "hub"): st(10.0, 6.0), (0, "a"): st(20.0), (0, "b"): st(5.0),
               (1, "hub"): st(10.0, 2.0), (1, "a"): st(80.0), (1, "b"): None,
               (2, "hub"): st(4.0, 1.0), (2, "a"): st(4.0)}
    rows = {r["figure"].id: r for r in compare_rows(grid, data, results)}
    assert rows["f1"]["ours"] == (pytest.approx((2 * 8 * 1) ** (1 / 3)),)
    assert rows["f1"]["cells"] == 3
    assert rows["f1"]["ratio"] == (pytest.approx((2 * 8 * 1) ** (1 / 3) / 2.0),)
    # range pooled over a and b: 2, 0.5 | 8 | 1
    assert rows["f2"]["ours"] == (0.5, 8.0) and rows["f2"]["ratio"] == (0.5 / 1.5, 8.0 / 3.0)
    assert rows["f3"]["state"] == "not modelled: C: no such scheme" and rows["f3"]["ours"] is None
    assert rows["f4"]["ours"] == (3.0,) and rows["f4"]["ratio"] == (0.75,)
    assert aggregate([], "geomean") is None and aggregate([2.0, 8.0], "mean") == (5.0,)


def test_a_figure_without_comparison_is_caught(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text(GOOD)
    grid = _tiny_grid()
    with pytest.raises(ValueError, match="comparisons without a figure"):
        check_grid(grid, load_paper_data(p))


@pytest.mark.parametrize("name", PAPER_NAMES)
def test_quick_report(name, tmp_path):
    """The quick grid runs; the report has every cell and cites every published figure; every
    point that can run finished; ours is computed from the cells' times as the report says."""
    out = tmp_path / name
    md, errors = run_paper(name, out, quick=True, workers=1, progress=False)
    assert errors == []
    grid, data = paper_grid(name, quick=True)
    text = md.read_text()
    for f in data.figures:
        assert f"`{f.id}`" in text and f.address in text and f.location in text
    for what, _ in data.not_published:
        assert what in text
    for cell in grid.cells:
        assert "| " + " | ".join(str(cell.get(a)) for a in grid.axes) + " |" in text
    assert (out / "speedup.png").stat().st_size > 0
    assert (out / "traffic.png").is_file() == grid.traffic
    js = json.loads((out / "report.json").read_text())
    assert js["points"] == js["points_finished"] == len(points(grid))
    assert len(js["cells"]) == len(grid.cells)
    assert {f["id"] for f in js["figures"]} == {f.id for f in data.figures}
    for i, c in enumerate(js["cells"]):
        for s in grid.schemes:
            state = c["schemes"][s.label]["state"]
            if s.not_modelled:
                assert state == "not modelled"
            elif grid.cells[i].skip_reason(s.label):
                assert state.startswith("skipped: ")
            else:
                assert state == "ok" and c["schemes"][s.label]["time"] > 0
    # a geomean speedup figure of ours is the geomean of the cells' time ratios
    hub = grid.proposed.label
    for f in js["figures"]:
        cmp = next(x for x in grid.compares if x.figure == f["id"])
        if cmp.kind == "speedup" and len(cmp.over) == 1 and cmp.of is None and f["ours"] \
                and cmp.metric == "time" and cmp.agg == "geomean" and not cmp.where:
            xs = [c["schemes"][cmp.over[0]]["time"] / c["schemes"][hub]["time"]
                  for c in js["cells"] if c["schemes"][cmp.over[0]]["time"]]
            assert f["ours"][0] == pytest.approx(math.exp(sum(map(math.log, xs)) / len(xs)))
    # per-GPU wire bytes: the run's total over its GPUs (its resolved config's count)
    done = {}
    for d in (out / "sweep" / "points").iterdir():
        stats = json.loads((d / "stats.json").read_text())
        gpus = json.loads((d / "config.json").read_text())["system"]["num_gpus"]
        done[stats["system.moe.layer_time_us"]["value"] if "system.moe.layer_time_us" in stats
             else None] = (stats, gpus)
    for c in js["cells"]:
        for s in c["schemes"].values():
            if "up_bytes_per_gpu" in s:
                stats, gpus = done[s["time"]]
                assert s["up_bytes_per_gpu"] == stats["system.moe.nvlink.up_wire_bytes"][
                    "value"] / gpus
    # --report-only: the same report from the finished points, nothing run
    _same_report_only(name, out, js, text)
    if name == "hiermoe":    # the smallest grid: a second call reuses every finished point
        marks = sorted(p.stat().st_mtime_ns for p in (out / "sweep" / "points").glob("*/done.json"))
        assert len(marks) == len(points(grid))
        # the sweep file with its points reordered (cheap cells first, say): --report-only reads
        # the same points, and a run keeps the file's order
        sweep_file = out / "sweep" / "paper_hiermoe_quick.yaml"
        head, body = sweep_file.read_text().split("\n", 1)
        spec = yaml.safe_load(body)
        spec["points"] = spec["points"][::-1]
        sweep_file.write_text(head + "\n" + yaml.safe_dump(spec, sort_keys=False))
        _same_report_only(name, out, js, text)
        run_paper(name, out, quick=True, workers=1, progress=False)
        assert sorted(p.stat().st_mtime_ns
                      for p in (out / "sweep" / "points").glob("*/done.json")) == marks
        assert yaml.safe_load(sweep_file.read_text().split("\n", 1)[1])["points"] == spec["points"]


def _same_report_only(name, out, js, text):
    """`moehub-sim paper NAME --quick --report-only` on a finished quick run: exit 0, every point
    finished, and the same figures, cells and Markdown (but the line saying nothing was run)."""
    assert cli_main(["paper", name, "--quick", "--report-only", "-o", str(out)]) == 0
    again = json.loads((out / "report.json").read_text())
    assert again["report_only"] and not js["report_only"] and again["notes"] == []
    for key in ("figures", "cells", "points", "points_finished", "code"):
        assert again[key] == js[key], key
    assert again["code"]["sources_digest"] == sources_digest()
    differ = [(a, b) for a, b in zip(text.splitlines(), (out / "report.md").read_text()
                                     .splitlines()) if a != b]
    assert len(differ) == 1 and differ[0][0].startswith("- Points: ") and "nothing was run" in \
        differ[0][1]


def test_report_only_of_nothing_finished(tmp_path, capsys):
    """--report-only on an empty sweep folder: every modelled cell `not run`, no figure of ours,
    exit 0, one line saying how many finished; a point finished on other sources is not shown
    but named; no sweep folder, or another grid's sweep file, is exit 2 and writes nothing."""
    out = tmp_path / "o"
    (out / "sweep").mkdir(parents=True)
    grid, data = paper_grid("dysharp", quick=True)
    # one point finished under other sources (another commit): left out, and said so
    from moehub_arch.sweep import sweep_from_dict
    from moehub_arch.papers.grid import sweep_spec
    p = sweep_from_dict(sweep_spec(grid, out / "sweep"), None, out / "sweep").points[0]
    d = out / "sweep" / "points" / p.id
    d.mkdir(parents=True)
    (d / "done.json").write_text(json.dumps({"overrides": list(p.overrides),
                                             "config_digest": p.config_digest,
                                             "sources_digest": "0" * 40}))
    assert cli_main(["paper", "dysharp", "--quick", "--report-only", "-o", str(out)]) == 0
    cap = capsys.readouterr()
    assert f"0 of {len(points(grid))} points finished" in cap.out
    assert "1 point(s) finished with other sources (sources digest 000000000000)" in cap.err
    js = json.loads((out / "report.json").read_text())
    assert js["points_finished"] == 0 and js["report_only"]
    assert all(f["ours"] is None for f in js["figures"])
    for i, c in enumerate(js["cells"]):
        for s in grid.schemes:
            state = c["schemes"][s.label]["state"]
            if s.not_modelled is None and grid.cells[i].skip_reason(s.label) is None:
                assert state == "not run"
    text = (out / "report.md").read_text()
    assert "not run" in text and "other sources" in text
    # no sweep folder; a folder holding another grid's sweep file (the full grid asked of a
    # quick run): exit 2, one paragraph naming the folder, nothing written
    assert cli_main(["paper", "dysharp", "--quick", "--report-only", "-o",
                     str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "none/sweep: no sweep directory" in err and "Traceback" not in err
    (out / "sweep" / "paper_dysharp_quick.yaml").write_text("points: []\n")
    assert cli_main(["paper", "dysharp", "--report-only", "-o", str(out)]) == 2
    assert "not paper_dysharp.yaml" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli_main(["paper", "nonesuch", "--report-only", "-o", str(out)])
    assert e.value.code == 2


def test_paper_reports_are_not_run_inputs(tmp_path):
    """Editing a paper's figures or report code keeps finished sweep points (sources_digest
    leaves moehub_arch/papers and workloads/papers out); editing a model does not."""
    from moehub_arch.paths import tree_digest
    (tmp_path / "workloads" / "papers").mkdir(parents=True)
    (tmp_path / "workloads" / "models").mkdir()
    fig, model = tmp_path / "workloads" / "papers" / "p.yaml", tmp_path / "workloads" / "models" / "m.yaml"
    fig.write_text("a")
    model.write_text("a")
    digest = lambda: tree_digest(tmp_path, ["workloads"], exclude=["workloads/papers"])
    before = digest()
    fig.write_text("b")
    assert digest() == before
    model.write_text("b")
    assert digest() != before


def test_bad_workers_is_exit_2(tmp_path, capsys):
    assert cli_main(["paper", "cais", "--quick", "--workers", "0", "-o", str(tmp_path)]) == 2
    assert "--workers: expected at least 1, found 0" in capsys.readouterr().err
