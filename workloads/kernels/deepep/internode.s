# MoE layer, scheme `deepep` on a multi-node system (workload.layer.deepep.internode: forward, the
# default): DeepEP's *internode* normal kernels (github.com/deepseek-ai/DeepEP
# csrc/kernels/internode.cu). Launch plan: moehub_arch/workloads/schemes/deepep.py.
#
# Two hops instead of one. A token goes over RDMA once to every node holding any of its experts,
# to the GPU with the sender's own local rank there (so every RDMA transfer stays on one rail);
# that GPU forwards it over NVLink to each GPU of its node holding one of the token's experts.
# Combine is the mirror image: each expert GPU sends its bf16 partial row to that forwarder, the
# forwarder sums the partials of its node (fp32, local ranks ascending) and sends one bf16 row per
# node home over RDMA; home sums the node rows (nodes ascending) with the shared experts.
#
# Layout and notify are deepep.s's kernels unchanged (every rank's counts reach every rank; the
# NVL receivers expect, per (channel, origin rank), the tokens the origin sends to them).
#
# Shapes: as deepep.s, plus L = %node_gpus GPUs per node, N = P / L nodes; GPU g = node g / L,
# local rank g % L; me = (n0, l0). C channels, Tc tokens per channel, R = NVL ring rows,
# Rr = RDMA ring rows, db = dispatched row bytes, rb = bf16 row bytes.
#
# Buffers added to deepep.s's (per GPU, symmetric):
#   dp_rdma_ctl  ctl   tail [C][N]: tail[c][m] (on a forwarder: tokens origin (m, l0) put into
#                      its RDMA ring (c, m); bit 40 set once that sender is finished, CLOSED);
#                      head [C][N][L]: head[c][n][j] (on an origin: tokens forwarder j of GPU
#                      (n, l0) consumed of ring (c, n0) there); then the metadata slots
#                      [C][N][Rr][16] (the token's whole dp_meta row: ids, weights, rank mask),
#                      then the send buffer's metadata rows [C][N][Rr][16] (below), then pos
#                      [T][N]: on an origin, word t*N + n = the position of token t in the stream
#                      to node n (the dispatch's RDMA sender writes it, the home reduction reads
#                      the node's row there: DeepEP's send_rdma_head / combined_rdma_head)
#   dp_rdma_x    data  [C][N][Rr][db]  RDMA ring row slots
#   dp_rdma_send data  [C][N][Rr][db]  the send buffer: rows staged for ring (c, n0) on node n, at
#                      the slots they take there (DeepEP's rdma_channel_data.send_buffer); their
#                      metadata rows are staged the same way at the end of dp_rdma_ctl
#   dp_fwd_rec   ctl   [C][N][Tc][16]  on a forwarder, per token of RDMA ring (c, m) in order:
#                      word j = its position + 1 in the NVL stream to local rank j (0: none),
#                      word 8 = the token's index t on its origin
#   dp_fwd_cnt   ctl   [C][N]  tokens the forwarder consumed of RDMA ring (c, m)
#   dp_ring_ctl, dp_ring_x  deepep.s's NVL rings, ring (c, s) indexed by the token's origin s; the
#                      head word for ring (c, s) on receiver (n0, j) lives on the forwarder
#                      (n0, s % L) at head[c][(s / L) * L + j]
#   dp_fwd_comb  data  [N][T][L][rb]  on a forwarder: the bf16 partial of origin node m, token t,
#                      from local rank j
#   dp_comb_ctl  ctl   [C][P]  on a forwarder: word c*P + m*L + j = tokens local rank j has sent
#                      for origin (m, l0) on channel c (raised after a fence)
#   dp_combine_scratch data  per NVL sender stream of the combine: 8 bf16 staging rows
#   dp_fwd_send  data  [C][N][Tc][rb]  on a forwarder: the combine's send buffer, the summed row
#                      of position p of stream (c, m) staged at row p (DeepEP: the RDMA channel's
#                      send_buffer(dst_rdma_rank))
#   dp_fwd_chunks ctl  [C][N][ceil(Tc / K)]  on a forwarder: the forwarder warps of stream
#                      (c, m) that have staged their tokens of chunk k (the chunk's barrier)
#   dp_comb      data  [C][N][Tc][rb]  at home: stream (c, n) from node n, the row of position p
#                      at row p (DeepEP: the RDMA channel's recv_buffer(src_rdma_rank))

.include "lib/combine.s"
.include "lib/slot_words.s"
.include "lib/ring.s"

