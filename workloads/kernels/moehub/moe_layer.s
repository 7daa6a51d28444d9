# MoE layer with MoE-Hub: destination-agnostic dispatch, expert GEMMs on hub-ready tiles, combine.
#
# Data (per GPU; T tokens, k = top-k, H hidden, I expert FFN width, El local experts, bf16 rows):
#   x [T][H] bf16, topk_idx [T][k] i64, topk_w [T][k] f32, w_gate/w_up [El][I/n][H][n] bf16,
#   w_down [El][H/n][I][n] bf16 (n = n_tile), yhome [T*k][H] bf16 (expert outputs back home), out [T][H] f32.
# acct words (i64): 0 rows sent, 2 rows computed (1 rows received: the AAU counts allocations;
# 3 rows combined: moe_combine in ../common/moe_common.s).
#
# No mediation phase: router blocks call send_to_expert as soon as a token is routed (no count
# exchange, no barrier, no host round trip); the hub allocates window slots (AAU) and raises tile
# readiness (DAM); expert blocks claim ready tiles and run the SwiGLU FFN while later rows are still
# arriving; each output row goes home with send_home (the completion record names GPU and slot).

# the kernel library (workloads/kernels/lib/): routines several schemes share
.include "lib/gemm_tiles.s"
.include "lib/combine.s"
.include "lib/streaming.s"

# The jobs of one tile, shared by moehub_expert (persistent workers fed by claimers) and
# moehub_tile (blocks the DAM starts). Registers, as both kernels set them: r8, r9, r10 the
# shared-memory tiles (gemm_smem); from the tile's queue entry (ld.v8) r12 rows, r13 its first row,
# r14 its first record, r15 local expert, r19 1 on the expert's first tile; r26 the tile's Hh, r27
# its Y; r20 Ju, r21 Jd; r23 y row bytes; r28, r29 gate/up and down weight tile bytes; r30 bytes of
# a job's output row; r4-r7 scratch. `entry`: the queue entry (words 5 and 6 count jobs done).
#   tile_job_registers            the constants above (r20-r24, r28-r30) and the shared-memory
#                                 tiles (r8-r10)
#   tile_buffers tile             r26, r27 = the Hh and Y buffers of a tile (its queue position)
#   tile_gate_up_job q, entry     Hh[:, q cols] = silu(X Wg_q) * (X Wu_q)
#   tile_down_job c, entry        Y[:, c cols] = Hh Wd_c once every gate/up job is done;
#                                 r5 = down jobs done, this one included
#   tile_rows_home                every output row home (send_home), fence, release the tile
.macro tile_job_registers
    div r20, %ffn, %n_tile       # r20 = Ju: gate/up jobs per tile
    div r21, %hidden, %n_tile
    add r22, r20, r21            # r22 = jobs per tile
    gemm_smem r8, r9, %tile_rows, %n_tile, r4, r4    # r8 = G (gate/up jobs) or Y (down jobs); r9 = U, or Yq (down jobs)
    add r10, r9, r4              # r10 = Hq
    shl r23, %hidden, 1          # r23 = y row bytes
    add r24, %ffn, %hidden
    mul r24, r24, %tile_rows
    shl r24, r24, 1              # r24 = bytes of one tile's Hh + Y
    mul r28, %hidden, %n_tile
    shl r28, r28, 1              # r28 = bytes of one gate/up weight tile [H][n]
    mul r29, %ffn, %n_tile
    shl r29, r29, 1              # r29 = bytes of one down weight tile [I][n]
    shl r30, %n_tile, 1          # r30 = bytes of one row of a job's output
.endm

.macro tile_buffers tile
    mul r26, \tile, r24
    add r26, r26, %tiles         # r26 = the tile's Hh
    mul r27, %tile_rows, %ffn
    shl r27, r27, 1
    add r27, r27, r26            # r27 = the tile's Y (bf16)
.endm

.macro tile_gate_up_job q, entry
    weight_tile_offset r4, r15, r20, \q, r28    # gate/up job q
    add r5, r4, %wg              # r5 = Wg tile (expert, q)
    add r6, r4, %wu              # r6 = Wu tile
    mul r7, r12, %n_tile         # r7 = rows * n
    # job 0 reads the arrived rows from HBM, the others via L2
    swiglu_tile r8, r9, r10, r13, r5, r6, r12, %n_tile, %hidden, r7, \q, r19, 1
    mul r5, \q, r30
    add r5, r5, r26              # Hh[:, q cols]
    shl r6, %ffn, 1              # Hh row bytes
    copy2d r5, r10, r12, r30, r6, r30
    atom.add r5, %gpu, [\entry+40], 1   # gate/up jobs done (after the copy: the TB waited for it)
.endm

