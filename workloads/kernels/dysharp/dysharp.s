# MoE layer, scheme `dysharp`: DySHARP (arXiv 2605.05607) - dispatch as one dymultimem.st per
# token to its target experts and combine as one dymultimem.ld_reduce per token, both executed by
# the NVSwitch (components/dysharp.py, nvls.py). Launch plan and layouts:
# moehub_arch/workloads/schemes/dysharp.py. nvls_barrier and nvls_output come from
# ../nvls/nvls.s (assembled with this file).

.include "lib/slot_words.s"
.include "lib/gemm_tiles.s"
.include "lib/streaming.s"
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
#
# Routines the unfused kernels and the token-centric fused ones share. Registers as the kernels
# set them: r1 = R, r2 = bytes of a token's ids (8 k), r3 = bytes of its weights (4 k).
#   token_meta_row t                 msrc[t] = the token's ids then its weights. Writes r5, r6.
#   send_row t, obj, src             one dymultimem.st of row t of `src` to the token's k experts
#                                    in object `obj`. Writes r5 - r8 (r5 = u, r6 = target list).
#   send_token t                     one dymultimem.st of row t and one of its meta row to the
#                                    token's k experts (target list: its ids in topk_idx).
#                                    Writes r5 - r8.
#   reduce_token t                   comb[t] = the sum of the token's k experts' weighted
#                                    output rows: one dymultimem.ld_reduce.add.bf16 (the switch
#                                    reads the row of algebraic row u at each target through its
#                                    GPU's AL table, accumulates in fp32 in target-list order and
#                                    returns one bf16 row). Writes r5 - r8.
#   gate_scale_row row, out, meta_row, expert, acc, ids, j, end, tmp
#                                    the expert output row at `row` (bf16 [H]) gives `out` =
#                                    bf16(fp32(w y)) (out = row: in place), w the router weight of the slot of `expert`
#                                    in its meta row (ids read 8 at a time; `ids` = 8 k, where the
#                                    weights start); `acc`: an fp32 row of scratch. Leaves the
#                                    slot in j. Writes j, end, tmp, r16 - r23.
#   find_slot meta_row, expert, j, end, tmp
#                                    j = the slot of `expert` in the meta row's ids. Writes j,
#                                    end, tmp, r16 - r23.
.macro token_meta_row t
    mul r5, \t, %meta_bytes
    add r5, r5, %msrc            # r5 = msrc[t]
    mul r6, \t, r2
    add r6, r6, %topk_idx
    copy r5, r6, r2              # ids
    add r5, r5, r2
    mul r6, \t, r3
    add r6, r6, %topk_w
    copy r5, r6, r3              # weights
.endm

.macro send_row t, obj, src
    mul r5, %gpu, %tokens
    add r5, r5, \t               # r5 = algebraic row u
    mul r6, \t, r2
    add r6, r6, %topk_idx        # r6 = the token's target list
    mul r7, r5, r1
    add r7, r7, \obj             # r7 = multimem address of row u
    mul r8, \t, r1
    add r8, r8, \src
    dymultimem.st r7, r8, r1, r6, %topk
.endm

.macro send_token t
    send_row \t, %xe, %x
    mul r7, r5, %meta_bytes
    add r7, r7, %meta
    mul r8, \t, %meta_bytes
    add r8, r8, %msrc
    dymultimem.st r7, r8, %meta_bytes, r6, %topk
.endm

.macro reduce_token t
    mul r5, %gpu, %tokens
    add r5, r5, \t               # r5 = algebraic row u
    mul r6, \t, r2
    add r6, r6, %topk_idx        # r6 = the token's target list
    mul r7, r5, r1
    add r7, r7, %ye              # r7 = multimem address of row u
    mul r8, \t, r1
    add r8, r8, %comb
    dymultimem.ld_reduce.add.bf16 r8, r7, r1, r6, %topk
.endm

.macro gate_scale_row row, out, meta_row, expert, acc, ids, j, end, tmp
    find_slot \meta_row, \expert, \j, \end, \tmp
    shl \tmp, \j, 2
    add \tmp, \tmp, \ids
    add \tmp, \tmp, \meta_row     # &w[j]
    scale_row_bf16 \out, \acc, \row, \tmp, %hidden
.endm

