# The training backward of the dense SwiGLU FFN under tensor parallelism (workload.block kind ffn,
# pass training; moehub_arch/workloads/block.py). GPU r's forward was H_r = bf16(silu(X Wg_r) *
# (X Wu_r)) and Y_r = H_r Wd_r (column-parallel gate/up, row-parallel down; Megatron-LM, Shoeybi et
# al., arXiv 1909.08053, section 3). Given dY, the gradient of the block output (replicated: the
# forward's all-reduce makes every rank's output the same, so its backward is the identity), the
# backward is
#   D   = dY Wd_r^T                              (dgrad of the down GEMM)
#   dU  = silu(G) * D,  dG = silu'(G) * (D * U)  (SwiGLU's backward; G = X Wg_r, U = X Wu_r)
#   dX_r = dG Wg_r^T + dU Wu_r^T                 (dgrad of gate/up; then dX = all-reduce of dX_r:
#                                                 the backward of the column-parallel input copy)
#   dWg_r = X^T dG, dWu_r = X^T dU, dWd_r = H_r^T dY   (the weight gradients, fp32: Megatron-LM
#                                                 accumulates them in an fp32 main_grad)
# G and U are recomputed from X here (the forward keeps X and H_r; keeping G and U as well would
# cost 2 T I/t words more per layer: assumption, the FFN's activation recomputation).
#
# Layouts (per GPU; n = n_tile, I = ffn, the per-GPU FFN width): x, dy [T][H] bf16; wg, wu
# [I/n][H][n] bf16, wd [H/n][I][n] bf16 (the forward's column tiles, ../common/moe_common.s);
# hs [T][I] bf16 (the forward's H_r); dg, du [T][I] bf16; dxr [T][H] bf16; dwg, dwu [I/n][H][n]
# fp32 and dwd [H/n][I][n] fp32 (the weights' layouts). Every GEMM accumulates in fp32 in
# increasing k (isa/base.yaml mma), so the NumPy reference (block.py) reproduces it bit for bit.
# Each kernel takes its jobs in a grid-stride loop (thread block %tb takes jobs %tb, %tb + %ntb...).
.include "lib/gemm_tiles.s"

# ffn_bwd_act: one job per (row tile, column job q of I): G, U recomputed ([rows][n] fp32, the
# fused gate/up mainloop of lib/gemm_tiles.s: A read once), D = dY[rows] Wd^T[:, q cols] over H in
# H / n steps (mma.bf16.bt: dY's column block c of the rows, stride H, against rows q n.. of Wd's
# column tile c, [n][n] contiguous), then dU and dG stored as bf16 into du, dg.
.kernel ffn_bwd_act
.param x
.param dy
.param wg
.param wu
.param wd
.param dg
.param du
.param tokens
.param hidden
.param ffn
.param tile_rows
.param n_tile
.smem 224KB                  # G, U, D [tile][n] fp32 + out [tile][n] bf16
    swiglu_bwd_smem              # r8 G, r9 U, r10 D, r11 out; r22 = I / n, r23 = H / n
    add r1, %tokens, %tile_rows
    sub r1, r1, 1
    div r24, r1, %tile_rows      # r24 = row tiles
    mul r24, r24, r22            # r24 = jobs
    mul r25, %hidden, %n_tile
    shl r25, r25, 1              # r25 = bytes of a gate/up column tile [H][n]
    mul r26, %ffn, %n_tile
    shl r26, r26, 1              # r26 = bytes of a down column tile [I][n]
    shl r27, %ffn, 1             # r27 = dg / du row bytes
    shl r28, %n_tile, 1          # r28 = bytes of a job's output row
    mov r0, %tb
