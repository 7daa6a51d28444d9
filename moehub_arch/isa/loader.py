"""ISA tables: load `isa/*.yaml` (the instruction set as data) and resolve its costs for a system.

    isa = load_isa(default_isa_paths())            # mnemonic -> InstructionDef (costs unevaluated)
    table = isa.resolve(flat_params(cfg))          # costs evaluated for one system: ResolvedIsa

Several files may be loaded; a later file adds instructions, and may redefine an existing mnemonic
only when the entry says `replace: true` (so a typo cannot silently shadow a base instruction).
A file may also add semantics (`semantics: {name: {number, operands}}`): what a block adds to the
SM's interpreter (declare.Semantic in its module, with the same number), which its instructions
then name. Every problem is an IsaError naming the file, line and key.
"""

# the largest semantic number a file may declare: the interpreter tests a semantic's bit in a
# 63-bit mask of the blocks' semantics (engine/extension.py SEMANTICS)
MAX_SEMANTIC = 62
_OPERAND_KINDS = ("reg", "src", "addr", "label")
import math
from pathlib import Path

import attrs
import yaml

from ..errors import UserError
from ..inputs import InputFileError, load_yaml, read_text

from ..paths import data_root
from .encoding import (ATOM_RED_ADD, SEM_ATOM, VEC_FIRST_ROWWISE, VEC_LAST_ROWWISE, DTYPE_DST_SHIFT, DTYPE_LSU_LOADS, DTYPE_NAMES, NUM_SEMANTICS, SEM_VEC, SEMANTIC_NAMES,
                       SEMANTIC_OPERANDS, SUBOP_NAMES, SUBOP_OPTIONAL, UNIT_NAMES, operand_slots)
from .expr import ExprError, evaluate

#: the largest latency, initiation interval or throughput an instruction may declare: 2**31 - 1
#: cycles (over a second at any GPU clock), so that a cost times a clock period stays far inside
#: the engine's simulated-time range (config/units.py MAX_TICKS); a larger one is refused
MAX_COST = 2 ** 31 - 1

_FIELDS = ("semantic", "subop", "unit", "operands", "latency", "ii", "throughput", "dtype",
           "dst_dtype", "lsu_loads", "description", "replace")
_REQUIRED = ("semantic", "unit", "operands", "latency", "ii", "description")


class IsaError(UserError):
    """A problem in an ISA file: the message names file, line and key."""

    exit_code = 2


@attrs.frozen
class InstructionDef:
    mnemonic: str
    semantic: int
    subop: int
    unit: int
    operands: tuple        # operand names in assembly order
    slots: tuple           # first slot of each operand (parallel to operands)
    kinds: tuple           # kind of each operand: reg, src, addr, label
    latency: object        # int or expression text
    ii: object
    throughput: object     # int, expression text, or 0 when not size-dependent
    dtype: int
    description: str
    file: str
    line: int


@attrs.frozen
class ResolvedInstruction:
    defn: InstructionDef
    latency: int
    ii: int
    throughput: int


def default_isa_paths():
    """`isa/base.yaml` first, then every other `isa/*.yaml` in name order."""
    folder = data_root() / "isa"
    files = sorted(folder.glob("*.yaml"))
    base = folder / "base.yaml"
    return [base] + [f for f in files if f != base]


def _key_lines(root, section="instructions"):
    """Line number (1-based) of each key under `section:` (root: the file's YAML root node)."""
    lines = {}
    if isinstance(root, yaml.MappingNode):
        for k, v in root.value:
            if k.value == section and isinstance(v, yaml.MappingNode):
                for ik, _ in v.value:
                    lines.setdefault(str(ik.value), ik.start_mark.line + 1)
    return lines


def _no_twice(root, path):
    """A mnemonic defined twice in one file is an error naming both lines (YAML would keep the
    second silently; across files, `replace: true` says a redefinition is meant)."""
    if not isinstance(root, yaml.MappingNode):
        return
    for k, v in root.value:
        if k.value == "instructions" and isinstance(v, yaml.MappingNode):
            seen = {}
            for ik, _ in v.value:
                line = ik.start_mark.line + 1
                if ik.value in seen:
                    raise IsaError(f"{path}:{line}: instructions.{ik.value}: '{ik.value}' is "
                                   f"defined twice in this file (lines {seen[ik.value]} and "
                                   f"{line}); keep one")
                seen[ik.value] = line


