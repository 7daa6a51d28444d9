# MoE layer, scheme `nvls`: DySHARP's NVLink SHARP baseline (arXiv 2605.05607) - dispatch as an
# all-gather and combine as a reduce-scatter, both over one static multicast object spanning
# every GPU of the expert-parallel group, done by the NVSwitch (components/nvls.py). Launch plan
# and layouts: moehub_arch/workloads/schemes/nvls.py.
#
# Layouts (P GPUs, T tokens per GPU, k = top-k, H hidden, El local experts, U = P x T gathered
# tokens; gathered token u = g x T + t is token t of GPU g):
#   xall [U][H] bf16, idxall [U * k] i64 (+ 64 B: ld.v8), wall [U * k] f32   (multicast objects)
#   xe, ye [El][cap][H] bf16 expert-major rows; cnt [El] i64 rows per local expert;
#   map [U * k] i64: the xe / ye row of pair (u, j), -1 where its expert is on another GPU;
#   ypart [U][H] bf16: this GPU's partial output of every gathered token (multicast object);
#   comb [T][H] bf16: the reduced rows of this GPU's own tokens; flags [2][P] i64 barrier words.
# acct words: 0 pairs sent (all-gather), 1 received (selected at the expert's GPU), 2 computed
# (grouped_down), 3 combined (added into a partial), 5 shared-expert TBs (moe_common.s).

.include "lib/slot_words.s"
.include "lib/combine.s"

# channel_tokens (no arguments): channel %tb of %ntb takes tokens r2 .. r3 - 1 of this GPU's
# %tokens, ceil(T / ntb) each (r1; the last channel fewer, a channel past the end none: r2 >= r3).
.macro channel_tokens
    add r1, %tokens, %ntb
    sub r1, r1, 1
    div r1, r1, %ntb             # r1 = tokens per channel
    mul r2, %tb, r1              # r2 = first token
    add r3, r2, r1
    blt r3, %tokens, bounded_\@
    mov r3, %tokens              # r3 = end token
bounded_\@:
.endm

# mm_st_range dst, src, bytes, chunk, off, n: multimem.st of `bytes` bytes from local `src` to
# multimem `dst` on every member, one operation per `chunk` bytes. Writes off, n, r30, r31.
.macro mm_st_range dst, src, bytes, chunk, off, n
    mov \off, 0
piece_\@:
    bge \off, \bytes, sent_\@
    sub \n, \bytes, \off
    blt \n, \chunk, sized_\@
    mov \n, \chunk
sized_\@:
    add r31, \dst, \off
    add r30, \src, \off
    multimem.st r31, r30, \n
    add \off, \off, \n
    bra piece_\@
sent_\@:
.endm

# mm_st_tokens dst, src, unit (inside nvls_allgather): this channel's tokens r2 .. r2 + r4 - 1
# of `src` ([T] of `unit` bytes each) multicast to gathered token r5 .. of `dst` on every GPU.
# Writes r7 .. r11.
.macro mm_st_tokens dst, src, unit
    mul r7, r4, \unit            # bytes
    mul r8, r2, \unit
    add r8, r8, \src
    mul r9, r5, \unit
    add r9, r9, \dst
    mm_st_range r9, r8, r7, %chunk, r10, r11
.endm

# nvls_allgather: channel b (TB b of ntb) moves tokens [b ceil(T/ntb), ...) of this GPU: their
# rows, expert ids and router weights go to gathered slot gpu x T + t on every GPU by
# multimem.st (the switch replicates each packet to every member, this GPU included). Completes
# at the fence; counts the token-expert pairs sent (acct word 0).
.kernel nvls_allgather
.param x
.param topk_idx
.param topk_w
.param xall
.param idxall
.param wall
.param acct
.param tokens
.param topk
.param hidden
.param chunk
    channel_tokens
    bge r2, r3, leave
    sub r4, r3, r2               # r4 = tokens of this channel
    mul r5, %gpu, %tokens
    add r5, r5, r2               # r5 = first gathered token
    shl r6, %hidden, 1
    mm_st_tokens %xall, %x, r6                   # rows: 2 H bytes per token
    shl r6, %topk, 3
    mm_st_tokens %idxall, %topk_idx, r6          # expert ids: k words per token
    shl r6, %topk, 2
    mm_st_tokens %wall, %topk_w, r6              # router weights: k fp32 per token
    fence                        # every member has every byte
    mul r12, r4, %topk
    red.add %gpu, [%acct], r12   # acct word 0: pairs sent
