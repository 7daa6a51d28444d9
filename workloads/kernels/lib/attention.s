# Kernel library: causal FlashAttention-style attention of one query tile of one head (Dao et al.,
# FlashAttention-2, arXiv 2307.08691, Algorithm 1: tiled Q K^T on the tensor cores with an online
# softmax - a running row maximum m and row sum l - and the output rescaled by exp(m_old - m_new)
# as each key tile arrives; causal prefill visits key tiles 0 .. i only and masks the diagonal one).
#
# Layouts: a head's Q, K and V are [S][dh] bf16 blocks (row-major, contiguous); Br = Bc = tile
# (the diagonal tile's mask lines up with the query tile). The query tile stays in shared memory;
# K and V tiles are read by the mma through the L2 (assumption: every query tile of the head reads
# them, and the head's K and V - S x dh x 2 B each, 256 KB at S = 1024 - stay L2-resident, as
# FlashAttention relies on for its re-reads).
#
# Numerics (the NumPy reference is workloads/block_reference.py flash_attention, same order):
# S = fp32(Q K^T) * scale, + the causal mask (0 / -inf) on the diagonal tile; m = rowmax S (first
# tile) or max(m_old, rowmax S); P = exp(S - m); l = rowsum P (first) or l_old exp(m_old - m) +
# rowsum P; O = O_old exp(m_old - m) + bf16(P) V; at the end O / l rounded to bf16.
#
#   flash_attention_smem tile, dh, mask, scale
#       lays out this TB's shared memory (the kernel declares .smem for it) and copies the fp32
#       softmax scale (global word `scale`) and the [tile][tile] fp32 causal mask into it.
#       Writes r1 .. r3 and r20 .. r29 (the tile pointers the next macro uses). Layout from %smem:
#       scale (16 B), Q bf16 [tile][dh], S fp32 [tile][tile], P bf16 [tile][tile], O fp32
#       [tile][dh], mask fp32 [tile][tile], then five fp32 [tile] row vectors (m, m_new, l,
#       alpha, a row sum).
#   flash_attention_tile qt, kb, vb, dst, dst_stride, i, tile, dh
#       O = attention of query tile i (at global qt, [tile][dh]) over key/value tiles 0 .. i of
#       the head whose K and V start at kb and vb; stores bf16 O to dst (rows dst_stride bytes
#       apart). Needs flash_attention_smem first; writes r1 .. r7 (and swaps r25 / r26).

.macro flash_attention_smem tile, dh, mask, scale
    copy %smem, \scale, 4
    add r20, %smem, 16               # r20 = Q tile (bf16)
    mul r1, \tile, \dh
    shl r2, r1, 1
    add r21, r20, r2                 # r21 = S (fp32)
    mul r3, \tile, \tile
    shl r3, r3, 2
    add r22, r21, r3                 # r22 = P (bf16)
    shr r2, r3, 1
    add r23, r22, r2                 # r23 = O (fp32)
    shl r2, r1, 2
    add r24, r23, r2                 # r24 = causal mask (fp32)
    copy r24, \mask, r3
    add r25, r24, r3                 # r25 = m, r26 = m_new, r27 = l, r28 = alpha, r29 = row sum
    shl r1, \tile, 2
    add r26, r25, r1
    add r27, r26, r1
    add r28, r27, r1
    add r29, r28, r1
.endm

.macro flash_attention_tile qt, kb, vb, dst, dst_stride, i, tile, dh
    mul r1, \tile, \dh               # r1 = Q / O tile elements
    shl r2, r1, 1                    # r2 = bf16 bytes of a Q, K or V tile
    copy r20, \qt, r2
    mul r3, \tile, \tile             # r3 = S elements
    mov r4, 0                        # r4 = key tile j
    mov r5, \kb                      # r5 = K tile j
    mov r6, \vb                      # r6 = V tile j
key_\@:
    vzero.f32 r21, r3
    mma.bf16.bt.bl2 r21, r20, r5, \tile, \tile, \dh
    vrow_mul.f32 r21, r21, %smem, r3, r3          # S *= scale (one row of r3: the scalar b[0])
    bne r4, \i, unmasked_\@
    vadd.f32 r21, r21, r24, r3                    # diagonal tile: -inf above the diagonal
unmasked_\@:
    vrow_max.f32 r26, r21, \tile, r3
    beq r4, 0, first_\@
    vmax.f32 r26, r25, r26, \tile                 # m_new = max(m_old, rowmax S)
first_\@:
    vrow_sub.f32 r21, r21, r26, \tile, r3
    vexp.f32 r21, r21, r3                         # P = exp(S - m_new), in place
    bne r4, 0, rescale_\@
    vrow_sum.f32 r27, r21, \tile, r3              # l = rowsum P
    vzero.f32 r23, r1
    bra pv_\@
