"""The State as one pointer (engine/stateref.py): compiled code reads and writes the namedtuple's
own arrays through it, a replaced array is seen after packing again, the pure-Python engine gets the
namedtuple itself, and the engine compiles no version of any function for the flattened tuple."""
import os
import subprocess
import sys
from collections import namedtuple

import numpy as np
import pytest
from numba import njit, types
from numba.core.errors import TypingError
from numba.core.registry import CPUDispatcher

from moehub_arch.engine import stateref
from moehub_arch.engine.stateref import StateRef, StateRefType, state_ref

from conftest import REPO, simulate

Small = namedtuple("Small", "rec q flags")
REC = np.dtype([("credits", np.int64), ("busy", np.int64)])


def _small():
    return Small(np.zeros(3, REC).view(np.recarray), np.arange(12, dtype=np.int64).reshape(4, 3),
                 np.zeros(5, np.uint8))


@njit(_nrt=False)
def _touch(st, c):
    st.rec[c].credits += 7
    st.q[2, 1] = st.q[3, 2] * 10 + st.q.shape[0]
    st.flags[st.flags.shape[0] - 1] = 1
    return st.q[0, 0] + st.rec[c].busy


@njit(_nrt=False)
def _sum_q(st):
    return st.q.sum() if False else _total(st)


@njit(_nrt=False)
def _total(st):
    s = 0
    for i in range(st.q.shape[0]):
        for j in range(st.q.shape[1]):
            s += st.q[i, j]
    return s


def test_compiled_code_reads_and_writes_the_namedtuples_arrays():
    st = _small()
    st.rec[1].busy = 5
    ref = state_ref(st)
    assert isinstance(ref, StateRef) and ref.state is st
    assert _touch(ref, 1) == 5
    assert st.rec[1].credits == 7 and st.rec[0].credits == 0
    assert st.q[2, 1] == 11 * 10 + 4
    assert list(st.flags) == [0, 0, 0, 0, 1]
    # Python code handed the ref reads the same arrays
    assert ref.q is st.q and ref.rec[1].credits == 7


def test_a_replaced_array_is_seen_after_packing_again():
    st = _small()
    before = _total(state_ref(st))
    st2 = st._replace(q=np.ones((6, 2), np.int64))
    assert _total(state_ref(st2)) == 12 and before == sum(range(12))
    # calls across compiled functions pass the one pointer
    assert _sum_q(state_ref(st2)) == 12


def test_one_compiled_version_per_layout():
    ty = state_ref(_small()).numba_type
    assert ty == state_ref(_small()).numba_type           # same field names and types
    other = Small(np.zeros(3, REC).view(np.recarray), np.zeros((2, 2), np.int32), np.zeros(1, np.uint8))
    assert state_ref(other).numba_type != ty               # another dtype of q: another layout
    assert len(ty.name) < 60                                # short mangled names


def test_a_foreign_namedtuple_stays_out_of_the_numba_cache():
    """Only the engine's State is packed by the cached packer: a cached version for this module's
    namedtuple would make the cache index unreadable in every process that cannot import it."""
    state_ref(_small())
    assert not any("Small" in str(sig) for sig in stateref._pack.signatures)
    assert any("Small" in str(sig) for sig in stateref._pack_uncached.signatures)


def test_an_unknown_field_is_a_typing_error():
    @njit(_nrt=False)
    def bad(st):
        return st.no_such_field[0]
    with pytest.raises(TypingError):
        bad(state_ref(_small()))


def test_the_pure_python_engine_gets_the_namedtuple():
    code = ("import os; os.environ['NUMBA_DISABLE_JIT'] = '1'\n"
            "from collections import namedtuple\n"
            "from moehub_arch.engine.stateref import state_ref\n"
            "S = namedtuple('S', 'a'); s = S([1])\n"
            "print(state_ref(s) is s)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items() if k != "NUMBA_DISABLE_JIT"})
    assert out.stdout.strip() == "True", out.stderr


def test_the_engine_compiles_no_function_for_the_flattened_state_tuple():
    """Every engine function that takes the State takes the StateRef: a Python caller that passed
    the namedtuple would compile a second copy of that function and everything it calls."""
    simulate("hub/dispatch_only.yaml")
    seen_ref = 0
    for name, mod in list(sys.modules.items()):
        if not name.startswith("moehub_arch"):
            continue
        for fn in vars(mod).values():
            if not isinstance(fn, CPUDispatcher) or fn in (stateref._pack,
                                                           stateref._pack_uncached):
                continue
            for sig in fn.signatures:
                assert not any(isinstance(a, types.BaseTuple) and len(a) > 20 for a in sig), \
                    f"{name}.{fn.py_func.__name__} compiled for the State tuple"
                seen_ref += any(isinstance(a, StateRefType) for a in sig)
    # (a warm cache loads the callees inside the run loop's code: only the functions Python calls
    # list signatures here, which is where a namedtuple could slip in)
    from moehub_arch.dispatch.loop import run_loop
    assert seen_ref >= 2 and all(isinstance(sig[0], StateRefType) for sig in run_loop.signatures)
