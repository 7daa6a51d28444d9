# The backward pass of scheme `moehub` (workload.layer.passes: training; plan:
# moehub_arch/workloads/schemes/moehub.py): the gradient rows move through the hub the way the
# forward's rows did - named by their logical destination, placed and announced by the hub.
#
# The forward's hub state is the backward's handle: each local expert's window still holds its
# X rows in arrival order with one completion record per row (source GPU, home slot t * k + j),
# and moehub_expert_train kept the activations Hh beside them (he, the same row positions). The
# backward's dO rows go to a second set of logical destinations, the gradient windows (expert
# E + e on expert e's GPU: a second allocation per expert, as a second rowspMalloc), in a new
# round of the hub's streams (notify_ready.reopen). Streams (per GPU):
#   3  ... the forward, moehub_bwd_reopen (a new round; reopened[me] on every GPU; the local
#      start word), moehub_combine_bwd (the combine's backward at home - dw, dO = bf16(w dy) -
#      with each dO row stored to its expert's gradient window as soon as it is written:
#      send_to_expert, or st.rowsp; end of stream), the shared experts' backward, grouped_tiles
#      (the forward's windows as X, he, the expert-major gradient buffers), grouped_bwd_act (each
#      tile waits for its dO rows: tilecnt), grouped_dgrad, flag_set gate, grouped_wgrad,
#      moe_dispatch_bwd
#   2  ... the forward's claimers, flag_wait (start), moehub_bwd_positions (the forward's records
#      -> fpos), moehub_bwd_claim (the gradient windows' ready tiles into a queue, as the
#      forward's claimers do)
#   1  ... the forward's shared experts, flag_wait (start), moehub_bwd_place (row chunks of the
#      queued tiles: each dO row copied to its forward row position and counted in that tile's
#      counter; a tile's last chunk releases it), moehub_bwd_home (once the dgrad is done: each
#      dX row home with send_home through the forward's completion record)
.include "lib/combine.s"
.include "moehub/moe_layer.s"
.include "common/moe_backward.s"

# moehub_bwd_reopen (one TB): this GPU's streams and windows begin the backward's round (every
# stream of the forward's has finished: moe_combine waited for every GPU's experts); with
# `rowsp` 1 (stores: row_sparse) allocation ids 0 .. E - 1 are re-registered to the gradient
# windows E + e (the forward's registrations are done with); then reopened[me] = 1 on every GPU
# (a GPU sends gradient rows here only after that) and start = 1 (the other streams' flag_wait).
.kernel moehub_bwd_reopen
.param reopened              # [P] i64
.param start
.param rowsp
.param experts
.param hidden
    notify_ready.reopen
    beq %rowsp, 0, registered
    shl r10, %hidden, 1
    mov r1, 0
register:
    add r3, r1, %experts
    rowsp.malloc r1, r3, r10     # allocation id e: expert e's gradient window
    add r1, r1, 1
    blt r1, %experts, register
registered:
    tell_every_gpu %reopened, r1, r2
    st [%start], 1
    exit

# moehub_combine_bwd / moehub_combine_bwd_rowsp: the combine's backward with the gradient
# dispatch in it (combine_bwd_pairs, ../common/moe_backward.s): once every GPU reopened, each
# pair's dw and dO = bf16(w dy) are computed at home and the dO row is stored to the gradient
# window of its expert e (id E + e) the moment it is written - as the forward's router stores a
# row the moment its token is routed; then this TB's end of stream. _rowsp: each row one st.rowsp
# (allocation id e, which moehub_bwd_reopen registered to the gradient window; row t * k + j).
.macro grad_row_send
    shl r13, r6, 3
    add r13, r13, %topk_idx
    ld r13, [r13]                # the pair's expert
    add r13, r13, %experts       # its gradient window
    send_to_expert r13, r12, r10, r6, 0
.endm

.macro grad_row_rowsp
    shl r13, r6, 3
    add r13, r13, %topk_idx
    ld r13, [r13]                # allocation id e: the expert's gradient window
    st.rowsp r13, r6, 0, r12, r10
.endm

.macro combine_bwd_send_params
.param dy                    # [T][H] bf16
.param yhome                 # [T * k][H] bf16: the forward's expert outputs, home
.param topk_w
.param map                   # [T * k] i64: the identity (dO rows in slot order)
.param dsend                 # [T * k][H] bf16
.param dw
.param bacct
.param tokens
.param topk
.param hidden
.param topk_idx
.param experts               # E: gradient window of expert e is E + e
.param reopened              # [P] i64
.smem 128KB                  # as moe_combine_bwd
.endm

