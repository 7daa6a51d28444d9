"""ISA tables, assembler, disassembler and the expression evaluator (no simulation runs)."""
import numpy as np
import pytest

from moehub_arch.config import flat_params
from moehub_arch.isa import (AsmError, ExprError, IsaError, assemble_files, assemble_text,
                             default_isa_paths, disassemble, evaluate, load_isa)
from moehub_arch.isa.encoding import (DTYPE, DT_BF16, II, IMM, LAT, LINE, OP0, REG_GPU, SEM,
                                      SEM_ALU, SEM_BRANCH, SEM_MMA, SUBOP, ALU_ADD, CMP_ALWAYS,
                                      FIRST_PARAM_REG, THR, UNIT, UNIT_ALU, UNIT_TENSOR)

from conftest import REPO, load


@pytest.fixture(scope="module")
def params():
    return flat_params(load("ubench/alltoall.yaml"))


@pytest.fixture(scope="module")
def isa(params):
    return load_isa(default_isa_paths()).resolve(params)


def asm(text, isa):
    return assemble_text(text, isa, file="k.s")


def test_every_shipped_kernel_assembles_and_round_trips(isa):
    files = sorted((REPO / "workloads" / "kernels").rglob("*.s"))
    assert files, "no kernels found"
    program = assemble_files(files, isa)
    text = disassemble(program, isa)
    again = assemble_text(text, isa, file="disasm.s")
    cols = [c for c in range(program.code.shape[1]) if c != LINE]
    assert np.array_equal(program.code[:, cols], again.code[:, cols])
    assert list(program.kernels) == list(again.kernels)


def test_encoding_of_alu_branch_and_memory_operands(isa):
    p = asm(""".kernel k
.param buf
top: add r1, %gpu, 5
    st [%buf+16], r1     # memory operand: base register + immediate offset
    bra top
""", isa)
    add, st, bra = p.code
    assert (add[SEM], add[SUBOP], add[UNIT], add[LAT], add[II]) == (SEM_ALU, ALU_ADD, UNIT_ALU, 4, 1)
    assert (add[OP0], add[OP0 + 1], add[OP0 + 2]) == (1, REG_GPU, 5)
    assert add[IMM] & 0b111 == 0b100          # only operand 2 is an immediate
    assert (st[OP0], st[OP0 + 1], st[OP0 + 2]) == (FIRST_PARAM_REG, 16, 1)
    assert (bra[SEM], bra[SUBOP], bra[OP0 + 2]) == (SEM_BRANCH, CMP_ALWAYS, 0)
    assert p.kernels["k"].params == ("buf",)
    assert p.source_line(1) == ("k.s", 4)


def test_costs_are_expressions_of_system_parameters(params, isa):
    p = asm(".kernel k\n mma.bf16 r1, r2, r3, 64, 64, 64\n exit\n", isa)
    row = p.code[0]
    assert (row[SEM], row[UNIT], row[DTYPE]) == (SEM_MMA, UNIT_TENSOR, DT_BF16)
    assert row[THR] == params["sm.tensor_bf16_flops_per_cycle"] == 4096
    other = dict(params, **{"sm.tensor_bf16_flops_per_cycle": 1024})
    isa2 = load_isa(default_isa_paths()).resolve(other)
    assert asm(".kernel k\n mma.bf16 r1, r2, r3, 64, 64, 64\n exit\n", isa2).code[0][THR] == 1024


def test_user_isa_file_adds_and_replaces_instructions(tmp_path, params):
    extra = tmp_path / "mine.yaml"
    extra.write_text("""instructions:
  add3:  {semantic: alu, subop: add, unit: alu, operands: [dst, a, b], latency: 2, ii: 1,
          description: "a faster add"}
  add:   {semantic: alu, subop: add, unit: alu, operands: [dst, a, b], latency: "hbm.latency_cycles // 100", ii: 1,
          description: "slow add", replace: true}
""")
    isa = load_isa(default_isa_paths() + [extra]).resolve(params)
    p = asm(".kernel k\n add3 r1, r1, 1\n add r2, r2, 1\n exit\n", isa)
    assert p.code[0][LAT] == 2
    assert p.code[1][LAT] == params["hbm.latency_cycles"] // 100


