"""Load a YAML configuration into a validated, frozen `Config`.

Steps: read the file and every file it `extends`, deep-merge them (the extending file wins;
mappings merge, lists and scalars replace), put the system a `system: FILE` reference (or
`--system FILE`) names in place of the system descriptions the chain extends, apply
`--set key.path=value` overrides, convert every value against the schema (schema.py: units, types,
ranges, did-you-mean for unknown keys), check cross-field rules, and resolve every file path to an
absolute one. Relative paths follow one rule (moehub_arch/paths.py): the naming file's folder first,
then the shipped data folders.

When a file listed later in an `extends:` list inherits a value that overrides a key an earlier
entry set (the classic accident: `extends: [mysys.yaml, configs/ubench/x.yaml]`, where x.yaml's own
base system puts its links back), the loader warns, listing the keys; `Config.load_warnings` keeps
the warnings and `config.json` records where every value came from (`value_sources`).

The loader remembers which file (or `--set`) set each key, so every error is one `ConfigError`
paragraph naming that file, the dotted key path, what was expected and what was found.

The steps live by concept: the extends chain and its merging (merge.py), the conversion against
the schema (convert.py), the cross-field rules (rules.py); here are the entry points, the
multi-node count, the fabric check and the resolution of the file paths a config names.
"""
import re
from pathlib import Path
from typing import Sequence

import attrs

from ..paths import find_user_file
from .convert import Ctx, convert
from .effective import effective_value_warnings
from .files import ConfigError, display_path
from .merge import Source, apply_override, collect, compose, merge_into, override_warnings
from .rules import check_config, check_hub_sizes, check_layer, check_paired
from .schema import Config


# ------------------------------------------------------------------------------ entry point
def load_config(path, overrides: Sequence[str] = (), system_file=None) -> Config:
    """Load, merge, override, convert and check a config file; raise ConfigError on bad input.

    `system_file`: run the config on this system (a file whose only section is `system:`, as
    configs/systems/*.yaml): it takes the place of the system descriptions the config extends, as
    a `system: FILE` line in the config would (`moehub-sim run CONFIG --system FILE`)."""
    path = Path(path).expanduser()
    if not path.is_file():
        shown = display_path(path)
        what = ("is a directory, not a config file" if path.is_dir() else
                "is not a regular file (a config is a YAML file)" if path.exists() else
                "config file not found")
        raise ConfigError(f"{shown}: {what}", shown)
    path = path.resolve()
    if system_file is not None:
        found, tried = find_user_file(system_file, Path.cwd(), ("", "configs"))
        if found is None:
            raise ConfigError(f"--system {system_file}: file not found (tried "
                              f"{', '.join(display_path(c) for c in tried)})", "--system")
        system_file = found
    order: list = []
    collect(path, (), order)
    order = compose(order, system_file)
    data: dict = {}
    prov: dict = {}
    files: list = []
    warnings: list = []
    for i, e in enumerate(order):
        warnings += override_warnings(order, data, e.raw, i, prov)
        merge_into(data, e.raw, Source(display_path(e.path), e.path.parent, i), prov)
        if str(e.path) not in files:
            files.append(str(e.path))
    for text in overrides:
        apply_override(data, text, prov)
    ctx = Ctx(prov, [display_path(Path(f)) for f in files], display_path(path))
    cfg = _finish(convert(Config, data, (), ctx), ctx, files)
    warnings += effective_value_warnings(cfg)
    return attrs.evolve(cfg, load_warnings=tuple(warnings))


def _nodes(cfg: Config, ctx: Ctx) -> Config:
    """A multi-node system: system.num_gpus = nodes x GPUs per node."""
    nodes = cfg.system.nodes
    if nodes.count > 1 and not nodes.gpus_per_node:
        raise ctx.error(("system", "nodes", "gpus_per_node"),
                        f"system.nodes.count is {nodes.count}: expected the GPUs of one node, "
                        f"found none")
    if nodes.gpus_per_node:
        cfg = attrs.evolve(cfg, system=attrs.evolve(
            cfg.system, num_gpus=nodes.count * nodes.gpus_per_node))
    return cfg


