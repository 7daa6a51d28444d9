"""Argument checks of the Python API (issue 52): a wrong type or value raises TypeError or
ValueError naming the argument at the call, never an error from deep inside (a TypeError of
`os.fspath`, a YAML RepresenterError) and never a silent conversion (a float seed truncated).
"""
import math
import os
from collections.abc import Mapping

INT64_MAX = 2 ** 63 - 1


def path_arg(name, value, optional=False):
    """A file or directory path: str or os.PathLike (None only when `optional`)."""
    if value is None and optional:
        return None
    if isinstance(value, (str, os.PathLike)) and not isinstance(value, bool):
        if isinstance(value, str) and not value.strip():
            raise ValueError(f"{name}: expected a path, found an empty string")
        return value
    raise TypeError(f"{name}: expected a path (str or os.PathLike"
                    f"{', or None' if optional else ''}), found {_kind(value)}")


def int_arg(name, value, lo=None, hi=INT64_MAX, optional=False):
    """An integer (not a bool, not a float: 1.5 would be truncated) in [lo, hi]."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an integer, found {_kind(value)}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bound = (f">= {lo}" if hi is None else f"<= {hi}" if lo is None
                 else f"in [{lo}, {hi}]")
        raise ValueError(f"{name}: expected an integer {bound}, found {value}")
    return value


def bool_arg(name, value):
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected True or False, found {_kind(value)}")
    return value


def yaml_value_arg(name, value):
    """A value an override may hold: what YAML writes and reads back (str, int, finite or not
    float, bool, None, and lists / mappings of those)."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yaml_value_arg(f"{name}[{i}]", v)
        return value
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"{name}: expected string keys, found {_kind(k)}")
            yaml_value_arg(f"{name}.{k}", v)
        return value
    raise TypeError(f"{name}: expected a value a config holds (str, number, bool, None, or a "
                    f"list or mapping of those), found {_kind(value)}")


def _kind(value):
    if value is None:
        return "None"
    if isinstance(value, float) and not math.isfinite(value):
        return f"float {value}"
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}" if isinstance(value, (int, float, str)) \
        else type(value).__name__
