# Kernels every MoE scheme shares: the shared experts (local, no communication) and the final
# weighted combine. Sharing them keeps the schemes comparable: they differ only in how routed
# tokens reach their experts and how expert outputs come back (yhome).
#
# Layouts (per GPU, T tokens, k = top-k, H hidden, S shared experts of width Is):
#   x [T][H] bf16; ws_gate/ws_up [S][Is/n][H][n] bf16; ws_down [S][H/n][Is][n] bf16 (n = n_tile);
#   hs [S][T][Is] bf16; ys [S][T][H] bf16;
#   yhome [T*k][H] bf16: the output of the token's j-th expert at row t * k + j;
#   topk_w [T][k] f32; out [T][H] f32; done [ngpu] i64 (done[g] = 1: GPU g's outputs are home);
#   acct [8] i64 token accounting: 0 rows sent, 1 rows received, 2 rows computed, 3 rows combined,
#   5 shared-expert TBs finished; 4, 6, 7 scheme-specific.

# Expert GEMMs are split into jobs so several SMs work on one row tile, like the CTAs of a
# grouped GEMM: a job computes n_tile output columns (workload.layer.gemm_n_tile). Gate/up job q
# computes columns [q*n, (q+1)*n) of silu(X Wg) * (X Wu) (I / n jobs per tile); down job c
# computes output columns [c*n, (c+1)*n) of Hh Wd over the full I (H / n jobs), so every element
# is summed in the same k order as an unsplit GEMM. The fp32 accumulators live in shared memory
# (the TB-level stand-in for the register file; 160 KB: tile_rows <= 128, n_tile <= 128).
# Weights are stored as column tiles so a job's B operand is contiguous:
#   w_gate/w_up [E][I/n][H][n], w_down [E][H/n][I][n]   (E = experts of that kind on the GPU).
# L2 (mma subops): a job reads its A rows through the L2 unless it is the tile's first gate/up job
# (the first reader), and its weights through the L2 unless it works on row tile 0 (first touch).

# the kernel library (workloads/kernels/lib/): routines several schemes share
.include "lib/gemm_tiles.s"
.include "lib/combine.s"
.include "lib/streaming.s"
.include "lib/shared_ffn.s"

# shared_ffn: the shared experts as one kernel of dynamically taken jobs (an atomic counter), so
# that once its TBs are placed they finish the whole FFN (two stream-ordered kernels would let a
# concurrent persistent kernel take the SMs between them). Shared tile u = s * row_tiles + row
# tile. Jobs run in the order of the streaming scheduler of ../lib/streaming.s, with groups of
# G = `swizzle` tiles and a lag of one block: block b holds the gate/up jobs of group b
# (q < Ju: hs[s][rows][q cols] = bf16(silu(X Wg[s][q]) * (X Wu[s][q]))) and then the down jobs of
# group b - 1 (c: ys[s][rows][c cols] = bf16(hs[s][rows] Wd[s][c]) over the full Is), each part
# column job outer and tile inner, so the blocks running at one time share a shared expert's
# weight column tiles through the L2 (swizzle_job's order, ../lib/gemm_tiles.s) instead of each
# row tile walking the expert's weights alone (DeepSeek-V3's shared expert is 88 MB: with G = 1,
# tile by tile, it cycles through the 50 MB L2 once per row tile). A down job waits until all Ju
# gate/up jobs of its tile are done (jobs word 2 + u counts them). Every row tile is there from
# the start, as in a bulk GEMM: the layer passes workload.layer.gemm_swizzle; G = 1 is the order
# before (tile b's gate/up jobs, then tile b - 1's down jobs), which the TP blocks keep. Only the
# real jobs are numbered (J per shared tile; the last group may hold fewer than G tiles:
# ../lib/shared_ffn.s), so each TB takes the job counter once per job and once more to end.
# jobs (control): word 0 jobs taken, 1 unused, then one counter per shared tile.
.kernel shared_ffn
.param x
.param wg                    # [S][Is/n][H][n] bf16
.param wu
.param wd                    # [S][H/n][Is][n] bf16
.param hs                    # [S][T][Is] bf16
.param ys                    # [S][T][H] bf16
.param jobs
.param acct
.param tokens
.param hidden
.param ffn                   # Is
.param experts               # S
.param tile_rows
.param n_tile
.param swizzle               # shared tiles per group of the job order (../lib/streaming.s)
.smem 160KB                  # G, U [tile][n] f32 + Hq [tile][n] bf16, or Y + Yq
.smem_job 10                 # bytes per element of a tile_rows x n_tile job (fits a smaller SM)
    shared_ffn_setup                                    # lib/shared_ffn.s
