"""Model zoo, routing generators and the NumPy MoE reference (fast: no simulator runs)."""
import json

import numpy as np
import pytest

from moehub_arch.config.loader import ConfigError
from moehub_arch.config.models import ModelShape, RouterSpec, list_models, load_model
from moehub_arch.workloads.reference import (expert_ffn, gemm_seq, max_abs_error,
                                             moe_layer_reference, silu, to_bf16)
from moehub_arch.workloads.routing import (Routing, expert_load, generate_routing, gini,
                                           write_trace)

SHIPPED = ["mixtral_8x7b", "mixtral_8x22b", "deepseek_v2", "deepseek_v3", "qwen2_57b_a14b",
           "qwen3_30b_a3b", "qwen3_235b_a22b", "olmoe_1b_7b", "dbrx", "gpt_oss_120b"]

# BRIEF section 5: H, I, E, k, S, MoE layers
BRIEF5 = {
    "mixtral_8x7b": (4096, 14336, 8, 2, 0, 32),
    "mixtral_8x22b": (6144, 16384, 8, 2, 0, 56),
    "deepseek_v2": (5120, 1536, 160, 6, 2, 59),
    "deepseek_v3": (7168, 2048, 256, 8, 1, 58),
    "qwen2_57b_a14b": (3584, 2560, 64, 8, 1, 28),
    "qwen3_30b_a3b": (2048, 768, 128, 8, 0, 48),
    "qwen3_235b_a22b": (4096, 1536, 128, 8, 0, 94),
    "olmoe_1b_7b": (2048, 1024, 64, 8, 0, 16),
    "dbrx": (6144, 10752, 16, 4, 0, 40),
    "gpt_oss_120b": (2880, 2880, 128, 4, 0, 36),
}


# ------------------------------------------------------------------------------------ models
def test_every_shipped_model_loads_and_matches_brief():
    assert sorted(SHIPPED) == [m for m in list_models() if m in SHIPPED]
    for name in SHIPPED:
        m = load_model(name)
        assert isinstance(m, ModelShape) and isinstance(m.router, RouterSpec)
        assert m.name == name
        assert (m.hidden, m.expert_ffn, m.experts, m.top_k, m.shared_experts,
                m.moe_layers) == BRIEF5[name], name
        assert m.dtype == "bf16"
        assert m.moe_layers <= m.layers


def test_deepseek_v3_details():
    m = load_model("deepseek_v3")
    assert m.layers == 61 and m.shared_expert_ffn == 2048
    assert m.router == RouterSpec(kind="sigmoid_group_limited", normalize=True, scale=2.5,
                                  groups=8, top_groups=4)


def test_seed_paper_models():
    # Hugging Face config.json of Qwen/Qwen1.5-MoE-A2.7B and microsoft/Phi-3.5-MoE-instruct
    q = load_model("qwen1_5_moe_a2_7b")
    assert (q.hidden, q.expert_ffn, q.experts, q.top_k, q.shared_experts, q.shared_expert_ffn,
            q.moe_layers) == (2048, 1408, 60, 4, 1, 5632, 24)
    assert q.router.kind == "softmax_topk" and not q.router.normalize   # norm_topk_prob false
    p = load_model("phi3_5_moe")
    assert (p.hidden, p.expert_ffn, p.experts, p.top_k, p.shared_experts, p.moe_layers) == \
        (4096, 6400, 16, 2, 0, 32)
    # DySHARP (arXiv 2605.05607) shapes S, M, L: H, I, E
    for name, shape in (("dysharp_s", (2048, 512, 64)), ("dysharp_m", (4096, 1024, 128)),
                        ("dysharp_l", (7168, 2048, 256))):
        m = load_model(name)
        assert (m.hidden, m.expert_ffn, m.experts, m.top_k) == shape + (8,)


def test_normal_routing_spreads_with_std():
    kw = dict(num_gpus=8, tokens_per_gpu=2048, num_experts=16, top_k=2, seed=3)
    flat = generate_routing("normal", std=0.0, **kw)
    loads = np.bincount(flat.topk_idx.ravel(), minlength=16) / flat.topk_idx.size
    assert abs(loads - 1 / 16).max() < 0.01          # std 0: uniform
    spreads = []
    for std in (0.0, 0.02, 0.05):
        r = generate_routing("normal", std=std, **kw)
        _check_valid(r, 8, 2048, 16, 2)
        spreads.append((np.bincount(r.topk_idx.ravel(), minlength=16) / r.topk_idx.size).std())
    assert spreads[0] < spreads[1] < spreads[2]