# rdma_chunk_put: the r9 tokens staged last (slots r21 - r9 .. r21 - 1 of the ring whose first
# slot is r12 on the destination; staged at the same slots of node r10's send buffers, whose
# bases r27 (rows) and r28 (metadata) the sender shifted to that node's part) go to GPU r10 as
# one RDMA write of their rows and one of their 128 B metadata rows (NIC work requests), as
# DeepEP's RDMA sender coordinator issues a chunk (internode.cu: nvshmemi_ibgda_put_nbi_thread of
# num_bytes_per_rdma_token x tokens; its token record holds both, contiguous: the metadata here is
# a second write because the forwarder reads it with loads, and timing mode backs only
# control-region buffers with storage). For the own node (r10 = this GPU) the tokens were staged
# straight into the ring: nothing to send. Reads r1 (row bytes), r5 (metadata slots on the
# destination), r28 (the staged metadata rows). Writes r20, r24, r25, r26.
.macro rdma_chunk_put
    beq r10, %gpu, own_\@
    sub r24, r21, r9
    rem r24, r24, %rdma_ring_rows
    add r24, r24, r12            # the chunk's first slot
    mul r25, r24, r1
    add r26, r25, r27
    add r25, r25, %rdma_x
    mul r20, r9, r1
    put r10, r25, r26, r20       # the chunk's rows: one RDMA write
    shl r25, r24, 7
    add r26, r25, r28
    add r25, r25, r5
    shl r20, r9, 7
    put r10, r25, r26, r20       # their metadata rows: one RDMA write
own_\@:
.endm

# rdma_chunk_publish: raise the tail on GPU r10 to r21 and reset the chunk count r9. To another
# node the tail update follows the chunk's writes on the same queue pair, which executes them in
# order (nic.py: nic_in_order), so no fence: DeepEP's coordinator posts its
# nvshmemi_ibgda_amo_nonfetch_add right behind the put on the channel's QP (internode.cu at
# 3b1045d). The own node's chunk was staged straight into the ring by this GPU's copies: a fence
# (DeepEP: memory_fence) makes them visible first.
.macro rdma_chunk_publish
    bne r10, %gpu, ordered_\@
    fence
ordered_\@:
    flag.set r10, [r13], r21
    mov r22, r21
    mov r9, 0
.endm

# ------------------------------------------------------------------------------------------------
# deepep_dispatch_internode: grid 2*C blocks of G = N + P warp groups, one block per SM as
# DeepEP's channel blocks: block 2c is channel c's forwarder SM, block 2c+1 its sender SM (DeepEP
# pairs an RDMA-and-NVL forwarder SM with a sender/receiver SM per channel). %tb = block * G + g.
#   forwarder SM, g < P: forwarder (c, m = g / L, j = g % L): takes the tokens of RDMA ring (c, m)
#     (from origin s = (m, l0)) in order and pushes those with an expert on rank (n0, j) into NVL
#     ring (c, s) there with warp copies; publishes the NVL tail every send_chunk tokens and when
#     it runs dry, and the RDMA head back to the origin once a chunk's worth of tokens is consumed
#     (and at the end), as DeepEP's forwarder coordinator updates the remote head only when it has
#     advanced by num_max_rdma_chunked_send_tokens. DeepEP gives a
#     forwarder warp one NVL destination and lets it poll the RDMA sources in turn; here each
#     (source node, destination) pair is its own warp group (the same data flow, no polling).
#     g >= P: idle (exits).
#   sender SM, g < N: RDMA sender (c, n): the channel's tokens with an expert on node n are
#     copied, row and 128 B metadata row, into the send buffers at the slots they take in RDMA
#     ring (c, n0) on GPU (n, l0); every rdma_send_chunk tokens (and at the ring's end) the chunk
#     goes there as one GPU-initiated RDMA write of its rows and one of its metadata (put: the
#     NIC's DMA, IBGDA), as DeepEP's sender warps and RDMA coordinator send a chunk of records in
#     one write; then the tail is published behind them on the same queue pair, CLOSED at the
#     end. For the own node the records go straight into the ring (DeepEP: only a fence). A
#     full ring waits for every forwarder of the destination to have consumed the oldest slot.
#   sender SM, g >= N: NVL receiver of ring (c, s = g - N): deepep.s's receiver, publishing its
#     head to the forwarder.
.kernel deepep_dispatch_internode
.param x
.param meta
.param ring_x
.param ring_ctl
.param rdma_x
.param rdma_send
.param rdma_ctl
.param fwd_rec
.param fwd_cnt
.param ntf
.param rec
.param recv_x
.param cursor
.param acct
.param tokens
.param topk
.param row_bytes
.param channels
.param ring_rows
.param send_chunk
.param rdma_ring_rows
.param rdma_chunk
.param local_experts
.param node_gpus
.threads 512                 # DeepEP internode.cu dispatch: (kNumDispatchRDMASenderWarps 7 + 1 + NUM_MAX_NVL_PEERS 8) warps
.regs 128                    # __launch_bounds__(512, 1): 65536 / 512 registers per thread
    mov r1, %row_bytes           # r1 = db
    add r2, %tokens, %channels
    sub r2, r2, 1
    div r2, r2, %channels        # r2 = Tc
    div r30, %ngpu, %node_gpus   # r30 = N
    add r31, r30, %ngpu          # r31 = G
    div r5, %tb, r31             # r5 = block
    rem r6, %tb, r31             # r6 = g
    shr r7, r5, 1                # r7 = channel c
    and r5, r5, 1
    bne r5, 0, sender_sm
    blt r6, %ngpu, forwarder
    exit
