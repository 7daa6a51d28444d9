"""The parts of the tensor-parallel transformer block (workloads/block.py composes them):

    shape.py     the model file, the block's sizes and tiles, the kernel files and phases
    ring.py      tp_ring / sp_ring: NCCL's ring all-reduce and its halves
    nvls.py      tp_nvls / sp_nvls: NVLink SHARP's in-switch collectives
    cais.py      cais: CAIS's merge-unit collectives, fused GEMMs and dataflow kernel
    t3.py        t3: T3's GEMM fused with the reduce-scatter
    backward.py  passes: training: the backward's launches, stats and gradient checks
    checks.py    functional mode: the output against the NumPy reference

as the MoE layer's schemes each have a module in workloads/schemes/.
"""