.macro find_slot meta_row, expert, j, end, tmp
    mov \j, 0
group_\@:
    shl \tmp, \j, 3
    add \tmp, \tmp, \meta_row
    ld.v8 r16, [\tmp]             # ids j .. j + 7
    add \end, \j, 8
    blt \end, %topk, scan_\@
    mov \end, %topk               # end of this group
scan_\@:
    beq r16, \expert, found_\@
    next_slot_word \j, \end, scan_\@
    blt \j, %topk, group_\@
found_\@:
.endm

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
    token_meta_row r4
    add r4, r4, %ntb
    bra meta_row
built:
    fence                        # the meta rows are in memory before the hub reads them
    mov r4, %tb
    mov r12, 0                   # r12 = pairs sent
token:
    bge r4, %tokens, sent
    send_token r4
    add r12, r12, %topk
    add r4, r4, %ntb
    bra token
sent:
    fence                        # every target's GPU has placed and written the rows
    red.add %gpu, [%acct], r12   # acct word 0: pairs sent
    exit

# dysharp_scale: the GEMM epilogue's gate weighting - each expert output row y of local expert e
# becomes bf16(fp32(w x y)), w the router weight of the slot whose expert is e (found in the row's
# meta row, ids read 8 at a time), written at the same row of yout. TB b takes rows b, b + ntb,
# ... of every local expert, up to its count. Counts the rows (acct word 1: received).
.kernel dysharp_scale
.param ye
.param yout                  # where the scaled rows go: ye (in place), or the combine's object
                             # when the unweighted rows are kept (passes: training)
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
    mul r15, r5, r1
    add r4, r15, %yout           # r4 = the scaled row
    add r15, r15, %ye            # r15 = the output row
    gate_scale_row r15, r4, r10, r11, r2, r13, r12, r9, r14
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
    reduce_token r4
    add r12, r12, %topk
    add r4, r4, %ntb
    bra token
reduced:
    fence                        # the reduced rows are in local memory
    red.add %gpu, [%acct+24], r12    # acct word 3: pairs combined
    exit

# ---- token-centric fusion (arXiv 2605.05607): the persistent megakernel's thread-block groups --
# Launched together (schemes/dysharp.py, fusion: token): dysharp_fused_comm (the dispatch and
# combine group, `channels` blocks on stream 0), dysharp_fused_expert (the GEMM-1 and GEMM-2
# group, persistent blocks on stream 2) and dysharp_fused_gate (its gate-weight and ready-notice
# blocks, stream 3), driven by the token tracker:
#   - the destination hub's tile table (components/dysharp.py _track_tile) counts the bytes of
#     every row tile of the receive layout (a token's row and its meta row) and raises the tile's
#     word in `tready` [layout tiles][El] once they have all landed: GEMM-1 starts on a tile then,
#     not after a dispatch-wide barrier;
#   - the end of dispatch: once all of a source's channel blocks are past their fence, the last
#     of them flags `ended` on every GPU (one signal per source); block 0 of each GPU waits for
#     every source's and closes the tiles that will not fill (each expert's partial last tile
#     and the empty ones past it);
#   - each GEMM-2 job's epilogue weights its output columns by the rows' router weights (found
#     by the gate group, dysharp_fused_gate, as the tile becomes ready); once the tile's GEMM-2
#     jobs are done the gate group flags each row's (token, slot) word in `tokready` [T][k] at
#     the token's source;
#   - the source's token table: the combine issues a token's dymultimem.ld_reduce once its k
#     words are up (its k experts' outputs are ready), not after a layer-wide barrier.
# The meta row carries the token's algebraic row u at byte `token_word` (the paper's DRAM table of
# token ids per tile: the epilogue reads where each row goes).

