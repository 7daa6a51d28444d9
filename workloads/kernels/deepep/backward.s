# The backward pass of scheme `deepep` (workload.layer.passes: training; plan:
# moehub_arch/workloads/deepep_backward.py). DeepEP's autograd (and Megatron-Core's
# fused_a2a.py around it) runs the backward of `combine` as a `dispatch` of the output gradient
# with the forward's handle, and the backward of `dispatch` as a `combine` of the input gradients
# with the same handle: no layout, no count exchange, no host round trip in the backward. Stream 0
# after the forward (and the shared experts' backward, ../../common/moe_backward.s' neighbours in
# tp/ffn_backward.s):
#   deepep_cached_notify     (deepep.s) barrier, clean the dispatch rings' tail / head words,
#                            barrier: DeepEP's cached_notify_dispatch
#   deepep_dispatch_cached   the forward's senders (ring_send_tokens: dy once per (token, rank),
#                            through the same per-(channel, rank) rings, in the same order); the
#                            receivers put each row at the positions the forward's receivers
#                            recorded (dp_rec, DeepEP's cached handle), one copy per local slot:
#                            dy lands row for row where x landed
#   deepep_bwd_weight        expert side, per received token and local slot (Megatron-Core's
#                            unpermute backward with the probabilities): the router-weight
#                            gradient dw = <dy, y_j> (y_j: the forward's expert output, kept here)
#                            sent to the home GPU's dw[t][j] (4 bytes; DeepEP's combine carries
#                            the topk_weights gradient home), dO = bf16(w dy) in place, and the
#                            token's record for the gradient combine with weights 1.0
#   deepep_bwd_tiles         the grouped backward kernels' tile table from the forward's (dp_tiles)
#   grouped_bwd_act, grouped_dgrad, grouped_wgrad   (../common/moe_backward.s) over the packed
#                            expert-major rows: dX rows at dO's positions
#   deepep_cached_notify, deepep_combine   (deepep.s) the gradient combine: per received token
#                            the sum of its local slots' dX rows (weights 1.0), one bf16 row per
#                            (token, rank) home through the combine rings; the home reducers add
#                            the shared experts' dX first, then the ranks ascending, in fp32
# bacct words (layer_backward.py): 0 rows dispatched (the senders' pairs), 1 rows through the
# experts' backward; the gradient combine counts its pairs in dp_bacct word 3 (its acct).
.include "lib/ring.s"
.include "lib/slot_words.s"

# deepep_dispatch_cached: DeepEP's dispatch with a cached handle. TB < C * P: sender (deepep.s'
# ring_send_tokens); TB C * P + c * P + s: receiver of ring (c, s): for the i-th token of the ring
# it reads the forward's record i of that ring (%rec: t << 32 | position + 1 per slot) and copies
# the row to every local slot's position in %recv_x (put.sm), then publishes the head as the
# forward's receivers do. The metadata the senders push with each row is not read (the handle
# holds it); the rows received are counted by the experts' backward (bacct word 1).
.kernel deepep_dispatch_cached
.param x                     # [T][H] bf16: dy
.param meta
.param rank_slots
.param ring_x
.param ring_ctl              # tail [C][P], head [C][P], then the metadata ring slots
.param ntf
.param rec                   # the forward's records [C][P][Tc][12]
.param recv_x                # [rows][H] bf16: dy at the forward's row positions
.param acct
.param send_head
.param tokens
.param topk
.param row_bytes
.param channels
.param ring_rows
.param send_chunk
.param local_experts
.threads 768                 # DeepEP intranode.cu: kNumThreads = 768, __launch_bounds__(768, 1)
.regs 80
    ring_dispatch_roles          # senders send and exit; a receiver has its ring open
    mul r12, r6, r2
    mul r12, r12, 96
    add r12, r12, %rec           # r12 = the ring's records (the forward's)
rx_wait:
    ring_wait_tokens r24, r9, r10, r26, rx_done      # r26 = tail
rx_token:
    bge r24, r26, rx_release
    rem r27, r24, %ring_rows
    add r27, r27, r11            # r27 = the token's slot index
    mul r27, r27, r1
    add r27, r27, %ring_x        # r27 = its row
    mul r29, r24, 96
    add r29, r29, r12
    ld.v8 r16, [r29]             # slot j's record word in r16 after j shifts
    mov r31, 0                   # r31 = slot j
rx_choice:
    and r2, r16, 0xffffffff      # position + 1 (0: the slot's expert is on another rank)
    beq r2, 0, rx_next
    sub r2, r2, 1
    mul r2, r2, r1
    add r2, r2, %recv_x
    put.sm %gpu, r2, r27, r1     # the row to the slot's position (warp copy)
rx_next:
    next_slot_word r31, %topk, rx_choice
    add r24, r24, 1
    bra rx_token
rx_release:
    fence                        # rows copied out: the slots may be reused
    flag.set r7, [r13], r24      # head back to the sender
    bra rx_wait
rx_done:
    exit