rescale_\@:
    vsub.f32 r28, r25, r26, \tile
    vexp.f32 r28, r28, \tile                      # alpha = exp(m_old - m_new)
    vmul.f32 r27, r27, r28, \tile
    vrow_sum.f32 r29, r21, \tile, r3
    vadd.f32 r27, r27, r29, \tile                 # l = l alpha + rowsum P
    vrow_mul.f32 r23, r23, r28, \dh, r1           # O = O alpha
pv_\@:
    vcvt.bf16.f32 r22, r21, r3
    mma.bf16.bl2 r23, r22, r6, \tile, \dh, \tile  # O += bf16(P) V
    mov r7, r25                                   # m_old <- m_new (swap the two row vectors)
    mov r25, r26
    mov r26, r7
    add r4, r4, 1
    add r5, r5, r2
    add r6, r6, r2
    ble r4, \i, key_\@
    vrow_div.f32 r23, r23, r27, \dh, r1           # O / l
    vcvt.bf16.f32 r20, r23, r1                    # bf16 O in the Q tile's place
    shl r7, \dh, 1
    copy2d \dst, r20, \tile, r7, \dst_stride, r7
.endm

# The item loop of the attention kernels (tp/transformer.s attention, and the training kernels of
# tp/block_backward.s): items are (tile, sequence, head) triples in a grid-stride loop (thread
# block %tb takes items %tb, %tb + %ntb, ...), tile-major so that the longest items go first.
#
#   attention_query_order             (an `order`: query tile i = tiles - 1 - r16)
#   attention_key_order               (an `order`: key tile j = r16)
#   attention_forward_item ...        (a `body`: the forward's flash_attention_tile)
#   attention_items order, body
#       `order` is a macro that turns r16 = item / (batch x heads) into the tile index:
#       attention_query_order (query tile i = tiles - 1 - r16: query tile i visits i + 1 key
#       tiles) or attention_key_order (key tile j = r16: key tile j is visited by tiles - j query
#       tiles). `body` is a macro expanded once per item with the operands
#           qt, kb, vb, dst, dst_stride, i, head, tok
#       qt = tile r16 of the head's Q block ([tile][dh], a block of [T][dh] rows), kb / vb = the
#       head's K and V blocks for this sequence (tile 0), dst = `out`[first token of tile r16][head
#       dh] (rows dst_stride = heads dh bf16 apart), i = the tile index, head = the head, tok = the
#       tile's first token. The kernel declares the params qkv, out, seq, batch, heads, dh, tile
#       (tp/transformer.s attention documents them). Registers: r0, r10 (tiles per sequence), r11
#       (sequence-head pairs), r12 (items), r13 (bytes of a head block [T][dh]), r14 (out row
#       bytes), r15 (bytes of the Q, K or V heads: K is r15 after Q, V 2 r15) hold across items;
#       r8, r16 .. r19, r30, r31 are the item's (the body may overwrite them); the body may use
#       r1 .. r7, r9 and r20 .. r29 as well.
.macro attention_query_order
    sub r16, r10, r16
    sub r16, r16, 1                  # r16 = query tile i (longest first)
.endm

.macro attention_key_order
.endm

.macro attention_items order, body
    div r10, %seq, %tile             # r10 = tiles per sequence
    mul r11, %batch, %heads          # r11 = (sequence, head) pairs
    mul r12, r10, r11                # r12 = items
    mul r13, %batch, %seq
    mul r13, r13, %dh
    shl r13, r13, 1                  # r13 = bytes of one head block [T][dh]
    mul r14, %heads, %dh
    shl r14, r14, 1                  # r14 = out row bytes
    mul r15, %heads, r13             # r15 = bytes of the Q (or K, V) heads
    mov r0, %tb
item_\@:
    bge r0, r12, end_\@
    div r16, r0, r11
    \order
    rem r17, r0, r11
    div r18, r17, %heads             # r18 = sequence b
    rem r17, r17, %heads             # r17 = head h
    mul r18, r18, %seq               # r18 = first token of the sequence
    mul r19, r17, r13
    mul r30, r18, %dh
    shl r30, r30, 1
    add r19, r19, r30
    add r19, r19, %qkv               # r19 = Q of (b, h) ([seq][dh])
    mul r31, r16, %tile
    add r18, r18, r31                # r18 = first token of the tile
    mul r31, r31, %dh
    shl r31, r31, 1
    add r31, r31, r19                # r31 = Q tile
    add r19, r19, r15                # r19 = K of (b, h); its V is r15 further
    mul r30, r18, r14
    add r30, r30, %out
    mul r8, r17, %dh
    shl r8, r8, 1
    add r8, r8, r30                  # r8 = out[first token][h dh]
    add r30, r19, r15                # r30 = V of (b, h)
    \body r31, r19, r30, r8, r14, r16, r17, r18
    add r0, r0, %ntb
    bra item_\@
end_\@:
.endm

# the forward's item: O of query tile i (flash_attention_tile)
.macro attention_forward_item qt, kb, vb, dst, dst_stride, i, head, tok
    flash_attention_tile \qt, \kb, \vb, \dst, \dst_stride, \i, %tile, %dh
.endm
