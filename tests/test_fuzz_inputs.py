"""Property-based tests (hypothesis) of the inputs a user writes, none of which runs a simulation:
config numeric fields at and beyond their bounds, ISA files, assembly, and checkpoint files.

Property: every input is either accepted - and then holds values the engine can represent
(integers within 64 bits, times within the simulated-time range) - or refused with the named
error of its kind (ConfigError, IsaError, AsmError, CheckpointError: one paragraph, exit status
2). Never another exception (a traceback for the user).

The suite runs the derandomized `moehub-ci` profile of tests/test_fuzz.py with a few examples
per target (seconds); MOEHUB_FUZZ_EXAMPLES=N hunts with N fresh examples per target, and
MOEHUB_FUZZ_LOG=FILE logs each example's outcome (accepted / refused) as it ends.
"""
import json
import math
import os
import shutil
import string

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from test_fuzz import event   # also registers and loads the hypothesis profiles
from conftest import CONFIGS, load, mini_system

P2P = CONFIGS / "ubench/p2p_latency.yaml"
SUITE_EXAMPLES = {"config": 40, "isa": 30, "asm": 30, "checkpoint": 10}
_HUNT = int(os.environ.get("MOEHUB_FUZZ_EXAMPLES", "0"))
INT64_MAX = 2 ** 63 - 1


def examples(kind):
    return settings(max_examples=_HUNT or SUITE_EXAMPLES[kind])


# ------------------------------------------------------------------ config numbers at bounds
def _numeric_keys():
    """(dotted key, kind, min, max) of every numeric field of the schema (lists and named
    entries excluded: their keys depend on the config)."""
    from moehub_arch.config.schema import Config
    out = []

    def walk(cls, prefix):
        for a in attrs.fields(cls):
            m = a.metadata
            kind = m.get("kind")
            key = f"{prefix}.{a.name}" if prefix else a.name
            if kind == "node":
                walk(m["cls"], key)
            elif kind in ("int", "opt_int", "float", "time", "frequency", "size", "bandwidth"):
                out.append((key, kind, m.get("min"), m.get("max")))
    walk(Config, "")
    return out


KEYS = _numeric_keys()
UNITS = {"time": ["ps", "ns", "us", "ms", "s"], "frequency": ["Hz", "kHz", "MHz", "GHz"],
         "size": ["B", "KB", "MiB", "GB", "TiB"], "bandwidth": ["B/s", "KB/s", "GB/s", "Gbps"]}


def _edge_numbers():
    big = [2 ** 31 - 1, 2 ** 31, 2 ** 53 + 1, 2 ** 62, INT64_MAX, 2 ** 63, 2 ** 64, 10 ** 30,
           -1, -(2 ** 63), -(2 ** 63) - 1, 0, 1]
    return st.one_of(st.sampled_from(big), st.integers(-2 ** 70, 2 ** 70),
                     st.floats(allow_nan=True, allow_infinity=True),
                     st.sampled_from([".nan", ".inf", "-.inf", "1e400", "1e-400", "0.0", "-0.0"]))


@st.composite
def _override(draw):
    key, kind, lo, hi = draw(st.sampled_from(KEYS))
    if kind in UNITS:
        number = draw(st.one_of(
            st.sampled_from(["0", "1", "-1", "1e9999999", "1e30", "9223372036854775807",
                             "9223372036854775808", "4611686018427387", "4611686018427388",
                             "1e-30", ".5", "1.", "nan", "inf"]),
            st.integers(-10 ** 25, 10 ** 25).map(str),
            st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr)))
        value = number + draw(st.sampled_from(UNITS[kind] + [""]))
    else:
        value = draw(_edge_numbers())
        if lo is not None and draw(st.booleans()):
            value = lo + draw(st.sampled_from([-1, 0, 1]))
    text = value if isinstance(value, str) else repr(value)
    return key, kind, f"{key}={text}"


