# The backward pass of an MoE layer (workload.layer.passes: training), the kernels every scheme's
# backward shares; a scheme's plan moves the gradient rows with its own mechanism between them
# (moehub_arch/workloads/layer_backward.py; scheme megatron: its all-to-all tables in reverse
# roles). Given dy [T][H] bf16, the gradient of the layer output out[t] = sum_j w[t][j] y_j[t]:
#   moe_combine_bwd   home GPU, per pair (t, j): dw[t][j] = <dy[t], y_j[t]> (fp32 in increasing h:
#                     the router-weight gradient) and dO = bf16(w[t][j] dy[t]) written to the
#                     pair's row of the scheme's send buffer (map[t * k + j]; -1: a pair
#                     dropped in the forward, no row): the combine's backward is a dispatch of
#                     output gradients
#   grouped_bwd_act   per expert tile and column job q of I: G, U recomputed, D = dO Wd^T,
#                     dU = bf16(silu(G) D), dG = bf16(silu'(G) (D U))   (lib/gemm_tiles.s
#                     swiglu_grad_store, shared with tp/ffn_backward.s)
#   grouped_dgrad     dX_e = bf16(dG Wg^T + dU Wu^T) per tile and column job c of H
#   grouped_wgrad     dWg = X^T dG, dWu = X^T dU, dWd = Hh^T dO per expert, fp32, over its rows in
#                     the buffer's order (an expert with no rows: zero gradients)
#   moe_dispatch_bwd  home GPU, after every GPU's rows are back: dx[t] = bf16(sum_j dX(t, j)),
#                     fp32 in slot order: the dispatch's backward is a combine of input gradients
# The expert kernels take grouped_tiles' table (moe_common.s) built with xe = the forward's
# expert-major input rows, he = dg and ye = dO rows: entry t holds expert, rows, X rows, dG rows,
# dO rows, first; the same rows of du, dxe lie at the same offsets from those buffers' bases.
# Weights and gradients use the forward's column-tile layouts: wg, wu [El][I/n][H][n] bf16, wd
# [El][H/n][I][n] bf16; dwg, dwu [El][I/n][H][n] fp32, dwd [El][H/n][I][n] fp32. Every GEMM
# accumulates in fp32 in increasing k (isa/base.yaml mma), so moehub_arch/workloads/moe_backward.py
# reproduces it bit for bit. bacct [4] i64: 0 gradient rows dispatched, 1 rows through the experts'
# backward, 2 rows combined home.
.include "lib/gemm_tiles.s"
.include "lib/combine.s"

.kernel moe_combine_bwd
.param dy                    # [T][H] bf16
.param yhome                 # [T * k][H] bf16: the forward's expert outputs, home
.param topk_w                # [T][k] f32
.param map                   # [T * k] i64: the pair's row in dsend
.param dsend                 # [rows][H] bf16
.param dw                    # [T][k] f32
.param bacct
.param tokens
.param topk
.param hidden
.smem 128KB                  # dy, product, w dy [H] fp32 + out [H] bf16 + the dot (H <= 8192)
    shl r10, %hidden, 1          # r10 = bf16 row bytes
    shl r11, %hidden, 2          # r11 = fp32 row bytes
    mov r20, %smem               # r20 = dy[t] in fp32
    add r21, r20, r11            # r21 = products
    add r22, r21, r11            # r22 = w dy (fp32)
    add r23, r22, r11            # r23 = dO row (bf16)
    add r24, r23, r10            # r24 = the dot product
    mov r9, 0                    # r9 = rows dispatched by this TB
    mov r1, %tb                  # r1 = token
token:
    bge r1, %tokens, end
    mul r2, r1, r10
    add r2, r2, %dy              # r2 = dy[t]
    vcvt.f32.bf16 r20, r2, %hidden
    mul r5, r1, %topk
    mov r3, 0                    # r3 = slot
slot:
    add r6, r5, r3               # r6 = pair t * k + j
    mul r7, r6, r10
    add r7, r7, %yhome
    dot_row_bf16 r24, r20, r7, r21, %hidden
    shl r8, r6, 2
    add r12, r8, %dw
    copy r12, r24, 4             # dw[t][j]
    add r8, r8, %topk_w          # r8 = &w[t][j]
    scale_row_bf16 r23, r22, r2, r8, %hidden
    shl r12, r6, 3
    add r12, r12, %map
    ld r12, [r12]
    blt r12, 0, no_row           # a dropped pair (scheme tutel: beyond capacity): no dO row
    mul r12, r12, r10
    add r12, r12, %dsend
    copy r12, r23, r10           # dO to the pair's send row
    add r9, r9, 1
