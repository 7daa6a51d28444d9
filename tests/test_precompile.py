"""The cold start in two processes (dispatch/precompile.py) and the handlers' entry points the run
loop calls by address (dispatch/indirect.py): the same stats as the suite's engine and the recorded
golden ones, the worker's entry points compiled by the worker only, and a warm cache found warm."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, load_script, model_stats, simulate

CONFIG = "experiments/functional.yaml"   # under configs/
OVERRIDES = ("scheme=moehub",)

# run in a fresh interpreter (from the repository root): the first run's engine_report (conftest)
_PROBE = """
import json, sys
sys.path.insert(0, "tests")
from conftest import engine_report, simulate
print(json.dumps(engine_report(simulate(*sys.argv[1:]))))
"""


def _probe(cache_dir, jobs):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir), MOEHUB_COMPILE_JOBS=str(jobs))
    env.pop("NUMBA_DISABLE_JIT", None)
    r = subprocess.run([sys.executable, "-c", _PROBE, CONFIG, *OVERRIDES], cwd=REPO,
                       env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_two_process_cold_start_gives_the_same_engine(tmp_path):
    # the suite's own compile before the tests (conftest) is a two-process cold start on a cold
    # cache with two cores: check that one (a fresh process, the first run in it); otherwise
    # make one in an empty cache
    report = os.environ.get("MOEHUB_SUITE_COLD_START")
    made_by_suite = json.loads(Path(report).read_text()) if report else None
    if made_by_suite is not None and made_by_suite["cold_start"] == "parallel":
        cold, cache = made_by_suite, os.environ["NUMBA_CACHE_DIR"]
    else:
        cold, cache = _probe(tmp_path, jobs=2), tmp_path
    # the worker compiled the SM's entry point: this process loaded it from the cache and never
    # compiled the SM's tree; it compiled the AAU's entry points itself
    # (the config uses no block compiled on demand: only the three rows every run needs)
    from moehub_arch.dispatch.indirect import ENTRY_SM_ISSUE, ROWS, WORKER_ROWS
    always = [row for row, e in enumerate(ROWS) if e.block is None]
    assert cold["cold_start"] == "parallel" and cold["sm_issue_compiled_here"] == 0
    assert cold["entry_cache_hits"] == {str(row): int(row in WORKER_ROWS) for row in always}
    assert ENTRY_SM_ISSUE in WORKER_ROWS
    # the same model as the suite's engine (conftest compiled it before the tests) and as the
    # recorded golden stats of this config, whichever way their engines were compiled
    suite = simulate(CONFIG, *OVERRIDES).stats
    assert cold["stats"] == json.loads(json.dumps(model_stats(suite)))
    golden = load_script(REPO / "tools" / "golden_stats.py")
    assert golden.CASES["functional_moehub"] == (CONFIG, list(OVERRIDES))
    recorded = json.loads(golden.GOLDEN.read_text())["functional_moehub"]
    assert golden.fingerprint(golden.model_rows(suite)) == recorded
    # the next run finds everything in the cache
    warm = _probe(cache, jobs=2)
    assert warm["cold_start"] == "warm"
    assert warm["entry_cache_hits"] == {str(row): 1 for row in always}
    assert warm["stats"] == cold["stats"]


@pytest.mark.parametrize("value, jobs", [("1", 1), ("2", 2), ("8", 2), ("", None)])
def test_compile_jobs_from_the_environment(monkeypatch, value, jobs):
    from moehub_arch.dispatch.precompile import compile_jobs
    monkeypatch.setenv("MOEHUB_COMPILE_JOBS", value)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    expected = jobs if jobs is not None else (2 if cores >= 2 else 1)
    assert compile_jobs() == expected


@pytest.mark.parametrize("value", ["x", "0", "-1", "1.5"])
def test_bad_compile_jobs_is_a_config_error(monkeypatch, value):
    from moehub_arch.config import ConfigError
    from moehub_arch.dispatch.precompile import compile_jobs
    monkeypatch.setenv("MOEHUB_COMPILE_JOBS", value)
    with pytest.raises(ConfigError, match="MOEHUB_COMPILE_JOBS"):
        compile_jobs()
