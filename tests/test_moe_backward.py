"""The MoE layer's backward reference (moehub_arch/workloads/moe_backward.py): its formulas against
finite differences of a float64 forward, its bf16 arithmetic against the float64 gradients, the
router's backward, row conservation in both directions and the FLOP count."""
import numpy as np
import pytest

from moehub_arch.workloads.moe_backward import (backward_flops, moe_layer_backward_reference,
                                                router_logits_grad, router_weights,
                                                sum_rounding_bound)
from moehub_arch.workloads.reference import moe_layer_reference, to_bf16

P, T, H, I, E, K, S, IS = 2, 8, 16, 8, 4, 2, 1, 8


def _silu64(z):
    return z / (1.0 + np.exp(-z))


def _forward64(x, idx, w, wg, wu, wd, sg, su, sd):
    """The layer in float64 without rounding: out[t] = sum_s ys + sum_j w_j y_j."""
    n = x.shape[0] * x.shape[1]
    rows = x.reshape(n, -1)
    out = np.zeros_like(rows)
    for s in range(len(sg)):
        out += (_silu64(rows @ sg[s]) * (rows @ su[s])) @ sd[s]
    fi, fw = idx.reshape(n, -1), w.reshape(n, -1)
    for j in range(fi.shape[1]):
        for r in range(n):
            e = fi[r, j]
            out[r] += fw[r, j] * ((_silu64(rows[r] @ wg[e]) * (rows[r] @ wu[e])) @ wd[e])
    return out.reshape(x.shape)


@pytest.fixture(scope="module")
def layer():
    rng = np.random.default_rng(7)
    b = lambda *shape, s=0.5: to_bf16(rng.standard_normal(shape).astype(np.float32) * s)
    x, dy = b(P, T, H), b(P, T, H)
    idx = np.stack([rng.permutation(E)[:K] for _ in range(P * T)]).reshape(P, T, K)
    w = rng.uniform(0.2, 0.8, (P, T, K)).astype(np.float32)
    wg, wu, wd = b(E, H, I), b(E, H, I), b(E, I, H)
    sg, su, sd = b(S, H, IS), b(S, H, IS), b(S, IS, H)
    g = moe_layer_backward_reference(x, idx, w, wg, wu, wd, dy, sg, su, sd)
    return dict(x=x, dy=dy, idx=idx, w=w, wg=wg, wu=wu, wd=wd, sg=sg, su=su, sd=sd, g=g)


def _loss64(L, **over):
    a = {k: np.asarray(L[k], np.float64) for k in ("x", "w", "wg", "wu", "wd", "sg", "su", "sd")}
    a.update(over)
    out = _forward64(a["x"], L["idx"], a["w"], a["wg"], a["wu"], a["wd"], a["sg"], a["su"], a["sd"])
    return float((out * np.asarray(L["dy"], np.float64)).sum())


def _fd(L, name, index, eps=1e-4):
    base = np.asarray(L[name], np.float64)
    up, dn = base.copy(), base.copy()
    up[index] += eps
    dn[index] -= eps
    return (_loss64(L, **{name: up}) - _loss64(L, **{name: dn})) / (2 * eps)


# (name in the layer, name of its gradient, entries checked)
CHECKED = [("x", "dx", [(0, 0, 0), (1, 5, 7), (0, 3, 15)]),
           ("w", "dw", [(0, 0, 0), (1, 7, 1), (0, 4, 1)]),
           ("wg", "dw_gate", [(0, 0, 0), (2, 5, 3), (3, 15, 7)]),
           ("wu", "dw_up", [(1, 2, 1), (3, 0, 6)]),
           ("wd", "dw_down", [(0, 1, 2), (2, 7, 15)]),
           ("sg", "ds_gate", [(0, 3, 4)]), ("su", "ds_up", [(0, 9, 0)]),
           ("sd", "ds_down", [(0, 5, 11)])]


def test_gradients_match_finite_differences(layer):
    """Every gradient the reference returns is the derivative of <dY, out>: within the bf16
    rounding of its arithmetic (a few percent of the gradient's scale) of a central difference of
    the unrounded float64 layer."""
    g = layer["g"]
    for name, gname, entries in CHECKED:
        scale = float(np.abs(g[gname]).max())
        assert scale > 0
        for ix in entries:
            fd = _fd(layer, name, ix)
            assert abs(float(g[gname][ix]) - fd) <= 0.03 * scale + 1e-6, (gname, ix, fd)


