"""NumPy reference of one expert-parallel MoE layer, rounding exactly like the simulator.

What it models: an expert-parallel MoE layer (dispatch, expert FFNs, combine) as the simulator's functional instructions compute
it (dispatch is data movement only, so it does not change values): every GPU's tokens x go to their
top-k experts; each expert is a SwiGLU FFN, Y = bf16(bf16(silu(X Wg) * (X Wu)) Wd); the combine sums,
per token and in a fixed order, the shared experts' outputs (weight 1) and then the routed experts'
outputs times their router weights, in fp32.

Numerics (the rules the functional instructions follow, so results match bit for bit where
possible):
- bf16 values are stored as the upper 16 bits of an fp32; `to_bf16` rounds fp32 to the nearest
  bf16, ties to even (bits + 0x7FFF + lsb, then truncate; uint32 wrap-around);
- `gemm_seq` accumulates in fp32 sequentially over k: every product rounded to fp32, then every add
  rounded to fp32, in k order;
- `silu(x) = x / (1 + exp(-x))` in fp32;
- the combine adds, for each token, fp32(weight * Y) to an fp32 accumulator that starts at 0:
  shared experts first (weight 1.0) in order, then slots 0..k-1.
"""
from __future__ import annotations

import numpy as np

F32 = np.float32


def to_bf16(x) -> np.ndarray:
    """Round float32 values to bf16 (round to nearest, ties to even); returns float32 holding the
    bf16 values (lower 16 bits zero)."""
    a = np.array(x, dtype=F32, copy=True)          # keeps the shape (0-d included), contiguous
    bits = a.view(np.uint32)
    rounding = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    b16 = (bits + rounding) >> np.uint32(16)
    return (b16 << np.uint32(16)).astype(np.uint32).view(F32)


def gemm_seq(a, b) -> np.ndarray:
    """a float32 [m, K] @ b float32 [K, n] -> float32 [m, n], accumulating sequentially over K in
    fp32 (each product rounded to fp32, then each add rounded to fp32)."""
    a = np.asarray(a, dtype=F32)
    b = np.asarray(b, dtype=F32)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"gemm_seq: shapes {a.shape} and {b.shape} do not multiply")
    m, kdim = a.shape
    n = b.shape[1]
    acc = np.zeros((m, n), dtype=F32)
    prod = np.empty((m, n), dtype=F32)
    for kk in range(kdim):
        np.multiply(a[:, kk, None], b[None, kk, :], out=prod)
        np.add(acc, prod, out=acc)
    return acc


def silu(x) -> np.ndarray:
    """x / (1 + exp(-x)) for float32 x, computed in float64 and rounded once to float32 (as the
    simulator's vsilu_mul does)."""
    x = np.asarray(x, dtype=F32).astype(np.float64)
    with np.errstate(over="ignore"):
        return (x / (1.0 + np.exp(-x))).astype(F32)


def dsilu(x) -> np.ndarray:
    """silu'(x) = s (1 + x (1 - s)), s = 1 / (1 + exp(-x)), for float32 x: computed in float64 and
    rounded once to float32 (as the simulator's vdsilu_mul does)."""
    x = np.asarray(x, dtype=F32).astype(np.float64)
    with np.errstate(over="ignore"):
        s = 1.0 / (1.0 + np.exp(-x))
        return (s * (1.0 + x * (1.0 - s))).astype(F32)


def expert_ffn(x, w_gate, w_up, w_down) -> np.ndarray:
    """One SwiGLU expert on rows x [m, H] (bf16 values in float32) with weights w_gate, w_up
    [H, I] and w_down [I, H] (bf16 values): returns bf16 values in float32 [m, H]."""
    g = gemm_seq(x, w_gate)
    u = gemm_seq(x, w_up)
    h = to_bf16((silu(g) * u).astype(F32))
    return to_bf16(gemm_seq(h, w_down))


