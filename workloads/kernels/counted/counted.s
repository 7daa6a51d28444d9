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
    mov r1, %row_bytes           # r1 = rb
    shl r2, %topk, 3             # r2 = bytes of a token's ids
    bge %tb, %send_tbs, receiver
    mov r5, %tb                  # r5 = token
    mov r10, 0                   # r10 = rows sent
token:
    bge r5, %tokens, sent_all
    mul r6, r5, r2
    add r6, r6, %topk_idx
    ld.v8 r16, [r6]              # the token's expert ids
    mul r7, r5, %topk            # r7 = t*k
    mul r8, r5, r1
    add r8, r8, %x               # r8 = the row
    mov r9, 0                    # r9 = slot j
slot:
    div r11, r16, %local_experts # r11 = destination GPU
    mul r12, r11, %local_experts
    sub r12, r16, r12            # r12 = local expert there
    shl r13, r16, 3
    add r13, r13, %next
    atom.add r14, %gpu, [r13], 1 # r14 = the row's slot at the expert
    add r13, r7, r9
    shl r13, r13, 3
    add r13, r13, %slot_map
    st [r13], r14                # remembered for the combine
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
    mul r3, %ngpu, %local_experts   # r3 = E
    mov r5, %tb                  # r5 = expert
counts:
    bge r5, r3, end
    shl r6, r5, 3
    add r6, r6, %next
    ld r7, [r6]                  # rows this GPU sent to expert e
    add r7, r7, 1
    div r11, r5, %local_experts
    mul r12, r11, %local_experts
    sub r12, r5, r12
    mul r13, r12, %ngpu
    add r13, r13, %gpu
    shl r13, r13, 3
    add r13, r13, %count
    flag.set r11, [r13], r7      # count + 1, unordered with the rows
    add r5, r5, %send_tbs
    bra counts
end:
    exit
receiver:
    sub r3, %tb, %send_tbs       # r3 = le*P + s
    shl r4, r3, 3
    add r5, r4, %count
    wait.gt [r5], 0              # the count arrived
    ld r6, [r5]
    sub r6, r6, 1                # r6 = rows n
    mul r7, r6, r1
    add r8, r4, %rx
    wait.count [r8], r7          # ... and n rows' bytes have landed
    div r7, r3, %ngpu            # r7 = le
    shl r8, r7, 3
    add r8, r8, %rows
    atom.add r9, %gpu, [r8], r6  # r9 = first packed position
    shl r10, r9, 32
    or r10, r10, r6
    add r11, r4, %range
    st [r11], r10
    beq r6, 0, received
    mul r11, r7, %ngpu
    mul r11, r11, %tokens
    add r11, r11, r9
    mul r11, r11, r1
    add r11, r11, %xe            # r11 = packed rows
    mul r12, r3, %tokens
    mul r12, r12, r1
    add r12, r12, %recv          # r12 = the slots of (le, s)
    mul r13, r6, r1
    put.sm %gpu, r11, r12, r13   # pack them (warp copy)
    fence
received:
    red.add %gpu, [%acct+8], r6  # acct 1: pairs received
    exit

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
    shl r1, %hidden, 1           # r1 = rb
    shl r2, %tb, 3
    add r2, r2, %range
    ld r3, [r2]
    shr r4, r3, 32               # r4 = first packed position
    and r3, r3, 0xffffffff       # r3 = rows
    div r5, %tb, %ngpu           # r5 = le
    rem r6, %tb, %ngpu           # r6 = s
    mul r7, r5, %ngpu
    mul r7, r7, %tokens
    add r7, r7, r4
    mul r7, r7, r1
    add r7, r7, %ye              # r7 = the first output row
    mul r8, %gpu, %local_experts
    add r8, r8, r5               # r8 = e = me*El + le
    mul r8, r8, %tokens
    mul r8, r8, r1
    add r8, r8, %comb            # r8 = cw_comb[e][0] on s
    mov r9, 0
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
    shl r11, %hidden, 2          # r11 = f32 row bytes
    shl r12, %topk, 3            # r12 = bytes of a token's ids
    mov r1, %tb                  # r1 = token
    mov r9, 0                    # r9 = rows combined by this TB
token:
    bge r1, %tokens, end
    start_output_row r2, r1, %out, r11, %shared, %ys, %one, %tokens, r10, %hidden, r3, r4
    mul r5, r1, r12
    add r5, r5, %topk_idx
    ld.v8 r16, [r5]              # expert ids (slot j's in r16 after j shifts)
    mul r5, r1, %topk            # r5 = t*k
    mov r3, 0                    # r3 = slot j
choice:
    add r6, r5, r3
    shl r7, r6, 3
    add r7, r7, %slot_map
    ld r7, [r7]                  # the slot this row took at its expert
    mul r8, r16, %tokens
    add r8, r8, r7
    mul r8, r8, r10
    add r8, r8, %comb            # cw_comb[e][slot]
    shl r7, r6, 2
    add r7, r7, %topk_w
    vaxpy.f32.bf16 r2, r8, r7, %hidden
    next_slot_word r3, %topk, choice
    add r9, r9, %topk
    add r1, r1, %ntb
    bra token
end:
    atom.add r13, %gpu, [%acct+24], r9   # acct 3: rows combined
    exit