.kernel moehub_combine_bwd
    combine_bwd_send_params
    wait_layer_inputs 0, 0, %reopened, %reopened
    combine_bwd_pairs grad_row_send
    notify_ready.eos %ntb        # the hub ends this GPU's streams once every TB said so
    exit

.kernel moehub_combine_bwd_rowsp
    combine_bwd_send_params
    wait_layer_inputs 0, 0, %reopened, %reopened
    combine_bwd_pairs grad_row_rowsp
    notify_ready.eos %ntb
    exit

# fpos_entry rec, a, b: a = &fpos[source][home] of the completion record at `rec` (b: scratch)
.macro fpos_entry rec, a, b
    ld \a, [\rec]                # source GPU
    ld \b, [\rec+8]              # home slot t * k + j
    mul \a, \a, %pairs
    add \a, \a, \b
    shl \a, \a, 3
    add \a, \a, %fpos
.endm

# moehub_bwd_positions: fpos[source][home] = the row's position in the forward's windows
# (e * window_rows + i), from the forward's completion records; TB b takes positions b,
# b + ntb, ... of the local experts' first counts[e] slots.
.kernel moehub_bwd_positions
.param records               # the hub's completion records (moe_records)
.param counts                # [El] i64: rows per local expert (the forward's)
.param fpos                  # [P][T * k] i64
.param window_rows
.param local_experts
.param record_bytes
.param pairs                 # T * k
    mul r9, %local_experts, %window_rows
    mov r1, %tb
position:
    bge r1, r9, end
    div r2, r1, %window_rows     # r2 = local expert
    rem r3, r1, %window_rows     # r3 = its row
    shl r4, r2, 3
    add r4, r4, %counts
    ld r4, [r4]
    bge r3, r4, next
    mul r5, r1, %record_bytes
    add r5, r5, %records
    fpos_entry r5, r6, r7
    st [r6], r1
next:
    add r1, r1, %ntb
    bra position
end:
    exit

# moehub_bwd_claim: TB e claims the ready tiles of local expert e's gradient window (id E + the
# expert) and publishes each in the queue btq (claim_tiles: the forward's claimer loop).
.kernel moehub_bwd_claim
.param tq                    # btq: word 0 tiles published, word 1 jobs taken; 64-byte entries
.param experts
.param local_experts
    mul r2, %gpu, %local_experts
    add r2, r2, %tb
    add r2, r2, %experts         # r2 = the gradient window
    claim_tiles r2
    exit

# moehub_bwd_place: every TB takes the next job (an atomic counter): job j is row chunk j mod C of
# the queue's tile j / C (C = %chunks, R = ceil(tile_rows / C) rows each; jobs: ntiles words per
# GPU x C, every tile the gradient windows will hold is known from the forward's counts). For each
# row of the chunk its completion record (source, home) names, through fpos, its forward position
# p: the row is copied to dye[p] and the tile of p in the backward's table (tfirst[e] + (p - e
# cap) / tile) counts it. The chunk's last finisher releases the gradient tile.
.kernel moehub_bwd_place
.param tq                    # btq (moehub_bwd_claim)
.param ntiles                # [1] i64: tiles the gradient windows receive on this GPU
.param fpos
.param dye                   # [El][window_rows][H] bf16
.param tilecnt               # [tiles] i64: dO rows in place per tile of the backward's table
.param tfirst                # [El] i64: the table index of each local expert's first tile
.param experts
.param local_experts
.param window_rows
.param record_bytes
.param pairs
.param hidden
.param tile_rows
.param chunks
    shl r20, %hidden, 1          # r20 = row bytes
    ld r21, [%ntiles]
    mul r21, r21, %chunks        # r21 = jobs
    add r22, %tile_rows, %chunks
    sub r22, r22, 1
    div r22, r22, %chunks        # r22 = R, rows per chunk
job:
    atom.add r1, %gpu, [%tq+8], 1    # r1 = my next job
    bge r1, r21, end
    div r2, r1, %chunks          # r2 = queue tile
    rem r3, r1, %chunks          # r3 = chunk
    add r11, r2, 1
    shl r11, r11, 6
    add r11, r11, %tq            # r11 = its entry
    wait.ne [r11+32], 0
    ld.v8 r12, [r11]             # r12 rows, r13 base, r14 records, r15 local expert
    shl r4, r15, 3
    add r4, r4, %tfirst
    ld r23, [r4]                 # r23 = the expert's first tile in the table
    mul r24, r15, %window_rows   # r24 = its first position
    mul r6, r3, r22              # r6 = first row of the chunk
    add r25, r6, r22
    min r25, r25, r12            # r25 = its end
