# The tile-streaming expert kernel on rows that are all in place: a SwiGLU expert FFN over E
# experts x `rows` rows each, Y[e] = bf16(bf16(silu(X[e] Wg[e]) * (X[e] Wu[e])) Wd[e]), run by
# persistent thread blocks with the scheduler, job split, L2 convention and tile routines of the
# MoE layers' streaming kernels (overlap_expert, moehub_expert: ../lib/streaming.s,
# ../lib/gemm_tiles.s) - only the wait for a tile's rows (every tile is ready from the start) and
# the send-home of finished tiles are left out. Its TFLOP/s set against the grouped GEMM's
# (grouped_gemm.s, the same rows) is what tile streaming costs on the GPU.
#
# Layout: x [E*rows][H], hh [E*rows][I], y [E*rows][H] bf16; wg/wu [E][I/n][H][n], wd [E][H/n][I][n]
# bf16; jobs (control, zeroed): word 0 jobs taken, then one word per row tile: gate/up jobs done.
# FLOPs = 6 * E * rows * H * I; rows must be a multiple of tile_rows, H and I of n_tile.

# the kernel library (workloads/kernels/lib/): routines several schemes share
.include "lib/gemm_tiles.s"
.include "lib/streaming.s"

.kernel streaming_ffn
.param x
.param wg
.param wu
.param wd
.param hh
.param y
.param jobs
.param experts
.param rows                  # per expert
.param hidden                # H
.param ffn                   # I
.param tile_rows
.param n_tile
.param lag                   # blocks between a group's gate/up and down jobs; 0: stream_lag's choice
.param swizzle               # tiles per group of the job order (../lib/streaming.s)
.smem 160KB                  # G, U [tile][n] f32 + Hq [tile][n] bf16, or Y + Yq
.smem_job 10                 # bytes per element of a tile_rows x n_tile job (fits a smaller SM)
    gemm_smem r8, r9, %tile_rows, %n_tile, r20, r4    # r8 = G or Y; r9 = U or Yq
    add r10, r9, r4              # r10 = Hq
    div r23, %ffn, %n_tile       # r23 = Ju
    div r24, %hidden, %n_tile    # r24 = Jd
    add r22, r23, r24
    mul r22, r22, %swizzle       # r22 = jobs per block
    div r31, %rows, %tile_rows   # r31 = row tiles per expert
    mul r30, r31, %experts       # r30 = row tiles
    mov r29, %lag                # r29 = lag
    bne r29, 0, lag_set
    stream_lag r29, %ntb, r23, r24, %hidden, %ffn, %swizzle, r4
lag_set:
    add r28, r30, %swizzle
    sub r28, r28, 1
    div r28, r28, %swizzle       # r28 = groups
    add r28, r28, r29
    mul r28, r28, r22            # r28 = jobs in all blocks (the last `lag` hold down jobs only)
    shl r25, %hidden, 1          # r25 = x / y row bytes
    shl r26, %ffn, 1             # r26 = hh row bytes
    shl r27, %n_tile, 1          # r27 = bytes of one row of a job's output
job:
    atom.add r1, %gpu, [%jobs], 1    # r1 = my next job
    bge r1, r28, finished
    stream_job r1, r22, r23, %swizzle, r29, r2, r3, gate_up, job, r4
# ---- down job c = r3 - Ju of tile r2: Y[:, c cols] = Hh Wd_c over the full I
    bge r2, r30, job             # a tile past the last (the last group may be smaller)
    sub r3, r3, r23
    shl r11, r2, 3
    add r11, r11, %jobs
    wait.ge [r11+8], r23         # every column of the tile's Hh is there
    div r14, r2, r31             # r14 = expert
    rem r15, r2, r31
    seteq r15, r15, 0
    mul r12, r2, %tile_rows
    mul r16, r12, r26
    add r16, r16, %hh            # r16 = A: the tile's Hh rows
    mul r17, %ffn, %n_tile
    shl r17, r17, 1
    weight_tile_offset r4, r14, r24, r3, r17
    add r5, r4, %wd              # r5 = Wd tile (expert, c)
    mul r7, %tile_rows, %n_tile
    gemm_tile_a_l2 r8, r9, r16, r5, %tile_rows, %n_tile, %ffn, r7, r15, 1
    mul r4, r12, r25
    mul r6, r3, r27
    add r4, r4, r6
    add r4, r4, %y               # r4 = Y[first row][c * n]
    copy2d r4, r9, %tile_rows, r27, r25, r27
    bra job
# ---- gate/up job q = r3 of tile r2: Hh[:, q cols] = silu(X Wg_q) * (X Wu_q)
gate_up:
    bge r2, r30, job             # the last blocks have no gate/up jobs, the last group may be smaller
    div r14, r2, r31             # r14 = expert
    rem r15, r2, r31
    seteq r15, r15, 0            # r15 = 1: the expert's first tile (weights from HBM)
    mul r12, r2, %tile_rows      # r12 = first row
    mul r16, r12, r25
    add r16, r16, %x             # r16 = A: the tile's rows
    mul r17, %hidden, %n_tile
    shl r17, r17, 1
    weight_tile_offset r4, r14, r23, r3, r17
    add r5, r4, %wg
    add r6, r4, %wu
    mul r7, %tile_rows, %n_tile  # r7 = rows * n
    swiglu_tile r8, r9, r10, r16, r5, r6, %tile_rows, %n_tile, %hidden, r7, r3, r15, 1
    mul r4, r12, r26
    mul r6, r3, r27
    add r4, r4, r6
    add r4, r4, %hh              # r4 = Hh[first row][q * n]
    copy2d r4, r10, %tile_rows, r27, r26, r27
    shl r11, r2, 3
    add r11, r11, %jobs
    atom.add r4, %gpu, [r11+8], 1    # gate/up jobs done (after the copy: the TB waited for it)
    bra job
finished:
    exit