job:
    shared_ffn_next tile, end
tile:
    shared_ffn_tile down
    shared_ffn_gate_up
    bra job
down:
    shared_ffn_down
    bra job
end:
    red.add %gpu, [%acct+40], 1  # acct word 5: shared-expert TBs finished (moe_combine waits)
    exit

# moe_combine: waits until the shared experts are done and every GPU's expert outputs are home,
# then per token (round-robin over TBs) out[t] = sum_s ys[s][t] + sum_j topk_w[t][j] *
# yhome[t * k + j], accumulated in fp32 in that order (the NumPy reference adds in the same order).
.kernel moe_combine
.param out
.param yhome
.param ys
.param topk_w
.param one                   # an fp32 1.0 (weight of the shared experts)
.param done
.param acct
.param tokens
.param topk
.param hidden
.param shared
.param shared_tbs            # thread blocks of shared_ffn (they count themselves in acct word 5)
    wait_layer_inputs %shared, %shared_tbs, %acct, %done
    shl r10, %hidden, 1          # r10 = bf16 row bytes
    shl r11, %hidden, 2          # r11 = f32 row bytes
    mov r1, %tb                  # r1 = token
    mov r9, 0                    # r9 = routed rows combined by this TB
token:
    bge r1, %tokens, end
    start_output_row r2, r1, %out, r11, %shared, %ys, %one, %tokens, r10, %hidden, r3, r4
    mul r5, r1, %topk            # r5 = slot of choice 0
    mov r3, 0
choice:
    add r6, r5, r3
    mul r7, r6, r10
    add r7, r7, %yhome
    shl r8, r6, 2
    add r8, r8, %topk_w
    vaxpy.f32.bf16 r2, r7, r8, %hidden
    add r3, r3, 1
    blt r3, %topk, choice
    add r9, r9, %topk
    add r1, r1, %ntb
    bra token
end:
    atom.add r13, %gpu, [%acct+24], r9   # acct word 3: rows combined
    exit

# ---- grouped GEMM over an expert-major buffer (schemes whose rows are all in place first) ------
# xe [El][cap][H] bf16: expert e's rows at xe + e * cap * H * 2 (counts[e] of them);
# he [El][cap][I] bf16 and ye [El][cap][H] bf16 likewise. grouped_tiles lists the row tiles in a
# control table; grouped_gate_up and grouped_down then run Ju = I / n and Jd = H / n column jobs
# per tile (the split and the L2 rule of the shared experts above), each kernel a grid-wide pass.
# table: word 0 = tiles; entry t at table + 64 * (t + 1): expert, rows, A rows (xe), Hh rows (he),
# Y rows (ye), first (1 for an expert's first tile: its weights come from HBM).

# grouped_tiles (one TB): builds the tile table from counts [El] (i64).
.kernel grouped_tiles
.param counts
.param table
.param xe
.param he
.param ye
.param cap
.param local_experts
.param hidden
.param ffn
.param tile_rows
    shl r20, %hidden, 1
    mul r20, r20, %cap           # r20 = bytes of one expert's xe / ye region
    shl r21, %ffn, 1
    mul r21, r21, %cap           # r21 = bytes of one expert's he region
    shl r22, %hidden, 1
    mul r22, r22, %tile_rows     # r22 = bytes of one row tile of xe / ye
    shl r23, %ffn, 1
    mul r23, r23, %tile_rows     # r23 = bytes of one row tile of he
    mov r1, 0                    # r1 = expert
    mov r2, 0                    # r2 = tiles listed
expert:
    bge r1, %local_experts, listed
    shl r3, r1, 3
    add r3, r3, %counts
    ld r4, [r3]                  # r4 = rows left of this expert
    mul r5, r1, r20
    add r5, r5, %xe              # r5 = next A rows
    mul r6, r1, r21
    add r6, r6, %he              # r6 = next Hh rows
    mul r7, r1, r20
    add r7, r7, %ye              # r7 = next Y rows
    mov r8, 1                    # r8 = first tile of the expert
tile:
    ble r4, 0, next_expert
    min r9, r4, %tile_rows
    add r10, r2, 1
    shl r10, r10, 6
    add r10, r10, %table
    st [r10], r1
    st [r10+8], r9
    st [r10+16], r5
    st [r10+24], r6
    st [r10+32], r7
    st [r10+40], r8
    mov r8, 0
    add r2, r2, 1
    sub r4, r4, r9
    add r5, r5, r22
    add r6, r6, r23
    add r7, r7, r22
    bra tile
next_expert:
    add r1, r1, 1
    bra expert
