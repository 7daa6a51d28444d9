"""Assembler: kernel assembly text (`workloads/kernels/**/*.s`) -> one encoded Program.

Syntax (one statement per line; `#` or `//` starts a comment):

    .kernel NAME              start a kernel; it runs until the next .kernel or the end of file
    .param NAME               declare the next kernel parameter (read as %NAME; at most 16)
    .smem BYTES               shared memory per thread block (integer, or with a unit: 32KB)
    .max_tbs_per_sm N         at most N of this kernel's TBs resident on one SM (default: no limit)
    label:                    a label (local to its kernel); may precede an instruction on the line
    mnemonic op, op, ...      an instruction from the ISA tables (`moehub-sim isa`)

Operands: general registers r0-r31; read-only special registers %gpu %ngpu %sm %nsm %tb %ntb
%smem %clock %tick; parameters %NAME; integers (decimal, 0x hex, 0b binary, `_` separators,
negative); memory operands [base], [base+imm], [base-imm] where base is any source operand; labels.

Errors are AsmError with `file:line:col: message`.
"""
from pathlib import Path
import re

import attrs
import numpy as np

from ..inputs import InputFileError, read_text
from .encoding import (DTYPE, FIRST_PARAM_REG, II, IMM, LAT, LINE, MAX_OPERANDS, MAX_PARAMS,
                       NUM_GENERAL_REGS, OP0, ROW_WIDTH, SEM, SEM_BRANCH, SEM_EXIT, SPECIAL_REGS,
                       SUBOP, THR, UNIT, CMP_ALWAYS)

_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_REG = re.compile(r"r([0-9]+)\Z")
_MNEMONIC = re.compile(r"[A-Za-z][A-Za-z0-9_.]*")


class AsmError(Exception):
    """A problem in a kernel source file: `file:line:col: message`."""

    exit_code = 2


@attrs.frozen
class KernelInfo:
    name: str
    entry_pc: int
    n_instructions: int
    params: tuple
    smem_bytes: int
    max_tbs_per_sm: int        # 0: no per-kernel limit
    file: str
    line: int
    labels: tuple              # ((label, pc), ...) in source order


class Program:
    """Encoded instructions of every kernel of a set of files, with source locations."""

    def __init__(self, code, kernels, mnemonics, pc_files):
        self.code = code                # int64 [n, ROW_WIDTH]
        self.kernels = kernels          # name -> KernelInfo, in source order
        self.mnemonics = mnemonics      # mnemonic of each pc
        self.pc_files = pc_files        # source file of each pc

    def source_line(self, pc):
        """(file, line) of the instruction at pc."""
        if 0 <= pc < len(self.pc_files):
            return self.pc_files[pc], int(self.code[pc, LINE])
        return "?", 0

    def kernel_at(self, pc):
        for k in self.kernels.values():
            if k.entry_pc <= pc < k.entry_pc + k.n_instructions:
                return k
        return None


def _parse_int(text):
    t = text.replace("_", "")
    neg = t.startswith("-")
    if neg or t.startswith("+"):
        t = t[1:]
    if not t:
        return None
    try:
        if t[:2].lower() == "0x":
            v = int(t[2:], 16)
        elif t[:2].lower() == "0b":
            v = int(t[2:], 2)
        elif t.isdigit():
            v = int(t, 10)
        else:
            return None
    except ValueError:
        return None
    return -v if neg else v


def _strip_comment(line):
    cut = len(line)
    for marker in ("#", "//"):
        i = line.find(marker)
        if i >= 0:
            cut = min(cut, i)
    return line[:cut]


