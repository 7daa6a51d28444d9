"""Handlers the run loop calls by address: the SM's issue handler and the MoE-Hub AAU's receive and
retry paths, each compiled as its own entry point.

Why: Numba compiles every function into its own LLVM module and links the modules of all its
callees into it, so the run loop's module held a copy of the SM's whole call tree (`sm_issue`, the
instruction interpreter `sm_interpreter.execute` and everything it calls: about half of the engine's
code) and of the AAU's, which LLVM optimised and emitted again as part of the run loop - and which
could only be compiled after them, in the same process. Behind a function pointer each is a
separate entry point (a Numba `cfunc` of the handler itself: C-callable, cached on disk like every
engine function): the run loop's module no longer contains them, and they can be compiled while
the run loop is, in another process (dispatch/precompile.py). The run loop takes the table of
addresses (`entry_table`) as an argument and calls each handler with the same arguments as
before; the handlers are unchanged, so are results.

The cost is one indirect call per SM issue or AAU event where there was a direct call (LLVM did not
inline these large handlers into the run loop), measured in README, Performance.

Under NUMBA_DISABLE_JIT (the pure-Python engine) the table holds the Python functions themselves
and `call2` / `call4` call them.
"""
import numpy as np
from llvmlite import ir
from numba import cfunc, types
from numba.core.extending import intrinsic

from .. import composition  # noqa: F401  (fills engine/extension.py before anything compiles)
from ..components.moehub.aau import aau_receive, aau_retry
from ..components.sm import sm_issue
from ..engine.optimise_once import entry_compile
from ..engine.stateref import jit_disabled

# the table's rows: (handler, number of int64 arguments after the State); compiled in this order
ENTRY_AAU_RECEIVE, ENTRY_AAU_RETRY, ENTRY_SM_ISSUE = range(3)
_HANDLERS = ((aau_receive, 4), (aau_retry, 2), (sm_issue, 2))
ENTRY_ROWS = len(_HANDLERS)

# the rows a second compile process builds on a cold cache (dispatch/precompile.py): the SM's tree
# (about as much compile work as the run loop's), then the AAU's retry entry point, whose call tree
# the SM's (which calls aau_retry) has just compiled in that process; this process compiles the
# AAU's receive entry point after the run loop, by when most of its callees are in the cache. The
# split that measured closest to even (README, Performance)
WORKER_ROWS = (ENTRY_SM_ISSUE, ENTRY_AAU_RETRY)

_ENTRIES = {}   # (StateRef type, row) -> the compiled entry point


def entry_row(handler):
    """The table row of a handler named as declarations name it ("components.moehub.aau.
    aau_receive": a Receive declared by_address)."""
    for row, (fn, _) in enumerate(_HANDLERS):
        fn = getattr(fn, "py_func", fn)
        if f"{fn.__module__}.{fn.__name__}" == f"moehub_arch.{handler}":
            return row
    raise KeyError(f"{handler} has no row in dispatch/indirect.py's entry table")


def entry_point(state_type, row):
    """The entry point of table row `row` compiled for `state_type` (a StateRef type): compiled
    now, or loaded from the on-disk cache if this or another process compiled it."""
    entry = _ENTRIES.get((state_type, row))
    if entry is None:
        handler, arity = _HANDLERS[row]
        with entry_compile():   # the outermost module: its callees are compiled for it
            entry = _ENTRIES[state_type, row] = cfunc(
                types.void(state_type, *(types.int64,) * arity), cache=True,
                _nrt=False)(handler.py_func)
    return entry


def entry_table(state_type):
    """What the run loop takes as its `entries` argument: every row's address (int64 array), or
    under NUMBA_DISABLE_JIT (or for state_type None) the handlers themselves."""
    if jit_disabled() or state_type is None:
        return tuple(handler for handler, _ in _HANDLERS)
    return np.array([entry_point(state_type, row).address for row in range(ENTRY_ROWS)],
                    np.int64)


def _call_codegen(arity):
    """Lowering of a call to the entry point at an address with (State, `arity` int64s)."""
    def codegen(context, builder, signature, values):
        i64 = ir.IntType(64)
        state = context.get_value_type(signature.args[1])
        fnty = ir.FunctionType(ir.VoidType(), [state] + [i64] * arity)
        builder.call(builder.inttoptr(values[0], fnty.as_pointer()), values[1:])
        return context.get_dummy_value()
    return codegen


if jit_disabled():
    def call2(entry, st, a, b):
        entry(st, a, b)

    def call4(entry, st, a, b, c, d):
        entry(st, a, b, c, d)
else:
    @intrinsic
    def call2(typingctx, entry, st, a, b):
        """entry(st, a, b) for an entry point's address `entry` (an entry_table row)."""
        return types.void(types.int64, st, types.int64, types.int64), _call_codegen(2)

    @intrinsic
    def call4(typingctx, entry, st, a, b, c, d):
        """entry(st, a, b, c, d) for an entry point's address `entry` (an entry_table row)."""
        return (types.void(types.int64, st, types.int64, types.int64, types.int64, types.int64),
                _call_codegen(4))
