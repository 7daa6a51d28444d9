"""`moehub-sim config --list [PATTERN]`: every config key with its type, default, unit and
description (from the schema, schema.py), and for a given config the value it resolves to, the file
that set it and that line's comment - the public source or `assumption:` the shipped files carry
for every hardware number (as gem5 lists a SimObject's parameters, or SST its ELI parameters).
"""
import fnmatch
import re
from pathlib import Path

import attrs

from ..inputs import InputFileError, read_text
from .schema import BASE_UNITS, UNIT_KINDS, Config
from .units import format_quantity

_KEY_LINE = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*:\s*(?P<rest>.*)$")


def _split_comment(rest: str):
    """(value text, comment) of a YAML line's remainder; a '#' inside quotes is not a comment."""
    quote = None
    for i, ch in enumerate(rest):
        if ch in "'\"" and quote in (None, ch):
            quote = None if quote else ch
        elif ch == "#" and quote is None and (i == 0 or rest[i - 1].isspace()):
            return rest[:i].strip(), rest[i + 1:].strip()
    return rest.strip(), ""


def yaml_comments(path) -> dict:
    """Dotted key -> (value text, trailing comment) of the block-style mappings in a YAML file."""
    out, stack = {}, []   # stack of (indent, key)
    try:
        lines = read_text(path, "config file").splitlines()   # any encoding the loader reads
    except InputFileError:
        return out
    for line in lines:
        if not line.strip() or line.lstrip().startswith(("#", "-")):
            continue
        m = _KEY_LINE.match(line)
        if not m:
            continue
        indent = len(m["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, m["key"]))
        value, comment = _split_comment(m["rest"])
        out[".".join(k for _, k in stack)] = (value, comment)
    return out


@attrs.frozen
class KeyDoc:
    key: str          # dotted path; list items and named entries as <name> / [i]
    kind: str         # the schema kind (int, time, bandwidth, choice, ...)
    unit: str         # base unit of a quantity, what an int or float counts, else ''
    default: str      # 'required' for keys every config must set
    doc: str
    choices: tuple


def _default_text(a) -> str:
    if a.default is attrs.NOTHING:
        return "required"
    d = a.default
    if attrs.has(type(d)):
        return ""
    kind = a.metadata.get("kind")
    if kind in UNIT_KINDS and isinstance(d, (int, float)):
        return format_quantity(d, kind)
    if isinstance(d, tuple):
        return "[" + ", ".join(map(str, d)) + "]"
    return "''" if d == "" else str(d)


def schema_keys(cls=Config, prefix="") -> list:
    """KeyDoc of every leaf key of the schema, in schema order."""
    out = []
    for a in attrs.fields(cls):
        m = a.metadata
        kind = m.get("kind")
        if kind == "internal":
            continue
        key = f"{prefix}.{a.name}" if prefix else a.name
        if kind == "node":
            out += schema_keys(m["cls"], key)
        elif kind == "named":
            out += [k for k in schema_keys(m["cls"], f"{key}.<name>") if not k.key.endswith(".name")]
        elif kind == "list":
            out += schema_keys(m["cls"], f"{key}[i]")
        else:
            out.append(KeyDoc(key, kind, BASE_UNITS.get(kind) or m.get("unit") or "",
                              _default_text(a), m["doc"],
                              tuple(m.get("choices") or ())))
    return out


def _matches(key: str, pattern: str | None) -> bool:
    if not pattern:
        return True
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(key, pattern)
    return pattern.lower() in key.lower()


def _value(cfg: Config, key: str):
    node = cfg
    for k in key.split("."):
        if not attrs.has(type(node)) or "<name>" in k or "[i]" in k:
            return None
        node = getattr(node, k)
    return node


def _setter(cfg: Config, key: str) -> str:
    """The file (or --set) that set `key` itself (the loader records every key a file writes,
    config/loader.py `_mark`); '' for a schema default - a file that wrote other keys of the same
    mapping did not set it."""
    path = tuple(key.split("."))
    for k, src in cfg.key_sources:
        if tuple(k) == path:
            return src
    return ""


def describe_keys(pattern=None, cfg: Config | None = None) -> str:
    """The listing `moehub-sim config --list` prints; with `cfg`, each key's value in it and the
    comment on the line that set it (its source or assumption)."""
    docs = [d for d in schema_keys() if _matches(d.key, pattern)]
    if not docs and pattern and not any(c in pattern for c in "*?["):
        # no key name holds it: the keys whose description names it ("row_table": "row table")
        words = pattern.lower().replace("_", " ")
        docs += [d for d in schema_keys() if d not in docs and words in d.doc.lower()]
    if not docs:
        return ""
    comments = {}
    lines = []
    for d in docs:
        kind = d.kind + (f" ({d.unit})" if d.unit else "")
        if d.choices:
            kind += ": " + "|".join(d.choices)
        head = f"{d.key}  [{kind}]  default: {d.default}"
        lines.append(head)
        lines.append(f"    {d.doc}")
        if cfg is None:
            continue
        value = _value(cfg, d.key)
        if value is None and d.default != "required":
            continue
        where = _setter(cfg, d.key)
        text, note = "", ""
        if where and where.endswith((".yaml", ".yml")):
            path = Path(where)
            if not path.is_absolute():
                path = Path.cwd() / path
            if where not in comments:
                comments[where] = yaml_comments(path)
            text, note = comments[where].get(d.key, ("", ""))
        shown = text or (format_quantity(value, d.kind)
                         if d.kind in UNIT_KINDS and isinstance(value, (int, float))
                         else str(value))
        lines.append(f"    value: {shown}" + (f"   (set in {where})" if where else "   (default)"))
        if note:
            lines.append(f"    source: {note}")
    return "\n".join(lines)
