"""NumPy reference of the transformer-block pieces (norms, FlashAttention-style attention),
rounding exactly like the simulator's functional instructions (isa/base.yaml, "attention and
norms"), so a block's output can be checked bit for bit.

Numerics (the rules the instructions follow):
- every element-wise fp32 result is rounded to fp32 once, as NumPy's float32 operators round;
- `exp_f32` and `rsqrt_f32` are computed in float64 and rounded once to fp32 (NumPy's own float32
  exp differs from libm's in the last ulp on some inputs; the hardware's MUFU.EX2 / MUFU.RSQ are
  approximate to about 2 ulp, CUDA C Programming Guide, "Mathematical Functions" - the model's
  results are the correctly rounded ones, so they may differ from a GPU by that much);
- row reductions accumulate in fp32 in increasing column order (`row_sum`, `row_sumsq`);
- GEMMs are `reference.gemm_seq` (fp32, sequential over k).

The attention reference follows the kernel's order (workloads/kernels/lib/attention.s): for each
query tile, key tiles j = 0 .. diagonal; S = (Q K_j^T) * scale (+ the causal mask on the
diagonal tile), m_j = max(m_{j-1}, rowmax S), P = exp(S - m_j), l_j = l_{j-1} exp(m_{j-1} - m_j)
+ rowsum P, O_j = O_{j-1} exp(m_{j-1} - m_j) + bf16(P) V_j, and finally O / l rounded to bf16.
Against exact softmax(Q K^T / sqrt(d)) V the online order differs by rounding only: every
element of O is a convex combination of V's values computed with O(n_tiles + Bc + d) fp32
roundings, so |O - exact| <= (n_tiles + Bc + d) * 2^-24 * max|V| * (1 + 2^-8 bf16(P) rounding)
plus the final bf16 rounding (2^-9 relative); the functional test checks the simulator against
this reference bit for bit and this reference against float64 attention within that bound.
"""
from __future__ import annotations

import numpy as np

from .reference import gemm_seq, to_bf16

F32 = np.float32


def exp_f32(x) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.exp(np.asarray(x, dtype=F32).astype(np.float64)).astype(F32)


def rsqrt_f32(x) -> np.ndarray:
    x = np.asarray(x, dtype=F32).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (1.0 / np.sqrt(x)).astype(F32)


def row_sum(a) -> np.ndarray:
    """[r, c] -> [r]: fp32, sequential in c."""
    a = np.asarray(a, dtype=F32)
    acc = a[:, 0].copy()
    for c in range(1, a.shape[1]):
        acc = (acc + a[:, c]).astype(F32)
    return acc


def row_sumsq(a) -> np.ndarray:
    a = np.asarray(a, dtype=F32)
    return row_sum((a * a).astype(F32))


def norm(x, gain, bias, kind, eps) -> np.ndarray:
    """RMSNorm (Zhang & Sennrich, arXiv 1910.07467) or LayerNorm (Ba et al., arXiv 1607.06450)
    of bf16 rows x [T, H] in the kernel's order (workloads/kernels/lib/norm.s); bf16 result.
    eps, gain [H], bias [H] (LayerNorm) are fp32."""
    x = np.asarray(x, dtype=F32)
    H = F32(x.shape[1])
    eps = F32(eps)
    if kind == "layernorm":
        mean = (row_sum(x) / H).astype(F32)
        x = (x - mean[:, None]).astype(F32)
    var = (row_sumsq(x) / H).astype(F32)
    r = rsqrt_f32((var + eps).astype(F32))
    y = (x * r[:, None]).astype(F32)
    y = (y * np.asarray(gain, F32)[None, :]).astype(F32)
    if kind == "layernorm":
        y = (y + np.asarray(bias, F32)[None, :]).astype(F32)
    return to_bf16(y)


def flash_attention(q, k, v, tile, scale) -> np.ndarray:
    """Causal attention of one head: q, k, v [S, d] bf16 values; tile = Br = Bc (divides S);
    scale fp32. Returns O [S, d] bf16 values, in the kernel's order (module docstring)."""
    S, d = q.shape
    scale = F32(scale)
    out = np.zeros((S, d), dtype=F32)
    tri = np.triu(np.ones((tile, tile), dtype=bool), 1)
    for i in range(S // tile):
        qi = q[i * tile:(i + 1) * tile]
        m = l = o = None
        for j in range(i + 1):
            kj = k[j * tile:(j + 1) * tile]
            vj = v[j * tile:(j + 1) * tile]
            s = (gemm_seq(qi, kj.T) * scale).astype(F32)
            if j == i:
                s = np.where(tri, F32(-np.inf), s).astype(F32)
            rm = s.max(axis=1)
            if j == 0:
                m_new = rm
            else:
                m_new = np.maximum(m, rm)
            p = exp_f32((s - m_new[:, None]).astype(F32))
            if j == 0:
                l = row_sum(p)
                o = np.zeros((tile, d), dtype=F32)
            else:
                alpha = exp_f32((m - m_new).astype(F32))
                l = ((l * alpha).astype(F32) + row_sum(p)).astype(F32)
                o = (o * alpha[:, None]).astype(F32)
            o = _gemm_acc(o, to_bf16(p), vj)
            m = m_new
        out[i * tile:(i + 1) * tile] = (o / l[:, None]).astype(F32)
    return to_bf16(out)


def _gemm_acc(c, a, b) -> np.ndarray:
    """c + a @ b accumulated into c in k order (the simulator's mma accumulates into C)."""
    c = np.array(c, dtype=F32, copy=True)
    prod = np.empty_like(c)
    for kk in range(a.shape[1]):
        np.multiply(a[:, kk, None], b[None, kk, :], out=prod)
        np.add(c, prod, out=c)
    return c


def attention_exact(q, k, v, scale) -> np.ndarray:
    """float64 causal softmax(scale Q K^T) V, for the bound check."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    s = q @ k.T * float(scale)
    s[np.triu(np.ones_like(s, dtype=bool), 1)] = -np.inf
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v