@examples("config")
@given(_override())
def test_config_numbers_at_their_bounds_are_accepted_in_range_or_refused(case):
    from moehub_arch.config import ConfigError, load_config
    from moehub_arch.config.units import MAX_TICKS
    key, kind, override = case
    try:
        cfg = load_config(P2P, [override])
    except ConfigError as e:
        # one paragraph naming a file and a key (a cross-field check names the other key)
        assert "\n" not in str(e) and ": " in str(e) and "Traceback" not in str(e), str(e)
        event("refused: ConfigError")
        return
    event("accepted")
    value = cfg
    for part in key.split("."):
        value = getattr(value, part)
    if value is None:
        return
    if kind in ("int", "opt_int", "size", "frequency"):
        assert isinstance(value, int) and -(2 ** 63) <= value <= INT64_MAX, (override, value)
    elif kind == "time":
        assert isinstance(value, int) and 0 <= value <= max(MAX_TICKS, INT64_MAX
                                                            if key == "run.max_wall" else 0)
    else:
        assert math.isfinite(value), (override, value)


# ------------------------------------------------------------------------------ ISA files
_FIELD_VALUES = st.one_of(
    st.integers(-2 ** 70, 2 ** 70), st.floats(), st.booleans(), st.none(),
    st.sampled_from(["alu", "nop", "lsu", "add", "ld", "st", "copy", "exit", "branch", "f32",
                     "bf16", "'10**10**10'", "sm.nope", "1e400", "hbm.latency_cycles * 2",
                     "[dst, a, b]", "[]", "[dst, dst]", "{}", "'2 ** 40'", "-1"]),
    st.text(alphabet=string.printable, max_size=12))
_FIELDS = ["semantic", "subop", "unit", "operands", "latency", "ii", "throughput", "dtype",
           "description", "replace", "lsu_loads", "bogus"]


_COSTS = st.one_of(st.integers(0, 2 ** 31 - 1), st.integers(0, 64),
                  st.sampled_from(["hbm.latency_cycles * 2", "sm.lsu_bytes_per_cycle",
                                   "'sm.tensor_bf16_flops_per_cycle // 2'", "'2 ** 31'"]))


@st.composite
def _well_formed_entry(draw):
    """The fields of an instruction a user could mean: a real semantic with its subop, unit and
    full operand list, costs in range or as parameter expressions - so the fuzz reaches the
    accepted path (and the resolution of expressions) besides the refusals. One field is
    sometimes replaced by a random value."""
    from moehub_arch.isa.encoding import SEMANTIC_NAMES, SUBOP_NAMES, UNIT_NAMES, operand_slots
    sem = draw(st.sampled_from(range(len(SEMANTIC_NAMES))))
    fields = {"semantic": SEMANTIC_NAMES[sem], "unit": draw(st.sampled_from(UNIT_NAMES)),
              "operands": json.dumps(list(operand_slots(sem))),
              "latency": draw(_COSTS), "ii": draw(_COSTS),
              "description": json.dumps(draw(st.text(string.ascii_letters + " ", min_size=1,
                                                     max_size=20)))}
    if SUBOP_NAMES.get(sem):
        fields["subop"] = draw(st.sampled_from(SUBOP_NAMES[sem]))
    if draw(st.booleans()):
        fields["throughput"] = draw(_COSTS)
    if draw(st.integers(0, 3)) == 0:
        fields[draw(st.sampled_from(_FIELDS))] = draw(_FIELD_VALUES)
    return fields


@st.composite
def _random_entry(draw):
    fields = draw(st.lists(st.sampled_from(_FIELDS), max_size=9, unique=True))
    return {f: draw(_FIELD_VALUES) for f in fields}


def _yaml_value(v):
    return json.dumps(v) if not isinstance(v, str) else v