sender_sm:
    blt r6, r30, rdma_sender
    # ---- NVL receiver of ring (c, s) --------------------------------------------------------------
    sub r6, r6, r30              # r6 = s
    mul r3, %channels, %ngpu
    shl r3, r3, 3                # r3 = bytes of one [C][P] table
    shl r4, r3, 1
    add r4, r4, %ring_ctl        # r4 = NVL metadata ring slots
    mul r5, r7, %ngpu
    add r6, r6, r5               # r6 = ring index c*P + s
    ring_receiver_open r6, r3, r5, r7, r9, r10, r11, r13, r8, r24
    rem r8, r7, %node_gpus       # the head goes to the forwarder (n0, s % L) ...
    div r12, %gpu, %node_gpus
    mul r12, r12, %node_gpus
    div r14, r7, %node_gpus
    mul r14, r14, %node_gpus     # ... at head[c][(s / L) * L + l0]
    add r7, r12, r8              # r7 = forwarder GPU
    rem r8, %gpu, %node_gpus
    add r14, r14, r8
    mul r8, r5, %ngpu
    add r14, r14, r8
    shl r14, r14, 3
    add r14, r14, r3
    add r13, r14, %ring_ctl      # r13 = &head[c][m*L + l0] on the forwarder
    ring_receive_to_experts r6
    exit

    # ---- RDMA sender of channel c to node n ---------------------------------------------------------
rdma_sender:
    # r6 = n, r7 = c, r30 = N
    div r8, %gpu, %node_gpus     # r8 = n0
    rem r9, %gpu, %node_gpus     # r9 = l0
    mul r10, r6, %node_gpus
    add r10, r10, r9             # r10 = destination GPU (n, l0)
    mul r11, r7, r30
    add r11, r11, r8             # r11 = ring (c, n0): its index on the destination
    shl r13, r11, 3
    add r13, r13, %rdma_ctl      # r13 = &tail[c][n0] there
    mul r12, r11, %rdma_ring_rows   # r12 = its first slot
    mul r3, %channels, r30
    shl r3, r3, 3
    add r3, r3, %rdma_ctl        # r3 = head table [C][N][L]
    mul r4, r7, r30
    add r4, r4, r6
    mul r4, r4, %node_gpus
    shl r4, r4, 3
    add r4, r4, r3               # r4 = &head[c][n][0] here (L words, one per forwarder)
    mul r5, %channels, %ngpu
    shl r5, r5, 3
    add r5, r5, r3               # r5 = RDMA metadata slots (on every GPU)
    mov r27, %rdma_send          # r27, r28 = where rows and metadata are staged: the send
    mul r28, %channels, r30      #   buffers (the metadata's behind the RDMA metadata slots), ...
    mul r28, r28, %rdma_ring_rows
    shl r28, r28, 7
    add r0, r28, r28
    add r0, r0, r5               # r0 = pos[0][0] (behind the staged metadata rows)
    add r28, r28, r5
    sub r29, r6, r8              # ... in destination node n's part of them (DeepEP's
    mul r29, r29, %rdma_ring_rows   #   send_buffer(dst_rdma_rank)): slot (c, n0) of ring
    mul r3, r29, r1              #   (c, n0) is staged (n - n0) rings further, at (c, n), so
    add r27, r27, r3             #   senders to different nodes never share a staging slot
    mul r3, r29, 128
    add r28, r28, r3
    bne r10, %gpu, rs_staging
    mov r27, %rdma_x             # ... for the own node its receive ring (nothing to send)
    mov r28, r5
rs_staging:
    mul r14, r7, r2              # r14 = token
    add r15, r14, r2
    min r15, r15, %tokens        # r15 = end of the channel
    shr r16, %rdma_ring_rows, 1
    max r16, r16, 1
    min r16, r16, %rdma_chunk    # r16 = tokens per RDMA write (chunk)
    mul r17, r6, %node_gpus      # r17 = first rank of node n (its bits in the rank mask)
    shl r18, 1, %node_gpus
    sub r18, r18, 1              # r18 = L one bits
    mov r9, 0                    # r9 = tokens staged since the last write
    mov r21, 0                   # r21 = tokens staged (tail)
    mov r22, 0                   # r22 = tail published
    mov r23, 0                   # r23 = oldest slot every forwarder has consumed (lower bound)
rs_token:
    bge r14, r15, rs_end
    shl r19, r14, 7
    add r19, r19, %meta          # r19 = dp_meta[t]
    ld r20, [r19+96]             # rank mask
    shr r20, r20, r17
    and r20, r20, r18
    beq r20, 0, rs_next          # no expert of the token on node n
    sub r20, r21, r23
    blt r20, %rdma_ring_rows, rs_room
    beq r9, 0, rs_wait           # ring full: send and publish first (the forwarders may wait)
    rdma_chunk_put
    rdma_chunk_publish
rs_wait:
    sub r20, r21, %rdma_ring_rows
    mov r24, 0
    mov r23, r21
rs_wait_fwd:
    shl r25, r24, 3
    add r25, r25, r4
    wait.gt [r25], r20           # forwarder j is past the oldest slot
    ld r26, [r25]
    min r23, r23, r26            # every slot all forwarders have consumed is free, not only the
    add r24, r24, 1              # oldest (DeepEP's sender re-reads the head: the room it frees)
    blt r24, %node_gpus, rs_wait_fwd