def ffn_backward(x, dy, w_gate, w_up, w_down):
    """The backward of expert_ffn on rows x [m, H] given dy [m, H] (bf16 values), in the orders
    and roundings of workloads/kernels/tp/ffn_backward.s: G, U recomputed (sequential-k fp32);
    D = dy w_down^T; dU = bf16(silu(G) D), dG = bf16(silu'(G) (D U)); dX = bf16(dG w_gate^T +
    dU w_up^T) summed over dG's columns, then dU's; dWg = x^T dG, dWu = x^T dU, dWd = H^T dy
    (H = the forward's bf16 activations) in fp32 over the rows in order. Returns (dX, dWg, dWu,
    dWd)."""
    g = gemm_seq(x, w_gate)
    u = gemm_seq(x, w_up)
    h = to_bf16((silu(g) * u).astype(F32))
    d = gemm_seq(dy, np.ascontiguousarray(np.asarray(w_down, dtype=F32).T))
    du = to_bf16((silu(g) * d).astype(F32))
    dg = to_bf16((dsilu(g) * (d * u).astype(F32)).astype(F32))
    dx = to_bf16(gemm_seq(np.concatenate([dg, du], axis=1),
                          np.concatenate([np.asarray(w_gate, F32).T, np.asarray(w_up, F32).T])))
    return (dx, gemm_seq(np.ascontiguousarray(x.T), dg), gemm_seq(np.ascontiguousarray(x.T), du),
            gemm_seq(np.ascontiguousarray(h.T), dy))


