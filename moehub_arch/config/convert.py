"""Converting a merged config against the schema: every value to its field's kind and unit.

`convert(cls, raw, path, ctx)` builds a schema class (schema.py) from the merged mapping:
quantities parsed with their units (units.py), integers and floats checked against their bounds
and the engine's range, choices with a did-you-mean, unknown keys named with the closest known
one, required keys that no file set named with the files that were read. `Ctx` knows which file
(or `--set`) set each key, so every error is one `ConfigError` paragraph naming it.
"""
import difflib
import math

import attrs

from .files import ConfigError
from .merge import Source, fmt_path
from .units import (EXAMPLES, INT64_MAX, UnitError, parse_quantity, quantity_limit,
                    range_text)


class Ctx:
    """What conversion and the rules know about where each key came from: the file (or --set)
    that set it (`prov`: key path -> merge.Source), the files read, the main file."""
    def __init__(self, prov: dict, sources: list, main: str, base_units: bool = False):
        self.prov, self.sources, self.main = prov, sources, main
        # base_units: quantities may be plain numbers in base units (a saved config.json)
        self.base_units = base_units

    def source(self, path) -> Source | None:
        for n in range(len(path), 0, -1):
            if tuple(path[:n]) in self.prov:
                return self.prov[tuple(path[:n])]
        return None

    def error(self, path, message):
        src = self.source(path)
        label = src.label if src else self.main
        key = fmt_path(path)
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
        return convert(m["cls"], {} if v is None else v, path, ctx)
    if kind == "list":
        return tuple(convert(m["cls"], item, (*path, i), ctx)
                     for i, item in enumerate(_to_tuple(v, path, ctx)))
    if kind == "named":
        if v is None:
            return ()
        if not isinstance(v, dict):
            raise ctx.error(path, f"expected a mapping of name -> fields, found {_found(v)}")
        return tuple(convert(m["cls"], {} if item is None else item, (*path, name), ctx,
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


def convert(cls, raw, path, ctx, name=None):
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
