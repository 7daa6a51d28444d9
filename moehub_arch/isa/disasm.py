"""Disassembler: a Program back to assembly text that re-assembles to the same encoding.

Each instruction line carries its resolved costs as a comment, so `moehub-sim asm` shows what the
engine will charge for every instruction on the configured system.
"""
from .encoding import (FIRST_PARAM_REG, II, IMM, LAT, LINE, OP0, SPECIAL_REGS, THR,
                       UNIT, UNIT_NAMES)

_SPECIAL_BY_INDEX = {v: k for k, v in SPECIAL_REGS.items()}


def _reg_name(r, params):
    if r in _SPECIAL_BY_INDEX:
        return "%" + _SPECIAL_BY_INDEX[r]
    if r >= FIRST_PARAM_REG:
        return "%" + params[r - FIRST_PARAM_REG]
    return f"r{r}"


def _operand_text(row, slot, kind, params, labels):
    imm = (int(row[IMM]) >> slot) & 1
    v = int(row[OP0 + slot])
    if kind == "label":
        return labels.get(v, f"L{v}")
    base = str(v) if imm else _reg_name(v, params)
    if kind == "addr":
        off = int(row[OP0 + slot + 1])
        if off:
            return f"[{base}{'+' if off > 0 else '-'}{abs(off)}]"
        return f"[{base}]"
    return base


def disassemble(program, isa):
    """Assembly text of every kernel of `program` (isa: the ResolvedIsa it was assembled with)."""
    out = []
    for k in program.kernels.values():
        labels = {}
        for name, pc in k.labels:
            labels.setdefault(pc, name)
        out.append(f"# {k.file}:{k.line}")
        out.append(f".kernel {k.name}")
        for p in k.params:
            out.append(f".param {p}")
        if k.smem_bytes:
            out.append(f".smem {k.smem_bytes}")
        if k.max_tbs_per_sm:
            out.append(f".max_tbs_per_sm {k.max_tbs_per_sm}")
        if k.threads:
            out.append(f".threads {k.threads}")
            out.append(f".regs {k.regs_per_thread}")
        for pc in range(k.entry_pc, k.entry_pc + k.n_instructions):
            row = program.code[pc]
            m = program.mnemonics[pc]
            d = isa[m].defn
            for name, lpc in k.labels:
                if lpc == pc:
                    out.append(f"{name}:")
            ops = ", ".join(_operand_text(row, s, kind, k.params, labels)
                            for s, kind in zip(d.slots, d.kinds))
            cost = f"{UNIT_NAMES[int(row[UNIT])]} lat {int(row[LAT])} ii {int(row[II])}"
            if row[THR]:
                cost += f" thr {int(row[THR])}"
            text = f"    {m} {ops}".rstrip()
            where = str(int(row[LINE]))
            if program.pc_files[pc] != k.file:      # from an included file or a macro body
                where = f"{program.pc_files[pc]}:{where}"
            out.append(f"{text:<48} # pc {pc:<4} line {where:<4} {cost}")
        out.append("")
    return "\n".join(out)