def _choice(value, names, where, what):
    if value not in names:
        import difflib
        close = difflib.get_close_matches(str(value), list(names), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise IsaError(f"{where}: unknown {what} '{value}'{hint} (expected one of: {', '.join(names)})")
    return list(names).index(value)


class Semantics:
    """The semantics instructions may name: the base ISA's (isa/encoding.py) and those the loaded
    files add (`semantics:`)."""

    def __init__(self):
        self.names = dict(enumerate(SEMANTIC_NAMES))     # number -> name
        self.operands = dict(SEMANTIC_OPERANDS)          # number -> ((name, kind), ...)
        self.by_name = {n: k for k, n in self.names.items()}
        self.files = {}                                  # added number -> "file:line"

    def add(self, data, lines, path):
        if not isinstance(data, dict):
            raise IsaError(f"{path}: semantics: expected a mapping {{name: {{number, operands}}}}")
        for name, entry in data.items():
            name = str(name)
            where = f"{path}:{lines.get(name, 0)}: semantics.{name}"
            if not isinstance(entry, dict) or set(entry) != {"number", "operands"}:
                raise IsaError(f"{where}: expected exactly the fields 'number' and 'operands'")
            number, ops = entry["number"], entry["operands"]
            if not name.isidentifier():
                raise IsaError(f"{where}: a semantic's name is a lower-case identifier")
            if (isinstance(number, bool) or not isinstance(number, int)
                    or not NUM_SEMANTICS <= number <= MAX_SEMANTIC):
                raise IsaError(f"{where}.number: expected an integer {NUM_SEMANTICS}..{MAX_SEMANTIC} "
                               f"(below {NUM_SEMANTICS}: the base ISA's), found {number!r}")
            if name in self.by_name or number in self.names:
                taken = name if name in self.by_name else number
                raise IsaError(f"{where}: semantic {taken!r} is taken"
                               + (f" ({self.files[self.by_name.get(name, number)]})"
                                  if self.by_name.get(name, number) in self.files else
                                  " (the base ISA, isa/encoding.py)"))
            if (not isinstance(ops, list) or not all(
                    isinstance(o, list) and len(o) == 2 and all(isinstance(x, str) for x in o)
                    and o[1] in _OPERAND_KINDS for o in ops)):
                raise IsaError(f"{where}.operands: expected a list of [name, kind] with kind one "
                               f"of {', '.join(_OPERAND_KINDS)}, found {ops!r}")
            self.names[number] = name
            self.by_name[name] = number
            self.operands[number] = tuple(tuple(o) for o in ops)
            self.files[number] = f"{path}:{lines.get(name, 0)}"


def _parse_instruction(mnemonic, entry, where, path, line, semantics):
    if not isinstance(entry, dict):
        raise IsaError(f"{where}: expected a mapping of fields, found {type(entry).__name__}")
    for k in entry:
        if k not in _FIELDS:
            import difflib
            close = difflib.get_close_matches(str(k), _FIELDS, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise IsaError(f"{where}: unknown field '{k}'{hint} (fields: {', '.join(_FIELDS)})")
    for k in _REQUIRED:
        if k not in entry:
            raise IsaError(f"{where}: missing field '{k}'")
    if not mnemonic.replace(".", "").replace("_", "").isalnum() or not mnemonic[0].isalpha():
        raise IsaError(f"{where}: mnemonic '{mnemonic}' must start with a letter and contain only "
                       f"letters, digits, '_' and '.'")
    _choice(entry["semantic"], semantics.by_name, f"{where}.semantic", "semantic")
    sem = semantics.by_name[entry["semantic"]]
    SEMANTIC_NAMES = semantics.names   # noqa: N806 (the names of this load's semantics)
    subs = SUBOP_NAMES.get(sem)
    if subs and "subop" not in entry and sem in SUBOP_OPTIONAL:
        subop = 0
    elif subs:
        if "subop" not in entry:
            raise IsaError(f"{where}: semantic '{SEMANTIC_NAMES[sem]}' needs a subop "
                           f"(one of: {', '.join(subs)})")
        subop = _choice(entry["subop"], subs, f"{where}.subop", "subop")
    elif "subop" in entry:
        raise IsaError(f"{where}.subop: semantic '{SEMANTIC_NAMES[sem]}' has no variants")
    else:
        subop = 0
    unit = _choice(entry["unit"], UNIT_NAMES, f"{where}.unit", "unit")
    dtype = _choice(entry.get("dtype", "none"), DTYPE_NAMES, f"{where}.dtype", "dtype")
    if "dst_dtype" in entry:
        if sem != SEM_VEC or dtype == 0:
            raise IsaError(f"{where}.dst_dtype: only vector instructions with a dtype have a result "
                           f"type of their own")
        dst = _choice(entry["dst_dtype"], DTYPE_NAMES, f"{where}.dst_dtype", "dtype")
        if dst == 0:
            raise IsaError(f"{where}.dst_dtype: expected one of {', '.join(DTYPE_NAMES[1:])}")
        dtype |= dst << DTYPE_DST_SHIFT
    if "lsu_loads" in entry:
        if sem != SEM_VEC:
            raise IsaError(f"{where}.lsu_loads: only vector instructions load their sources "
                           f"through the load/store unit")
        if not isinstance(entry["lsu_loads"], bool):
            raise IsaError(f"{where}.lsu_loads: expected true or false, found "
                           f"{entry['lsu_loads']!r}")
        if entry["lsu_loads"]:
            dtype |= DTYPE_LSU_LOADS
    ops = entry["operands"]
    if not isinstance(ops, list) or not all(isinstance(o, str) for o in ops):
        raise IsaError(f"{where}.operands: expected a list of operand names")
    sig = operand_slots(sem, semantics.operands)
    if len(set(ops)) != len(ops):
        raise IsaError(f"{where}.operands: an operand is listed twice: {ops}")
    for o in ops:
        if o not in sig:
            raise IsaError(f"{where}.operands: semantic '{SEMANTIC_NAMES[sem]}' has no operand "
                           f"'{o}' (its operands: {', '.join(sig) or 'none'})")
    if sem == SEM_VEC and VEC_FIRST_ROWWISE <= subop <= VEC_LAST_ROWWISE and "cols" not in ops:
        raise IsaError(f"{where}.operands: vector subop '{SUBOP_NAMES[sem][subop]}' works on rows "
                       f"of `cols` elements and needs operand 'cols'")
    posted = sem == SEM_ATOM and subop == ATOM_RED_ADD   # a reduction writes no register
    for name, kind in semantics.operands[sem]:
        if kind in ("reg", "label") and name not in ops and not posted:
            raise IsaError(f"{where}.operands: semantic '{SEMANTIC_NAMES[sem]}' needs operand "
                           f"'{name}' ({kind})")
    costs = {}
    for k in ("latency", "ii", "throughput"):
        v = entry.get(k, 0)
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            raise IsaError(f"{where}.{k}: expected an integer or an expression of system "
                           f"parameters, found {v!r}")
        if isinstance(v, int) and v < 0:
            raise IsaError(f"{where}.{k}: must be >= 0, found {v}")
        if isinstance(v, int) and v > MAX_COST:
            raise IsaError(f"{where}.{k}: must be <= {MAX_COST} (a 32-bit cost in cycles), "
                           f"found {v}")
        costs[k] = v
    if not isinstance(entry["description"], str) or not entry["description"].strip():
        raise IsaError(f"{where}.description: expected a one-line description")
    return InstructionDef(
        mnemonic=mnemonic, semantic=sem, subop=subop, unit=unit, operands=tuple(ops),
        slots=tuple(sig[o][0] for o in ops), kinds=tuple(sig[o][1] for o in ops),
        latency=costs["latency"], ii=costs["ii"], throughput=costs["throughput"], dtype=dtype,
        description=entry["description"].strip(), file=str(path), line=line)


def load_isa(paths):
    """Load and merge ISA files (a list of paths) into an Isa: every file's semantics first, so
    that an instruction may name a semantic another file adds."""
    instrs = {}
    semantics = Semantics()
    files = []
    for path in paths:
        path = Path(path)
        try:
            text = read_text(path, "ISA file")
            data, root = load_yaml(text, str(path), "ISA file", with_node=True)
        except InputFileError as e:
            raise IsaError(str(e)) from None
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            loc = f"{path}:{mark.line + 1}" if mark else str(path)
            raise IsaError(f"{loc}: invalid YAML: {getattr(e, 'problem', e)}") from None
        if not isinstance(data, dict) or not isinstance(data.get("instructions"), dict):
            raise IsaError(f"{path}: expected a top-level mapping 'instructions: {{mnemonic: fields}}'")
        extra = [k for k in data if k not in ("instructions", "semantics")]
        if extra:
            raise IsaError(f"{path}: unknown top-level key '{extra[0]}' (expected 'instructions' "
                           f"and, optionally, 'semantics')")
        if "semantics" in data:
            semantics.add(data["semantics"], _key_lines(root, "semantics"), path)
        files.append((path, data, root))
    for path, data, root in files:
        lines = _key_lines(root)
        _no_twice(root, path)
        for mnemonic, entry in data["instructions"].items():
            mnemonic = str(mnemonic)
            line = lines.get(mnemonic, 0)
            where = f"{path}:{line}: instructions.{mnemonic}"
            defn = _parse_instruction(mnemonic, entry, where, path, line, semantics)
            if mnemonic in instrs and not entry.get("replace", False):
                prev = instrs[mnemonic]
                raise IsaError(f"{where}: '{mnemonic}' is already defined at {prev.file}:{prev.line}; "
                               f"add 'replace: true' to redefine it")
            instrs[mnemonic] = defn
    return Isa(instrs, semantics)


class Isa:
    """The merged instruction tables (costs may still be expressions) and the semantics they
    name (`semantics`: a Semantics)."""

    def __init__(self, instructions, semantics=None):
        self.instructions = dict(instructions)
        self.semantics = semantics or Semantics()

    def resolve(self, params):
        """Evaluate every cost for one system (params: flat_params(cfg))."""
        out = {}
        for m, d in self.instructions.items():
            vals = []
            for k in ("latency", "ii", "throughput"):
                v = getattr(d, k)
                try:
                    x = evaluate(v, params)
                except ExprError as e:
                    raise IsaError(f"{d.file}:{d.line}: instructions.{m}.{k}: cannot evaluate "
                                   f"'{v}': {e}") from None
                if (isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x)
                        or x != int(x) or x < 0 or x > MAX_COST):
                    raise IsaError(f"{d.file}:{d.line}: instructions.{m}.{k}: '{v}' gives {x!r}; "
                                   f"expected a non-negative integer number of cycles/units "
                                   f"<= {MAX_COST}")
                vals.append(int(x))
            if vals[1] < 1:
                raise IsaError(f"{d.file}:{d.line}: instructions.{m}.ii: initiation interval must be "
                               f">= 1 cycle, found {vals[1]}")
            out[m] = ResolvedInstruction(d, *vals)
        return ResolvedIsa(out, self.semantics)

    def reference_text(self, params=None):
        """The ISA reference printed by `moehub-sim isa` (costs evaluated when params given)."""
        resolved = self.resolve(params).instructions if params is not None else None
        lines = ["moehub-arch instruction set (TB-level). Costs in SM cycles; throughput in work "
                 "units per cycle.", ""]
        lines.append("Registers: r0-r31 general (64-bit integer); read-only: "
                     "%gpu %ngpu %sm %nsm %tb %ntb %smem %clock %tick and the kernel's %params.")
        lines.append("Memory operand: [base], [base+imm], [base-imm]; shared memory is %smem+offset.")
        lines.append("")
        lines.append("Semantic operands (an instruction takes some of them, in its own order):")
        for s, name in sorted(self.semantics.names.items()):
            ops = ", ".join(f"{n}:{k}" for n, k in self.semantics.operands[s]) or "-"
            lines.append(f"  {name:<9} {ops}")
        lines.append("")
        by_unit = {}
        for m, d in self.instructions.items():
            by_unit.setdefault(UNIT_NAMES[d.unit], []).append((m, d))
        for unit, items in by_unit.items():
            lines.append(f"[{unit}]")
            for m, d in items:
                if resolved is not None:
                    r = resolved[m]
                    cost = f"lat {r.latency} ii {r.ii}" + (f" thr {r.throughput}" if r.throughput else "")
                else:
                    cost = f"lat {d.latency} ii {d.ii}" + (f" thr {d.throughput}" if d.throughput else "")
                lines.append(f"  {m + ' ' + ', '.join(d.operands):<40} {cost:<28} {d.description}"
                             f"  [{_shown_file(d.file)}:{d.line}]")
            lines.append("")
        return "\n".join(lines).rstrip() + "\n"


def _shown_file(path) -> str:
    """An ISA file as the reference names it: relative to the data root (isa/base.yaml) or to the
    working directory when under one of them, else absolute."""
    p = Path(path).resolve()
    for root in (data_root(), Path.cwd()):
        try:
            return str(p.relative_to(root.resolve()))
        except ValueError:
            pass
    return str(p)


class ResolvedIsa:
    """Instruction tables with integer costs for one system: what the assembler encodes."""

    def __init__(self, instructions, semantics=None):
        self.instructions = instructions
        self.semantics = semantics or Semantics()

    def semantic_name(self, sem):
        """The name of semantic `sem` (the base ISA's or one a loaded file adds)."""
        return self.semantics.names.get(sem, f"semantic {sem}")

    def __contains__(self, mnemonic):
        return mnemonic in self.instructions

    def __getitem__(self, mnemonic):
        return self.instructions[mnemonic]