.macro tile_down_job c, entry
    wait.ge [\entry+40], r20    # every column of Hh is there
    weight_tile_offset r4, r15, r21, \c, r29
    add r5, r4, %wd              # r5 = Wd tile (expert, c)
    mul r7, r12, %n_tile         # r7 = rows * n
    gemm_tile_a_l2 r8, r9, r26, r5, r12, %n_tile, %ffn, r7, r19, 1
    mul r5, \c, r30
    add r5, r5, r27              # Y[:, c cols]
    copy2d r5, r9, r12, r30, r23, r30
    atom.add r5, %gpu, [\entry+48], 1
    add r5, r5, 1
.endm

.macro tile_rows_home
    tile_rows_out row_home
.endm

# tile_rows_out send: every row of the completed tile goes out with the macro `send` (r4 = its
# completion record, r5 = its output, r23 = its bytes), then fence and release the tile.
.macro tile_rows_out send
    mov r6, 0
row_\@:
    mul r4, r6, %record_bytes
    add r4, r4, r14              # the row's completion record
    mul r5, r6, r23
    add r5, r5, r27              # the row's output
    \send
    add r6, r6, 1
    blt r6, r12, row_\@
    fence                        # the rows are out: the window slots may be reused
    mul r4, %gpu, %local_experts
    add r4, r4, r15
    notify_ready.release r4, r13
.endm

.macro row_home
    send_home r4, r5, r23, %yhome
.endm

# tile_rows_forward (internode_combine: per_node): as tile_rows_home, but a row whose origin (its
# completion record's GPU) is on another node goes over NVLink to the origin's local rank on this
# node - the forwarding GPU that received the token's row in dispatch - into yfwd[origin node][home
# slot]; moehub_forward_combine sums them there. Reads %yfwd, %slots, %node_gpus; writes r4-r7, r16-r18.
.macro tile_rows_forward
    tile_rows_out row_forward
.endm

.macro row_forward
    ld r7, [r4]                  # r7 = origin GPU
    div r16, r7, %node_gpus      # r16 = origin node
    div r17, %gpu, %node_gpus    # r17 = this node
    beq r16, r17, home_\@
    ld r18, [r4+8]               # r18 = home slot t * k + j
    rem r7, r7, %node_gpus
    mul r17, r17, %node_gpus
    add r7, r7, r17              # r7 = forwarder (this node, the origin's local rank)
    mul r16, r16, %slots
    add r16, r16, r18
    mul r16, r16, r23
    add r16, r16, %yfwd          # &yfwd[origin node][slot] on the forwarder
    put r7, r16, r5, r23
    bra sent_\@
home_\@:
    row_home
sent_\@:
.endm

# moehub_dispatch: thread block b routes tokens b, b + ntb, ...: for each of the token's k experts
# (k <= 8: one ld.v8 reads them; the register file cannot be indexed, so the stores are unrolled) it
# hands the row to the hub naming only the expert; `home` = t * k + j is the row's slot in yhome.
# route_tokens stores, store: that loop; per token (r16.. its experts, r5 = home of choice 0,
# r2 = its row, r10 = the row's bytes) the macro `stores` hands the rows over with the macro
# `store`: stores_each, one store per choice (store_send: send_to_expert, store_rowsp: st.rowsp;
# expert register, home register, choice j), or stores_grouped below (one store per GPU).
.macro store_send e, home, j
    send_to_expert \e, r2, r10, \home, 0
.endm

.macro store_rowsp e, home, j
    st.rowsp \e, \home, 0, r2, r10    # allocation id e (expert e), row home, the whole row
.endm

# moehub_dispatch_rowsp_nop (workload.layer.moehub.nop_choices): choice j >= %nop_from is stored
# with st.rowsp.nop (a non-critical row: the paper's RPM order sends it after critical rows)
.macro store_rowsp_nop e, home, j
    ble %nop_from, \j, nop_\@
    st.rowsp \e, \home, 0, r2, r10
    bra stored_\@
nop_\@:
    st.rowsp.nop \e, \home, 0, r2, r10
stored_\@:
.endm

.macro stores_each store
    \store r16, r5, 0
    ble %topk, 1, routed_\@
    add r5, r5, 1
    \store r17, r5, 1
    ble %topk, 2, routed_\@
    add r5, r5, 1
    \store r18, r5, 2
    ble %topk, 3, routed_\@
    add r5, r5, 1
    \store r19, r5, 3
    ble %topk, 4, routed_\@
    add r5, r5, 1
    \store r20, r5, 4
    ble %topk, 5, routed_\@
    add r5, r5, 1
    \store r21, r5, 5
    ble %topk, 6, routed_\@
    add r5, r5, 1
    \store r22, r5, 6
    ble %topk, 7, routed_\@
    add r5, r5, 1
    \store r23, r5, 7
