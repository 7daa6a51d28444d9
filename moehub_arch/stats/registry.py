"""Stat values with their declared unit and description, in dump order.

Components declare their statistics next to their model (``STATS`` tables in the collector,
``moehub_arch.stats.collect``); this module is only the container. Names are dotted and
hierarchical, gem5 style (``system.gpu0.nvlink3.tx_wire_bytes``).
"""
import fnmatch
import re
from typing import NamedTuple


class Stat(NamedTuple):
    """One stat: immutable, compared and hashed by its fields. A named tuple rather than an attrs
    class: a run of 72 GPUs makes about 195,000 of them, and a tuple is built several times faster
    (attrs' frozen __init__ sets each field through object.__setattr__)."""
    name: str
    value: float
    unit: str
    desc: str


class StatsSet:
    """An ordered collection of stats; names are unique."""

    def __init__(self):
        self._stats = {}

    def add(self, name, value, unit, desc):
        if name in self._stats:
            raise ValueError(f"stat {name} declared twice")
        if hasattr(value, "item"):
            value = value.item()
        self._stats[name] = Stat(name, value, unit, desc)

    def __getitem__(self, name):
        return self._stats[name].value

    def __contains__(self, name):
        return name in self._stats

    def __iter__(self):
        return iter(self._stats.values())

    def __len__(self):
        return len(self._stats)

    def stat(self, name):
        """The Stat (name, value, unit, desc) named `name` (KeyError if none)."""
        return self._stats[name]

    def get(self, name, default=None):
        s = self._stats.get(name)
        return default if s is None else s.value

    def match(self, pattern):
        """Stats whose name matches a shell-style pattern (``system.gpu*.hub.rx_payload_bytes``)."""
        # fnmatch.fnmatchcase's own test, compiled once rather than looked up per name
        matches = re.compile(fnmatch.translate(pattern)).match
        return [s for s in self._stats.values() if matches(s.name)]

    def as_dict(self):
        return {s.name: s.value for s in self._stats.values()}