no_row:
    add r3, r3, 1
    blt r3, %topk, slot
    add r1, r1, %ntb
    bra token
end:
    red.add %gpu, [%bacct], r9
    exit

# grouped_bwd_act: jobs (tile, q), Ju = I / n per tile: G, U recomputed from the tile's X rows
# (the forward's fused gate/up mainloop; weights from HBM for an expert's first tile), D = dO
# Wd^T for columns q n.. over H / n steps (mma.bf16.bt: dO's column block c, stride H, against
# rows q n.. of Wd's column tile c), then dU and dG stored bf16 into du, dg. With `tilecnt` (not
# 0: scheme overlap, its dO rows arriving while the kernel runs) a job first waits until word t
# of tilecnt reaches its tile's rows.
.kernel grouped_bwd_act
.param table
.param tilecnt               # [tiles] i64 rows landed per tile, or 0: every row is in
.param dg                    # [El][cap][I] bf16
.param du
.param wg
.param wu
.param wd
.param bacct
.param hidden
.param ffn
.param tile_rows
.param n_tile
.smem 224KB                  # G, U, D [tile][n] fp32 + out [tile][n] bf16
    swiglu_bwd_smem              # r8 G, r9 U, r10 D, r11 out; r22 = I / n, r23 = H / n
    mul r25, %hidden, %n_tile
    shl r25, r25, 1              # r25 = bytes of a gate/up column tile [H][n]
    mul r26, %ffn, %n_tile
    shl r26, r26, 1              # r26 = bytes of a down column tile [I][n]
    shl r27, %ffn, 1             # r27 = dg / du row bytes
    shl r28, %n_tile, 1          # r28 = bytes of n bf16
    ld r24, [%table]
    mul r24, r24, r22            # r24 = jobs
    mov r29, 0                   # r29 = rows (counted by job q = 0 of each tile)
    mov r0, %tb
job:
    bge r0, r24, end
    split_job r0, r22, r2, r3    # r2 = tile, r3 = q
    add r4, r2, 1
    shl r4, r4, 6
    add r4, r4, %table
    ld.v8 r12, [r4]              # r12 expert, r13 rows, r14 X, r15 dG, r16 dO, r17 first
    beq %tilecnt, 0, landed
    shl r4, r2, 3
    add r4, r4, %tilecnt
    wait.ge [r4], r13            # the tile's dO rows have landed
landed:
    mul r6, r13, %n_tile         # r6 = rows x n
    weight_tile_offset r7, r12, r22, r3, r25
    add r5, r7, %wu              # r5 = Wu tile (expert, q)
    add r7, r7, %wg              # r7 = Wg tile
    swiglu_acc r8, r9, r14, r7, r5, r13, %n_tile, %hidden, r6, r3, r17, 1
    vzero.f32 r10, r6
    mul r7, r12, r23
    mul r7, r7, r26
    add r7, r7, %wd              # r7 = the expert's Wd column tile 0
    mul r5, r3, %n_tile
    mul r5, r5, r28
    add r7, r7, r5               # ... its rows q n..
    mov r5, r16                  # r5 = dO[rows][c n], c = 0
    mov r4, 0                    # r4 = step c
d_step:
    bge r4, r23, d_done
    mma.bf16.bt r10, r5, r7, r13, %n_tile, %n_tile, %hidden, 0
    add r7, r7, r26              # the next column tile of Wd
    add r5, r5, r28
    add r4, r4, 1
    bra d_step
d_done:
    mul r5, r3, r28              # r5 = byte offset of column q n in a dg / du row
    add r7, r15, r5              # r7 = dG rows, column q n
    sub r4, r7, %dg
    add r4, r4, %du              # r4 = the same in du
    swiglu_grad_store r8, r9, r10, r11, r6, r13, r28, r27, r4, r7
    bne r3, 0, counted
    add r29, r29, r13
counted:
    add r0, r0, %ntb
    bra job
end:
    red.add %gpu, [%bacct+8], r29
    exit

