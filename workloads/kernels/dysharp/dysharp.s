# MoE layer, scheme `dysharp`: DySHARP (arXiv 2605.05607) - dispatch as one dymultimem.st per
# token to its target experts and combine as one dymultimem.ld_reduce per token, both executed by
# the NVSwitch (components/dysharp.py, nvls.py). Launch plan and layouts:
# moehub_arch/workloads/schemes/dysharp.py. nvls_barrier and nvls_output come from
# ../nvls/nvls.s (assembled with this file).

.include "lib/slot_words.s"
#
# Layouts (P GPUs, T tokens per GPU, k = top-k, H hidden, El local experts, R = 2 H row bytes,
# M meta-row bytes (k ids i64 then k weights f32, padded: schemes/dysharp.py meta_row_bytes), cap layout rows per expert;
# token t of GPU g is algebraic row u = g x T + t):
#   xe [El][cap][H] bf16, meta [El][cap][M], ye [El][cap][H] bf16: the dynamic objects' receive
#     layouts; a dymultimem address is the buffer's address + u x (R or M) + byte offset
#   cnt [El] i64 rows placed per local expert and al [U][El] the AL table (written by the hub)
#   msrc [T][M]: this GPU's tokens' meta rows; comb [T][H] bf16: the reduced rows of its tokens
# acct words: 0 pairs sent, 1 received (rows scaled at the expert's GPU), 2 computed
# (grouped_down), 3 combined (targets reduced for this GPU's tokens), 5 shared-expert TBs.

# dysharp_dispatch: TB b takes tokens t = b, b + ntb, ... of this GPU. It builds each token's meta
# row (expert ids, router weights), then sends the token's row and its meta row with one
# dymultimem.st each to its k experts (the target list is the token's expert ids in topk_idx):
# the switch sends one copy per GPU that holds any of them, and that GPU's hub writes it into the
# layout row of each of its targets. Completes at the fence; counts the pairs sent (acct word 0).
.kernel dysharp_dispatch
.param x
.param topk_idx
.param topk_w
.param msrc
.param xe                    # multimem base of the row object (algebraic row u at + u R)
.param meta                  # multimem base of the meta object (+ u M)
.param acct
.param tokens
.param topk
.param hidden
.param meta_bytes
    shl r1, %hidden, 1           # r1 = R
    shl r2, %topk, 3             # r2 = bytes of a token's ids
    shl r3, %topk, 2             # r3 = bytes of its weights
    mov r4, %tb
meta_row:
    bge r4, %tokens, built
    mul r5, r4, %meta_bytes
    add r5, r5, %msrc            # r5 = msrc[t]
    mul r6, r4, r2
    add r6, r6, %topk_idx
    copy r5, r6, r2              # ids
    add r5, r5, r2
    mul r6, r4, r3
    add r6, r6, %topk_w
    copy r5, r6, r3              # weights
    add r4, r4, %ntb
    bra meta_row
built:
    fence                        # the meta rows are in memory before the hub reads them
    mov r4, %tb
    mov r12, 0                   # r12 = pairs sent
token:
    bge r4, %tokens, sent
    mul r5, %gpu, %tokens
    add r5, r5, r4               # r5 = algebraic row u
    mul r6, r4, r2
    add r6, r6, %topk_idx        # r6 = the token's target list
    mul r7, r5, r1
    add r7, r7, %xe              # r7 = multimem address of row u
    mul r8, r4, r1
    add r8, r8, %x
    dymultimem.st r7, r8, r1, r6, %topk
    mul r7, r5, %meta_bytes
    add r7, r7, %meta
    mul r8, r4, %meta_bytes
    add r8, r8, %msrc
    dymultimem.st r7, r8, %meta_bytes, r6, %topk
    add r12, r12, %topk
    add r4, r4, %ntb
    bra token
sent:
    fence                        # every target's GPU has placed and written the rows
    red.add %gpu, [%acct], r12   # acct word 0: pairs sent
    exit

