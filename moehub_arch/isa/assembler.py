r"""Assembler: kernel assembly text (`workloads/kernels/**/*.s`) -> one encoded Program.

Syntax (one statement per line; `#` or `//` starts a comment):

    .kernel NAME              start a kernel; it runs until the next .kernel or the end of file
    .param NAME               declare the next kernel parameter (read as %NAME; at most 16)
    .smem BYTES               shared memory per thread block (integer, or with a unit: 32KB)
    .smem_job BYTES           shared memory per element of one tile_rows x n_tile job (the kernel
                                needs parameters tile_rows and n_tile): where .smem, sized for the
                                largest job, exceeds the SM's shared memory, a launch's blocks
                                reserve tile_rows x n_tile x BYTES of it instead (builder.py)
    .max_tbs_per_sm N         at most N of this kernel's TBs resident on one SM (default: no limit)
    .threads N                threads of one thread block as launched (all its warp groups); with
    .regs N                     registers per thread, a residency limit (system.gpu.sm.registers,
                                max_threads); a kernel without them takes none (not modelled)
    .include "FILE"           read FILE's statements here (see below)
    .macro NAME [p, p, ...]   define a macro: the lines up to .endm, with \p replaced by the
    .endm                       arguments and \@ by a number unique to each expansion
    label:                    a label (local to its kernel); may precede an instruction on the line
    mnemonic op, op, ...      an instruction from the ISA tables (`moehub-sim isa`)
    NAME arg, arg, ...        a macro expansion (arguments are split like operands)

`.include "FILE"`: FILE is looked up relative to the including file's folder, then in the shipped
`workloads/kernels/` (so `.include "lib/swiglu_jobs.s"` works from any kernel file). A file is read
once per Program: a second `.include` of it (from the same or another file) is skipped, so library
files that define macros can be included by every kernel file of a scheme. A file that includes
itself, directly or through others, is an error naming the chain. Errors inside an included file or
a macro body name that file and line, then where it was included or expanded from. Macros are
global to the Program; labels inside a macro body should end in `\@` so that two expansions in one
kernel do not collide. Instructions that come from a macro keep the macro body's file and line
(what `moehub-sim asm`, traces and the watchdog show).

Operands: general registers r0-r31; read-only special registers %gpu %ngpu %sm %nsm %tb %ntb
%smem %clock %tick; parameters %NAME; integers (decimal, 0x hex, 0b binary, `_` separators,
negative); memory operands [base], [base+imm], [base-imm] where base is any source operand; labels.

Errors are AsmError with `file:line:col: message`.
"""
from pathlib import Path
import re

import attrs
import numpy as np

from ..errors import UserError
from ..inputs import InputFileError, read_text
from ..paths import data_root
from .encoding import (DTYPE, FIRST_PARAM_REG, II, IMM, LAT, LINE, MAX_OPERANDS, MAX_PARAMS,
                       NUM_GENERAL_REGS, OP0, ROW_WIDTH, SEM, SEM_BRANCH, SEM_EXIT, SPECIAL_REGS,
                       SUBOP, THR, UNIT, CMP_ALWAYS)

_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_REG = re.compile(r"r([0-9]+)\Z")
_MNEMONIC = re.compile(r"[A-Za-z][A-Za-z0-9_.]*")
_MACRO_ARG = re.compile(r"\\([A-Za-z_][A-Za-z0-9_]*|@)")
_MAX_MACRO_DEPTH = 64


class AsmError(UserError):
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
    threads: int = 0           # .threads: threads per thread block (0: not declared)
    regs_per_thread: int = 0   # .regs: registers per thread (0: not declared)
    threads_line: int = 0      # source line of .threads / .regs (error messages)
    smem_job: int = 0          # .smem_job: bytes per element of a tile_rows x n_tile job (0: none)


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
        self.smem_job = 0
        self.smem_job_line = 0
        self.max_tbs = 0
        self.threads = 0
        self.regs = 0
        self.threads_line = 0
        self.labels = {}        # label -> pc
        self.label_lines = {}   # label -> (file, line, col, where)
        self.fixups = []        # (row index, slot, label, line, col)
        self.rows = []          # encoded rows (lists)
        self.mnemonics = []
        self.row_files = []     # source file of each row (an include or a macro body may differ)
        self.last_loc = (file, line, "")


@attrs.frozen
class _Macro:
    name: str
    params: tuple
    body: tuple                 # ((raw text, file, line), ...)
    file: str
    line: int


class _MacroRecorder:
    def __init__(self, name, params, file, line):
        self.name, self.params, self.file, self.line = name, params, file, line
        self.body = []


