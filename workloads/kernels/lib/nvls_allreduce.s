# Kernel library: NVLink SHARP collectives (NCCL's NVLS algorithm on one NVSwitch domain), out of
# place (sendbuff -> recvbuff). Source of the algorithm: NCCL's NVLS all-reduce (NVIDIA/nccl,
# src/device/all_reduce.h, the NVLS path: each rank owns 1/n of the buffer; it loads that part
# reduced over every rank from the input's multicast address (multimem.ld_reduce) and stores the
# result to the output's multicast address (multimem.st), so every rank receives it). The switch
# does the reduction and the replication (components/nvls.py). The reduce-scatter is the first
# half alone (the owned part stays local), the all-gather the second half alone (NCCL's NVLS
# reduce-scatter and all-gather, src/device/reduce_scatter.h and all_gather.h).
#
# Rank g owns chunk (g + shift) % P, elements [k N/P, (k+1) N/P); each thread block (NCCL
# channel) owns the same contiguous part of it (N / (P x channels) elements), which it moves in
# slices of `slice` elements:
#   multimem.ld_reduce  recv[slice] <- sum over ranks of send[slice]   (local HBM, this rank)
#   fence                                                              (the sum is here)
#   multimem.st         recv[slice] on every rank <- recv[slice]       (completes at the next
#                                                                       fence, or at exit)
# The next slice's ld_reduce overlaps the previous slice's st. Reduction order (what a NumPy
# reference must follow): the switch accumulates in FP32 over the ranks in rank order and rounds
# once to the element type (nvls.py; workloads/reference.nvls_allreduce_reference).
#
# Synchronisation (NCCL's NVLS kernels open and close with a barrier over the ranks): with a
# `flags` buffer, channel c of every rank meets channel c of every other rank (flag.set of
# flags[c][g] on each rank, then wait.ge on flags[c][0 .. P-1]) before its first ld_reduce -
# every rank's input is written (its producer kernel ended) - and again after its last store's
# fence - every rank's output has arrived, so the next kernel may read it. The reduce-scatter
# has only the first barrier (its result is local), the all-gather only the second (it reads
# only this rank's own chunk). barriers = 0: none (the microbenchmark, whose inputs are preset
# and whose output nobody reads; flags is not used).
#
# Layouts (symmetric buffers, same address on every GPU): send, recv [elems] of the element
# type; workload.multicast must bind send (reduce) and recv (store), every GPU a member; flags
# [channels][P] i64, zero before the call (control region).
#
# Interface:
#   nvls_collective send, recv, flags, barriers, elems, slice, esize, bf16, phase, shift
#       the calling thread block is channel %tb of %ntb; elems must be a multiple of
#       P x %ntb x slice; esize = 2 (bf16 = 1) or 4 (bf16 = 0). phase 0: the all-reduce; 1: the
#       reduce-scatter (GPU g ends with the sum of its chunk in recv); 2: the all-gather (GPU g's
#       chunk of recv goes to every GPU's recv; send is not read). Writes r1 .. r11; labels are
#       private to the expansion.
#   nvls_allreduce send, recv, elems, slice, esize, bf16
#       the all-reduce without barriers, rank g owning chunk g (configs/ubench/allreduce_nvls.yaml).
#   nvls_barrier flags, value
#       channel %tb meets channel %tb of every rank: flags[%tb][%gpu] = value on every rank
#       (flag.set), then waits until flags[%tb][r] >= value for every rank r. Writes r9 .. r11.

.macro nvls_barrier flags, value
    mul r9, %tb, %ngpu
    shl r11, r9, 3
    add r11, r11, \flags             # r11 = &flags[c][0]
    add r9, r9, %gpu
    shl r9, r9, 3
    add r9, r9, \flags               # r9 = &flags[c][g] (the same address on every rank)
    mov r10, 0
tell_\@:
    flag.set r10, [r9], \value
    add r10, r10, 1
    blt r10, %ngpu, tell_\@
    wait.all.ge [r11], \value, %ngpu  # every rank's channel c is here (a lane per rank)
.endm

.macro nvls_collective send, recv, flags, barriers, elems, slice, esize, bf16, phase, shift
    div r1, \elems, %ngpu            # r1 = elements this rank owns (N / P)
    div r2, r1, %ntb                 # r2 = this channel's part of them
    add r3, %gpu, \shift
    rem r3, r3, %ngpu                # r3 = chunk this rank owns
    mul r3, r3, r1
    mul r4, %tb, r2
    add r3, r3, r4
    mul r3, r3, \esize               # r3 = byte offset of this channel's part
    mul r4, \slice, \esize           # r4 = slice bytes
    mul r5, r2, \esize
    add r5, r5, r3                   # r5 = end of the part
    beq \barriers, 0, slice_\@
    beq \phase, 2, slice_\@
    nvls_barrier \flags, 1           # every rank's input is complete
slice_\@:
    add r6, r3, \send                # multimem address of the inputs
    add r7, r3, \recv                # this rank's result, then the outputs' multimem address
    beq \phase, 2, store_\@
    bne \bf16, 0, bf16_\@
    multimem.ld_reduce.add.f32 r7, r6, r4
    bra reduced_\@
bf16_\@:
    multimem.ld_reduce.add.bf16 r7, r6, r4
reduced_\@:
    fence                            # the reduced slice is in local memory
    beq \phase, 1, stored_\@
store_\@:
    multimem.st r7, r7, r4           # ... and goes to every rank's recv
stored_\@:
    add r3, r3, r4
    blt r3, r5, slice_\@
    beq \barriers, 0, done_\@
    beq \phase, 1, done_\@
    fence                            # every rank has this rank's stores
    nvls_barrier \flags, 2           # ... and every other rank's
done_\@:
.endm

.macro nvls_allreduce send, recv, elems, slice, esize, bf16
    nvls_collective \send, \recv, 0, 0, \elems, \slice, \esize, \bf16, 0, 0
.endm