# deepep_bwd_weight: per forward record (ring (c, s), token i < the tokens s sent on channel c;
# records dealt round-robin to the TBs) and local slot j (position p): dw = sum_h dy[h] y_j[h]
# in fp32 in increasing h (dy = the row at p in dye, y_j = the forward's expert output at p),
# staged in bdw and put to dw[t][j] on the home s; dO = bf16(w_j dy) stored over the row at p.
# The record is copied to brec with its weights set to 1.0 (the gradient combine sums the slots'
# dX rows unweighted; posted word stores). Ends with a fence: the dw puts have landed when the
# kernel ends.
.kernel deepep_bwd_weight
.param rec
.param ntf
.param dye                   # [rows][H] bf16: dy in, dO out
.param ye                    # [rows][H] bf16: the forward's expert outputs
.param brec                  # [C][P][Tc][12]: the records with weights 1.0
.param bdw                   # [C][P][Tc][k] f32: dw staging
.param dw                    # [T][k] f32 on every home GPU
.param tokens
.param topk
.param hidden
.param channels
.param local_experts
.smem 100KB                  # dy, products, w dy [H] fp32 + dO [H] bf16 + the dot (H <= 7168): two blocks per SM
    shl r10, %hidden, 1          # r10 = row bytes
    shl r11, %hidden, 2          # r11 = fp32 row bytes
    mov r0, %smem                # r0 = dy in fp32 (r16..r23 hold the slot words)
    add r2, %tokens, %channels
    sub r2, r2, 1
    div r2, r2, %channels        # r2 = Tc
    mul r3, %channels, %ngpu
    mul r3, r3, r2               # r3 = records
    add r25, %channels, %local_experts   # r25 = words per count row
    mov r1, %tb                  # r1 = record
record:
    bge r1, r3, end
    div r4, r1, r2               # r4 = ring c * P + s
    rem r5, r1, r2               # r5 = token i of the ring
    div r6, r4, %ngpu            # r6 = c
    rem r7, r4, %ngpu            # r7 = s (the tokens' home)
    mul r8, r25, r7
    add r8, r8, r6
    shl r8, r8, 3
    add r8, r8, %ntf
    ld r8, [r8]                  # r8 = tokens s sent on channel c
    bge r5, r8, next_record
    add r4, r0, r11              # r4 = products
    add r5, r4, r11              # r5 = w dy (fp32)
    add r6, r5, r11              # r6 = dO (bf16)
    add r8, r6, r10              # r8 = the dot product
    mul r9, r1, 96
    add r26, r9, %rec            # r26 = the record
    add r27, r9, %brec           # r27 = its copy
    ld.v8 r16, [r26]             # slot j's word in r16 after j shifts
    st [r27], r16                # the position words into the copy (posted stores) ...
    st [r27+8], r17
    st [r27+16], r18
    st [r27+24], r19
    st [r27+32], r20
    st [r27+40], r21
    st [r27+48], r22
    st [r27+56], r23
    mov r9, 0x3f8000003f800000   # ... and two fp32 1.0 per word for its weights
    st [r27+64], r9
    st [r27+72], r9
    st [r27+80], r9
    st [r27+88], r9
    shr r28, r16, 32             # r28 = token t on s
    mul r28, r28, %topk
    mov r31, 0                   # r31 = slot j
slot:
    shl r12, r31, 2
    and r29, r16, 0xffffffff
    beq r29, 0, slot_next
    sub r29, r29, 1
    mul r29, r29, r10            # r29 = byte offset of the slot's row
    add r30, r29, %dye           # r30 = dy row
    add r29, r29, %ye            # r29 = y_j row
    vcvt.f32.bf16 r0, r30, %hidden
    dot_row_bf16 r8, r0, r29, r4, %hidden
    mul r14, r1, %topk
    add r14, r14, r31
    shl r14, r14, 2
    add r14, r14, %bdw
    copy r14, r8, 4              # dw staged
    add r15, r28, r31
    shl r15, r15, 2
    add r15, r15, %dw
    put.sm r7, r15, r14, 4       # dw[t][j] on the home
    add r13, r12, r26
    add r13, r13, 64             # r13 = &w_j in the forward's record
    vzero.f32 r5, %hidden
    vaxpy.f32 r5, r0, r13, %hidden       # w dy from dy in fp32 (exact: bf16 -> fp32)
    vcvt.bf16.f32 r6, r5, %hidden
    copy r30, r6, r10            # dO over dy
slot_next:
    next_slot_word r31, %topk, slot
next_record:
    add r1, r1, %ntb
    bra record
end:
    fence                        # the dw puts have landed
    exit

# deepep_bwd_tiles (one TB): the grouped backward kernels' table (../common/moe_backward.s: word 0
# tiles; entry t at table + 64 (t + 1): local expert, rows, X rows, dG rows, dO rows, first) from
# the forward's GEMM tile table (deepep.s dp_tiles [tiles][4]: first row, rows, local expert,
# first; dp_info word 1: tiles): the backward's rows sit at the forward's row positions.
.kernel deepep_bwd_tiles
.param tiles
.param info
.param table
.param xe                    # [rows][H] bf16: the forward's received rows
.param dg                    # [rows][I] bf16
.param dye                   # [rows][H] bf16
.param hidden
.param ffn
    shl r20, %hidden, 1          # r20 = H row bytes
    shl r21, %ffn, 1             # r21 = I row bytes
    ld r9, [%info+8]             # r9 = tiles
    mov r1, 0
tile:
    bge r1, r9, listed
    shl r2, r1, 5
    add r2, r2, %tiles
    ld.v8 r12, [r2]              # r12 first row, r13 rows, r14 expert, r15 first
    add r3, r1, 1
    shl r3, r3, 6
    add r3, r3, %table
    st [r3], r14
    st [r3+8], r13
    mul r4, r12, r20
    add r5, r4, %xe
    st [r3+16], r5
    mul r5, r12, r21
    add r5, r5, %dg
    st [r3+24], r5
    add r5, r4, %dye
    st [r3+32], r5
    st [r3+40], r15
    add r1, r1, 1
    bra tile
listed:
    st [%table], r9
    exit
