# MoE layer, scheme `counted`: a one-sided all-to-all on Blackwell's counted writes (NVSHMEM
# counted puts / NCCL's Compute Fabric Transport; components/counted_write.py, isa/counted.yaml).
# Launch plan: moehub_arch/workloads/schemes/counted.py.
#
# As current one-sided NVLink all-to-all kernels do (FlashInfer's, DeepEP's low-latency mode):
# no count exchange before the data and no host round trip - every (local expert, source rank)
# pair owns a fixed region of T receive slots; the sender computes each row's address itself
# (its slot at the expert) and writes it the moment it knows the row's experts. What counted
# writes change is completion: every row is a put.counted naming the counter of its (local
# expert, source) pair at the destination, so the sender no longer fences (waits for every write
# response) before it signals - it sends its per-expert count right after its rows, unordered
# with them, and the receiver waits until the counter holds count x row bytes. Combine sends the
# expert outputs home the same way, into one counter at home: every (token, slot) pair the home
# sent comes back as exactly one row, so the home waits for T x k rows' bytes instead of a done
# flag per GPU that each GPU raises after a fence.
#
# Stream 0: counted_dispatch, grouped_tiles / grouped_gate_up / grouped_down (moe_common.s, on the
# packed rows; skipped with kernels: communication), counted_combine, counted_reduce.
# Stream 1: the shared experts (shared_ffn).
#
# Shapes: P GPUs, T tokens per GPU, k = top-k (<= 8), E experts, El local experts, rb = 2H bf16
# row bytes. Buffers (per GPU, symmetric):
#   cw_recv   data [El][P][T][rb]  receive slots: (local expert le, source s), slot i
#   cw_slot   ctl  [T*k]           the slot token t's j-th row took at its expert (sender side)
#   cw_next   ctl  [E]             sender-side slot counters, one per destination expert
#   cw_sent   ctl  [1]             sender thread blocks that have issued all their rows
#   cw_count  ctl  [El][P]         rows source s sent to local expert le, + 1 (0: not yet known)
#   cw_rx     ctl  [El][P]         byte counters of the dispatch: (le, s)'s landed row bytes
#   cw_back   ctl  [1]             byte counter of the combine at home: every returned row
#   cw_xe     data [El][P*T][rb]   packed rows, expert-major (the grouped GEMM's A)
#   cw_rows   ctl  [El]            packed rows per local expert (the grouped GEMM's counts)
#   cw_range  ctl  [El][P]         where (le, s)'s rows were packed: first << 32 | rows
#   cw_ye     data [El][P*T][rb]   the expert outputs at the packed positions
#   cw_comb   data [E][T][rb]      at home: expert e's output for slot i of the rows sent to it

.include "lib/combine.s"
.include "lib/slot_words.s"
.include "lib/slot_alltoall.s"

# ------------------------------------------------------------------------------------------------
# counted_dispatch: grid send_tbs + El*P thread blocks.
#   TB b < send_tbs (senders): tokens b, b + send_tbs, ...; per top-k slot j the row takes the
#     next slot of its expert (atom.add on cw_next[e]) and goes there with one put.counted into
#     cw_rx[le][me] on the destination. No fence: the sender counts itself in cw_sent, waits for
#     every sender to have issued its rows, and sends the counts of experts b, b + send_tbs, ...
#     (flag.set: they may overtake the rows; the byte counters order nothing).
#   TB send_tbs + le*P + s (receivers): waits for the count of (le, s), then for cw_rx[le][s] to
#     hold count x rb bytes, takes a range of le's packed rows (atom.add on cw_rows[le]) and
#     copies the slots there (one warp copy of the contiguous slots).
.kernel counted_dispatch
.param x
.param topk_idx
.param recv
.param slot_map
.param next
.param sent
.param count
.param rx
.param xe
.param rows
.param range
.param acct
.param tokens
.param topk
.param row_bytes
.param local_experts
.param send_tbs
    slot_dispatch_begin receiver
token:
    bge r5, %tokens, sent_all
    slot_token_head
slot:
    take_slot
    mul r15, r12, %ngpu
    add r15, r15, %gpu           # r15 = le*P + me
    mul r13, r15, %tokens
    add r13, r13, r14
    mul r13, r13, r1
    add r13, r13, %recv          # r13 = slot (le, me, slot) on the destination
    shl r15, r15, 3
    add r15, r15, %rx            # r15 = counter (le, me) on the destination
    put.counted r11, r13, r8, r1, r15   # the row; its landed bytes count at the destination
    add r10, r10, 1
    next_slot_word r9, %topk, slot
    add r5, r5, %send_tbs
    bra token
sent_all:
    red.add %gpu, [%acct], r10   # acct 0: pairs sent
    red.add %gpu, [%sent], 1
    wait.ge [%sent], %send_tbs   # every sender has issued its rows (no fence: nothing waits for
                                 # their write responses)
    send_expert_counts end
end:
    exit
receiver:
    receiver_count
    mul r7, r6, r1
    add r8, r4, %rx
    wait.count [r8], r7          # ... and n rows' bytes have landed
    receiver_pack

# ------------------------------------------------------------------------------------------------
# counted_combine: grid El*P thread blocks, TB le*P + s: the expert outputs of (le, s)'s rows (at
# the range dispatch recorded) go back to s, row i into cw_comb[me*El + le][i] there, one
# put.counted per row into s's combine counter cw_back. No done flag: the home waits on its
# counter (exit waits for the write responses, but nobody waits for that).
.kernel counted_combine
.param ye
.param range
.param comb
.param back
.param tokens
.param hidden
.param local_experts
    slot_combine_rows
row:
    bge r9, r3, rows_sent
    put.counted r6, r8, r7, r1, %back # one expert output row home, counted there
    add r7, r7, r1
    add r8, r8, r1
    add r9, r9, 1
    bra row
rows_sent:
    exit

# ------------------------------------------------------------------------------------------------
# counted_reduce: waits for the shared experts and for cw_back to hold the bytes of every row this
# GPU sent out (T x k rows of rb: each comes back once), then per token (round-robin over TBs)
# out[t] = sum_s ys[s][t] + sum_j topk_w[t][j] * (the row expert e_j returned into the slot token t
# took there), in fp32 in that order (deepep_ll_reduce's order: the reference's combine="per_slot").
.kernel counted_reduce
.param out
.param comb
.param ys
.param topk_idx
.param topk_w
.param slot_map
.param one
.param back
.param acct
.param tokens
.param topk
.param hidden
.param shared
.param shared_tbs
    shl r10, %hidden, 1          # r10 = bf16 row bytes
    beq %shared, 0, shared_ready
    wait.ge [%acct+40], %shared_tbs  # the shared experts' outputs are written
shared_ready:
    mul r5, %tokens, %topk
    mul r5, r5, r10
    wait.count [%back], r5       # every row this GPU sent out is back home
    slot_reduce_tokens
