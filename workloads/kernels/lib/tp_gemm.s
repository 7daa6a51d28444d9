# Kernel library: the job loop of the tensor-parallel GEMMs (tp/transformer.s tp_gemm, and the
# CAIS-fused GEMMs of tp/cais.s tp_gemm_cais, which add a gather before a job or a scatter after
# it). Y = bf16(A W), A [T][K] bf16 row-major, W [N/n][K][n] bf16 column tiles (the weight layout
# of ../common/moe_common.s). Y is stored as N / group blocks of [T][group] (column c of row t at
# (c / group) T group + t group + c % group): group = N is plain row-major [T][N] (the output
# projection); group = dh puts every head's Q, K and V in its own contiguous [T][dh] block, which
# the attention kernel reads as tiles (the QKV projection). n divides group.
# Jobs: row tile major (jobs of one row tile share A through the L2, lib/gemm_tiles.s); weights
# are read from HBM by row tile 0 and through the L2 after.
#
# The calling kernel declares the params a, w, y, tokens, k, ncols (N), n_tile, tile_rows, group
# and .smem 96KB (acc fp32 [tile_rows][n] + out bf16 [tile_rows][n]).
#   tp_gemm_setup                     registers of the loop: r8, r9 shared-memory tiles, r20, r21,
#                                     r22 column jobs per row tile, r23 row tiles, r24 jobs,
#                                     r25 A row bytes, r26 weight tile bytes, r27 Y row bytes in a
#                                     group, r28 a job's output row bytes; r0 = %tb (the first job)
#   tp_gemm_split                     job r0 -> r2 row tile, r3 column job, r4 first row, r5 rows,
#                                     r6 rows x n
#   tp_gemm_compute                   the job's tile into shared memory (r7, r10 written)
#   tp_gemm_store                     the tile to Y; r12 = its first element in Y (r11 written)
# Registers r13 .. r19 and r29 .. r31 are free for the caller.
.include "lib/gemm_tiles.s"

.macro tp_gemm_setup
    gemm_smem r8, r9, %tile_rows, %n_tile, r20, r21
    div r22, %ncols, %n_tile         # r22 = column jobs per row tile
    add r1, %tokens, %tile_rows
    sub r1, r1, 1
    div r23, r1, %tile_rows          # r23 = row tiles
    mul r24, r22, r23                # r24 = jobs
    shl r25, %k, 1                   # r25 = A row bytes
    mul r26, %k, %n_tile
    shl r26, r26, 1                  # r26 = bytes of a weight column tile
    shl r27, %group, 1               # r27 = Y row bytes within a group
    shl r28, %n_tile, 1              # r28 = bytes of a job's output row
    mov r0, %tb
.endm

.macro tp_gemm_split
    split_job r0, r22, r2, r3        # r2 = row tile, r3 = column job
    mul r4, r2, %tile_rows           # r4 = first row
    sub r5, %tokens, r4
    min r5, r5, %tile_rows           # r5 = rows
    mul r6, r5, %n_tile              # r6 = rows x n
.endm

.macro tp_gemm_compute
    mul r7, r4, r25
    add r7, r7, %a                   # r7 = A
    mul r10, r3, r26
    add r10, r10, %w                 # r10 = W column tile
    gemm_tile r8, r9, r7, r10, r5, %n_tile, %k, r6, r3, r2, 0
.endm

.macro tp_gemm_store
    mul r11, r3, %n_tile             # r11 = first column
    div r12, r11, %group
    rem r11, r11, %group
    mul r12, r12, %tokens
    add r12, r12, r4
    mul r12, r12, r27
    shl r11, r11, 1
    add r12, r12, r11
    add r12, r12, %y                 # r12 = Y[group block][first row][column in group]
    copy2d r12, r9, r5, r28, r27, r28
.endm