@pytest.mark.parametrize("std,words", [(-0.1, "non-negative"), ("0.1", "non-negative"),
                                       (float("nan"), "non-negative"), (True, "non-negative"),
                                       (10.0, "fewer than top-k")])
def test_normal_routing_bad_std(std, words):
    with pytest.raises(ConfigError) as ei:   # top-8 of 8: any expert clipped to 0 is too many
        generate_routing("normal", std=std, num_gpus=2, tokens_per_gpu=4, num_experts=8,
                         top_k=8, seed=1)
    assert "workload.layer.routing.std" in str(ei.value) and words in str(ei.value)


def test_mixtral_and_qwen3_details():
    m = load_model("mixtral_8x7b")
    assert (m.hidden, m.expert_ffn, m.experts, m.top_k) == (4096, 14336, 8, 2)
    assert m.router.kind == "topk_softmax" and m.router.groups is None
    q = load_model("qwen3_30b_a3b")
    assert (q.hidden, q.expert_ffn, q.experts, q.top_k, q.layers) == (2048, 768, 128, 8, 48)
    assert q.router.kind == "softmax_topk" and q.router.normalize is True
    assert q.shared_experts == 0 and q.shared_expert_ffn == 0
    q2 = load_model("qwen2_57b_a14b")
    assert q2.shared_experts == 1 and q2.shared_expert_ffn == 20480
    v2 = load_model("deepseek_v2")
    assert (v2.router.kind, v2.router.groups, v2.router.top_groups) == \
        ("softmax_group_limited", 8, 3)
    assert v2.shared_experts == 2 and v2.shared_expert_ffn == 1536 and v2.layers == 60


def test_router_weighting_follows_the_public_configs():
    """norm_topk_prob / routed_scaling_factor / moe_normalize_expert_weights of each model's
    config.json on Hugging Face."""
    expect = {"deepseek_v2": (False, 16.0), "deepseek_v3": (True, 2.5), "qwen2_57b_a14b": (False, 1.0),
              "qwen3_30b_a3b": (True, 1.0), "olmoe_1b_7b": (False, 1.0), "dbrx": (True, 1.0),
              "qwen1_5_moe_a2_7b": (False, 1.0)}
    for name, (normalize, scale) in expect.items():
        r = load_model(name).router
        assert (r.normalize, r.scale) == (normalize, scale), name


def test_load_model_by_path(tmp_path):
    src = load_model("deepseek_v3")
    p = tmp_path / "mine.yaml"
    p.write_text(_GOOD)
    m = load_model(p)
    assert m.name == "mine" and m.router.groups == 4
    assert load_model(str(p)) == m
    assert src.name == "deepseek_v3"


def test_unknown_model_lists_known():
    with pytest.raises(ConfigError) as ei:
        load_model("deepseek_v4")
    msg = str(ei.value)
    assert "deepseek_v4" in msg and "deepseek_v3" in msg and "mixtral_8x7b" in msg


_GOOD = """\
model:
  name: mine
  hidden: 64
  expert_ffn: 32
  experts: 16
  top_k: 4
  shared_experts: 1
  shared_expert_ffn: 32
  moe_layers: 2
  layers: 3
  dtype: bf16
  router:
    kind: sigmoid_group_limited
    normalize: true
    scale: 2.5
    groups: 4
    top_groups: 2
"""