listed:
    st [%table], r2
    exit

# grouped_gate_up: jobs (tile, q): Hh[rows][q cols] = silu(X Wg[e][q]) * (X Wu[e][q]), bf16, taken
# in swizzle_job's order (../lib/gemm_tiles.s: groups of `swizzle` row tiles, column job outer).
.kernel grouped_gate_up
.param table
.param wg                    # [El][I/n][H][n] bf16
.param wu
.param hidden
.param ffn
.param tile_rows
.param n_tile
.param swizzle               # row tiles per group of the job order (swizzle_job, ../lib/gemm_tiles.s)
.smem 160KB                  # G, U [tile][n] f32 + Hq [tile][n] bf16
.smem_job 10                 # bytes per element of a tile_rows x n_tile job (fits a smaller SM)
    gemm_smem r8, r9, %tile_rows, %n_tile, r20, r20    # r8 = G; r9 = U
    add r10, r9, r20             # r10 = Hq
    div r24, %ffn, %n_tile       # r24 = Ju
    shl r25, %n_tile, 1          # r25 = Hq row bytes
    shl r26, %ffn, 1             # r26 = Hh row bytes
    mul r27, %hidden, %n_tile
    shl r27, r27, 1              # r27 = bytes of one [H][n] weight tile
    ld r28, [%table]
    mul r30, r28, r24            # r30 = jobs
    mov r1, %tb
job:
    bge r1, r30, end
    swizzle_job r1, r28, r24, %swizzle, r2, r5, r18, r19    # r2 = tile; r5 = q
    add r3, r2, 1
    shl r3, r3, 6
    add r3, r3, %table
    ld.v8 r12, [r3]              # r12 expert, r13 rows, r14 A, r15 Hh, r16 Y, r17 first
    weight_tile_offset r7, r12, r24, r5, r27
    add r11, r7, %wg             # r11 = Wg tile (expert, q)
    add r7, r7, %wu              # r7 = Wu tile
    mul r6, r13, %n_tile         # r6 = rows * n
    # job 0 of a tile reads its rows from HBM, the others via L2
    swiglu_tile r8, r9, r10, r14, r11, r7, r13, %n_tile, %hidden, r6, r5, r17, 1
    mul r4, r5, r25
    add r4, r4, r15              # Hh[:, q cols]
    copy2d r4, r10, r13, r25, r26, r25
    add r1, r1, %ntb
    bra job
end:
    exit

# grouped_down: jobs (tile, c): Y[rows][c cols] = bf16(Hh Wd[e][c]) over the full I.
.kernel grouped_down
.param table
.param wd                    # [El][H/n][I][n] bf16
.param hidden
.param ffn
.param tile_rows
.param n_tile
.param swizzle               # row tiles per group of the job order (swizzle_job, ../lib/gemm_tiles.s)
.param acct                  # acct word 2 += rows computed (counted by each tile's job 0)
.smem 96KB                   # Y [tile][n] f32 + Yq [tile][n] bf16
    gemm_smem r8, r9, %tile_rows, %n_tile, r20, r20    # r8 = Y; r9 = Yq
    div r24, %hidden, %n_tile    # r24 = Jd
    shl r25, %n_tile, 1          # r25 = Yq row bytes
    shl r26, %hidden, 1          # r26 = Y row bytes
    mul r27, %ffn, %n_tile
    shl r27, r27, 1              # r27 = bytes of one [I][n] weight tile
    ld r28, [%table]
    mul r30, r28, r24            # r30 = jobs
    mov r29, 0                   # r29 = rows computed (job 0 of each tile counts them)
    mov r1, %tb
job:
    bge r1, r30, end
    swizzle_job r1, r28, r24, %swizzle, r2, r5, r18, r19    # r2 = tile; r5 = c
    add r3, r2, 1
    shl r3, r3, 6
    add r3, r3, %table
    ld.v8 r12, [r3]              # r12 expert, r13 rows, r14 A, r15 Hh, r16 Y, r17 first
    weight_tile_offset r7, r12, r24, r5, r27
    add r11, r7, %wd             # r11 = Wd tile (expert, c)
    mul r6, r13, %n_tile
    gemm_tile_a_l2 r8, r9, r15, r11, r13, %n_tile, %ffn, r6, r17, 1
    mul r4, r5, r25
    add r4, r4, r16              # Y[:, c cols]
    copy2d r4, r9, r13, r25, r26, r25
    bne r5, 0, counted
    add r29, r29, r13
counted:
    add r1, r1, %ntb
    bra job
end:
    red.add %gpu, [%acct+16], r29
    exit