@pytest.mark.parametrize("body, fragment", [
    ("addd r1, r1, 1", "unknown instruction 'addd'; did you mean 'add'?"),
    ("add r1, r1", "'add' takes 3 operand(s) (dst, a, b), found 2"),
    ("add %gpu, r1, 1", "is written: it must be a general register"),
    ("add r40, r1, 1", "register 'r40' does not exist"),
    ("add r1, %bogus, 1", "unknown register or parameter '%bogus'"),
    ("add r1, r1, 12abc", "expected operand 'b' of 'add'"),
    ("bra nowhere", "undefined label 'nowhere'"),
    ("ld r1, r2", "expected a memory operand"),
    ("ld r1, [r2+r3]", "offset must be an integer"),
    (".bogus 3", "unknown directive '.bogus'"),
])
def test_assembly_errors_name_file_line_and_column(isa, body, fragment):
    with pytest.raises(AsmError) as e:
        asm(f".kernel k\n.param p\n    {body}\n    exit\n", isa)
    msg = str(e.value)
    assert msg.startswith("k.s:3:"), msg
    assert fragment in msg, msg


def test_structural_assembly_errors(isa):
    cases = [
        ("add r1, r1, 1\n", "k.s:1:1: instruction before any .kernel directive"),
        (".kernel k\n add r1, r1, 1\n", "can run past its last instruction"),
        (".kernel k\nx: nop\nx: exit\n", "label 'x' already defined at line 2"),
        (".kernel k\n exit\n.kernel k\n exit\n", "kernel 'k' is already defined"),
        (".kernel k\n exit\n.param late\n", ".param 'late' after the first instruction"),
        (".kernel k\n", "kernel 'k' has no instructions"),
    ]
    for text, fragment in cases:
        with pytest.raises(AsmError) as e:
            asm(text, isa)
        assert fragment in str(e.value), str(e.value)


def test_isa_file_errors(tmp_path, params):
    def bad(text):
        f = tmp_path / "bad.yaml"
        f.write_text(text)
        with pytest.raises(IsaError) as e:
            load_isa([f]).resolve(params)
        return str(e.value)

    msg = bad("instructions:\n  x: {semantic: alux, unit: alu, operands: [], latency: 1, ii: 1, description: d}\n")
    assert "bad.yaml:2" in msg and "unknown semantic 'alux'; did you mean 'alu'?" in msg
    msg = bad("instructions:\n  x: {semantic: nop, unit: alu, operands: [], latency: 1, ii: 1, descr: d}\n")
    assert "unknown field 'descr'" in msg
    msg = bad("instructions:\n  x: {semantic: nop, unit: alu, operands: [], latency: sm.nope, ii: 1, description: d}\n")
    assert "instructions.x.latency: cannot evaluate 'sm.nope'" in msg
    msg = bad("instructions:\n  x: {semantic: alu, subop: add, unit: alu, operands: [dst, c], latency: 1, ii: 1, description: d}\n")
    assert "has no operand 'c'" in msg
    base = default_isa_paths()[0]
    dup = tmp_path / "dup.yaml"
    dup.write_text("instructions:\n  add: {semantic: nop, unit: alu, operands: [], latency: 1, ii: 1, description: d}\n")
    with pytest.raises(IsaError, match="already defined at .*base.yaml.*replace: true"):
        load_isa([base, dup])