row:
    bge r6, r25, chunk_done
    mul r4, r6, %record_bytes
    add r4, r4, r14
    fpos_entry r4, r7, r8
    ld r7, [r7]                  # r7 = the pair's forward position
    mul r8, r7, r20
    add r8, r8, %dye
    mul r9, r6, r20
    add r9, r9, r13
    copy r8, r9, r20             # dO to the forward position
    sub r7, r7, r24
    div r7, r7, %tile_rows
    add r7, r7, r23
    shl r7, r7, 3
    add r7, r7, %tilecnt
    red.add %gpu, [r7], 1        # the row is in its tile
    add r6, r6, 1
    bra row
chunk_done:
    atom.add r5, %gpu, [r11+40], 1
    sub r4, %chunks, 1
    bne r5, r4, job              # not the tile's last chunk
    mul r4, %gpu, %local_experts
    add r4, r4, r15
    add r4, r4, %experts
    notify_ready.release r4, r13
    bra job
end:
    exit

# moehub_bwd_home: once grouped_dgrad is done (gate), TB b sends the dX rows of the backward
# table's tiles b, b + ntb, ... home: row p's completion record (the forward's, at the same
# position) names its GPU and slot, send_home puts dX there (dret[t * k + j]); then fence, and the
# GPU's last TB sets done[me] on every GPU (moe_dispatch_bwd there waits for all).
.macro mh_tile_entry
    add r2, r1, 1
    shl r2, r2, 6
    add r2, r2, %table
    ld.v8 r12, [r2]              # r12 expert, r13 rows, r14 X rows
    sub r14, r14, %xwin
    div r12, r14, r20            # r12 = the tile's first position
.endm

.macro mh_row_home
    mul r5, r4, %record_bytes
    add r5, r5, %records         # the forward's completion record of position r4
    mul r6, r4, r20
    add r6, r6, %dxe
    send_home r5, r6, r20, %dret
.endm

.kernel moehub_bwd_home
.param table                 # the backward's tile table (grouped_tiles)
.param xwin                  # the forward's windows: the table's X rows lie there
.param records
.param dxe                   # [El][window_rows][H] bf16
.param dret                  # [T * k][H] bf16 on every GPU
.param gate
.param jobs                  # [1] i64: TBs finished
.param done
.param hidden
.param record_bytes
    wait.ge [%gate], 1
    shl r20, %hidden, 1
    ld r9, [%table]              # r9 = tiles
    tiles_rows_home mh_tile_entry, mh_row_home
    exit

# moehub_bwd_ready (system.gpu.hub.moe.aau.allocation: paired; one TB per local expert): the hub
# put every dO row at its forward row's slot of the gradient window (the pairing table,
# components/moehub/pairing.py) and the DAM made each forward tile ready once its rows landed, so
# nothing is copied: TB e claims the ready tiles of its gradient window (any order), marks tile k
# of expert e complete in the backward table's counters (tilecnt[tfirst[e] + k] = its rows: the
# table's tiles are the forward's) and releases it (the slots are never reused in this round).
.kernel moehub_bwd_ready
.param tilecnt               # [tiles] i64: grouped_bwd_act waits for each tile's rows there
.param tfirst                # [El] i64: the table index of each local expert's first tile
.param xwin                  # the windows (moe_windows): the gradient windows follow the forward's
.param experts
.param local_experts
.param window_rows
.param tile_rows
.param hidden
    mul r2, %gpu, %local_experts
    add r2, r2, %tb
    add r2, r2, %experts         # r2 = the gradient window
    shl r20, %hidden, 1
    mul r21, r20, %tile_rows     # r21 = tile bytes
    add r22, %local_experts, %tb
    mul r22, r22, %window_rows
    mul r22, r22, r20
    add r22, r22, %xwin          # r22 = the gradient window's first slot
    shl r4, %tb, 3
    add r4, r4, %tfirst
    ld r23, [r4]                 # r23 = the expert's first tile in the table
claim:
    claim_buffer r13, r14, r15, r2   # r13 = rows, r14 = first row
    beq r13, 0, claimed
    sub r5, r14, r22
    div r5, r5, r21
    add r5, r5, r23
    shl r5, r5, 3
    add r5, r5, %tilecnt
    st [r5], r13                 # the forward tile's dO rows are in place
    notify_ready.release r2, r14
    bra claim
claimed:
    exit