@pytest.mark.parametrize("old,new,key,words", [
    ("  top_k: 4\n", "", "model.top_k", ["missing"]),
    ("  top_k: 4\n", "  top_k: 4\n  topk: 3\n", "model.topk", ["unknown", "top_k"]),
    ("  top_k: 4\n", "  top_k: 17\n", "model.top_k", ["at most", "16", "17"]),
    ("  hidden: 64\n", "  hidden: 0\n", "model.hidden", ["positive", "0"]),
    ("  hidden: 64\n", "  hidden: big\n", "model.hidden", ["integer", "'big'"]),
    ("  hidden: 64\n", "  hidden: 64.5\n", "model.hidden", ["integer", "64.5"]),
    ("    groups: 4\n", "    groups: 3\n", "model.router.groups", ["divisor", "16", "3"]),
    ("    top_groups: 2\n", "    top_groups: 5\n", "model.router.top_groups", ["at most", "5"]),
    ("    groups: 4\n    top_groups: 2\n", "    groups: 8\n    top_groups: 1\n",
     "model.router.top_groups", ["model.top_k (4)", "each group holds 2", "found 1"]),
    ("    top_groups: 2\n", "", "model.router.top_groups", ["missing"]),
    ("    kind: sigmoid_group_limited\n", "    kind: sigmoid\n", "model.router.kind",
     ["one of", "'sigmoid'"]),
    ("    normalize: true\n", "    normalize: 3\n", "model.router.normalize", ["true or false"]),
    ("    scale: 2.5\n", "    scale: -1\n", "model.router.scale", ["positive", "-1"]),
    ("  dtype: bf16\n", "  dtype: int3\n", "model.dtype", ["bf16", "int3"]),
    ("  shared_expert_ffn: 32\n", "  shared_expert_ffn: 0\n", "model.shared_expert_ffn", ["0"]),
    ("  moe_layers: 2\n", "  moe_layers: 4\n", "model.moe_layers", ["at most", "4"]),
])
def test_bad_model_yaml_names_file_and_key(tmp_path, old, new, key, words):
    assert old in _GOOD
    p = tmp_path / "broken_model.yaml"
    p.write_text(_GOOD.replace(old, new))
    with pytest.raises(ConfigError) as ei:
        load_model(p)
    msg = str(ei.value)
    assert "broken_model.yaml" in msg and key in msg, msg
    assert ei.value.key == key and "broken_model.yaml" in ei.value.file
    for w in words:
        assert w in msg, (w, msg)
    assert "\n" not in msg


def test_groups_only_for_group_limited(tmp_path):
    p = tmp_path / "g.yaml"
    p.write_text(_GOOD.replace("sigmoid_group_limited", "softmax_topk"))
    with pytest.raises(ConfigError) as ei:
        load_model(p)
    assert "model.router.groups" in str(ei.value) and "g.yaml" in str(ei.value)


def test_model_yaml_wrong_top_level(tmp_path):
    p = tmp_path / "top.yaml"
    p.write_text("hidden: 3\n")
    with pytest.raises(ConfigError) as ei:
        load_model(p)
    assert "top.yaml" in str(ei.value) and "'model'" in str(ei.value)


# ----------------------------------------------------------------------------------- routing
DIMS = dict(num_gpus=4, tokens_per_gpu=96, num_experts=32, top_k=4)
V3 = RouterSpec(kind="sigmoid_group_limited", normalize=True, scale=2.5, groups=8, top_groups=4)
V2 = RouterSpec(kind="softmax_group_limited", normalize=False, scale=1.0, groups=8, top_groups=3)
ROUTER_CASES = [
    ("uniform", {}),
    ("uniform", {"router": RouterSpec(kind="softmax_topk", normalize=True)}),
    ("balanced", {}),
    ("balanced", {"router": RouterSpec(kind="topk_softmax", normalize=True)}),
    ("skewed", {"gini": 0.25}),
    ("group_limited", {"router": V3}),
    ("group_limited", {"router": V2}),
    ("normal", {"std": 0.032}),
]


def _check_valid(r: Routing, num_gpus, tokens_per_gpu, num_experts, top_k):
    shape = (num_gpus, tokens_per_gpu, top_k)
    assert r.topk_idx.shape == shape and r.topk_weight.shape == shape
    assert r.topk_idx.dtype == np.int64 and r.topk_weight.dtype == np.float32
    assert r.topk_idx.min() >= 0 and r.topk_idx.max() < num_experts
    s = np.sort(r.topk_idx, axis=-1)
    assert (s[..., 1:] != s[..., :-1]).all(), "experts must be distinct per token"
    assert np.isfinite(r.topk_weight).all() and (r.topk_weight >= 0).all()