rs_room:
    rem r24, r21, %rdma_ring_rows
    add r24, r24, r12            # r24 = the token's slot
    mul r25, r24, r1
    add r25, r25, r27
    mul r26, r14, r1
    add r26, r26, %x
    copy r25, r26, r1            # the row (DeepEP's sender warps copy it into the send buffer)
    shl r25, r24, 7
    add r25, r25, r28
    copy r25, r19, 128           # its metadata row
    mul r25, r14, r30
    add r25, r25, r6
    shl r25, r25, 3
    add r25, r25, r0
    st [r25], r21                # pos[t][n]: the token's position in the stream to node n, which
    add r21, r21, 1              #   the combine's node row comes back in (DeepEP: send_rdma_head)
    add r9, r9, 1
    bge r9, r16, rs_flush        # a chunk is staged ...
    rem r20, r21, %rdma_ring_rows
    bne r20, 0, rs_next          # ... or the ring's end (a write never wraps)
rs_flush:
    rdma_chunk_put
    rdma_chunk_publish
rs_next:
    add r14, r14, 1
    bra rs_token
rs_end:
    beq r9, 0, rs_close
    rdma_chunk_put
rs_close:
    bne r10, %gpu, rs_closed     # to another node the flag follows the last chunk on its QP
    fence
rs_closed:
    shl r20, 1, 40
    or r20, r20, r21
    flag.set r10, [r13], r20     # the count and CLOSED: nothing more on this ring
    exit

    # ---- forwarder (c, m, j) ------------------------------------------------------------------------
    # Registers kept through the loop (r16..r23 are the id words of ld.v8): r0 = &head[c][n0][j]
    # on the origin, r1 = the head last sent there, r2 = &tail[c][s] on the target, r3 = the NVL ring's first slot,
    # r4 = &head[c][m*L + j] here, r5 = the records of RDMA ring (c, m), r7 = NVL metadata slots,
    # r9 = j, r10 = target rank (n0, j), r14 = &tail[c][m] here, r15 = the RDMA ring's first slot,
    # r30 = RDMA metadata slots, r24 = tokens consumed, r25 = pushed, r26 = pushed and published,
    # r27 = NVL head seen, r28 = tokens in the RDMA ring, r29 = pairs sent, r31 = the tail word
    # (bit 40: CLOSED). Temporaries: r6, r8, r11, r12, r13.
forwarder:
    # r6 = g, r7 = c, r30 = N
    div r8, r6, %node_gpus       # r8 = m (origin node)
    rem r9, r6, %node_gpus       # r9 = j
    div r11, %gpu, %node_gpus    # r11 = n0
    mul r10, r11, %node_gpus
    add r10, r10, r9             # r10 = target rank (n0, j)
    mul r12, r8, %node_gpus
    rem r13, %gpu, %node_gpus
    add r12, r12, r13            # r12 = origin s = (m, l0)
    mul r13, r7, r30
    add r13, r13, r8             # r13 = RDMA ring (c, m)
    shl r14, r13, 3
    add r14, r14, %rdma_ctl      # r14 = &tail[c][m] here
    mul r15, r13, %rdma_ring_rows   # r15 = the RDMA ring's first slot
    mul r5, r13, r2
    shl r5, r5, 7
    add r5, r5, %fwd_rec         # r5 = records of ring (c, m)
    mul r6, %channels, r30
    shl r6, r6, 3
    add r6, r6, %rdma_ctl        # r6 = RDMA head table [C][N][L]
    mul r0, r7, r30
    add r0, r0, r11
    mul r0, r0, %node_gpus
    add r0, r0, r9
    shl r0, r0, 3
    add r0, r0, r6               # r0 = &head[c][n0][j] (on the origin)
    mul r8, %channels, %ngpu
    shl r8, r8, 3                # r8 = bytes of one [C][P] table
    add r30, r6, r8              # r30 = RDMA metadata slots
    mul r11, r7, %ngpu
    add r13, r11, r12            # r13 = NVL ring (c, s) on the target
    shl r2, r13, 3
    add r2, r2, %ring_ctl        # r2 = &tail[c][s] on the target
    mul r3, r13, %ring_rows      # r3 = its first slot
    rem r6, %gpu, %node_gpus
    sub r12, r12, r6
    add r12, r12, r9             # r12 = m*L + j
    add r4, r11, r12
    shl r4, r4, 3
    add r4, r4, r8
    add r4, r4, %ring_ctl        # r4 = &head[c][m*L + j] here (raised by the target)
    shl r7, r8, 1
    add r7, r7, %ring_ctl        # r7 = NVL metadata slots
    mov r1, 0
    mov r24, 0
    mov r25, 0
    mov r26, 0
    mov r27, 0
    mov r29, 0
fw_wait:
    wait.gt [r14], r24           # acquire: the origin fenced before moving the tail
    ld r31, [r14]
    and r28, r31, 1099511627775  # tokens in the ring so far (the bits below CLOSED)