def _check_fabric(cfg: Config, ctx: Ctx):
    """The fabric builds and every GPU reaches every other (after the link checks of check_config)."""
    from ..topology import TopologyError, build_fabric, build_routes
    try:
        build_routes(cfg, build_fabric(cfg))
    except TopologyError as e:
        key, _, _ = str(e).partition(":")
        raise ctx.error(tuple(key.split(".")), str(e).partition(": ")[2]) from None


def _finish(cfg: Config, ctx: Ctx, files) -> Config:
    cfg = _nodes(cfg, ctx)
    check_config(cfg, ctx)
    _check_fabric(cfg, ctx)
    check_layer(cfg, ctx)
    cfg = _resolve_kernel_files(cfg, ctx)
    cfg = _resolve_layer_files(cfg, ctx)
    check_hub_sizes(cfg, ctx)
    check_paired(cfg, ctx)
    sources = (((), ctx.main),) + tuple((k, src.label) for k, src in ctx.prov.items())
    return attrs.evolve(cfg, source_files=tuple(files), key_sources=sources)


# what Config.to_dict adds beside the sections (config.json), ignored when reading one back
JSON_ONLY_KEYS = ("units", "key_units", "source_files", "value_sources", "load_warnings")


def config_from_dict(data: dict, label: str) -> Config:
    """A Config from `Config.to_dict()` output (quantities as plain numbers in base units), checked
    like a YAML file; `label` names it in errors (e.g. a checkpoint's input_config.json)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: expected a JSON object of config sections", label)
    files = list(data.get("source_files") or ())
    data = {k: v for k, v in data.items() if k not in JSON_ONLY_KEYS}
    src = Source(label, Path.cwd())
    ctx = Ctx({(k,): src for k in data}, [label], label, base_units=True)
    return _finish(convert(Config, data, (), ctx), ctx, files)


_ERROR_KEY = re.compile(r"((?:system|scheme|workload|run|stats|trace|debug)(?:\.[A-Za-z0-9_]+|\[\d+\])*)")


def locate(cfg: Config, message: str) -> str:
    """`message` prefixed with the file that set the key it starts with (errors found after
    loading: builder, MoE layer); unchanged if it already starts with something else."""
    m = _ERROR_KEY.match(message)
    if not m:
        return message
    return f"{cfg.where(m.group(1)) or 'config'}: {message}"



def _find(ctx: Ctx, path: tuple, name: str, what: str) -> str:
    """A file path set at config key `path`: the setting file's folder first (the working
    directory for --set), then the shipped data folders (moehub_arch/paths.py)."""
    src = ctx.source(path)
    found, tried = find_user_file(name, src.base_dir if src else Path.cwd())
    if found is None:
        raise ctx.error(path, f"{what} '{name}' not found (tried "
                              f"{', '.join(display_path(c) for c in tried)})")
    return str(found)


def _resolve_files(cfg: Config, ctx: Ctx, key: str, what: str) -> Config:
    out = tuple(_find(ctx, ("workload", key, i), name, what)
                for i, name in enumerate(getattr(cfg.workload, key)))
    return attrs.evolve(cfg, workload=attrs.evolve(cfg.workload, **{key: out}))


def _resolve_kernel_files(cfg: Config, ctx: Ctx) -> Config:
    return _resolve_files(_resolve_files(cfg, ctx, "kernel_files", "kernel file"), ctx,
                          "isa_files", "ISA file")


def _resolve_layer_files(cfg: Config, ctx: Ctx) -> Config:
    """The routing trace and a model given as a file path (a bare name such as deepseek_v3 is a
    shipped model, found by config/models.py)."""
    layer = cfg.workload.layer
    if layer.routing.trace:
        trace = _find(ctx, ("workload", "layer", "routing", "trace"), layer.routing.trace,
                      "routing trace")
        layer = attrs.evolve(layer, routing=attrs.evolve(layer.routing, trace=trace))
    model = layer.model
    if model and ("/" in model or model.endswith((".yaml", ".yml"))):
        layer = attrs.evolve(layer, model=_find(ctx, ("workload", "layer", "model"), model,
                                                "model file"))
    if layer.kernel_files:
        layer = attrs.evolve(layer, kernel_files=tuple(
            _find(ctx, ("workload", "layer", "kernel_files", i), name, "kernel file")
            for i, name in enumerate(layer.kernel_files)))
    return attrs.evolve(cfg, workload=attrs.evolve(cfg.workload, layer=layer))