@pytest.mark.parametrize("kind,kw", ROUTER_CASES)
def test_generators_shapes_and_determinism(kind, kw):
    a = generate_routing(kind, seed=7, **DIMS, **kw)
    _check_valid(a, **DIMS)
    b = generate_routing(kind, seed=7, **DIMS, **kw)
    assert np.array_equal(a.topk_idx, b.topk_idx)
    assert np.array_equal(a.topk_weight, b.topk_weight)
    c = generate_routing(kind, seed=8, **DIMS, **kw)
    assert not np.array_equal(a.topk_idx, c.topk_idx)


def test_weights_follow_router():
    r = generate_routing("uniform", seed=1, **DIMS)
    assert np.allclose(r.topk_weight.sum(-1), 1.0, atol=1e-6)
    r = generate_routing("uniform", seed=1, router=RouterSpec("softmax_topk", False), **DIMS)
    assert (r.topk_weight.sum(-1) < 1.0).all()
    r = generate_routing("uniform", seed=1, router=RouterSpec("topk_softmax", True, scale=2.0),
                         **DIMS)
    assert np.allclose(r.topk_weight.sum(-1), 2.0, atol=1e-5)


@pytest.mark.parametrize("g,t,e,k", [(4, 96, 32, 4), (3, 50, 12, 5), (2, 7, 8, 8), (8, 33, 10, 3),
                                     (1, 1, 6, 4)])
def test_balanced_exact_loads(g, t, e, k):
    r = generate_routing("balanced", num_gpus=g, tokens_per_gpu=t, num_experts=e, top_k=k,
                         seed=3)
    _check_valid(r, g, t, e, k)
    load = expert_load(r, e)
    assert load.sum() == g * t * k
    assert load.max() - load.min() <= 1
    if (g * t * k) % e == 0:
        assert (load == g * t * k // e).all()
        assert gini(load) == 0.0


def test_skewed_gini_calibrated():
    dims = dict(num_gpus=8, tokens_per_gpu=4096, num_experts=64, top_k=8)
    for target in (0.1, 0.25, 0.5):
        r = generate_routing("skewed", seed=11, gini=target, **dims)
        _check_valid(r, **dims)
        assert abs(gini(expert_load(r, 64)) - target) < 0.03, target
    r = generate_routing("skewed", seed=11, gini=0.0, **dims)
    assert gini(expert_load(r, 64)) < 0.03


def test_gini_values():
    assert gini([5, 5, 5, 5]) == 0.0
    assert gini([0, 0, 0, 4]) == pytest.approx(0.75)
    assert gini([0, 0]) == 0.0


def test_group_limited_respects_groups_and_scale():
    dims = dict(num_gpus=2, tokens_per_gpu=200, num_experts=64, top_k=8)
    r = generate_routing("group_limited", seed=5, router=V3, **dims)
    _check_valid(r, **dims)
    groups = r.topk_idx // (64 // 8)
    for row in groups.reshape(-1, 8):
        assert len(set(row.tolist())) <= V3.top_groups
    assert np.allclose(r.topk_weight.sum(-1), 2.5, atol=1e-5)
    # weights are sorted like torch.topk (largest affinity first) before normalisation
    assert (np.diff(r.topk_weight, axis=-1) <= 1e-7).all()
    r2 = generate_routing("group_limited", seed=5, router=V2, num_gpus=2, tokens_per_gpu=100,
                          num_experts=160, top_k=6)
    assert all(len(set(row.tolist())) <= 3 for row in (r2.topk_idx // 20).reshape(-1, 6))
    assert (r2.topk_weight.sum(-1) < 1.0).all()


def test_group_limited_needs_group_router():
    with pytest.raises(ConfigError, match="group-limited"):
        generate_routing("group_limited", seed=0, **DIMS)


def test_bad_kind_and_gini():
    with pytest.raises(ConfigError) as ei:
        generate_routing("zipf", seed=0, **DIMS)
    assert ei.value.key == "workload.layer.routing.kind" and "skewed" in str(ei.value)
    for bad in (-0.1, 0.95, float("nan"), "high"):
        with pytest.raises(ConfigError) as ei:
            generate_routing("skewed", seed=0, gini=bad, **DIMS)
        assert ei.value.key == "workload.layer.routing.gini"
    with pytest.raises(ConfigError, match="at most"):    # 8 of 8 experts: always Gini 0
        generate_routing("skewed", seed=0, gini=0.3, num_gpus=1, tokens_per_gpu=4,
                         num_experts=8, top_k=8)


# ------------------------------------------------------------------------------------- traces
def _trace_dims(r):
    return dict(num_gpus=r.num_gpus, tokens_per_gpu=r.tokens_per_gpu, num_experts=32,
                top_k=r.top_k)


def test_trace_roundtrip_npz(tmp_path):
    r = generate_routing("skewed", seed=2, gini=0.2, **DIMS)
    p = tmp_path / "t.npz"
    write_trace(p, r)
    assert p.exists() and not (tmp_path / "t.npz.npz").exists()
    back = generate_routing("trace", seed=0, trace=p, **_trace_dims(r))
    assert np.array_equal(back.topk_idx, r.topk_idx)
    assert np.array_equal(back.topk_weight, r.topk_weight)


def test_trace_roundtrip_npy_both_shapes(tmp_path):
    r = generate_routing("uniform", seed=2, **DIMS)
    for name, arr in (("flat.npy", r.topk_idx.reshape(-1, 4)), ("full.npy", r.topk_idx)):
        np.save(tmp_path / name, arr.astype(np.int32))
        back = generate_routing("trace", seed=0, trace=tmp_path / name, **_trace_dims(r))
        assert np.array_equal(back.topk_idx, r.topk_idx)
        assert back.topk_idx.dtype == np.int64 and back.topk_weight.dtype == np.float32
        assert (back.topk_weight == np.float32(0.25)).all()


def test_trace_roundtrip_json(tmp_path):
    r = generate_routing("balanced", seed=2, **DIMS)
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"topk_idx": r.topk_idx.reshape(-1, 4).tolist(),
                             "topk_weight": r.topk_weight.reshape(-1, 4).tolist()}))
    back = generate_routing("trace", seed=0, trace=p, **_trace_dims(r))
    assert np.array_equal(back.topk_idx, r.topk_idx)
    assert np.array_equal(back.topk_weight, r.topk_weight)
    q = tmp_path / "noweight.json"
    q.write_text(json.dumps({"topk_idx": r.topk_idx.tolist()}))
    back = generate_routing("trace", seed=0, trace=q, **_trace_dims(r))
    assert np.array_equal(back.topk_idx, r.topk_idx)