fw_token:
    bge r24, r28, fw_release
    rem r6, r24, %rdma_ring_rows
    add r6, r6, r15              # r6 = RDMA slot
    shl r11, r6, 7
    add r11, r11, r30            # r11 = its metadata (the token's dp_meta row)
    shl r13, r24, 7
    add r13, r13, r5             # r13 = the token's record
    bne r9, 0, fw_mask
    ld r8, [r11]
    shr r8, r8, 32
    st [r13+64], r8              # word 8: the token's index on its origin (forwarder j = 0)
fw_mask:
    shl r12, r9, 3
    add r13, r13, r12            # r13 = record word j
    ld r8, [r11+96]              # rank mask
    shr r8, r8, r10
    and r8, r8, 1
    bne r8, 0, fw_push
    st [r13], 0                  # no expert of the token on the target
    add r24, r24, 1
    bra fw_token
fw_push:
    ld.v8 r16, [r11]             # the ids: count the token's slots on the target (pairs sent)
    mul r12, r10, %local_experts # r12 = the target's first expert
    mov r13, 0
fw_count:
    and r8, r16, 0xffffffff
    sub r8, r8, r12
    setlt r6, r8, %local_experts
    add r29, r29, r6
    setlt r6, r8, 0
    sub r29, r29, r6             # in range: d < El and not d < 0
    next_slot_word r13, %topk, fw_count
    sub r8, r25, r27
    blt r8, %ring_rows, fw_room
    beq r25, r26, fw_full        # NVL ring full: publish first (the target may wait for it)
    fence
    flag.set r10, [r2], r25
    mov r26, r25
fw_full:
    sub r8, r25, %ring_rows
    wait.gt [r4], r8             # the target is past the oldest slot
    ld r27, [r4]
fw_room:
    rem r8, r25, %ring_rows
    add r8, r8, r3               # r8 = NVL slot
    mul r12, r8, %row_bytes
    add r12, r12, %ring_x
    sub r13, r11, r30
    shr r13, r13, 7              # the RDMA slot again
    mul r13, r13, %row_bytes
    add r13, r13, %rdma_x
    put.sm r10, r12, r13, %row_bytes   # the row to the target (warp copy over NVLink)
    mul r12, r8, 96
    add r12, r12, r7
    put.sm r10, r12, r11, 96     # ids and weights (what deepep.s's receivers read)
    add r25, r25, 1
    shl r13, r24, 7
    add r13, r13, r5
    shl r12, r9, 3
    add r13, r13, r12
    st [r13], r25                # record word j: position + 1 in the target's stream
    sub r8, r25, r26
    blt r8, %send_chunk, fw_next
    fence                        # a chunk is complete: publish it
    flag.set r10, [r2], r25
    mov r26, r25
fw_next:
    add r24, r24, 1
    bra fw_token
fw_release:
    fence                        # the slots were copied out and the pushed rows landed
    beq r25, r26, fw_head
    flag.set r10, [r2], r25      # the target may be waiting for these rows
    mov r26, r25
fw_head:
    shr r8, r31, 40
    bne r8, 0, fw_head_send      # CLOSED: the last head
    shr r6, %rdma_ring_rows, 1
    max r6, r6, 1
    min r6, r6, %rdma_chunk      # the sender's chunk
    sub r8, r24, r1
    blt r8, r6, fw_wait          # DeepEP: the head goes back once a chunk's worth is consumed
fw_head_send:
    mov r1, r24
    div r6, %ngpu, %node_gpus
    add r6, r6, %ngpu            # G
    rem r8, %tb, r6
    div r8, r8, %node_gpus
    mul r8, r8, %node_gpus       # m*L
    rem r12, %gpu, %node_gpus
    add r12, r12, r8             # the origin (m, l0)
    flag.set r12, [r0], r24      # RDMA head back to the origin
    shr r8, r31, 40
    beq r8, 0, fw_wait           # not CLOSED: more tokens will come
    bne r9, 0, fw_done
    div r8, %tb, r6
    shr r8, r8, 1                # c
    div r11, %ngpu, %node_gpus
    mul r8, r8, r11
    rem r12, %tb, r6
    div r12, r12, %node_gpus
    add r8, r8, r12              # c*N + m
    shl r8, r8, 3
    add r8, r8, %fwd_cnt
    st [r8], r24                 # tokens of RDMA ring (c, m), for the combine's forwarder
fw_done:
    red.add %gpu, [%acct], r29   # acct 0: pairs sent (from the forwarder into its node)
    exit