job:
    bge r0, r24, end
    split_job r0, r22, r2, r3    # r2 = row tile, r3 = q
    mul r4, r2, %tile_rows       # r4 = first row
    sub r5, %tokens, r4
    min r5, r5, %tile_rows       # r5 = rows
    mul r6, r5, %n_tile          # r6 = rows x n
    shl r7, %hidden, 1
    mul r7, r7, r4
    add r12, r7, %x              # r12 = X rows
    add r13, r7, %dy             # r13 = dY rows
    mul r14, r3, r25
    add r15, r14, %wu            # r15 = Wu tile q
    add r14, r14, %wg            # r14 = Wg tile q
    swiglu_acc r8, r9, r12, r14, r15, r5, %n_tile, %hidden, r6, r3, r2, 0
    vzero.f32 r10, r6
    mul r14, r3, %n_tile
    mul r14, r14, r28
    add r14, r14, %wd            # r14 = rows q n.. of Wd's column tile 0
    mov r16, 0                   # r16 = step c
d_step:
    bge r16, r23, d_done
    mul r17, r16, r28
    add r17, r17, r13            # r17 = dY[rows][c n ..]
    mma.bf16.bt r10, r17, r14, r5, %n_tile, %n_tile, %hidden, 0
    add r14, r14, r26            # the next column tile of Wd
    add r16, r16, 1
    bra d_step
d_done:
    mul r17, r4, r27
    mul r18, r3, r28
    add r17, r17, r18            # r17 = byte offset of [first row][q n] in dg / du
    add r18, r17, %du
    add r19, r17, %dg
    swiglu_grad_store r8, r9, r10, r11, r6, r5, r28, r27, r18, r19
    add r0, r0, %ntb
    bra job
end:
    exit

# dgrad_steps acc, a, w, a_off, w_off, rows, steps, tile_bytes, nbytes, t1, t2, t3
#   acc += A W^T over `steps` column blocks: A = `rows` rows of a [T][ffn] bf16 matrix at a + a_off
#   (its column blocks of n, stride ffn), W^T block c = the [n][n] rows at w_off of column tile c
#   of w (tiles tile_bytes apart); nbytes = 2 n. The kernel declares ffn and n_tile. Writes t1-t3.
.macro dgrad_steps acc, a, w, a_off, w_off, rows, steps, tile_bytes, nbytes, t1, t2, t3
    add \t1, \a, \a_off
    add \t2, \w, \w_off
    mov \t3, 0
step_\@:
    bge \t3, \steps, done_\@
    mma.bf16.bt \acc, \t1, \t2, \rows, %n_tile, %n_tile, %ffn, 0
    add \t1, \t1, \nbytes
    add \t2, \t2, \tile_bytes
    add \t3, \t3, 1
    bra step_\@
done_\@:
.endm

# ffn_dgrad: dX_r = bf16(dG Wg^T + dU Wu^T), one job per (row tile, column job c of H): over the
# I / n column tiles of Wg and then of Wu (k in increasing order: dG's columns, then dU's), an
# mma.bf16.bt of the rows' column block (stride I) against rows c n.. of the tile ([n][n]).
.kernel ffn_dgrad
.param dg
.param du
.param wg
.param wu
.param dxr
.param tokens
.param hidden
.param ffn
.param tile_rows
.param n_tile
.smem 96KB                   # acc [tile][n] fp32 + out [tile][n] bf16
    gemm_smem r8, r9, %tile_rows, %n_tile, r20, r21   # r8 = acc, r9 = out
    div r22, %hidden, %n_tile    # r22 = column jobs per row tile
    div r23, %ffn, %n_tile       # r23 = steps per weight
    add r1, %tokens, %tile_rows
    sub r1, r1, 1
    div r24, r1, %tile_rows
    mul r24, r24, r22            # r24 = jobs
    mul r25, %hidden, %n_tile
    shl r25, r25, 1              # r25 = bytes of a gate/up column tile [H][n]
    shl r26, %ffn, 1             # r26 = dg / du row bytes
    shl r27, %hidden, 1          # r27 = dxr row bytes
    shl r28, %n_tile, 1          # r28 = bytes of a job's output row
    mov r0, %tb
