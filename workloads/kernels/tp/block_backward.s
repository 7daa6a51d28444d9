# The training backward of a transformer layer's attention part and norms under tensor parallelism
# (workload.block kinds attention and transformer, pass training; moehub_arch/workloads/block.py):
# the forward's attention with its saved row statistics, the attention backward (lib/
# attention_backward.s), the dgrad and wgrad of the column-parallel QKV and row-parallel output
# projections, and the norms' backward fused with the residual gradients (lib/norm_backward.s).
# The FFN's backward is ./ffn_backward.s. Every kernel takes its work in a grid-stride loop.
.include "lib/attention.s"
.include "lib/attention_backward.s"
.include "lib/norm.s"
.include "lib/norm_backward.s"
.include "lib/gemm_tiles.s"

# attention_train: the forward's attention kernel (tp/transformer.s attention, the same params and
# order) that also keeps each query row's m and l for the backward (fp32 [heads][T]).
.kernel attention_train
.param qkv
.param out
.param mask
.param consts
.param seq
.param batch
.param heads
.param dh
.param tile
.param m_stat
.param l_stat
.smem 128KB
    flash_attention_smem %tile, %dh, %mask, %consts
    attention_items attention_query_order, attention_train_item
    exit

# attention_bwd: the attention backward (lib/attention_backward.s), launched twice: pass 0 takes
# (query tile, sequence, head) items longest first and computes D = rowsum(dO O) and dQ; pass 1
# takes (key tile, sequence, head) items longest first (key tile 0) and computes dK and dV.
.kernel attention_bwd
.param qkv                   # the forward's Q, K, V (tp/transformer.s attention's layout)
.param out                   # the forward's O [T][heads dh] bf16
.param dout                  # dO, O's layout
.param dqkv                  # dQ, dK, dV in qkv's layout (bf16)
.param mask
.param consts
.param m_stat
.param l_stat
.param d_stat                # D: written by pass 0, read by pass 1 (fp32 [heads][T])
.param seq
.param batch
.param heads
.param dh
.param tile
.param pass                  # 0: D and dQ, 1: dK and dV
.smem 224KB
    attention_bwd_smem %tile, %dh, %mask, %consts
    bne %pass, 0, key_tiles
    attention_items attention_query_order, attention_dq_item
    exit
key_tiles:
    attention_items attention_key_order, attention_dkdv_item
    exit

# tp_dgrad: dX = bf16(dY W^T), the input gradient of tp_gemm's Y = A W. dY [T][N] in tp_gemm's Y
# layout (N / group blocks of [T][group]), W [N/n][K][n] column tiles, dX [T][K] row-major. One job
# per (row tile, column job of kn columns of K), row tile major; k = N in increasing order: step c
# is an mma.bf16.bt of dY's column block c (row stride group) against rows kb kn .. of W's column
# tile c ([kn][n], contiguous).
.kernel tp_dgrad
.param dy
.param w
.param dx
.param tokens
.param k                     # K (the forward's A columns)
.param ncols                 # N
.param n_tile
.param kn                    # columns of K per job (divides K)
.param tile_rows
.param group
.smem 96KB                   # acc fp32 [tile_rows][kn] + out bf16 [tile_rows][kn]
    gemm_smem r8, r9, %tile_rows, %kn, r20, r21
    div r22, %k, %kn             # r22 = column jobs per row tile
    add r1, %tokens, %tile_rows
    sub r1, r1, 1
    div r23, r1, %tile_rows
    mul r24, r22, r23            # r24 = jobs
    div r25, %ncols, %n_tile     # r25 = k steps
    mul r26, %k, %n_tile
    shl r26, r26, 1              # r26 = bytes of a weight column tile
    mul r27, %kn, %n_tile
    shl r27, r27, 1              # r27 = bytes of kn rows of a column tile
    shl r28, %kn, 1              # r28 = bytes of a job's output row
    mov r0, %tb
job:
    bge r0, r24, end
    split_job r0, r22, r2, r3    # r2 = row tile, r3 = column job kb
    mul r4, r2, %tile_rows       # r4 = first row
    sub r5, %tokens, r4
    min r5, r5, %tile_rows       # r5 = rows
    mul r6, r5, %kn
    vzero.f32 r8, r6
    mul r10, r3, r27
    add r10, r10, %w             # r10 = rows kb kn .. of column tile 0
    mov r11, 0                   # r11 = step c
step:
    bge r11, r25, store
    mul r12, r11, %n_tile
    div r13, r12, %group
    rem r12, r12, %group
    mul r13, r13, %tokens
    add r13, r13, r4
    mul r13, r13, %group
    add r13, r13, r12
    shl r13, r13, 1
    add r13, r13, %dy            # r13 = dY[first row][c n] in its group block
    mma.bf16.bt r8, r13, r10, r5, %kn, %n_tile, %group, 0
    add r10, r10, r26
    add r11, r11, 1
    bra step
store:
    vcvt.bf16.f32 r9, r8, r6
    mul r12, r4, %k
    mul r13, r3, %kn
    add r12, r12, r13
    shl r12, r12, 1
    add r12, r12, %dx            # r12 = dX[first row][kb kn]
    shl r13, %k, 1
    copy2d r12, r9, r5, r28, r13, r28
    add r0, r0, %ntb
    bra job
end:
    exit

