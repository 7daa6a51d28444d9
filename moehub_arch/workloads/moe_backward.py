"""NumPy reference of one expert-parallel MoE layer's backward pass (training), in the arithmetic
the simulator's kernels use, and the router's backward.

What it models: the gradients of the MoE layer of `reference.moe_layer_reference` (combine
"per_slot": out[t] = sum_s ys[t] + sum_j w[t, j] y_j[t], fp32) given dY, the gradient of the
layer output. The backward reverses each step of the forward:

- the combine's backward (on the token's home GPU): the router-weight gradient
  dw[t, j] = <dY[t], y_j[t]> (the expert output y_j came home in the forward's combine) and the
  expert-output gradient dO[t, j] = bf16(w[t, j] dY[t]) - one bf16 row per token-expert pair,
  which travels to the pair's expert: *the combine's backward is a dispatch of output gradients*
  (the same rows, sources and destinations as the forward's dispatch; a scheme that deduplicates
  a token's rows per GPU or group sends dY once and scales at the expert instead: the same values,
  since bf16(w dY) is computed from the same two operands either way);
- the experts' backward (each expert on its received rows, in the forward's row order): SwiGLU's
  dgrad and wgrad, `reference.ffn_backward` (G and U recomputed, D = dO Wd^T, dU, dG, then
  dX_e = dG Wg^T + dU Wu^T and dWg = X^T dG, dWu = X^T dU, dWd = H^T dO in fp32): the forward's
  GEMM FLOPs twice (dgrad and wgrad) plus the gate/up recomputation;
- the dispatch's backward (the rows travel home): dX[t] = sum_j dX_e(t, j), an unweighted fp32
  sum over the token's slots in slot order, rounded once to bf16 - *the dispatch's backward is a
  combine of input gradients* (same rows as the forward's combine; a scheme that reduces per GPU,
  per node or in the switch adds the same terms in its own order, within the rounding bound of
  `sum_rounding_bound`); the shared experts' input gradients (weight 1, no communication) are
  added first, as in the forward's combine order;
- the router's backward (home GPU, no communication): from dw to the router logits through the
  model's affinity (softmax or sigmoid), top-k renormalisation and routed scaling
  (`router_logits_grad`, float64: the simulator has no router kernel - routing is generated).

Row order at an expert: global token order (source GPU, token, slot), the order `np.nonzero`
gives - the order of the forward reference's expert rows. The wgrad sums over rows in that order
(fp32, sequential); a scheme whose receive buffer orders an expert's rows differently sums the
same products in another order, within `sum_rounding_bound`.
"""
from __future__ import annotations

import numpy as np

from .reference import F32, expert_ffn, ffn_backward, gemm_seq, to_bf16

U_BF16 = 2.0 ** -8     # unit roundoff of bf16 (8 significand bits)
U_FP32 = 2.0 ** -24


def _row_dot(a, b) -> np.ndarray:
    """Per row, sum_h a[i, h] b[i, h] in fp32, sequentially over h (each product and add rounded
    to fp32: the order of an fp32 dot product in a kernel's loop over a row)."""
    a = np.asarray(a, F32)
    b = np.asarray(b, F32)
    acc = np.zeros(a.shape[0], F32)
    for h in range(a.shape[1]):
        acc = (acc + (a[:, h] * b[:, h]).astype(F32)).astype(F32)
    return acc


