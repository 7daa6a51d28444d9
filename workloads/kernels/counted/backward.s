# The backward pass of scheme `counted` (workload.layer.passes: training; plan:
# moehub_arch/workloads/schemes/counted.py): the forward's fixed slots and packed ranges are the
# handle (as DeepEP's low-latency handle is), the counted writes carry the gradient rows both
# ways. Stream 0 after the forward (../counted/counted.s):
#   counted_bwd_yhome    home: each pair's expert output (cw_comb[e][slot]) into yhome[t*k + j],
#                        the combine's rows in pair order for moe_combine_bwd
#   moe_combine_bwd      (../common/moe_backward.s) dw, dO = bf16(w dy) in slot order (cw_dsend)
#   the shared experts' backward, then cw_bacct word 5 = 1 (their dX is written)
#   counted_bwd_dispatch senders: every pair's dO row put.counted into the slot its x row took at
#                        the expert (cw_slot: no slot taken, no count sent - the forward's counts
#                        and ranges serve); receivers (le, s): wait until cw_brx[le][s] holds the
#                        forward's rows x rb bytes, then copy the slots to the forward's packed
#                        positions (cw_range) of the expert-major dO buffer: dO beside X
#   grouped_tiles, grouped_bwd_act, grouped_dgrad, grouped_wgrad (the shared backward kernels
#                        over the packed rows; the forward's activations he)
#   counted_combine      (counted.s) the dX rows home into cw_bcomb, counted in cw_bback
#   counted_reduce       (counted.s) with weights 1.0: dx = sum_s dXs + sum_j dX_j, fp32 (cw_bdx)
.include "lib/combine.s"
.include "lib/slot_words.s"
.include "lib/slot_alltoall.s"

# counted_bwd_yhome: TB b takes tokens b, b + ntb, ...: yhome[t*k + j] = comb[e_j][slot(t, j)].
.kernel counted_bwd_yhome
.param comb                  # [E][T][rb] bf16: the forward's returned expert outputs
.param slot_map
.param topk_idx
.param x                     # (slot_token_head's row base; unused)
.param yhome                 # [T*k][rb] bf16
.param tokens
.param topk
.param hidden
    shl r1, %hidden, 1           # r1 = rb
    shl r2, %topk, 3
    mov r5, %tb                  # r5 = token
token:
    bge r5, %tokens, end
    slot_token_head              # r16.. its experts, r7 = t*k, r9 = slot j
slot:
    add r6, r7, r9
    shl r10, r6, 3
    add r10, r10, %slot_map
    ld r10, [r10]                # the slot the row took at its expert
    mul r8, r16, %tokens
    add r8, r8, r10
    mul r8, r8, r1
    add r8, r8, %comb
    mul r10, r6, r1
    add r10, r10, %yhome
    copy r10, r8, r1
    next_slot_word r9, %topk, slot
    add r5, r5, %ntb
    bra token
end:
    exit

# counted_bwd_dispatch: grid send_tbs + El*P thread blocks.
#   TB b < send_tbs (senders): tokens b, b + send_tbs, ...; slot j's dO row (dsend[t*k + j]) goes
#     with one put.counted to the slot cw_slot[t*k + j] of (le, me) at its expert, counted in
#     brx[le][me] there.
#   TB send_tbs + le*P + s (receivers): (le, s)'s forward range (first << 32 | rows): waits until
#     brx[le][s] holds rows x rb bytes, copies the slots to packed rows first.. of dye (one warp
#     copy).
.kernel counted_bwd_dispatch
.param dsend                 # [T*k][rb] bf16: dO rows in slot order
.param topk_idx
.param x                     # (slot_token_head's row base; unused)
.param slot_map
.param recv                  # [El][P][T][rb]: the forward's receive slots, reused
.param brx                   # [El][P] byte counters of the gradient rows
.param range
.param dye                   # [El][P*T][rb] bf16
.param tokens
.param topk
.param hidden
.param local_experts
.param send_tbs
    shl r1, %hidden, 1           # r1 = rb
    shl r2, %topk, 3
    bge %tb, %send_tbs, receiver
    mov r5, %tb                  # r5 = token
token:
    bge r5, %tokens, end
    slot_token_head              # r16.. its experts, r7 = t*k, r9 = slot j
slot:
    div r11, r16, %local_experts # r11 = destination GPU
    mul r12, r11, %local_experts
    sub r12, r16, r12            # r12 = local expert there
    add r13, r7, r9
    mul r8, r13, r1
    add r8, r8, %dsend           # r8 = the pair's dO row
    shl r13, r13, 3
    add r13, r13, %slot_map
    ld r14, [r13]                # r14 = the slot its x row took
    mul r15, r12, %ngpu
    add r15, r15, %gpu           # r15 = le*P + me
    mul r13, r15, %tokens
    add r13, r13, r14
    mul r13, r13, r1
    add r13, r13, %recv
    shl r15, r15, 3
    add r15, r15, %brx
    put.counted r11, r13, r8, r1, r15
    next_slot_word r9, %topk, slot
    add r5, r5, %send_tbs
    bra token
receiver:
    sub r3, %tb, %send_tbs       # r3 = le*P + s
    shl r4, r3, 3
    add r5, r4, %range
    ld r5, [r5]
    shr r9, r5, 32               # r9 = first packed position
    and r6, r5, 0xffffffff       # r6 = rows
    beq r6, 0, end
    mul r7, r6, r1
    add r8, r4, %brx
    wait.count [r8], r7          # every gradient row of (le, s) has landed
    div r10, r3, %ngpu           # r10 = le
    mul r11, r10, %ngpu
    mul r11, r11, %tokens
    add r11, r11, r9
    mul r11, r11, r1
    add r11, r11, %dye           # the packed rows
    mul r12, r3, %tokens
    mul r12, r12, r1
    add r12, r12, %recv
    put.sm %gpu, r11, r12, r7    # pack them (warp copy)
    fence
end:
    exit