# dysharp_scale: the GEMM epilogue's gate weighting - each expert output row y of local expert e
# becomes bf16(fp32(w x y)), w the router weight of the slot whose expert is e (found in the row's
# meta row, ids read 8 at a time). TB b takes rows b, b + ntb, ... of every local expert, up to
# its count. Counts the rows (acct word 1: received).
.kernel dysharp_scale
.param ye
.param meta
.param cnt
.param acct
.param topk
.param hidden
.param local_experts
.param cap
.param meta_bytes
.smem 28KB                   # acc [H] f32 (H <= 7168)
    shl r1, %hidden, 1           # r1 = R
    mov r2, %smem                # r2 = acc
    mul r3, %gpu, %local_experts # r3 = first local expert
    shl r13, %topk, 3            # r13 = bytes of the ids (the weights follow)
    mov r6, 0                    # r6 = rows scaled
    mov r7, 0                    # r7 = local expert
expert:
    bge r7, %local_experts, end
    shl r9, r7, 3
    add r9, r9, %cnt
    ld r24, [r9]                 # r24 = rows placed for it
    add r11, r7, r3              # r11 = its global id
    mov r8, %tb                  # r8 = row
row:
    bge r8, r24, next_expert
    mul r5, r7, %cap
    add r5, r5, r8               # r5 = flat row
    mul r10, r5, %meta_bytes
    add r10, r10, %meta          # r10 = its meta row
    mov r12, 0                   # r12 = slot j
group:
    shl r14, r12, 3
    add r14, r14, r10
    ld.v8 r16, [r14]             # ids j .. j + 7
    add r9, r12, 8
    blt r9, %topk, scan
    mov r9, %topk                # r9 = end of this group
scan:
    beq r16, r11, found
    next_slot_word r12, r9, scan
    blt r12, %topk, group
found:
    shl r14, r12, 2
    add r14, r14, r13
    add r14, r14, r10            # r14 = &w[j]
    mul r15, r5, r1
    add r15, r15, %ye            # r15 = the output row
    vzero.f32 r2, %hidden
    vaxpy.f32.bf16 r2, r15, r14, %hidden
    vcvt.bf16.f32 r15, r2, %hidden
    add r6, r6, 1
    add r8, r8, %ntb
    bra row
next_expert:
    add r7, r7, 1
    bra expert
end:
    red.add %gpu, [%acct+8], r6  # acct word 1: rows received (and scaled)
    exit

# dysharp_combine: TB b takes tokens t = b, b + ntb, ... of this GPU: comb[t] = the sum of its k
# experts' scaled output rows, by one dymultimem.ld_reduce.add.bf16 (the switch reads the row of
# algebraic row u at each target through its GPU's AL table, accumulates in fp32 in target-list
# order and returns one bf16 row). Completes at the fence; counts the targets reduced (acct word 3).
.kernel dysharp_combine
.param ye                    # multimem base of the output object (algebraic row u at + u R)
.param comb
.param topk_idx
.param acct
.param tokens
.param topk
.param hidden
    shl r1, %hidden, 1           # r1 = R
    shl r2, %topk, 3
    mov r4, %tb
    mov r12, 0                   # r12 = targets reduced
token:
    bge r4, %tokens, reduced
    mul r5, %gpu, %tokens
    add r5, r5, r4               # r5 = algebraic row u
    mul r6, r4, r2
    add r6, r6, %topk_idx        # r6 = the token's target list
    mul r7, r5, r1
    add r7, r7, %ye              # r7 = multimem address of row u
    mul r8, r4, r1
    add r8, r8, %comb
    dymultimem.ld_reduce.add.bf16 r8, r7, r1, r6, %topk
    add r12, r12, %topk
    add r4, r4, %ntb
    bra token
reduced:
    fence                        # the reduced rows are in local memory
    red.add %gpu, [%acct+24], r12    # acct word 3: pairs combined
    exit
