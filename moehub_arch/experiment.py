"""Experiments named by what users think in: one MoE layer of a model, at a token count, under a
scheme, on a system (`moehub-sim layer`, `moehub_arch.layer`).

The layer config is composed from the shipped pieces instead of one YAML file per point: the system
file (`configs/systems/NAME.yaml`, or a file of the user's extending one), the layer settings shared
by every system (`configs/experiments/layer/layer_common.yaml`: timing mode, uniform routing, tile
sizes and thread blocks per GPU), a MoE-Hub design (`configs/hub/designs/published.yaml`, the
authors' design, unless another is named) and the model (`workloads/models/NAME.yaml` or a path),
with the token count, top-k and routing as values. The composed file is what the shipped
`configs/experiments/layer/base_<system>.yaml` + `<model>_<tokens>_<scheme>_<system>.yaml` pairs
spell out, so a composed run of a shipped point gives the same stats.
"""
from pathlib import Path

from .config import ConfigError
from .config.models import load_model, with_top_k
from .paths import data_root

LAYER_COMMON = "configs/experiments/layer/layer_common.yaml"
HUB_DESIGNS = "configs/hub/designs"
SYSTEMS = "configs/systems"


def _names(folder):
    return sorted(p.stem for p in (data_root() / folder).glob("*.yaml"))


def system_path(system) -> Path:
    """The system file for a name (`hgx_h800`: configs/systems/hgx_h800.yaml) or a path."""
    p = Path(system)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        return p.resolve()
    shipped = data_root() / SYSTEMS / f"{system}.yaml"
    if shipped.is_file():
        return shipped
    raise ConfigError(f"--system {system}: neither a shipped system (configs/systems: "
                      f"{', '.join(_names(SYSTEMS))}) nor a system file", key="--system")


def hub_design_path(design) -> Path:
    p = data_root() / HUB_DESIGNS / f"{design}.yaml"
    if not p.is_file():
        raise ConfigError(f"--hub-design {design}: no such design (configs/hub/designs: "
                          f"{', '.join(_names(HUB_DESIGNS))})", key="--hub-design")
    return p


def layer_config_text(model, tokens, scheme, system="dgx_h100", top_k=None, routing=None,
                      hub_design="published") -> str:
    """The YAML text of one MoE layer experiment (see the module docstring); the model, system and
    hub design are checked here, the rest when the text is loaded as a config."""
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens <= 0:
        raise ConfigError(f"--tokens {tokens}: expected a positive number of tokens per GPU",
                          key="--tokens")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool)
                              or top_k <= 0):
        # 0 would read as "the model's own top-k" in a config file; asked for by name it is a
        # request for no experts at all, so it is refused rather than silently replaced
        raise ConfigError(f"--top-k {top_k}: expected a positive number of experts per token "
                          f"(leave --top-k out for the model's own)", key="--top-k")
    m = load_model(model)      # a clear error naming the shipped models for a wrong name
    with_top_k(m, top_k or 0, key="--top-k")
    model_ref = str(Path(model).resolve()) if Path(model).suffix in (".yaml", ".yml") else model
    files = [system_path(system), data_root() / LAYER_COMMON, hub_design_path(hub_design)]
    lines = [f"# moehub-sim layer --model {model} --tokens {tokens} --scheme {scheme} "
             f"--system {system}" + (f" --top-k {top_k}" if top_k else "")
             + (f" --routing {routing}" if routing else "")
             + (f" --hub-design {hub_design}" if hub_design != "published" else ""),
             "extends: [" + ", ".join(f"'{f}'" for f in files) + "]",
             f"scheme: {scheme}",
             "workload:",
             "  layer:",
             f"    model: '{model_ref}'",
             f"    tokens_per_gpu: {tokens}"]
    if top_k:
        lines.append(f"    top_k: {top_k}")
    if routing:
        lines.append(f"    routing: {{kind: {routing}}}")
    return "\n".join(lines) + "\n"


def write_layer_config(path, **kw) -> Path:
    """Write the composed layer config to `path` (a run folder keeps it as layer.yaml, so
    `moehub-sim run OUTDIR/layer.yaml` repeats the run)."""
    path, text = Path(path), layer_config_text(**kw)   # checked before anything is written
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