routed_\@:
.endm

.macro route_tokens stores, store
    shl r10, %hidden, 1          # r10 = row bytes (bf16)
    mov r1, %tb                  # r1 = token
    mov r9, 0                    # r9 = rows sent by this TB
token_\@:
    bge r1, %tokens, end_\@
    mul r2, r1, r10
    add r2, r2, %x               # r2 = the token's row
    mul r5, r1, %topk            # r5 = home slot of choice 0
    shl r3, r5, 3
    add r3, r3, %topk_idx        # r3 = &topk_idx[t][0]
    ld.v8 r16, [r3]              # r16.. = the token's experts (one vector load; k <= 8)
    \stores \store
    add r9, r9, %topk
    add r1, r1, %ntb
    bra token_\@
end_\@:
    notify_ready.eos %ntb        # the hub ends this GPU's streams once every TB said so
    atom.add r11, %gpu, [%acct], r9
.endm

.kernel moehub_dispatch
.param x
.param topk_idx
.param tokens
.param topk
.param hidden
.param acct
    route_tokens stores_each, store_send
    exit

# moehub_dispatch_rowsp (workload.layer.moehub.stores: row_sparse): the published ISA (MoE-Hub,
# arXiv 2605.05888). The TBs first register allocation id e for every expert e (rowsp.malloc: its
# rows are hidden * 2 bytes), ids tb, tb + ntb, ..., and wait until every TB of the GPU has done
# so (a store must not name an id another TB has yet to register); then each row is one st.rowsp
# naming (expert e's id, row home = t * k + j, offset 0). Registration belongs to set-up (a
# rowspMalloc at model load): here it costs each layer E / ntb registrations and one GPU-local
# barrier.
.macro rowsp_register
    shl r10, %hidden, 1
    mov r1, %tb
register_\@:
    bge r1, %experts, registered_\@
    rowsp.malloc r1, r1, r10     # allocation id e: expert e, rows of hidden * 2 bytes
    add r1, r1, %ntb
    bra register_\@
registered_\@:
    atom.add r11, %gpu, [%sync], 1
    wait.ge [%sync], %ntb        # every id of this GPU's hub is registered
.endm

.kernel moehub_dispatch_rowsp
.param x
.param topk_idx
.param tokens
.param topk
.param hidden
.param acct
.param experts
.param sync                  # one control word: TBs done registering
    rowsp_register
    route_tokens stores_each, store_rowsp
    exit

.kernel moehub_dispatch_rowsp_nop
.param x
.param topk_idx
.param tokens
.param topk
.param hidden
.param acct
.param nop_from              # choices j >= nop_from are non-critical (st.rowsp.nop)
.param experts
.param sync
    rowsp_register
    route_tokens stores_each, store_rowsp_nop
    exit

# moehub_dispatch_grouped / moehub_dispatch_rowsp_grouped (workload.layer.moehub.multi_expert_store:
# an ISA experiment beyond the paper): route_tokens with stores_grouped - one store per token and
# destination GPU names every expert of the token on that GPU, so the row crosses the links once per GPU. After
# ld.v8 r16 (the token's experts), r24 + j = the GPU of choice j (experts sit experts_per_gpu per
# GPU in order); choice j opens a group unless it is past top-k or already stored (r13: choices
# stored), the later choices on its GPU join it (r14: the group's mask, bit j = choice j = register
# r16 + j, home t * k + j), and the group leaves in one store (the macro `store`, taking the mask).
.macro store_experts mask
    send_to_experts r16, \mask, r2, r10, r5, 0
.endm

.macro store_rowsp_experts mask
    st.rowsp.experts r16, \mask, r5, r2, r10    # ids r16 + j = the experts, rows t * k + j
.endm

.macro group_open j, skip
    ble %topk, \j, \skip         # past top-k
    shr r4, r13, \j
    and r4, r4, 1
    bne r4, 0, \skip              # already in an earlier choice's group
    mov r14, 1
    shl r14, r14, \j
.endm

.macro group_add gj, gi, i
    seteq r4, \gj, \gi            # choice i is on the group's GPU: it joins
    shl r4, r4, \i
    or r14, r14, r4
.endm

.macro group_store store, skip
    and r14, r14, r12             # choices past top-k never join
    \store r14
    or r13, r13, r14
\skip:
.endm

.macro stores_grouped store
    group_choices
    div r24, r16, %experts_per_gpu
    div r25, r17, %experts_per_gpu
    div r26, r18, %experts_per_gpu
    div r27, r19, %experts_per_gpu
    div r28, r20, %experts_per_gpu
    div r29, r21, %experts_per_gpu
    div r30, r22, %experts_per_gpu
    div r31, r23, %experts_per_gpu
    group_by_key \store
.endm