def test_an_isa_file_adds_a_semantic_its_block_executes(tmp_path, params):
    """A block's instruction semantic is declared by its ISA file (name, number, operands) and its
    module (declare.Semantic: number and handler): ctr.add's is isa/counter.yaml's and
    switch_counter.py's, not isa/encoding.py's. A semantic no block executes is refused before a
    run; a file's bad semantic names its line."""
    from moehub_arch import composition
    from moehub_arch.components.switch_counter import SEM_CTR_ADD
    from moehub_arch.isa.encoding import NUM_SEMANTICS, SEMANTIC_NAMES
    from moehub_arch.simulation import _check_semantics
    isa = load_isa(default_isa_paths())
    assert "ctr_add" not in SEMANTIC_NAMES and SEM_CTR_ADD >= NUM_SEMANTICS
    assert isa.semantics.by_name["ctr_add"] == SEM_CTR_ADD
    assert isa.instructions["ctr.add"].semantic == SEM_CTR_ADD
    assert composition.SEMANTICS[SEM_CTR_ADD][0] == "switch_counter"
    assert "ctr_add   dst:reg, counter:src, value:src" in isa.reference_text()
    _check_semantics(isa.resolve(params))     # every added semantic has its block

    def bad(text, check=False):
        f = tmp_path / "ext.yaml"
        f.write_text(text)
        with pytest.raises(IsaError) as e:
            r = load_isa(default_isa_paths() + [f]).resolve(params)
            if check:
                _check_semantics(r)
        return str(e.value)

    sem = "semantics:\n  foo: {number: %s, operands: %s}\n"
    ins = "instructions:\n  foo: {semantic: foo, unit: alu, operands: [a], latency: 1, ii: 1, description: d}\n"
    assert (f"ext.yaml:2: semantics.foo.number: expected an integer {NUM_SEMANTICS}..62"
            in bad(sem % (5, "[[a, src]]") + ins))
    assert f"semantic {SEM_CTR_ADD} is taken (" in bad(sem % (SEM_CTR_ADD, "[[a, src]]") + ins)
    assert "semantics.alu: semantic 'alu' is taken (the base ISA" in bad(
        "semantics:\n  alu: {number: 50, operands: []}\n" + ins)
    assert "operands: expected a list of [name, kind]" in bad(sem % (50, "[[a, nope]]") + ins)
    msg = bad(sem % (50, "[[a, src]]") + ins, check=True)
    assert "ext.yaml:2: semantics.foo: no block executes semantic 50" in msg


def test_expression_evaluator_is_safe_and_helpful():
    env = {"gpu": 3, "sm.lanes": 128}
    assert evaluate("gpu * 2 + sm.lanes // 4", env) == 38
    assert evaluate("max(gpu, 7) if gpu > 1 else 0", env) == 7
    with pytest.raises(ExprError, match="unknown name 'sm.lane'; did you mean 'sm.lanes'"):
        evaluate("sm.lane", env)
    for text in ("__import__('os')", "gpu.__class__", "[1, 2][0]", "(lambda: 1)()"):
        with pytest.raises(ExprError):
            evaluate(text, env)
    with pytest.raises(ExprError, match="division by zero"):
        evaluate("1 // 0", env)


def test_isa_reference_lists_every_instruction(isa):
    ref = load_isa(default_isa_paths()).reference_text(flat_params(load("ubench/alltoall.yaml")))
    for mnemonic in isa.instructions:
        assert f"  {mnemonic} " in ref


def test_docs_kernel_example_assembles(isa):
    text = (REPO / "docs" / "concepts" / "isa.md").read_text()
    block = text[text.index("    .kernel stream_puts"):text.index("Registers `r0`")]
    program = asm("\n".join(line[4:] for line in block.splitlines()), isa)
    assert program.kernels["stream_puts"].params == ("peer", "buf", "chunk")


# ---- .include and macros ------------------------------------------------------------------------
LIB_MACRO = """# a library file: one macro
.macro bump reg, by
again_\\@:
    add \\reg, \\reg, \\by
    blt \\reg, 10, again_\\@
.endm
"""


def _asm_file(tmp_path, files, main="k.s"):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return assemble_files([tmp_path / main], _ISA_CACHE["isa"])


_ISA_CACHE = {}


@pytest.fixture
def files_isa(isa):
    _ISA_CACHE["isa"] = isa
    return isa


def test_include_and_macros_assemble_to_the_written_out_code(tmp_path, files_isa):
    p = _asm_file(tmp_path, {
        "lib/m.s": LIB_MACRO,
        "k.s": '.include "lib/m.s"\n.include "lib/m.s"   # read once\n.kernel k\n.param n\n'
               "    mov r1, 0\n    bump r1, 1\n    bump r2, %n\n    exit\n"})
    plain = asm(".kernel k\n.param n\n    mov r1, 0\na: add r1, r1, 1\n    blt r1, 10, a\n"
                "b: add r2, r2, %n\n    blt r2, 10, b\n    exit\n", files_isa)
    cols = [c for c in range(p.code.shape[1]) if c != LINE]
    assert np.array_equal(p.code[:, cols], plain.code[:, cols])
    assert p.code[2, OP0 + 2] == 1 and p.code[4, OP0 + 2] == 3     # each expansion its own label
    # an instruction from a macro body keeps the body's file and line
    file, line = p.source_line(1)
    assert file.endswith("m.s") and line == 4
    assert p.source_line(0)[1] == 5


