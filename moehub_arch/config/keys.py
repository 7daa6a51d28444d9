"""One declaration per parameter: a block's view of a config key, generated from the schema.

A config key is declared once, in the schema (schema_*.py `_f`: kind, unit, default, bounds, doc);
its source is the comment on the line of the system file that sets it (`moehub-sim config --list
KEY --config FILE` prints it) or, for a default, the `assumption:` its doc states. A block that
reads the key in compiled code (a scalar of the PARAMS record, declare.py `Param`) declares only
which field it reads it into and, when the field is not the key's value itself, how it is derived
(`key_param`): the unit, the description and the source of the block's view are the schema's, so
`moehub-sim blocks` and `moehub-sim config --list` cannot tell two stories about one number.

Parameters that are not one key's view - sizes the builder lays out, values derived from several
keys - stay plain `Param`s with their own words; each key they name must exist in the schema
(tests/test_params.py).
"""
import attrs

from ..declare import Param
from .schema import Config

# the unit a key's value is stored in, by kind (schema_fields.BASE_UNITS, spelled as the blocks
# spell their parameters' units); an int or float key names its own (`_f(..., unit=)`)
_KIND_UNITS = {"size": "bytes", "time": "ps", "bandwidth": "B/s", "frequency": "Hz",
               "bool": "bool"}


class UnknownKey(KeyError):
    """A dotted key that names no leaf of the schema."""


def key_attribute(key: str) -> attrs.Attribute:
    """The schema's field (attrs.Attribute, its metadata the declaration) of a dotted key
    ('system.gpu.sm.max_resident_tbs'); UnknownKey if the schema has no such leaf."""
    cls, attr = Config, None
    for part in key.split("."):
        if cls is None:
            raise UnknownKey(key)
        fields = attrs.fields_dict(cls)
        if part not in fields:
            raise UnknownKey(key)
        attr = fields[part]
        cls = attr.metadata.get("cls") if attr.metadata.get("kind") == "node" else None
    if attr is None or attr.metadata.get("kind") == "node":
        raise UnknownKey(key)
    return attr


def key_unit(key: str) -> str:
    """The unit of a key's value: the kind's base unit, or the unit its declaration names."""
    m = key_attribute(key).metadata
    return m.get("unit") or _KIND_UNITS.get(m["kind"], "")


def key_doc(key: str) -> str:
    """The one-line description the schema declares for a key."""
    return key_attribute(key).metadata["doc"]


def read_key(key: str):
    """cfg -> the value of a dotted key in a loaded Config."""
    parts = tuple(key.split("."))

    def value(cfg):
        node = cfg
        for part in parts:
            node = getattr(node, part)
        return node
    return value


def key_param(field: str, key: str, value=None, unit=None, how: str = "", *,
              source: str = "") -> Param:
    """A block's parameter that is the view of one config key (module docstring).

    `value`: cfg -> int when the field is derived from the key (cycles to ticks, a choice to a
    flag); None: the key's value. `unit`: the field's unit when `value` converts it (None: the
    key's). `how`: what the field holds when it is not the key's value ('1: launch, 0: claim';
    'in ticks'), appended to the key's description. `source`: what the key's own declaration does
    not say about where the number comes from, appended to 'config: <key>'."""
    attr_unit = key_unit(key)
    if value is None and unit not in (None, attr_unit):
        raise ValueError(f"parameter {field}: the view of {key} is in {attr_unit}, not {unit}")
    doc = key_doc(key) + (f" ({how})" if how else "")
    return Param(field, key, unit or attr_unit, doc, value or read_key(key),
                 f"config: {key}" + (f" ({source})" if source else ""))