.macro group_choices
    mov r12, 1
    shl r12, r12, %topk
    sub r12, r12, 1              # r12 = the token's choices (bits 0 .. k - 1)
.endm

# group_by_key: choices with equal keys (r24 + j = the key of choice j) leave in one store
.macro group_by_key store
    mov r13, 0
    group_open 0, g0_\@
    group_add r24, r25, 1
    group_add r24, r26, 2
    group_add r24, r27, 3
    group_add r24, r28, 4
    group_add r24, r29, 5
    group_add r24, r30, 6
    group_add r24, r31, 7
    group_store \store, g0_\@
    group_open 1, g1_\@
    group_add r25, r26, 2
    group_add r25, r27, 3
    group_add r25, r28, 4
    group_add r25, r29, 5
    group_add r25, r30, 6
    group_add r25, r31, 7
    group_store \store, g1_\@
    group_open 2, g2_\@
    group_add r26, r27, 3
    group_add r26, r28, 4
    group_add r26, r29, 5
    group_add r26, r30, 6
    group_add r26, r31, 7
    group_store \store, g2_\@
    group_open 3, g3_\@
    group_add r27, r28, 4
    group_add r27, r29, 5
    group_add r27, r30, 6
    group_add r27, r31, 7
    group_store \store, g3_\@
    group_open 4, g4_\@
    group_add r28, r29, 5
    group_add r28, r30, 6
    group_add r28, r31, 7
    group_store \store, g4_\@
    group_open 5, g5_\@
    group_add r29, r30, 6
    group_add r29, r31, 7
    group_store \store, g5_\@
    group_open 6, g6_\@
    group_add r30, r31, 7
    group_store \store, g6_\@
    group_open 7, g7_\@
    group_store \store, g7_\@
.endm

.kernel moehub_dispatch_grouped
.param x
.param topk_idx
.param tokens
.param topk
.param hidden
.param acct
.param experts_per_gpu
    route_tokens stores_grouped, store_experts
    exit

.kernel moehub_dispatch_rowsp_grouped
.param x
.param topk_idx
.param tokens
.param topk
.param hidden
.param acct
.param experts_per_gpu
.param experts
.param sync
    rowsp_register
    route_tokens stores_grouped, store_rowsp_experts
    exit

# moehub_dispatch_pernode / moehub_dispatch_rowsp_pernode (system.gpu.hub.moe.internode: per_node,
# components/moehub/forward.py): route_tokens with stores_per_node - a token's experts on another
# node leave in one multi-expert store, which the hub sends once over InfiniBand to that node's
# forwarding hub (the GPU with this GPU's local rank there), and that hub fans the row out over
# NVLink; the experts on this node keep one store per expert (per GPU with local_group =
# experts_per_gpu: workload.layer.moehub.multi_expert_store), as the per-expert dispatch. The key
# of choice j (r24 + j): the expert's node if it is another node, else node + nodes + expert /
# local_group (above every node id); r8 = this GPU's node; r6, r7 scratch.
.macro node_key e, key
    div \key, \e, %experts_per_node     # the expert's node
    seteq r7, \key, r8                   # 1: this GPU's node
    div r6, \e, %local_group
    add r6, r6, %nodes
    mul r6, r6, r7
    add \key, \key, r6
.endm

.macro stores_per_node store
    group_choices
    div r8, %gpu, %gpus_per_node
    node_key r16, r24
    node_key r17, r25
    node_key r18, r26
    node_key r19, r27
    node_key r20, r28
    node_key r21, r29
    node_key r22, r30
    node_key r23, r31
    group_by_key \store
.endm

.kernel moehub_dispatch_pernode
.param x
.param topk_idx
.param tokens
.param topk
.param hidden
.param acct
.param experts_per_node
.param gpus_per_node
.param nodes
.param local_group           # 1: a store per local expert; experts_per_gpu: one per local GPU
    route_tokens stores_per_node, store_experts
    exit

.kernel moehub_dispatch_rowsp_pernode
.param x
.param topk_idx
.param tokens
.param topk
.param hidden
.param acct
.param experts_per_node
.param gpus_per_node
.param nodes
.param local_group
.param experts
.param sync
    rowsp_register
    route_tokens stores_per_node, store_rowsp_experts
    exit