# dysharp_fused_comm: TB b dispatches tokens b, b + ntb, ... (meta rows with u, then the
# dymultimem.st of each); the last block past its fence signals the end of this GPU's dispatch on
# every GPU; block 0 closes the tiles that will not fill once every GPU's signal is in; then each
# block combines the same tokens as each one's experts finish. How a block learns that a token's
# k experts are done (system.switch.nvls.dysharp.tracker_ready, schemes/dysharp.py):
#   ready_count   the token's ready count, as the paper's per-token ready-output counter: one
#                 check of the token's k words in a single coalesced access (a lane per slot,
#                 wait.all), sleeping until every one is up
#   ready_slots   one wait per slot in turn (k dependent accesses per token: the earlier model)
# dysharp_fused_comm_slots is the same kernel with ready_slots. In which order a block takes its
# tokens (workload.layer.dysharp.combine_order):
#   combine_token_order   its tokens t = b, b + ntb, ... in token order, each once it is ready
#   combine_ready_order   the ready queue's positions p = b, b + ntb, ...: position p holds the
#                         (p + 1)-th of this GPU's tokens to become ready, + 1 (0: not yet), which
#                         the hub's token tracker appends when a token's last ready word is set
#                         (components/dysharp_ready.py); a block polls its position's word with a
#                         load in a loop, then combines that token (dysharp_fused_comm_ready,
#                         which takes the queue as one more parameter, rqueue)
.macro token_ready_count
    wait.all.ge [r13], 1, %topk  # every slot of the token is up
.endm

.macro token_ready_slots
    add r14, r13, r2
ready_slot_\@:
    wait.ge [r13], 1
    add r13, r13, 8
    blt r13, r14, ready_slot_\@
.endm

.macro no_more_params
.endm

.macro ready_queue_param
.param rqueue                # [T] i64: the ready queue (position p: its token + 1, 0 until then)
.endm

.macro combine_token_order ready
    mov r4, %tb
    mov r12, 0                   # r12 = targets reduced
combine_token:
    bge r4, %tokens, reduced
    mul r13, r4, r2
    add r13, r13, %tokready      # r13 = &tokready[t][0]
    \ready
    reduce_token r4
    add r12, r12, %topk
    add r4, r4, %ntb
    bra combine_token
.endm

.macro combine_ready_order ready
    mov r4, %tb                  # r4 = ready-queue position p
    mov r12, 0                   # r12 = targets reduced
combine_position:
    bge r4, %tokens, reduced
    shl r13, r4, 3
    add r13, r13, %rqueue        # r13 = &rqueue[p]
poll_position:
    ld r14, [r13]                # the (p + 1)-th token to become ready, + 1 (0: not yet)
    beq r14, 0, poll_position
    sub r14, r14, 1
    reduce_token r14
    add r12, r12, %topk
    add r4, r4, %ntb
    bra combine_position
.endm

.macro fused_comm_body ready, more_params, order
.param x
.param topk_idx
.param topk_w
.param msrc
.param xe                    # multimem base of the row object (algebraic row u at + u R)
.param meta                  # multimem base of the meta object (+ u M)
.param ye                    # multimem base of the output object
.param comb
.param tokready              # [T][k] i64: slot j of token t is ready (flagged by its expert's GPU)
.param ended                 # [P + 1] i64: GPU p's dispatch ended; word P: this GPU's blocks done
.param cnt                   # [El] i64: rows placed per local expert (the hub's counters)
.param tready                # [layout tiles][El] i64: the tracker's tile-ready words
.param acct
.param tokens
.param topk
.param hidden
.param meta_bytes
.param token_word            # byte offset of u in a meta row
.param local_experts
.param layout_tiles
.param tile_rows
    \more_params
    shl r1, %hidden, 1           # r1 = R
    shl r2, %topk, 3             # r2 = bytes of a token's ids
    shl r3, %topk, 2             # r3 = bytes of its weights
    mov r4, %tb
meta_row:
    bge r4, %tokens, built
    token_meta_row r4
    mul r5, r4, %meta_bytes
    add r5, r5, %msrc
    add r5, r5, %token_word
    mul r6, %gpu, %tokens
    add r6, r6, r4
    st [r5], r6                  # u: where the expert's output row goes back
    add r4, r4, %ntb
    bra meta_row
built:
    fence                        # the meta rows are in memory before the hub reads them
    mov r4, %tb
    mov r12, 0                   # r12 = pairs sent
token:
    bge r4, %tokens, sent
    send_token r4
    add r12, r12, %topk
    add r4, r4, %ntb
    bra token