TD = dict(num_gpus=2, tokens_per_gpu=3, num_experts=8, top_k=2)
GOOD_IDX = [[0, 1], [2, 3], [4, 5], [6, 7], [0, 7], [1, 6]]


def _write(path, obj):
    if path.suffix == ".json":
        path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    elif path.suffix == ".npy":
        if isinstance(obj, bytes):
            path.write_bytes(obj)
        else:
            np.save(path, obj)
    elif path.suffix == ".npz":
        np.savez(path, **obj)
    else:
        path.write_text(str(obj))


BAD_TRACES = [
    ("garbage.npy", b"this is not numpy", ["cannot read"]),
    ("notrace.json", "[1, 2, 3]", ["not a routing trace", "topk_idx"]),
    ("badjson.json", "{oops", ["cannot read", "JSON"]),
    ("noidx.npz", {"ids": np.zeros((6, 2), np.int64)}, ["topk_idx", "ids"]),
    ("shape.npy", np.zeros((5, 2), np.int64), ["wrong shape", "(6, 2)", "(5, 2)"]),
    ("k3.json", {"topk_idx": [[0, 1, 2]] * 6}, ["wrong shape", "(6, 3)"]),
    ("ragged.json", {"topk_idx": [[0, 1], [2]] + GOOD_IDX[2:]}, ["rectangular"]),
    ("float.json", {"topk_idx": [[0, 1.5]] + GOOD_IDX[1:]}, ["integer", "1.5", "token 0"]),
    ("strs.npy", np.array([["a", "b"]] * 6), ["integer", "dtype"]),
    ("range.npy", np.array([[0, 1], [2, 3], [4, 9]] + GOOD_IDX[3:]),
     ["out of range", "[0, 8)", "token 2", "9"]),
    ("neg.json", {"topk_idx": GOOD_IDX[:4] + [[-1, 2]] + GOOD_IDX[5:]},
     ["out of range", "token 4", "-1"]),
    ("dup.json", {"topk_idx": GOOD_IDX[:3] + [[5, 5]] + GOOD_IDX[4:]},
     ["token 3", "expert 5", "more than once"]),
    ("wshape.npz", {"topk_idx": np.array(GOOD_IDX), "topk_weight": np.ones((6, 3))},
     ["topk_weight", "wrong shape", "(6, 3)"]),
    ("wnan.npz", {"topk_idx": np.array(GOOD_IDX),
                  "topk_weight": np.array([[0.5, np.nan]] + [[0.5, 0.5]] * 5)},
     ["topk_weight", "finite", "nan"]),
    ("winf.json", {"topk_idx": GOOD_IDX, "topk_weight": [[0.5, 1e999]] + [[0.5, 0.5]] * 5},
     ["topk_weight", "finite", "inf"]),
    ("wneg.json", {"topk_idx": GOOD_IDX, "topk_weight": [[0.5, 0.5]] * 5 + [[-0.5, 1.0]]},
     ["non-negative", "-0.5", "token 5"]),
    ("trace.csv", "0,1", [".npy, .npz or .json"]),
]


