# Kernel library: the training pieces of causal FlashAttention-style attention (lib/attention.s is
# the forward). The backward is FlashAttention-2's (Dao, arXiv 2307.08691, section 3.2 and
# Algorithm 2): per tile pair the scores S = Q K^T and the probabilities P are recomputed from the
# forward's saved row statistics, D = rowsum(dO * O), dV += P^T dO, dP = dO V^T, dS = P * (dP - D),
# dQ += dS K, dK += dS^T Q (the softmax scale applied to dQ and dK at the end, as FlashAttention-2's
# kernels do). Two deterministic passes instead of FlashAttention-2's atomic dQ: a dQ pass over
# query tiles (which also computes D, FlashAttention-2's preprocessing step) and a dK/dV pass over
# key tiles, each recomputing S and dP - the split of the Triton tutorial's fused-attention
# backward (triton-lang/triton python/tutorials/06-fused-attention.py, _attn_bwd_dq and
# _attn_bwd_dkdv); it costs 7 tile GEMMs per visited tile pair instead of 5, and keeps every sum in
# a fixed order (FlashAttention-2's atomic adds into dQ are in arrival order).
#
# Saved statistics: the forward keeps each query row's final running maximum m and row sum l
# (attention_train_item; FlashAttention-1's l and m, arXiv 2205.14135 Algorithm 2, where
# FlashAttention-2 folds them into L = m + log l - the ISA has no log instruction), so
# P = exp(S - m) / l, bit for bit the forward's softmax normaliser. Stats arrays are fp32
# [heads][T] (T = batch x seq tokens; row `tok` of head h at word h T + tok).
#
# Numerics (the NumPy reference is workloads/block_reference.py attention_backward, same order):
# S = fp32(Q K^T) * scale, + the causal mask on the diagonal tile; P = exp(S - m) / l (fp32);
# dV += bf16(P)^T dO; dP = fp32(dO V^T); dS = P * (dP - D) rounded to bf16; dQ += dS K_j over key
# tiles j = 0 .. i, dK += dS^T Q_i over query tiles i = j .. last (fp32 accumulators); dQ and dK
# times the scale, then every gradient rounded to bf16.
#
#   attention_train_item ...          the forward's item (lib/attention.s attention_items body)
#                                     that also stores m and l to %m_stat, %l_stat
#   attention_bwd_smem tile, dh, mask, scale
#       the backward kernels' shared memory: scale (16 B), three bf16 [tile][dh] tiles at r20,
#       r21, r22, two fp32 [tile][dh] at r23, r29, fp32 S/P [tile][tile] at r24, bf16 [tile][tile]
#       at r25, fp32 dP [tile][tile] at r26, the fp32 causal mask at r27, the row vectors m, l, D
#       (fp32 [tile] each) from r28: 16 + 14 tile dh + 14 tile^2 + 12 tile bytes. Writes r1 .. r5.
#   attention_dq_item ...             dQ of query tile i (and D): attention_items body
#   attention_dkdv_item ...           dK and dV of key tile j: attention_items body
#   attention_stats_offset dst, head, tok   dst = byte offset of row tok of head `head` in a
#                                     stats array
#   attention_bwd_probs q, k, diag_a, diag_b   r24 = P of one tile pair (below)
#   attention_bwd_ds do, lda, v       r25 = bf16(dS) of one tile pair (below)
# The backward kernels declare the params qkv, out (the forward's O), dout (dO, O's layout), dqkv
# (the gradient, qkv's layout), mask, consts, m_stat, l_stat, d_stat, seq, batch, heads, dh, tile.

# dst = byte offset of row `tok` of head `head` in a stats array
.macro attention_stats_offset dst, head, tok
    mul \dst, %batch, %seq
    mul \dst, \dst, \head
    add \dst, \dst, \tok
    shl \dst, \dst, 2
.endm

