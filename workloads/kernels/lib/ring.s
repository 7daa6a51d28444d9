# Kernel library: the receiving side of DeepEP-style ring buffers (deepep_dispatch's receivers,
# overlap_receive). Source s pushes the tokens of channel c into ring (c, s) on this rank: row
# slots, 96-byte metadata slots (words 0..7 expert id | t << 32 per top-k slot, words 8..11 the
# router weights), a tail word it raises after a fence, and a head word on the source that the
# receiver raises once it has copied slots out (layouts in ../deepep/deepep.s, "dp_ring_ctl").
#
# Interfaces. Arguments are operands; the names in the descriptions are registers the macro
# writes. The macros also read these kernel parameters by name: %ntf (the count rows received in
# notify), %ring_ctl, %ring_rows, %channels and %local_experts.
#
#   ring_receiver_open ring, table_bytes, channel, source, count, tail, first_slot, head, addr, consumed
#       for ring index `ring` = c * P + s: channel = c, source = s, count = tokens s sends on
#       channel c, tail = &tail[c][s] (here), first_slot = the ring's first slot index,
#       head = &head[c][me] (on the source), consumed = 0; table_bytes = bytes of one [C][P]
#       word table. Writes channel, source, count, tail, first_slot, head, addr, consumed.
#   ring_wait_tokens consumed, count, tail, avail, done
#       branch to `done` once `consumed` == `count`; else wait until the tail passes `consumed`
#       (acquire: the sender fenced before raising it) and read it into avail.
#   ring_next_token consumed, avail, release, first_slot, meta_slots, slot, meta
#       branch to `release` once `consumed` == `avail` (every token up to the tail is done); else
#       slot = the slot index of token `consumed`, meta = its metadata slot (meta_slots: the
#       metadata ring base), and r16..r23 = its eight id words (slot j's in r16 after j shifts,
#       see slot_words.s). Writes slot, meta, r16..r23.
#   ring_receive_to_experts ring
#       the whole receiver of ring index `ring` after ring_receiver_open (DeepEP's NVL receivers):
#       for every token of the ring, in order, each slot whose expert is on this GPU takes a row
#       position with atom.add on the expert's cursor (%cursor) and the row is copied there
#       (%recv_x, put.sm); the token's record (%rec: [ring][Tc][12] words, t << 32 | position + 1
#       per slot, then the weights) is written for the combine; after each batch it fences and
#       publishes the tokens consumed to the head word; at the end it adds the rows received to
#       acct word 1. Reads r1 = dispatched row bytes, r2 = Tc, r4 = metadata ring slots, r7 = the
#       GPU that writes the ring and r13 = the head word there (ring_receiver_open's source and
#       &head[c][me]; a forwarder's where the ring is written by one), r9, r10, r11, r24 from
#       ring_receiver_open. Writes r2, r3, r8, r12, r14..r31.

.macro ring_receiver_open ring, table_bytes, channel, source, count, tail, first_slot, head, addr, consumed
    div \channel, \ring, %ngpu       # channel c
    rem \source, \ring, %ngpu        # source s
    add \addr, %channels, %local_experts
    mul \addr, \addr, \source
    add \addr, \addr, \channel
    shl \addr, \addr, 3
    add \addr, \addr, %ntf
    ld \count, [\addr]               # tokens s sends on channel c
    shl \tail, \ring, 3
    add \tail, \tail, %ring_ctl      # &tail[c][s]
    mul \first_slot, \ring, %ring_rows
    mul \head, \channel, %ngpu
    add \head, \head, %gpu
    shl \head, \head, 3
    add \head, \head, \table_bytes
    add \head, \head, %ring_ctl      # &head[c][me] (on the source)
    mov \consumed, 0
.endm

.macro ring_wait_tokens consumed, count, tail, avail, done
    bge \consumed, \count, \done
    wait.gt [\tail], \consumed       # acquire: the sender fenced before moving the tail
    ld \avail, [\tail]
.endm

.macro ring_next_token consumed, avail, release, first_slot, meta_slots, slot, meta
    bge \consumed, \avail, \release
    rem \slot, \consumed, %ring_rows
    add \slot, \slot, \first_slot
    mul \meta, \slot, 96
    add \meta, \meta, \meta_slots
    ld.v8 r16, [\meta]               # words id | t << 32 (slot j's in r16 after j shifts)