def _split_operands(text, col0):
    """Split on commas outside brackets -> [(operand text, column)]."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text + ","):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            piece = text[start:i]
            lead = len(piece) - len(piece.lstrip())
            out.append((piece.strip(), col0 + start + lead))
            start = i + 1
    if len(out) == 1 and out[0][0] == "":
        return []
    return out


class _KernelBuilder:
    def __init__(self, name, file, line, entry_pc):
        self.name, self.file, self.line, self.entry_pc = name, file, line, entry_pc
        self.params = []
        self.smem = 0
        self.max_tbs = 0
        self.labels = {}        # label -> pc
        self.label_lines = {}   # label -> (line, col)
        self.fixups = []        # (row index, slot, label, line, col)
        self.rows = []          # encoded rows (lists)
        self.mnemonics = []
        self.last_line = line


class Assembler:
    def __init__(self, isa):
        self.isa = isa
        self.rows, self.mnemonics, self.pc_files = [], [], []
        self.kernels = {}

    # ---- errors ---------------------------------------------------------------------------
    def _err(self, file, line, col, msg):
        raise AsmError(f"{file}:{line}:{col + 1}: {msg}")

    # ---- operands -------------------------------------------------------------------------
    def _source(self, k, text, file, line, col, what):
        """A source operand -> (value, is_immediate)."""
        if not text:
            self._err(file, line, col, f"missing operand {what}")
        m = _REG.match(text)
        if m:
            n = int(m.group(1))
            if n >= NUM_GENERAL_REGS:
                self._err(file, line, col, f"register '{text}' does not exist (r0-r{NUM_GENERAL_REGS - 1})")
            return n, False
        if text.startswith("%"):
            name = text[1:]
            if name in SPECIAL_REGS:
                return SPECIAL_REGS[name], False
            if name in k.params:
                return FIRST_PARAM_REG + k.params.index(name), False
            import difflib
            known = list(SPECIAL_REGS) + k.params
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean '%{close[0]}'?" if close else ""
            self._err(file, line, col, f"unknown register or parameter '{text}'{hint} (kernel "
                      f"'{k.name}' parameters: {', '.join(k.params) or 'none'})")
        v = _parse_int(text)
        if v is None:
            self._err(file, line, col, f"expected {what} (register, %special, %param or integer), "
                      f"found '{text}'")
        if not _INT64_MIN <= v <= _INT64_MAX:
            self._err(file, line, col, f"integer {text} does not fit in 64 bits")
        return v, True

    def _address(self, k, text, file, line, col, what):
        """[base+imm] -> (base value, base is immediate, offset)."""
        if not (text.startswith("[") and text.endswith("]")):
            self._err(file, line, col, f"expected a memory operand [base+offset] for {what}, found '{text}'")
        inner = text[1:-1].strip()
        m = re.match(r"(.+?)\s*([+-])\s*([0-9A-Za-z_]+)\Z", inner)
        offset = 0
        base = inner
        if m and not inner.lstrip("+-").isdigit():
            off = _parse_int(m.group(3))
            if off is None:
                self._err(file, line, col + 1, f"memory operand offset must be an integer, found "
                          f"'{m.group(3)}' (compute the address into a register first)")
            base, offset = m.group(1).strip(), off if m.group(2) == "+" else -off
        value, imm = self._source(k, base, file, line, col + 1, what + " base")
        return value, imm, offset

    # ---- statements -----------------------------------------------------------------------
    def _instruction(self, k, mnemonic, rest, file, line, col, rest_col):
        if mnemonic not in self.isa:
            import difflib
            close = difflib.get_close_matches(mnemonic, list(self.isa.instructions), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            self._err(file, line, col, f"unknown instruction '{mnemonic}'{hint} "
                      f"(`moehub-sim isa` lists the instruction set)")
        ins = self.isa[mnemonic]
        d = ins.defn
        ops = _split_operands(rest, rest_col)
        if len(ops) != len(d.operands):
            want = ", ".join(d.operands) or "no operands"
            self._err(file, line, col, f"'{mnemonic}' takes {len(d.operands)} operand(s) ({want}), "
                      f"found {len(ops)}")
        row = [0] * ROW_WIDTH
        row[SEM], row[SUBOP], row[UNIT] = d.semantic, d.subop, d.unit
        row[LAT], row[II], row[THR], row[DTYPE], row[LINE] = ins.latency, ins.ii, ins.throughput, d.dtype, line
        imm_mask = 0
        for (text, ocol), name, slot, kind in zip(ops, d.operands, d.slots, d.kinds):
            what = f"operand '{name}' of '{mnemonic}'"
            if kind == "reg":
                m = _REG.match(text)
                if not m:
                    if text.startswith("%"):
                        self._err(file, line, ocol, f"{what} is written: it must be a general register "
                                  f"r0-r{NUM_GENERAL_REGS - 1}; '{text}' is read-only")
                    self._err(file, line, ocol, f"{what} must be a general register "
                              f"r0-r{NUM_GENERAL_REGS - 1}, found '{text}'")
                v, _ = self._source(k, text, file, line, ocol, what)
                row[OP0 + slot] = v
            elif kind == "src":
                v, imm = self._source(k, text, file, line, ocol, what)
                row[OP0 + slot] = v
                imm_mask |= int(imm) << slot
            elif kind == "addr":
                v, imm, off = self._address(k, text, file, line, ocol, what)
                row[OP0 + slot] = v
                row[OP0 + slot + 1] = off
                imm_mask |= int(imm) << slot
            else:  # label
                if not _IDENT.match(text):
                    self._err(file, line, ocol, f"{what} must be a label, found '{text}'")
                k.fixups.append((len(k.rows), OP0 + slot, text, line, ocol))
        # operands this mnemonic does not take are immediate zeros
        taken = set()
        for slot, kind in zip(d.slots, d.kinds):
            taken.add(slot)
            if kind == "addr":
                taken.add(slot + 1)
        for s in range(MAX_OPERANDS):
            if s not in taken:
                imm_mask |= 1 << s
        row[IMM] = imm_mask
        k.rows.append(row)
        k.mnemonics.append(mnemonic)
        k.last_line = line

    def _directive(self, k, name, args, file, line, col, state):
        if name == ".kernel":
            if len(args) != 1 or not _IDENT.match(args[0]):
                self._err(file, line, col, ".kernel takes one name (letters, digits, '_')")
            return "kernel", args[0]
        if k is None:
            self._err(file, line, col, f"'{name}' before any .kernel directive")
        if name == ".param":
            if len(args) != 1 or not _IDENT.match(args[0]):
                self._err(file, line, col, ".param takes one name (letters, digits, '_')")
            p = args[0]
            if k.rows:
                self._err(file, line, col, f".param '{p}' after the first instruction of kernel '{k.name}'")
            if p in SPECIAL_REGS:
                self._err(file, line, col, f"parameter name '{p}' is a special register")
            if p in k.params:
                self._err(file, line, col, f"parameter '{p}' declared twice in kernel '{k.name}'")
            if len(k.params) >= MAX_PARAMS:
                self._err(file, line, col, f"kernel '{k.name}' has more than {MAX_PARAMS} parameters")
            k.params.append(p)
        elif name == ".smem":
            if len(args) != 1:
                self._err(file, line, col, ".smem takes one size in bytes (e.g. 32768 or 32KB)")
            v = _parse_int(args[0])
            if v is None:
                from ..config.units import UnitError, parse_quantity
                try:
                    v = int(parse_quantity(args[0], "size"))
                except (UnitError, ValueError) as e:
                    self._err(file, line, col, f".smem: cannot read size '{args[0]}': {e}")
            if v < 0:
                self._err(file, line, col, f".smem: size must be >= 0, found {v}")
            k.smem = v
        elif name == ".max_tbs_per_sm":
            v = _parse_int(args[0]) if len(args) == 1 else None
            if v is None or v < 1:
                self._err(file, line, col, ".max_tbs_per_sm takes one integer >= 1")
            k.max_tbs = v
        else:
            import difflib
            names = [".kernel", ".param", ".smem", ".max_tbs_per_sm"]
            close = difflib.get_close_matches(name, names, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            self._err(file, line, col, f"unknown directive '{name}'{hint} (directives: {', '.join(names)})")
        return None, None

    def _finish_kernel(self, k):
        if k is None:
            return
        if not k.rows:
            self._err(k.file, k.line, 0, f"kernel '{k.name}' has no instructions")
        for row_i, col_i, label, line, col in k.fixups:
            if label not in k.labels:
                import difflib
                close = difflib.get_close_matches(label, list(k.labels), n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                self._err(k.file, line, col, f"undefined label '{label}' in kernel '{k.name}'{hint}")
            k.rows[row_i][col_i] = k.labels[label]
        for label, pc in k.labels.items():
            if pc >= k.entry_pc + len(k.rows):
                ln, col = k.label_lines[label]
                self._err(k.file, ln, col, f"label '{label}' is at the end of kernel '{k.name}' "
                          f"with no instruction after it")
        last = k.rows[-1]
        if not (last[SEM] == SEM_EXIT or (last[SEM] == SEM_BRANCH and last[SUBOP] == CMP_ALWAYS)):
            self._err(k.file, k.last_line, 0, f"kernel '{k.name}' can run past its last instruction; "
                      f"end it with 'exit' or an unconditional branch")
        if k.name in self.kernels:
            prev = self.kernels[k.name]
            self._err(k.file, k.line, 0, f"kernel '{k.name}' is already defined at {prev.file}:{prev.line}")
        self.kernels[k.name] = KernelInfo(
            name=k.name, entry_pc=k.entry_pc, n_instructions=len(k.rows), params=tuple(k.params),
            smem_bytes=k.smem, max_tbs_per_sm=k.max_tbs, file=k.file, line=k.line,
            labels=tuple(sorted(k.labels.items(), key=lambda kv: kv[1])))
        self.rows.extend(k.rows)
        self.mnemonics.extend(k.mnemonics)
        self.pc_files.extend([k.file] * len(k.rows))

    def add_text(self, text, file):
        k = None
        for lineno, raw in enumerate(text.splitlines(), start=1):
            body = _strip_comment(raw)
            pos = len(body) - len(body.lstrip())
            # labels: `name:` (possibly several) at the start of the statement
            while True:
                m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)\s*:", body[pos:])
                if not m:
                    break
                label = m.group(1)
                if k is None:
                    self._err(file, lineno, pos, f"label '{label}' before any .kernel directive")
                if label in k.labels:
                    pl, pc_ = k.label_lines[label]
                    self._err(file, lineno, pos, f"label '{label}' already defined at line {pl}")
                k.labels[label] = k.entry_pc + len(k.rows)
                k.label_lines[label] = (lineno, pos)
                pos += m.end()
                pos += len(body[pos:]) - len(body[pos:].lstrip())
            stmt = body[pos:].rstrip()
            if not stmt:
                continue
            if stmt.startswith("."):
                parts = stmt.split()
                action, name = self._directive(k, parts[0], parts[1:], file, lineno, pos, None)
                if action == "kernel":
                    self._finish_kernel(k)
                    k = _KernelBuilder(name, file, lineno, len(self.rows))
                continue
            m = _MNEMONIC.match(stmt)
            if not m:
                self._err(file, lineno, pos, f"expected an instruction, label or directive, found '{stmt}'")
            if k is None:
                self._err(file, lineno, pos, "instruction before any .kernel directive")
            mnemonic = m.group(0)
            rest = stmt[m.end():]
            if rest and not rest[0].isspace():
                self._err(file, lineno, pos + m.end(), f"unexpected '{rest[0]}' after '{mnemonic}'")
            self._instruction(k, mnemonic, rest, file, lineno, pos, pos + m.end())
        self._finish_kernel(k)

    def program(self):
        code = np.array(self.rows, dtype=np.int64).reshape(len(self.rows), ROW_WIDTH)
        return Program(code, dict(self.kernels), list(self.mnemonics), list(self.pc_files))


def assemble_text(text, isa, file="<text>"):
    """Assemble one source text (isa: a ResolvedIsa)."""
    a = Assembler(isa)
    a.add_text(text, file)
    return a.program()


def _display_path(path):
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def assemble_files(paths, isa):
    """Assemble several files into one Program (kernel names must be unique across files)."""
    a = Assembler(isa)
    for p in paths:
        shown = _display_path(p)
        try:
            text = read_text(p, "kernel file", shown)
        except InputFileError as e:
            raise AsmError(str(e)) from None
        a.add_text(text, shown)
    return a.program()