leave:
    exit

# nvls_barrier (one TB): flags[gpu] = 1 on every GPU, then waits until flags[g] = 1 for every g.
# Runs after the previous kernel of the stream, so every GPU has finished that step.
.kernel nvls_barrier
.param flags
    tell_every_gpu %flags, r1, r2
    wait.all.eq [%flags], 1, %ngpu    # every GPU arrived (a lane per flag)
    exit

# nvls_select: the local experts' rows out of the all-gathered tokens. Per gathered token u (TB b
# takes u = b, b + ntb, ...) and slot j with expert e on this GPU (e / El = gpu): pos = atom.add
# cnt[e - gpu El]; xall[u] is copied to row (e - gpu El) cap + pos of xe and map[u k + j] = that
# row; pairs of experts elsewhere get map = -1. Counts the rows received (acct word 1).
.kernel nvls_select
.param xall
.param idxall
.param cnt
.param xe
.param map
.param acct
.param gathered              # U = P x T
.param topk
.param hidden
.param local_experts
.param cap
    shl r1, %hidden, 1           # r1 = row bytes
    shl r2, %topk, 3             # r2 = bytes of a token's ids
    mul r3, %gpu, %local_experts # r3 = first local expert
    mov r4, %tb                  # r4 = gathered token
    mov r5, 0                    # r5 = rows received
    mov r15, -1
token:
    bge r4, %gathered, end
    mul r6, r4, r2
    add r6, r6, %idxall
    ld.v8 r16, [r6]              # r16.. = the token's expert ids (k <= 8)
    mul r7, r4, r1
    add r7, r7, %xall            # r7 = xall[u]
    mul r8, r4, r2
    add r8, r8, %map             # r8 = &map[u k + j]
    mov r9, 0                    # r9 = slot j
slot:
    sub r10, r16, r3             # r10 = local expert (if on this GPU)
    blt r10, 0, elsewhere
    bge r10, %local_experts, elsewhere
    shl r11, r10, 3
    add r11, r11, %cnt
    atom.add r12, %gpu, [r11], 1
    mul r13, r10, %cap
    add r13, r13, r12            # r13 = row in xe
    st [r8], r13
    mul r14, r13, r1
    add r14, r14, %xe
    copy r14, r7, r1
    add r5, r5, 1
    bra next
elsewhere:
    st [r8], r15
next:
    add r8, r8, 8
    next_slot_word r9, %topk, slot
    add r4, r4, %ntb
    bra token
end:
    red.add %gpu, [%acct+8], r5  # acct word 1: rows received
    exit

# nvls_partial: this GPU's partial output of every gathered token u (TB b takes u = b, b + ntb,
# ...): acc = 0; for each slot j ascending whose expert is here, acc += fp32(w[u][j] x ye[row])
# (fp32); ypart[u] = bf16(acc) - an exact zero row where none of u's experts is here, since the
# reduce-scatter sums every GPU's row. Counts the pairs combined into a partial (acct word 3).
.kernel nvls_partial
.param ye
.param wall
.param map
.param ypart
.param acct
.param gathered
.param topk
.param hidden
.smem 28KB                   # acc [H] f32 (H <= 7168)
    shl r1, %hidden, 1           # r1 = row bytes
    shl r2, %topk, 3
    mov r3, %smem                # r3 = acc
    mov r4, %tb                  # r4 = gathered token
    mov r5, 0                    # r5 = pairs combined
