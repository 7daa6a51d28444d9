"""`prefetch(records, i)`: ask the CPU to start loading row i of a State array into its caches.

Why: the run loop's time per event grows with the GPU count (README, Performance) because the
records an event touches were last touched many events earlier: a packet's record is written when
a link transmits it and read again when it arrives, a link latency later, and in between the other
GPUs' events have passed through the caches. Where a handler knows which record a later event will
read (the next packet on a wire, the next packet of a transmit FIFO), a prefetch now lets that
load overlap the work of the events in between instead of stalling the later event.

A prefetch is only a hint (LLVM's `llvm.prefetch` intrinsic: an x86 PREFETCHT0, an AArch64 PRFM):
it never faults, changes no value, and results are identical with or without it. Under
NUMBA_DISABLE_JIT (the pure-Python engine) it does nothing.
"""
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic

from .stateref import jit_disabled

if jit_disabled():
    def prefetch(records, i):
        """Nothing to prefetch in the pure-Python engine."""
else:
    @intrinsic
    def prefetch(typingctx, records, i):
        """Prefetch row i of the 1-D array `records` (for reading, into every cache level)."""
        if not isinstance(records, types.Array) or not isinstance(i, types.Integer):
            return None

        def codegen(context, builder, signature, values):
            array_type = signature.args[0]
            array = context.make_array(array_type)(context, builder, values[0])
            index = context.cast(builder, values[1], signature.args[1], types.intp)
            row = cgutils.get_item_pointer(context, builder, array_type, array, [index],
                                           wraparound=False)
            i8p = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
            # read (0), highest temporal locality (3), data cache (1)
            builder.call(fn, [builder.bitcast(row, i8p), i32(0), i32(3), i32(1)])
            return context.get_dummy_value()
        return types.void(records, i), codegen