# tp_wgrad: dW = A^T dY in fp32 (Megatron-LM's fp32 main_grad), in W's layout [N/n][K][n]: one job
# per [kn][n] block (column tile c, rows kb kn ..), one mma.bf16.at over k = T of A's column block
# (row stride K) against dY's column block c (row stride group).
.kernel tp_wgrad
.param a                     # the forward's A [T][K] bf16
.param dy
.param dw
.param tokens
.param k
.param ncols
.param n_tile
.param kn
.param group
.smem 64KB                   # acc fp32 [kn][n]
    mov r8, %smem
    mul r20, %kn, %n_tile
    shl r21, r20, 2              # r21 = bytes of a gradient block
    div r22, %k, %kn             # r22 = row blocks per column tile
    div r23, %ncols, %n_tile
    mul r24, r22, r23            # r24 = jobs
    mov r0, %tb
job:
    bge r0, r24, end
    split_job r0, r22, r3, r4    # r3 = column tile c, r4 = row block kb
    vzero.f32 r8, r20
    mul r5, r4, %kn
    shl r5, r5, 1
    add r5, r5, %a               # r5 = A[0][kb kn]
    mul r6, r3, %n_tile
    div r7, r6, %group
    rem r6, r6, %group
    mul r7, r7, %tokens
    mul r7, r7, %group
    add r7, r7, r6
    shl r7, r7, 1
    add r7, r7, %dy              # r7 = dY[0][c n] in its group block
    mma.bf16.at r8, r5, r7, %kn, %n_tile, %tokens, %k, %group
    mul r10, r3, %k
    mul r11, r4, %kn
    add r10, r10, r11
    mul r10, r10, %n_tile
    shl r10, r10, 2
    add r10, r10, %dw
    copy r10, r8, r21
    add r0, r0, %ntb
    bra job
end:
    exit

# tp_norm_bwd: dx = bf16(norm'(x) dy + resid) in blocks of `rows` rows (lib/norm_backward.s), and
# this thread block's fp32 partial parameter gradients part[tb] = (dgain [H], dbias [H]); with
# sharded = 1 over this GPU's sequence shard only (sequence parallelism).
.kernel tp_norm_bwd
.param x                     # the norm's input (bf16 [T][H])
.param dy                    # the gradient of its output
.param resid                 # the gradient that reaches x around the norm (the residual path)
.param dx
.param gain
.param bias
.param consts                # fp32 words: 1 eps, 2 H
.param part                  # fp32 [grid][2][H]
.param tokens
.param hidden
.param rows
.param layernorm
.param sharded               # 1: tokens is this GPU's sequence shard (lib/norm.s shard_offset)
.smem 224KB                  # 16 + 16 H + 12 rows H + 12 rows bytes
    norm_smem %gain, %bias, %consts, %hidden
    mul r11, %rows, %hidden
    shl r12, r11, 2              # r12 = bytes of an fp32 block
    add r23, r22, r12
    shl r13, %rows, 3
    add r23, r23, r13            # r23 = gy (after xhat and norm_rows_xhat's two row vectors)
    add r24, r23, r12            # r24 = tmp
    add r25, r24, r12            # r25 = c [rows]
    shl r13, %rows, 2
    add r26, r25, r13            # r26 = dgain accumulator [H]
    shl r13, %hidden, 2
    add r27, r26, r13            # r27 = dbias accumulator [H]
    vzero.f32 r26, %hidden
    vzero.f32 r27, %hidden
    div r10, %tokens, %rows      # r10 = row blocks
    shl r11, r11, 1              # r11 = bytes of a bf16 block
    shl r12, %hidden, 1
    shard_offset r17, %tokens, r12       # r17 = byte offset of the shard
    mov r0, %tb
block:
    bge r0, r10, done
    mul r12, r0, r11
    add r12, r12, r17
    add r13, r12, %x
    add r14, r12, %dy
    add r15, r12, %resid
    add r16, r12, %dx
    norm_bwd_rows r16, r13, r14, r15, %rows, %hidden, %layernorm
    add r0, r0, %ntb
    bra block
done:
    shl r13, %hidden, 2
    shl r12, r13, 1
    mul r12, r12, %tb
    add r12, r12, %part
    copy r12, r26, r13
    add r12, r12, r13
    copy r12, r27, r13
    exit

# norm_grad_reduce: grad[e] = sum over p of part[p][e] in fp32, p = 0, 1, ... in order (the
# second stage of the norm's parameter gradients); one item per chunk of columns.
.kernel norm_grad_reduce
.param part                  # fp32 [parts][elems]
.param grad                  # fp32 [elems]
.param parts
.param elems
.param chunk                 # columns per item (divides elems; parts x chunk fp32 fit .smem)
.smem 224KB
    div r10, %elems, %chunk
    shl r11, %chunk, 2           # r11 = bytes of a chunk
    shl r12, %elems, 2           # r12 = bytes of a partial
    mov r0, %tb
item:
    bge r0, r10, end
    mul r13, r0, r11
    add r14, r13, %part
    copy2d %smem, r14, %parts, r11, r11, r12      # every partial's chunk
    mov r15, 1
    add r16, %smem, r11
sum:
    bge r15, %parts, store
    vadd.f32 %smem, %smem, r16, %chunk
    add r16, r16, r11
    add r15, r15, 1
    bra sum
store:
    add r14, r13, %grad
    copy r14, %smem, r11
    add r0, r0, %ntb
    bra item
end:
    exit
