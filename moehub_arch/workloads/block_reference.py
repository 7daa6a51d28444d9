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


def flash_attention(q, k, v, tile, scale, stats=False):
    """Causal attention of one head: q, k, v [S, d] bf16 values; tile = Br = Bc (divides S);
    scale fp32. Returns O [S, d] bf16 values, in the kernel's order (module docstring); with
    stats, (O, m, l): each row's final running maximum and row sum, which the training forward
    keeps for the backward (lib/attention_backward.s attention_train_item)."""
    S, d = q.shape
    scale = F32(scale)
    out = np.zeros((S, d), dtype=F32)
    m_all = np.zeros(S, dtype=F32)
    l_all = np.zeros(S, dtype=F32)
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
        m_all[i * tile:(i + 1) * tile] = m
        l_all[i * tile:(i + 1) * tile] = l
    if stats:
        return to_bf16(out), m_all, l_all
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


def _scores(qi, kj, scale, diagonal, tri):
    s = (gemm_seq(qi, np.ascontiguousarray(kj.T)) * scale).astype(F32)
    if diagonal:
        s = (s + np.where(tri, F32(-np.inf), F32(0.0))).astype(F32)
    return s


def attention_backward(q, k, v, o, do, m, l, tile, scale):
    """The backward of flash_attention for one head (FlashAttention-2's, arXiv 2307.08691, in
    the two passes of workloads/kernels/lib/attention_backward.s): q, k, v, o, do [S, d] bf16
    values, m, l [S] the forward's saved row statistics. For each tile pair P = exp(scale Q K^T
    [+ mask] - m) / l (fp32), dP = dO V^T, dS = bf16(P (dP - D)), D = rowsum(dO O) (fp32,
    sequential in d); dQ_i = sum over j = 0 .. i of dS K_j, dK_j and dV_j over i = j .. last
    (dV += bf16(P)^T dO, dK += dS^T Q_i), each an fp32 accumulation in k order, in that tile
    order; dQ and dK times scale, then every gradient rounded to bf16. Returns (dq, dk, dv, D)."""
    S, d = q.shape
    n = S // tile
    scale = F32(scale)
    tri = np.triu(np.ones((tile, tile), dtype=bool), 1)
    rows = [slice(i * tile, (i + 1) * tile) for i in range(n)]
    D = row_sum((np.asarray(do, F32) * np.asarray(o, F32)).astype(F32))

    def probs(i, j):
        s = _scores(q[rows[i]], k[rows[j]], scale, i == j, tri)
        p = exp_f32((s - m[rows[i], None]).astype(F32))
        return (p / l[rows[i], None]).astype(F32)

    def dscores(i, j, p):
        dp = gemm_seq(do[rows[i]], np.ascontiguousarray(np.asarray(v[rows[j]], F32).T))
        return to_bf16((p * (dp - D[rows[i], None]).astype(F32)).astype(F32))

    dq = np.zeros((S, d), dtype=F32)
    dk = np.zeros((S, d), dtype=F32)
    dv = np.zeros((S, d), dtype=F32)
    for i in range(n):
        acc = np.zeros((tile, d), dtype=F32)
        for j in range(i + 1):
            acc = _gemm_acc(acc, dscores(i, j, probs(i, j)), k[rows[j]])
        dq[rows[i]] = (acc * scale).astype(F32)
    for j in range(n):
        acc_k = np.zeros((tile, d), dtype=F32)
        acc_v = np.zeros((tile, d), dtype=F32)
        for i in range(j, n):
            p = probs(i, j)
            acc_v = _gemm_acc(acc_v, np.ascontiguousarray(to_bf16(p).T), do[rows[i]])
            acc_k = _gemm_acc(acc_k, np.ascontiguousarray(dscores(i, j, p).T), q[rows[i]])
        dk[rows[j]] = (acc_k * scale).astype(F32)
        dv[rows[j]] = acc_v
    return to_bf16(dq), to_bf16(dk), to_bf16(dv), D


def norm_backward(x, dy, resid, gain, kind, eps, rows, tbs):
    """The backward of `norm` fused with the residual gradient, in the order of workloads/kernels/
    lib/norm_backward.s and tp/block_backward.s tp_norm_bwd: x, dy, resid [T, H] bf16 values;
    blocks of `rows` rows go to thread block (block % tbs). Returns (dx bf16 values, dgain,
    dbias): dx = bf16(r (gy - [mean(gy)] - xhat mean(gy xhat)) + resid), gy = dy gain; dgain
    (dbias) sums dy xhat (dy) per thread block in row order from 0, then over the thread blocks
    in order (norm_grad_reduce), fp32 throughout (dbias 0 for RMSNorm)."""
    x = np.asarray(x, dtype=F32)
    dy = np.asarray(dy, dtype=F32)
    T, Hn = x.shape
    H = F32(Hn)
    eps = F32(eps)
    g = np.asarray(gain, F32)[None, :]
    xc = x
    if kind == "layernorm":
        xc = (x - (row_sum(x) / H).astype(F32)[:, None]).astype(F32)
    r = rsqrt_f32(((row_sumsq(xc) / H).astype(F32) + eps).astype(F32))
    xhat = (xc * r[:, None]).astype(F32)
    gy = (dy * g).astype(F32)
    c2 = (row_sum((gy * xhat).astype(F32)) / H).astype(F32)
    dxn = (gy - (xhat * c2[:, None]).astype(F32)).astype(F32)
    if kind == "layernorm":
        dxn = (dxn - (row_sum(gy) / H).astype(F32)[:, None]).astype(F32)
    dxn = (dxn * r[:, None]).astype(F32)
    dx = to_bf16((dxn + np.asarray(resid, F32)).astype(F32))
    prod = (dy * xhat).astype(F32)
    part_g = np.zeros((tbs, Hn), dtype=F32)
    part_b = np.zeros((tbs, Hn), dtype=F32)
    for row in range(T):
        b = (row // rows) % tbs
        part_g[b] = (part_g[b] + prod[row]).astype(F32)
        if kind == "layernorm":
            part_b[b] = (part_b[b] + dy[row]).astype(F32)
    dgain, dbias = part_g[0].copy(), part_b[0].copy()
    for b in range(1, tbs):
        dgain = (dgain + part_g[b]).astype(F32)
        dbias = (dbias + part_b[b]).astype(F32)
    return dx, dgain, dbias