job:
    bge r0, r24, end
    split_job r0, r22, r2, r3    # r2 = row tile, r3 = c
    mul r4, r2, %tile_rows
    sub r5, %tokens, r4
    min r5, r5, %tile_rows       # r5 = rows
    mul r6, r5, %n_tile
    vzero.f32 r8, r6
    mul r7, r4, r26              # r7 = byte offset of the rows in dg / du
    mul r10, r3, %n_tile
    mul r10, r10, r28            # r10 = byte offset of rows c n.. in a column tile
    dgrad_steps r8, %dg, %wg, r7, r10, r5, r23, r25, r28, r11, r12, r13
    dgrad_steps r8, %du, %wu, r7, r10, r5, r23, r25, r28, r11, r12, r13
    vcvt.bf16.f32 r9, r8, r6
    mul r11, r4, r27
    mul r12, r3, r28
    add r11, r11, r12
    add r11, r11, %dxr           # r11 = dxr[first row][c n]
    copy2d r11, r9, r5, r28, r27, r28
    add r0, r0, %ntb
    bra job
end:
    exit

# ffn_wgrad: the three weight gradients in fp32, one job per [n][n] tile of a weight's column
# tile: jobs 0 .. J-1 dWg (tile q of I, rows hb n.. of H: X[:, hb n..]^T dG[:, q n..]), J .. 2J-1
# dWu (the same with dU), 2J .. 3J-1 dWd (tile c of H, rows ib n.. of I: H_r[:, ib n..]^T
# dY[:, c n..]), J = (I / n)(H / n); each one mma.bf16.at over k = T (A = the activation's column
# block as stored, [T][n] with its row stride; B the gradient's), the fp32 accumulator stored.
.kernel ffn_wgrad
.param x
.param dy
.param hs
.param dg
.param du
.param dwg
.param dwu
.param dwd
.param tokens
.param hidden
.param ffn
.param n_tile
.smem 64KB                   # acc [n][n] fp32
    mov r8, %smem
    mul r20, %n_tile, %n_tile    # r20 = n x n
    shl r21, r20, 2              # r21 = bytes of a gradient tile (fp32)
    div r22, %ffn, %n_tile
    div r23, %hidden, %n_tile
    mul r24, r22, r23            # r24 = J
    mul r25, r24, 3              # r25 = jobs
    shl r26, %n_tile, 1          # r26 = bytes of n bf16 columns
    mov r0, %tb
job:
    bge r0, r25, end
    div r1, r0, r24              # r1 = 0 dWg, 1 dWu, 2 dWd
    rem r2, r0, r24
    vzero.f32 r8, r20
    beq r1, 2, down
    div r3, r2, r23              # r3 = q (column tile of I)
    rem r4, r2, r23              # r4 = hb (row block of H)
    mul r5, r4, r26
    add r5, r5, %x               # r5 = X[0][hb n]
    mul r6, r3, r26
    mov r7, %dg
    mov r9, %dwg
    beq r1, 0, gate
    mov r7, %du
    mov r9, %dwu
gate:
    add r6, r6, r7               # r6 = dG (dU)[0][q n]
    mma.bf16.at r8, r5, r6, %n_tile, %n_tile, %tokens, %hidden, %ffn
    mul r10, r3, %hidden         # tile q's first row ...
    bra store
down:
    div r3, r2, r22              # r3 = c (column tile of H)
    rem r4, r2, r22              # r4 = ib (row block of I)
    mul r5, r4, r26
    add r5, r5, %hs              # r5 = H_r[0][ib n]
    mul r6, r3, r26
    add r6, r6, %dy              # r6 = dY[0][c n]
    mma.bf16.at r8, r5, r6, %n_tile, %n_tile, %tokens, %ffn, %hidden
    mov r9, %dwd
    mul r10, r3, %ffn            # tile c's first row ...
store:
    mul r11, r4, %n_tile
    add r10, r10, r11            # ... plus the block's: the tile's first row in the weight
    mul r10, r10, %n_tile
    shl r10, r10, 2
    add r10, r10, r9
    copy r10, r8, r21
    add r0, r0, %ntb
    bra job
end:
    exit