@st.composite
def _isa_text(draw):
    lines = ["instructions:"]
    for _ in range(draw(st.integers(0, 4))):
        name = draw(st.sampled_from(["x", "y", "add", "ld", "z9", "bad name", "x", "my.op_2"]))
        entry = draw(st.one_of(_well_formed_entry(), _well_formed_entry(), _random_entry()))
        body = ", ".join(f"{f}: {_yaml_value(v)}" for f, v in entry.items())
        lines.append(f"  {name}: {{{body}}}")
    text = "\n".join(lines) + "\n"
    if draw(st.integers(0, 3)) == 0:   # sometimes damage the text itself
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.text(max_size=8)) + text[i:]
    return text


@pytest.fixture(scope="module")
def params():
    from moehub_arch.config import flat_params
    return flat_params(load("ubench/p2p_latency.yaml"))


@examples("isa")
@given(text=_isa_text())
def test_isa_files_are_accepted_or_refused_by_name(tmp_path_factory, params, text):
    from moehub_arch.isa import IsaError, load_isa
    path = tmp_path_factory.mktemp("isa") / "my.yaml"
    path.write_bytes(text.encode("utf-8", "replace"))
    try:
        # the user's file alone (the shipped ones are read the same way; reading them again for
        # every example would cost most of the hunt)
        isa = load_isa([path]).resolve(params)
    except IsaError as e:
        assert str(path) in str(e) or "my.yaml" in str(e), str(e)
        event("refused: IsaError")
        return
    event("accepted")
    for ins in isa.instructions.values():
        assert 0 <= ins.latency <= 2 ** 31 - 1 and 1 <= ins.ii <= 2 ** 31 - 1


# ------------------------------------------------------------------------------ assembly
_ASM_LINES = st.one_of(
    st.sampled_from(["    exit", "    nop", "top:", "top:", "    bra top", "    add r1, r1, 1",
                     "    mov r1, 18446744073709551616", "    mov r1, -9223372036854775809",
                     "    mov r2, 0x7fffffffffffffff", "    ld r1, [%flag+8]",
                     "    st [%flag+99999999999999999999], r1", "    sleep 100000000000000000000",
                     "    wait.ge [%flag], 1", "    copy %times, %flag, 64", ".smem 1GB",
                     ".smem 99999999999999999999999B", ".threads 0", ".regs 100000",
                     '.include "nothere.s"', ".macro m a\n    add \\a, \\a, 1\n.endm", "    m r1",
                     "    m", ".kernel other", ".param p", "    beq r1, 0, top",
                     "    add r32, r1, 1", "    add r1, %nope, 1", "    flag.set %peer, [%flag], r1"]),
    st.text(max_size=20))


@examples("asm")
@given(lines=st.lists(_ASM_LINES, max_size=12))
def test_assembly_is_accepted_or_refused_by_line(tmp_path_factory, lines):
    from moehub_arch.isa import AsmError, assemble_files, default_isa_paths, load_isa
    from conftest import P2P_KERNEL_HEAD
    isa = _resolved_isa()
    path = tmp_path_factory.mktemp("asm") / "k.s"
    path.write_bytes((P2P_KERNEL_HEAD + "\n".join(lines) + "\n").encode("utf-8", "replace"))
    try:
        program = assemble_files([path], isa)
    except AsmError as e:
        assert "k.s" in str(e) or "nothere.s" in str(e), str(e)
        event("refused: AsmError")
        return
    event("accepted")
    assert program.code.dtype == np.int64


_ISA = []


def _resolved_isa():
    if not _ISA:
        from moehub_arch.config import flat_params
        from moehub_arch.isa import default_isa_paths, load_isa
        _ISA.append(load_isa(default_isa_paths()).resolve(flat_params(load("ubench/p2p_latency.yaml"))))
    return _ISA[0]


