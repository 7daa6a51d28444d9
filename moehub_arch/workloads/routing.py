"""Token-to-expert routing generators for an expert-parallel MoE layer.

What it models: the output of the router of one MoE layer on every GPU: for each of the
`tokens_per_gpu` tokens of each of the `num_gpus` GPUs, `top_k` distinct expert ids (global ids in
[0, num_experts)) and their router weights. Kinds (uniform and balanced as public benchmarks
such as DeepEP's use them; skewed and group-limited as production routers behave):

- `uniform`: every token draws k distinct experts uniformly at random (the DeepEP benchmarks' case);
- `balanced`: every expert receives exactly num_gpus*tokens_per_gpu*top_k/num_experts assignments
  (loads differ by at most 1 when that is not an integer), experts distinct per token;
- `skewed`: Zipf-like expert popularity p_e ~ 1/(rank_e+1)^s over a random permutation of the
  experts; s is found by bisection so that the Gini coefficient of the *expected* per-expert load
  equals the target (assumption: about 0.1-0.3 on real text, the range published per-expert load
  measurements suggest; not calibrated here). A token cannot pick an expert twice, so
  the expected load of an expert is its inclusion probability pi_e = min(1, c*p_e) (c such that
  sum(pi) = k); tokens are drawn by randomised systematic sampling (random expert order per token,
  one uniform offset, k unit-spaced points on the cumulative pi), which gives exactly these
  inclusion probabilities and k distinct experts;
- `group_limited`: DeepSeek's router. Per token, logits ~ N(0, 1); affinity = sigmoid(logit)
  (sigmoid routers, DeepSeek-V3) or softmax over all experts (softmax routers, DeepSeek-V2); the
  experts are split into `router.groups` equal groups; a group's score is the sum of its top-2
  affinities for sigmoid routers (DeepSeek-V3 `noaux_tc`) and its largest affinity for softmax
  routers (DeepSeek-V2 `group_limited_greedy`); the `router.top_groups` best groups are kept and
  the top-k experts by affinity are taken inside them; weights = the chosen affinities, divided by
  their sum if `router.normalize`, times `router.scale` (DeepSeek-V3: normalised, x2.5);
- `normal`: the seeds' load-imbalance knob (MoE-Hub, arXiv 2605.05888: per-expert load drawn
  with a standard deviation of 0-0.05, 0.032 typical). Once per layer, every expert's probability
  is drawn p_e = 1/E + N(0, std^2); probabilities below zero are clipped to zero and the vector is
  renormalised to sum 1 (so std = 0 is exactly uniform, and a large std leaves some experts
  unused); then every token draws its k distinct experts by successive sampling without
  replacement in proportion to p (Gumbel top-k: the k largest log p_e + Gumbel noise). The clip
  shifts the realised mean above 1/E when many experts clip (std comparable to 1/E, e.g. 60
  experts at std 0.05): the drawn std is the knob, not the realised one. Fewer than k experts left
  with p > 0 is an error (a larger std than the model's expert count allows);
- `trace`: replay a routing trace file (see `load_trace`).

Weights of the non-group-limited kinds come from random N(0, 1) logits of all experts pushed
through the router spec (`moehub_arch.config.models.RouterSpec`): softmax over all logits then
the chosen ones (`softmax_topk`), softmax over the chosen logits (`topk_softmax`), sigmoid of the
chosen logits (`sigmoid_group_limited`), optional renormalisation, times the scale; with no router,
softmax over the chosen logits. The expert choice itself does not follow the logits in these kinds
(the kind decides the choice; the logits only give realistic weights).

All generators are deterministic: `numpy.random.default_rng(seed)`.
"""
from __future__ import annotations

import json
import zipfile
import zlib
from pathlib import Path

import attrs
import numpy as np

from ..config.files import ConfigError, display_path
from ..inputs import InputFileError, read_text

KINDS = ("uniform", "balanced", "skewed", "group_limited", "normal", "trace")
KEY = "workload.layer.routing"
MAX_GINI = 0.9


