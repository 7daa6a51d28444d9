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
