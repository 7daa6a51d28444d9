"""Prefetch hints: ask the CPU to start loading a cache line that a later event will read.

`prefetch(records, i)` loads row i of a 1-D State array (a packet's record, components/nvlink.py);
`prefetch_address(addr)` the line at a byte address (rows of a multi-dimensional array, such as
the HBM calendar's, components/hbm.py).

Why: the run loop's time per event grows with the GPU count (README, Performance) because the
records an event touches were last touched many events earlier: a packet's record is written when
a link transmits it and read again when it arrives, a link latency later, and in between the other
GPUs' events have passed through the caches. Where a handler knows which record a later event will
read (the next packet on a wire, the next packet of a transmit FIFO, the next HBM channel's
calendar rows), a prefetch now lets that load overlap the work in between instead of stalling the
later event.

A prefetch is only a hint (LLVM's `llvm.prefetch` intrinsic: an x86 PREFETCHT0, an AArch64 PRFM):
it never faults, changes no value, and results are identical with or without it. Under
NUMBA_DISABLE_JIT (the pure-Python engine) both do nothing.
"""
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic

from .stateref import jit_disabled


def _emit_prefetch(builder, pointer):
    """Call llvm.prefetch on `pointer`: a read (0), kept in every cache level (3), data (1)."""
    i8p = ir.IntType(8).as_pointer()
    i32 = ir.IntType(32)
    fn = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0")
    builder.call(fn, [builder.bitcast(pointer, i8p), i32(0), i32(3), i32(1)])


if jit_disabled():
    def prefetch(records, i):
        """Nothing to prefetch in the pure-Python engine."""

    def prefetch_address(addr):
        """Nothing to prefetch in the pure-Python engine."""
else:
    @intrinsic
    def prefetch(typingctx, records, i):
        """Prefetch row i of the 1-D array `records`."""
        if not (isinstance(records, types.Array) and records.ndim == 1
                and isinstance(i, types.Integer)):
            return None

        def codegen(context, builder, signature, values):
            array_type = signature.args[0]
            array = context.make_array(array_type)(context, builder, values[0])
            index = context.cast(builder, values[1], signature.args[1], types.intp)
            _emit_prefetch(builder, cgutils.get_item_pointer(context, builder, array_type, array,
                                                             [index], wraparound=False))
            return context.get_dummy_value()
        return types.void(records, i), codegen

    @intrinsic
    def prefetch_address(typingctx, addr):
        """Prefetch the cache line at byte address `addr` (an int64)."""
        def codegen(context, builder, signature, values):
            _emit_prefetch(builder, builder.inttoptr(values[0], ir.IntType(8).as_pointer()))
            return context.get_dummy_value()
        return types.void(types.int64), codegen
