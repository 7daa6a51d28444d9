"""MoE model shapes: the per-layer numbers a simulated MoE layer needs, loaded from YAML.

What it models: one Mixture-of-Experts transformer as seen by an expert-parallel MoE layer: hidden
size H, per-expert SwiGLU FFN width I, routed experts E, top-k, shared experts (count and width),
number of MoE layers and of all layers, the element type, and the router (how the top-k experts and
their weights are chosen: softmax over all logits then top-k, softmax over the top-k logits, or
DeepSeek's group-limited routing with sigmoid or softmax affinities, renormalisation and a scaling
factor).

Sources: the shipped files `workloads/models/<name>.yaml` (under `moehub_arch.paths.data_root()`)
carry the numbers of each model's public Hugging Face `config.json`; every number there is
commented with its config key, and values the config does not give are marked "assumption".

File format::

    model:
      name: deepseek_v3
      hidden: 7168
      expert_ffn: 2048
      experts: 256
      top_k: 8
      shared_experts: 1
      shared_expert_ffn: 2048     # width of each shared expert (0 if none)
      moe_layers: 58
      layers: 61
      dtype: bf16
      router:
        kind: sigmoid_group_limited
        normalize: true
        scale: 2.5
        groups: 8                 # only for *_group_limited
        top_groups: 4             # only for *_group_limited

Every problem (unknown model, missing or unknown key, wrong type, non-positive number, inconsistent
numbers) raises `ConfigError` with one paragraph naming the file, the key path (e.g.
`model.top_k`), what was expected and what was found.
"""
from __future__ import annotations

import difflib
import math
from pathlib import Path

import attrs

from .files import ConfigError, display_path, read_yaml
from ..paths import data_root

ROUTER_KINDS = ("softmax_topk", "topk_softmax", "sigmoid_group_limited", "softmax_group_limited")
GROUP_LIMITED_KINDS = ("sigmoid_group_limited", "softmax_group_limited")
DTYPES = ("bf16", "fp16", "fp32", "fp8")


@attrs.frozen
class RouterSpec:
    """How a token's top-k experts and their weights are chosen."""

    kind: str                       # one of ROUTER_KINDS
    normalize: bool                 # renormalise the chosen top-k weights to sum to 1
    scale: float = 1.0              # routed scaling factor applied after normalisation
    groups: int | None = None       # expert groups (group-limited kinds only)
    top_groups: int | None = None   # groups kept per token (group-limited kinds only)

    @property
    def group_limited(self) -> bool:
        return self.kind in GROUP_LIMITED_KINDS


@attrs.frozen
class ModelShape:
    """The shape of one MoE model (see the module docstring for the meaning of each field)."""

    name: str
    hidden: int
    expert_ffn: int
    experts: int
    top_k: int
    shared_experts: int
    shared_expert_ffn: int
    moe_layers: int
    layers: int
    dtype: str
    router: RouterSpec


def models_dir() -> Path:
    """The folder holding the shipped model files."""
    return data_root() / "workloads" / "models"


def list_models() -> list[str]:
    """Names of the shipped models (file stems of `workloads/models/*.yaml`), sorted."""
    d = models_dir()
    if not d.is_dir():
        return []
    return sorted(p.stem for p in d.glob("*.yaml"))


# ------------------------------------------------------------------------------------ checks
_MODEL_KEYS = ("name", "hidden", "expert_ffn", "experts", "top_k", "shared_experts",
               "shared_expert_ffn", "moe_layers", "layers", "dtype", "router")
_ROUTER_REQUIRED = ("kind", "normalize")
_ROUTER_KEYS = ("kind", "normalize", "scale", "groups", "top_groups")


def _found(v) -> str:
    if isinstance(v, bool):
        return f"the boolean {v}"
    if v is None:
        return "nothing (null)"
    if isinstance(v, (int, float)):
        return f"{v!r}"
    if isinstance(v, str):
        return f"the string {v!r}"
    return f"a {type(v).__name__} ({v!r})"


def _err(file: str, key: str, what: str):
    return ConfigError(f"{file}: {key}: {what}", file=file, key=key)