token:
    bge r4, %gathered, end
    vzero.f32 r3, %hidden
    mul r6, r4, r2
    add r6, r6, %map
    ld.v8 r16, [r6]              # r16.. = the token's rows in ye (-1: elsewhere)
    mul r7, r4, %topk
    shl r7, r7, 2
    add r7, r7, %wall            # r7 = &w[u][0]
    mov r9, 0                    # r9 = slot j
slot:
    blt r16, 0, next
    mul r10, r16, r1
    add r10, r10, %ye
    shl r11, r9, 2
    add r11, r11, r7
    vaxpy.f32.bf16 r3, r10, r11, %hidden
    add r5, r5, 1
next:
    next_slot_word r9, %topk, slot
    mul r12, r4, r1
    add r12, r12, %ypart
    vcvt.bf16.f32 r12, r3, %hidden
    add r4, r4, %ntb
    bra token
end:
    red.add %gpu, [%acct+24], r5     # acct word 3: pairs combined
    exit

# nvls_reduce_scatter: channel b (TB b of ntb) reduces its part of this GPU's own tokens: comb[t]
# = sum over every GPU of ypart[gpu x T + t], by multimem.ld_reduce (the switch reads every
# member's row, accumulates in fp32 in rank order and returns one bf16 row), `chunk` bytes at a
# time. Completes at the fence.
.kernel nvls_reduce_scatter
.param ypart
.param comb
.param tokens
.param hidden
.param chunk
    channel_tokens
    bge r2, r3, leave
    shl r6, %hidden, 1           # r6 = row bytes
    mul r7, r2, r6               # r7 = byte offset in comb
    mul r8, r3, r6               # r8 = end
    mul r9, %gpu, %tokens
    mul r9, r9, r6
    add r9, r9, %ypart           # r9 = this GPU's tokens in ypart (multimem address)
piece:
    bge r7, r8, reduced
    sub r10, r8, r7
    blt r10, %chunk, sized
    mov r10, %chunk
sized:
    add r11, r7, %comb
    add r12, r7, r9
    multimem.ld_reduce.add.bf16 r11, r12, r10
    add r7, r7, r10
    bra piece
reduced:
    fence                        # the reduced rows are in local memory
leave:
    exit

# nvls_output: waits for the shared experts, then per token (round-robin over TBs) out[t] = sum_s
# ys[s][t] + comb[t], accumulated in fp32 in that order (the reference's combine="switch_reduce").
.kernel nvls_output
.param out
.param ys
.param comb
.param one
.param acct
.param tokens
.param hidden
.param shared
.param shared_tbs
    beq %shared, 0, ready
    wait.ge [%acct+40], %shared_tbs  # the shared experts' outputs are written
ready:
    shl r10, %hidden, 1          # r10 = bf16 row bytes
    shl r11, %hidden, 2          # r11 = f32 row bytes
    mov r1, %tb                  # r1 = token
token:
    bge r1, %tokens, end
    start_output_row r2, r1, %out, r11, %shared, %ys, %one, %tokens, r10, %hidden, r3, r4
    mul r5, r1, r10
    add r5, r5, %comb
    vaxpy.f32.bf16 r2, r5, %one, %hidden
    add r1, r1, %ntb
    bra token
end:
    exit

# ---- the backward (workload.layer.passes: training; plan: schemes/nvls.py) ---------------------
# The combine's reduce-scatter has an all-gather as its backward, the dispatch's all-gather a
# reduce-scatter: nvls_bwd_allgather multicasts dy (rows only: the gathered expert ids and
# weights of the forward serve again), nvls_bwd_weight turns the gathered dy into dw (home) and
# the local pairs' dO rows, the shared grouped backward kernels compute dX, nvls_partial (weights
# 1.0) forms this GPU's partial of every gathered token's input gradient and nvls_reduce_scatter
# reduces them in the switch (multimem.ld_reduce) for the owners; nvls_output adds the shared
# experts' dX first.