# ------------------------------------------------------------------------------------------------
# deepep_combine_internode: DeepEP's internode combine (internode.cu `combine` at 3b1045d: per
# channel an SM of NVL senders and an SM of RDMA-and-NVL forwarders, one block each, whose warps
# work on their own; the forwarder SM's warps issue the channel's RDMA writes on its one queue
# pair to each peer). W = %fwd_warps = max(16 / N, 1), DeepEP's kNumWarpsPerForwarder (its 16
# forwarder warps per channel, kNumCombineForwarderWarps, split over the N destination nodes).
# Streams are warp groups of G = %groups per thread block (G = N*W: a channel's forwarders in one
# block, its senders in ceil(P / G) blocks, with workload.layer.deepep.combine_forwarders: block;
# G = 1, one block per stream, with stream or where G slices do not fit an SM's shared memory),
# %tb = block * G + group; S = ceil(P / G) * G sender streams
# per channel, of which the last S - P exit at once (G not dividing P):
#   %tb = c*S + s (< C*S, s < P): NVL sender of the tokens this rank received from origin s on
#     channel c (deepep.s's combine records): per token the fp32 weighted sum of its local expert
#     outputs, rounded to bf16 and copied with a warp copy into dp_fwd_comb[s / L][t][l0] on the
#     forwarder (n0, s % L); every 8 tokens (the staging fence) and at the end it raises
#     dp_comb_ctl[c][(s / L)*L + l0] there to the tokens whose copies have landed.
#   %tb = C*S + (c*N + m)*W + w: forwarder warp w of origin s = (m, l0) on channel c (with G =
#     N*W: group m*W + w of channel c's forwarder block, all on the block's queue pairs): walks
#     the tokens it forwarded in dispatch (dp_fwd_rec, in RDMA ring order), tokens w, w + W, ...
#     (DeepEP: sub-warp w of the forwarder takes tokens token_start_idx + w, + 2w, ... of every
#     chunk, so the W warps combine W tokens at a time); per token it waits until the copy of
#     every local rank j that holds any of its experts has landed (one wait.lanes.ge, a lane per
#     rank, as DeepEP's forwarder warp waits), then for those ranks ascending adds the bf16
#     partial to an fp32 sum, rounded to bf16 into row p of the stream's send buffer (p: the
#     token's position in the stream). The stream goes in chunks of K = %rdma_chunk positions
#     (DeepEP's num_max_rdma_chunked_send_tokens): at the end of its tokens of a chunk a group
#     arrives at the chunk's barrier (a local atomic: DeepEP's W warps meet at a named barrier);
#     the group whose arrival completes it posts the chunk as one RDMA write into rows p..p+K-1
#     of stream (c, n0) at home (dp_comb), the others wait for the barrier and go on to the next
#     chunk. For the own node the rows are staged straight into dp_comb (nothing is sent). The
#     last of the GPU's C*N*W forwarders to finish (each after a fence: its chunks have landed)
#     raises done[me] everywhere.
# Both sum a row %slice elements at a time (fp32 in shared memory, the stand-in for the warps'
# registers: DeepEP's lanes hold a few 16 B pieces of a token at once, not its row; 14 KB a warp
# group lets 16 groups share an SM's 228 KB), each slice rounded into the staging row; a block
# per stream (G = 1) sums whole rows (the launch's dynamic shared memory holds the rest).
.macro slice_elements n, first
    sub \n, %hidden, \first
    min \n, \n, %slice          # the elements of the row's slice that starts at element `first`
.endm

.kernel deepep_combine_internode
.param rec
.param ntf
.param recv_y
.param fwd_rec
.param fwd_cnt
.param fwd_comb
.param comb_ctl
.param comb
.param fwd_send
.param fwd_chunks
.param scratch               # per NVL sender group: 8 bf16 staging rows
.param one
.param acct
.param done
.param tokens
.param topk
.param hidden
.param channels
.param local_experts
.param node_gpus
.param fwd_warps             # W: warp groups per (channel, node) forwarder
.param rdma_chunk            # K: tokens per RDMA write (num_max_rdma_chunked_send_tokens)
.param groups                # G: warp groups per thread block
.param slice                 # elements of a row summed at a time (<= 3584: .smem)
.smem 14KB                   # acc [slice] f32
    shl r1, %hidden, 1           # r1 = rb
    add r2, %tokens, %channels
    sub r2, r2, 1
    div r2, r2, %channels        # r2 = Tc
    mov r10, %smem               # r10 = acc
    shl r4, r1, 3                # r4 = scratch bytes per warp group
    mul r11, %tb, r4
    add r11, r11, %scratch       # r11 = staging slots
    rem r3, %gpu, %node_gpus     # r3 = l0
    add r6, %ngpu, %groups
    sub r6, r6, 1
    div r6, r6, %groups
    mul r6, r6, %groups          # r6 = S: sender streams per channel
    mul r5, %channels, r6
    bge %tb, r5, forwarder
    # ---- NVL sender of (c, s) ------------------------------------------------------------------------
    rem r7, %tb, r6              # r7 = s
    bge r7, %ngpu, leave         # one of the last block's idle groups
    div r14, %tb, r6
    mul r14, r14, %ngpu
    add r14, r14, r7             # r14 = c*P + s: the stream's records
    combine_records_open r14     # r5 = channel, r6 = origin s, r9 = tokens, r12 = records
    div r13, r6, %node_gpus      # r13 = m
    div r7, %gpu, %node_gpus
    mul r7, r7, %node_gpus
    rem r8, r6, %node_gpus
    add r7, r7, r8               # r7 = forwarder (n0, s % L)
    mul r8, r5, %ngpu
    mul r14, r13, %node_gpus
    add r8, r8, r14
    add r8, r8, r3
    shl r8, r8, 3
    add r8, r8, %comb_ctl        # r8 = &comb_ctl[c][m*L + l0] on the forwarder
    mul r13, r13, %tokens        # r13 = m*T
    mov r24, 0                   # r24 = record
    mov r25, 0                   # r25 = pairs combined
