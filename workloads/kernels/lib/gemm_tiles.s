# Kernel library: the tensor-core tile routines of every expert GEMM (the shared experts, DeepEP's
# grouped GEMM, the streaming expert kernels of overlap and moehub, the grouped-GEMM
# microbenchmark). Each macro computes one GEMM job - rows x n output elements over the full k -
# with its fp32 accumulator in shared memory (the thread-block stand-in for the register file) and
# leaves the bf16 result in shared memory; the caller computes addresses and stores the result
# (copy2d), which is where the schemes differ.
#
# L2 convention (the mma subops of isa/base.yaml): A is read from HBM by the first reader of a row
# tile (its first column job, q = 0) and through the L2 by the others; weights (B) are read from
# HBM on their first touch (the expert's first row tile: `cold` == `cold_value`) and through the
# L2 after that.
#
# Interfaces. Every argument is an operand: a register, a %param or an immediate. Shared-memory
# pointers (acc, acc_u, out) and the operand pointers (a, b, b_up) are byte addresses; `elems` must
# hold rows * n. Rows of A are k elements apart (bf16), B is one contiguous [k][n] column tile.
# No macro writes any register or memory other than the shared-memory tiles it names; labels are
# private to each expansion (\@), so a kernel may use a macro several times.
#
#   gemm_tile acc, out, a, b, rows, n, k, elems, q, cold, cold_value
#       out = bf16(A B)                 A through the L2 unless q == 0, B unless cold == cold_value
#   gemm_tile_a_l2 acc, out, a, b, rows, n, k, elems, cold, cold_value
#       out = bf16(A B)                 A always through the L2 (written just before by this GPU:
#                                       the SwiGLU activations of a down-projection job)
#   swiglu_tile acc, acc_u, out, a, b, b_up, rows, n, k, elems, q, cold, cold_value
#       out = bf16(silu(A B) * (A B_up)) the fused gate/up job: the up mma reuses the A tile the gate
#                                       mma staged (mma.bf16.ra: no second read of A)
#   swiglu_acc acc, acc_u, a, b, b_up, rows, n, k, elems, q, cold, cold_value
#       acc = A B, acc_u = A B_up (fp32)  swiglu_tile's mainloop without the activation (the
#                                       training backward recomputes G and U, tp/ffn_backward.s)
#   swiglu_grad_store g, u, d, out, elems, rows, nbytes, row_bytes, du_dst, dg_dst
#       SwiGLU's backward from the recomputed G, U and D = dO Wd^T ([rows][n] fp32 tiles g, u, d):
#       dU = bf16(silu(G) D) and dG = bf16(silu'(G) (D U)), each staged in `out` and stored as
#       `rows` rows of nbytes (2 n) to du_dst / dg_dst, row_bytes apart (copy2d) - the one macro
#       that stores to memory, shared by the dense FFN's and the MoE experts' backward
#       (tp/ffn_backward.s, common/moe_backward.s). Overwrites u with dG in fp32.
#   swiglu_bwd_smem (no operands)
#       the shared-memory layout of those two kernels (.smem 224KB: G, U, D [tile][n] fp32 + out
#       [tile][n] bf16; the kernel declares ffn, hidden, tile_rows, n_tile): r8 = G, r9 = U,
#       r10 = D, r11 = out, r22 = I / n column jobs per row tile, r23 = H / n steps of D.
#       Writes r20, r21.

.macro gemm_tile acc, out, a, b, rows, n, k, elems, q, cold, cold_value
    vzero.f32 \acc, \elems
    bne \q, 0, a_l2_\@
    bne \cold, \cold_value, b_l2_\@
    mma.bf16 \acc, \a, \b, \rows, \n, \k
    bra out_\@
b_l2_\@:
    mma.bf16.bl2 \acc, \a, \b, \rows, \n, \k
    bra out_\@
a_l2_\@:
    bne \cold, \cold_value, both_l2_\@
    mma.bf16.al2 \acc, \a, \b, \rows, \n, \k
    bra out_\@
both_l2_\@:
    mma.bf16.l2 \acc, \a, \b, \rows, \n, \k
out_\@:
    vcvt.bf16.f32 \out, \acc, \elems
.endm

.macro gemm_tile_a_l2 acc, out, a, b, rows, n, k, elems, cold, cold_value
    vzero.f32 \acc, \elems
    bne \cold, \cold_value, warm_\@
    mma.bf16.al2 \acc, \a, \b, \rows, \n, \k
    bra out_\@
warm_\@:
    mma.bf16.l2 \acc, \a, \b, \rows, \n, \k
out_\@:
    vcvt.bf16.f32 \out, \acc, \elems
.endm

.macro swiglu_tile acc, acc_u, out, a, b, b_up, rows, n, k, elems, q, cold, cold_value
    swiglu_acc \acc, \acc_u, \a, \b, \b_up, \rows, \n, \k, \elems, \q, \cold, \cold_value
    vsilu_mul.bf16.f32 \out, \acc, \acc_u, \elems
.endm

