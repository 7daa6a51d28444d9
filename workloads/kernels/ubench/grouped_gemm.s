# Grouped BF16 GEMM: for each of `experts` experts, C[e] (rows x n, bf16) = A[e] (rows x k, bf16)
# @ B[e] (k x n, bf16), fp32 accumulation. The same job split, weight layout and L2 convention as
# the MoE layers' expert GEMMs (../common/moe_common.s, ../deepep/deepep.s):
#   - a job is one row tile (tile_rows rows) x one column tile (n_tile columns) over the full k;
#     jobs are dealt round-robin to the thread blocks in swizzle_job's order (../lib/gemm_tiles.s):
#     groups of `swizzle` row tiles, column job outer, row tile inner, so the blocks running at
#     one time share a few weight column tiles (swizzle = 1: row tile by row tile);
#   - B is stored as column tiles [e][n / n_tile][k][n_tile] so a job's B operand is contiguous;
#   - A is read through the L2 unless the job is its row tile's first (q = 0: the first reader);
#     B through the L2 unless the job is on its expert's first row tile (first touch of weights);
#   - the fp32 accumulator and the bf16 result tile live in shared memory (the TB-level stand-in
#     for the register file), then one copy2d writes the tile into C [e][rows][n].
# FLOPs = 2 * experts * rows * n * k; rows must be a multiple of tile_rows, n of n_tile.

# the kernel library (workloads/kernels/lib/): routines several schemes share
.include "lib/gemm_tiles.s"

.kernel grouped_gemm
.param a
.param b
.param c
.param experts
.param rows                  # M per expert
.param n
.param k
.param tile_rows
.param n_tile
.param swizzle               # row tiles per group of the job order (swizzle_job)
.smem 96KB                   # C [tile][n_tile] f32 + Cq [tile][n_tile] bf16 (tile, n_tile <= 128)
    gemm_smem r8, r9, %tile_rows, %n_tile, r20, r21    # r8 = C accumulator; r9 = Cq (bf16)
    div r24, %n, %n_tile         # r24 = column jobs per row tile
    div r25, %rows, %tile_rows   # r25 = row tiles per expert
    mul r30, r25, %experts
    mul r30, r30, r24            # r30 = jobs
    shl r23, %k, 1               # r23 = A row bytes
    mul r27, %k, %n_tile
    shl r27, r27, 1              # r27 = bytes of one [k][n_tile] B tile
    shl r26, %n, 1               # r26 = C row bytes
    shl r28, %n_tile, 1          # r28 = Cq row bytes
    mul r29, r25, %experts       # r29 = row tiles
    mov r1, %tb                  # r1 = job
job:
    bge r1, r30, end
    swizzle_job r1, r29, r24, %swizzle, r4, r5, r2, r3    # r4 = row tile (over all experts); r5 = q
    split_job r4, r25, r6, r7    # r6 = expert; r7 = row tile inside the expert
    mul r10, r4, %tile_rows      # r10 = first row (over all experts)
    mul r16, r10, r23
    add r16, r16, %a             # r16 = A: the tile's rows
    weight_tile_offset r11, r6, r24, r5, r27
    add r11, r11, %b             # r11 = B tile (expert, q)
    gemm_tile r8, r9, r16, r11, %tile_rows, %n_tile, %k, r20, r5, r7, 0
    mul r12, r10, r26
    mul r13, r5, r28
    add r12, r12, r13
    add r12, r12, %c             # r12 = C[first row][q * n_tile]
    copy2d r12, r9, %tile_rows, r28, r26, r28
    add r1, r1, %ntb
    bra job
end:
    exit