def moe_layer_reference(x, topk_idx, topk_weight, w_gate, w_up, w_down, shared_gate=None,
                        shared_up=None, shared_down=None, combine="per_slot",
                        local_experts=None, identity_experts=False,
                        node_gpus=None) -> np.ndarray:
    """Output [num_gpus, T, H] float32 of one MoE layer.

    x [P, T, H] float32 (bf16 values); topk_idx [P, T, k] global expert ids; topk_weight [P, T, k]
    float32; w_gate / w_up [E, H, I], w_down [E, I, H]; shared_gate / shared_up [S, H, Is],
    shared_down [S, Is, H] or None (every GPU runs the same shared experts on its own tokens).
    Each expert's FFN runs once on all rows routed to it (from every GPU); the per-token combine
    order is: shared experts 0..S-1 (weight 1.0), then

    - combine="per_slot" (default): slots 0..k-1, each fp32(weight * y) added to the fp32 output;
    - combine="per_rank" (DeepEP-style, needs local_experts = experts per GPU, block placement):
      for each expert rank r ascending that holds any of the token's experts, a partial sum
      starting at fp32 0 accumulates fp32(weight * y) of the slots j (ascending) whose expert is
      on r; the partial is rounded to bf16 (it travels home as a bf16 row) and added to the
      output in fp32;
    - combine="per_node" (DeepEP's internode combine, needs local_experts and node_gpus = GPUs
      per node): the per-rank bf16 partials of the ranks of one node are summed in fp32 (ranks
      ascending) at that node's forwarder, the sum is rounded to bf16 (one row per node travels
      home) and the node rows are added to the output in fp32, nodes ascending.
    - combine="switch_reduce" (scheme nvls: a reduce-scatter by multimem.ld_reduce, needs
      local_experts): every rank r holds a bf16 partial row per token (built as in "per_rank",
      an exact zero where r holds none of the token's experts); the switch sums the partials of
      all ranks in fp32 in rank order, ((p_0 + p_1) + p_2) + ..., rounds the total once to bf16,
      and that row is added to the output in fp32 (components/nvls.py's ld_reduce order).

    - combine="switch_targets" (scheme dysharp: one dymultimem.ld_reduce per token over its own
      experts, needs local_experts): every slot's output is scaled and rounded to bf16 on its
      expert's GPU, bf16(fp32(weight * y)); the switch sums the token's k rows in fp32 in slot
      order, ((s_0 + s_1) + s_2) + ..., rounds the total once to bf16, and that row is added to
      the output in fp32 (components/dysharp.py's ld_reduce order).

    - combine="rank_rows" (DeepEP's intranode benchmark, tests/test_intranode.py: combine takes
      the rows each rank received, unweighted; needs local_experts): for each expert rank r
      ascending that holds any of the token's experts, the output row of the token's lowest
      slot on r, rounded to bf16, is added to the output in fp32 (the weights are not used).

    identity_experts=True: every routed expert returns its input row unchanged (y = x; the
    weights are not used) - the communication-only benchmark, where combine sends the received
    rows back.
    """
    if combine not in ("per_slot", "per_rank", "per_node", "node_slots", "switch_reduce",
                       "switch_targets", "rank_rows"):
        raise ValueError(f"combine must be 'per_slot', 'per_rank', 'per_node', 'node_slots', "
                         f"'switch_reduce', "
                         f"'switch_targets' or 'rank_rows', not {combine!r}")
    if combine != "per_slot" and (local_experts is None or local_experts <= 0):
        raise ValueError(f"combine={combine!r} needs local_experts (routed experts per GPU)")
    if combine in ("per_node", "node_slots") and (node_gpus is None or node_gpus <= 0):
        raise ValueError(f"combine={combine!r} needs node_gpus (GPUs per node)")
    x = np.asarray(x, dtype=F32)
    idx = np.asarray(topk_idx, dtype=np.int64)
    w = np.asarray(topk_weight, dtype=F32)
    p, t, h = x.shape
    k = idx.shape[-1]
    if idx.shape != (p, t, k) or w.shape != (p, t, k):
        raise ValueError(f"topk_idx {idx.shape} and topk_weight {w.shape} must both be "
                         f"{(p, t, k)}")
    n = p * t
    rows = x.reshape(n, h)
    flat_idx = idx.reshape(n, k)
    flat_w = w.reshape(n, k)
    out = np.zeros((n, h), dtype=F32)

    if shared_gate is not None:
        for s in range(len(shared_gate)):
            ys = expert_ffn(rows, shared_gate[s], shared_up[s], shared_down[s])
            out = (out + (F32(1.0) * ys).astype(F32)).astype(F32)

    # Every (token, slot) output (n x k x H floats), each expert's FFN run once on all its rows.
    y = np.zeros((n, k, h), dtype=F32)
    for e in np.unique(flat_idx):
        tok, slot = np.nonzero(flat_idx == e)
        y[tok, slot] = rows[tok] if identity_experts else expert_ffn(rows[tok], w_gate[e],
                                                                      w_up[e], w_down[e])
    if combine == "per_slot":
        for kk in range(k):
            out = (out + (flat_w[:, kk, None] * y[:, kk, :]).astype(F32)).astype(F32)
        return out.reshape(p, t, h)
    if combine == "switch_targets":
        total = to_bf16((flat_w[:, 0, None] * y[:, 0, :]).astype(F32))
        for kk in range(1, k):
            total = (total + to_bf16((flat_w[:, kk, None] * y[:, kk, :]).astype(F32))).astype(F32)
        return (out + to_bf16(total)).astype(F32).reshape(p, t, h)
    ranks = flat_idx // local_experts                   # [n, k] GPU of each slot's expert
    if combine == "rank_rows":
        for r in np.unique(ranks):
            on_r = ranks == r
            has = on_r.any(axis=1)
            row = to_bf16(y[np.arange(n), np.argmax(on_r, axis=1)])
            out[has] = (out[has] + row[has]).astype(F32)
        return out.reshape(p, t, h)

    def rank_partial(r):
        partial = np.zeros((n, h), dtype=F32)
        for kk in range(k):
            sel = ranks[:, kk] == r
            # rows whose slot kk is not on r add nothing (an exact +0 would also be harmless,
            # but masking keeps -0.0 and NaN behaviour identical to the kernels, which skip them)
            contrib = (flat_w[sel, kk, None] * y[sel, kk, :]).astype(F32)
            partial[sel] = (partial[sel] + contrib).astype(F32)
        return to_bf16(partial), (ranks == r).any(axis=1)

    if combine == "switch_reduce":
        # every rank of the expert-parallel group is a member of the reduction (all experts)
        members = len(w_gate) // local_experts if w_gate is not None else int(ranks.max()) + 1
        total = rank_partial(0)[0]
        for r in range(1, members):
            total = (total + rank_partial(r)[0]).astype(F32)
        return (out + to_bf16(total)).astype(F32).reshape(p, t, h)
    if combine == "per_rank":
        for r in np.unique(ranks):
            row, has = rank_partial(r)
            out[has] = (out[has] + row[has]).astype(F32)
        return out.reshape(p, t, h)
    nodes = ranks // node_gpus
    if combine == "node_slots":
        for nd in np.unique(nodes):
            node_sum = np.zeros((n, h), dtype=F32)
            for kk in range(k):
                sel = nodes[:, kk] == nd
                contrib = (flat_w[sel, kk, None] * y[sel, kk, :]).astype(F32)
                node_sum[sel] = (node_sum[sel] + contrib).astype(F32)
            has = (nodes == nd).any(axis=1)
            out[has] = (out[has] + to_bf16(node_sum[has])).astype(F32)
        return out.reshape(p, t, h)
    for nd in np.unique(nodes):
        node_sum = np.zeros((n, h), dtype=F32)
        for r in np.unique(ranks[nodes == nd]):
            row, has = rank_partial(r)
            node_sum[has] = (node_sum[has] + row[has]).astype(F32)
        has = (nodes == nd).any(axis=1)
        out[has] = (out[has] + to_bf16(node_sum[has])).astype(F32)
    return out.reshape(p, t, h)


