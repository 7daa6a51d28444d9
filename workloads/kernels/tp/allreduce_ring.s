# Ring all-reduce kernel of tensor-parallel scheme tp_ring (transformer blocks, workload.block) and
# of the microbenchmark configs/ubench/allreduce_ring.yaml: every GPU
# all-reduces `elems` elements of `send` into `recv` (lib/ring_allreduce.s), one thread block per
# NCCL channel. Time = first kernel start to last kernel end (configs/ubench/allreduce_ring.yaml).
.include "lib/ring_allreduce.s"
.kernel allreduce_ring
.param send
.param recv
.param stage
.param flags
.param elems         # elements per GPU (a multiple of ngpu x grid x slice)
.param slice         # elements per put (NCCL's chunk)
.param bf16          # 1: bf16 elements, 0: fp32
    mov r20, 4
    beq %bf16, 0, go
    mov r20, 2
go:
    ring_collective %send, %recv, %stage, %flags, %elems, %slice, r20, %bf16, 0
    exit

# ring_half: one half of the ring all-reduce (lib/ring_allreduce.s, phase 1 the reduce-scatter,
# 2 the all-gather) - sequence parallelism's collectives (scheme sp_ring, workload.block).
.kernel ring_half
.param send
.param recv
.param stage
.param flags
.param elems
.param slice
.param bf16
.param phase
    mov r20, 4
    beq %bf16, 0, go
    mov r20, 2
go:
    ring_collective %send, %recv, %stage, %flags, %elems, %slice, r20, %bf16, %phase
    exit