@attrs.frozen(eq=False)
class Routing:
    """Routing of one MoE layer: int64 `topk_idx` and float32 `topk_weight`, both
    [num_gpus, tokens_per_gpu, top_k]; the experts of one token are distinct."""

    topk_idx: np.ndarray
    topk_weight: np.ndarray

    @property
    def num_gpus(self) -> int:
        return self.topk_idx.shape[0]

    @property
    def tokens_per_gpu(self) -> int:
        return self.topk_idx.shape[1]

    @property
    def top_k(self) -> int:
        return self.topk_idx.shape[2]


# ------------------------------------------------------------------------------------ helpers
def _bad(key: str, what: str, file: str | None = None):
    where = f"{file}: " if file else ""
    return ConfigError(f"{where}{key}: {what}", file=file, key=key)


def _check_dims(num_gpus, tokens_per_gpu, num_experts, top_k):
    for name, v in (("num_gpus", num_gpus), ("tokens_per_gpu", tokens_per_gpu),
                    ("num_experts", num_experts), ("top_k", top_k)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise _bad(KEY, f"{name}: expected a positive integer, found {v!r}")
    if top_k > num_experts:
        raise _bad(KEY, f"top_k: expected at most num_experts ({num_experts}) distinct experts "
                   f"per token, found {top_k}")


def _softmax(x: np.ndarray, axis=-1) -> np.ndarray:
    x = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(x)
    return e / np.sum(e, axis=axis, keepdims=True)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _weights(logits: np.ndarray, idx: np.ndarray, router) -> np.ndarray:
    """Router weights [N, k] (float64) of the chosen experts `idx` [N, k] from logits [N, E]."""
    chosen = np.take_along_axis(logits, idx, axis=1).astype(np.float64)
    if router is None:
        return _softmax(chosen)
    kind = router.kind
    if kind == "topk_softmax":
        w = _softmax(chosen)
    elif kind in ("softmax_topk", "softmax_group_limited"):
        w = np.take_along_axis(_softmax(logits.astype(np.float64)), idx, axis=1)
    elif kind == "sigmoid_group_limited":
        w = _sigmoid(chosen)
    else:
        raise _bad("model.router.kind", f"expected a known router kind, found {kind!r}")
    if router.normalize:
        w = w / np.sum(w, axis=1, keepdims=True)
    return w * float(router.scale)


def _finish(idx: np.ndarray, w: np.ndarray, num_gpus: int, tokens_per_gpu: int) -> Routing:
    k = idx.shape[-1]
    return Routing(topk_idx=np.ascontiguousarray(idx, dtype=np.int64)
                   .reshape(num_gpus, tokens_per_gpu, k),
                   topk_weight=np.ascontiguousarray(w, dtype=np.float32)
                   .reshape(num_gpus, tokens_per_gpu, k))


# --------------------------------------------------------------------------------- statistics
def expert_load(routing: Routing, num_experts: int) -> np.ndarray:
    """Number of (token, slot) assignments per expert, int64 [num_experts]."""
    return np.bincount(np.asarray(routing.topk_idx).ravel(), minlength=num_experts)[:num_experts]


def gini(loads) -> float:
    """Gini coefficient of non-negative loads: 0 for equal loads, -> 1 when one holds all."""
    x = np.sort(np.asarray(loads, dtype=np.float64).ravel())
    n = x.size
    total = x.sum()
    if n == 0 or total <= 0:
        return 0.0
    i = np.arange(1, n + 1, dtype=np.float64)
    return float(max(0.0, 2.0 * np.sum(i * x) / (n * total) - (n + 1) / n))


# ------------------------------------------------------------------------------------ uniform
def _uniform(rng, n, e, k):
    keys = rng.random((n, e))
    return np.argsort(keys, axis=1, kind="stable")[:, :k]


# ----------------------------------------------------------------------------------- balanced
def _balanced(rng, n, e, k):
    """A cyclic stream of per-round random permutations of the experts, cut into tokens of k;
    a token straddling two rounds gets a repaired head of the next round so its experts stay
    distinct. Then tokens and the slots inside each token are shuffled."""
    total = n * k
    rounds = -(-total // e)
    perms = np.argsort(rng.random((rounds, e)), axis=1, kind="stable")
    if e % k:   # some tokens straddle round boundaries: repair the next round's head
        for r in range(1, rounds):
            a = (r * e) % k                 # slots of the straddling token in round r-1
            if a == 0:
                continue
            tail = set(perms[r - 1, e - a:].tolist())
            head_len = k - a
            row = perms[r]
            bad = [j for j in range(head_len) if row[j] in tail]
            if not bad:
                continue
            good = [j for j in range(head_len, e) if row[j] not in tail]
            for j, g in zip(bad, good):
                row[j], row[g] = row[g], row[j]
    stream = perms.ravel()[:total]
    idx = stream.reshape(n, k)
    idx = idx[rng.permutation(n)]
    order = np.argsort(rng.random((n, k)), axis=1, kind="stable")
    return np.take_along_axis(idx, order, axis=1)


# ------------------------------------------------------------------------------------- skewed
def _inclusion(q: np.ndarray, k: int) -> np.ndarray:
    """pi_r = min(1, c*q_r) with sum(pi) = k, for q sorted in decreasing order (water filling)."""
    e = q.size
    suffix = np.cumsum(q[::-1])[::-1]
    for m in range(k):          # m experts saturate at 1
        if suffix[m] <= 0:
            break
        c = (k - m) / suffix[m]
        if c * q[m] <= 1.0:
            pi = np.minimum(1.0, c * q)
            pi[:m] = 1.0
            return pi
    pi = np.zeros(e)
    pi[:k] = 1.0
    return pi


def _zipf_inclusion(s: float, e: int, k: int) -> np.ndarray:
    q = 1.0 / np.arange(1, e + 1, dtype=np.float64) ** s
    return _inclusion(q / q.sum(), k)


S_MAX = 16.0


def zipf_exponent(target_gini: float, num_experts: int, top_k: int) -> float:
    """The Zipf exponent s whose expected per-expert load (inclusion probabilities, see the module
    docstring) has Gini coefficient `target_gini`; bisection on s in [0, 16]."""
    if target_gini <= 0:
        return 0.0
    hi_g = gini(_zipf_inclusion(S_MAX, num_experts, top_k))
    if target_gini > hi_g + 1e-9:
        raise _bad(f"{KEY}.gini", f"expected a Gini target this layer can reach: with {top_k} "
                   f"distinct experts per token out of {num_experts} the expected load's Gini "
                   f"is at most {hi_g:.3f}, found {target_gini}")
    lo, hi = 0.0, S_MAX
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if gini(_zipf_inclusion(mid, num_experts, top_k)) < target_gini:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10:
            break
    return 0.5 * (lo + hi)


def _skewed(rng, n, e, k, target):
    s = zipf_exponent(target, e, k)
    pi_rank = _zipf_inclusion(s, e, k)
    pi = np.empty(e)
    pi[rng.permutation(e)] = pi_rank          # expert rng.permutation(e)[r] has rank r
    order = np.argsort(rng.random((n, e)), axis=1, kind="stable")
    cum = np.cumsum(pi[order], axis=1)
    cum[:, -1] = k + 0.5                      # guard against rounding: the sum is k
    u = rng.random(n)
    points = u[:, None] + np.arange(k, dtype=np.float64)[None, :]          # [n, k] in [0, k)
    # Position whose interval [cum[j-1], cum[j]) contains each point: one searchsorted over all
    # rows, each row shifted by row * (k + 1) so the rows do not overlap.
    shift = np.arange(n, dtype=np.float64)[:, None] * (k + 1)
    pos = np.searchsorted((cum + shift).ravel(), (points + shift).ravel(), side="right")
    pos = pos.reshape(n, k) - np.arange(n, dtype=np.int64)[:, None] * e
    # Rounding could in principle put two points in one interval (pi_e == 1): push forward.
    for m in range(1, k):
        pos[:, m] = np.maximum(pos[:, m], pos[:, m - 1] + 1)
    pos = np.minimum(pos, e - 1)
    idx = np.take_along_axis(order, pos, axis=1)
    slot = np.argsort(rng.random((n, k)), axis=1, kind="stable")
    return np.take_along_axis(idx, slot, axis=1)


# ------------------------------------------------------------------------------------- normal
def expert_probabilities_normal(rng, e, k, std):
    """Per-expert probabilities of the `normal` kind: 1/E + N(0, std^2), clipped at 0,
    renormalised (module docstring)."""
    if isinstance(std, bool) or not isinstance(std, (int, float, np.integer, np.floating)) \
            or not np.isfinite(std) or std < 0:
        raise _bad(f"{KEY}.std", f"expected a non-negative number (the standard deviation of the "
                   f"per-expert probability around 1/num_experts; the MoE-Hub paper uses 0-0.05), "
                   f"found {std!r}")
    p = 1.0 / e + rng.normal(0.0, float(std), e) if std > 0 else np.full(e, 1.0 / e)
    p = np.clip(p, 0.0, None)
    if int(np.count_nonzero(p)) < k:
        raise _bad(f"{KEY}.std", f"std {std} leaves {int(np.count_nonzero(p))} of {e} experts "
                   f"with a positive probability (1/{e} = {1 / e:.4g} plus the draw, clipped at 0), "
                   f"fewer than top-k ({k}); use a smaller std")
    return p / p.sum()


def _normal(rng, n, e, k, std):
    p = expert_probabilities_normal(rng, e, k, std)
    with np.errstate(divide="ignore"):
        logp = np.log(p)
    keys = logp[None, :] + rng.gumbel(size=(n, e))
    # the k largest keys, in decreasing order (slot 0 = the strongest choice)
    top = np.argpartition(-keys, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(keys, top, axis=1), axis=1, kind="stable")
    return np.take_along_axis(top, order, axis=1)


# ------------------------------------------------------------------------------ group limited
def _group_limited(rng, n, e, k, router):
    if router is None or not getattr(router, "group_limited", False):
        found = "no router" if router is None else f"router kind '{router.kind}'"
        raise _bad(f"{KEY}.kind", "expected a group-limited router (sigmoid_group_limited or "
                   f"softmax_group_limited, with groups and top_groups) for routing kind "
                   f"'group_limited', found {found}")
    g, tg = router.groups, router.top_groups
    if e % g or tg > g or k > tg * (e // g):
        raise _bad(f"{KEY}.kind", f"expected num_experts ({e}) divisible by router.groups ({g}) "
                   f"and top_k ({k}) <= router.top_groups ({tg}) x experts per group")
    logits = rng.standard_normal((n, e))
    if router.kind == "sigmoid_group_limited":
        aff = _sigmoid(logits)
    else:
        aff = _softmax(logits)
    per = e // g
    grouped = aff.reshape(n, g, per)
    if router.kind == "sigmoid_group_limited" and per >= 2:
        top2 = -np.partition(-grouped, 1, axis=2)[:, :, :2]
        score = top2.sum(axis=2)
    else:
        score = grouped.max(axis=2)
    keep = np.argsort(-score, axis=1, kind="stable")[:, :tg]              # [n, tg]
    mask = np.zeros((n, g), dtype=bool)
    np.put_along_axis(mask, keep, True, axis=1)
    masked = np.where(np.repeat(mask, per, axis=1), aff, -np.inf)
    idx = np.argsort(-masked, axis=1, kind="stable")[:, :k]
    w = np.take_along_axis(aff, idx, axis=1)
    if router.normalize:
        w = w / w.sum(axis=1, keepdims=True)
    return idx, w * float(router.scale)


# -------------------------------------------------------------------------------------- trace
def _as_array(obj, what: str, shown: str) -> np.ndarray:
    try:
        a = np.asarray(obj)
    except (ValueError, TypeError):
        a = None
    if a is None or a.dtype == object:
        raise _bad(f"{KEY}.trace", f"{what} is not a rectangular numeric array (rows of "
                   f"different lengths or non-numeric entries)", shown)
    return a


def load_trace(path, *, num_gpus: int, tokens_per_gpu: int, num_experts: int,
               top_k: int) -> Routing:
    """Read and validate a routing trace file.

    Formats: `.npy` holding an integer array [num_gpus*tokens_per_gpu, top_k] or
    [num_gpus, tokens_per_gpu, top_k] of expert ids (weights are then 1/top_k); `.npz` with array
    `topk_idx` and optional `topk_weight` of the same shape; `.json` object
    {"topk_idx": [[...], ...], "topk_weight": [[...], ...]} (`topk_weight` optional).
    Problems raise `ConfigError` naming the file and what is wrong.
    """
    p = Path(path)
    shown = display_path(p)
    key = f"{KEY}.trace"
    suffix = p.suffix.lower()
    if suffix not in (".npy", ".npz", ".json"):
        raise _bad(key, f"expected a trace file ending in .npy, .npz or .json, found "
                   f"'{p.name}'", shown)
    if not p.is_file():
        raise _bad(key, "cannot read the trace file (no such file)", shown)
    weight = None
    try:
        if suffix == ".npy":
            idx = np.load(p, allow_pickle=False)
        elif suffix == ".npz":
            with np.load(p, allow_pickle=False) as z:
                names = list(z.files)
                if "topk_idx" not in names:
                    raise _bad(key, f"not a routing trace: expected an array named 'topk_idx' "
                               f"(and optionally 'topk_weight'), found arrays "
                               f"{', '.join(names) or 'none'}", shown)
                idx = z["topk_idx"]
                weight = z["topk_weight"] if "topk_weight" in names else None
        else:
            try:
                data = json.loads(read_text(p, "routing trace", shown))
            except InputFileError as e:
                raise _bad(key, str(e).partition(": ")[2], shown) from None
            if not isinstance(data, dict) or "topk_idx" not in data:
                found = (f"keys {', '.join(map(str, data))}" if isinstance(data, dict)
                         else f"a JSON {type(data).__name__}")
                raise _bad(key, f"not a routing trace: expected a JSON object with key "
                           f"'topk_idx' (and optionally 'topk_weight'), found {found}", shown)
            idx = _as_array(data["topk_idx"], "topk_idx", shown)
            if data.get("topk_weight") is not None:
                weight = _as_array(data["topk_weight"], "topk_weight", shown)
    except ConfigError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
        kind = {".npy": "a NumPy .npy array", ".npz": "a NumPy .npz archive",
                ".json": "JSON"}[suffix]
        raise _bad(key, f"cannot read the trace file as {kind} ({e})", shown) from None

    n = num_gpus * tokens_per_gpu
    shapes = ((n, top_k), (num_gpus, tokens_per_gpu, top_k))
    if tuple(idx.shape) not in shapes:
        raise _bad(key, f"topk_idx has the wrong shape: expected {shapes[0]} (num_gpus x "
                   f"tokens_per_gpu = {n} tokens, top_k = {top_k}) or {shapes[1]}, found "
                   f"{tuple(idx.shape)}", shown)
    flat = idx.reshape(n, top_k)
    if flat.dtype.kind == "b" or flat.dtype.kind not in "iuf":
        raise _bad(key, f"topk_idx must hold integer expert ids, found dtype {flat.dtype}", shown)
    if flat.dtype.kind == "f":
        ok = np.isfinite(flat) & (flat == np.round(flat))
        if not ok.all():
            t, j = np.argwhere(~ok)[0]
            raise _bad(key, f"topk_idx must hold integer expert ids, found the non-integer "
                       f"{flat[t, j]!r} at token {t}, slot {j}", shown)
        flat = flat.astype(np.int64)
    flat = flat.astype(np.int64, copy=False)
    bad = (flat < 0) | (flat >= num_experts)
    if bad.any():
        t, j = np.argwhere(bad)[0]
        raise _bad(key, f"expert id out of range [0, {num_experts}): token {t} (GPU "
                   f"{t // tokens_per_gpu}, token {t % tokens_per_gpu}), slot {j} has "
                   f"{flat[t, j]}", shown)
    srt = np.sort(flat, axis=1)
    dup = (srt[:, 1:] == srt[:, :-1]).any(axis=1)
    if dup.any():
        t = int(np.argmax(dup))
        s = srt[t]
        e = int(s[1:][s[1:] == s[:-1]][0])
        raise _bad(key, f"token {t} (GPU {t // tokens_per_gpu}, token {t % tokens_per_gpu}) "
                   f"names expert {e} more than once ({flat[t].tolist()}); the top-k experts "
                   f"of a token must be distinct", shown)
    if weight is None:
        w = np.full((n, top_k), 1.0 / top_k)
    else:
        if tuple(weight.shape) not in shapes:
            raise _bad(key, f"topk_weight has the wrong shape: expected {tuple(idx.shape)} "
                       f"like topk_idx, found {tuple(weight.shape)}", shown)
        if weight.dtype.kind not in "iuf" or weight.dtype.kind == "b":
            raise _bad(key, f"topk_weight must hold numbers, found dtype {weight.dtype}", shown)
        w = weight.reshape(n, top_k).astype(np.float64)
        if not np.isfinite(w).all():
            t, j = np.argwhere(~np.isfinite(w))[0]
            raise _bad(key, f"topk_weight must be finite, found {w[t, j]} at token {t}, "
                       f"slot {j}", shown)
        if (w < 0).any():
            t, j = np.argwhere(w < 0)[0]
            raise _bad(key, f"topk_weight must be non-negative, found {w[t, j]} at token {t}, "
                       f"slot {j}", shown)
    return _finish(flat, w, num_gpus, tokens_per_gpu)


def write_trace(path, routing: Routing) -> None:
    """Write `routing` as a `.npz` trace (arrays `topk_idx` int64 and `topk_weight` float32,
    [num_gpus, tokens_per_gpu, top_k]) exactly at `path`."""
    with open(Path(path), "wb") as f:
        np.savez(f, topk_idx=np.asarray(routing.topk_idx, dtype=np.int64),
                 topk_weight=np.asarray(routing.topk_weight, dtype=np.float32))


# --------------------------------------------------------------------------------- entry point
def generate_routing(kind: str, *, num_gpus: int, tokens_per_gpu: int, num_experts: int,
                     top_k: int, seed: int, router=None, gini: float = 0.2,
                     trace=None, std: float = 0.032) -> Routing:
    """Generate (or replay) the routing of one MoE layer; see the module docstring for kinds.

    `router` is a `RouterSpec` (needed by `group_limited`, shapes the weights of the others);
    `gini` is the `skewed` target in [0, 0.9]; `std` the `normal` kind's standard deviation;
    `trace` the file `trace` replays.
    """
    if kind not in KINDS:
        raise _bad(f"{KEY}.kind", f"expected one of {', '.join(KINDS)}, found {kind!r}")
    _check_dims(num_gpus, tokens_per_gpu, num_experts, top_k)
    if kind == "trace":
        if trace is None:
            raise _bad(f"{KEY}.trace", "routing kind 'trace' needs a trace file, found none")
        return load_trace(trace, num_gpus=num_gpus, tokens_per_gpu=tokens_per_gpu,
                          num_experts=num_experts, top_k=top_k)
    n = num_gpus * tokens_per_gpu
    rng = np.random.default_rng(seed)
    if kind == "group_limited":
        idx, w = _group_limited(rng, n, num_experts, top_k, router)
        return _finish(idx, w, num_gpus, tokens_per_gpu)
    if kind == "uniform":
        idx = _uniform(rng, n, num_experts, top_k)
    elif kind == "balanced":
        idx = _balanced(rng, n, num_experts, top_k)
    elif kind == "normal":
        idx = _normal(rng, n, num_experts, top_k, std)
    else:
        g = gini
        if isinstance(g, bool) or not isinstance(g, (int, float, np.integer, np.floating)) \
                or not (0.0 <= g <= MAX_GINI):
            raise _bad(f"{KEY}.gini", f"expected a number in [0, {MAX_GINI}] (real text: about "
                       f"0.1-0.3), found {g!r}")
        idx = _skewed(rng, n, num_experts, top_k, float(g))
    logits = rng.standard_normal((n, num_experts), dtype=np.float32)
    return _finish(idx, _weights(logits, idx, router), num_gpus, tokens_per_gpu)
