# Kernels of a transformer layer under tensor parallelism (workload.block kinds attention and
# transformer, moehub_arch/workloads/block.py; Megatron-LM, Shoeybi et al., arXiv 1909.08053,
# section 3): the norms, the column-parallel QKV and row-parallel output projections, causal
# attention over this GPU's heads, and the residual adds. The FFN is the shared-expert kernel
# (../common/moe_common.s shared_ffn) and the all-reduce ./allreduce_ring.s. Every kernel takes
# its work in a grid-stride loop (thread block %tb takes items %tb, %tb + %ntb, ...).
.include "lib/tp_gemm.s"
.include "lib/norm.s"
.include "lib/attention.s"

# Sequence parallelism: tp_norm and residual_add take `sharded` (lib/norm.s shard_offset).

# tp_norm: y[T][H] = norm(x) in blocks of `rows` rows (lib/norm.s); consts: fp32 words 1 eps, 2 H.
.kernel tp_norm
.param x
.param y
.param gain                  # [H] fp32
.param bias                  # [H] fp32 (LayerNorm)
.param consts
.param tokens
.param hidden
.param rows                  # rows per block (divides tokens)
.param layernorm             # 1 LayerNorm, 0 RMSNorm
.param sharded               # 1: tokens is the sequence shard of this GPU (see shard_offset)
.smem 128KB
    norm_smem %gain, %bias, %consts, %hidden
    div r10, %tokens, %rows          # r10 = row blocks
    mul r11, %rows, %hidden
    shl r11, r11, 1                  # r11 = bytes of a block
    shl r15, %hidden, 1
    shard_offset r14, %tokens, r15   # r14 = byte offset of the shard
    mov r0, %tb
block:
    bge r0, r10, end
    mul r12, r0, r11
    add r12, r12, r14
    add r13, r12, %x
    add r12, r12, %y
    norm_rows r12, r13, %rows, %hidden, %layernorm
    add r0, r0, %ntb
    bra block
end:
    exit

# tp_gemm: Y = bf16(A W) (lib/tp_gemm.s: the layouts and the job order).
.kernel tp_gemm
.param a
.param w
.param y
.param tokens
.param k
.param ncols                 # N
.param n_tile
.param tile_rows
.param group
.smem 96KB                   # acc fp32 [tile_rows][n] + out bf16 [tile_rows][n]
    tp_gemm_setup
job:
    bge r0, r24, end
    tp_gemm_split
    tp_gemm_compute
    tp_gemm_store
    add r0, r0, %ntb
    bra job
end:
    exit

# attention: causal self-attention of this GPU's `heads` heads (lib/attention.s) over batch x seq
# tokens. qkv: the QKV projection's output, 3 heads blocks of [T][dh] (Q heads 0 .. heads-1, then
# K, then V; T = batch x seq, a sequence's rows [b seq, (b + 1) seq) contiguous in each). out:
# [T][heads dh] bf16, head h at columns h dh (the output projection's A). Items (query tile,
# sequence, head) are taken longest first: query tile i visits i + 1 key tiles.
.kernel attention
.param qkv
.param out
.param mask                  # [tile][tile] fp32: 0 on and below the diagonal, -inf above
.param consts                # fp32 word 0: the softmax scale 1 / sqrt(dh)
.param seq
.param batch
.param heads
.param dh
.param tile                  # Br = Bc (divides seq)
.smem 128KB
    flash_attention_smem %tile, %dh, %mask, %consts
    attention_items attention_query_order, attention_forward_item
    exit

# residual_add: y = bf16(a + b) over `elems` elements, in chunks of `chunk` (the residual
# connections around attention and the FFN).
.kernel residual_add
.param a
.param b
.param y
.param elems
.param chunk
.param sharded               # 1: elems is the sequence shard of this GPU (see shard_offset)
    shl r1, %chunk, 1                # r1 = chunk bytes
    div r2, %elems, %chunk           # r2 = chunks
    shard_offset r6, %elems, 2       # r6 = byte offset of the shard
    mov r0, %tb
next:
    bge r0, r2, end
    mul r3, r0, r1
    add r3, r3, r6
    add r4, r3, %a
    add r5, r3, %b
    add r3, r3, %y
    vadd.bf16 r3, r4, r5, %chunk
    add r0, r0, %ntb
    bra next
end:
    exit
