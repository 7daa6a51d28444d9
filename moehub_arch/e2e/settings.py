"""The seed papers' end-to-end training settings as files: `moehub-sim e2e --setting FILE` reads a
setting (configs/e2e/*.yaml) - the model, the system of one pipeline stage, tokens per GPU, the
pipeline, the schemes compared, where the model file leaves the whole model's layer counts or
dense part open the setting's own, and the published figures the setting stands beside - each
value with its source or `assumption:` in the file's comments and `sources` list. Options given on
the command line win over the file's (a tiny-scale run of a setting: `--quick`, `--stages`, ...).

A setting may ask for the MoE-Hub paper's way to an end-to-end figure (`extrapolate: amdahl`):
that paper reports end-to-end speedups extrapolated from real H800 runtime breakdowns (the MoE
layers' share of a step, sped up by the layer speedup), so the command prints that estimate,
computed from the simulated baseline step's MoE share and the simulated MoE-layer speedup, beside
the simulated step's speedup (training.py).
"""
from pathlib import Path

from ..config import ConfigError
from ..config.files import display_path, read_yaml

# the keys of a setting and what each must be (a predicate and its description)
_POSITIVE = (lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
             "a positive integer")
_NAME = (lambda v: isinstance(v, str) and v != "", "a name")
_NAMES = (lambda v: isinstance(v, list) and all(isinstance(x, str) and x for x in v),
          "a list of scheme names")
_BOOL = (lambda v: isinstance(v, bool), "true or false")
KEYS = {
    "name": _NAME, "model": _NAME, "system": _NAME, "scheme": _NAME, "compare": _NAMES,
    "tokens_per_gpu": _POSITIVE, "stages": _POSITIVE, "micro_batches": _POSITIVE,
    "overlap": _BOOL, "layers": _POSITIVE, "moe_layers": (lambda v: isinstance(v, int)
                                                          and not isinstance(v, bool) and v >= 0,
                                                          "an integer >= 0"),
    "dense": (lambda v: isinstance(v, dict), "a mapping (heads, dense_ffn, norm, norm_eps, "
                                             "source)"),
    "extrapolate": (lambda v: v in ("none", "amdahl"), "none or amdahl"),
    "published": (lambda v: isinstance(v, dict), "a mapping of figure names to text"),
    "sources": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                "a list of sources (text)"),
}
REQUIRED = ("name", "model", "system", "scheme", "tokens_per_gpu", "stages", "micro_batches",
            "sources")
DENSE_KEYS = {"heads": _POSITIVE,
              "dense_ffn": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
                            "an integer >= 0"),
              "norm": (lambda v: v in ("rmsnorm", "layernorm"), "rmsnorm or layernorm"),
              "norm_eps": (lambda v: isinstance(v, float) and 0 < v < 1, "a number in (0, 1)"),
              "source": _NAME}
# the command-line options a setting fills (argparse dest -> setting key)
OPTIONS = {"model": "model", "system": "system", "scheme": "scheme", "compare": "compare",
           "tokens_per_gpu": "tokens_per_gpu", "stages": "stages",
           "micro_batches": "micro_batches", "overlap": "overlap"}


def load_setting(path):
    """The setting in `path` (a dict of KEYS); a ConfigError naming the file and key otherwise."""
    path = Path(path)
    shown = display_path(path)
    data = read_yaml(path)
    if not isinstance(data, dict) or set(data) != {"setting"} or not isinstance(data["setting"],
                                                                                dict):
        raise ConfigError(f"{shown}: expected one top-level key 'setting' holding a mapping "
                          f"(configs/e2e/*.yaml show the form)", shown)
    s = data["setting"]
    for key, value in s.items():
        if key not in KEYS:
            raise ConfigError(f"{shown}: setting.{key}: unknown key (known: "
                              f"{', '.join(KEYS)})", shown, f"setting.{key}")
        ok, want = KEYS[key]
        if not ok(value):
            raise ConfigError(f"{shown}: setting.{key}: expected {want}, found {value!r}",
                              shown, f"setting.{key}")
    missing = [k for k in REQUIRED if k not in s]
    if missing:
        raise ConfigError(f"{shown}: setting: missing {', '.join(missing)} (a setting names its "
                          f"model, system, schemes, micro-batch shape and pipeline, and its "
                          f"sources)", shown, "setting")
    if "dense" in s:
        d = s["dense"]
        for key in DENSE_KEYS:
            if key not in d:
                raise ConfigError(f"{shown}: setting.dense.{key}: missing (the attention and "
                                  f"dense layers' shape: {', '.join(DENSE_KEYS)})", shown,
                                  f"setting.dense.{key}")
        for key, value in d.items():
            ok, want = DENSE_KEYS.get(key, (None, None))
            if ok is None or not ok(value):
                raise ConfigError(f"{shown}: setting.dense.{key}: "
                                  + (f"expected {want}, found {value!r}" if ok else
                                     f"unknown key (known: {', '.join(DENSE_KEYS)})"),
                                  shown, f"setting.dense.{key}")
    if ("layers" in s) != ("moe_layers" in s) or s.get("moe_layers", 0) > s.get("layers", 0):
        raise ConfigError(f"{shown}: setting.layers / setting.moe_layers: give both, with "
                          f"moe_layers <= layers (found {s.get('layers')!r} / "
                          f"{s.get('moe_layers')!r})", shown, "setting.layers")
    return dict(s, file=shown)


def apply_setting(args, setting):
    """Fill the options the command line left unset (None) from the setting."""
    for dest, key in OPTIONS.items():
        if getattr(args, dest, None) is None and key in setting:
            setattr(args, dest, setting[key])
