# Kernel library: sequence parallelism's collectives with CAIS's memory-semantic switch operations
# (CAIS, arXiv 2605.05628; the switch's merge unit: moehub_arch/components/cais_merge.py).
#
# Rank g owns chunk (g + shift) % P of the buffer, elements [k N/P, (k+1) N/P); each thread block
# (channel) owns the same contiguous part of every chunk (N / (P x channels) elements), moved in
# slices of `slice` elements.
#   reduce-scatter (phase 1): every rank adds its part of every chunk k into chunk k's home with
#     red.cais (posted: the slices stream without a round trip each); the switch merges the ranks'
#     contributions to one line into one partial sum and writes it home once. One `fence` (every
#     contribution of this channel is in its home's memory), then a barrier: every chunk is
#     complete. recv must be zero before the call (the home adds the sums into it).
#   all-gather (phase 2): a barrier (every home's chunk is written), then every rank loads every
#     chunk from its home with ld.cais, its own included (the merge counter counts every rank of the
#     group: the home's own load is a copy of its chunk onto itself); the switch reads each line
#     from the home once and fans the reply out. One `fence`: the chunks are here.
# Every rank's channel c walks the chunks in the same order, starting at chunk c mod P, so the
# ranks' requests for a line head for the switch in the same order while the channels spread over
# the homes: at any time each home's merge tables take the lines of ~channels / P channels, not of
# all of them (every channel on one home at a time overfilled its tables: 16 channels x 48 KB of
# distinct lines against 18 ports x 40 KB). CAIS's merging-aware thread-block coordination
# (sync >= 0): channel c of every rank is one group of matching thread blocks (its addresses do not depend on
# the rank); before each slice's request the channel syncs its group in the switch's group sync
# table (sync.cais on its flag sync[c], then wait.ge for the release), so no rank's channel runs
# more than one slice ahead of the same channel on the slowest rank and the ranks' requests for
# a line meet in the merge table close together. sync = -1: no coordination, only the common order
# (and the switch's throttle, system.switch.cais.throttle). system.cais.request_skew_*,
# complete_fraction and table_peak show how far apart the requests came.
# Reduction order: the merge unit's (rank order in FP32, one rounding to bf16 at the home:
# reference.nvls_allreduce_reference), exactly, while no line is evicted or timed out.
#
# Layouts (symmetric buffers): send, recv [elems] bf16; workload.cais registers recv (the address
# at the home of both operations); flags [channels][P] i64, zero before the call; sync [channels]
# i64 (registered with workload.cais: the group sync table's members are its group's), zero
# before the call, or -1 for no coordination.
#
# Interface:
#   cais_collective send, recv, flags, elems, slice, phase, shift, sync
#       the calling thread block is channel %tb of %ntb; elems a multiple of P x %ntb x slice;
#       phase 1: reduce-scatter (send -> the owner's recv), 2: all-gather (in place in recv).
#       Writes r1 .. r15 (the barrier r9 .. r11); labels are private to the expansion.
.include "lib/nvls_allreduce.s"

.macro cais_collective send, recv, flags, elems, slice, phase, shift, sync
    div r1, \elems, %ngpu            # r1 = elements per chunk (N / P)
    mov r14, 0                       # r14 = this channel's syncs so far
    shl r15, %tb, 3
    add r15, r15, \sync              # r15 = &sync[channel] (used only if sync >= 0)
    div r2, r1, %ntb                 # r2 = this channel's part of a chunk
    mul r4, \slice, 2                # r4 = slice bytes (bf16)
    beq \phase, 1, start_\@
    nvls_barrier \flags, 1           # every home's chunk is written (its kernel ended)
start_\@:
    mov r8, 0                        # r8 = chunks done
chunk_\@:
    add r12, r8, %tb
    rem r12, r12, %ngpu              # r12 = chunk k = (chunks done + channel) mod P
    add r13, r12, %ngpu
    sub r13, r13, \shift
    rem r13, r13, %ngpu              # r13 = home of chunk k: (k - shift) mod P
    mul r3, r12, r1
    mul r5, %tb, r2
    add r3, r3, r5
    shl r3, r3, 1                    # r3 = byte offset of this channel's part of chunk k
    shl r5, r2, 1
    add r5, r5, r3                   # r5 = its end
slice_\@:
    blt \sync, 0, issue_\@
    add r14, r14, 1
    sync.cais r15, r14               # the group's pre-access sync in the switch ...
    wait.ge [r15], r14               # ... released once every rank's channel has arrived
issue_\@:
    add r7, r3, \recv                # the address at the home (and, gathering, here)
    beq \phase, 2, load_\@
    add r6, r3, \send
    red.cais.add.bf16 r13, r7, r6, r4
    bra next_\@
load_\@:
    ld.cais r13, r7, r7, r4
next_\@:
    add r3, r3, r4
    blt r3, r5, slice_\@
    add r8, r8, 1
    blt r8, %ngpu, chunk_\@
    fence                            # this channel's sums are home / its loads are here
    beq \phase, 2, done_\@
    nvls_barrier \flags, 2           # every rank's sums are home: the chunks are complete
done_\@:
.endm