sent:
    fence                        # every target's GPU has placed and written the rows
    red.add %gpu, [%acct], r12   # acct word 0: pairs sent
    shl r9, %ngpu, 3
    add r9, r9, %ended           # r9 = &ended[P]: this GPU's blocks done with their dispatch
    atom.add r10, %gpu, [r9], 1  # (after the fence: this block's rows are all placed)
    add r10, r10, 1
    bne r10, %ntb, told          # the last block tells every GPU, once
    shl r9, %gpu, 3
    add r9, r9, %ended           # r9 = &ended[gpu] (the same address on every GPU)
    mov r10, 0
tell:
    flag.set r10, [r9], 1
    add r10, r10, 1
    blt r10, %ngpu, tell
told:
    bne %tb, 0, combine
# ---- block 0: once every source's dispatch has ended, close the tiles that will not fill
    shl r9, %ngpu, 3
    add r9, r9, %ended           # r9 = end of the flags
    mov r10, %ended
all_ended:
    wait.ge [r10], 1
    add r10, r10, 8
    blt r10, r9, all_ended
    mov r10, 0                   # r10 = local expert
close_expert:
    bge r10, %local_experts, combine
    shl r11, r10, 3
    add r11, r11, %cnt
    ld r11, [r11]                # r11 = its rows (final: every source's rows are placed)
    div r11, r11, %tile_rows     # r11 = its first tile that is not full
close_tile:
    bge r11, %layout_tiles, next_close
    mul r13, r11, %local_experts
    add r13, r13, r10
    shl r13, r13, 3
    add r13, r13, %tready
    st [r13], 1                  # partial or empty: its GEMM blocks may take it
    add r11, r11, 1
    bra close_tile
next_close:
    add r10, r10, 1
    bra close_expert
# ---- combine: token t's ld_reduce once its k experts' outputs are ready
combine:
    \order \ready
reduced:
    fence                        # the reduced rows are in local memory
    red.add %gpu, [%acct+24], r12    # acct word 3: pairs combined
    exit
.endm

.kernel dysharp_fused_comm
    fused_comm_body token_ready_count, no_more_params, combine_token_order

.kernel dysharp_fused_comm_slots
    fused_comm_body token_ready_slots, no_more_params, combine_token_order

.kernel dysharp_fused_comm_ready
    fused_comm_body token_ready_count, ready_queue_param, combine_ready_order

.macro keep_weighted_only y
.endm

# training: the epilogue stores the unweighted output rows (Yq) to y before weighting them - the
# router weights' gradient <dy, y_j> needs them (the weighted rows serve the combine)
.macro keep_unweighted y
    stream_down_copy \y
.endm

# the persistent GEMM blocks' body; `keep` is keep_weighted_only or keep_unweighted
.macro fused_expert_body keep
    add r31, %walk_rows, %tile_rows
    sub r31, r31, 1
    div r31, r31, %tile_rows
    mul r31, r31, %local_experts # r31 = tiles
    stream_job_setup             # r20 = Ju, r21 = Jd, r22 = jobs per block, r29 = lag, r30 = jobs,
                                 # r8 - r10 shared memory, r23 / r24 row bytes, r25 = 0
job:
    atom.add r1, %gpu, [%jobs], 1    # r1 = my next job
    bge r1, r30, finished
    stream_job r1, r22, r20, %swizzle, r29, r2, r3, gate_up, job, r4    # r2 = tile; r3 = job in tile
gate_up:
    bge r2, r31, job             # past the last tile
    shl r4, r2, 3
    add r4, r4, %tready
    wait.ge [r4], 1              # the tracker raised the tile (full) or the dispatch's end closed it
    div r15, r2, %local_experts  # r15 = layout tile i
    rem r14, r2, %local_experts  # r14 = local expert
    shl r4, r14, 3
    add r4, r4, %cnt
    ld r13, [r4]
    mul r12, r15, %tile_rows     # r12 = the tile's first row in the expert's layout
    sub r13, r13, r12
    min r13, r13, %tile_rows     # r13 = rows
    ble r13, 0, job              # an empty tile
    mul r4, r14, %cap
    add r12, r12, r4             # r12 = first row (flat)
    seteq r15, r15, 0            # r15 = 1 on the expert's first tile (its weights from HBM)
    shl r11, r2, 4
    add r11, r11, %jobs
    add r11, r11, 16             # r11 = the tile's job counters
    bge r3, r20, down
# ---- GEMM-1, gate/up job q = r3: Hh[:, q cols] = silu(X Wg_q) * (X Wu_q)
    stream_gate_up_job %xe, %he, %wg, %wu
    bra job
