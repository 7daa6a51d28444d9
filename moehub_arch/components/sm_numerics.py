"""The SM's functional numerics: what `mma` and the vector instructions compute, element by element.

Functional mode only (timing mode moves no bulk data). Sources are BF16 or FP32; arithmetic is
FP32, every result rounded to FP32 once (as NumPy's float32 operators round), so the NumPy
reference (workloads/reference.py) reproduces every bit. `mma` adds its k products to each C
element in increasing k, rounding after each; exp, SiLU and rsqrt are computed in float64 and
rounded once (float32 exp implementations differ in the last ulp; the double libm result is the
same in both engines and in NumPy). Both engines run this code (DESIGN rule 4).
"""
import math

import numpy as np

from ..engine.jit import compiled
from ..isa.encoding import (DT_BF16, VEC_ADD, VEC_AXPY, VEC_COL_ADD, VEC_COL_MUL, VEC_CVT,
                            VEC_DSILU_MUL, VEC_EXP, VEC_MAX, VEC_MUL, VEC_ROW_ADD, VEC_ROW_DIV,
                            VEC_ROW_MAX, VEC_ROW_MUL, VEC_ROW_SUB, VEC_ROW_SUM, VEC_ROW_SUMSQ,
                            VEC_RSQRT, VEC_SILU_MUL, VEC_SUB, VEC_ZERO)
from .elements import load_f32, store_f32


@compiled
def silu(x):
    # in float64, rounded once to fp32: libm's exp gives the same double in both engines, and
    # the NumPy reference can reproduce it (float32 exp implementations differ in the last ulp)
    xd = np.float64(x)
    return np.float32(xd / (1.0 + np.exp(-xd)))


@compiled
def dsilu(x):
    # silu'(x) = s (1 + x (1 - s)), s = 1 / (1 + exp(-x)): in float64, rounded once to fp32 (as
    # silu; reference.dsilu reproduces it)
    xd = np.float64(x)
    s = 1.0 / (1.0 + np.exp(-xd))
    return np.float32(s * (1.0 + xd * (1.0 - s)))


@compiled
def widen_f32(view, first, count, step, dt, out):
    """Elements first, first + step, ... (`count` of them) of a byte view holding dt, as fp32 bit
    patterns in `out` (uint32): a bf16 is the high half of the fp32 it widens to exactly; an fp32
    is copied (a shift by 0). A ufunc with an output array: no allocation, and one NumPy call in
    the reference engine where an element loop would be `count` Python iterations."""
    last = first + (count - 1) * step + 1
    if dt == DT_BF16:
        halves = view.view(np.uint16)
        np.left_shift(halves[first:last:step], np.uint32(16), out)
    else:
        words = view.view(np.uint32)
        np.left_shift(words[first:last:step], np.uint32(0), out)


@compiled
def mma_functional(st, va, vb, vc, m, n, k, dt, a_transposed, b_transposed, lda, ldb):
    """C[m,n] += A[m,k] @ B[k,n], inputs in dt, fp32 accumulation in k order (every C element is
    rounded to fp32 after each of its k products, in increasing k, whatever the loop order).
    a_transposed: A is stored as its transpose, [k][m] (mma.bf16.at); b_transposed: B is stored
    as its transpose, [n][k] (mma.bf16.bt.bl2). lda / ldb: the stored rows' stride in elements.

    One k step at a time, as whole arrays: A's column k and B's row k widened to fp32, their
    outer product (each element one fp32 multiply) added to C (one fp32 add each) - the same
    operations, in the same order per element, as mma_elementwise, with k NumPy calls of each
    kind instead of m n k Python iterations in the reference engine (DESIGN rule 4: both engines
    run this code)."""
    rows = st.mma_rows.view(np.uint8).view(np.uint32)
    if m * n + m + n > rows.shape[0]:
        mma_elementwise(va, vb, vc, m, n, k, dt, a_transposed, b_transposed, lda, ldb)
        return
    b_row = rows[0:n]
    a_col = rows[n:n + m]
    b = b_row.view(np.float32).reshape((1, n))
    a = a_col.view(np.float32).reshape((m, 1))
    products = rows[n + m:n + m + m * n].view(np.float32).reshape((m, n))
    c = vc.view(np.float32).reshape((m, n))
    for kk in range(k):
        if a_transposed:
            widen_f32(va, kk * lda, m, 1, dt, a_col)
        else:
            widen_f32(va, kk, m, lda, dt, a_col)
        if b_transposed:
            widen_f32(vb, kk, n, ldb, dt, b_row)
        else:
            widen_f32(vb, kk * ldb, n, 1, dt, b_row)
        np.multiply(a, b, products)
        np.add(c, products, c)


