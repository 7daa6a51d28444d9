"""engine/optimise_once.py: LLVM's full module pipeline runs on the outermost module of a call
tree only; the engine functions compiled for a caller get Numba's cheap pass, and what the code
computes does not change."""
import os

import pytest
from numba import cfunc, njit, types

from moehub_arch.engine import optimise_once

pytestmark = pytest.mark.skipif(os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0"),
                                reason="compiles with Numba")


def _leaf(x):
    return x * 3 + 1


def _middle(x):
    s = 0
    for i in range(x):
        s += leaf(i)
    return s


def _top(x):
    return middle(x) - 7


# compiled without the disk cache, so each test compiles them itself
leaf = middle = top = None


@pytest.fixture
def tree(monkeypatch):
    """A fresh three-level call tree from this module, which the policy treats as engine code."""
    global leaf, middle, top
    monkeypatch.setattr(optimise_once, "ENGINE_MODULES",
                        optimise_once.ENGINE_MODULES + (__name__,))
    optimise_once.install()
    njit(lambda: 1)()   # Numba's runtime library is built (and optimised) with a process's first compile
    leaf, middle, top = njit(_leaf), njit(_middle), njit(_top)
    return leaf, middle, top


def _counts():
    return dict(optimise_once.optimised)


def _reference(x):
    return sum(i * 3 + 1 for i in range(x)) - 7


def test_callees_are_linked_only_the_outermost_is_optimised_in_full(tree):
    before = _counts()
    assert tree[2](1000) == _reference(1000)
    after = _counts()
    # middle and leaf were compiled for top; top (called from Python) is the outermost
    assert after["linked"] - before["linked"] == 2
    assert after["full"] - before["full"] == 1


def test_linked_only_modules_get_the_quick_code_generator_and_keep_their_object(tree):
    """A module compiled for a caller has its machine code emitted at -O0 (the cheap code
    generator, as its module pass was the cheap one), and the library keeps that object for the
    on-disk cache; Python's own call of such a function runs it and computes the same."""
    before = dict(optimise_once.emitted)
    assert tree[2](1000) == _reference(1000)
    assert optimise_once.emitted["quick"] - before["quick"] == 2   # middle and leaf
    assert tree[1](1000) == _reference(1000) + 7     # middle's own -O0 code, called from Python
    library = next(iter(tree[1].overloads.values())).library
    _, kind, (obj, _) = library.serialize_using_object_code()
    assert kind == "object" and isinstance(obj, bytes) and len(obj) > 0


_QUICK_TREE = """
from numba import njit
from moehub_arch.engine import optimise_once
optimise_once.ENGINE_MODULES += ("quick_tree",)
optimise_once.install()

@njit(cache=True)
def leaf(x):
    return x * 3 + 1

@njit(cache=True)
def middle(x):
    s = 0
    for i in range(x):
        s += leaf(i)
    return s

@njit(cache=True)
def top(x):
    return middle(x) - 7
"""


def test_a_quick_object_cached_on_disk_runs_in_the_next_process(tmp_path):
    """The -O0 object of a linked-only module is what the on-disk cache keeps: a later process
    that calls that function from Python loads it from the cache and gets the same answer."""
    import subprocess
    import sys
    (tmp_path / "quick_tree.py").write_text(_QUICK_TREE)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=os.pathsep.join(
        [str(tmp_path)] + [p for p in sys.path if p]))

    def run(code):
        out = subprocess.run([sys.executable, "-c", "import quick_tree as q\n"
                              "from moehub_arch.engine import optimise_once\n" + code],
                             env=env, capture_output=True, text=True, check=True)
        return out.stdout.split()

    assert run("print(q.top(1000), optimise_once.emitted['quick'])") == [str(_reference(1000)), "2"]
    assert run("print(q.middle(1000), q.middle.stats.cache_hits.most_common(1)[0][1], "
               "optimise_once.emitted['quick'])") == [str(_reference(1000) + 7), "1", "0"]


def test_a_function_python_calls_first_is_optimised_in_full(tree):
    before = _counts()
    assert tree[0](5) == 16          # leaf alone, from Python: outermost
    assert _counts()["full"] - before["full"] == 1
    assert tree[1](10) == sum(i * 3 + 1 for i in range(10))   # middle links the compiled leaf
    after = _counts()
    assert after["full"] - before["full"] == 2 and after["linked"] == before["linked"]


def test_an_entry_compile_is_the_outermost_module(tree):
    before = _counts()
    with optimise_once.entry_compile():
        entry = cfunc(types.int64(types.int64))(_top)
    after = _counts()
    assert after["linked"] - before["linked"] == 2   # middle and leaf, compiled for the entry
    assert entry.ctypes(1000) == _reference(1000)


def _fib(x):
    if x < 2:
        return x
    return fib(x - 1) + fib(x - 2)


def _fib_top(x):
    return fib(x) + 1


fib = None


def test_the_outermost_module_keeps_its_callees_local(tree):
    """The callees linked into the outermost module are internal: a call the inliner leaves in
    its code (here a recursive callee, which LLVM does not inline away) runs that module's own
    optimised copy, not a weak symbol of the same name that another library defined first."""
    import llvmlite.binding as ll
    global fib
    fib = njit(_fib)
    top = njit(_fib_top)
    assert top(15) == 611
    library = next(iter(top.overloads.values())).library
    defined = [fn for fn in library._final_module.functions if not fn.is_declaration]
    callees = [fn for fn in defined if "_fib" in fn.name and "_fib_top" not in fn.name]
    assert callees and all(fn.linkage == ll.Linkage.internal for fn in callees)
    assert not any(fn.linkage == ll.Linkage.linkonce_odr for fn in defined)
    # the library's own function and its wrappers stay external, so they can be called
    assert any("_fib_top" in fn.name and fn.linkage == ll.Linkage.external for fn in defined)


def test_code_outside_the_engine_compiles_as_numba_does(monkeypatch):
    """Without this module among ENGINE_MODULES, nothing is linked-only, and nothing counted."""
    global leaf, middle
    optimise_once.install()
    leaf, middle = njit(_leaf), njit(_middle)
    before = _counts()
    assert njit(_top)(50) == _reference(50)
    assert _counts() == before


def test_install_is_idempotent_even_when_a_tool_wraps_the_patch(monkeypatch):
    """A second install changes nothing, also after a tool (tools/profile_compile.py) wrapped the
    patched method: no second compile listener, so a function Python calls is still outermost."""
    optimise_once.install()
    from numba.core import codegen
    patched = codegen.CPUCodeLibrary._optimize_final_module
    assert getattr(patched, "_moehub_once", False)

    def timing_wrapper(self):
        return patched(self)
    monkeypatch.setattr(codegen.CPUCodeLibrary, "_optimize_final_module", timing_wrapper)
    optimise_once.install()
    assert codegen.CPUCodeLibrary._optimize_final_module is timing_wrapper
    monkeypatch.setattr(optimise_once, "ENGINE_MODULES", optimise_once.ENGINE_MODULES + (__name__,))
    global leaf
    leaf = njit(_leaf)
    before = _counts()
    assert leaf(5) == 16
    assert _counts()["full"] - before["full"] == 1 and _counts()["linked"] == before["linked"]