# ---- GEMM-2, down job c: Y[:, c cols] = Hh Wd_c over the full I
down:
    sub r3, r3, r20              # r3 = output column tile c
    stream_down_gemm %he, %wd
    \keep %yraw                  # training: the unweighted rows too (keep_unweighted)
# the epilogue's gate weighting: Yq = bf16(fp32(w x fp32(Yq))) row by row
    shl r4, r2, 3
    add r4, r4, %wdone
    wait.ge [r4], r13            # every row's router weight is in wvec
    shl r4, r12, 2
    add r4, r4, %wvec            # r4 = the tile's weights
    vcvt.f32.bf16 r8, r9, r7
    vrow_mul.f32 r8, r8, r4, %n_tile, r7
    vcvt.bf16.f32 r9, r8, r7
    stream_down_store %ye
    bne r4, r21, job             # not the tile's last down job
    add r25, r25, r13
    bra job
finished:
    red.add %gpu, [%acct+16], r25    # acct 2: rows computed
    exit
.endm

# dysharp_fused_expert: persistent GEMM blocks. Tile b = i x El + e is layout tile i of local
# expert e (the order the tiles fill: every expert's first tile, then its second, ...); jobs are
# taken from one counter in the streaming order of ../lib/streaming.s (gate/up jobs of a group of
# tiles, the down jobs of the group `lag` before). A job waits for its tile's ready word, reads
# the expert's row count (final once the tile is ready) and skips a tile with no rows. GEMM-1 and
# GEMM-2 as in overlap_expert (../overlap/overlap.s); each GEMM-2 job's epilogue weights its
# output columns by the rows' router weights (wvec, found by dysharp_fused_gate), bf16(fp32(w y))
# per row, before storing them.
.macro fused_expert_params
.param xe                    # [El][cap][H] bf16 (the receive layout)
.param he                    # [El][cap][I] bf16
.param ye                    # [El][cap][H] bf16
.param cnt
.param tready
.param wvec                  # [El][cap] f32: each layout row's router weight
.param wdone                 # [tiles] i64: rows of the tile whose weight is in wvec
.param jobs                  # word 0 jobs taken, 1 unused, then per tile: gate/up done, down done
.param wg                    # [El][I/n][H][n] bf16
.param wu
.param wd                    # [El][H/n][I][n] bf16
.param acct
.param hidden
.param ffn
.param tile_rows
.param n_tile
.param swizzle
.param local_experts
.param cap                   # layout rows per expert: the stride of the flat layout rows
.param walk_rows             # the rows per expert the blocks walk: ceil(walk_rows / tile_rows) tiles
                             # each (workload.layer.dysharp.walk: the tracked tiles' layout_rows, or cap)
.smem 160KB                  # G, U [tile][n] f32 + Hq [tile][n] bf16, or Y + Yq
.smem_job 10                 # bytes per element of a tile_rows x n_tile job (fits a smaller SM)
.endm

.kernel dysharp_fused_expert
    fused_expert_params
    fused_expert_body keep_weighted_only

# dysharp_fused_expert_train: the same blocks for a training layer; each GEMM-2 job also stores
# its unweighted rows to yraw (the weighted ones to ye), for the backward's dw = <dy, y_j>.
.kernel dysharp_fused_expert_train
    fused_expert_params
.param yraw                  # [El][cap][H] bf16: the unweighted expert outputs
    fused_expert_body keep_unweighted