tok:
    bge r24, r9, all_sent
    and r6, r24, 7               # staging slot
    mul r6, r6, r1
    add r6, r6, r11              # r6 = the staging row
    mov r14, 0                   # r14 = the slice's first element
slice:
    slice_elements r15, r14      # r15 = its elements
    shl r2, r14, 1
    add r2, r2, %recv_y          # r2 = the slice of the rows
    mov r4, 0                    # r4 = pairs (the same in every slice)
    rank_partial_row r2, r15, r4 # r10 = the slice's fp32 sum, r27 = t
    bne r14, 0, staged           # the slot was freed at the token's first slice
    bne r6, r11, staged          # not slot 0
    fence                        # slot reuse: the copies of 8 tokens ago are done ...
    flag.set r7, [r8], r24       # ... so the forwarder may take every token before this one
staged:
    shl r29, r14, 1
    add r29, r29, r6
    vcvt.bf16.f32 r29, r10, r15
    add r14, r14, r15
    blt r14, %hidden, slice
    add r25, r25, r4
    add r31, r13, r27
    mul r31, r31, %node_gpus
    add r31, r31, r3
    mul r31, r31, r1
    add r31, r31, %fwd_comb
    put.sm r7, r31, r6, r1       # the partial row to the forwarder: dp_fwd_comb[m][t][l0]
    add r24, r24, 1
    bra tok
all_sent:
    fence
    flag.set r7, [r8], r24
    red.add %gpu, [%acct+24], r25    # acct 3: pairs combined
    exit

    # ---- forwarder of origin (m, l0) on channel c --------------------------------------------------
    # Registers through the loop: r0 = the chunk's first position, r14 = its end, r24 = the token's
    # position in the stream, r4 = w, r7 = home, r8 = &comb_ctl[c][m*L], r9 = tokens, r11 = the
    # stream's staging rows, r12 = its records, r13 = m*T, r15 = its receive rows at home, r25 =
    # the chunk's barrier word.
forwarder:
    sub r6, %tb, r5
    rem r4, r6, %fwd_warps       # r4 = w: the group's first token of every chunk
    div r6, r6, %fwd_warps
    div r30, %ngpu, %node_gpus   # r30 = N
    div r5, r6, r30              # r5 = c
    rem r6, r6, r30              # r6 = m
    mul r7, r5, r30
    add r7, r7, r6               # r7 = c*N + m
    shl r8, r7, 3
    add r8, r8, %fwd_cnt
    ld r9, [r8]                  # r9 = tokens forwarded for ring (c, m)
    mul r12, r7, r2
    mul r11, r12, r1
    add r11, r11, %fwd_send      # r11 = send buffer rows of stream (c, m)
    shl r12, r12, 7
    add r12, r12, %fwd_rec       # r12 = the records
    add r25, r2, %rdma_chunk
    sub r25, r25, 1
    div r25, r25, %rdma_chunk
    mul r25, r25, r7
    shl r25, r25, 3
    add r25, r25, %fwd_chunks    # r25 = chunk 0's barrier word
    div r14, %gpu, %node_gpus    # n0
    mul r15, r5, r30
    add r15, r15, r14
    mul r15, r15, r2
    mul r15, r15, r1
    add r15, r15, %comb          # r15 = receive rows of stream (c, n0) at home
    mul r7, r6, %node_gpus
    add r7, r7, r3               # r7 = home s = (m, l0)
    bne r7, %gpu, fw_staging
    mov r11, r15                 # own node: staged straight into the receive rows (DeepEP's
fw_staging:                      #   send_buffer is the recv_buffer for its own node)
    mul r8, r5, %ngpu
    mul r13, r6, %node_gpus
    add r8, r8, r13
    shl r8, r8, 3
    add r8, r8, %comb_ctl        # r8 = &comb_ctl[c][m*L] here (word j: local rank j's progress)
    mul r13, r6, %tokens         # r13 = m*T
    mov r0, 0
fw_chunk:
    bge r0, r9, fw_sent
    add r14, r0, %rdma_chunk
    min r14, r14, r9             # r14 = the chunk's end
    add r24, r0, r4              # tokens w, w + W, ... of the chunk (DeepEP's sub-warp w)
fw_tok:
    bge r24, r14, fw_arrive
    shl r26, r24, 7
    add r26, r26, r12            # r26 = record
    ld r27, [r26+64]             # r27 = t on its origin
    ld.v8 r16, [r26]             # word j: position + 1 in local rank j's stream (0: none)
    mov r2, 0                    # r2 = the slice's first element
    slice_elements r3, r2        # r3 = its elements
    vzero.f32 r10, r3
    add r29, r13, r27
    mul r29, r29, %node_gpus
    mul r29, r29, r1
    add r29, r29, %fwd_comb      # r29 = dp_fwd_comb[m][t][0]
    # every local rank j's copy of this token has landed (its progress reached the position + 1
    # in the record; 0, no copy: always reached), a lane per rank - DeepEP's forwarder warp
    wait.lanes.ge [r8], r26, %node_gpus
    mul r30, r24, r1
    add r30, r30, r11            # r30 = the token's row in the send buffer