# moehub_claim and moehub_expert: the expert side as two kernels launched together (on their own
# streams), the thread-block specialisation of FlashDMoE-style kernels where the hub does the
# data-availability work:
#  * moehub_claim TB e is the *claimer* of local expert e: it loops on claim_buffer and publishes
#    each ready tile in a GPU-wide tile queue (tq); the last claimer to finish marks the queue's end.
#    A claimer holds no shared memory, so it shares an SM with a GEMM block (a warp of the GEMM
#    kernel would do this on hardware).
#  * every moehub_expert TB is a *worker*: it takes the next job with an atomic counter. A tile has
#    Ju = I / n gate/up jobs and Jd = H / n down jobs (n = n_tile; moe_common.s explains the
#    split): gate/up job q computes Hh[:, q cols] = silu(X Wg_q) * (X Wu_q) into the tile's h
#    buffer; down job c waits until all gate/up jobs of the tile are done, then computes
#    Y[:, c cols] = Hh Wd_c into the tile's y buffer. Jobs are numbered in blocks by the streaming
#    scheduler of ../lib/streaming.s (shared with overlap_expert): block b holds the gate/up jobs of
#    tile b then the down jobs of tile b - lag, so a down job rarely waits. The worker
#    that finishes the tile's last down job sends its rows home (send_home), fences, and releases
#    the tile's window slots. A global queue lets every worker serve every local expert.
#  * when the queue has ended, the GPU's last worker sets done[gpu] = 1 on every GPU.
# tq (control): words 0 tiles published, 1 jobs taken, 2 claimers finished, 3 workers finished;
# then one 64-byte entry per tile: rows, base (window address), records, local expert,
# ready (1 = tile, 2 = end of queue), gate/up jobs done, down jobs done, first (the expert's first
# tile: its weights come from HBM, later tiles read them through the L2).
# tiles (data): per queue entry the tile's Hh [tile][I] bf16, then its Y [tile][H] bf16.
.kernel moehub_claim
.param tq
.param local_experts
.param workers               # TBs of moehub_expert
.param swizzle               # tiles per group of moehub_expert's job order (../lib/streaming.s)
    mul r2, %gpu, %local_experts
    add r2, r2, %tb              # r2 = global expert id
    mov r9, 1                    # r9 = next tile is the expert's first
claim:
    claim_buffer r13, r14, r15, r2   # r13 = rows, r14 = first row, r15 = first record
    beq r13, 0, claimed_all
    atom.add r16, %gpu, [%tq], 1     # r16 = queue position
    add r17, r16, 1
    shl r17, r17, 6
    add r17, r17, %tq            # r17 = its entry
    st [r17], r13
    st [r17+8], r14
    st [r17+16], r15
    st [r17+24], %tb
    st [r17+56], r9
    st [r17+32], 1               # ready, after the descriptor
    mov r9, 0
    bra claim
claimed_all:
    atom.add r16, %gpu, [%tq+16], 1
    sub r18, %ntb, 1
    bne r16, r18, leave          # not the last claimer to finish
    ld r19, [%tq]                # every tile is published: mark the end after the last one,
    shl r21, %workers, 1         # 2 * workers + 6 * G + 3 of them (G = swizzle): workers read
    mul r20, %swizzle, 6         # entries up to (lag + 3) * G + workers / Jd past the last tile,
    add r21, r21, r20            # and lag * G <= workers + 2 * G (../lib/streaming.s)
    add r21, r21, 3
    mov r20, 0
end_marks:
    add r22, r19, r20
    add r22, r22, 1
    shl r22, r22, 6
    add r22, r22, %tq
    st [r22+32], 2
    add r20, r20, 1
    blt r20, r21, end_marks
leave:
    exit

# moehub_expert's work, shared with moehub_expert_combnode: `rows_out` sends a completed tile's
# rows on (tile_rows_home, or tile_rows_forward for internode_combine: per_node).
.macro expert_worker_params
.param wg                    # [El][I/n][H][n] bf16
.param wu
.param wd                    # [El][H/n][I][n] bf16
.param tq
.param tiles
.param yhome
.param acct
.param done
.param hidden
.param ffn
.param local_experts
.param record_bytes
.param tile_rows
.param n_tile
.param swizzle               # tiles per group of the job order (../lib/streaming.s)
.endm

.macro expert_worker rows_out
    tile_job_registers
    stream_lag r31, %ntb, r20, r21, %hidden, %ffn, %swizzle, r4    # r31 = lag
    mov r25, 0                   # r25 = rows this worker completed
job:
    atom.add r1, %gpu, [%tq+8], 1    # r1 = my next job
    mul r5, r22, %swizzle        # r5 = jobs per block (r22: jobs per tile)
    stream_job r1, r5, r20, %swizzle, r31, r2, r3, entry, job, r4    # r2 = tile; r3 = job in tile
entry:
    add r11, r2, 1
    shl r11, r11, 6
    add r11, r11, %tq            # r11 = the tile's entry
    wait.ne [r11+32], 0
    ld.v8 r12, [r11]             # r12 rows, r13 base, r14 records, r15 expert, r16 ready, r17, r18, r19 first
    beq r16, 2, ended
    tile_buffers r2
    bge r3, r20, down
    tile_gate_up_job r3, r11
    bra job
