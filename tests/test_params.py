"""One declaration per parameter (config/keys.py): a config key is declared once, in the schema,
and a block's parameter that views it takes its unit, description and source from there; every
key a parameter names exists; every parameter the blocks declare is read by the compiled code."""
import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from moehub_arch import composition
from moehub_arch.config.describe import schema_keys
from moehub_arch.config.keys import UnknownKey, key_attribute, key_doc, key_param, key_unit

ROOT = Path(__file__).resolve().parents[1]
PARAMS = [(b.name, p) for b in composition.BLOCKS for p in b.params]
SCHEMA_KEYS = {d.key for d in schema_keys()}


def _keys(p):
    return [k.strip() for k in p.key.split(",") if k.strip()]


def _known(key):
    """A leaf of the schema (list items as [i], as `config --list` names them) or a section."""
    if key in SCHEMA_KEYS:
        return True
    try:
        key_attribute(key)
        return True
    except UnknownKey:
        return any(k.startswith(key + ".") or k.startswith(key + "[i]") for k in SCHEMA_KEYS)


def test_every_key_a_parameter_names_is_in_the_schema():
    bad = [(b, p.field, k) for b, p in PARAMS for k in _keys(p) if not _known(k)]
    assert bad == []


def test_a_parameter_that_views_one_key_does_not_restate_its_declaration():
    """A parameter whose only key is a schema leaf is made by key_param: its description starts
    with the schema's, its source is 'config: <key>', its unit is the key's unless its value
    converts it (then the description says how)."""
    viewed = 0
    for b, p in PARAMS:
        keys = _keys(p)
        if len(keys) != 1:
            continue
        try:
            attr = key_attribute(keys[0])
        except UnknownKey:
            continue
        if attr.metadata["kind"] in ("list", "named"):
            continue   # the number of a list's entries (workload.multicast: objects)
        doc = key_doc(keys[0])
        viewed += 1
        assert p.doc.startswith(doc), (b, p.field, p.doc, doc)
        assert p.source.startswith(f"config: {keys[0]}"), (b, p.field, p.source)
        if p.unit != key_unit(keys[0]):
            assert p.doc != doc, f"{b}.{p.field} converts {keys[0]} but does not say how"
    assert viewed >= 60


def test_every_int_key_a_parameter_views_names_its_unit():
    for b, p in PARAMS:
        for k in _keys(p):
            try:
                m = key_attribute(k).metadata
            except UnknownKey:
                continue
            if m["kind"] in ("int", "float"):
                assert m.get("unit"), f"{k} (viewed by {b}.{p.field}) declares no unit"


def test_key_param_takes_the_schema_declaration():
    p = key_param("tbs_per_sm", "system.gpu.sm.max_resident_tbs")
    assert (p.unit, p.doc, p.source) == ("thread blocks", "thread blocks resident on one SM at "
                                         "a time", "config: system.gpu.sm.max_resident_tbs")
    p = key_param("t", "system.gpu.hub.tx_latency_cycles", lambda cfg: 7, "ps", "in ticks")
    assert (p.unit, p.doc) == ("ps", key_doc("system.gpu.hub.tx_latency_cycles") + " (in ticks)")
    with pytest.raises(ValueError, match="in hub cycles, not ps"):
        key_param("t", "system.gpu.hub.tx_latency_cycles", unit="ps")
    with pytest.raises(UnknownKey):
        key_param("t", "system.gpu.hub.no_such_key")


def test_parameter_values_are_the_configs():
    """The generated view reads the key: the default run's values equal the config's."""
    from moehub_arch.config.loader import load_config
    cfg = load_config(ROOT / "configs" / "ubench" / "alltoall.yaml")
    values = composition.param_values(cfg)
    assert values["tbs_per_sm"] == cfg.system.gpu.sm.max_resident_tbs
    assert values["ib_mtu"] == cfg.system.infiniband.mtu_bytes
    assert values["cut_through"] == int(cfg.system.switch.forwarding == "cut_through")


def _sources():
    return "\n".join(p.read_text() for p in (ROOT / "moehub_arch").rglob("*.py"))


def test_every_parameter_is_read_somewhere():
    """A parameter nothing reads is dead (link_latency_ticks was; max_payload and
    switch_traversal_ticks were until this test): the compiled code or a Python helper reads
    each field as `.name`. Timer ranges (tm_*) are read by the run loop through the composition."""
    text = _sources()
    dead = [p.field for _, p in PARAMS if not re.search(rf"\.{p.field}\b", text)]
    assert dead == []


def test_blocks_and_config_list_print_one_description():
    out = subprocess.run([sys.executable, "-m", "moehub_arch", "blocks", "scheduler"],
                         capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert "tbs_per_sm (thread blocks) <- system.gpu.sm.max_resident_tbs: thread blocks " \
           "resident on one SM at a time (a block of warp groups counts once)" in out
    out = subprocess.run([sys.executable, "-m", "moehub_arch", "config", "--list",
                          "system.gpu.sm.max_resident_tbs"],
                         capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert "[int (thread blocks)]" in out
