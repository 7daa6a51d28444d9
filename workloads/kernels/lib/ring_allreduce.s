# Kernel library: NCCL-style ring all-reduce (reduce-scatter, then all-gather) over puts and flags,
# out of place (NCCL's sendbuff -> recvbuff). Source of the algorithm: NCCL's ring all-reduce
# (Jeaugey, "Massively Scale Your Deep Learning Training with NCCL 2.4", NVIDIA blog 2019; NCCL
# docs "Collective Operations": a ring of n ranks, 2(n-1) steps, each rank sends 2(n-1)/n of the
# buffer - the busbw factor of nccl-tests' PERFORMANCE.md).
#
# Ring: GPU g sends to (g + 1) % P and receives from (g - 1) % P. The buffer of `elems` elements is
# cut into P chunks (chunk k: elements [k N/P, (k+1) N/P)); each thread block is one NCCL channel
# and owns the same contiguous part of every chunk (N / (P x channels) elements), which it moves in
# slices of `slice` elements (NCCL's chunking: a slice is in flight while the next one starts).
#   reduce-scatter step s = 0 .. P-2: send chunk (g - s) % P (from `send` at s = 0, else from
#       `recv`, where step s-1 left the partial sum) into the next GPU's stage[c][s]; then
#       recv[(g-1-s) % P] = send[...] + stage[c][s] once the previous GPU's slice is in.
#   all-gather step s = 0 .. P-2: send chunk (g + 1 - s) % P of `recv` (fully reduced) to the same
#       place in the next GPU's `recv`; then wait for chunk (g - s) % P from the previous GPU.
# Reduction order (what a NumPy reference must follow): chunk k is summed along the ring starting
# at GPU k: ((x_k + x_{k+1}) + x_{k+2}) + ... + x_{k+P-1} (indices mod P; each + rounds to the
# buffer type, fp32 or bf16 - vadd computes in fp32 and rounds once per add).
#
# Synchronisation: a put, then a fence (its write responses are back: the data is in the peer's
# memory), then flag.set of flags[c][step] on the next GPU to the number of slices sent so far;
# the receiver waits with wait.ge. Stage slots are never reused within a call (stage holds every
# reduce-scatter step's slices), so no credit flow back is needed.
#
# Layouts (symmetric buffers, same address on every GPU):
#   send, recv  [elems] of the element type (bf16 or f32)
#   stage       [channels][P-1][elems / (P x channels)] of the element type
#   flags       [channels][2 (P-1)] i64, zero before the call (control region)
#
# Interface:
#   ring_collective send, recv, stage, flags, elems, slice, esize, bf16, phase
#       the calling thread block is channel %tb of %ntb; elems must be a multiple of
#       P x %ntb x slice; esize = 2 (bf16 = 1) or 4 (bf16 = 0). phase 0: the all-reduce (both
#       halves); 1: the reduce-scatter alone (steps 0 .. P-2: GPU g ends with the full sum of
#       chunk (g + 1) % P in recv, the other chunks of recv hold partial sums); 2: the all-gather
#       alone (steps P-1 .. 2P-3: GPU g's chunk (g + 1) % P of recv goes to every GPU's recv;
#       send and stage are not read). Sequence parallelism uses 1 and 2 (Korthikanti et al.,
#       arXiv 2205.05198): the sequence shard of GPU g is chunk (g + 1) % P. Writes r1 .. r19;
#       labels are private to the expansion.

.macro ring_collective send, recv, stage, flags, elems, slice, esize, bf16, phase
    div r1, \elems, %ngpu            # r1 = chunk elements (N / P)
    div r2, r1, %ntb                 # r2 = part: this channel's elements of each chunk
    add r3, %gpu, 1
    rem r3, r3, %ngpu                # r3 = next GPU
    sub r4, %ngpu, 1                 # r4 = P - 1 steps per phase
    mul r5, %tb, r4
    shl r5, r5, 4
    add r5, r5, \flags               # r5 = &flags[c][0] (2 (P-1) words per channel)
    mul r6, %tb, r4
    mul r6, r6, r2
    mul r6, r6, \esize
    add r6, r6, \stage               # r6 = &stage[c][0][0]
    mul r7, \slice, \esize           # r7 = slice bytes
    mov r8, 0                        # r8 = slice index j
slice_\@:
    mov r9, 0                        # r9 = step s (0 .. 2 (P-1) - 1)
    bne \phase, 2, step_\@
    mov r9, r4                       # the all-gather alone starts at step P-1
step_\@:
    # chunk sent: (g - s) % P in reduce-scatter, (g + 1 - s') % P in all-gather (s' = s - (P-1))
    add r10, %gpu, %ngpu
    sub r10, r10, r9
    blt r9, r4, rs_chunk_\@
    add r10, r10, 1
    add r10, r10, r4
rs_chunk_\@:
    rem r10, r10, %ngpu              # r10 = chunk k sent
    mul r11, r10, r1
    mul r12, %tb, r2
    add r11, r11, r12
    mul r12, r8, \slice
    add r11, r11, r12
    mul r11, r11, \esize             # r11 = byte offset of (k, c, j) in send / recv
    add r12, r11, \recv              # source: recv (partial or final sums) ...
    bne r9, 0, src_\@
    add r12, r11, \send              # ... or my own input at the first step
src_\@:
    add r13, r11, \recv              # destination in the next GPU's recv (all-gather)
    bge r9, r4, put_\@
    mul r13, r9, r2                  # reduce-scatter: stage[c][s][j x slice]
    mul r14, r8, \slice
    add r13, r13, r14
    mul r13, r13, \esize
    add r13, r13, r6
put_\@:
    put r3, r13, r12, r7
    fence                            # the slice is in the next GPU's memory before its flag
    shl r15, r9, 3
    add r15, r15, r5                 # r15 = &flags[c][s]
    add r16, r8, 1                   # slices sent on this step so far
    flag.set r3, [r15], r16
    wait.ge [r15], r16               # the previous GPU's slice j of step s is here
    bge r9, r4, next_\@              # all-gather: the slice landed in place
    # reduce-scatter: recv[k'] = send[k'] + stage[c][s], k' = (g - 1 - s) % P
    add r10, %gpu, %ngpu
    sub r10, r10, r9
    sub r10, r10, 1
    rem r10, r10, %ngpu
    mul r11, r10, r1
    mul r12, %tb, r2
    add r11, r11, r12
    mul r12, r8, \slice
    add r11, r11, r12
    mul r11, r11, \esize
    add r17, r11, \recv
    add r18, r11, \send
    mul r19, r9, r2
    mul r14, r8, \slice
    add r19, r19, r14
    mul r19, r19, \esize
    add r19, r19, r6                 # &stage[c][s][j x slice]
    bne \bf16, 0, add_bf16_\@
    vadd.f32 r17, r19, r18, \slice   # stage (the ring's partial sum so far) + my input
    bra next_\@
add_bf16_\@:
    vadd.bf16 r17, r19, r18, \slice
next_\@:
    add r9, r9, 1
    shl r14, r4, 1
    bne \phase, 1, last_\@
    mov r14, r4                      # the reduce-scatter alone ends after step P-2
last_\@:
    blt r9, r14, step_\@
    add r8, r8, 1
    mul r14, r8, \slice
    blt r14, r2, slice_\@
.endm
