"""tools/profile_compile.py: the compile-time accounting (stages and functions, exclusive of nested
compiles) on two tiny jitted functions, and bad input as a clear error with exit status 2. (A real
run of the tool compiles the whole engine from scratch: minutes, so not here.)"""
import json
import subprocess
import sys

from conftest import REPO

DRIVER = """
import json, sys
sys.path.insert(0, {tools!r})
import profile_compile as pc
tl = pc._Timeline()
pc._install(tl)
from numba import njit

@njit
def inner(x):
    return x * 3

@njit
def outer(x):
    return inner(x) + 1

assert outer(4) == 13
print(json.dumps({{"versions": tl.versions, "stages": tl.by_stage, "functions": tl.by_function,
                  "open": len(tl.stack)}}))
"""


def test_every_compile_is_charged_once_to_its_own_function_and_stage():
    r = subprocess.run([sys.executable, "-c", DRIVER.format(tools=str(REPO / "tools"))],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    names = {n.rsplit(".", 1)[-1]: n for n in out["versions"]}
    assert set(names) == {"inner", "outer"}
    assert out["versions"][names["inner"]] == out["versions"][names["outer"]] == 1
    assert out["open"] == 0
    # inner is compiled while outer is typed: each is charged its own time, none twice
    assert out["functions"][names["inner"]] > 0 and out["functions"][names["outer"]] > 0
    assert abs(sum(out["stages"].values()) - sum(out["functions"].values())) < 1e-6
    for stage in ("pass nopython_type_inference", "pass native_lowering",
                  "llvm module optimisation (with callees)", "machine code emission"):
        assert out["stages"][stage] > 0, stage


def test_bad_config_is_a_clear_error(tmp_path):
    for args, words in ((["missing.yaml"], "config file not found"),
                        (["configs/ubench/alltoall.yaml", "--set", "nope.key=1"], "nope")):
        r = subprocess.run([sys.executable, str(REPO / "tools" / "profile_compile.py"), *args],
                           cwd=REPO, capture_output=True, text=True, timeout=600)
        assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
