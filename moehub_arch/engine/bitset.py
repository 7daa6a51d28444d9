"""Bit sets over the GPUs (or any small index range), kept in rows of int64 words.

A block that used to scan all G peers per event to find the few with work (the MoE-Hub RPM's
streams, the link responses a hub owes) keeps a bit per peer instead and visits only the set
bits, in the same round-robin order the scan used, so the result is the same. A word holds
BITS_PER_WORD bits: 32 of the 64, so that no operation touches the sign bit (the pure-Python
engine runs this on NumPy int64 scalars, where a shift into the sign bit or negating the most
negative value would warn about overflow).
"""
import numpy as np

from numba.cpython.unsafe.numbers import trailing_zeros

from .jit import compiled
from .stateref import jit_disabled

BITS_PER_WORD = 32
WORD_SHIFT = 5
WORD_MASK = BITS_PER_WORD - 1


def words_for(n):
    """int64 words needed for a bit set of n bits (at least one)."""
    return max(1, (n + BITS_PER_WORD - 1) // BITS_PER_WORD)


@compiled
def bit_set(row, i):
    row[i >> WORD_SHIFT] |= 1 << (i & WORD_MASK)


@compiled
def bit_clear(row, i):
    row[i >> WORD_SHIFT] &= ~(1 << (i & WORD_MASK))


def lowest_bit_float(x):
    """Index of the lowest set bit of a non-zero word: the exponent of the power of two x & -x,
    read from its float64 bits (exact). The pure-Python engine's form (and the tests')."""
    return (np.float64(x & -x).view(np.int64) >> 52) - 1023


if jit_disabled():
    _lowest_bit = lowest_bit_float
else:
    @compiled
    def _lowest_bit(x):
        """Index of the lowest set bit of a non-zero word: LLVM's cttz, one instruction on
        x86-64 (the value lowest_bit_float gives; four of them with their loads are a peek at
        the current tick's timers, engine/events.py: 7% less CPU than the float form on a
        DeepSeek-V3 layer, docs/performance.md)."""
        return np.int64(trailing_zeros(x))


@compiled
def first_set(row, lo, hi):
    """The lowest set bit in [lo, hi), or -1."""
    if lo >= hi:
        return -1
    w = lo >> WORD_SHIFT
    x = row[w] & ~((1 << (lo & WORD_MASK)) - 1)
    while True:
        if x != 0:
            i = (w << WORD_SHIFT) + _lowest_bit(x)
            return i if i < hi else -1
        w += 1
        if (w << WORD_SHIFT) >= hi:
            return -1
        x = row[w]


@compiled
def cyclic_next(row, base, k, n):
    """The smallest offset k' in [k, n) whose bit (base + k') % n is set, or n if none: visiting
    offsets k = 0, 1, ... in this way walks the set bits in the order of a round-robin scan of all
    n indices that starts at `base`."""
    i = base + k
    if i < n:
        r = first_set(row, i, n)
        if r >= 0:
            return r - base
        i = n
    r = first_set(row, i - n, base)
    if r >= 0:
        return r + n - base
    return n
