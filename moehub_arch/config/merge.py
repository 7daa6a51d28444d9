"""The extends chain of a config: which files, in which order, merged how.

A config file and every file it `extends` are read (each once, in merge order: a file's bases
before it, siblings of an `extends:` list left to right), the system a `system: FILE` reference
(or `--system FILE`) names takes the place of the system descriptions the chain extends, and
the files are deep-merged (the extending file wins; mappings merge, lists and scalars replace)
remembering which file set each key (`Source`: what an error names). `--set key.path=value`
overrides go on top. When a file listed later in an `extends:` list inherits a value that
overrides a key an earlier entry set, `override_warnings` says so. loader.py runs the steps.
"""
import copy
from pathlib import Path

import attrs
import yaml

from ..inputs import InputFileError, load_yaml
from ..paths import find_user_file
from .files import ConfigError, display_path, read_yaml

TOP_KEYS = ("extends", "system", "scheme", "workload", "run", "stats", "trace", "debug")


@attrs.frozen
class Source:
    label: str          # what error messages show: a file path or "--set key=value"
    base_dir: Path      # what relative paths set by this source are relative to
    entry: int = -1     # index of the file in the merge order (-1: --set / --system)


@attrs.frozen
class Entry:
    """One file of the extends chain, in merge order."""
    path: Path
    raw: dict
    # (file, index in its extends list) from the loaded file down to this one: tells siblings of
    # an extends list apart from a file and its own bases
    lineage: tuple
    system_ref: Path | None   # the file a `system: FILE` string in this file names


def fmt_path(keys) -> str:
    out = ""
    for k in keys:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    return out


# ------------------------------------------------------------------------- extends + merging
def _resolve_extends(name, naming_file: Path, where: str, key: str = "extends") -> Path:
    if not isinstance(name, str) or not name:
        what = "a file path or a list of paths" if key == "extends" else "a mapping or a file path"
        raise ConfigError(f"{where}: {key}: expected {what}, found {name!r}", where, key)
    found, tried = find_user_file(name, naming_file.parent, ("", "configs"))
    if found is None:
        raise ConfigError(f"{where}: {key}: file '{name}' not found (tried "
                          f"{', '.join(display_path(c) for c in tried)})", where, key)
    return found


def collect(path: Path, stack: tuple, order: list, lineage: tuple = ()):
    """Append an Entry for `path` and its bases to `order`, bases first."""
    shown = display_path(path)
    raw = read_yaml(path)
    if raw is None:
        raise ConfigError(f"{shown}: the config file is empty (expected a mapping with keys "
                          f"{', '.join(TOP_KEYS)})", shown)
    if not isinstance(raw, dict):
        raise ConfigError(f"{shown}: the top level must be a mapping with keys "
                          f"{', '.join(TOP_KEYS)}; found a {type(raw).__name__}", shown)
    raw = dict(raw)
    ext = raw.pop("extends", None)
    names = [] if ext is None else ext if isinstance(ext, list) else [ext]
    system_ref = None
    if "system" in raw and not isinstance(raw["system"], dict) and raw["system"] is not None:
        system_ref = _resolve_extends(raw.pop("system"), path, shown, "system")
    for i, name in enumerate(names):
        base = _resolve_extends(name, path, shown)
        if base in stack or base == path:
            chain = " -> ".join(display_path(p) for p in (*stack, path, base))
            raise ConfigError(f"{shown}: extends: cycle: {chain}", shown, "extends")
        collect(base, (*stack, path), order, (*lineage, (path, i)))
    order.append(Entry(path, raw, lineage, system_ref))


def _system_only(entries: list, ref: Path) -> list:
    """The entries of a system file's chain, checked to hold nothing but `system:`."""
    for e in entries:
        other = [k for k in e.raw if k != "system"]
        if other:
            shown = display_path(e.path)
            raise ConfigError(f"{shown}: a system file (named by system: or --system, here "
                              f"{display_path(ref)}) holds only system: (and extends:); found "
                              f"{', '.join(other)}", shown, other[0])
        if e.system_ref is not None:
            shown = display_path(e.path)
            raise ConfigError(f"{shown}: system: a system file cannot itself name a system file; "
                              f"use extends: to build on one", shown, "system")
    return entries


def _is_system_description(entry: Entry) -> bool:
    """A file that describes a whole machine (it names it: system.name), as configs/systems/*."""
    sysraw = entry.raw.get("system")
    return isinstance(sysraw, dict) and "name" in sysraw


def compose(order: list, system_file: Path | None) -> list:
    """The merge order once a system reference is applied: the referenced system's chain first,
    then the workload's files without the system descriptions they extend (their own system keys,
    such as hub tile sizes, stay and are merged over the referenced system)."""
    refs = [e.system_ref for e in order if e.system_ref is not None]
    ref = system_file if system_file is not None else (refs[-1] if refs else None)
    if ref is None:
        return order
    sys_order: list = []
    collect(ref, (), sys_order, (("--system", 0),))
    out = list(_system_only(sys_order, ref))
    for e in order:
        if _is_system_description(e):
            e = attrs.evolve(e, raw={k: v for k, v in e.raw.items() if k != "system"})
        out.append(e)
    return out