.macro swiglu_acc acc, acc_u, a, b, b_up, rows, n, k, elems, q, cold, cold_value
    vzero.f32 \acc, \elems
    vzero.f32 \acc_u, \elems
    bne \q, 0, a_l2_\@
    bne \cold, \cold_value, b_l2_\@
    mma.bf16 \acc, \a, \b, \rows, \n, \k
    mma.bf16.ra \acc_u, \a, \b_up, \rows, \n, \k
    bra done_\@
b_l2_\@:
    mma.bf16.bl2 \acc, \a, \b, \rows, \n, \k
    mma.bf16.ra.bl2 \acc_u, \a, \b_up, \rows, \n, \k
    bra done_\@
a_l2_\@:
    bne \cold, \cold_value, both_l2_\@
    mma.bf16.al2 \acc, \a, \b, \rows, \n, \k
    mma.bf16.ra \acc_u, \a, \b_up, \rows, \n, \k
    bra done_\@
both_l2_\@:
    mma.bf16.l2 \acc, \a, \b, \rows, \n, \k
    mma.bf16.ra.bl2 \acc_u, \a, \b_up, \rows, \n, \k
done_\@:
.endm

# Job addressing (weights stored as column tiles [experts][columns / n][k][n], see
# ../common/moe_common.s):
#   weight_tile_offset off, expert, jobs_per_expert, job, tile_bytes
#       off = (expert * jobs_per_expert + job) * tile_bytes, the byte offset of the job's [k][n]
#       weight tile. Writes off.
.macro weight_tile_offset off, expert, jobs_per_expert, job, tile_bytes
    mul \off, \expert, \jobs_per_expert
    add \off, \off, \job
    mul \off, \off, \tile_bytes
.endm
#   gemm_smem acc, second, tile_rows, n, elems, bytes
#       acc = %smem (the first fp32 [tile_rows][n] tile), elems = tile_rows * n, bytes = 4 * elems,
#       second = acc + bytes (the next tile; a kernel needing a third adds bytes again).
#       Writes acc, second, elems, bytes (elems and bytes may be one register).
.macro gemm_smem acc, second, tile_rows, n, elems, bytes
    mov \acc, %smem
    mul \elems, \tile_rows, \n
    shl \bytes, \elems, 2
    add \second, \acc, \bytes
.endm
#   split_job job, per_tile, tile, q
#       tile = job / per_tile, q = job % per_tile: the row tile (or job block) and the column job
#       inside it. Writes tile, q.
.macro split_job job, per_tile, tile, q
    div \tile, \job, \per_tile
    rem \q, \job, \per_tile
.endm
#   swizzle_job job, tiles, per_tile, group, tile, q, t1, t2
#       The L2-aware job order of the bulk grouped GEMMs (DeepGEMM's tile scheduler,
#       deep_gemm/include/deep_gemm/common/scheduler.cuh get_swizzled_block_idx, grouping along M;
#       CUTLASS's threadblock swizzle is the same idea): the row tiles are taken in groups of
#       `group` consecutive tiles (the last group may be smaller); inside a group the column job
#       is the outer loop and the row tile the inner one, so the thread blocks running at one time
#       work on a few weight column tiles - each read from HBM once and by the group's other
#       tiles from the L2 - instead of every column tile of an expert (row-tile order: an
#       expert's weights cycle through the L2 once per row tile, and LRU keeps none of them when
#       they exceed it). group = 1 is the row-tile order (split_job by per_tile).
#       job -> tile (over all `tiles`) and q (its column job, 0 .. per_tile - 1). Writes tile, q,
#       t1, t2.
.macro swizzle_job job, tiles, per_tile, group, tile, q, t1, t2
    mul \t1, \group, \per_tile       # jobs of a whole group
    div \tile, \job, \t1
    rem \t1, \job, \t1               # t1 = the job inside its group
    mul \tile, \tile, \group         # tile = the group's first row tile
    sub \t2, \tiles, \tile
    min \t2, \t2, \group             # t2 = row tiles in the group
    div \q, \t1, \t2
    rem \t1, \t1, \t2
    add \tile, \tile, \t1
.endm

.macro swiglu_bwd_smem
    gemm_smem r8, r9, %tile_rows, %n_tile, r20, r21   # r8 = G, r9 = U
    add r10, r9, r21             # r10 = D
    add r11, r10, r21            # r11 = out (bf16)
    div r22, %ffn, %n_tile       # r22 = column jobs per row tile
    div r23, %hidden, %n_tile    # r23 = H / n steps of D
.endm

.macro swiglu_grad_store g, u, d, out, elems, rows, nbytes, row_bytes, du_dst, dg_dst
    vsilu_mul.bf16.f32 \out, \g, \d, \elems    # dU = silu(G) * D
    copy2d \du_dst, \out, \rows, \nbytes, \row_bytes, \nbytes
    vmul.f32 \u, \d, \u, \elems                # D * U
    vdsilu_mul.f32 \u, \g, \u, \elems          # dG = silu'(G) * (D * U)
    vcvt.bf16.f32 \out, \u, \elems
    copy2d \dg_dst, \out, \rows, \nbytes, \row_bytes, \nbytes
.endm