def test_forward_reference_is_the_differentiated_layer(layer):
    """The float64 layer the gradients are checked against is the forward reference, unrounded."""
    L = layer
    out = moe_layer_reference(L["x"], L["idx"], L["w"], L["wg"], L["wu"], L["wd"], L["sg"],
                              L["su"], L["sd"])
    o64 = _forward64(*(np.asarray(L[k], np.float64) if k != "idx" else L[k]
                       for k in ("x", "idx", "w", "wg", "wu", "wd", "sg", "su", "sd")))
    assert np.abs(out - o64).max() <= 0.02 * np.abs(o64).max()


def test_rows_are_conserved_in_both_directions(layer):
    """The combine's backward sends one output-gradient row per token-expert pair to its expert
    and the dispatch's backward one input-gradient row per pair home: every expert receives the
    rows it received in the forward, and the totals are the pairs."""
    g, idx = layer["g"], layer["idx"]
    assert g["pairs"] == P * T * K
    assert g["rows_out"].tolist() == np.bincount(idx.reshape(-1), minlength=E).tolist()
    assert int(g["rows_out"].sum()) == g["pairs"]
    # an expert that receives no rows has zero weight gradients
    g2 = moe_layer_backward_reference(layer["x"], np.zeros_like(idx), layer["w"], layer["wg"],
                                      layer["wu"], layer["wd"], layer["dy"])
    assert g2["rows_out"].tolist() == [P * T * K, 0, 0, 0]
    assert not g2["dw_gate"][1:].any() and not g2["dw_down"][1:].any()
    assert "ds_gate" not in g2


def test_deterministic_and_bf16(layer):
    L = layer
    again = moe_layer_backward_reference(L["x"], L["idx"], L["w"], L["wg"], L["wu"], L["wd"],
                                         L["dy"], L["sg"], L["su"], L["sd"])
    for k, v in L["g"].items():
        assert np.array_equal(np.asarray(v), np.asarray(again[k]))
    assert np.array_equal(L["g"]["dx"], to_bf16(L["g"]["dx"]))    # dX travels home as bf16


def test_bad_shapes_are_errors(layer):
    L = layer
    with pytest.raises(ValueError, match="dy"):
        moe_layer_backward_reference(L["x"], L["idx"], L["w"], L["wg"], L["wu"], L["wd"],
                                     L["dy"][:, :4])
    with pytest.raises(ValueError, match="topk_weight"):
        moe_layer_backward_reference(L["x"], L["idx"], L["w"][..., :1], L["wg"], L["wu"],
                                     L["wd"], L["dy"])


@pytest.mark.parametrize("kind,normalize,scale", [("softmax", False, 1.0), ("softmax", True, 1.0),
                                                  ("sigmoid_group_limited", True, 2.5),
                                                  ("sigmoid", False, 1.0)])
def test_router_backward_matches_finite_differences(kind, normalize, scale):
    rng = np.random.default_rng(3)
    z = rng.standard_normal((5, E))
    idx = np.argsort(-z, axis=-1)[:, :K]
    dw = rng.standard_normal((5, K))
    grad = router_logits_grad(z, idx, dw, kind, normalize, scale)
    eps = 1e-6
    for t, e in [(0, 0), (2, 3), (4, 1)]:
        up, dn = z.copy(), z.copy()
        up[t, e] += eps
        dn[t, e] -= eps
        fd = ((router_weights(up, idx, kind, normalize, scale)
               - router_weights(dn, idx, kind, normalize, scale)) * dw).sum() / (2 * eps)
        assert abs(grad[t, e] - fd) < 1e-7
    if normalize and kind == "sigmoid":
        assert np.allclose(router_weights(z, idx, kind, True, 1.0).sum(-1), 1.0)
    with pytest.raises(ValueError, match="router kind"):
        router_logits_grad(z, idx, dw, "relu")


def test_sum_rounding_bound_holds_for_other_orders():
    """The same terms added in a different order stay within the bound of the exact sum."""
    rng = np.random.default_rng(1)
    terms = to_bf16(rng.standard_normal((8, 64)).astype(np.float32))
    exact = terms.astype(np.float64).sum(axis=0)
    bound = sum_rounding_bound(terms)
    for order in (range(8), range(7, -1, -1), [3, 1, 7, 0, 5, 2, 6, 4]):
        acc = np.zeros(64, np.float32)
        for i in order:
            acc = (acc + terms[i]).astype(np.float32)
        assert (np.abs(acc - exact) <= bound).all()