class Assembler:
    def __init__(self, isa):
        self.isa = isa
        self.rows, self.mnemonics, self.pc_files = [], [], []
        self.kernels = {}
        self._k = None              # the kernel being assembled
        self._macros = {}           # name -> _Macro
        self._recording = None      # the _MacroRecorder between .macro and .endm
        self._included = set()      # resolved paths already read
        self._file_stack = []       # (resolved path, shown name) of the files being read
        self._context = []          # "included from f:l" / "in macro 'm' used at f:l:c", innermost last
        self._expansions = 0        # \@ counter

    # ---- errors ---------------------------------------------------------------------------
    def _where(self):
        return "".join(f" ({c})" for c in reversed(self._context))

    def _err(self, file, line, col, msg, where=None):
        raise AsmError(f"{file}:{line}:{col + 1}: {msg}{self._where() if where is None else where}")

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
            if not _INT64_MIN <= offset <= _INT64_MAX:
                self._err(file, line, col + 1, f"memory operand offset {m.group(2)}{m.group(3)} "
                          f"does not fit in 64 bits")
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
                k.fixups.append((len(k.rows), OP0 + slot, text, file, line, ocol, self._where()))
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
        k.row_files.append(file)
        k.last_loc = (file, line, self._where())

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
        elif name == ".smem_job":
            v = _parse_int(args[0]) if len(args) == 1 else None
            if v is None or v < 1:
                self._err(file, line, col, ".smem_job takes one integer >= 1 (bytes per element of "
                          "a tile_rows x n_tile job)")
            k.smem_job, k.smem_job_line = v, line
        elif name == ".max_tbs_per_sm":
            v = _parse_int(args[0]) if len(args) == 1 else None
            if v is None or v < 1:
                self._err(file, line, col, ".max_tbs_per_sm takes one integer >= 1")
            k.max_tbs = v
        elif name in (".threads", ".regs"):
            v = _parse_int(args[0]) if len(args) == 1 else None
            if v is None or v < 1:
                self._err(file, line, col, f"{name} takes one integer >= 1")
            if name == ".threads":
                k.threads = v
            else:
                k.regs = v
            k.threads_line = line
        else:
            import difflib
            names = [".kernel", ".param", ".smem", ".smem_job", ".max_tbs_per_sm", ".threads",
                     ".regs", ".include", ".macro", ".endm"]
            close = difflib.get_close_matches(name, names, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            self._err(file, line, col, f"unknown directive '{name}'{hint} (directives: {', '.join(names)})")
        return None, None

    def _finish_kernel(self, k):
        if k is None:
            return
        if not k.rows:
            self._err(k.file, k.line, 0, f"kernel '{k.name}' has no instructions")
        for row_i, col_i, label, file, line, col, where in k.fixups:
            if label not in k.labels:
                import difflib
                close = difflib.get_close_matches(label, list(k.labels), n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                self._err(file, line, col, f"undefined label '{label}' in kernel '{k.name}'{hint}",
                          where)
            k.rows[row_i][col_i] = k.labels[label]
        for label, pc in k.labels.items():
            if pc >= k.entry_pc + len(k.rows):
                lfile, ln, col, where = k.label_lines[label]
                self._err(lfile, ln, col, f"label '{label}' is at the end of kernel '{k.name}' "
                          f"with no instruction after it", where)
        last = k.rows[-1]
        if not (last[SEM] == SEM_EXIT or (last[SEM] == SEM_BRANCH and last[SUBOP] == CMP_ALWAYS)):
            lfile, lline, where = k.last_loc
            self._err(lfile, lline, 0, f"kernel '{k.name}' can run past its last instruction; "
                      f"end it with 'exit' or an unconditional branch", where)
        if (k.threads > 0) != (k.regs > 0):
            self._err(k.file, k.threads_line, 0, f"kernel '{k.name}' declares only one of .threads "
                      f"and .regs: registers per block need both")
        if k.smem_job and not {"tile_rows", "n_tile"} <= set(k.params):
            self._err(k.file, k.smem_job_line, 0, f"kernel '{k.name}' declares .smem_job but not "
                      f"both parameters tile_rows and n_tile, which size its job")
        if k.name in self.kernels:
            prev = self.kernels[k.name]
            self._err(k.file, k.line, 0, f"kernel '{k.name}' is already defined at {prev.file}:{prev.line}")
        self.kernels[k.name] = KernelInfo(
            name=k.name, entry_pc=k.entry_pc, n_instructions=len(k.rows), params=tuple(k.params),
            smem_bytes=k.smem, max_tbs_per_sm=k.max_tbs, file=k.file, line=k.line,
            labels=tuple(sorted(k.labels.items(), key=lambda kv: kv[1])), threads=k.threads,
            regs_per_thread=k.regs, threads_line=k.threads_line, smem_job=k.smem_job)
        self.rows.extend(k.rows)
        self.mnemonics.extend(k.mnemonics)
        self.pc_files.extend(k.row_files)

    def add_text(self, text, file, path=None):
        """Assemble one top-level source text (`file`: its name in messages; `path`: where it
        lives, for `.include` lookups and cycle detection; None for text not read from a file)."""
        resolved = Path(path).resolve() if path is not None else None
        if resolved is not None:
            self._included.add(resolved)
        self._file_stack.append((resolved, file))
        try:
            self._lines(text.splitlines(), file)
            if self._recording is not None:
                m = self._recording
                self._recording = None
                self._err(m.file, m.line, 0, f"macro '{m.name}' has no .endm")
            self._finish_kernel(self._k)
            self._k = None
        finally:
            self._file_stack.pop()

    def _lines(self, lines, file, first_line=1):
        for lineno, raw in enumerate(lines, start=first_line):
            self._line(raw, file, lineno)

    def _line(self, raw, file, lineno):
        body = _strip_comment(raw)
        if self._recording is not None:
            word = body.strip().split(None, 1)
            if word and word[0] == ".endm":
                self._end_macro(word[1:], file, lineno, len(body) - len(body.lstrip()))
            elif word and word[0] == ".macro":
                self._err(file, lineno, len(body) - len(body.lstrip()),
                          f".macro inside the body of macro '{self._recording.name}' "
                          f"(defined at {self._recording.file}:{self._recording.line}); close it with .endm first")
            else:
                self._recording.body.append((raw, file, lineno))
            return
        pos = len(body) - len(body.lstrip())
        # labels: `name:` (possibly several) at the start of the statement
        while True:
            m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)\s*:", body[pos:])
            if not m:
                break
            label = m.group(1)
            k = self._k
            if k is None:
                self._err(file, lineno, pos, f"label '{label}' before any .kernel directive")
            if label in k.labels:
                pf, pl, _, _ = k.label_lines[label]
                self._err(file, lineno, pos, f"label '{label}' already defined at "
                          f"{'line ' + str(pl) if pf == file else f'{pf}:{pl}'}")
            k.labels[label] = k.entry_pc + len(k.rows)
            k.label_lines[label] = (file, lineno, pos, self._where())
            pos += m.end()
            pos += len(body[pos:]) - len(body[pos:].lstrip())
        stmt = body[pos:].rstrip()
        if not stmt:
            return
        if stmt.startswith("."):
            parts = stmt.split(None, 1)
            name = parts[0]
            if name == ".include":
                self._include(parts[1].strip() if len(parts) > 1 else "", file, lineno, pos)
                return
            if name == ".macro":
                self._begin_macro(parts[1] if len(parts) > 1 else "", file, lineno, pos,
                                  pos + len(name))
                return
            if name == ".endm":
                self._err(file, lineno, pos, ".endm without a .macro")
            action, kname = self._directive(self._k, name, stmt.split()[1:], file, lineno, pos, None)
            if action == "kernel":
                self._finish_kernel(self._k)
                self._k = _KernelBuilder(kname, file, lineno, len(self.rows))
                self._k.last_loc = (file, lineno, self._where())
            return
        m = _MNEMONIC.match(stmt)
        if not m:
            self._err(file, lineno, pos, f"expected an instruction, label or directive, found '{stmt}'")
        mnemonic = m.group(0)
        rest = stmt[m.end():]
        if rest and not rest[0].isspace():
            self._err(file, lineno, pos + m.end(), f"unexpected '{rest[0]}' after '{mnemonic}'")
        if mnemonic in self._macros:
            self._expand(self._macros[mnemonic], rest, file, lineno, pos, pos + m.end())
            return
        if self._k is None:
            self._err(file, lineno, pos, "instruction before any .kernel directive")
        self._instruction(self._k, mnemonic, rest, file, lineno, pos, pos + m.end())

    # ---- .include ---------------------------------------------------------------------------
    def _include(self, arg, file, line, col):
        if not (len(arg) >= 2 and arg[0] == '"' and arg[-1] == '"' and '"' not in arg[1:-1]):
            self._err(file, line, col, f'.include takes one file name in double quotes '
                      f'(e.g. .include "lib/swiglu_jobs.s"), found \'{arg}\'')
        name = arg[1:-1].strip()
        if not name:
            self._err(file, line, col, ".include: empty file name")
        here = self._file_stack[-1][0] if self._file_stack else None
        candidates = []
        if Path(name).is_absolute():
            candidates.append(Path(name))
        else:
            candidates.append((here.parent if here is not None else Path.cwd()) / name)
            candidates.append(data_root() / "workloads" / "kernels" / name)
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            looked = ", ".join(_display_path(c) for c in candidates)
            self._err(file, line, col, f".include: cannot find '{name}' (looked for {looked})")
        resolved = found.resolve()
        chain = [r for r, _ in self._file_stack]
        if resolved in chain:
            names = [shown for _, shown in self._file_stack]
            self._err(file, line, col, "include cycle: " + " -> ".join(names + [_display_path(found)]))
        if resolved in self._included:
            return                  # read once per Program (library files define macros)
        try:
            text = read_text(found, "included kernel file", _display_path(found))
        except InputFileError as e:
            self._err(file, line, col, f".include: {e}")
        self._included.add(resolved)
        shown = _display_path(found)
        self._file_stack.append((resolved, shown))
        self._context.append(f"included from {file}:{line}")
        try:
            self._lines(text.splitlines(), shown)
            if self._recording is not None and self._recording.file == shown:
                m = self._recording
                self._recording = None
                self._err(m.file, m.line, 0, f"macro '{m.name}' has no .endm before the end of its file")
        finally:
            self._context.pop()
            self._file_stack.pop()

    # ---- macros -----------------------------------------------------------------------------
    def _begin_macro(self, args, file, line, col, args_col):
        parts = args.split(None, 1)
        if not parts or not _IDENT.match(parts[0]):
            self._err(file, line, col, ".macro takes a name (letters, digits, '_') and then its "
                      "parameter names separated by commas")
        name = parts[0]
        params = [p for p, _ in _split_operands(parts[1], args_col)] if len(parts) > 1 else []
        for p in params:
            if not _IDENT.match(p):
                self._err(file, line, col, f".macro {name}: parameter '{p}' is not a name "
                          f"(letters, digits, '_')")
        if len(set(params)) != len(params):
            self._err(file, line, col, f".macro {name}: a parameter is named twice")
        if name in self.isa or _REG.match(name):
            self._err(file, line, col, f".macro {name}: the name is an instruction or register")
        if name in self._macros:
            prev = self._macros[name]
            self._err(file, line, col, f"macro '{name}' is already defined at {prev.file}:{prev.line}")
        self._recording = _MacroRecorder(name, tuple(params), file, line)

    def _end_macro(self, extra, file, line, col):
        if extra:
            self._err(file, line, col, ".endm takes no arguments")
        m = self._recording
        self._recording = None
        self._macros[m.name] = _Macro(m.name, m.params, tuple(m.body), m.file, m.line)

    def _expand(self, macro, rest, file, line, col, rest_col):
        args = _split_operands(rest, rest_col)
        if len(args) != len(macro.params):
            want = ", ".join(macro.params) or "no arguments"
            self._err(file, line, col, f"macro '{macro.name}' takes {len(macro.params)} argument(s) "
                      f"({want}; defined at {macro.file}:{macro.line}), found {len(args)}")
        if len(self._context) >= _MAX_MACRO_DEPTH:
            self._err(file, line, col, f"macros nested more than {_MAX_MACRO_DEPTH} deep "
                      f"(does macro '{macro.name}' expand itself?)")
        values = {p: a for p, (a, _) in zip(macro.params, args)}
        self._expansions += 1
        values["@"] = str(self._expansions)
        self._context.append(f"in macro '{macro.name}' used at {file}:{line}:{col + 1}")
        try:
            for raw, bfile, bline in macro.body:
                text = _strip_comment(raw)

                def sub(m, bfile=bfile, bline=bline, text=text):
                    key = m.group(1)
                    if key not in values:
                        self._err(bfile, bline, m.start(), f"macro '{macro.name}' has no parameter "
                                  f"'{key}' (parameters: {', '.join(macro.params) or 'none'})")
                    return values[key]
                self._line(_MACRO_ARG.sub(sub, text), bfile, bline)
        finally:
            self._context.pop()

    def program(self):
        code = np.array(self.rows, dtype=np.int64).reshape(len(self.rows), ROW_WIDTH)
        return Program(code, dict(self.kernels), list(self.mnemonics), list(self.pc_files))


def assemble_text(text, isa, file="<text>", path=None):
    """Assemble one source text (isa: a ResolvedIsa; path: where it lives, for `.include`)."""
    a = Assembler(isa)
    a.add_text(text, file, path)
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
        if Path(p).resolve() in a._included:
            continue                # already read through an .include of another file
        a.add_text(text, shown, p)
    return a.program()