# grouped_dgrad: jobs (tile, c), Jd = H / n per tile: dX_e[rows][c n..] = bf16(dG Wg^T + dU Wu^T)
# over the Ju column tiles of Wg, then of Wu (k in increasing order: dG's columns, then dU's).
.kernel grouped_dgrad
.param table
.param dg
.param du
.param wg
.param wu
.param dye                   # [El][cap][H] bf16 (dO rows: the table's third pointer)
.param dxe                   # [El][cap][H] bf16
.param hidden
.param ffn
.param tile_rows
.param n_tile
.smem 96KB                   # acc [tile][n] fp32 + out [tile][n] bf16
    gemm_smem r8, r9, %tile_rows, %n_tile, r20, r21   # r8 = acc, r9 = out
    div r22, %hidden, %n_tile    # r22 = Jd
    div r23, %ffn, %n_tile       # r23 = Ju (steps per weight)
    mul r25, %hidden, %n_tile
    shl r25, r25, 1              # r25 = bytes of a gate/up column tile [H][n]
    shl r27, %hidden, 1          # r27 = dxe row bytes
    shl r28, %n_tile, 1          # r28 = bytes of n bf16
    ld r24, [%table]
    mul r24, r24, r22            # r24 = jobs
    mov r0, %tb
job:
    bge r0, r24, end
    split_job r0, r22, r2, r3    # r2 = tile, r3 = c
    add r4, r2, 1
    shl r4, r4, 6
    add r4, r4, %table
    ld.v8 r12, [r4]              # r12 expert, r13 rows, r14 X, r15 dG, r16 dO, r17 first
    mul r6, r13, %n_tile
    vzero.f32 r8, r6
    mul r10, r3, %n_tile
    mul r10, r10, r28            # r10 = rows c n.. inside a column tile
    mul r11, r12, r23
    mul r11, r11, r25
    add r10, r10, r11            # ... of the expert's first column tile
    mov r4, r15                  # r4 = dG rows, column block 0
    add r5, r10, %wg
    mov r7, 0
g_step:
    bge r7, r23, g_done
    mma.bf16.bt r8, r4, r5, r13, %n_tile, %n_tile, %ffn, 0
    add r4, r4, r28
    add r5, r5, r25
    add r7, r7, 1
    bra g_step
g_done:
    sub r4, r15, %dg
    add r4, r4, %du              # r4 = dU rows
    add r5, r10, %wu
    mov r7, 0
u_step:
    bge r7, r23, u_done
    mma.bf16.bt r8, r4, r5, r13, %n_tile, %n_tile, %ffn, 0
    add r4, r4, r28
    add r5, r5, r25
    add r7, r7, 1
    bra u_step
u_done:
    vcvt.bf16.f32 r9, r8, r6
    sub r4, r16, %dye
    add r4, r4, %dxe
    mul r5, r3, r28
    add r4, r4, r5               # r4 = dxe[rows][c n]
    copy2d r4, r9, r13, r28, r27, r28
    add r0, r0, %ntb
    bra job
end:
    exit

# grouped_wgrad: jobs (expert, gradient, [n][n] tile): for each local expert 3 J jobs,
# J = (I / n)(H / n): dWg (tile q of I, rows hb n.. of H: X[:, hb n..]^T dG[:, q n..]), dWu (the
# same with dU), dWd (tile c of H, rows ib n.. of I: Hh[:, ib n..]^T dO[:, c n..]); each one
# mma.bf16.at over k = the expert's rows (counts[e], from row bases[e] of the expert-major
# buffers: e * cap in an [El][cap] layout, the prefix sum in a packed one), the fp32 accumulator
# stored.
.kernel grouped_wgrad
.param counts                # [El] i64: rows per local expert
.param bases                 # [El] i64: the row index of each local expert's first row
.param xe                    # [rows][H] bf16: the forward's input rows
.param he                    # [El][cap][I] bf16: the forward's activations
.param dg
.param du
.param dye
.param dwg
.param dwu
.param dwd
.param local_experts
.param hidden
.param ffn
.param n_tile
.smem 64KB                   # acc [n][n] fp32
    mov r8, %smem
    mul r20, %n_tile, %n_tile    # r20 = n x n
    shl r21, r20, 2              # r21 = bytes of a gradient tile (fp32)
    div r22, %ffn, %n_tile       # r22 = Ju
    div r23, %hidden, %n_tile    # r23 = Jd
    mul r24, r22, r23            # r24 = J
    mul r25, r24, 3              # r25 = jobs per expert
    mul r9, r25, %local_experts  # r9 = jobs
    shl r26, %n_tile, 1          # r26 = bytes of n bf16
    mov r0, %tb
