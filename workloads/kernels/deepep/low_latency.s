# MoE layer, scheme `deepep_ll`: DeepEP's *low-latency* kernels (github.com/deepseek-ai/DeepEP
# csrc/kernels/internode_ll.cu, tests/test_low_latency.py). Launch plan:
# moehub_arch/workloads/schemes/deepep_ll.py.
#
# No count exchange and no host round trip: every receive buffer is sized for the worst case, a
# fixed slot region per (local expert, source rank) of T rows (DeepEP's
# num_max_dispatch_tokens_per_rank), so a sender can write a token the moment it knows its
# experts. A token goes once per top-k expert (no per-rank deduplication), each row a
# GPU-initiated RDMA put (IBGDA) to a GPU of another node, a warp copy over NVLink (put.sm) to a
# GPU of the sender's node (%node_gpus GPUs per node: DeepEP's NVLink path since its PR #173,
# nvshmemi_get_p2p_ptr); the per-(expert, source) count is sent *after* the data, and the
# receiver, once it sees the count, packs the rows into the expert-major layout the grouped GEMM
# reads. Combine sends every expert output row straight back into a slot of the source's
# receive buffer; the source reduces the k rows of each token with its router weights.
#
# Stream 0: deepep_ll_dispatch, grouped_tiles / grouped_gate_up / grouped_down (moe_common.s, on
# the packed rows; skipped with kernels: communication), deepep_ll_combine, deepep_ll_reduce.
# Stream 1: the shared experts (shared_ffn).
#
# Shapes: P GPUs, T tokens per GPU, k = top-k (<= 8), E experts, El local experts, db dispatched
# row bytes, rb = 2H bf16 row bytes. Buffers (per GPU, symmetric):
#   ll_recv   data [El][P][T][db]  receive slots: (local expert le, source s), slot i
#   ll_slot   ctl  [T*k]           the slot token t's j-th row took at its expert (sender side)
#   ll_next   ctl  [E]             sender-side slot counters, one per destination expert
#   ll_sent   ctl  [1]             sender thread blocks whose rows have all landed
#   ll_count  ctl  [El][P]         rows source s sent to local expert le, + 1 (0: not yet known)
#   ll_xe     data [El][P*T][db]   packed rows, expert-major (the grouped GEMM's A)
#   ll_rows   ctl  [El]            packed rows per local expert (the grouped GEMM's counts)
#   ll_range  ctl  [El][P]         where (le, s)'s rows were packed: first << 32 | rows
#   ll_ye     data [El][P*T][rb]   the expert outputs at the packed positions
#   ll_comb   data [E][T][rb]      at home: expert e's output for slot i of the rows sent to it

.include "lib/combine.s"
.include "lib/slot_words.s"
.include "lib/slot_alltoall.s"

# ------------------------------------------------------------------------------------------------
# deepep_ll_dispatch: grid send_tbs + El*P thread blocks.
#   TB b < send_tbs (DeepEP's sending warps): tokens b, b + send_tbs, ...; per top-k slot j the
#     row takes the next slot of its expert (atom.add on ll_next[e]) and goes there with one put
#     (an RDMA write; the slot is also recorded in ll_slot). Then fence (its rows landed), count
#     itself in ll_sent, wait for every sender, and send the counts of experts b, b + send_tbs, ...
#     to their GPUs (flag.set: the count travels after the data).
#   TB send_tbs + le*P + s (DeepEP's receiving warps): waits for the count of (le, s), takes a
#     range of le's packed rows (atom.add on ll_rows[le]) and copies the slots there (one warp
#     copy of the contiguous slots).
.kernel deepep_ll_dispatch
.param x
.param topk_idx
.param recv
.param slot_map
.param next
.param sent
.param count
.param xe
.param rows
.param range
.param acct
.param tokens
.param topk
.param row_bytes
.param local_experts
.param send_tbs
.param node_gpus
    slot_dispatch_begin receiver
token:
    bge r5, %tokens, sent_all
    slot_token_head
slot:
    take_slot
    mul r13, r12, %ngpu
    add r13, r13, %gpu
    mul r13, r13, %tokens
    add r13, r13, r14
    mul r13, r13, r1
    add r13, r13, %recv          # r13 = slot (le, me, slot) on the destination
    div r14, r11, %node_gpus
    div r15, %gpu, %node_gpus
    bne r14, r15, row_rdma       # a GPU of another node: an RDMA write
    put.sm r11, r13, r8, r1      # a GPU of this node: a warp copy over NVLink (DeepEP: p2p pointer)
    bra row_sent
row_rdma:
    put r11, r13, r8, r1         # the row (RDMA write)
row_sent:
    add r10, r10, 1
    next_slot_word r9, %topk, slot
    add r5, r5, %send_tbs
    bra token
sent_all:
    fence                        # every row of this TB landed ...
    red.add %gpu, [%acct], r10   # acct 0: pairs sent
    red.add %gpu, [%sent], 1
    wait.ge [%sent], %send_tbs   # ... and every other sender's
    send_expert_counts end
end:
    exit
receiver:
    receiver_count
    receiver_pack

# ------------------------------------------------------------------------------------------------
# deepep_ll_combine: grid El*P thread blocks, TB le*P + s: the expert outputs of (le, s)'s rows
# (packed at the range dispatch recorded) go back to s, row i into ll_comb[me*El + le][i] there,
# one RDMA write per row as DeepEP's combine sends per token; then fence, and the GPU's last
# thread block raises done[me] on every GPU.
.kernel deepep_ll_combine
.param ye
.param range
.param comb
.param acct
.param done
.param tokens
.param hidden
.param local_experts
.param node_gpus
    slot_combine_rows
row:
    bge r9, r3, rows_sent
    div r10, r6, %node_gpus
    div r11, %gpu, %node_gpus
    bne r10, r11, row_rdma
    put.sm r6, r8, r7, r1        # home in this node: a warp copy over NVLink (DeepEP: p2p pointer)
    bra row_sent
row_rdma:
    put r6, r8, r7, r1           # one expert output row home (RDMA write)
row_sent:
    add r7, r7, r1
    add r8, r8, r1
    add r9, r9, 1
    bra row
rows_sent:
    fence
    atom.add r13, %gpu, [%acct+32], 1
    sub r14, %ntb, 1
    bne r13, r14, leave          # not the GPU's last combine thread block
    tell_every_gpu %done, r16, r15    # done[me] = 1 on every GPU
leave:
    exit

# ------------------------------------------------------------------------------------------------
# deepep_ll_reduce: waits for the shared experts and for done[g] = 1 from every GPU, then per
# token (round-robin over TBs) out[t] = sum_s ys[s][t] + sum_j topk_w[t][j] * (the row expert
# e_j returned into the slot token t took there), in fp32 in that order (moe_common.s's
# moe_combine order: the reference's combine="per_slot").
.kernel deepep_ll_reduce
.param out
.param comb
.param ys
.param topk_idx
.param topk_w
.param slot_map
.param one
.param done
.param acct
.param tokens
.param topk
.param hidden
.param shared
.param shared_tbs
    wait_layer_inputs %shared, %shared_tbs, %acct, %done
    shl r10, %hidden, 1          # r10 = bf16 row bytes
    slot_reduce_tokens
