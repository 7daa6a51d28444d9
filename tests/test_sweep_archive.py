"""tools/sweep_archive.py: a sweep's finished points survive a pack and an unpack (what resuming a
sweep and a paper report read), unfinished ones are left out, and bad archives are clear errors."""
import gzip
import json

from conftest import REPO, load_script

archive_tool = load_script(REPO / "tools" / "sweep_archive.py")


def _point(points, pid, finished, stats):
    d = points / pid
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"system": {"num_gpus": 4}}))
    (d / "stats.json").write_text(json.dumps(stats))
    (d / "stats.txt").write_text("big\n")
    if finished:
        (d / "done.json").write_text(json.dumps({"overrides": ["scheme=x"], "config_digest": "c",
                                                 "sources_digest": "s"}))
    else:
        (d / "error.txt").write_text("failed\n")


def test_pack_unpack_keeps_finished_points_and_the_stats_subset(tmp_path, capsys):
    src = tmp_path / "a" / "sweep"
    stats = {"simTicks": {"value": 5}, "system.moe.layer_time_us": {"value": 1.5},
             "system.gpu0.sm0.insts": {"value": 9}, "system.block.time_us": {"value": 2.0}}
    _point(src / "points", "p1", True, stats)
    _point(src / "points", "p2", False, stats)
    arc = tmp_path / "points.json.gz"
    assert archive_tool.main(["pack", str(src), str(arc)]) == 0
    assert "packed 1 finished points" in capsys.readouterr().out
    dst = tmp_path / "b" / "sweep"
    assert archive_tool.main(["unpack", str(arc), str(dst)]) == 0
    d = dst / "points" / "p1"
    assert json.loads((d / "done.json").read_text()) == json.loads(
        (src / "points" / "p1" / "done.json").read_text())
    assert json.loads((d / "config.json").read_text()) == {"system": {"num_gpus": 4}}
    assert json.loads((d / "stats.json").read_text()) == {
        k: v for k, v in stats.items() if k != "system.gpu0.sm0.insts"}
    assert not (dst / "points" / "p2").exists()
    # a point already finished in the folder is kept as it is
    (d / "stats.json").write_text("{}")
    assert archive_tool.main(["unpack", str(arc), str(dst)]) == 0
    assert "1 already finished there, kept" in capsys.readouterr().out
    assert (d / "stats.json").read_text() == "{}"
    # --stats keeps more
    assert archive_tool.main(["pack", str(src), str(arc), "--stats", "system.gpu0.*"]) == 0
    body = archive_tool.load(arc)
    assert "system.gpu0.sm0.insts" in body["points"]["p1"]["stats"]


def test_bad_inputs_are_clear_errors(tmp_path, capsys):
    assert archive_tool.main(["pack", str(tmp_path / "nowhere"), str(tmp_path / "x.gz")]) == 2
    assert "not a sweep's output folder" in capsys.readouterr().err
    plain = tmp_path / "plain.json.gz"
    plain.write_text("not gzip")
    assert archive_tool.main(["unpack", str(plain), str(tmp_path / "s")]) == 2
    assert "cannot read it as a gzip file" in capsys.readouterr().err
    other = tmp_path / "other.json.gz"
    with gzip.open(other, "wt") as f:
        json.dump({"format": "something else"}, f)
    assert archive_tool.main(["list", str(other)]) == 2
    assert "not a sweep archive" in capsys.readouterr().err
    evil = tmp_path / "evil.json.gz"
    with gzip.open(evil, "wt") as f:
        json.dump({"format": archive_tool.FORMAT,
                   "points": {"../x": {"done": {}, "config": {}, "stats": {}}}}, f)
    assert archive_tool.main(["unpack", str(evil), str(tmp_path / "s")]) == 2
    assert "malformed" in capsys.readouterr().err
