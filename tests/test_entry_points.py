"""The blocks compiled on demand (declare.Block.on_demand: NVLS, DySHARP, CAIS, the switch counters):
their handlers are rows of the entry table (engine/entries.py, dispatch/indirect.py), called by
address and compiled only for a run that uses the block. A run without them never compiles nor
loads them; a run with them gets exactly its blocks' rows; the pure-Python engine calls the same
rows. (Both engines' identical stats on configs that use each block: tests/test_nvls.py,
test_dysharp.py, test_cais_merge.py and test_switch_counter.py.)"""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, load, mini_system

ON_DEMAND = ("nvls", "dysharp", "dysharp_tracker", "cais_merge", "switch_counter")


def _rows_of(*blocks):
    from moehub_arch.dispatch import indirect
    return {r for r, e in enumerate(indirect.ROWS) if e.block is not None and e.block.name in blocks}


def _rows_in_use(config, *overrides):
    from moehub_arch.dispatch import indirect
    from moehub_arch.simulation import Simulation
    return set(indirect.rows_in_use(Simulation(load(config, *overrides)).state))


def test_every_handler_of_a_block_compiled_on_demand_is_a_row_and_no_direct_call():
    from pathlib import Path
    from moehub_arch import composition
    from moehub_arch.dispatch import chains, indirect
    assert {b.name for b in composition.BLOCKS if b.on_demand is not None} == set(ON_DEMAND)
    handlers = {d.handler for b in composition.BLOCKS if b.on_demand is not None
                for d in b.receives + b.sends + b.crossings + b.semantics
                + tuple(e for e in b.events if e.handler)}
    rows = {e.handler for e in indirect.ROWS if e.block is not None}
    assert handlers == rows and len(rows) == 16
    # the always-compiled rows: the AAU's receive (declared by_address), its retry, the SM's issue
    assert [e.handler for e in indirect.ROWS if e.block is None] == [
        "components.moehub.aau.aau_receive", "components.moehub.aau.aau_retry",
        "components.sm.sm_issue"]
    # nothing the run loop or the SM's interpreter compiles names one of them directly: the
    # generated chains call them through their rows, the run loop's own source names none
    names = {h.rsplit(".", 1)[1] for h in handlers}
    loop_src = (Path(composition.__file__).parent / "dispatch" / "loop.py").read_text()
    for source in (chains.SOURCE, composition.EXTENSION_SOURCE, loop_src):
        for line in source.splitlines():
            assert not any(f"{n}(" in line or line.endswith(f" {n}") for n in names), line


@pytest.mark.parametrize("config, overrides, blocks", [
    ("ubench/alltoall.yaml", mini_system(4, 4, 2), ()),
    ("default.yaml", (), ()),
    ("ubench/allreduce_nvls.yaml", (), ("nvls",)),
    ("ubench/dymultimem.yaml", (), ("nvls", "dysharp", "dysharp_tracker")),
    ("ubench/cais_merge.yaml", (), ("cais_merge",)),
    ("ubench/switch_counter.yaml", (), ("switch_counter",)),
    # no counters, but a program with ctr.add: its handler must run (to raise the error its
    # operand deserves, tests/test_switch_counter.py)
    ("ubench/switch_counter.yaml", ("system.switch.counter.entries=0",), ("switch_counter",)),
])
def test_a_run_needs_the_rows_of_the_blocks_its_config_uses(config, overrides, blocks):
    from moehub_arch.dispatch import indirect
    always = {r for r, e in enumerate(indirect.ROWS) if e.block is None}
    assert _rows_in_use(config, *overrides) == always | _rows_of(*blocks)


# a fresh interpreter: which entry points a run compiled or loaded, and whether any handler of a
# block compiled on demand was compiled in it (as a callee of anything)
_PROBE = """
import json, sys
sys.path.insert(0, "tests")
from conftest import simulate
from moehub_arch.dispatch import indirect
out = []
for config, *sets in json.loads(sys.argv[1]):
    sim = simulate(config, *sets)
    compiled = [r for r, e in enumerate(indirect.ROWS)
                if e.block is not None and len(getattr(indirect.handler(r), "overloads", {}))]
    out.append({"rows": sorted(indirect.compiled_rows()), "handlers_compiled": compiled,
                "cold_start": sim.cold_start})
print(json.dumps(out))
"""


def test_a_run_compiles_only_the_entry_points_of_the_blocks_it_uses():
    # the suite compiled the engine for the warm-up config before the tests (conftest): a run of
    # it loads the run loop and its three entry points, and nothing of the blocks compiled on
    # demand; the switch counters' ubench after it, in the same process, compiles (or loads)
    # theirs and only theirs
    from moehub_arch.dispatch import indirect
    env = dict(os.environ)
    env.pop("NUMBA_DISABLE_JIT", None)
    runs = [["experiments/functional.yaml", "scheme=moehub"],
            ["ubench/switch_counter.yaml"] + mini_system(2, 2, 2)]
    r = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(runs)], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    first, second = json.loads(r.stdout.strip().splitlines()[-1])
    always = [r for r, e in enumerate(indirect.ROWS) if e.block is None]
    assert first == {"rows": always, "handlers_compiled": [], "cold_start": "warm"}
    assert second["rows"] == sorted(set(always) | _rows_of("switch_counter"))
    assert second["handlers_compiled"] == []   # compiled as entry points, not as callees


def test_a_row_not_installed_is_an_internal_error_not_a_jump_to_nowhere():
    # the pure-Python engine raises; compiled code stops the process with the same message
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    code = ("from moehub_arch.engine import entries\n"
            "try:\n    entries.call_void2(3, None, 0, 0)\n"
            "except RuntimeError as e:\n    print('raised', e)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "raised moehub-arch internal error" in r.stdout, r.stderr
    env.pop("NUMBA_DISABLE_JIT")
    code = ("import numpy as np\nfrom numba import njit\n"
            "from moehub_arch.engine import entries\n"
            "@njit\ndef f(x):\n    entries.call_void2(3, x, 0, 0)\n"
            "f(np.int64(1))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 70 and "internal error" in r.stderr and "Traceback" not in r.stderr
