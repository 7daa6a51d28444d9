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
"""
import copy
import difflib
import math
import re
from pathlib import Path
from typing import Sequence

import attrs
import yaml

from ..inputs import InputFileError, load_yaml
from ..paths import data_root, find_user_file
from .effective import effective_value_warnings
from .files import ConfigError, display_path, read_yaml
from .models import load_model, with_top_k
from .schema import Config
from .units import (EXAMPLES, INT64_MAX, MAX_TICKS, UnitError, parse_quantity, quantity_limit,
                    range_text)

TOP_KEYS = ("extends", "system", "scheme", "workload", "run", "stats", "trace", "debug")


@attrs.frozen
class _Source:
    label: str          # what error messages show: a file path or "--set key=value"
    base_dir: Path      # what relative paths set by this source are relative to
    entry: int = -1     # index of the file in the merge order (-1: --set / --system)


@attrs.frozen
class _Entry:
    """One file of the extends chain, in merge order."""
    path: Path
    raw: dict
    # (file, index in its extends list) from the loaded file down to this one: tells siblings of
    # an extends list apart from a file and its own bases
    lineage: tuple
    system_ref: Path | None   # the file a `system: FILE` string in this file names


def _fmt_path(keys) -> str:
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


def _collect(path: Path, stack: tuple, order: list, lineage: tuple = ()):
    """Append an _Entry for `path` and its bases to `order`, bases first."""
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
        _collect(base, (*stack, path), order, (*lineage, (path, i)))
    order.append(_Entry(path, raw, lineage, system_ref))


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


def _is_system_description(entry: _Entry) -> bool:
    """A file that describes a whole machine (it names it: system.name), as configs/systems/*."""
    sysraw = entry.raw.get("system")
    return isinstance(sysraw, dict) and "name" in sysraw


def _compose(order: list, system_file: Path | None) -> list:
    """The merge order once a system reference is applied: the referenced system's chain first,
    then the workload's files without the system descriptions they extend (their own system keys,
    such as hub tile sizes, stay and are merged over the referenced system)."""
    refs = [e.system_ref for e in order if e.system_ref is not None]
    ref = system_file if system_file is not None else (refs[-1] if refs else None)
    if ref is None:
        return order
    sys_order: list = []
    _collect(ref, (), sys_order, (("--system", 0),))
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


def _sibling_override(earlier: _Entry, later: _Entry) -> bool:
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


def _override_warnings(order: list, data_before: dict, raw: dict, entry_idx: int,
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
        item = f"{_fmt_path(path)} ({node!r} -> {value!r}, set in {src.label})"
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


def _mark(prov: dict, p: tuple, v, src: _Source):
    """`src` set the value `v` at key path `p`: it is the source of `p` and of every key inside a
    mapping `v` (so that a key's source is the file that wrote that key, not the first file that
    wrote a mapping holding it: `config --list`, config.json's value_sources)."""
    for q in [q for q in prov if q[:len(p)] == p]:
        del prov[q]
    prov[p] = src
    if isinstance(v, dict):
        for k, sub in v.items():
            _mark(prov, (*p, k), sub, src)


def _merge(base: dict, over: dict, src: _Source, prov: dict, prefix=()):
    for k, v in over.items():
        p = (*prefix, k)
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            prov.setdefault(p, src)
            _merge(base[k], v, src, prov, p)
        else:
            base[k] = copy.deepcopy(v)
            _mark(prov, p, v, src)


def _apply_override(data: dict, text: str, prov: dict):
    label = f"--set {text}"
    src = _Source(label, Path.cwd())
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
                raise ConfigError(f"{label}: {_fmt_path(path)} is a list of {len(node)} items; "
                                  f"'{k}' is not an index in it", label, _fmt_path(path))
            k = int(k)
        elif not isinstance(node, dict):
            raise ConfigError(f"{label}: {_fmt_path(path)} is a {type(node).__name__}, not a "
                              f"mapping, so it has no key '{k}'", label, _fmt_path(path))
        path = (*path, k)
        if last:
            if isinstance(value, dict) and isinstance(node, dict) and isinstance(node.get(k), dict):
                _merge(node[k], value, src, prov, path)
            else:
                node[k] = value
                _mark(prov, path, value, src)
        else:
            if isinstance(node, dict) and (k not in node or node[k] is None):
                node[k] = {}
                prov[path] = src
            node = node[k]


# ------------------------------------------------------------------------------- conversion
class _Ctx:
    def __init__(self, prov: dict, sources: list, main: str, base_units: bool = False):
        self.prov, self.sources, self.main = prov, sources, main
        # base_units: quantities may be plain numbers in base units (a saved config.json)
        self.base_units = base_units

    def source(self, path) -> _Source | None:
        for n in range(len(path), 0, -1):
            if tuple(path[:n]) in self.prov:
                return self.prov[tuple(path[:n])]
        return None

    def error(self, path, message):
        src = self.source(path)
        label = src.label if src else self.main
        key = _fmt_path(path)
        return ConfigError(f"{label}: {key}: {message}", label, key)


def _found(v) -> str:
    if v is None:
        return "nothing (null)"
    if isinstance(v, (dict, list)):
        return f"a {'mapping' if isinstance(v, dict) else 'list'}"
    return f"'{v}'"


def _to_int(v, path, ctx, lo, hi=None):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (
            isinstance(v, float) and not v.is_integer()):
        raise ctx.error(path, f"expected an integer, found {_found(v)}")
    v = int(v)
    if lo is not None and v < lo:
        raise ctx.error(path, f"expected an integer >= {lo}, found {v}")
    if v < -INT64_MAX - 1:
        raise ctx.error(path, f"expected an integer >= {-INT64_MAX - 1} (the smallest 64-bit "
                              f"integer), found {v}")
    # every integer key ends up in the engine's 64-bit integers: one beyond them is refused,
    # never wrapped (issue 52); a key may declare a tighter bound (schema `max`)
    top = INT64_MAX if hi is None else hi
    if v > top:
        why = " (the largest 64-bit integer)" if hi is None else ""
        raise ctx.error(path, f"expected an integer <= {top}{why}, found {v}")
    return v


def _to_float(v, path, ctx, lo, hi=None):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ctx.error(path, f"expected a number, found {_found(v)}")
    try:
        x = float(v)
    except OverflowError:   # an integer beyond the float range
        x = math.inf
    if not math.isfinite(x):
        raise ctx.error(path, f"expected a finite number, found {_found(v)}")
    if lo is not None and x < lo:
        raise ctx.error(path, f"expected a number >= {lo:g}, found {_found(v)}")
    if hi is not None and x > hi:
        raise ctx.error(path, f"expected a number <= {hi:g}, found {_found(v)}")
    return x


def _to_tuple(v, path, ctx):
    if v is None:
        return []
    if not isinstance(v, list):
        raise ctx.error(path, f"expected a list, found {_found(v)}")
    return v


def _to_choice(v, choices, path, ctx):
    if v not in choices:
        close = difflib.get_close_matches(str(v), choices, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ctx.error(path, f"expected one of {', '.join(choices)}, found {_found(v)}{hint}")
    return v


def _convert_value(a, v, path, ctx):
    m = a.metadata
    kind, lo, hi = m["kind"], m.get("min"), m.get("max")
    if kind == "int":
        return _to_int(v, path, ctx, lo, hi)
    if kind == "int_or_expr":
        if isinstance(v, str):
            if not v.strip():
                raise ctx.error(path, "expected an integer or an expression such as '4 * nsm', "
                                      "found ''")
            return v
        return _to_int(v, path, ctx, lo)
    if kind == "opt_int":
        return None if v is None else _to_int(v, path, ctx, lo)
    if kind == "float":
        return _to_float(v, path, ctx, lo, hi)
    if kind == "bool":
        if not isinstance(v, bool):
            raise ctx.error(path, f"expected true or false, found {_found(v)}")
        return v
    if kind == "choice_tuple":
        if isinstance(v, str):   # "Hub,NVLink" as on a command line
            v = [x.strip() for x in v.split(",") if x.strip()]
        return tuple(_to_choice(x, m["choices"], (*path, i), ctx)
                     for i, x in enumerate(_to_tuple(v, path, ctx)))
    if kind == "str":
        if not isinstance(v, str):
            raise ctx.error(path, f"expected a string ({m['doc']}), found {_found(v)}")
        return v
    if kind == "choice":
        return _to_choice(v, m["choices"], path, ctx)
    if kind in ("time", "frequency", "size", "bandwidth"):
        if ctx.base_units and isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0:
            if not math.isfinite(v) or v > quantity_limit(kind, hi):
                raise ctx.error(path, f"{v} is too large: expected a {kind} of at most "
                                      f"{range_text(kind, hi)}")
            q = float(v) if kind == "bandwidth" else int(v)
            if lo and q < lo:
                raise ctx.error(path, f"expected a {kind} greater than zero, found {v}")
            return q
        try:
            q = parse_quantity(v, kind, hi)
        except UnitError as e:
            raise ctx.error(path, str(e)) from None
        if lo and q < lo:
            raise ctx.error(path, f"expected a {kind} greater than zero, found '{v}'")
        return q
    if kind == "node":
        return _convert(m["cls"], {} if v is None else v, path, ctx)
    if kind == "list":
        return tuple(_convert(m["cls"], item, (*path, i), ctx)
                     for i, item in enumerate(_to_tuple(v, path, ctx)))
    if kind == "named":
        if v is None:
            return ()
        if not isinstance(v, dict):
            raise ctx.error(path, f"expected a mapping of name -> fields, found {_found(v)}")
        return tuple(_convert(m["cls"], {} if item is None else item, (*path, name), ctx,
                              name=str(name)) for name, item in v.items())
    if kind == "params":
        if v is None:
            return ()
        if not isinstance(v, dict):
            raise ctx.error(path, f"expected a mapping of parameter name -> value, found "
                                  f"{_found(v)}")
        out = []
        for name, pv in v.items():
            if isinstance(pv, float) and pv.is_integer():
                pv = int(pv)
            if isinstance(pv, bool) or not isinstance(pv, (int, str)):
                raise ctx.error((*path, name), f"expected an integer or an expression string "
                                               f"such as '@buf + 64', found {_found(pv)}")
            if isinstance(pv, int) and not -INT64_MAX - 1 <= pv <= INT64_MAX:
                raise ctx.error((*path, name), f"expected an integer that fits a 64-bit "
                                               f"register, found {pv}")
            out.append((str(name), pv))
        return tuple(out)
    if kind in ("int_tuple", "opt_int_tuple"):
        if v is None and kind == "opt_int_tuple":
            return None
        if isinstance(v, int) and not isinstance(v, bool) and kind == "opt_int_tuple":
            v = [v]
        return tuple(_to_int(x, (*path, i), ctx, lo) for i, x in enumerate(_to_tuple(v, path, ctx)))
    if kind == "str_tuple":
        if isinstance(v, str):
            v = [v]
        items = _to_tuple(v, path, ctx)
        for i, x in enumerate(items):
            if not isinstance(x, str) or not x:
                raise ctx.error((*path, i), f"expected a file path string, found {_found(x)}")
        return tuple(items)
    raise AssertionError(f"schema field {a.name} has unknown kind {kind}")  # pragma: no cover


def _expected(a) -> str:
    m = a.metadata
    if m["kind"] in EXAMPLES:
        return f"a {m['kind']} such as '{EXAMPLES[m['kind']]}'"
    return {"int": "an integer", "str": "a string", "node": "a mapping",
            "bool": "true or false"}.get(m["kind"], "a value")


def _convert(cls, raw, path, ctx, name=None):
    if not isinstance(raw, dict):
        raise ctx.error(path, f"expected a mapping of {cls.__name__} fields, found {_found(raw)}")
    fields = [a for a in attrs.fields(cls) if a.metadata.get("kind") != "internal"]
    if name is not None:
        fields = [a for a in fields if a.name != "name"]
    known = [a.name for a in fields]
    for key in raw:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise ctx.error((*path, key), f"unknown key; {hint}(known keys: {', '.join(known)})")
    values = {} if name is None else {"name": name}
    for a in fields:
        p = (*path, a.name)
        if a.name in raw:
            values[a.name] = _convert_value(a, raw[a.name], p, ctx)
        elif a.default is attrs.NOTHING:
            files = ", ".join(ctx.sources)
            raise ctx.error(p, f"required key is missing: expected {_expected(a)} "
                               f"({a.metadata['doc']}); not set in {files}")
    return cls(**values)


# ---------------------------------------------------------------------- cross-field checks
def _check(cfg: Config, ctx: _Ctx):
    s = cfg.system
    nv, sw = s.nvlink, s.switch
    rate = s.nic.message_rate
    if 0 < rate < 10 ** 12 / MAX_TICKS:
        # the engine spaces work requests by 1e12 / rate ps: that interval must be a time
        raise ctx.error(("system", "nic", "message_rate"),
                        f"expected 0 (no limit) or at least {10 ** 12 / MAX_TICKS:.3g} work "
                        f"requests per second (one per {MAX_TICKS // 10 ** 12} s, the simulated-"
                        f"time range), found {rate:g}")
    if sw.topology == "nvswitch" and len(sw.gpu_link_switch) != nv.links_per_gpu:
        raise ctx.error(("system", "switch", "gpu_link_switch"),
                        f"expected one switch index per link (system.nvlink.links_per_gpu = "
                        f"{nv.links_per_gpu}), found {len(sw.gpu_link_switch)} entries")
    if sw.topology == "nvswitch" and sw.count > s.num_gpus * nv.links_per_gpu:
        # more switches than GPU links: some could never be reached (and the fabric builds
        # every one of them: a count of 2**62 never finished loading, issue 52)
        raise ctx.error(("system", "switch", "count"),
                        f"expected at most one switch per GPU link (system.num_gpus x "
                        f"system.nvlink.links_per_gpu = {s.num_gpus * nv.links_per_gpu}), found "
                        f"{sw.count}")
    for i, idx in enumerate(sw.gpu_link_switch if sw.topology == "nvswitch" else ()):
        if idx >= sw.count:
            raise ctx.error(("system", "switch", "gpu_link_switch", i),
                            f"switch index {idx} out of range: system.switch.count = {sw.count}")
    gpn = s.nodes.gpus_per_node or s.num_gpus
    # only the switches some link reaches need ports (not range(count): a count of 2**62 would
    # take forever, issue 52)
    for idx in sorted(set(sw.gpu_link_switch) if sw.topology == "nvswitch" else ()):
        need = sw.gpu_link_switch.count(idx) * gpn
        if need > sw.ports:
            raise ctx.error(("system", "switch", "ports"),
                            f"switch {idx} needs {need} ports ({gpn} GPUs x "
                            f"{sw.gpu_link_switch.count(idx)} links), found {sw.ports}")
    for key in ("header_bytes", "max_payload_bytes"):
        if getattr(nv, key) % nv.flit_bytes:
            raise ctx.error(("system", "nvlink", key),
                            f"expected a multiple of system.nvlink.flit_bytes ({nv.flit_bytes} B), "
                            f"found {getattr(nv, key)} B")
    max_packet_flits = (nv.header_bytes + nv.max_payload_bytes) // nv.flit_bytes
    if nv.rx_buffer_flits < max_packet_flits:
        raise ctx.error(("system", "nvlink", "rx_buffer_flits"),
                        f"expected at least {max_packet_flits} flits (one largest packet: header + "
                        f"max payload), found {nv.rx_buffer_flits}; a smaller buffer deadlocks")
    if nv.response_path == "separate":
        # the largest response: read data of one store packet (header + payload)
        rsp_flits = -(-(nv.header_bytes + min(nv.store_packet_bytes, nv.max_payload_bytes))
                      // nv.flit_bytes)
        if nv.response_buffer_flits < rsp_flits:
            raise ctx.error(("system", "nvlink", "response_buffer_flits"),
                            f"expected at least {rsp_flits} flits (one read-data response: header + "
                            f"store_packet_bytes), found {nv.response_buffer_flits}; a smaller "
                            f"buffer deadlocks")
    train = cfg.run.packet_train
    if train > 1 and nv.response_path == "separate":
        rsp_room = min(nv.response_buffer_flits // rsp_flits, nv.response_queue_packets)
        if train > rsp_room:
            raise ctx.error(("run", "packet_train"),
                            f"a train of {train} packets must fit a link's response channel "
                            f"({nv.response_buffer_flits} flits = {nv.response_buffer_flits // rsp_flits} "
                            f"read-data responses, {nv.response_queue_packets} queued packets); "
                            f"expected at most {rsp_room}, found {train}")
    if train > 1:
        room = min(nv.rx_buffer_flits // max_packet_flits, nv.tx_queue_packets,
                   sw.output_queue_packets)
        if train > room:
            raise ctx.error(("run", "packet_train"),
                            f"a train of {train} packets must fit a link's receive buffer "
                            f"({nv.rx_buffer_flits} flits = {nv.rx_buffer_flits // max_packet_flits} "
                            f"largest packets) and its transmit and switch output queues "
                            f"({nv.tx_queue_packets}, {sw.output_queue_packets} packets); expected "
                            f"at most {room}, found {train}")
    _check_moe(cfg, ctx)
    _check_trace(cfg, ctx)
    for li, lc in enumerate(cfg.workload.launches):
        if not lc.kernel.strip():
            raise ctx.error(("workload", "launches", li, "kernel"), "expected a kernel name, found ''")
        if lc.gpus is not None:
            if not lc.gpus:
                raise ctx.error(("workload", "launches", li, "gpus"),
                                "expected at least one GPU index (omit the key for every GPU)")
            for gi, g in enumerate(lc.gpus):
                if g >= s.num_gpus:
                    raise ctx.error(("workload", "launches", li, "gpus", gi),
                                    f"GPU {g} out of range: system.num_gpus = {s.num_gpus}")
            if len(set(lc.gpus)) != len(lc.gpus):
                raise ctx.error(("workload", "launches", li, "gpus"),
                                f"a GPU is listed twice: {list(lc.gpus)}")


def _check_trace(cfg: Config, ctx: _Ctx):
    tr = cfg.trace
    if tr.stop and tr.stop <= tr.start:
        raise ctx.error(("trace", "stop"), f"expected a time after trace.start ({tr.start} ps) or 0 "
                                           f"for the end of the run, found {tr.stop} ps")
    for i, g in enumerate(tr.gpus or ()):
        if g >= cfg.system.num_gpus:
            raise ctx.error(("trace", "gpus", i), f"GPU {g} out of range: system.num_gpus = "
                                                  f"{cfg.system.num_gpus}")


def _find(ctx: _Ctx, path: tuple, name: str, what: str) -> str:
    """A file path set at config key `path`: the setting file's folder first (the working
    directory for --set), then the shipped data folders (moehub_arch/paths.py)."""
    src = ctx.source(path)
    found, tried = find_user_file(name, src.base_dir if src else Path.cwd())
    if found is None:
        raise ctx.error(path, f"{what} '{name}' not found (tried "
                              f"{', '.join(display_path(c) for c in tried)})")
    return str(found)


def _resolve_files(cfg: Config, ctx: _Ctx, key: str, what: str) -> Config:
    out = tuple(_find(ctx, ("workload", key, i), name, what)
                for i, name in enumerate(getattr(cfg.workload, key)))
    return attrs.evolve(cfg, workload=attrs.evolve(cfg.workload, **{key: out}))


def _resolve_kernel_files(cfg: Config, ctx: _Ctx) -> Config:
    return _resolve_files(_resolve_files(cfg, ctx, "kernel_files", "kernel file"), ctx,
                          "isa_files", "ISA file")


def _resolve_layer_files(cfg: Config, ctx: _Ctx) -> Config:
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


def _check_layer(cfg: Config, ctx: _Ctx):
    layer = cfg.workload.layer
    if cfg.scheme == "none":
        if layer.model:
            raise ctx.error(("scheme",), f"workload.layer.model is '{layer.model}' but no scheme is "
                                         f"chosen: set scheme to deepep, overlap or moehub")
        return
    if not layer.model:
        raise ctx.error(("workload", "layer", "model"),
                        f"scheme '{cfg.scheme}' runs an MoE layer: name a model (a file in "
                        f"workloads/models/, e.g. deepseek_v3) or a model YAML path")
    if layer.tokens_per_gpu <= 0:
        raise ctx.error(("workload", "layer", "tokens_per_gpu"),
                        f"expected a positive number of tokens per GPU, found {layer.tokens_per_gpu}")
    if cfg.workload.launches:
        raise ctx.error(("workload", "launches"),
                        f"scheme '{cfg.scheme}' generates the layer's launches; remove "
                        f"workload.launches (or set scheme: none)")
    if layer.routing.kind == "trace" and not layer.routing.trace:
        raise ctx.error(("workload", "layer", "routing", "trace"),
                        "routing kind 'trace' needs a trace file")
    deepep = layer.deepep_ll if cfg.scheme == "deepep_ll" else layer.deepep
    if cfg.scheme in ("deepep", "deepep_ll") and deepep.dispatch_dtype == "fp8":
        # FP8 rows are moved as opaque bytes (sizes and timing); nothing in the simulator
        # quantises or dequantises them, so neither a numeric check nor a BF16 GEMM can use them
        where = ("workload", "layer", cfg.scheme, "dispatch_dtype")
        if deepep.kernels != "communication":
            raise ctx.error(where, f"fp8 dispatch needs workload.layer.{cfg.scheme}.kernels: "
                                   "communication (the layer's grouped GEMM reads BF16 rows; "
                                   "there is no FP8 GEMM path)")
        if cfg.workload.mode == "functional":
            raise ctx.error(where, "fp8 dispatch is timing-only: the simulator has no FP8 "
                                   "quantise instruction, so functional mode could not check the "
                                   "result against a reference; use workload.mode: timing")


def _check_moe(cfg: Config, ctx: _Ctx):
    moe, G = cfg.workload.moe, cfg.system.num_gpus
    path = ("workload", "moe")
    hub = cfg.system.gpu.hub.moe
    if hub.internode == "per_node":
        # the forwarding hub is the sender's local rank on another node: there must be one
        if cfg.system.nodes.count < 2:
            raise ctx.error(("system", "gpu", "hub", "moe", "internode"),
                            "per_node forwards rows to a hub on each other node; this system has "
                            "one node (system.nodes.count = 1): expected per_expert")
        if moe.placement is not None:
            raise ctx.error((*path, "placement"),
                            "system.gpu.hub.moe.internode: per_node groups a token's experts by "
                            "node assuming the block placement (E / G consecutive experts per "
                            "GPU); omit workload.moe.placement")
    if hub.internode_combine == "per_node":
        # the per-node combine sums at the forwarder the dispatch's per-node hub picked
        if hub.internode != "per_node":
            raise ctx.error(("system", "gpu", "hub", "moe", "internode_combine"),
                            f"per_node sums a node's expert outputs at the forwarding GPU of the "
                            f"per-node dispatch; set system.gpu.hub.moe.internode: per_node "
                            f"(found {hub.internode})")
    if moe.num_experts == 0:
        return
    tile = cfg.system.gpu.hub.moe.dam.tile_rows
    if moe.placement is None:
        if moe.num_experts % G:
            raise ctx.error((*path, "num_experts"),
                            f"block placement needs a multiple of system.num_gpus ({G}) experts, "
                            f"found {moe.num_experts}; or give workload.moe.placement")
    else:
        if len(moe.placement) != moe.num_experts:
            raise ctx.error((*path, "placement"), f"expected one GPU per expert ({moe.num_experts}), "
                                                  f"found {len(moe.placement)}")
        for i, g in enumerate(moe.placement):
            if g >= G:
                raise ctx.error((*path, "placement", i), f"GPU {g} out of range: system.num_gpus = {G}")
    if moe.window_rows == 0 or moe.window_rows % tile:
        raise ctx.error((*path, "window_rows"),
                        f"expected a positive multiple of system.gpu.hub.moe.dam.tile_rows ({tile}), "
                        f"found {moe.window_rows}")
    if moe.row_bytes == 0:
        raise ctx.error((*path, "row_bytes"), "expected the window slot size (the largest row), found 0")
    gpus = moe.placement if moe.placement is not None else [e * G // moe.num_experts
                                                            for e in range(moe.num_experts)]
    local = max(list(gpus).count(g) for g in range(G))
    _check_record_table(cfg, ctx, local, "workload.moe")


def record_table_minimum(local_experts: int, tile_rows: int, held_tiles: int = 1,
                         store_experts: int = 1) -> int:
    """The smallest AAU completion-record table that cannot deadlock when a full table stalls
    allocation (today's AAU): every local expert may hold a partial tile of tile_rows - 1 rows,
    each row holding a record until its tile is released, and one more store must fit to
    complete a tile and free records - a multi-expert store takes one record per expert it names
    (`store_experts`), all at once. With the DAM's expert order an expert also holds up to
    held_tiles - 1 ready tiles while it waits for the last tile of its group."""
    return local_experts * (held_tiles * tile_rows - 1) + store_experts


def _check_record_table(cfg: Config, ctx: _Ctx, local: int, why: str, store_experts: int = 1):
    if cfg.system.gpu.hub.moe.aau.overflow == "spill":
        return      # a full table spills to device memory: any size works (it costs time)
    dam = cfg.system.gpu.hub.moe.dam
    tile = dam.tile_rows
    held = dam.expert_tiles if dam.order == "expert" else 1
    need = record_table_minimum(local, tile, held, store_experts)
    aau = cfg.system.gpu.hub.moe.aau
    more = ("one more row" if store_experts == 1 else
            f"one more store of up to {store_experts} rows (workload.layer.moehub.multi_expert_store)")
    if aau.record_table_entries < need:
        waits = (f" (system.gpu.hub.moe.dam.order: expert holds up to {held - 1} ready tile(s) "
                 f"of an expert until expert_tiles = {held} are)" if held > 1 else "")
        raise ctx.error(("system", "gpu", "hub", "moe", "aau", "record_table_entries"),
                        f"expected at least {need} entries with system.gpu.hub.moe.dam.tile_rows = "
                        f"{tile}: {local} local expert(s) ({why}) may each hold "
                        f"{held * tile - 1} rows of unfinished tiles{waits}, and {more} must "
                        f"fit to complete a tile; found {aau.record_table_entries} (a smaller table "
                        f"deadlocks: allocation stalls while the table is full)")


def _check_hub_sizes(cfg: Config, ctx: _Ctx):
    """Sizes that guarantee a deadlock of a scheme-generated MoE-Hub layer, found at load time
    (the layer's own workload.moe is generated later, when the system is built)."""
    if cfg.scheme != "moehub" or not cfg.workload.layer.model:
        return
    try:
        model = with_top_k(load_model(cfg.workload.layer.model), cfg.workload.layer.top_k)
    except ConfigError:
        return      # the layer build names the bad model file
    experts = model.experts
    if experts % cfg.system.num_gpus == 0:
        local = experts // cfg.system.num_gpus
        store = min(model.top_k, local) if cfg.workload.layer.moehub.multi_expert_store else 1
        _check_record_table(cfg, ctx, local, f"{experts} experts of {cfg.workload.layer.model} "
                            f"over {cfg.system.num_gpus} GPUs", store)


# ------------------------------------------------------------------------------ entry point
def load_config(path, overrides: Sequence[str] = (), system_file=None) -> Config:
    """Load, merge, override, convert and check a config file; raise ConfigError on bad input.

    `system_file`: run the config on this system (a file whose only section is `system:`, as
    configs/systems/*.yaml): it takes the place of the system descriptions the config extends, as
    a `system: FILE` line in the config would (`moehub-sim run CONFIG --system FILE`)."""
    path = Path(path).expanduser()
    if not path.is_file():
        shown = display_path(path)
        raise ConfigError(f"{shown}: config file not found", shown)
    path = path.resolve()
    if system_file is not None:
        found, tried = find_user_file(system_file, Path.cwd(), ("", "configs"))
        if found is None:
            raise ConfigError(f"--system {system_file}: file not found (tried "
                              f"{', '.join(display_path(c) for c in tried)})", "--system")
        system_file = found
    order: list = []
    _collect(path, (), order)
    order = _compose(order, system_file)
    data: dict = {}
    prov: dict = {}
    files: list = []
    warnings: list = []
    for i, e in enumerate(order):
        warnings += _override_warnings(order, data, e.raw, i, prov)
        _merge(data, e.raw, _Source(display_path(e.path), e.path.parent, i), prov)
        if str(e.path) not in files:
            files.append(str(e.path))
    for text in overrides:
        _apply_override(data, text, prov)
    ctx = _Ctx(prov, [display_path(Path(f)) for f in files], display_path(path))
    cfg = _finish(_convert(Config, data, (), ctx), ctx, files)
    warnings += effective_value_warnings(cfg)
    return attrs.evolve(cfg, load_warnings=tuple(warnings))


def _nodes(cfg: Config, ctx: _Ctx) -> Config:
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


def _check_fabric(cfg: Config, ctx: _Ctx):
    """The fabric builds and every GPU reaches every other (after the link checks of _check)."""
    from ..topology import TopologyError, build_fabric, build_routes
    try:
        build_routes(cfg, build_fabric(cfg))
    except TopologyError as e:
        key, _, _ = str(e).partition(":")
        raise ctx.error(tuple(key.split(".")), str(e).partition(": ")[2]) from None


def _finish(cfg: Config, ctx: _Ctx, files) -> Config:
    cfg = _nodes(cfg, ctx)
    _check(cfg, ctx)
    _check_fabric(cfg, ctx)
    _check_layer(cfg, ctx)
    cfg = _resolve_kernel_files(cfg, ctx)
    cfg = _resolve_layer_files(cfg, ctx)
    _check_hub_sizes(cfg, ctx)
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
    src = _Source(label, Path.cwd())
    ctx = _Ctx({(k,): src for k in data}, [label], label, base_units=True)
    return _finish(_convert(Config, data, (), ctx), ctx, files)


_ERROR_KEY = re.compile(r"((?:system|scheme|workload|run|stats|trace|debug)(?:\.[A-Za-z0-9_]+|\[\d+\])*)")


def locate(cfg: Config, message: str) -> str:
    """`message` prefixed with the file that set the key it starts with (errors found after
    loading: builder, MoE layer); unchanged if it already starts with something else."""
    m = _ERROR_KEY.match(message)
    if not m:
        return message
    return f"{cfg.where(m.group(1)) or 'config'}: {message}"
