# Kernel library: NVLink SHARP all-reduce (NCCL's NVLS algorithm on one NVSwitch domain), out of
# place (sendbuff -> recvbuff). Source of the algorithm: NCCL's NVLS all-reduce (NVIDIA/nccl,
# src/device/all_reduce.h, the NVLS path: each rank owns 1/n of the buffer; it loads that part
# reduced over every rank from the input's multicast address (multimem.ld_reduce) and stores the
# result to the output's multicast address (multimem.st), so every rank receives it). The switch
# does the reduction and the replication (components/nvls.py).
#
# Rank g owns elements [g N/P, (g+1) N/P); each thread block (NCCL channel) owns the same
# contiguous part of it (N / (P x channels) elements), which it moves in slices of `slice`
# elements:
#   multimem.ld_reduce  recv[slice] <- sum over ranks of send[slice]   (local HBM, this rank)
#   fence                                                              (the sum is here)
#   multimem.st         recv[slice] on every rank <- recv[slice]       (completes at the next
#                                                                       fence, or at exit)
# The next slice's ld_reduce overlaps the previous slice's st. Reduction order (what a NumPy
# reference must follow): the switch accumulates in FP32 over the ranks in rank order and rounds
# once to the element type (nvls.py; workloads/reference.nvls_allreduce_reference).
#
# Layouts (symmetric buffers, same address on every GPU): send, recv [elems] of the element
# type; workload.multicast must bind both (every GPU a member).
#
# Interface:
#   nvls_allreduce send, recv, elems, slice, esize, bf16
#       the calling thread block is channel %tb of %ntb; elems must be a multiple of
#       P x %ntb x slice; esize = 2 (bf16 = 1) or 4 (bf16 = 0). Writes r1 .. r8; labels are
#       private to the expansion.

.macro nvls_allreduce send, recv, elems, slice, esize, bf16
    div r1, \elems, %ngpu            # r1 = elements this rank owns (N / P)
    div r2, r1, %ntb                 # r2 = this channel's part of them
    mul r3, %gpu, r1
    mul r4, %tb, r2
    add r3, r3, r4
    mul r3, r3, \esize               # r3 = byte offset of this channel's part
    mul r4, \slice, \esize           # r4 = slice bytes
    mul r5, r2, \esize
    add r5, r5, r3                   # r5 = end of the part
slice_\@:
    add r6, r3, \send                # multimem address of the inputs
    add r7, r3, \recv                # this rank's result, then the outputs' multimem address
    bne \bf16, 0, bf16_\@
    multimem.ld_reduce.add.f32 r7, r6, r4
    bra reduced_\@
bf16_\@:
    multimem.ld_reduce.add.bf16 r7, r6, r4
reduced_\@:
    fence                            # the reduced slice is in local memory
    multimem.st r7, r7, r4           # ... and goes to every rank's recv
    add r3, r3, r4
    blt r3, r5, slice_\@
.endm
