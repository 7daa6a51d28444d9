# NVLink SHARP all-reduce kernel of the microbenchmark configs/ubench/allreduce_nvls.yaml: every
# GPU all-reduces `elems` elements of `send` into `recv` (lib/nvls_allreduce.s), one thread block
# per NCCL channel. Time = first kernel start to last kernel end (configs/ubench/allreduce_nvls.yaml).
.include "lib/nvls_allreduce.s"
.kernel allreduce_nvls
.param send
.param recv
.param elems         # elements per GPU (a multiple of ngpu x grid x slice)
.param slice         # elements per multimem operation (NCCL's chunk)
.param bf16          # 1: bf16 elements, 0: fp32
    mov r20, 4
    beq %bf16, 0, go
    mov r20, 2
go:
    nvls_allreduce %send, %recv, %elems, %slice, r20, %bf16
    exit

# nvls_tp_collective: the TP schemes' NVLS collectives (tp_nvls: phase 0, the all-reduce; sp_nvls:
# phase 1 the reduce-scatter, 2 the all-gather; workload.block, moehub_arch/workloads/block.py),
# with the barriers that make them safe between kernels (lib/nvls_allreduce.s). GPU g owns chunk
# (g + shift) % P: sp_nvls passes 1 so that its sequence shard is the ring's (tp/transformer.s).
.kernel nvls_tp_collective
.param send
.param recv
.param flags         # [grid][ngpu] i64, zero before the call
.param elems
.param slice
.param bf16
.param phase
.param shift
    mov r20, 4
    beq %bf16, 0, go
    mov r20, 2
go:
    nvls_collective %send, %recv, %flags, 1, %elems, %slice, r20, %bf16, %phase, %shift
    exit
