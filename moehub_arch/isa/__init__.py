"""The instruction set: tables loaded from `isa/*.yaml`, the assembler and the disassembler.

    isa = load_isa(default_isa_paths()).resolve(flat_params(cfg))
    program = assemble_files(["workloads/kernels/ubench/alltoall.s"], isa)
    print(disassemble(program, isa))

The binary encoding shared with the engine is in encoding.py.
"""
from .assembler import AsmError, KernelInfo, Program, assemble_files, assemble_text
from .disasm import disassemble
from .expr import ExprError, evaluate
from .loader import Isa, IsaError, ResolvedIsa, default_isa_paths, load_isa

__all__ = ["AsmError", "IsaError", "ExprError", "Isa", "ResolvedIsa", "KernelInfo", "Program",
           "assemble_files", "assemble_text", "disassemble", "default_isa_paths", "load_isa",
           "evaluate"]
