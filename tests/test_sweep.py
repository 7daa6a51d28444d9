"""Sweeps: the same results on the local process pool and on a Dask LocalCluster; resumable;
bad sweep files are one-paragraph errors."""
import csv

import pytest

from conftest import CONFIGS, REPO, run_cli

SWEEP = f"""\
name: t4
config: {CONFIGS / 'experiments/functional.yaml'}
grid:
  workload.layer.tokens_per_gpu: [32, 64]
points:
  - {{scheme: deepep}}
  - {{scheme: moehub}}
stats: [simTicks, system.moe.layer_time_us, "system.moe.phase.*", system.moe.rows_combined]
"""


def _table(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return {r["point"]: {k: v for k, v in r.items() if k != "status"} for r in rows}, rows


@pytest.fixture
def sweep_file(tmp_path):
    path = tmp_path / "t4.yaml"
    path.write_text(SWEEP)
    return path


def test_local_pool_and_dask_cluster_agree_and_resume(tmp_path, sweep_file):
    from dask.distributed import LocalCluster

    from moehub_arch.sweep import load_sweep, run_sweep

    local = load_sweep(sweep_file, tmp_path / "local")
    assert len(local.points) == 4
    path, _ = run_sweep(local, workers=2, progress=False)
    local_table, rows = _table(path)
    assert [r["status"] for r in rows] == ["ok"] * 4
    assert {r["scheme"] for r in rows} == {"deepep", "moehub"}
    assert {r["system.moe.rows_combined"] for r in rows} == {str(32 * 2 * 4), str(64 * 2 * 4)}
    assert all(float(r["system.moe.layer_time_us"]) > 0 for r in rows)

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster:
        remote = load_sweep(sweep_file, tmp_path / "dask")
        path, _ = run_sweep(remote, scheduler=cluster.scheduler_address, progress=False)
    dask_table, _ = _table(path)
    assert dask_table == local_table
    for p in local.points:   # each point wrote a complete run directory
        d = tmp_path / "dask" / "points" / p.id
        assert {"config.json", "stats.json", "stats.txt", "stats.csv", "done.json"} <= \
            {f.name for f in d.iterdir()}

    # resume: every point is found finished and none runs again
    stamps = {p.id: (tmp_path / "local" / "points" / p.id / "stats.json").stat().st_mtime_ns
              for p in local.points}
    path, _ = run_sweep(load_sweep(sweep_file, tmp_path / "local"), workers=2, progress=False)
    again, rows = _table(path)
    assert again == local_table and all(r["status"] == "ok (earlier run)" for r in rows)
    assert stamps == {p.id: (tmp_path / "local" / "points" / p.id / "stats.json").stat().st_mtime_ns
                      for p in local.points}


def test_resume_runs_only_unfinished_points(tmp_path, sweep_file):
    from moehub_arch.sweep import load_sweep, run_sweep

    sweep = load_sweep(sweep_file, tmp_path / "out")
    run_sweep(sweep, workers=1, progress=False)
    lost = sweep.points[2]
    (tmp_path / "out" / "points" / lost.id / "done.json").unlink()   # as if interrupted
    _, rows = run_sweep(load_sweep(sweep_file, tmp_path / "out"), workers=1, progress=False)
    status = {r["point"].id: r["status"] for r in rows}
    assert status.pop(lost.id) == "ok" and set(status.values()) == {"ok (earlier run)"}


def test_bad_sweep_files_exit_2(tmp_path, sweep_file):
    bad = tmp_path / "bad.yaml"
    cases = (
        (SWEEP.replace("grid:", "gird:"), "did you mean 'grid'"),
        (SWEEP.replace("tokens_per_gpu", "tokens_per_gpux"), "tokens_per_gpux"),
        (SWEEP.replace("[32, 64]", "[32, -1]"), "tokens_per_gpu"),
        (SWEEP.replace(str(CONFIGS / "experiments/functional.yaml"), "nope.yaml"), "nope.yaml"),
    )
    for text, fragment in cases:
        bad.write_text(text)
        r = run_cli("sweep", bad, "-o", tmp_path / "o", "--quiet")
        assert r.returncode == 2 and "bad.yaml" in r.stderr and fragment in r.stderr, r.stderr
        assert "Traceback" not in r.stderr


def test_example_sweeps_expand():
    from moehub_arch.sweep import load_sweep
    assert len(load_sweep(CONFIGS / "sweeps/hub_merge_x_tile.yaml").points) == 9
    assert len(load_sweep(CONFIGS / "sweeps/tokens_x_scheme.yaml").points) == 9


def test_a_points_fingerprint_does_not_depend_on_the_working_directory(tmp_path, sweep_file,
                                                                     monkeypatch):
    """The resolved config's provenance names files relative to the working directory; the
    fingerprint that resume compares is of the values only, so a sweep resumes from anywhere."""
    from moehub_arch.config import load_config
    from moehub_arch.sweep import load_sweep
    from moehub_arch.sweep.spec import PROVENANCE_KEYS
    digests = []
    for where in (tmp_path, REPO):
        monkeypatch.chdir(where)
        sweep = load_sweep(sweep_file)
        digests.append([p.config_digest for p in sweep.points])
    assert digests[0] == digests[1] and len(set(digests[0])) == 4
    resolved = load_config(CONFIGS / "experiments/functional.yaml").to_dict()
    assert set(PROVENANCE_KEYS) <= set(resolved)


def test_resume_reruns_points_whose_config_changed(tmp_path):
    """A finished point is reused only for the same resolved config: editing the config file (or a
    file it extends) between runs reruns the point, and a done.json without the config's
    fingerprint (written by an older version) or made by other sources is not trusted either."""
    import json

    from moehub_arch.sweep import load_sweep, run_sweep

    base = tmp_path / "base.yaml"
    base.write_text(f"extends: {CONFIGS / 'experiments/functional.yaml'}\nscheme: deepep\n")
    sweep_file = tmp_path / "s.yaml"
    sweep_file.write_text(f"name: s\nconfig: {base}\ngrid:\n  workload.layer.tokens_per_gpu: [32]\n"
                          "stats: [system.moe.layer_time_us]\n")

    def statuses():
        _, rows = run_sweep(load_sweep(sweep_file, tmp_path / "out"), workers=1, progress=False)
        return [r["status"] for r in rows]

    assert statuses() == ["ok"]
    assert statuses() == ["ok (earlier run)"]
    base.write_text(base.read_text() + "workload: {layer: {combine_tbs: 4}}\n")
    assert statuses() == ["ok"]
    assert statuses() == ["ok (earlier run)"]
    (done,) = (tmp_path / "out" / "points").glob("*/done.json")
    done.write_text(json.dumps({k: v for k, v in json.loads(done.read_text()).items()
                                if k != "config_digest"}))
    assert statuses() == ["ok"]
    assert statuses() == ["ok (earlier run)"]
    # a point made by other code (another engine, kernel or ISA: another sources digest) is re-run
    done.write_text(json.dumps({**json.loads(done.read_text()), "sources_digest": "older code"}))
    assert statuses() == ["ok"]
