"""The entry table: where compiled code finds the handlers compiled as entry points of their own.

A handler called through this table is not a callee of its caller's compiled function: Numba
does not compile it for the caller nor link its module into the caller's, so the caller compiles
without it, and the handler is compiled only when a run needs it (dispatch/indirect.py says which
handlers are rows and compiles them). A call is one load of the row's address and one indirect
call, made by the intrinsics below, one per calling convention: (returns a value or not, the
number of int64 arguments after the State).

The table is one array per process, at a fixed address that the compiled code names as an
external symbol (`TABLE_SYMBOL`, registered with LLVM's linker when this module is imported,
before anything compiled can be loaded): every compiled function of any depth - the run loop, the
switch's crossbar, the SM's instruction interpreter - reaches it without an argument, and the
code cached on disk stays valid in every process (it names the symbol, not an address). Before
every call of the run loop, the run loop writes the addresses of its run's entry points into it
(`install`), so a process that runs engines for different State layouts one after another
calls the right ones. A row nothing installed holds the address of `not_installed`, which stops
the process with a message (a programming error: a block's handler called in a run that did not
compile it) instead of jumping to address 0.

Under NUMBA_DISABLE_JIT (the pure-Python engine) the table is a list of the Python functions
themselves (`PY_TABLE`) and the callers call them: the same rows, the same calls.

This module knows no block: which handler a row holds is the dispatch floor's business.
"""
import ctypes
import os
import sys

import numpy as np
from llvmlite import ir

from .jit import inline
from .stateref import jit_disabled

ROWS = 64                         # the table's capacity (composition.py checks the rows fit)
TABLE_SYMBOL = "moehub_arch_entry_table"
TABLE = np.zeros(ROWS, np.int64)    # the addresses (compiled engine)
_NOT_INSTALLED_TEXT = ("moehub-arch internal error: the engine called a handler through a row of "
                       "the entry table that this run did not install (engine/entries.py): its "
                       "block's entry points were not compiled for this run's system")


def not_installed(*args):
    """What a row holds that this run did not install. The pure-Python engine raises; compiled
    code, which called it by its address and cannot take an exception, stops the process."""
    if jit_disabled():
        raise RuntimeError(_NOT_INSTALLED_TEXT)
    sys.stderr.write(_NOT_INSTALLED_TEXT + "\n")
    sys.stderr.flush()
    os._exit(70)


PY_TABLE = [not_installed] * ROWS   # the functions (pure-Python engine)


# the row an uncompiled handler leaves: C-callable, whatever the convention (the arguments and the
# value are those of the calling convention's registers, which it ignores; it never returns)
_NOT_INSTALLED = ctypes.CFUNCTYPE(None)(not_installed)
NOT_INSTALLED = ctypes.cast(_NOT_INSTALLED, ctypes.c_void_p).value
TABLE[:] = NOT_INSTALLED

if not jit_disabled():
    import llvmlite.binding as _llvm
    from numba import types
    from numba.core.extending import intrinsic
    _llvm.add_symbol(TABLE_SYMBOL, TABLE.ctypes.data)


def _row_pointer(builder, row):
    """Where row `row` of the table is, in the module being compiled (the table declared there as
    the external symbol the linker resolves)."""
    module = builder.module
    table = module.globals.get(TABLE_SYMBOL)
    if table is None:
        table = ir.GlobalVariable(module, ir.IntType(64), TABLE_SYMBOL)
        table.linkage = "external"
    return builder.gep(table, [row])


def _codegen(returns, arity):
    """Lowering of a call to the entry point in a row: (row, State, `arity` int64s)."""
    def codegen(context, builder, signature, values):
        i64 = ir.IntType(64)
        state = context.get_value_type(signature.args[1])
        fnty = ir.FunctionType(i64 if returns else ir.VoidType(), [state] + [i64] * arity)
        fn = builder.inttoptr(builder.load(_row_pointer(builder, values[0])), fnty.as_pointer())
        result = builder.call(fn, values[1:])
        return result if returns else context.get_dummy_value()
    return codegen


def _typing(returns, row, st, args):
    """The signature of a call of a row's entry point with the State and int64 arguments `args`
    (None, so that Numba reports the call as untyped, for any other arguments)."""
    if not all(isinstance(a, types.Integer) for a in (row,) + args):
        return None
    ret = types.int64 if returns else types.void
    return ret(types.int64, st, *(types.int64,) * len(args)), _codegen(returns, len(args))


def _python_caller(row, st, *args):
    return PY_TABLE[row](st, *args)


# the callers, one per calling convention (a name: returns a value, int64 arguments after the
# State); an intrinsic takes no *args, so each spells its arguments out
CONVENTIONS = {"call_void2": (False, 2), "call_void3": (False, 3), "call_void4": (False, 4),
               "call_int3": (True, 3), "call_int5": (True, 5)}
if jit_disabled():
    call_void2 = call_void3 = call_void4 = call_int3 = call_int5 = _python_caller
else:
    @intrinsic
    def call_void2(typingctx, row, st, a, b):
        """entry(st, a, b) of row `row`, which returns nothing."""
        return _typing(False, row, st, (a, b))

    @intrinsic
    def call_void3(typingctx, row, st, a, b, c):
        """entry(st, a, b, c) of row `row`, which returns nothing."""
        return _typing(False, row, st, (a, b, c))

    @intrinsic
    def call_void4(typingctx, row, st, a, b, c, d):
        """entry(st, a, b, c, d) of row `row`, which returns nothing."""
        return _typing(False, row, st, (a, b, c, d))

    @intrinsic
    def call_int3(typingctx, row, st, a, b, c):
        """entry(st, a, b, c) of row `row`, which returns an int64."""
        return _typing(True, row, st, (a, b, c))

    @intrinsic
    def call_int5(typingctx, row, st, a, b, c, d, e):
        """entry(st, a, b, c, d, e) of row `row`, which returns an int64."""
        return _typing(True, row, st, (a, b, c, d, e))


if jit_disabled():
    def install(entries):
        """Make `entries` (the run's handlers, one per row) the ones the callers call."""
        PY_TABLE[:len(entries)] = entries
else:
    @intrinsic
    def _store_row(typingctx, row, address):
        def codegen(context, builder, signature, values):
            builder.store(values[1], _row_pointer(builder, values[0]))
            return context.get_dummy_value()
        return types.void(types.int64, types.int64), codegen

    @inline
    def install(entries):
        """Make `entries` (the run's entry-point addresses, one per row) the ones the callers
        call (inlined into the run loop, which does it on every call)."""
        for row in range(entries.shape[0]):
            _store_row(row, entries[row])
