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


def test_install_is_idempotent():
    optimise_once.install()
    from numba.core import codegen
    patched = codegen.CPUCodeLibrary._optimize_final_module
    optimise_once.install()
    assert codegen.CPUCodeLibrary._optimize_final_module is patched
    assert getattr(patched, "_moehub_once", False)