down:
    sub r3, r3, r20              # r3 = output column tile c
    tile_down_job r3, r11
    bne r5, r21, job             # not the tile's last down job
    \rows_out
    add r25, r25, r12
    bra job
ended:
    # the queue ended at this entry. A gate/up job of a tile that does not exist shares its block
    # with the down jobs of the last real tiles, which later jobs still have to do: skip it. So
    # does a down job of an end mark in a group that also holds real tiles (its down jobs are
    # column outer). A down job of a group whose first tile is an end mark comes after every real
    # job: this worker is done.
    blt r3, r20, job
    rem r4, r2, %swizzle
    sub r4, r2, r4               # r4 = the group's first tile (published before this end mark)
    add r4, r4, 1
    shl r4, r4, 6
    add r4, r4, %tq
    ld r5, [r4+32]
    bne r5, 2, job
finished:
    red.add %gpu, [%acct+16], r25    # acct word 2: rows computed
    atom.add r5, %gpu, [%tq+24], 1
    sub r6, %ntb, 1
    bne r5, r6, done_exit        # not the GPU's last worker
    tell_every_gpu %done, r6, r7
done_exit:
    exit
.endm

.kernel moehub_expert
    expert_worker_params
.smem 160KB                  # G, U [tile][n] f32 + Hq [tile][n] bf16, or Y + Yq
.smem_job 10                 # bytes per element of a tile_rows x n_tile job (fits a smaller SM)
    expert_worker tile_rows_home

# moehub_expert_combnode (system.gpu.hub.moe.internode_combine: per_node): moehub_expert whose
# rows for tokens of another node go to that token's forwarder here (tile_rows_forward).
.kernel moehub_expert_combnode
    expert_worker_params
.param yfwd                  # [N][T*k][H] bf16 on the forwarder: the outputs of origin node m's slots
.param slots                 # T*k
.param node_gpus
.smem 160KB                  # G, U [tile][n] f32 + Hq [tile][n] bf16, or Y + Yq
.smem_job 10                 # bytes per element of a tile_rows x n_tile job (fits a smaller SM)
    expert_worker tile_rows_forward

# moehub_tile (system.gpu.hub.moe.dam.consumers: launch): the consumers the DAM starts, in two
# thread-block groups per ready tile - its Ju gate/up blocks, then its Jd down blocks once every
# gate/up block exited (the group's counter; the down job's wait.ge then passes at once) - and one
# last block (MoE-Hub, arXiv 2605.05888: the DAM dispatches a tile's consumer thread blocks; no
# claimer polls). Block b (the index the DAM gives it) does
# job b mod (Ju + Jd) of the (b / (Ju + Jd))-th tile started, whose descriptor the DAM wrote in
# tq (components/moehub/dam.py: word 0 tiles started, word 1 the final block count, word 2 blocks
# finished here; 64-byte entries from byte 64, as the claim queue's). The last block waits for
# every other one and tells every GPU that this GPU's experts are done.
# moehub_tile's work, shared with moehub_tile_combnode: `rows_out` as expert_worker's.
.macro tile_block_params
.param tq                    # first: the DAM's tile descriptor queue
.param wg
.param wu
.param wd
.param tiles
.param yhome
.param acct
.param done
.param hidden
.param ffn
.param local_experts
.param record_bytes
.param tile_rows
.param n_tile
.endm

.macro tile_block rows_out
    ld r1, [%tq+8]               # the final block count (0 until every tile was started)
    sub r1, r1, 1
    beq %tb, r1, last
    tile_job_registers
    div r2, %tb, r22             # r2 = the tile, in start order
    mul r3, r2, r22
    sub r3, %tb, r3              # r3 = the job in the tile
    add r11, r2, 1
    shl r11, r11, 6
    add r11, r11, %tq            # r11 = the tile's descriptor
    ld.v8 r12, [r11]             # r12 rows, r13 base, r14 records, r15 expert, r19 first
    tile_buffers r2
    bge r3, r20, down
    tile_gate_up_job r3, r11
    bra finished
down:
    sub r3, r3, r20              # r3 = output column tile c
    tile_down_job r3, r11
    bne r5, r21, finished        # not the tile's last down job
    \rows_out
    red.add %gpu, [%acct+16], r12    # acct word 2: rows computed
finished:
    atom.add r5, %gpu, [%tq+16], 1
    exit
last:
    wait.ge [%tq+16], r1         # every other block finished (r1 of them)
    tell_every_gpu %done, r6, r7
    exit
.endm

.kernel moehub_tile
    tile_block_params
.smem 160KB                  # as moehub_expert
.smem_job 10                 # bytes per element of a tile_rows x n_tile job (fits a smaller SM)
    tile_block tile_rows_home