# nvls_bwd_allgather: as nvls_allgather, the rows of `x` alone into `xall`; the gradient rows the
# experts receive are counted by nvls_bwd_weight.
.kernel nvls_bwd_allgather
.param x
.param xall
.param tokens
.param hidden
.param chunk
    channel_tokens
    bge r2, r3, leave
    sub r4, r3, r2
    mul r5, %gpu, %tokens
    add r5, r5, r2
    shl r6, %hidden, 1
    mm_st_tokens %xall, %x, r6
    fence
leave:
    exit

# nvls_bwd_weight: per gathered token u (TB b takes u = b, b + ntb, ...) and slot j whose expert is
# here (map[u k + j] = its row): dw = <dy[u], y_j> (fp32 in increasing h; y_j: the forward's
# expert output row, kept in ye) put to the home GPU's dw[t][j] (u = g T + t), and the dO row
# bf16(w[u][j] dy[u]) at the same row of dye. Counts the rows (bacct word 0: dispatched).
.kernel nvls_bwd_weight
.param dyall                 # [U][H] bf16: the gathered dy
.param ye                    # [El][cap][H] bf16: the forward's expert outputs
.param wall                  # [U * k] f32
.param map                   # [U * k] i64: the pair's row, -1 elsewhere
.param dye                   # [El][cap][H] bf16: dO rows
.param bdw                   # [U * k] f32: dw staged for the put home
.param dw                    # [T][k] f32 on the home GPU
.param bacct
.param tokens
.param gathered
.param topk
.param hidden
.smem 128KB                  # dy, products, w dy [H] fp32 + dO [H] bf16 + the dot (H <= 8192)
    shl r10, %hidden, 1
    shl r11, %hidden, 2
    mov r20, %smem               # r20 = dy[u] in fp32
    add r21, r20, r11            # r21 = products
    add r22, r21, r11            # r22 = w dy (fp32)
    add r23, r22, r11            # r23 = dO row (bf16)
    add r24, r23, r10            # r24 = the dot product
    mov r9, 0                    # r9 = rows
    mov r1, %tb                  # r1 = gathered token u
token:
    bge r1, %gathered, end
    mul r2, r1, r10
    add r2, r2, %dyall           # r2 = dy[u]
    div r13, r1, %tokens         # r13 = home GPU
    rem r14, r1, %tokens         # r14 = token there
    mul r5, r1, %topk
    mov r25, 0                   # r25 = dy[u] converted
    mov r3, 0                    # r3 = slot
slot:
    add r6, r5, r3               # r6 = pair u k + j
    shl r7, r6, 3
    add r7, r7, %map
    ld r7, [r7]
    blt r7, 0, next              # the expert is elsewhere
    bne r25, 0, converted
    vcvt.f32.bf16 r20, r2, %hidden
    mov r25, 1
converted:
    mul r8, r7, r10              # r8 = byte offset of the pair's row
    add r12, r8, %ye
    dot_row_bf16 r24, r20, r12, r21, %hidden
    shl r12, r6, 2
    add r15, r12, %bdw
    copy r15, r24, 4             # dw staged
    mul r26, r14, %topk
    add r26, r26, r3
    shl r26, r26, 2
    add r26, r26, %dw
    put.sm r13, r26, r15, 4      # dw[t][j] on the home GPU
    add r12, r12, %wall          # r12 = &w[u][j]
    scale_row_bf16 r23, r22, r2, r12, %hidden
    add r12, r8, %dye
    copy r12, r23, r10           # dO at the pair's row
    add r9, r9, 1
next:
    add r3, r3, 1
    blt r3, %topk, slot
    add r1, r1, %ntb
    bra token
end:
    fence                        # the dw puts have landed
    red.add %gpu, [%bacct], r9
    exit
