# MoE layer, scheme `megatron`: Megatron-LM's all-to-all token dispatcher
# (MoEAlltoAllTokenDispatcher) with a grouped GEMM. Launch plan and layouts:
# moehub_arch/workloads/schemes/megatron.py; the permute, all-to-all, sort and unpermute kernels
# are shared with scheme tutel (../common/moe_alltoall.s).

.include "lib/slot_words.s"
.include "lib/combine.s"

# mg_count: tokens per expert (Megatron's histogram of the routing map): per token (TB b takes
# t = b, b + ntb, ...) one red.add per slot into counts[e].
.kernel mg_count
.param topk_idx
.param counts                # [E] i64, zero
.param tokens
.param topk
    shl r2, %topk, 3
    mov r3, %tb
token:
    bge r3, %tokens, end
    mul r6, r3, r2
    add r6, r6, %topk_idx
    ld.v8 r16, [r6]
    mov r9, 0
slot:
    shl r10, r16, 3
    add r10, r10, %counts
    red.add %gpu, [r10], 1
    next_slot_word r9, %topk, slot
    add r3, r3, %ntb
    bra token
end:
    exit

# mg_allgather: the all-gather of the per-expert counts over the expert-parallel group (one TB;
# counts are a few hundred bytes, so the collective is latency-bound: a direct all-gather). The
# GPU puts its count row into allcounts[gpu] on every GPU (itself included), fences, then a
# barrier: bar[gpu] = 1 on every GPU, and waits for every bar[s] = 1 (one layer call per run, so
# the flags need no epochs).
.kernel mg_allgather
.param counts                # [E] i64
.param allcounts             # [ngpu][E] i64
.param bar                   # [ngpu] i64, zero
.param experts
    shl r1, %experts, 3          # r1 = bytes of a count row
    mul r2, %gpu, r1
    add r2, r2, %allcounts       # r2 = allcounts[gpu] (the same address on every GPU)
    mov r3, 0
put_row:
    put r3, r2, %counts, r1
    add r3, r3, 1
    blt r3, %ngpu, put_row
    fence                        # the rows landed before the barrier says so
    tell_every_gpu %bar, r3, r4
    wait_layer_inputs 0, 0, %bar, %bar
    exit