.endm

.macro ring_receive_to_experts ring
    mul r12, \ring, r2
    mul r12, r12, 96
    add r12, r12, %rec           # r12 = this receiver's records
    mul r14, %gpu, %local_experts   # r14 = first local expert (global id)
    shl r15, %topk, 2            # r15 = weight bytes
    mov r25, 0                   # r25 = rows received
rx_wait_\@:
    ring_wait_tokens r24, r9, r10, r26, rx_done_\@   # r26 = tail
rx_token_\@:
    ring_next_token r24, r26, rx_release_\@, r11, r4, r27, r28    # r27 = slot index, r28 = its metadata
    mul r29, r24, 96
    add r29, r29, r12            # r29 = the token's record
    add r2, r28, 64
    add r3, r29, 64
    put.sm %gpu, r3, r2, r15     # weights into the record (warp copy)
    mul r27, r27, r1
    add r27, r27, %ring_x        # r27 = the slot's row
    shr r30, r16, 32
    shl r30, r30, 32             # r30 = t << 32
    mov r31, 0                   # r31 = slot j
rx_choice_\@:
    sub r2, r16, r30
    sub r2, r2, r14              # r2 = local expert of slot j
    mov r8, r30                  # record word of a slot that is not here
    blt r2, 0, rx_store_\@
    bge r2, %local_experts, rx_store_\@
    shl r2, r2, 3
    add r2, r2, %cursor
    atom.add r3, %gpu, [r2], 1   # r3 = the row's position (expert-major)
    mul r2, r3, r1
    add r2, r2, %recv_x
    put.sm %gpu, r2, r27, r1     # the row into the expert's region (warp copy)
    add r3, r3, 1
    or r8, r30, r3               # record word: t << 32 | position + 1
    add r25, r25, 1
rx_store_\@:
    shl r2, r31, 3
    add r2, r2, r29
    st [r2], r8
    next_slot_word r31, %topk, rx_choice_\@
    add r24, r24, 1
    bra rx_token_\@
rx_release_\@:
    fence                        # rows and weights copied out: the slots may be reused
    flag.set r7, [r13], r24      # head back to the sender
    bra rx_wait_\@
rx_done_\@:
    red.add %gpu, [%acct+8], r25 # acct 1: pairs received
.endm

#   ring_send_tokens (DeepEP's NVL senders: deepep_dispatch and deepep_dispatch_cached): thread
#   block %tb < C * P is the sender of channel c = %tb / P to rank r = %tb % P: walks the channel's
#   tokens in order; a token with any slot on r (dp_rank_slots nibble) gets the next position i of
#   ring (c, me) on r (stored in %send_head[t][r], -1 if it does not go there), its row (%x,
#   r1 bytes) and its 96 metadata bytes (%meta) copied into slot i % R there (put.sm), the tail
#   published (fence, flag.set) every min(send_chunk, max(1, R/2)) tokens and before waiting on a
#   full ring (the receiver raises the head in %ring_ctl's head table here); at the end adds the
#   pairs it sent to %acct word 0 and exits. Reads r1 = row bytes, r2 = Tc, r3 = bytes of one
#   [C][P] table, r4 = metadata ring slots and the kernel parameters %x, %meta, %rank_slots,
#   %ring_x, %ring_ctl, %send_head, %acct, %tokens, %channels, %ring_rows, %send_chunk.
.macro ring_send_tokens
    div r6, %tb, %ngpu           # r6 = channel c
    rem r7, %tb, %ngpu           # r7 = destination r
    mul r14, r6, r2              # r14 = token (from the channel's first)
    add r15, r14, r2
    min r15, r15, %tokens        # r15 = end of the channel
    shr r8, %ring_rows, 1
    max r8, r8, 1
    min r8, r8, %send_chunk      # r8 = tokens per published chunk
    mul r11, r6, %ngpu
    add r11, r11, %gpu           # r11 = ring (c, me): its index on the destination
    mul r12, r11, %ring_rows     # r12 = its first slot
    shl r13, r11, 3
    add r13, r13, %ring_ctl      # r13 = &tail[c][me] on the destination
    shl r24, %tb, 3
    add r24, r24, r3
    add r24, r24, %ring_ctl      # r24 = &head[c][r] here (written by receiver r)
    add r20, %tokens, 15
    shr r20, r20, 4              # r20 = words per rank in dp_rank_slots
    mul r20, r20, r7
    shl r20, r20, 3
    add r20, r20, %rank_slots    # r20 = rank r's slot counts
    mov r9, 0                    # r9 = tokens sent since the last publish
    mov r10, 0                   # r10 = pairs sent
    mov r21, 0                   # r21 = tokens sent (tail)
    mov r22, 0                   # r22 = tail published
    mov r23, 0                   # r23 = head last seen
    mov r25, -1                  # r25 = dp_rank_slots word loaded_\@ in r19