# moehub_tile_combnode (system.gpu.hub.moe.internode_combine: per_node): moehub_tile whose rows
# for tokens of another node go to that token's forwarder here (tile_rows_forward).
.kernel moehub_tile_combnode
    tile_block_params
.param yfwd                  # as moehub_expert_combnode's
.param slots
.param node_gpus
.smem 160KB                  # as moehub_expert
.smem_job 10                 # bytes per element of a tile_rows x n_tile job (fits a smaller SM)
    tile_block tile_rows_forward

# ---- the per-node combine (system.gpu.hub.moe.internode_combine: per_node) ---------------------
# DeepEP's internode combine on MoE-Hub rows (csrc/kernels/internode.cu: outputs for one token from
# the experts of one node are summed on that node, one row crosses InfiniBand). L = %node_gpus GPUs
# per node, N nodes, me = (n0, l0); GPU g = node g / L, local rank g % L; rb = bf16 row bytes.
# Buffers (per GPU, symmetric): yfwd [N][T*k][H] bf16 (tile_rows_forward), cf_idx [N][T][k] i64 and
# cf_w [N][T][k] f32 (origin (m, l0)'s routing, fetched here), cf_stage [N][T][H] bf16 (the rows
# before their put), ynode [T][N][H] bf16 (at home: token t's row from node n), cf_ctl i64
# (word 0 routing fetched, word 1 thread blocks finished), fdone [P] i64 (fdone[f] = 1 on an
# origin: forwarder f's rows are home).
#
# moehub_forward_combine: thread block 0 reads every other node's origin (m, l0) routing ids and
# weights (two RDMA reads each; they overlap the expert phase); then, once every GPU of this node
# is done (done[g]: its rows landed here), work item w = m * T + t (round-robin over the thread
# blocks, m != n0): the fp32 sum, from 0, of w_j * yfwd[m][t*k + j] over the slots j ascending whose
# expert is on this node, rounded to bf16 and put (RDMA) into ynode[t][n0] on the origin. The last
# thread block to finish raises fdone[me] on every origin.
.kernel moehub_forward_combine
.param yfwd
.param cf_idx
.param cf_w
.param cf_stage
.param cf_ctl
.param ynode
.param topk_idx
.param topk_w
.param done
.param fdone
.param tokens
.param topk
.param hidden
.param node_gpus
.param experts_per_node
.smem 28KB                   # acc [H] f32
    shl r1, %hidden, 1           # r1 = rb
    mul r2, %tokens, %topk       # r2 = T*k
    rem r3, %gpu, %node_gpus     # r3 = l0
    div r4, %gpu, %node_gpus     # r4 = n0
    div r5, %ngpu, %node_gpus    # r5 = N
    mov r10, %smem               # r10 = acc
    bne %tb, 0, fetched
    mov r6, 0                    # r6 = origin node m
fetch:
    beq r6, r4, fetch_next
    mul r7, r6, %node_gpus
    add r7, r7, r3               # r7 = origin (m, l0)
    mul r8, r6, r2
    shl r9, r8, 3
    add r9, r9, %cf_idx
    shl r11, r2, 3
    get r7, r9, %topk_idx, r11   # its ids
    shl r9, r8, 2
    add r9, r9, %cf_w
    shl r11, r2, 2
    get r7, r9, %topk_w, r11     # its weights
fetch_next:
    add r6, r6, 1
    blt r6, r5, fetch
    fence
    atom.add r6, %gpu, [%cf_ctl], 1
fetched:
    wait.ge [%cf_ctl], 1
    mul r6, r4, %node_gpus       # every GPU of this node has sent its rows here
    shl r8, r6, 3
    add r8, r8, %done
    wait.all.eq [r8], 1, %node_gpus  # done[node's GPUs] (a lane per flag)
    mul r12, r5, %tokens         # r12 = work items
    mov r13, %tb                 # r13 = w
item:
    bge r13, r12, items_done
    div r14, r13, %tokens        # r14 = m
    rem r15, r13, %tokens        # r15 = t
    beq r14, r4, item_next
    vzero.f32 r10, %hidden
    mov r16, 0                   # r16 = slots summed
    mul r17, r14, r2
    mul r18, r15, %topk
    add r17, r17, r18            # r17 = m*T*k + t*k (slot 0 of the token)
    mov r18, 0                   # r18 = j
slot:
    add r19, r17, r18
    shl r20, r19, 3
    add r20, r20, %cf_idx
    ld r21, [r20]                # expert of slot j
    div r21, r21, %experts_per_node
    bne r21, r4, slot_next       # not on this node
    mul r20, r19, r1
    add r20, r20, %yfwd
    shl r22, r19, 2
    add r22, r22, %cf_w
    vaxpy.f32.bf16 r10, r20, r22, %hidden
    add r16, r16, 1