def max_abs_error(out, ref) -> float:
    """Largest |out - ref| (computed in float64); 0.0 for empty arrays; NaN if either holds NaN
    where the other does not hold NaN too."""
    a = np.asarray(out, dtype=np.float64)
    b = np.asarray(ref, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"max_abs_error: shapes differ: {a.shape} vs {b.shape}")
    if a.size == 0:
        return 0.0
    both_nan = np.isnan(a) & np.isnan(b)
    with np.errstate(invalid="ignore"):
        d = np.abs(np.where(both_nan, 0.0, a - b))
    d = np.where(np.isinf(a) & np.isinf(b) & (a == b), 0.0, d)
    return float(np.max(d))


def ring_allreduce_reference(x, bf16=True) -> np.ndarray:
    """The sum over GPUs of x [P, N] in the order of the ring all-reduce
    (workloads/kernels/lib/ring_allreduce.s): chunk k (elements [k N/P, (k+1) N/P)) is summed
    along the ring from GPU k, ((x_k + x_{k+1}) + x_{k+2}) + ... (indices mod P), each add in fp32
    rounded to the element type (bf16 when `bf16`). Every GPU receives the same [N] result.
    Error bound against the exact sum: P - 1 roundings, |err| <= (P - 1) u sum|x_i| with
    u = 2^-8 (bf16) or 2^-24 (fp32); the order is fixed, so the simulated result is bit-identical."""
    x = np.asarray(x, F32)
    P, N = x.shape
    c = N // P
    out = np.empty(N, F32)
    rnd = to_bf16 if bf16 else (lambda v: v.astype(F32))
    for k in range(P):
        part = slice(k * c, (k + 1) * c)
        acc = x[k, part]
        for i in range(1, P):
            acc = rnd((acc + x[(k + i) % P, part]).astype(F32))
        out[part] = acc
    return out


def t3_reduction_bound(x, bf16=True) -> np.ndarray:
    """Per element, the largest |simulated - exact| of a sum over GPUs of x [P, N] added in any
    order, one contribution at a time into a zeroed accumulator with each add rounded to the
    element type: T3's near-memory updates (put.add.bf16; workloads/kernels/tp/t3.s), which a
    home applies in the order they arrive. The first add is exact (0 + x); the P - 1 others each
    round once: |err| <= gamma_(P-1) sum|x_i| with gamma_m = m u / (1 - m u), u = 2^-8 (bf16) or
    2^-24 (fp32) (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., eq. 4.4)."""
    x = np.asarray(x, np.float64)
    m = x.shape[0] - 1
    u = 2.0 ** -8 if bf16 else 2.0 ** -24
    return m * u / (1.0 - m * u) * np.abs(x).sum(axis=0)


def nvls_allreduce_reference(x, bf16=True) -> np.ndarray:
    """The sum over GPUs of x [P, N] as NVLink SHARP reduces it (components/nvls.py, multimem
    ld_reduce): FP32 accumulation over the GPUs in rank order, ((x_0 + x_1) + x_2) + ..., each add
    rounded to fp32, the total rounded once to the element type (bf16 when `bf16`). Every GPU
    receives the same [N] result. Error bound against the exact sum: P - 1 fp32 roundings plus
    one final rounding, |err| <= (P - 1) 2^-24 sum|x_i| + u |sum|, u = 2^-8 (bf16) or 0 (fp32)."""
    x = np.asarray(x, F32)
    acc = x[0].copy()
    for i in range(1, x.shape[0]):
        acc = (acc + x[i]).astype(F32)
    return to_bf16(acc) if bf16 else acc