send_token_\@:
    bge r14, r15, flush_end_\@
    shr r16, r14, 4
    beq r16, r25, loaded_\@
    mov r25, r16
    shl r16, r16, 3
    add r16, r16, r20
    ld r19, [r16]                # slot counts of 16 tokens (4 bits each)
loaded_\@:
    and r16, r14, 15
    shl r16, r16, 2
    shr r16, r19, r16
    and r16, r16, 15             # r16 = the token's slots on rank r
    mul r17, r14, %ngpu
    add r17, r17, r7
    shl r17, r17, 3
    add r17, r17, %send_head     # r17 = &send_head[t][r]
    beq r16, 0, not_sent_\@
    st [r17], r21                # the token's position in ring (c, me) on r: combine finds it there
    add r10, r10, r16
    sub r17, r21, r23
    blt r17, %ring_rows, room_\@
    beq r21, r22, full_wait_\@      # ring full: publish first (the receiver may wait for it)
    fence
    flag.set r7, [r13], r21
    mov r22, r21
    mov r9, 0
full_wait_\@:
    sub r17, r21, %ring_rows
    wait.gt [r24], r17           # room_\@ for one more token
    ld r23, [r24]
room_\@:
    rem r17, r21, %ring_rows
    add r17, r17, r12            # r17 = slot index in the ring arrays
    mul r18, r17, r1
    add r18, r18, %ring_x
    mul r16, r14, r1
    add r16, r16, %x
    put.sm r7, r18, r16, r1      # the token row (warp copy: loads, then stores to the peer)
    mul r18, r17, 96
    add r18, r18, r4
    shl r16, r14, 7
    add r16, r16, %meta
    put.sm r7, r18, r16, 96      # its metadata (src_idx, topk_idx, topk_weights)
    add r21, r21, 1
    add r9, r9, 1
    blt r9, r8, next_token_\@
    fence                        # a chunk is complete: publish it
    flag.set r7, [r13], r21
    mov r22, r21
    mov r9, 0
    bra next_token_\@
not_sent_\@:
    st [r17], -1                 # the token does not go to rank r
next_token_\@:
    add r14, r14, 1
    bra send_token_\@
flush_end_\@:
    beq r21, r22, sent_all_\@
    fence
    flag.set r7, [r13], r21
sent_all_\@:
    red.add %gpu, [%acct], r10   # acct 0: pairs sent
    exit
.endm

#   ring_dispatch_roles (deepep_dispatch, deepep_dispatch_cached: DeepEP's dispatch blocks): sets
#   r1 = %row_bytes, r2 = Tc, r3 = bytes of one [C][P] table, r4 = the metadata ring slots in
#   %ring_ctl; a thread block %tb < C * P runs ring_send_tokens (and exits); any other is the
#   receiver of ring r6 = %tb - C * P, opened with ring_receiver_open (r5 channel, r7 source,
#   r9 tokens to receive, r10 &tail, r11 first slot, r13 &head on the source, r24 = 0 consumed).
.macro ring_dispatch_roles
    mov r1, %row_bytes           # r1 = dispatched row bytes
    add r2, %tokens, %channels
    sub r2, r2, 1
    div r2, r2, %channels        # r2 = Tc
    mul r3, %channels, %ngpu
    shl r3, r3, 3                # r3 = bytes of one [C][P] table
    shl r4, r3, 1
    add r4, r4, %ring_ctl        # r4 = metadata ring slots
    mul r5, %channels, %ngpu     # r5 = C*P
    bge %tb, r5, receiver_\@
    ring_send_tokens
receiver_\@:
    sub r6, %tb, r5              # r6 = ring index c*P + s
    ring_receiver_open r6, r3, r5, r7, r9, r10, r11, r13, r8, r24    # r24 = tokens consumed
.endm