def _leaves(node, prefix=()):
    if isinstance(node, dict) and node:
        for k, v in node.items():
            yield from _leaves(v, (*prefix, k))
    else:
        yield prefix, node


def _sibling_override(earlier: Entry, later: Entry) -> bool:
    """True if `later` overrides `earlier` only because a later entry of some extends list
    inherits the value (not written in that entry itself, and not a file overriding its bases)."""
    a, b = earlier.lineage, later.lineage
    c = 0
    while c < len(a) and c < len(b) and a[c] == b[c]:
        c += 1
    if c >= len(a) or c >= len(b) or a[c][0] != b[c][0]:
        return False                                # one is a base of the other
    return b[c][1] > a[c][1] and len(b) > c + 1     # a later sibling's inherited value


_SYSTEM_REF = ("--system", 0)


def override_warnings(order: list, data_before: dict, raw: dict, entry_idx: int,
                       prov: dict) -> list:
    """Keys `order[entry_idx]` changes that an earlier extends sibling, or the system a
    `system:` / `--system` reference names, set explicitly."""
    later = order[entry_idx]
    from_ref = not later.lineage or later.lineage[0] != _SYSTEM_REF
    siblings, over_system = [], []
    for path, value in _leaves(raw):
        src = prov.get(path) if path else None
        if src is None or src.entry < 0 or src.entry == entry_idx:
            continue
        node = data_before
        for k in path:
            node = node.get(k) if isinstance(node, dict) else None
        if node == value:
            continue
        earlier = order[src.entry]
        item = f"{fmt_path(path)} ({node!r} -> {value!r}, set in {src.label})"
        if from_ref and earlier.lineage[:1] == (_SYSTEM_REF,):
            over_system.append(item)
        elif _sibling_override(earlier, later):
            siblings.append(item)
    out = []
    if siblings:
        out.append(f"{display_path(later.path)}, reached through a later entry of an extends: list, "
                   f"overrides keys an earlier entry set: {_listing(siblings)}. To run a workload "
                   f"on your own system, name the system instead: `system: FILE` in the config or "
                   f"`moehub-sim run CONFIG --system FILE`")
    if over_system:
        out.append(f"{display_path(later.path)} sets system keys of its own over the system you named: "
                   f"{_listing(over_system)}")
    return out


def _listing(items: list) -> str:
    more = f" and {len(items) - 12} more" if len(items) > 12 else ""
    return "; ".join(items[:12]) + more


def _mark(prov: dict, p: tuple, v, src: Source):
    """`src` set the value `v` at key path `p`: it is the source of `p` and of every key inside a
    mapping `v` (so that a key's source is the file that wrote that key, not the first file that
    wrote a mapping holding it: `config --list`, config.json's value_sources)."""
    for q in [q for q in prov if q[:len(p)] == p]:
        del prov[q]
    prov[p] = src
    if isinstance(v, dict):
        for k, sub in v.items():
            _mark(prov, (*p, k), sub, src)


def merge_into(base: dict, over: dict, src: Source, prov: dict, prefix=()):
    for k, v in over.items():
        p = (*prefix, k)
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            prov.setdefault(p, src)
            merge_into(base[k], v, src, prov, p)
        else:
            base[k] = copy.deepcopy(v)
            _mark(prov, p, v, src)


def apply_override(data: dict, text: str, prov: dict):
    label = f"--set {text}"
    src = Source(label, Path.cwd())
    if "=" not in text:
        raise ConfigError(f"{label}: expected key.path=value, e.g. "
                          f"--set system.nvlink.bandwidth=20GB/s", label)
    key, _, value_text = text.partition("=")
    keys = [k.strip() for k in key.strip().split(".")]
    if not all(keys):
        raise ConfigError(f"{label}: '{key}' is not a dotted key path such as run.seed", label)
    try:
        value = load_yaml(value_text, label, "value") if value_text.strip() else None
    except InputFileError as e:
        raise ConfigError(str(e), label) from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{label}: cannot read the value '{value_text}' as YAML "
                          f"({getattr(e, 'problem', e)})", label) from None
    node, path = data, ()
    for i, k in enumerate(keys):
        last = i == len(keys) - 1
        if isinstance(node, list):
            if not (k.isdigit() and int(k) < len(node)):
                raise ConfigError(f"{label}: {fmt_path(path)} is a list of {len(node)} items; "
                                  f"'{k}' is not an index in it", label, fmt_path(path))
            k = int(k)
        elif not isinstance(node, dict):
            raise ConfigError(f"{label}: {fmt_path(path)} is a {type(node).__name__}, not a "
                              f"mapping, so it has no key '{k}'", label, fmt_path(path))
        path = (*path, k)
        if last:
            if isinstance(value, dict) and isinstance(node, dict) and isinstance(node.get(k), dict):
                merge_into(node[k], value, src, prov, path)
            else:
                node[k] = value
                _mark(prov, path, value, src)
        else:
            if isinstance(node, dict) and (k not in node or node[k] is None):
                node[k] = {}
                prov[path] = src
            node = node[k]