.macro attention_train_item qt, kb, vb, dst, dst_stride, i, head, tok
    flash_attention_tile \qt, \kb, \vb, \dst, \dst_stride, \i, %tile, %dh
    attention_stats_offset r1, \head, \tok
    shl r2, %tile, 2
    add r3, r1, %m_stat
    copy r3, r25, r2                 # the final running maximum m (r25 after the last swap)
    add r3, r1, %l_stat
    copy r3, r27, r2                 # the row sum l
.endm

.macro attention_bwd_smem tile, dh, mask, scale
    copy %smem, \scale, 4
    add r20, %smem, 16
    mul r1, \tile, \dh
    shl r2, r1, 1                    # r2 = bytes of a bf16 [tile][dh] tile
    add r21, r20, r2
    add r22, r21, r2
    add r23, r22, r2                 # r23 = fp32 [tile][dh]
    shl r4, r1, 2
    add r29, r23, r4                 # r29 = fp32 [tile][dh]
    add r24, r29, r4                 # r24 = S / P fp32 [tile][tile]
    mul r3, \tile, \tile
    shl r3, r3, 2
    add r25, r24, r3                 # r25 = bf16 [tile][tile] (P, then dS)
    shr r5, r3, 1
    add r26, r25, r5                 # r26 = dP fp32 [tile][tile]
    add r27, r26, r3                 # r27 = causal mask
    copy r27, \mask, r3
    add r28, r27, r3                 # r28 = m, then l, then D (fp32 [tile] each)
.endm

# r24 = P = exp(scale Q K^T [+ the causal mask when diag_a == diag_b] - m) / l; q [tile][dh] and k
# [tile][dh] dense; m at r28, l at r7; r3 = tile x tile
.macro attention_bwd_probs q, k, diag_a, diag_b
    vzero.f32 r24, r3
    mma.bf16.bt r24, \q, \k, %tile, %tile, %dh, 0, 0
    vrow_mul.f32 r24, r24, %smem, r3, r3          # S *= scale
    bne \diag_a, \diag_b, unmasked_\@
    vadd.f32 r24, r24, r27, r3                    # the diagonal tile: -inf above the diagonal
unmasked_\@:
    vrow_sub.f32 r24, r24, r28, %tile, r3
    vexp.f32 r24, r24, r3
    vrow_div.f32 r24, r24, r7, %tile, r3          # P (0 where masked)
.endm

# r25 = bf16(dS), dS = P (dO V^T - D): dO [tile][dh] with row stride lda elements (0 dense), v
# [tile][dh] dense; P at r24, D at r9; r3 = tile x tile
.macro attention_bwd_ds do, lda, v
    vzero.f32 r26, r3
    mma.bf16.bt r26, \do, \v, %tile, %tile, %dh, \lda, 0     # dP = dO V^T
    vrow_sub.f32 r26, r26, r9, %tile, r3
    vmul.f32 r26, r24, r26, r3
    vcvt.bf16.f32 r25, r26, r3
.endm

# dQ of query tile i over key tiles j = 0 .. i; also D = rowsum(dO O) of its rows, stored for
# attention_dkdv_item. Q_i, dO_i, O_i in shared memory (r20, r21, r22), dQ fp32 at r23.
.macro attention_dq_item qt, kb, vb, dst, dst_stride, i, head, tok
    mul r1, %tile, %dh               # r1 = elements of a [tile][dh] tile
    shl r2, r1, 1                    # r2 = its bf16 bytes
    mul r3, %tile, %tile             # r3 = elements of a score tile
    copy r20, \qt, r2                # Q_i
    shl r5, %dh, 1                   # r5 = bytes of one head row
    copy2d r22, \dst, %tile, r5, r5, \dst_stride      # O_i (the forward's output)
    sub r6, \dst, %out
    add r6, r6, %dout
    copy2d r21, r6, %tile, r5, r5, \dst_stride        # dO_i
    vcvt.f32.bf16 r29, r21, r1
    vcvt.f32.bf16 r23, r22, r1
    vmul.f32 r29, r29, r23, r1
    shl r6, %tile, 2                 # r6 = bytes of a row vector
    add r7, r28, r6                  # r7 = l
    add r9, r7, r6                   # r9 = D
    vrow_sum.f32 r9, r29, %dh, r1    # D = rowsum(dO O), fp32
    attention_stats_offset r5, \head, \tok
    add r4, r5, %d_stat
    copy r4, r9, r6
    add r4, r5, %m_stat
    copy r28, r4, r6
    add r4, r5, %l_stat
    copy r7, r4, r6
    vzero.f32 r23, r1                # dQ
    mov r4, 0                        # r4 = key tile j