# dysharp_fused_gate: the GEMM group's gate-weight and ready-notice blocks (no shared memory, many
# per SM, so their loads overlap as a warp per row would). Rows x = b x tile_rows + r of tile b,
# taken b, b + ntb, ... in tile order. Pass 1, as each tile becomes ready: the row's router weight
# (the expert's slot j in the token's meta row) into wvec and the row's notice (source GPU << 32 |
# t x k + j) into `notice`, counted in wdone[b] (GEMM-2 waits for it). Pass 2: once the tile's
# GEMM-2 jobs are all done (their rows stored), flag tokready[t][j] at the token's source.
.kernel dysharp_fused_gate
.param meta                  # [El][cap][M]
.param cnt
.param tready
.param wvec
.param wdone
.param notice                # [El][cap] i64
.param jobs                  # dysharp_fused_expert's job counters (down jobs done at + 24 + 16 b)
.param tokready
.param acct
.param tokens
.param topk
.param local_experts
.param cap
.param walk_rows             # the rows per expert walked (as dysharp_fused_expert's)
.param tile_rows
.param meta_bytes
.param token_word
.param down_jobs             # GEMM-2 jobs per tile (H / n_tile)
    add r31, %walk_rows, %tile_rows
    sub r31, r31, 1
    div r31, r31, %tile_rows
    mul r31, r31, %local_experts
    mul r31, r31, %tile_rows     # r31 = row slots of all tiles
    mul r30, %gpu, %local_experts    # r30 = first local expert's global id
    shl r29, %topk, 3            # r29 = bytes of the ids
    mov r28, 0                   # r28 = rows weighted by this block
    mov r27, 0                   # r27 = pass (0: weights, 1: notices)
pass:
    mov r1, %tb
row:
    bge r1, r31, passed
    div r2, r1, %tile_rows       # r2 = tile b
    rem r3, r1, %tile_rows
    div r4, r2, %local_experts   # r4 = layout tile i
    rem r5, r2, %local_experts   # r5 = local expert
    mul r4, r4, %tile_rows
    add r4, r4, r3               # r4 = row in the expert's layout
    bge r4, %walk_rows, next_row
    shl r6, r2, 3
    add r6, r6, %tready
    wait.ge [r6], 1              # the tile is ready (its count final if it is partial)
    shl r6, r5, 3
    add r6, r6, %cnt
    ld r6, [r6]
    bge r4, r6, next_row         # no row here
    mul r6, r5, %cap
    add r6, r6, r4               # r6 = flat row
    bne r27, 0, tell
    mul r7, r6, %meta_bytes
    add r7, r7, %meta            # r7 = its meta row
    add r8, r5, r30
    find_slot r7, r8, r9, r10, r11    # r9 = slot j
    shl r10, r9, 2
    add r10, r10, r29
    add r10, r10, r7             # r10 = &w[j]
    shl r11, r6, 2
    add r11, r11, %wvec
    copy r11, r10, 4             # wvec[row] = w[j]
    add r10, r7, %token_word
    ld r10, [r10]                # r10 = algebraic row u
    div r11, r10, %tokens        # r11 = its source GPU
    rem r10, r10, %tokens
    mul r10, r10, %topk
    add r10, r10, r9             # r10 = t x k + j
    shl r11, r11, 32
    or r10, r10, r11
    shl r11, r6, 3
    add r11, r11, %notice
    st [r11], r10
    shl r11, r2, 3
    add r11, r11, %wdone
    red.add %gpu, [r11], 1       # after the copy (it retired with wvec written)
    add r28, r28, 1
    bra next_row
tell:
    shl r7, r2, 4
    add r7, r7, %jobs
    wait.ge [r7+24], %down_jobs  # the tile's GEMM-2 jobs have stored every row
    shl r7, r6, 3
    add r7, r7, %notice
    ld r7, [r7]
    shr r8, r7, 32               # r8 = the token's source GPU
    and r7, r7, 0xffffffff
    shl r7, r7, 3
    add r7, r7, %tokready
    flag.set r8, [r7], 1         # tokready[t][j] there
next_row:
    add r1, r1, %ntb
    bra row
passed:
    add r27, r27, 1
    blt r27, 2, pass
    red.add %gpu, [%acct+8], r28     # acct 1: rows received (and weighted)
    exit

# ---- the backward (workload.layer.passes: training, fusion: none; plan: schemes/dysharp.py) ----
# The combine's in-switch reduction has a multicast as its backward, the dispatch's multicast an
# in-switch reduction: dysharp_bwd_dispatch multicasts each token's dy to its k experts
# (dymultimem.st into the gradient object, placed by the forward's AL entries: dy lands where x
# landed), dysharp_bwd_weight forms dw (home) and dO on the expert side, the shared grouped
# backward kernels compute dX at the same layout rows, and dysharp_combine (unweighted) sums each
# token's k dX rows in the switch on the way home; nvls_output adds the shared experts' first.

