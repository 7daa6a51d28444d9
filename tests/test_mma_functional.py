"""The functional mma (components/sm_numerics.py mma_functional) computes, one k step at a time as
whole arrays, exactly what its element-by-element definition (mma_elementwise) computes: every C
element the same fp32 bits, in both engines, for bf16 and fp32 operands, all four storage
orders, row strides wider than the rows, and a tile too large for the working rows (which takes
the element loop itself)."""
import collections
import warnings

import numpy as np
import pytest

from moehub_arch.components import sm, sm_numerics
from moehub_arch.isa.encoding import DT_BF16

DT_F32 = 0      # any dtype but bf16 is read as fp32 (components/elements.py)
# a State stand-in: the only State array the function reads
Rows = collections.namedtuple("Rows", "mma_rows")


def _operand(rng, elements, dt):
    """`elements` finite values, stored as dt bytes: most of them within a few binades (so the
    order of the additions shows in the rounding), one in eight at an extreme exponent
    (denormals, and products that overflow to inf, whose sums give NaN)."""
    exponent = np.where(rng.random(elements) < 0.125, rng.choice([-140, 120], elements),
                        rng.integers(-12, 12, elements))
    x = (rng.standard_normal(elements) * np.exp2(exponent)).astype(np.float32)
    if dt == DT_BF16:
        return (x.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    return x.view(np.uint8)


def _same_bits(got, want):
    """Bit for bit, except that any NaN equals any NaN (a NaN's payload depends on which
    operand the compiled code puts first)."""
    g, w = got.view(np.float32), want.view(np.float32)
    nan = np.isnan(w)
    return bool(np.array_equal(np.isnan(g), nan)
                and np.array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan]))


@pytest.mark.parametrize("dt", [DT_BF16, DT_F32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("a_t, b_t", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("m, n, k, lda, ldb, rows", [
    (5, 7, 9, 0, 0, sm.MMA_ROWS_F32 // 2),     # dense rows
    (4, 6, 3, 11, 13, sm.MMA_ROWS_F32 // 2),   # row strides wider than the stored rows
    (4, 6, 3, 11, 13, 8),                      # too large for 16 fp32 working elements
])
def test_whole_array_mma_rounds_as_the_element_loop(dt, a_t, b_t, m, n, k, lda, ldb, rows):
    rng = np.random.default_rng(m * 1000 + n * 100 + k + 7 * a_t + 3 * b_t + dt)
    a_rows, a_cols = (k, m) if a_t else (m, k)
    b_rows, b_cols = (n, k) if b_t else (k, n)
    lda, ldb = lda or a_cols, ldb or b_cols
    va = _operand(rng, (a_rows - 1) * lda + a_cols, dt)
    vb = _operand(rng, (b_rows - 1) * ldb + b_cols, dt)
    c0 = rng.standard_normal(m * n).astype(np.float32).view(np.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)    # the overflows are meant
        want = c0.copy()
        sm_numerics.mma_elementwise.py_func(va, vb, want, m, n, k, dt, a_t, b_t, lda, ldb)
        for mma in (sm_numerics.mma_functional, sm_numerics.mma_functional.py_func):
            got = c0.copy()
            mma(Rows(np.zeros(rows, np.int64)), va, vb, got, m, n, k, dt, a_t, b_t, lda, ldb)
            assert _same_bits(got, want), mma