@compiled
def mma_elementwise(va, vb, vc, m, n, k, dt, a_transposed, b_transposed, lda, ldb):
    """mma_functional element by element (for a tile larger than State.mma_rows holds)."""
    c = vc.view(np.float32)
    for i in range(m):
        for kk in range(k):
            a = load_f32(va, kk * lda + i if a_transposed else i * lda + kk, dt)
            for j in range(n):
                bj = j * ldb + kk if b_transposed else kk * ldb + j
                c[i * n + j] = np.float32(c[i * n + j] + a * load_f32(vb, bj, dt))


@compiled
def exp_f32(x):
    # as silu: float64 libm exp rounded once to fp32 (exp(-inf) = 0: a masked score)
    return np.float32(np.exp(np.float64(x)))


@compiled
def rsqrt_f32(x):
    # 1 / sqrt(x) in float64 (sqrt and the division correctly rounded), rounded once to fp32;
    # IEEE special cases spelled out (both engines, no Python ZeroDivisionError in the loop)
    xd = np.float64(x)
    if xd != xd or xd < 0.0:
        return np.float32(np.nan)
    if xd == 0.0:
        return np.float32(math.copysign(math.inf, xd))
    return np.float32(1.0 / math.sqrt(xd))


@compiled
def div_f32(x, y):
    # IEEE fp32 division x / y, with the y == 0 cases spelled out as for rsqrt_f32
    if y == 0.0:
        if x != x or x == 0.0:
            return np.float32(np.nan)
        return np.float32(math.copysign(math.inf, x) * math.copysign(1.0, y))
    return np.float32(x / y)


@compiled
def vec_functional(sub, vd, va, vb, n, dt, dt_dst, cols):
    """Sources a, b in dt; dst (and axpy's scalar b[0]) in dt_dst; arithmetic in fp32, every
    result rounded to fp32 once (as NumPy's float32 operators round). exp and rsqrt are computed
    in float64 and rounded once to fp32 (exp_f32, rsqrt_f32). Row and column subops see a as
    rows of `cols` elements; the row reductions accumulate in fp32 in increasing column order."""
    if sub == VEC_ROW_MAX or sub == VEC_ROW_SUM or sub == VEC_ROW_SUMSQ:
        for r in range(n // cols):
            acc = load_f32(va, r * cols, dt)
            if sub == VEC_ROW_SUMSQ:
                acc = np.float32(acc * acc)
            for c in range(1, cols):
                v = load_f32(va, r * cols + c, dt)
                if sub == VEC_ROW_MAX:
                    acc = v if v > acc else acc
                elif sub == VEC_ROW_SUM:
                    acc = np.float32(acc + v)
                else:
                    acc = np.float32(acc + np.float32(v * v))
            store_f32(vd, r, dt_dst, acc)
        return
    alpha = np.float32(0.0)
    if sub == VEC_AXPY:
        alpha = load_f32(vb, 0, dt_dst)
    for i in range(n):
        if sub == VEC_ZERO:
            r = np.float32(0.0)
        elif sub == VEC_ADD:
            r = np.float32(load_f32(va, i, dt) + load_f32(vb, i, dt))
        elif sub == VEC_MUL:
            r = np.float32(load_f32(va, i, dt) * load_f32(vb, i, dt))
        elif sub == VEC_SILU_MUL:
            r = np.float32(silu(load_f32(va, i, dt)) * load_f32(vb, i, dt))
        elif sub == VEC_DSILU_MUL:
            r = np.float32(dsilu(load_f32(va, i, dt)) * load_f32(vb, i, dt))
        elif sub == VEC_CVT:
            r = load_f32(va, i, dt)
        elif sub == VEC_SUB:
            r = np.float32(load_f32(va, i, dt) - load_f32(vb, i, dt))
        elif sub == VEC_MAX:
            x = load_f32(va, i, dt)
            y = load_f32(vb, i, dt)
            r = x if x >= y else y
        elif sub == VEC_EXP:
            r = exp_f32(load_f32(va, i, dt))
        elif sub == VEC_RSQRT:
            r = rsqrt_f32(load_f32(va, i, dt))
        elif sub == VEC_ROW_ADD:
            r = np.float32(load_f32(va, i, dt) + load_f32(vb, i // cols, dt))
        elif sub == VEC_ROW_SUB:
            r = np.float32(load_f32(va, i, dt) - load_f32(vb, i // cols, dt))
        elif sub == VEC_ROW_MUL:
            r = np.float32(load_f32(va, i, dt) * load_f32(vb, i // cols, dt))
        elif sub == VEC_ROW_DIV:
            r = div_f32(load_f32(va, i, dt), load_f32(vb, i // cols, dt))
        elif sub == VEC_COL_ADD:
            r = np.float32(load_f32(va, i, dt) + load_f32(vb, i % cols, dt))
        elif sub == VEC_COL_MUL:
            r = np.float32(load_f32(va, i, dt) * load_f32(vb, i % cols, dt))
        else:  # VEC_AXPY
            r = np.float32(load_f32(vd, i, dt_dst) + alpha * load_f32(va, i, dt))
        store_f32(vd, i, dt_dst, r)