def test_backward_flops_are_twice_the_forward_plus_recompute():
    f = backward_flops([3, 5], 16, 8)
    assert f["forward"] == 6 * 8 * 16 * 8
    assert f["dgrad"] + f["wgrad"] == 2 * f["forward"]
    assert f["backward"] == f["dgrad"] + f["wgrad"] + f["recompute"]


def test_shared_experts_per_gpu(layer):
    """Shared weights given per GPU ([P, S, ...]) with the same copy on every GPU give the same
    gradients as one shared copy, the weight gradients split per GPU."""
    L = layer
    rep = lambda a: np.stack([a] * P)
    g = moe_layer_backward_reference(L["x"], L["idx"], L["w"], L["wg"], L["wu"], L["wd"],
                                     L["dy"], rep(L["sg"]), rep(L["su"]), rep(L["sd"]))
    assert np.array_equal(g["dx"], L["g"]["dx"])
    assert g["ds_gate"].shape == (P, S, H, IS)
    # the per-GPU gradients sum to the one-copy gradient (the rows split by GPU)
    assert np.allclose(g["ds_down"].sum(axis=0), L["g"]["ds_down"], rtol=1e-5, atol=1e-6)


def test_per_rank_dx_order(layer):
    """combine='per_rank' (DeepEP's gradient combine): dx adds each rank's bf16 partial of its
    slots, ranks ascending, after the shared experts. Everything but dx is the per-slot
    reference's; dx stays within the rounding of the partials (one bf16 rounding per rank's
    partial plus the fp32 reorder bound); with one expert per rank, within the fp32 reorder
    bound alone."""
    L = layer
    args = (L["x"], L["idx"], L["w"], L["wg"], L["wu"], L["wd"], L["dy"], L["sg"], L["su"], L["sd"])
    g = moe_layer_backward_reference(*args, combine="per_rank", local_experts=2)
    for name in ("dw", "dw_gate", "dw_up", "dw_down", "ds_gate"):
        assert np.array_equal(g[name], L["g"][name]), name
    exact = moe_layer_backward_reference(*args)["dx"].astype(np.float64)
    scale = np.abs(exact).max()
    assert np.abs(g["dx"] - exact).max() <= 4 * 2.0 ** -8 * scale   # bf16 partials, final rounding
    # one expert per rank (distinct experts per token): each partial is one slot's bf16 row, kept
    # exactly; only the fp32 order of the adds differs (ranks ascending, not slots)
    one = moe_layer_backward_reference(*args, combine="per_rank", local_experts=1)
    assert np.abs(one["dx"] - exact).max() <= 2 * 2.0 ** -8 * scale
    with pytest.raises(ValueError, match="local_experts"):
        moe_layer_backward_reference(*args, combine="per_rank")
    with pytest.raises(ValueError, match="per_slot, per_rank"):
        moe_layer_backward_reference(*args, combine="per_node")


def test_switch_orders_and_dropped_pairs(layer):
    """The switch's orders (nvls: every rank's bf16 partial summed and rounded in the switch;
    dysharp: the token's k rows summed and rounded in the switch) change only dx, within bf16
    roundings of the per-slot sum; a kept mask of all pairs changes nothing, and a dropped pair
    (tutel) has no dw, one row fewer at its expert and no part in dx."""
    L = layer
    args = (L["x"], L["idx"], L["w"], L["wg"], L["wu"], L["wd"], L["dy"], L["sg"], L["su"], L["sd"])
    exact = moe_layer_backward_reference(*args)
    scale = np.abs(exact["dx"]).max()
    for combine in ("switch_reduce", "switch_targets"):
        g = moe_layer_backward_reference(*args, combine=combine, local_experts=2)
        for name in ("dw", "dw_gate", "dw_up", "dw_down", "ds_gate"):
            assert np.array_equal(g[name], exact[name]), (combine, name)
        assert np.abs(g["dx"] - exact["dx"]).max() <= 4 * 2.0 ** -8 * scale, combine
    kept = np.ones(np.shape(L["idx"]), bool)
    same = moe_layer_backward_reference(*args, kept=kept)
    for name in ("dx", "dw", "dw_gate", "dw_up", "dw_down"):
        assert np.array_equal(same[name], exact[name]), name
    kept[0, 0, 0] = False
    e = int(np.asarray(L["idx"])[0, 0, 0])
    dropped = moe_layer_backward_reference(*args, kept=kept)
    assert dropped["dw"][0, 0, 0] == 0 and exact["dw"][0, 0, 0] != 0
    assert dropped["rows_out"][e] == exact["rows_out"][e] - 1
    assert not np.array_equal(dropped["dx"][0, 0], exact["dx"][0, 0])