fw_slice:
    shl r5, r2, 1                # r5 = the slice's byte offset in a bf16 row
    mov r28, 0                   # r28 = local rank j
fw_rank:
    beq r16, 0, fw_rank_next
    mul r31, r28, r1
    add r31, r31, r29
    add r31, r31, r5
    vaxpy.f32.bf16 r10, r31, %one, r3
fw_rank_next:
    next_slot_word r28, %node_gpus, fw_rank
    add r6, r30, r5
    vcvt.bf16.f32 r6, r10, r3
    add r2, r2, r3
    bge r2, %hidden, fw_staged
    ld.v8 r16, [r26]             # the record's words again, for the next slice
    slice_elements r3, r2
    vzero.f32 r10, r3
    bra fw_slice
fw_staged:
    add r24, r24, %fwd_warps
    bra fw_tok
fw_arrive:
    # the chunk's barrier (DeepEP: sync_large_warp, bar.sync of the W warps): the group whose
    # arrival completes it posts the chunk, the others wait for it to be complete
    atom.add r28, %gpu, [r25], 1
    add r28, r28, 1
    blt r28, %fwd_warps, fw_barrier
    beq r7, %gpu, fw_next_chunk  # own node: the rows are in place (the final fence orders them)
    sub r29, r14, r0
    mul r29, r29, r1             # the chunk's bytes
    mul r31, r0, r1
    add r26, r31, r11
    add r31, r31, r15
    put r7, r31, r26, r29        # the chunk home: one RDMA write into stream (c, n0) at its position
    bra fw_next_chunk
fw_barrier:
    wait.ge [r25], %fwd_warps    # every sibling has staged its tokens of the chunk
fw_next_chunk:
    add r25, r25, 8
    add r0, r0, %rdma_chunk
    bra fw_chunk
fw_sent:
    fence                        # the chunks this group posted have landed
    atom.add r13, %gpu, [%acct+32], 1
    div r30, %ngpu, %node_gpus
    mul r30, r30, %channels
    mul r30, r30, %fwd_warps
    sub r30, r30, 1
    bne r13, r30, leave          # not the GPU's last forwarder
    tell_every_gpu %done, r16, r15    # done[me] = 1 on every GPU
leave:
    exit

# ------------------------------------------------------------------------------------------------
# deepep_reduce_nodes: deepep.s's deepep_reduce with one partial row per node instead of per rank:
# waits for the shared experts and for done[g] = 1 from every GPU, then per token (round-robin
# over TBs) out[t] = sum_s ys[s][t] + sum over nodes n ascending that hold any of the token's
# experts of node n's row, in fp32 in that order (the reference's combine="per_node"). Node n's
# row of token t (channel c) is row pos[t][n] of stream (c, n) in dp_comb: the position the
# dispatch gave it, as DeepEP's RDMA receivers read combined_rdma_head to find a token's slot.
.kernel deepep_reduce_nodes
.param out
.param ys
.param comb
.param pos
.param meta
.param one
.param done
.param acct
.param tokens
.param hidden
.param shared
.param shared_tbs
.param node_gpus
.param channels
    wait_layer_inputs %shared, %shared_tbs, %acct, %done
    shl r10, %hidden, 1          # r10 = rb
    shl r11, %hidden, 2          # r11 = f32 row bytes
    div r12, %ngpu, %node_gpus   # r12 = N
    shl r13, 1, %node_gpus
    sub r13, r13, 1              # r13 = L one bits
    add r14, %tokens, %channels
    sub r14, r14, 1
    div r14, r14, %channels      # r14 = Tc
    mov r1, %tb                  # r1 = token
token:
    bge r1, %tokens, end
    start_output_row r2, r1, %out, r11, %shared, %ys, %one, %tokens, r10, %hidden, r3, r4
    shl r5, r1, 7
    add r5, r5, %meta
    ld r6, [r5+96]               # r6 = rank mask
    mul r7, r1, r12
    shl r7, r7, 3
    add r7, r7, %pos             # r7 = &pos[t][0]
    div r15, r1, r14
    mul r15, r15, r12            # r15 = c*N
    mov r3, 0                    # r3 = node
node:
    and r8, r3, 7
    bne r8, 0, node_word
    shl r9, r3, 3
    add r9, r9, r7
    ld.v8 r16, [r9]              # the token's positions in the next 8 nodes' streams, one access
node_word:                       #   (DeepEP's receiver warp: a lane per node, one coalesced load)
    and r8, r6, r13
    shr r6, r6, %node_gpus       # the next node's ranks
    beq r8, 0, node_next
    add r4, r15, r3
    mul r4, r4, r14
    add r9, r16, r4              # row pos[t][n] of stream (c, n)
    mul r9, r9, r10
    add r9, r9, %comb
    vaxpy.f32.bf16 r2, r9, %one, %hidden
node_next:
    next_slot_word r3, r12, node # node n's position in r16
    add r1, r1, %ntb
    bra token
end:
    exit