# ------------------------------------------------------------------------------ checkpoints
@pytest.fixture(scope="module")
def same_build():
    """Restore rebuilds the run from the saved config; for the examples that leave it as it was,
    the build (0.5 s, most of an example) is the same every time: built once and reused (its
    arrays are overwritten by each restore)."""
    from moehub_arch import simulation
    real = simulation.Simulation
    built = {}

    def cached(cfg):
        key = json.dumps(cfg.to_dict(), sort_keys=True, default=str)
        if key not in built:
            built.clear()
            built[key] = real(cfg)
        return built[key]
    simulation.Simulation = cached
    yield
    simulation.Simulation = real


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from moehub_arch.checkpoint import CheckpointWriter
    from moehub_arch.simulation import Simulation
    d = tmp_path_factory.mktemp("fuzz-ck")
    sim = Simulation(load("ubench/p2p_latency.yaml", *mini_system()))
    writer = CheckpointWriter([2_000_000], str(d / "ck"))
    sim.run([writer])
    return d / "ck"


_JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70),
                               st.floats(allow_nan=False), st.text(max_size=6)),
                     lambda inner: st.one_of(st.lists(inner, max_size=3),
                                             st.dictionaries(st.text(max_size=4), inner,
                                                             max_size=3)), max_leaves=6)


@st.composite
def _damage(draw):
    """(file, how, argument): what is done to one file of the checkpoint."""
    target = draw(st.sampled_from(["meta.json", "input_config.json", "config.json", "state.npz"]))
    if target == "state.npz":
        how = draw(st.sampled_from(["truncate", "bytes"]))
        return target, how, (draw(st.floats(0, 1)), draw(st.binary(min_size=1, max_size=32)))
    how = draw(st.sampled_from(["set", "drop", "text"]))
    return target, how, (draw(st.integers(0, 10 ** 6)), draw(_JSON), draw(st.text(max_size=20)))


def _walk_to(data, pick):
    """A (container, key) inside a JSON document, chosen by the integer `pick`."""
    node, key = data, None
    while isinstance(node, (dict, list)) and node:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        key = keys[pick % len(keys)]
        pick //= len(keys) + 1
        if pick == 0 or not isinstance(node[key], (dict, list)) or not node[key]:
            return node, key
        node = node[key]
    return None, None


@examples("checkpoint")
@given(damage=st.lists(_damage(), min_size=1, max_size=3))
def test_damaged_checkpoints_restore_or_are_refused(tmp_path_factory, checkpoint, same_build,
                                                   damage):
    d = tmp_path_factory.mktemp("ck") / "ck"
    # hard links (a 10 MB copy per example would cost most of a hunt); a damaged file is
    # written as a new file of its own, so the original stays whole
    shutil.copytree(checkpoint, d, copy_function=os.link)
    try:
        _damage_and_restore(d, damage)
    finally:
        shutil.rmtree(d.parent)


def _rewrite(path, data):
    path.unlink()
    path.write_bytes(data if isinstance(data, bytes) else data.encode())


def _damage_and_restore(d, damage):
    from moehub_arch.checkpoint import CheckpointError, restore
    from moehub_arch.errors import user_errors
    for target, how, arg in damage:
        path = d / target
        if target == "state.npz":
            data = bytearray(path.read_bytes())
            at = int(arg[0] * len(data))
            if how == "truncate":
                data = data[:at]
            else:
                data[at:at + len(arg[1])] = arg[1]
            _rewrite(path, bytes(data))
            continue
        if how == "text":
            text = path.read_text()
            i = arg[0] % (len(text) + 1)
            _rewrite(path, text[:i] + arg[2] + text[i + len(arg[2]):])
            continue
        try:
            data = json.loads(path.read_text())
        except ValueError:   # an earlier damage made it text that is not JSON
            continue
        node, key = _walk_to(data, arg[0])
        if node is None:
            continue
        if how == "drop":
            del node[key]
        else:
            node[key] = arg[1]
        _rewrite(path, json.dumps(data))
    try:
        restore(d)
        event("accepted")
    except CheckpointError as e:
        assert str(d) in str(e), str(e)
        event("refused: CheckpointError")
    except user_errors() as e:   # a saved config that no longer loads or builds: named by the
        assert "input_config.json" in str(e), str(e)   # loader or builder, as a config file
        event(f"refused: {type(e).__name__}")