key_\@:
    attention_bwd_probs r20, \kb, r4, \i
    attention_bwd_ds r21, 0, \vb
    mma.bf16 r23, r25, \kb, %tile, %dh, %tile                 # dQ += dS K_j
    add r4, r4, 1
    add \kb, \kb, r2
    add \vb, \vb, r2
    ble r4, \i, key_\@
    vrow_mul.f32 r23, r23, %smem, r1, r1                      # dQ *= scale
    vcvt.bf16.f32 r20, r23, r1
    sub r5, \qt, %qkv
    add r5, r5, %dqkv
    copy r5, r20, r2
.endm

# dK and dV of key tile j over query tiles i = j .. last: K_j, V_j in shared memory (r20, r21),
# dK fp32 at r23, dV fp32 at r29; Q_i and dO_i read by the mma (dO_i with its row stride).
.macro attention_dkdv_item qt, kb, vb, dst, dst_stride, i, head, tok
    mul r1, %tile, %dh
    shl r2, r1, 1
    mul r3, %tile, %tile
    mul r4, \i, r2
    add \kb, \kb, r4                 # K_j
    add \vb, \vb, r4                 # V_j
    copy r20, \kb, r2
    copy r21, \vb, r2
    vzero.f32 r23, r1                # dK
    vzero.f32 r29, r1                # dV
    shl r6, %tile, 2
    add r7, r28, r6                  # r7 = l
    add r9, r7, r6                   # r9 = D
    attention_stats_offset r5, \head, \tok     # r5 = stats offset of query tile i (= j first)
    mov r4, \qt                      # r4 = Q_i
    sub \dst, \dst, %out
    add \dst, \dst, %dout            # dst = dO_i
    mul \kb, %heads, %dh             # kb = dO's row stride (elements)
    mul \vb, %tile, \dst_stride      # vb = bytes from dO_i to dO_i+1
    mov \head, \i                    # head = query tile i
query_\@:
    add \tok, r5, %m_stat
    copy r28, \tok, r6
    add \tok, r5, %l_stat
    copy r7, \tok, r6
    add \tok, r5, %d_stat
    copy r9, \tok, r6
    attention_bwd_probs r4, r20, \head, \i
    vcvt.bf16.f32 r25, r24, r3
    mma.bf16.at r29, r25, \dst, %tile, %dh, %tile, 0, \kb     # dV += bf16(P)^T dO_i
    attention_bwd_ds \dst, \kb, r21
    mma.bf16.at r23, r25, r4, %tile, %dh, %tile, 0, 0         # dK += dS^T Q_i
    add \head, \head, 1
    add r4, r4, r2
    add \dst, \dst, \vb
    add r5, r5, r6
    blt \head, r10, query_\@
    vrow_mul.f32 r23, r23, %smem, r1, r1                      # dK *= scale
    vcvt.bf16.f32 r20, r23, r1
    vcvt.bf16.f32 r21, r29, r1
    add r4, \qt, r15                 # K tile j of qkv ...
    sub r4, r4, %qkv
    add r4, r4, %dqkv                # ... is dK's place in dqkv
    copy r4, r20, r2
    add r4, r4, r15
    copy r4, r21, r2                 # dV
.endm
