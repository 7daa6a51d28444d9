"""The SM's issue handler as its own compiled entry point, which the run loop calls by address.

Why: Numba compiles every function into its own LLVM module and links the modules of all its
callees into it, so the run loop's module held a copy of the SM's whole call tree (`sm_issue`, the
550-line instruction interpreter `_execute` and everything it calls: about half of the engine's
code), which LLVM optimised and emitted again as part of the run loop - and which could only be
compiled after it, in the same process. Behind a function pointer the SM's tree is a separate
entry point (a Numba `cfunc`, C-callable, cached on disk like every engine function): the run
loop's module no longer contains it, and the two can be compiled at the same time in two
processes (engine/precompile.py). The run loop passes the entry's address as an argument and
calls it with the same arguments as before; `sm_issue` itself is unchanged, so are results.

The cost is one indirect call per SM issue event where there was a direct call (LLVM never inlined
the interpreter into the run loop: it is far too large), measured in README, Performance.

Under NUMBA_DISABLE_JIT (the pure-Python engine) there is no entry point: `call_sm_issue` calls
`sm_issue` directly and ignores the address.
"""
from llvmlite import ir
from numba import cfunc, types
from numba.core.extending import intrinsic

from ..components.sm import sm_issue
from .stateref import jit_disabled


def _sm_issue_entry(st, gpu_sm, tick):
    sm_issue(st, gpu_sm, tick)


_ENTRIES = {}   # StateRef type -> the compiled entry point for it


def sm_issue_address(state_type):
    """The address of the SM issue entry point compiled for `state_type` (a StateRef type):
    compiled now, or loaded from the on-disk cache if this or another process compiled it."""
    entry = _ENTRIES.get(state_type)
    if entry is None:
        entry = _ENTRIES[state_type] = cfunc(types.void(state_type, types.int64, types.int64),
                                             cache=True, _nrt=False)(_sm_issue_entry)
    return entry.address


if jit_disabled():
    def call_sm_issue(address, st, gpu_sm, tick):
        sm_issue(st, gpu_sm, tick)
else:
    @intrinsic
    def call_sm_issue(typingctx, address, st, gpu_sm, tick):
        """sm_issue(st, gpu_sm, tick) through the entry point at `address` (sm_issue_address)."""
        sig = types.void(types.int64, st, types.int64, types.int64)

        def codegen(context, builder, signature, args):
            i64 = ir.IntType(64)
            fnty = ir.FunctionType(ir.VoidType(), [context.get_value_type(st), i64, i64])
            builder.call(builder.inttoptr(args[0], fnty.as_pointer()), args[1:])
            return context.get_dummy_value()
        return sig, codegen