slot_next:
    add r18, r18, 1
    blt r18, %topk, slot
    beq r16, 0, item_next        # none of the token's experts here
    mul r20, r13, r1
    add r20, r20, %cf_stage      # its staging row
    vcvt.bf16.f32 r20, r10, %hidden
    mul r21, r15, r5
    add r21, r21, r4
    mul r21, r21, r1
    add r21, r21, %ynode         # &ynode[t][n0] on the origin
    mul r22, r14, %node_gpus
    add r22, r22, r3             # r22 = origin (m, l0)
    put r22, r21, r20, r1
item_next:
    add r13, r13, %ntb
    bra item
items_done:
    fence                        # this block's rows are home
    atom.add r6, %gpu, [%cf_ctl+8], 1
    sub r7, %ntb, 1
    bne r6, r7, leave
    shl r8, %gpu, 3
    add r8, r8, %fdone           # &fdone[me] (the same address on every GPU)
    mov r6, 0
tell:
    beq r6, r4, tell_next
    mul r7, r6, %node_gpus
    add r7, r7, r3
    flag.set r7, [r8], 1
tell_next:
    add r6, r6, 1
    blt r6, r5, tell
leave:
    exit

# moe_combine_pernode: moe_combine for internode_combine: per_node. Waits for the shared experts,
# every GPU's done and every forwarder's fdone (the GPUs (m, l0), m != n0); then per token
# out[t] = sum_s ys[s][t] + the node rows, nodes ascending: for this node the fp32 sum from 0 of
# w_j * yhome[t*k + j] over its slots here, rounded to bf16 as the forwarders round theirs; for
# another node ynode[t][n] when it holds any of the token's experts (the reference's
# combine="node_slots").
.kernel moe_combine_pernode
.param out
.param yhome
.param ynode
.param ys
.param topk_idx
.param topk_w
.param one
.param done
.param fdone
.param acct
.param tokens
.param topk
.param hidden
.param shared
.param shared_tbs
.param node_gpus
.param experts_per_node
.smem 42KB                   # acc [H] f32, then the node row [H] bf16
    wait_layer_inputs %shared, %shared_tbs, %acct, %done
    rem r12, %gpu, %node_gpus    # r12 = l0
    div r13, %gpu, %node_gpus    # r13 = n0
    div r14, %ngpu, %node_gpus   # r14 = N
    mov r1, 0
forwarders:
    beq r1, r13, forwarders_next
    mul r2, r1, %node_gpus
    add r2, r2, r12
    shl r2, r2, 3
    add r2, r2, %fdone
    wait.eq [r2], 1
forwarders_next:
    add r1, r1, 1
    blt r1, r14, forwarders
    shl r10, %hidden, 1          # r10 = bf16 row bytes
    shl r11, %hidden, 2          # r11 = f32 row bytes
    mov r15, %smem               # r15 = acc
    add r16, r15, r11            # r16 = the bf16 node row
    mov r1, %tb                  # r1 = token
    mov r9, 0                    # r9 = routed rows combined by this TB
token:
    bge r1, %tokens, end
    start_output_row r2, r1, %out, r11, %shared, %ys, %one, %tokens, r10, %hidden, r3, r4
    mul r5, r1, %topk            # r5 = slot of choice 0
    mov r17, 0                   # r17 = node
node:
    bne r17, r13, zeroed         # only this node's slots are summed here
    vzero.f32 r15, %hidden
zeroed:
    mov r18, 0                   # r18 = slots on the node
    mov r3, 0                    # r3 = j
choice:
    add r6, r5, r3
    shl r7, r6, 3
    add r7, r7, %topk_idx
    ld r7, [r7]
    div r7, r7, %experts_per_node
    bne r7, r17, choice_next
    add r18, r18, 1
    bne r17, r13, choice_next    # another node's row comes summed
    mul r7, r6, r10
    add r7, r7, %yhome
    shl r8, r6, 2
    add r8, r8, %topk_w
    vaxpy.f32.bf16 r15, r7, r8, %hidden
choice_next:
    add r3, r3, 1
    blt r3, %topk, choice
    beq r18, 0, node_next
    bne r17, r13, remote
    vcvt.bf16.f32 r16, r15, %hidden
    vaxpy.f32.bf16 r2, r16, %one, %hidden
    bra node_next
remote:
    mul r7, r1, r14
    add r7, r7, r17
    mul r7, r7, r10
    add r7, r7, %ynode           # ynode[t][node]
    vaxpy.f32.bf16 r2, r7, %one, %hidden
node_next:
    add r17, r17, 1
    blt r17, r14, node
    add r9, r9, %topk
    add r1, r1, %ntb
    bra token
end:
    atom.add r13, %gpu, [%acct+24], r9   # acct word 3: rows combined
    exit
