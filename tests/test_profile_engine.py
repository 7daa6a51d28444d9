"""tools/profile_engine.py without perf: the symbol map it writes names the engine's functions at
their machine-code addresses when the engine is loaded from the Numba cache (the tool's default
since 2026-12-02; it used to compile cold every time), and bad input is a clear error with exit
status 2. (Profiling itself needs perf and a whole run: not here.)"""
import json
import subprocess
import sys

from conftest import REPO, assert_tool_rejects_bad_runs, mini_system

DRIVER = """
import json, os, sys
sys.path.insert(0, {tools!r})
sys.path.insert(0, {tests!r})
import profile_engine as pe
pe.keep_object_code()
pe.keep_object_code()            # a second call must not wrap the hook twice
from conftest import load
from moehub_arch.simulation import Simulation
sim = Simulation(load('ubench/alltoall.yaml', *{ov!r}))
sim.run()
libs = pe.engine_libraries()
rows = [(a, s, pe._short(n)) for lib in libs
        for a, s, n in pe._function_addresses(lib, lib._profiled_object)]
n = pe.write_perf_map(libs)
with open(f"/tmp/perf-{{os.getpid()}}.map") as f:
    lines = f.read().splitlines()
os.remove(f"/tmp/perf-{{os.getpid()}}.map")
print(json.dumps({{"rows": rows, "mapped": n, "lines": lines, "libraries": len(libs)}}))
"""


def test_the_map_names_the_engine_loaded_from_the_cache():
    overrides = mini_system(2, 2, 2) + ["workload.launches.0.params.bytes_per_peer=4096",
                                        "workload.launches.0.params.chunk=1024"]
    script = DRIVER.format(tools=str(REPO / "tools"), tests=str(REPO / "tests"), ov=overrides)
    # the suite's engine is already in the package's source-keyed cache: this process loads it
    r = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True,
                       timeout=1200)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    names = {name for _, _, name in out["rows"]}
    # the run loop's library and the entry points' (dispatch/indirect.py), with their callees
    assert {"dispatch.loop.run_loop", "components.sm.sm_issue", "components.sm_interpreter.execute",
            "engine.events.timer_set"} <= names
    assert out["libraries"] >= 2 and out["mapped"] == len(out["rows"]) == len(out["lines"])
    # perf's map format: hex address, hex size, name; sorted, each function where the JIT put it
    spans = []
    for line in out["lines"]:
        addr, size, name = line.split(" ", 2)
        spans.append((int(addr, 16), int(size, 16), name))
    assert spans == sorted(spans) and all(size > 0 for _, size, _ in spans)
    loop = [a for a, _, n in spans if n == "dispatch.loop.run_loop"]
    assert loop and all(a > 0 for a in loop)


def test_bad_input_is_a_clear_error():
    assert_tool_rejects_bad_runs("profile_engine.py")