def _check_keys(raw: dict, allowed, required, file: str, prefix: str):
    for k in raw:
        if k not in allowed:
            close = difflib.get_close_matches(str(k), allowed, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise _err(file, f"{prefix}.{k}", f"unknown key (expected one of "
                       f"{', '.join(allowed)}), found '{k}'{hint}")
    for k in required:
        if k not in raw:
            raise _err(file, f"{prefix}.{k}", f"missing key: expected it in the '{prefix}' "
                       f"mapping, found only {', '.join(map(str, raw)) or 'no keys'}")


def _int(raw: dict, key: str, file: str, prefix: str, lo: int = 1) -> int:
    v = raw[key]
    if isinstance(v, bool) or not isinstance(v, int):
        raise _err(file, f"{prefix}.{key}", f"expected an integer >= {lo}, found {_found(v)}")
    if v < lo:
        what = "a positive integer" if lo == 1 else f"an integer >= {lo}"
        raise _err(file, f"{prefix}.{key}", f"expected {what}, found {v}")
    return v


def _str(raw: dict, key: str, file: str, prefix: str, choices=None) -> str:
    v = raw[key]
    if not isinstance(v, str) or not v:
        exp = f"one of {', '.join(choices)}" if choices else "a non-empty string"
        raise _err(file, f"{prefix}.{key}", f"expected {exp}, found {_found(v)}")
    if choices is not None and v not in choices:
        close = difflib.get_close_matches(v, choices, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise _err(file, f"{prefix}.{key}", f"expected one of {', '.join(choices)}, found "
                   f"'{v}'{hint}")
    return v


def _router(raw, file: str) -> RouterSpec:
    p = "model.router"
    if not isinstance(raw, dict):
        raise _err(file, p, f"expected a mapping with keys {', '.join(_ROUTER_KEYS)}, found "
                   f"{_found(raw)}")
    _check_keys(raw, _ROUTER_KEYS, _ROUTER_REQUIRED, file, p)
    kind = _str(raw, "kind", file, p, ROUTER_KINDS)
    normalize = raw["normalize"]
    if not isinstance(normalize, bool):
        raise _err(file, f"{p}.normalize", f"expected true or false, found {_found(normalize)}")
    scale = raw.get("scale", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) \
            or scale <= 0:
        raise _err(file, f"{p}.scale", f"expected a positive finite number (the routed scaling "
                   f"factor, 1.0 if none), found {_found(scale)}")
    groups = top_groups = None
    if kind in GROUP_LIMITED_KINDS:
        for k in ("groups", "top_groups"):
            if k not in raw:
                raise _err(file, f"{p}.{k}", f"missing key: router kind '{kind}' needs "
                           f"'groups' and 'top_groups' (n_group and topk_group in the HF "
                           f"config.json)")
        groups = _int(raw, "groups", file, p)
        top_groups = _int(raw, "top_groups", file, p)
        if top_groups > groups:
            raise _err(file, f"{p}.top_groups", f"expected at most {p}.groups ({groups}) groups "
                       f"kept per token, found {top_groups}")
    else:
        for k in ("groups", "top_groups"):
            if k in raw:
                raise _err(file, f"{p}.{k}", f"only group-limited routers "
                           f"({', '.join(GROUP_LIMITED_KINDS)}) take '{k}', found it with "
                           f"kind '{kind}'; remove it or change the kind")
    return RouterSpec(kind=kind, normalize=normalize, scale=float(scale), groups=groups,
                      top_groups=top_groups)


def _parse(data, file: str) -> ModelShape:
    if not isinstance(data, dict) or set(data) != {"model"}:
        found = (f"keys {', '.join(map(str, data))}" if isinstance(data, dict) and data
                 else _found(data))
        raise _err(file, "model", f"expected a top-level mapping with the single key 'model', "
                   f"found {found}")
    raw = data["model"]
    if not isinstance(raw, dict):
        raise _err(file, "model", f"expected a mapping with keys {', '.join(_MODEL_KEYS)}, "
                   f"found {_found(raw)}")
    p = "model"
    _check_keys(raw, _MODEL_KEYS, _MODEL_KEYS, file, p)
    name = _str(raw, "name", file, p)
    hidden = _int(raw, "hidden", file, p)
    expert_ffn = _int(raw, "expert_ffn", file, p)
    experts = _int(raw, "experts", file, p)
    top_k = _int(raw, "top_k", file, p)
    shared = _int(raw, "shared_experts", file, p, lo=0)
    shared_ffn = _int(raw, "shared_expert_ffn", file, p, lo=0)
    moe_layers = _int(raw, "moe_layers", file, p)
    layers = _int(raw, "layers", file, p)
    dtype = _str(raw, "dtype", file, p, DTYPES)
    router = _router(raw["router"], file)

    if top_k > experts:
        raise _err(file, f"{p}.top_k", f"expected at most model.experts ({experts}) experts per "
                   f"token, found {top_k}")
    if (shared == 0) != (shared_ffn == 0):
        raise _err(file, f"{p}.shared_expert_ffn", f"expected 0 exactly when "
                   f"model.shared_experts is 0 (found shared_experts {shared}), found "
                   f"{shared_ffn}")
    if moe_layers > layers:
        raise _err(file, f"{p}.moe_layers", f"expected at most model.layers ({layers}), found "
                   f"{moe_layers}")
    if router.group_limited:
        if experts % router.groups:
            raise _err(file, f"{p}.router.groups", f"expected a divisor of model.experts "
                       f"({experts}) so that every group holds the same number of experts, "
                       f"found {router.groups}")
        per_group = experts // router.groups
        if top_k > router.top_groups * per_group:
            raise _err(file, f"{p}.router.top_groups", f"expected enough kept groups to hold "
                       f"model.top_k ({top_k}) experts (each group holds {per_group}), found "
                       f"{router.top_groups} groups = {router.top_groups * per_group} experts")
    return ModelShape(name=name, hidden=hidden, expert_ffn=expert_ffn, experts=experts,
                      top_k=top_k, shared_experts=shared, shared_expert_ffn=shared_ffn,
                      moe_layers=moe_layers, layers=layers, dtype=dtype, router=router)


def with_top_k(model: ModelShape, top_k: int, key="workload.layer.top_k") -> ModelShape:
    """The model with `top_k` experts per token in place of its own (0: unchanged); a value the
    model's experts or its group-limited router cannot give is a ConfigError naming `key`."""
    if not top_k or top_k == model.top_k:
        return model
    if top_k > model.experts:
        raise ConfigError(f"{key}: expected at most {model.name}'s {model.experts} experts per "
                          f"token, found {top_k}", key=key)
    r = model.router
    if r.group_limited and top_k > r.top_groups * (model.experts // r.groups):
        raise ConfigError(f"{key}: {model.name}'s router keeps {r.top_groups} groups of "
                          f"{model.experts // r.groups} experts per token, fewer than {top_k}",
                          key=key)
    return attrs.evolve(model, top_k=top_k)


def _resolve(name_or_path) -> Path:
    if isinstance(name_or_path, Path):
        return name_or_path
    s = str(name_or_path)
    looks_like_path = ("/" in s or "\\" in s or s.endswith((".yaml", ".yml")) or s.startswith("."))
    if looks_like_path:
        return Path(s).expanduser()
    p = models_dir() / f"{s}.yaml"
    if not p.is_file():
        known = list_models()
        close = difflib.get_close_matches(s, known, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        shown = display_path(p)
        raise ConfigError(f"{shown}: model '{s}' is not a shipped model (expected one of "
                          f"{', '.join(known) or 'none: no model files found'}, or a path to a "
                          f"model YAML file).{hint}", file=shown, key="model")
    return p


def load_model(name_or_path) -> ModelShape:
    """Load a model shape: a bare name (e.g. 'deepseek_v3') means the shipped
    `workloads/models/<name>.yaml`; anything with a '/' or a .yaml/.yml suffix, or a Path, is a file.
    """
    path = _resolve(name_or_path)
    data = read_yaml(path)
    return _parse(data, display_path(path))