@pytest.mark.parametrize("name,obj,words", BAD_TRACES, ids=[b[0] for b in BAD_TRACES])
def test_broken_traces(tmp_path, name, obj, words):
    p = tmp_path / name
    _write(p, obj)
    with pytest.raises(ConfigError) as ei:
        generate_routing("trace", seed=0, trace=p, **TD)
    msg = str(ei.value)
    assert name in msg, msg
    for w in words:
        assert w in msg, (w, msg)
    assert ei.value.key == "workload.layer.routing.trace"


def test_missing_trace(tmp_path):
    with pytest.raises(ConfigError, match="nothere.npz"):
        generate_routing("trace", seed=0, trace=tmp_path / "nothere.npz", **TD)
    with pytest.raises(ConfigError, match="needs a trace file"):
        generate_routing("trace", seed=0, **TD)


def test_good_small_trace(tmp_path):
    p = tmp_path / "ok.json"
    p.write_text(json.dumps({"topk_idx": GOOD_IDX}))
    r = generate_routing("trace", seed=0, trace=p, **TD)
    _check_valid(r, **TD)
    assert r.topk_idx[1, 2].tolist() == [1, 6]


# ---------------------------------------------------------------------------------- reference
def _f32(bits):
    return np.array([bits], dtype=np.uint32).view(np.float32)[0]


def test_to_bf16_rounding():
    vals = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-9, 1 + 2**-7 + 2**-8, -2.5, 0.0, 1 + 2**-8 + 2**-20,
                     3.0e38], dtype=np.float32)
    out = to_bf16(vals)
    assert out.dtype == np.float32
    assert out[0] == 1.0
    assert out[1] == 1.0                                # tie, rounds to even (down)
    assert out[2] == np.float32(1 + 2**-7)              # above the tie: rounds up
    assert out[3] == np.float32(1 + 2**-6)              # tie with odd lsb: rounds up to even
    assert out[4] == -2.5 and out[5] == 0.0
    assert out[6] == np.float32(1 + 2**-7)              # just above the tie
    assert (out.view(np.uint32) & 0xFFFF == 0).all()
    assert to_bf16(np.float32(1 + 2**-8)).shape == ()
    # the bit formula, including the wrap-around for the largest bit patterns
    assert to_bf16(np.array([_f32(0x3F808000)]))[0] == _f32(0x3F800000)
    assert to_bf16(np.array([_f32(0x3F818000)]))[0] == _f32(0x3F820000)
    assert to_bf16(np.array([_f32(0xFFFFFFFF)])).view(np.uint32)[0] == 0


def test_gemm_seq_matches_naive_loop():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5)).astype(np.float32)
    b = rng.standard_normal((5, 4)).astype(np.float32)
    ref = np.zeros((3, 4), dtype=np.float32)
    for i in range(3):
        for j in range(4):
            acc = np.float32(0.0)
            for kk in range(5):
                acc = np.float32(acc + np.float32(a[i, kk] * b[kk, j]))
            ref[i, j] = acc
    out = gemm_seq(a, b)
    assert out.dtype == np.float32
    assert np.array_equal(out, ref)
    # cancellation makes the sequential order visible
    a2 = np.array([[1e8, 1.0, -1e8]], dtype=np.float32)
    b2 = np.ones((3, 1), dtype=np.float32)
    assert gemm_seq(a2, b2)[0, 0] == 0.0


