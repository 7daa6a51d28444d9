"""The config schema's field vocabulary: unit kinds, base units and the field constructor.

`_f(kind, doc, default, min=, max=, choices=, cls=, unit=)` makes an attrs field whose metadata the
loader (loader.py, convert.py) converts and checks the YAML value by; schema.py describes the kinds.
It is the key's one declaration: a block that reads the key declares only the field it reads it
into (keys.py `key_param`), and takes its unit and description from here. `unit` names what an
int or float counts ('thread blocks', 'SM cycles'); a quantity's unit is its kind's base unit.
Every schema module (schema_system.py, schema_workload.py, schema_schemes.py, schema.py) builds
its sections from it.
"""
import attrs

UNIT_KINDS = ("time", "frequency", "size", "bandwidth")
BASE_UNITS = {"time": "ps", "frequency": "Hz", "size": "B", "bandwidth": "B/s"}
_NO_DEFAULT = attrs.NOTHING


def _f(kind, doc, default=_NO_DEFAULT, *, min=None, max=None, choices=None, cls=None, unit=None):
    meta = {"kind": kind, "doc": doc, "min": min, "max": max, "choices": choices, "cls": cls,
            "unit": unit}
    return attrs.field(default=default, metadata=meta)
