"""The cold start in two processes (engine/precompile.py) and the handlers' entry points the run
loop calls by address (engine/indirect.py): same stats as the engine compiled in one process, the
entry points compiled by the worker only, and a warm cache found warm."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, load_script, model_stats, simulate

CONFIG = "experiments/functional.yaml"   # under configs/
OVERRIDES = ("scheme=moehub",)

# run in a fresh interpreter: how the engine was obtained, whether this process compiled the SM's
# tree itself, the entry point's cache hits, and the model stats
_PROBE = """
import json, sys
from moehub_arch.config import load_config
from moehub_arch.simulation import Simulation
from moehub_arch.components.sm import sm_issue
from moehub_arch.engine import indirect
sim = Simulation(load_config(sys.argv[1], sys.argv[2:]))
sim.run()
print(json.dumps({
    "cold_start": sim.cold_start,
    "sm_issue_compiled_here": len(sm_issue.overloads),
    "entry_cache_hits": {row: e.cache_hits for (_, row), e in indirect._ENTRIES.items()},
    "stats": {s.name: s.value for s in sim.stats if not s.name.startswith("host")},
}))
"""


def _probe(cache_dir, jobs):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir), MOEHUB_COMPILE_JOBS=str(jobs))
    env.pop("NUMBA_DISABLE_JIT", None)
    r = subprocess.run([sys.executable, "-c", _PROBE, str(REPO / "configs" / CONFIG), *OVERRIDES], cwd=REPO,
                       env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_two_process_cold_start_gives_the_same_engine(tmp_path):
    cold = _probe(tmp_path, jobs=2)
    # the worker compiled the SM's entry point: this process loaded it from the cache and never
    # compiled the SM's tree; it compiled the AAU's entry points itself
    from moehub_arch.engine.indirect import ENTRY_SM_ISSUE, WORKER_ROWS
    assert cold["cold_start"] == "parallel" and cold["sm_issue_compiled_here"] == 0
    assert cold["entry_cache_hits"] == {str(row): int(row in WORKER_ROWS) for row in range(3)}
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
    warm = _probe(tmp_path, jobs=2)
    assert warm["cold_start"] == "warm"
    assert warm["entry_cache_hits"] == {str(row): 1 for row in range(3)}
    assert warm["stats"] == cold["stats"]


@pytest.mark.parametrize("value, jobs", [("1", 1), ("2", 2), ("8", 2), ("", None)])
def test_compile_jobs_from_the_environment(monkeypatch, value, jobs):
    from moehub_arch.engine.precompile import compile_jobs
    monkeypatch.setenv("MOEHUB_COMPILE_JOBS", value)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    expected = jobs if jobs is not None else (2 if cores >= 2 else 1)
    assert compile_jobs() == expected


@pytest.mark.parametrize("value", ["x", "0", "-1", "1.5"])
def test_bad_compile_jobs_is_a_config_error(monkeypatch, value):
    from moehub_arch.config import ConfigError
    from moehub_arch.engine.precompile import compile_jobs
    monkeypatch.setenv("MOEHUB_COMPILE_JOBS", value)
    with pytest.raises(ConfigError, match="MOEHUB_COMPILE_JOBS"):
        compile_jobs()