# dysharp_bwd_dispatch: TB b takes tokens t = b, b + ntb, ...: one dymultimem.st of dy[t] to the
# token's k experts. Completes at the fence; counts the pairs (bacct word 0: dispatched).
.kernel dysharp_bwd_dispatch
.param dy                    # [T][H] bf16
.param dye                   # multimem base of the gradient object (algebraic row u at + u R)
.param topk_idx
.param bacct
.param tokens
.param topk
.param hidden
    shl r1, %hidden, 1           # r1 = R
    shl r2, %topk, 3
    mov r4, %tb
    mov r12, 0                   # r12 = pairs sent
token:
    bge r4, %tokens, sent
    send_row r4, %dye, %dy
    add r12, r12, %topk
    add r4, r4, %ntb
    bra token
sent:
    fence                        # every target has its row
    red.add %gpu, [%bacct], r12
    exit

# dysharp_bwd_weight: TB b takes algebraic rows u = b, b + ntb, ...; for each local expert e with
# an AL entry (u, e) (its layout row), the slot j of e in the row's meta row: dw = <dy_u, y_j>
# (fp32 in increasing h; y_j the unweighted expert output, kept) put to dw[t][j] at the token's
# home (u = g T + t), and the dO row bf16(w_j dy_u) over dy_u in the gradient object.
.kernel dysharp_bwd_weight
.param al                    # [U][El] i64: layout row + 1, 0 where (u, e) has none
.param meta                  # [El][cap][M]
.param yraw                  # [El][cap][H] bf16: the unweighted expert outputs
.param dye                   # [El][cap][H] bf16: dy rows in, dO rows out
.param bdw                   # [El][cap] f32: dw staged for the put home
.param dw                    # [T][k] f32 on the home GPU
.param gathered              # U = P T algebraic rows
.param tokens
.param local_experts
.param cap
.param topk
.param hidden
.param meta_bytes
.smem 100KB                  # dy, products, w dy [H] fp32 + dO [H] bf16 + the dot: 14 H + 4 bytes (H <= 7314)
    shl r1, %hidden, 1           # r1 = R
    shl r2, %hidden, 2
    mov r27, %smem               # r27 = dy in fp32
    add r28, r27, r2             # r28 = products
    add r29, r28, r2             # r29 = w dy (fp32)
    add r30, r29, r2             # r30 = dO (bf16)
    add r31, r30, r1             # r31 = the dot product
    mul r3, %gpu, %local_experts # r3 = first local expert
    shl r13, %topk, 3            # r13 = bytes of the ids (the weights follow)
    mov r4, %tb                  # r4 = u
token:
    bge r4, %gathered, end
    div r25, r4, %tokens         # r25 = home GPU
    rem r26, r4, %tokens         # r26 = token there
    mov r7, 0                    # r7 = local expert
target:
    bge r7, %local_experts, next_token
    mul r5, r4, %local_experts
    add r5, r5, r7
    shl r5, r5, 3
    add r5, r5, %al
    ld r5, [r5]
    ble r5, 0, next_target       # no row of u here for this expert
    sub r5, r5, 1
    mul r6, r7, %cap
    add r5, r5, r6               # r5 = flat layout row
    mul r10, r5, %meta_bytes
    add r10, r10, %meta          # r10 = its meta row
    add r14, r7, r3              # r14 = global expert id
    find_slot r10, r14, r12, r15, r8     # r12 = slot j
    mul r6, r5, r1
    add r8, r6, %dye             # r8 = dy row
    add r6, r6, %yraw            # r6 = y_j row
    vcvt.f32.bf16 r27, r8, %hidden
    dot_row_bf16 r31, r27, r6, r28, %hidden
    shl r6, r5, 2
    add r6, r6, %bdw
    copy r6, r31, 4              # dw staged
    mul r15, r26, %topk
    add r15, r15, r12
    shl r15, r15, 2
    add r15, r15, %dw
    put.sm r25, r15, r6, 4       # dw[t][j] at the home
    shl r15, r12, 2
    add r15, r15, r13
    add r15, r15, r10            # r15 = &w_j in the meta row
    scale_row_bf16 r30, r29, r8, r15, %hidden
    copy r8, r30, r1             # dO over dy
next_target:
    add r7, r7, 1
    bra target
next_token:
    add r4, r4, %ntb
    bra token
end:
    fence                        # the dw puts have landed
    exit