def moe_layer_backward_reference(x, topk_idx, topk_weight, w_gate, w_up, w_down, dy,
                                 shared_gate=None, shared_up=None, shared_down=None,
                                 expert_rows=None, combine="per_slot",
                                 local_experts=None, kept=None) -> dict:
    """The gradients of one MoE layer (forward: `reference.moe_layer_reference`, combine
    "per_slot") given dy [P, T, H] (bf16 values), the gradient of its output.

    Returns a dict of float32 arrays:
      dx [P, T, H] (bf16 values) - the input gradient (routed and shared experts);
      dw [P, T, k] - the router-weight gradients dL/dw[t, j] (fp32 dot products over H);
      dw_gate, dw_up [E, H, I], dw_down [E, I, H] - the routed experts' weight gradients (fp32;
        an expert with no rows has zero gradients);
      ds_gate, ds_up [S, H, Is], ds_down [S, Is, H] - the shared experts' (when given; with
        shared weights per GPU [P, S, ...], per GPU [P, S, ...]);
      rows_out [E] - rows each expert received in the backward (its forward rows), and
      pairs - token-expert pairs (the rows of each direction of the backward's communication).

    expert_rows: {expert: (flat tokens, slots)} - the order of each expert's rows in a scheme's
    buffer (flat token = GPU x T + token), which the wgrad's fp32 sums over rows follow; by
    default global token order.
    kept: bool [P, T, k] or None - the pairs the forward kept (a capacity-factor scheme drops the
    rest: their output row was zero, so their dw is 0, they send no gradient row and add nothing
    to dx or to any weight gradient); None: every pair.
    combine: the order of dx's sum (the dispatch's backward). "per_slot": the shared experts'
    rows, then the slots in order, in fp32, rounded once. "per_rank" (DeepEP's combine, with
    `local_experts` experts per GPU): each rank's partial - the fp32 sum of the token's slots whose
    expert it holds, in slot order, rounded to bf16 on the way home - added after the shared
    experts' rows, ranks ascending, in fp32, rounded once. "switch_reduce" (NVLS's reduce-scatter
    as the all-gather's backward): the same bf16 partials of every rank (a zero row where a rank
    holds none of the token's experts) summed in fp32 in rank order and rounded to bf16 in the
    switch, that row then added to the shared experts' fp32 sum and rounded once.
    "switch_targets" (DySHARP's in-switch reduction as the multicast's backward): the token's k
    rows summed in fp32 in slot order and rounded to bf16 in the switch, then added to the shared
    experts' fp32 sum and rounded once.
    """
    if combine not in ("per_slot", "per_rank", "switch_reduce", "switch_targets"):
        raise ValueError(f"combine must be per_slot, per_rank, switch_reduce or switch_targets, "
                         f"not {combine!r}")
    if combine != "per_slot" and not local_experts:
        raise ValueError("combine='per_rank' needs local_experts (experts per GPU)")
    x = np.asarray(x, F32)
    dy = np.asarray(dy, F32)
    idx = np.asarray(topk_idx, np.int64)
    w = np.asarray(topk_weight, F32)
    p, t, h = x.shape
    k = idx.shape[-1]
    if dy.shape != x.shape:
        raise ValueError(f"dy {dy.shape} must have the shape of x {x.shape}")
    if idx.shape != (p, t, k) or w.shape != (p, t, k):
        raise ValueError(f"topk_idx {idx.shape} and topk_weight {w.shape} must both be "
                         f"{(p, t, k)}")
    n = p * t
    rows, grows = x.reshape(n, h), dy.reshape(n, h)
    flat_idx, flat_w = idx.reshape(n, k), w.reshape(n, k)
    E = len(w_gate)
    dw = np.zeros((n, k), F32)
    dx_slot = np.zeros((n, k, h), F32)
    dwg = np.zeros(np.shape(w_gate), F32)
    dwu = np.zeros(np.shape(w_up), F32)
    dwd = np.zeros(np.shape(w_down), F32)
    rows_out = np.zeros(E, np.int64)
    on = np.ones((n, k), bool) if kept is None else np.asarray(kept, bool).reshape(n, k)
    for e in np.unique(flat_idx[on]):
        tok, slot = np.nonzero((flat_idx == e) & on)
        if expert_rows is not None:
            tok, slot = (np.asarray(a, np.int64) for a in expert_rows[int(e)])
            want = np.nonzero((flat_idx == e) & on)
            if sorted(zip(tok.tolist(), slot.tolist())) != sorted(zip(want[0].tolist(),
                                                                      want[1].tolist())):
                raise ValueError(f"expert_rows[{int(e)}] is not the set of expert {int(e)}'s "
                                 f"token-expert pairs")
        xe = rows[tok]
        ye = expert_ffn(xe, w_gate[e], w_up[e], w_down[e])        # the forward's output rows
        dw[tok, slot] = _row_dot(grows[tok], ye)                 # the combine's backward ...
        doe = to_bf16((flat_w[tok, slot, None] * grows[tok]).astype(F32))   # ... its dispatch
        dxe, dwg[e], dwu[e], dwd[e] = ffn_backward(xe, doe, w_gate[e], w_up[e], w_down[e])
        dx_slot[tok, slot] = dxe
        rows_out[e] = len(tok)
    out = dict(dw=dw.reshape(p, t, k), dw_gate=dwg, dw_up=dwu, dw_down=dwd, rows_out=rows_out,
               pairs=int(n * k))
    acc = np.zeros((n, h), F32)
    if shared_gate is not None:
        # [S, ...]: every GPU's copy the same (one pass over all rows); [P, S, ...]: each GPU's own
        # copy (the simulator initialises each GPU's shared experts separately)
        per_gpu = np.ndim(shared_gate) == 4
        dsg, dsu, dsd = (np.zeros(np.shape(a), F32) for a in (shared_gate, shared_up, shared_down))
        for g in range(p if per_gpu else 1):
            rs = slice(g * t, (g + 1) * t) if per_gpu else slice(0, n)
            sg, su, sd = ((a[g] for a in (shared_gate, shared_up, shared_down)) if per_gpu
                          else (shared_gate, shared_up, shared_down))
            dg_, du_, dd_ = (dsg[g], dsu[g], dsd[g]) if per_gpu else (dsg, dsu, dsd)
            for s in range(len(sg)):
                dxs, dg_[s], du_[s], dd_[s] = ffn_backward(rows[rs], grows[rs], sg[s], su[s], sd[s])
                acc[rs] = (acc[rs] + dxs).astype(F32)
        out.update(ds_gate=dsg, ds_up=dsu, ds_down=dsd)
    if combine == "per_slot":
        for j in range(k):                              # the dispatch's backward: a combine
            acc = (acc + dx_slot[:, j, :]).astype(F32)
    elif combine == "switch_targets":
        sw = np.zeros((n, h), F32)
        for j in range(k):
            sw = (sw + dx_slot[:, j, :]).astype(F32)
        acc = (acc + to_bf16(sw)).astype(F32)
    elif combine == "switch_reduce":
        rank = flat_idx // local_experts
        sw = np.zeros((n, h), F32)
        for r in range(int(len(w_gate)) // local_experts):
            part = np.zeros((n, h), F32)
            for j in range(k):
                part = np.where((rank[:, j] == r)[:, None], (part + dx_slot[:, j, :]).astype(F32),
                                part)
            sw = (sw + to_bf16(part)).astype(F32)
        acc = (acc + to_bf16(sw)).astype(F32)
    else:
        rank = flat_idx // local_experts                # [n, k]: the GPU holding slot j's expert
        for r in range(int(len(w_gate)) // local_experts):
            on = rank == r
            if not on.any():
                continue
            part = np.zeros((n, h), F32)
            for j in range(k):
                part = np.where(on[:, j, None], (part + dx_slot[:, j, :]).astype(F32), part)
            acc = np.where(on.any(axis=1)[:, None], (acc + to_bf16(part)).astype(F32), acc)
    out["dx"] = to_bf16(acc).reshape(p, t, h)
    return out


def sum_rounding_bound(terms, u=U_FP32) -> np.ndarray:
    """Largest |computed - exact| of a sum of `terms` [m, ...] (axis 0) added one at a time in any
    order with each add rounded at unit roundoff u: gamma_(m-1) sum|terms| (Higham, Accuracy and
    Stability of Numerical Algorithms, 2nd ed., eq. 4.4) - how far a scheme that adds the same
    gradient terms in another order (per rank, per node, in the switch) may differ before its
    final rounding to bf16, which adds U_BF16 |sum|."""
    terms = np.asarray(terms, np.float64)
    m = max(terms.shape[0] - 1, 0)
    return m * u / (1.0 - m * u) * np.abs(terms).sum(axis=0)


# ---- the router's backward (float64) ----------------------------------------------------------

def router_weights(logits, topk_idx, kind="softmax", normalize=False, scale=1.0) -> np.ndarray:
    """The top-k router weights [..., k] from router logits [..., E] (float64): affinities
    softmax(logits) or sigmoid(logits) (`kind`, the models' router kinds without the group
    limit, which only chooses which experts are taken), gathered at topk_idx, renormalised to sum
    to 1 over the k when `normalize`, times `scale` (the routed scaling factor: DeepSeek-V3 2.5)."""
    z = np.asarray(logits, np.float64)
    idx = np.asarray(topk_idx, np.int64)
    if kind.startswith("softmax"):
        a = np.exp(z - z.max(axis=-1, keepdims=True))
        a = a / a.sum(axis=-1, keepdims=True)
    elif kind.startswith("sigmoid"):
        a = 1.0 / (1.0 + np.exp(-z))
    else:
        raise ValueError(f"router kind must be softmax... or sigmoid..., not {kind!r}")
    g = np.take_along_axis(a, idx, axis=-1)
    if normalize:
        g = g / g.sum(axis=-1, keepdims=True)
    return scale * g


def router_logits_grad(logits, topk_idx, dw, kind="softmax", normalize=False,
                       scale=1.0) -> np.ndarray:
    """dL/dlogits [..., E] (float64) given dw = dL/dw [..., k] for the weights of
    `router_weights`: through the scaling (x scale), the renormalisation (dg_j = (dr_j -
    sum_i dr_i r_i) / sum g, r = g / sum g) and the affinity (softmax: dz = a (da - sum a da);
    sigmoid: dz = da a (1 - a)), with da scattered from the chosen experts (zero elsewhere).
    Routing (which experts) is not differentiable and is held fixed, as in training."""
    z = np.asarray(logits, np.float64)
    idx = np.asarray(topk_idx, np.int64)
    dr = scale * np.asarray(dw, np.float64)
    if kind.startswith("softmax"):
        a = np.exp(z - z.max(axis=-1, keepdims=True))
        a = a / a.sum(axis=-1, keepdims=True)
    elif kind.startswith("sigmoid"):
        a = 1.0 / (1.0 + np.exp(-z))
    else:
        raise ValueError(f"router kind must be softmax... or sigmoid..., not {kind!r}")
    g = np.take_along_axis(a, idx, axis=-1)
    if normalize:
        tot = g.sum(axis=-1, keepdims=True)
        r = g / tot
        dg = (dr - (dr * r).sum(axis=-1, keepdims=True)) / tot
    else:
        dg = dr
    da = np.zeros_like(a)
    np.put_along_axis(da, idx, dg, axis=-1)
    if kind.startswith("softmax"):
        return a * (da - (a * da).sum(axis=-1, keepdims=True))
    return da * a * (1.0 - a)


def backward_flops(pairs_per_expert, hidden, ffn) -> dict:
    """GEMM FLOPs of the routed experts' backward given the rows of each expert: the forward's
    gate/up (4 m H I) recomputed, dgrad (D = dO Wd^T: 2 m H I; dX = dG Wg^T + dU Wu^T: 4 m H I)
    and wgrad (dWg, dWu: 4 m H I; dWd: 2 m H I) - 16 m H I against the forward's 6 m H I:
    twice the forward (dgrad + wgrad, 12 m H I) plus the recomputation of G and U (4 m H I)."""
    m = int(np.sum(pairs_per_expert))
    f = 2.0 * m * hidden * ffn
    return dict(forward=3 * f, recompute=2 * f, dgrad=3 * f, wgrad=3 * f, backward=8 * f)