def test_every_scheme_kernel_uses_the_library():
    """Kernels share a library: every MoE scheme's kernels include workloads/kernels/lib/."""
    kernels = REPO / "workloads" / "kernels"
    for f in ["common/moe_common.s", "deepep/deepep.s", "moehub/moe_layer.s", "overlap/overlap.s",
              "ubench/grouped_gemm.s"]:
        assert '.include "lib/gemm_tiles.s"' in (kernels / f).read_text(), f
    for lib in (kernels / "lib").glob("*.s"):
        text = lib.read_text()
        assert ".kernel" not in text.split("#")[0], lib          # library files define macros only
        for name in (line.split()[1] for line in text.splitlines() if line.startswith(".macro")):
            assert f"#   {name} " in text, f"{lib.name}: macro {name} has no interface comment"


@pytest.mark.parametrize("files,fragments", [
    ({"k.s": '.kernel k\n    exit\n.include "nothere.s"\n'},
     ["k.s:3:1: .include: cannot find 'nothere.s'", "workloads/kernels/nothere.s"]),
    ({"k.s": '.include "a.s"\n', "a.s": '\n.include "b.s"\n', "b.s": '.include "a.s"\n'},
     ["b.s:1:1: include cycle: k.s -> a.s -> b.s -> a.s", "(included from a.s:2)",
      "(included from k.s:1)"]),
    ({"k.s": '.include "k.s"\n'}, ["k.s:1:1: include cycle: k.s -> k.s"]),
    ({"k.s": ".include lib.s\n"}, ["k.s:1:1: .include takes one file name in double quotes"]),
    ({"k.s": '.kernel k\n.include "in.s"\n    exit\n', "in.s": "    nop\n    addd r1, r1, 1\n"},
     ["in.s:2:5: unknown instruction 'addd'", "(included from k.s:2)"]),
    ({"k.s": '.include "lib/m.s"\n.kernel k\n    bump r1\n    exit\n', "lib/m.s": LIB_MACRO},
     ["k.s:3:5: macro 'bump' takes 2 argument(s) (reg, by; defined at", "m.s:2), found 1"]),
    ({"k.s": '.include "lib/m.s"\n.kernel k\n    bump r1, r40\n    exit\n', "lib/m.s": LIB_MACRO},
     ["m.s:4:", "register 'r40' does not exist", "(in macro 'bump' used at k.s:3:5)"]),
    ({"k.s": ".macro m a\n    add \\a, \\b, 1\n.endm\n.kernel k\n    m r1\n    exit\n"},
     ["k.s:2:", "macro 'm' has no parameter 'b' (parameters: a)", "(in macro 'm' used at k.s:5:5)"]),
    ({"k.s": ".macro m\n    nop\n"}, ["k.s:1:1: macro 'm' has no .endm"]),
    ({"k.s": ".macro m\n    nop\n.endm\n.macro m\n    nop\n.endm\n"},
     ["k.s:4:1: macro 'm' is already defined at k.s:1"]),
    ({"k.s": ".endm\n"}, ["k.s:1:1: .endm without a .macro"]),
    ({"k.s": ".macro add a\n.endm\n"}, ["k.s:1:1: .macro add: the name is an instruction"]),
    ({"k.s": ".macro m\n    m\n.endm\n.kernel k\n    m\n    exit\n"}, ["macros nested more than 64 deep"]),
    ({"k.s": ".macro m\n    bra out\n.endm\n.kernel k\n    m\n    exit\n"},
     ["k.s:2:9: undefined label 'out' in kernel 'k'", "(in macro 'm' used at k.s:5:5)"]),
])
def test_include_and_macro_errors_name_file_line_and_chain(tmp_path, monkeypatch, files_isa, files,
                                                           fragments):
    monkeypatch.chdir(tmp_path)           # messages show paths relative to the working folder
    with pytest.raises(AsmError) as e:
        _asm_file(tmp_path, files)
    msg = str(e.value)
    for f in fragments:
        assert f in msg, msg