job:
    bge r0, r9, end
    div r10, r0, r25             # r10 = expert
    rem r2, r0, r25
    div r1, r2, r24              # r1 = 0 dWg, 1 dWu, 2 dWd
    rem r2, r2, r24
    shl r11, r10, 3
    add r11, r11, %counts
    ld r11, [r11]                # r11 = the expert's rows
    vzero.f32 r8, r20
    shl r12, r10, 3
    add r12, r12, %bases
    ld r12, [r12]                # r12 = the expert's first row in the expert-major buffers
    beq r1, 2, down
    div r3, r2, r23              # r3 = q (column tile of I)
    rem r4, r2, r23              # r4 = hb (row block of H)
    ble r11, 0, gate_store
    shl r5, %hidden, 1
    mul r5, r5, r12
    add r5, r5, %xe
    mul r6, r4, r26
    add r5, r5, r6               # r5 = X_e[0][hb n]
    shl r6, %ffn, 1
    mul r6, r6, r12
    mul r7, r3, r26
    add r6, r6, r7
    mov r7, %dg
    beq r1, 0, gate_sel
    mov r7, %du
gate_sel:
    add r6, r6, r7               # r6 = dG_e (dU_e)[0][q n]
    mma.bf16.at r8, r5, r6, %n_tile, %n_tile, r11, %hidden, %ffn
gate_store:
    mov r13, %dwg
    beq r1, 0, gate_dst
    mov r13, %dwu
gate_dst:
    mul r14, r10, r22
    add r14, r14, r3
    mul r14, r14, %hidden        # first row of tile (expert, q) ...
    bra store
down:
    div r3, r2, r22              # r3 = c (column tile of H)
    rem r4, r2, r22              # r4 = ib (row block of I)
    ble r11, 0, down_store
    shl r5, %ffn, 1
    mul r5, r5, r12
    add r5, r5, %he
    mul r6, r4, r26
    add r5, r5, r6               # r5 = Hh_e[0][ib n]
    shl r6, %hidden, 1
    mul r6, r6, r12
    add r6, r6, %dye
    mul r7, r3, r26
    add r6, r6, r7               # r6 = dO_e[0][c n]
    mma.bf16.at r8, r5, r6, %n_tile, %n_tile, r11, %ffn, %hidden
down_store:
    mov r13, %dwd
    mul r14, r10, r23
    add r14, r14, r3
    mul r14, r14, %ffn           # first row of tile (expert, c) ...
store:
    mul r15, r4, %n_tile
    add r14, r14, r15            # ... plus the block's
    mul r14, r14, %n_tile
    shl r14, r14, 2
    add r14, r14, r13
    copy r14, r8, r21
    add r0, r0, %ntb
    bra job
end:
    exit

# moe_dispatch_bwd: waits until done[g] = 1 for every GPU g (its input-gradient rows are back)
# and, with shared experts, until their backward has set sdone, then per token
# dx[t] = bf16(sum_s dxs[s][t] + sum_j dret[map[t * k + j]]), fp32, shared experts first, then
# the slots in order (the forward combine's order).
.kernel moe_dispatch_bwd
.param dret                  # [rows][H] bf16: the pairs' input gradients, home
.param map
.param dx                    # [T][H] bf16
.param dxs                   # [S][T][H] bf16: the shared experts' input gradients
.param one                   # an fp32 1.0
.param done
.param sdone                 # 1 once the shared experts' backward is done
.param bacct
.param shared
.param tokens
.param topk
.param hidden
.smem 64KB                   # acc [H] fp32 + out [H] bf16 (H <= 8192)
    wait_layer_inputs 0, 0, %done, %done
    beq %shared, 0, ready
    wait.ge [%sdone], 1
ready:
    shl r10, %hidden, 1
    shl r11, %hidden, 2
    mov r20, %smem               # r20 = acc
    add r21, r20, r11            # r21 = out
    mov r9, 0
    mov r1, %tb
token:
    bge r1, %tokens, end
    vzero.f32 r20, %hidden
    mov r3, 0
shared_row:
    bge r3, %shared, routed
    mul r7, r3, %tokens
    add r7, r7, r1
    mul r7, r7, r10
    add r7, r7, %dxs
    vaxpy.f32.bf16 r20, r7, %one, %hidden
    add r3, r3, 1
    bra shared_row
routed:
    mul r5, r1, %topk
    mov r3, 0
slot:
    add r6, r5, r3
    shl r7, r6, 3
    add r7, r7, %map
    ld r7, [r7]
    blt r7, 0, no_slot           # a dropped pair: no input-gradient row
    mul r7, r7, r10
    add r7, r7, %dret
    vaxpy.f32.bf16 r20, r7, %one, %hidden
    add r9, r9, 1
no_slot:
    add r3, r3, 1
    blt r3, %topk, slot
    vcvt.bf16.f32 r21, r20, %hidden
    mul r7, r1, r10
    add r7, r7, %dx
    copy r7, r21, r10
    add r1, r1, %ntb
    bra token
end:
    red.add %gpu, [%bacct+16], r9
    exit