def test_silu():
    x = np.array([0.0, 1.0, -1.0, -100.0, 20.0], dtype=np.float32)
    y = silu(x)
    assert y.dtype == np.float32
    assert y[0] == 0.0 and y[4] == np.float32(20.0)
    assert y[1] == np.float32(1.0 / (1.0 + np.exp(-1.0)))     # float64, rounded once
    assert abs(y[3]) < 1e-30


def _bf16_rand(rng, shape, scale=1.0):
    return to_bf16((rng.standard_normal(shape) * scale).astype(np.float32))


def _naive_expert(xrow, wg, wu, wd):
    """One token through one expert with explicit scalar loops (float32 everywhere)."""
    h_dim, i_dim = wg.shape
    g = np.zeros(i_dim, np.float32)
    u = np.zeros(i_dim, np.float32)
    for j in range(i_dim):
        ag = np.float32(0)
        au = np.float32(0)
        for kk in range(h_dim):
            ag = np.float32(ag + np.float32(xrow[kk] * wg[kk, j]))
            au = np.float32(au + np.float32(xrow[kk] * wu[kk, j]))
        g[j], u[j] = ag, au
    act = to_bf16(np.array([np.float32(np.float32(gj / np.float32(np.float32(1) + np.exp(-gj)))
                                       * uj) for gj, uj in zip(g, u)], dtype=np.float32))
    y = np.zeros(h_dim, np.float32)
    for c in range(h_dim):
        acc = np.float32(0)
        for j in range(i_dim):
            acc = np.float32(acc + np.float32(act[j] * wd[j, c]))
        y[c] = acc
    return to_bf16(y)


def test_moe_layer_reference_matches_per_token_loop():
    rng = np.random.default_rng(42)
    p, t, h, i, e, k, s, i_s = 2, 5, 6, 4, 5, 2, 1, 3
    x = _bf16_rand(rng, (p, t, h))
    wg, wu, wd = (_bf16_rand(rng, (e, h, i), 0.5), _bf16_rand(rng, (e, h, i), 0.5),
                  _bf16_rand(rng, (e, i, h), 0.5))
    sg, su, sd = (_bf16_rand(rng, (s, h, i_s), 0.5), _bf16_rand(rng, (s, h, i_s), 0.5),
                  _bf16_rand(rng, (s, i_s, h), 0.5))
    r = generate_routing("uniform", num_gpus=p, tokens_per_gpu=t, num_experts=e, top_k=k,
                         seed=1)
    out = moe_layer_reference(x, r.topk_idx, r.topk_weight, wg, wu, wd, sg, su, sd)
    assert out.shape == (p, t, h) and out.dtype == np.float32

    ref = np.zeros((p, t, h), np.float32)
    for gp in range(p):
        for tok in range(t):
            acc = np.zeros(h, np.float32)
            for se in range(s):
                ys = _naive_expert(x[gp, tok], sg[se], su[se], sd[se])
                acc = (acc + (np.float32(1.0) * ys).astype(np.float32)).astype(np.float32)
            for kk in range(k):
                ex = r.topk_idx[gp, tok, kk]
                y = _naive_expert(x[gp, tok], wg[ex], wu[ex], wd[ex])
                acc = (acc + (r.topk_weight[gp, tok, kk] * y).astype(np.float32)).astype(
                    np.float32)
            ref[gp, tok] = acc
    assert np.array_equal(out, ref)
    assert max_abs_error(out, ref) == 0.0

    no_shared = moe_layer_reference(x, r.topk_idx, r.topk_weight, wg, wu, wd)
    assert max_abs_error(no_shared, out) > 0.0
    # one expert's FFN on a batch equals the per-row result
    rows = x.reshape(-1, h)
    batch = expert_ffn(rows, wg[0], wu[0], wd[0])
    assert np.array_equal(batch[3], _naive_expert(rows[3], wg[0], wu[0], wd[0]))


def test_max_abs_error():
    a = np.array([1.0, 2.0, np.nan, np.inf], np.float32)
    b = np.array([1.5, 2.0, np.nan, np.inf], np.float32)
    assert max_abs_error(a, b) == 0.5
    assert max_abs_error(np.zeros(0), np.zeros(0)) == 0.0
    with pytest.raises(ValueError):
        max_abs_error(np.zeros(2), np.zeros(3))
