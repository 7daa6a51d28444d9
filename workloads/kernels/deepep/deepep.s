# MoE layer, scheme `deepep`: the software-mediated, bulk-synchronous baseline modelled on DeepEP's
# *normal* (high-throughput) kernels (github.com/deepseek-ai/DeepEP). Launch plan: moehub_arch/workloads/schemes/deepep.py.
#
# Stream 0, in order (each kernel starts one launch latency after the previous one ended):
#   deepep_layout    per token: its destination ranks (deduplicated), per-(rank, channel) token
#                    counts and per-expert row counts; the token's dispatch metadata row
#   deepep_notify    barrier, every rank puts its count row into every peer, fence, barrier; then
#                    per local expert: total rows, base offset (packed expert-major layout) and
#                    the GEMM tile table
#   (host)           the dispatch launch carries host_delay = host_sync_latency: the CPU polls the
#                    counts, allocates the receive tensors and launches dispatch
#   deepep_dispatch  C = comm_sms / 2 channels on comm_sms SMs (a sender and a receiver block per
#                    channel, one warp group per peer rank); senders push token rows through
#                    per-(channel, peer) ring buffers on the receiving rank with warp copies
#                    (put.sm); receivers unpack them expert-major
#   deepep_gate_up   grouped GEMM (SwiGLU) over the expert-major buffer: gate/up jobs (tile, q)
#   deepep_down      then the down jobs (tile, c); jobs dealt round-robin to the TBs
#   deepep_cached_notify (home_reduce: receivers) DeepEP's cached_notify_combine: barrier, clean
#                    the combine rings' control words, barrier
#   deepep_combine   (home_reduce: receivers, DeepEP's) on 2C SMs: C sender blocks, one warp group
#                    per home rank: per received token the fp32 weighted sum of its local expert
#                    outputs, one bf16 row copied into ring (c, me) on the token's home (put.sm);
#                    C receiver blocks at home: a head updater and P - 1 reducers that sum each
#                    token's rows from its rings (shared experts first, ranks ascending) into out
#   (home_reduce: kernel, the first model) deepep_combine_partials on C SMs: the same partial rows
#                    straight into dp_comb at home, the last warp group raises done[me]
#                    everywhere; then deepep_reduce: out = shared experts + partial rows of the
#                    ranks, ascending rank
# Stream 1: the shared experts (shared_ffn in ../common/moe_common.s). There is no
# cross-stream event: the home reduction waits for their thread blocks to have counted themselves
# (acct word 5) before it reads their output ys.
# workload.layer.deepep.kernels: communication (DeepEP's own benchmark: dispatch and combine
# alone) launches layout, notify, dispatch, combine and reduce only: no GEMMs, no shared experts;
# the experts are the identity - combine reads the received rows (dp_recv_x) as expert outputs -
# or, with fp8 dispatch, reads dp_recv_y (bf16 rows of the right size; timing mode only).
#
# Shapes: P GPUs (%ngpu), T tokens per GPU, k = top-k (<= 8), H hidden, rb = 2H bf16 row bytes,
# db = dispatched row bytes (rb, or H + 4 * ceil(H/128) for fp8 rows with their scales), El local
# experts (GPU g holds experts g*El .. g*El+El-1), C channels, R = ring_rows, Tc = ceil(T / C)
# tokens per channel (channel c owns tokens c*Tc .. min(T, c*Tc + Tc) - 1, as DeepEP's channels
# own contiguous token ranges), W = C + El words per count row. All words i64 unless said.
#
# Buffers (per GPU, symmetric: the same address on every GPU). "ctl" = region control (backed by
# real memory in timing mode: everything a kernel reads with ld/wait); "data" = numbers only in
# functional mode.
#   dp_meta   ctl  [T][16]     token t's dispatch metadata (written by layout):
#                              words 0..7: expert id of slot j | t << 32 (k words used),
#                              words 8..11: the k router weights (f32),
#                              words 12..15: rank mask (word 12 + r / 62, bit r % 62: a slot's
#                              expert is on rank r; deepep_layout writes word 12 only)
#                              (words 0..11 = 96 B travel with the row: DeepEP's src_idx, topk_idx,
#                              topk_weights rings, here one metadata ring)
#   dp_lay    ctl  [P][W]      count row for rank r: words 0..C-1 tokens of channel c going to r,
#                              words C..C+El-1 rows for r's local experts (layout, red.add)
#   dp_ntf    ctl  [P][W]      the count rows received from every source s (notify, put)
#   dp_bar    ctl  [P]         barrier words: bar[s] is written by source s (epoch values)
#   dp_info   ctl  [4]         0: notify's "counts are in" epoch; 1: GEMM tiles in total;
#                              2: "tile table complete" epoch; 3: notify groups finished
#   dp_grp    ctl  [G][4]      notify group q (experts 8q..8q+7): rows, tiles, published epoch
#   dp_cursor ctl  [El]        per local expert: next free row of its region in dp_recv_x
#                              (notify sets it to the region base; receivers atom.add it)
#   dp_tiles  ctl  [tiles][4]  GEMM tile table: first row (in dp_recv_x), rows, local expert,
#                              1 if it is the expert's first tile
#   dp_rank_slots ctl [P][ceil(T/16)]  nibble t % 16 of word [r][t / 16]: how many of token t's
#                              slots are on rank r (layout, red.add; senders read 16 tokens a load)
#   dp_ring_ctl ctl            tail [C][P]: tail[c][s] (receiver side: tokens source s pushed into
#                              this rank's ring (c, s)); head [C][P]: head[c][r] (sender side: tokens
#                              receiver r consumed from ring (c, me) on r) - both count tokens since
#                              the start; then the metadata ring slots [C][P][R][12] (words 0..11 of
#                              dp_meta)
#   dp_x_fp8  data [T][db]   fp8 dispatch only: the tokens as e4m3 elements followed by their fp32
#                              scales (DeepEP's (x, x_scales) input); dispatch reads it instead of x
#   dp_ring_x data [C][P][R][db]    token-row ring slots ((c, s) on rank r: from source s)
#   dp_recv_x data [rows][db]  received rows, expert-major: expert le's rows are a contiguous
#                              region starting at its base (prefix sum over local experts)
#   dp_hh     data [rows][I]   bf16 silu(X Wg) * (X Wu) of every received row (between the GEMMs)
#   dp_recv_y data [rows][rb]  expert outputs at the same positions
#   dp_rec    ctl  [C][P][Tc][12]  per received token (receiver (c, s), i-th token):
#                              words 0..7: t << 32 | (row position + 1) for slot j if its expert is
#                              local, t << 32 if not; words 8..11 the router weights (f32)
#   dp_send_head ctl [T][P]    written by the dispatch senders: token t's position in ring (c, me) on
#                              rank r (tokens sent before it), -1 if it does not go to r
#   dp_cring_x data [C][P][R][rb]  home_reduce receivers: combine ring (c, r) on the home rank (rows
#                              from rank r)
#   dp_cring_ctl ctl [3][C][P] tail (home: rows rank r pushed into ring (c, r)), head (sender rank:
#                              positions home s freed in ring (c, me) there), progress (home: tokens
#                              reducer w of channel c finished)
#   dp_comb   data [T][P][rb]  home_reduce kernel: the bf16 partial row of token t from rank r
#   dp_combine_scratch data    per combine warp group: 8 bf16 staging rows
#   acct      ctl  (common)    0 sent, 1 received, 2 computed, 3 combined (token-expert pairs);
#                              4: combine TBs finished
#
# Epochs: the barrier words only grow (barrier 1 of epoch e writes 2e-1, barrier 2 writes 2e), so
# a wait.ge can never be satisfied by a stale value of an earlier layer call.

# the kernel library (workloads/kernels/lib/): routines several schemes share
.include "lib/gemm_tiles.s"
.include "lib/combine.s"
.include "lib/slot_words.s"
.include "lib/ring.s"

# rank_barrier mine, value, i: a barrier across the ranks (DeepEP's barrier_block): stores
# `value` into bar[me] on every rank (`mine` = &bar[me], the same address everywhere; flag.set),
# then waits until bar[s] >= value for every rank s (one warp-wide check, a lane per rank: DeepEP's
# barrier_block has thread s poll rank s's word). Barrier words only grow (epoch values). Writes i.
.macro rank_barrier mine, value, i
    mov \i, 0
set_\@:
    flag.set \i, [\mine], \value
    add \i, \i, 1
    blt \i, %ngpu, set_\@
    wait.all.ge [%bar], \value, %ngpu
.endm

# ------------------------------------------------------------------------------------------------
# deepep_layout: TB b handles tokens b, b + ntb, ... (one ld.v8 of the token's ids each; many TBs
# hide that load latency). Counts with posted local red.add. A token is counted once per
# destination rank (dedup: the mask bit of the rank is tested before counting), as DeepEP sends a
# token once to every rank holding any of its experts. Slot loops walk the ids in registers,
# shifting them down one register per slot (registers cannot be indexed; shared memory holds no
# words in timing mode).
#
# The token's rank mask (dp_meta words 12..15) holds ranks 62w .. 62w + 61 in word 12 + w, bits
# 0..61 (a bit 63 would not survive the reference engine's signed words): deepep_layout keeps word
# 0 in r12 and serves up to 62 ranks; deepep_layout_wide keeps the four words in r12, r28, r29,
# r30 (up to 248 ranks: GB200 NVL72's 72). Both are one kernel body (layout_kernel) around the
# rank-bit routines below, so the 62-rank kernel runs exactly the instructions it always ran.
.macro mask_clear_1word
    mov r12, 0                   # r12 = rank mask
.endm

.macro mask_store_1word
    st [r7+96], r12              # meta word 12 = rank mask
.endm

# rank_bit_1word seen: branch to `seen` if bit r14 (the slot's rank) of the mask is set, else set it
.macro rank_bit_1word seen
    shl r26, 1, r14
    and r27, r12, r26
    bne r27, 0, \seen            # the token already goes to this rank
    or r12, r12, r26
.endm

.macro mask_clear_4words
    mov r12, 0                   # r12, r28, r29, r30 = rank mask words 0..3
    mov r28, 0
    mov r29, 0
    mov r30, 0
.endm

.macro mask_store_4words
    st [r7+96], r12              # meta words 12..15 = rank mask words 0..3
    st [r7+104], r28
    st [r7+112], r29
    st [r7+120], r30
.endm

# rank_bit_in word, seen, done: the test-and-set of one mask word (the bit in r26)
.macro rank_bit_in word, seen, done
    and r27, \word, r26
    bne r27, 0, \seen
    or \word, \word, r26
    bra \done
.endm

.macro rank_bit_4words seen
    div r27, r14, 62             # r27 = the rank's mask word
    mul r26, r27, 62
    sub r26, r14, r26
    shl r26, 1, r26              # r26 = its bit in the word
    beq r27, 0, w0_\@
    beq r27, 1, w1_\@
    beq r27, 2, w2_\@
    rank_bit_in r30, \seen, set_\@
w2_\@:
    rank_bit_in r29, \seen, set_\@
w1_\@:
    rank_bit_in r28, \seen, set_\@
w0_\@:
    rank_bit_in r12, \seen, set_\@
set_\@:
.endm

.macro layout_kernel name, mask_clear, rank_bit, mask_store
.kernel \name
.param topk_idx
.param topk_w
.param meta
.param lay
.param rank_slots
.param tokens
.param topk
.param channels
.param local_experts
    add r1, %tokens, %channels
    sub r1, r1, 1
    div r1, r1, %channels        # r1 = Tc, tokens per channel
    add r2, %channels, %local_experts   # r2 = W
    shl r3, %topk, 3             # r3 = bytes of a token's ids
    shl r4, %topk, 2             # r4 = bytes of a token's weights
    mov r5, %tb                  # r5 = token
token:
    bge r5, %tokens, end
    mul r6, r5, r3
    add r6, r6, %topk_idx
    ld.v8 r16, [r6]              # r16.. = the token's expert ids (k <= 8, one access)
    shl r7, r5, 7
    add r7, r7, %meta            # r7 = dp_meta[t]
    mul r8, r5, r4
    add r8, r8, %topk_w
    add r9, r7, 64
    put %gpu, r9, r8, r4         # weights -> meta words 8..11 (async local copy; exit fences)
    div r10, r5, r1              # r10 = the token's channel
    shl r11, r5, 32              # r11 = t << 32
    \mask_clear
    mov r13, 0                   # r13 = slot j; its id is in r16 (the ids shift down each slot:
                                 # registers cannot be indexed)
choice:
    div r14, r16, %local_experts # r14 = the expert's rank
    mul r15, r14, r2             # r15 = lay row of that rank (words)
    mul r24, r14, %local_experts
    sub r24, r16, r24            # r24 = local expert on that rank
    add r24, r24, %channels
    add r24, r24, r15
    shl r24, r24, 3
    add r24, r24, %lay
    red.add %gpu, [r24], 1       # rows for the expert
    or r25, r16, r11
    shl r26, r13, 3
    add r26, r26, r7
    st [r26], r25                # meta word j = id | t << 32
    add r24, %tokens, 15         # rank_slots[rank][t / 16] nibble t % 16: the token's slots on
    shr r24, r24, 4              # the rank (at most 8: no carry into the next nibble)
    mul r24, r24, r14
    shr r25, r5, 4
    add r24, r24, r25
    shl r24, r24, 3
    add r24, r24, %rank_slots
    and r25, r5, 15
    shl r25, r25, 2
    shl r25, 1, r25
    red.add %gpu, [r24], r25
    \rank_bit next
    add r24, r15, r10
    shl r24, r24, 3
    add r24, r24, %lay
    red.add %gpu, [r24], 1       # one more token of this channel for the rank
next:
    next_slot_word r13, %topk, choice
    \mask_store
    add r5, r5, %ntb
    bra token
end:
    exit
.endm

layout_kernel deepep_layout, mask_clear_1word, rank_bit_1word, mask_store_1word
layout_kernel deepep_layout_wide, mask_clear_4words, rank_bit_4words, mask_store_4words

# ------------------------------------------------------------------------------------------------
# deepep_notify: grid G = ceil(El / 8). TB 0 runs the cross-rank protocol: barrier 1 (flag.set
# bar[me] on every peer, wait for every bar[s]), put its count row for peer r into dp_ntf[me] on r
# (every peer, itself included), fence (the rows landed), barrier 2; then it tells the other TBs
# (dp_info[0] = epoch). Receiver side, TB q sums the rows of local experts 8q..8q+7 over the P
# sources (one ld.v8 per source), publishes its group's rows and tiles, takes the earlier groups'
# totals as its base (the expert-major prefix sum), sets each expert's cursor to its region base
# and writes the group's GEMM tiles into the tile table. The per-(source, channel) token counts
# the dispatch receivers expect are read straight from dp_ntf (no prefix needed: each receiver
# owns its own record array). With align > 1 every expert's region starts at a multiple of align
# rows (scheme overlap: align = tile rows, so a row's tile is its position / tile rows). The last
# group to finish its tiles sets dp_info[2] = epoch (kernels that run concurrently wait on it).
.kernel deepep_notify
.param lay
.param ntf
.param bar
.param info
.param grp
.param cursor
.param tiles
.param epoch
.param channels
.param local_experts
.param tile_rows
.param align                 # expert regions start at multiples of this many rows (1: packed)
    add r1, %channels, %local_experts
    shl r2, r1, 3                # r2 = bytes of a count row
    bne %tb, 0, ready_wait
    shl r3, %epoch, 1            # r3 = barrier-2 value 2e
    sub r4, r3, 1                # r4 = barrier-1 value 2e-1
    shl r5, %gpu, 3
    add r5, r5, %bar             # r5 = &bar[me] (the same address on every GPU)
    rank_barrier r5, r4, r6  # barrier 1
    mul r8, %gpu, r2
    add r8, r8, %ntf             # r8 = &ntf[me] (on every peer)
    mov r6, 0
exchange:
    mul r9, r6, r2
    add r9, r9, %lay             # my count row for peer r6
    put r6, r8, r9, r2
    add r6, r6, 1
    blt r6, %ngpu, exchange
    fence                        # every row landed before barrier 2 says so
    rank_barrier r5, r3, r6  # barrier 2
    flag.set %gpu, [%info], %epoch   # every source's counts are here
    bra sums
ready_wait:
    wait.ge [%info], %epoch
sums:
    shl r10, %tb, 3              # r10 = first local expert of the group
    sub r11, %local_experts, r10
    min r11, r11, 8              # r11 = experts in the group
    mov r24, 0
    mov r25, 0
    mov r26, 0
    mov r27, 0
    mov r28, 0
    mov r29, 0
    mov r30, 0
    mov r31, 0
    add r12, %channels, r10
    shl r12, r12, 3
    add r12, r12, %ntf           # r12 = &ntf[0][C + first]
    mov r6, 0
sum_src:
    ld.v8 r16, [r12]             # 8 expert counts of source r6 (words past the group: ignored)
    add r24, r24, r16
    add r25, r25, r17
    add r26, r26, r18
    add r27, r27, r19
    add r28, r28, r20
    add r29, r29, r21
    add r30, r30, r22
    add r31, r31, r23
    add r12, r12, r2
    add r6, r6, 1
    blt r6, %ngpu, sum_src
    mov r13, 0                   # r13 = rows of the group
    mov r14, 0                   # r14 = tiles of the group
    mov r15, r24                 # walk a copy of the totals (r16.. are free again)
    mov r16, r25
    mov r17, r26
    mov r18, r27
    mov r19, r28
    mov r20, r29
    mov r21, r30
    mov r22, r31
    mov r6, 0
grp_total:
    add r23, r15, %align         # rows of the expert's region: total rounded up to align
    sub r23, r23, 1
    div r23, r23, %align
    mul r23, r23, %align
    add r13, r13, r23
    add r23, r15, %tile_rows
    sub r23, r23, 1
    div r23, r23, %tile_rows
    add r14, r14, r23
    mov r15, r16                 # next expert's total into r15
    mov r16, r17
    mov r17, r18
    mov r18, r19
    mov r19, r20
    mov r20, r21
    mov r21, r22
    add r6, r6, 1
    blt r6, r11, grp_total
    shl r7, %tb, 5
    add r7, r7, %grp
    st [r7], r13
    st [r7+8], r14
    flag.set %gpu, [r7+16], %epoch   # group q's totals are published
    mov r17, 0                   # r17 = row base (rows of the earlier groups)
    mov r18, 0                   # r18 = tile base
    mov r6, 0
earlier:
    bge r6, %tb, bases
    shl r7, r6, 5
    add r7, r7, %grp
    wait.ge [r7+16], %epoch
    ld r19, [r7]
    add r17, r17, r19
    ld r19, [r7+8]
    add r18, r18, r19
    add r6, r6, 1
    bra earlier
bases:
    mov r6, 0                    # the expert's total is in r24 (shifted down per expert)
expert:
    bge r6, r11, group_done
    add r20, r10, r6             # r20 = local expert
    shl r7, r20, 3
    add r7, r7, %cursor
    st [r7], r17                 # the expert's region starts at the row base
    mov r21, 0                   # r21 = first row of the tile inside the expert
tile:
    bge r21, r24, expert_next
    sub r22, r24, r21
    min r22, r22, %tile_rows
    shl r7, r18, 5
    add r7, r7, %tiles
    add r23, r17, r21
    st [r7], r23                 # tile: first row, rows, local expert, first of the expert?
    st [r7+8], r22
    st [r7+16], r20
    seteq r23, r21, 0
    st [r7+24], r23
    add r18, r18, 1
    add r21, r21, %tile_rows
    bra tile
expert_next:
    add r23, r24, %align         # the next region starts after this one, aligned
    sub r23, r23, 1
    div r23, r23, %align
    mul r23, r23, %align
    add r17, r17, r23
    mov r24, r25
    mov r25, r26
    mov r26, r27
    mov r27, r28
    mov r28, r29
    mov r29, r30
    mov r30, r31
    add r6, r6, 1
    bra expert
group_done:
    sub r7, %ntb, 1
    bne %tb, r7, counted
    st [%info+8], r18            # the last group ends the tile list: tiles in total
counted:
    atom.add r7, %gpu, [%info+24], 1
    sub r8, %ntb, 1
    bne r7, r8, end              # not the last group to finish its tiles
    flag.set %gpu, [%info+16], %epoch   # the tile table and every cursor are written
end:
    exit

# ------------------------------------------------------------------------------------------------
# deepep_dispatch: grid 2*C blocks of P warp groups (launch warp_groups: P), one block per SM as
# DeepEP's 768-thread channel blocks: blocks 0..C-1 are the channels' sender SMs (one warp group
# per destination rank), blocks C..2C-1 their receiver SMs (one warp group per source rank). Each
# warp group is its own instruction stream (it sleeps on one word and keeps its state in
# registers), numbered %tb = block * P + group:
#   TB c*P + r (< C*P): sender of channel c to rank r. Walks the channel's tokens in order; a token
#     with slots on r (its nibble in dp_rank_slots; one load per 16 tokens) waits for room in ring
#     (c, me) on r (the head r publishes back), then copies the token row and its 96 B metadata
#     row into slot (sent % R) with warp copies (put.sm: loads through the SM's LSU, stores to the
#     peer's ring; DeepEP's UNROLLED_WARP_COPY with st.global). After every min(send_chunk, max(1, R/2)) tokens, before waiting on a full ring
#     and at the end it fences and publishes the tail with flag.set (release: the slots' data
#     landed before the tail moves). Counts the token's slots on r as pairs sent.
#   TB C*P + c*P + s: receiver of ring (c, s) on this rank. Expects ntf[s][c] tokens; waits on the
#     tail (acquire); for each landed token reads its metadata (one ld.v8) and for each slot j whose
#     expert is local takes a row position with atom.add on the expert's cursor and copies the row
#     there (warp copy, put.sm); writes the token's record (positions + weights) for the combine;
#     after each batch fences (the slots were copied out) and publishes its head to the sender.
.kernel deepep_dispatch
.param x
.param meta
.param rank_slots
.param ring_x
.param ring_ctl              # tail [C][P], head [C][P], then the metadata ring slots
.param ntf
.param rec
.param recv_x
.param cursor
.param acct
.param send_head             # [T][P] i64: token t's position in ring (c, me) on rank r, or -1
.param tokens
.param topk
.param row_bytes             # bytes of a dispatched row: 2H (bf16) or H + 4 * H/128 (fp8 + scales)
.param channels
.param ring_rows
.param send_chunk            # tokens per published chunk (capped at half the ring)
.param local_experts
.threads 768                 # DeepEP intranode.cu: kNumThreads = 768, __launch_bounds__(768, 1)
.regs 80                     # at most 65536 / 768 registers per thread, in allocation units of 8 (256 per warp): 80
    ring_dispatch_roles          # senders send and exit; a receiver has its ring open
    ring_receive_to_experts r6
    exit

# ------------------------------------------------------------------------------------------------
# Grouped GEMM over dp_recv_x, split into jobs of n = n_tile output columns so several SMs work on
# one row tile (workload.layer.gemm_n_tile; the same job split, weight layout and L2 convention as
# the shared experts in ../common/moe_common.s): w_gate/w_up [El][I/n][H][n], w_down [El][H/n][I][n].
# Jobs are dealt round-robin to the TBs in swizzle_job's order (../lib/gemm_tiles.s: groups of
# `swizzle` row tiles, column job outer, so the blocks running at one time share weight tiles).
# deepep_gate_up: job (tile, q) writes columns [q*n, (q+1)*n) of
#   Hh = bf16(silu(X Wg) * (X Wu)) into dp_hh; deepep_down (next on the stream, so every column of
#   Hh is there) job (tile, c) writes columns [c*n, (c+1)*n) of bf16(Hh Wd) into dp_recv_y. The
#   same instruction sequence as the other schemes (vzero, mma, vsilu_mul.bf16.f32 / vcvt), so the
#   values are bit-identical. fp32 accumulators in shared memory (the register-file stand-in).
#   L2: A through the L2 unless the job is the tile's first gate/up job (the first reader), B
#   through the L2 unless the tile is its expert's first (first touch of the weights).
.kernel deepep_gate_up
.param recv_x
.param hh                    # [rows][I] bf16
.param tiles
.param info
.param wg
.param wu
.param hidden
.param ffn
.param tile_rows
.param n_tile
.param swizzle               # row tiles per group of the job order (swizzle_job)
.smem 160KB                  # G, U [tile][n] f32 + Hq [tile][n] bf16
.smem_job 10                 # bytes per element of a tile_rows x n_tile job (fits a smaller SM)
.threads 384                 # assumption: DeepGEMM's grouped GEMM block (github.com/deepseek-ai/DeepGEMM): 128 TMA + 256 math threads, __launch_bounds__(384, 1)
.regs 168                    # assumption: its warp-specialised register split (setmaxnreg 40 for the TMA warps, 232 for the math warps): 128 x 40 + 256 x 232 = 64512 = 384 x 168
    gemm_smem r8, r9, %tile_rows, %n_tile, r20, r21    # r8 = G; r9 = U
    add r10, r9, r21             # r10 = Hq
    shl r23, %hidden, 1          # r23 = x row bytes (r12..r19: the tile entry)
    shl r25, %n_tile, 1          # r25 = Hq row bytes
    shl r26, %ffn, 1             # r26 = Hh row bytes
    mul r27, %hidden, %n_tile
    shl r27, r27, 1              # r27 = bytes of one [H][n] weight tile
    div r24, %ffn, %n_tile       # r24 = gate/up jobs per row tile
    ld r28, [%info+8]            # r28 = row tiles
    mul r30, r28, r24            # r30 = jobs
    mov r1, %tb                  # r1 = job
job:
    bge r1, r30, end
    swizzle_job r1, r28, r24, %swizzle, r4, r5, r18, r19    # r4 = row tile; r5 = q
    shl r2, r4, 5
    add r2, r2, %tiles
    ld.v8 r12, [r2]              # r12 = first row, r13 = rows, r14 = local expert, r15 = first tile?
    mul r16, r12, r23
    add r16, r16, %recv_x        # r16 = A: the tile's rows
    weight_tile_offset r7, r14, r24, r5, r27    # r7 = offset of weight tile (expert, q)
    add r11, r7, %wg
    add r7, r7, %wu
    mul r17, r13, %n_tile        # r17 = rows * n
    swiglu_tile r8, r9, r10, r16, r11, r7, r13, %n_tile, %hidden, r17, r5, r15, 1
    mul r6, r12, r26
    mul r3, r5, r25
    add r6, r6, r3
    add r6, r6, %hh              # r6 = Hh[first row][q * n]
    copy2d r6, r10, r13, r25, r26, r25
    add r1, r1, %ntb
    bra job
end:
    exit

.kernel deepep_down
.param hh
.param recv_y
.param tiles
.param info
.param wd
.param acct
.param hidden
.param ffn
.param tile_rows
.param n_tile
.param swizzle               # row tiles per group of the job order (swizzle_job)
.smem 96KB                   # Y [tile][n] f32 + Yq [tile][n] bf16
.threads 384                 # assumption: DeepGEMM's grouped GEMM block (github.com/deepseek-ai/DeepGEMM): 128 TMA + 256 math threads, __launch_bounds__(384, 1)
.regs 168                    # assumption: its warp-specialised register split (setmaxnreg 40 for the TMA warps, 232 for the math warps): 128 x 40 + 256 x 232 = 64512 = 384 x 168
    gemm_smem r8, r9, %tile_rows, %n_tile, r20, r21    # r8 = Y; r9 = Yq
    shl r23, %hidden, 1          # r23 = y row bytes (r12..r19: the tile entry)
    shl r25, %n_tile, 1          # r25 = Yq row bytes
    shl r26, %ffn, 1             # r26 = Hh row bytes
    mul r27, %ffn, %n_tile
    shl r27, r27, 1              # r27 = bytes of one [I][n] weight tile
    div r24, %hidden, %n_tile    # r24 = down jobs per row tile
    ld r28, [%info+8]            # r28 = row tiles
    mul r30, r28, r24            # r30 = jobs
    mov r22, 0                   # r22 = rows computed (counted by the c = 0 jobs)
    mov r1, %tb
job:
    bge r1, r30, end
    swizzle_job r1, r28, r24, %swizzle, r4, r5, r18, r19    # r4 = row tile; r5 = c
    shl r2, r4, 5
    add r2, r2, %tiles
    ld.v8 r12, [r2]              # r12 = first row, r13 = rows, r14 = local expert, r15 = first tile?
    mul r16, r12, r26
    add r16, r16, %hh            # r16 = A: Hh rows of the tile
    weight_tile_offset r7, r14, r24, r5, r27
    add r11, r7, %wd             # r11 = weight tile (expert, c)
    mul r17, r13, %n_tile        # r17 = rows * n
    gemm_tile_a_l2 r8, r9, r16, r11, r13, %n_tile, %ffn, r17, r15, 1
    mul r6, r12, r23
    mul r3, r5, r25
    add r6, r6, r3
    add r6, r6, %recv_y          # r6 = Y[first row][c * n]
    copy2d r6, r9, r13, r25, r23, r25
    bne r5, 0, counted
    add r22, r22, r13
counted:
    add r1, r1, %ntb
    bra job
end:
    red.add %gpu, [%acct+16], r22    # acct 2: pairs computed
    exit

# ------------------------------------------------------------------------------------------------
# deepep_combine_partials (workload.layer.deepep.home_reduce: kernel, the first model, kept to
# compare; deepep_reduce sums its rows after it ended): grid C blocks of P warp groups (launch warp_groups: P; DeepEP's combine also runs
# on the comm SMs, one warp group per rank; with more ranks than a block's shared memory holds
# accumulators for, one thread block per rank instead), %tb = c*P + s walks the records of receiver
# (c, s) - the tokens this rank received from home s on channel c. Per token: fp32 acc = 0 (shared
# memory, the register-file stand-in); for slots j ascending whose expert is here,
# acc += w_j * Y[position] (vaxpy.f32.bf16, on the vector unit; one instruction per row: the
# group's warps stream through the row with their loads in flight); the bf16 partial goes home with
# one warp copy (put.sm: loads through the LSU, stores to dp_comb[t*P + me] on s). The bf16 rows
# are staged in 8 scratch slots; before a slot is reused the copies from it must have completed
# (fence every 8 tokens). When its copies are done the warp group counts itself finished; the
# last one of the rank raises done[me] on every GPU.
.kernel deepep_combine_partials
.param rec
.param ntf
.param recv_y
.param comb
.param scratch               # per warp group: 8 bf16 staging rows
.param acct
.param done
.param tokens
.param topk
.param hidden
.param channels
.param local_experts
.smem 28KB                   # acc [H] f32 (H <= 7168; 8 groups x 28 KB fit an SM's 228 KB)
    shl r1, %hidden, 1           # r1 = rb
    add r2, %tokens, %channels
    sub r2, r2, 1
    div r2, r2, %channels        # r2 = Tc
    combine_records_open %tb     # r5 = channel, r6 = home s, r9 = tokens, r12 = records
    mov r10, %smem               # r10 = acc
    shl r4, r1, 3                # r4 = scratch bytes per warp group
    mul r11, %tb, r4
    add r11, r11, %scratch       # r11 = staging slots
    mov r24, 0                   # r24 = record
    mov r25, 0                   # r25 = pairs combined
tok:
    bge r24, r9, all_sent
    rank_partial_row %recv_y, %hidden, r25   # r10 = the fp32 sum, r27 = t, r25 += pairs
    and r29, r24, 7              # staging slot
    bne r29, 0, staged
    fence                        # slot reuse: the copies of 8 tokens ago are done
staged:
    mul r30, r29, r1
    add r30, r30, r11
    vcvt.bf16.f32 r30, r10, %hidden
    mul r31, r27, %ngpu
    add r31, r31, %gpu
    mul r31, r31, r1
    add r31, r31, %comb
    put.sm r6, r31, r30, r1      # the partial row home: dp_comb[t*P + me] on s
    add r24, r24, 1
    bra tok
all_sent:
    fence
    red.add %gpu, [%acct+24], r25    # acct 3: pairs combined
    atom.add r13, %gpu, [%acct+32], 1
    sub r14, %ntb, 1
    bne r13, r14, leave          # not the rank's last combine warp group
    tell_every_gpu %done, r16, r15    # done[me] = 1 on every GPU
leave:
    exit

# ------------------------------------------------------------------------------------------------
# deepep_cached_notify: DeepEP's cached_notify_combine (csrc/kernels/intranode.cu), the kernel
# Buffer.combine launches before every intranode combine (deep_ep/buffers/legacy.py, so in
# tests/test_intranode.py's timed region too): block 0 runs a barrier across the ranks
# (barrier_block), zeroes the combine rings' control words (head, tail, ...: `ctl_bytes` at
# %ctl) and runs a second barrier, so that no sender writes a ring before its home has cleaned
# it. Barrier values 2e-1 and 2e (epoch e = deepep_notify's + 1). DeepEP's other blocks rewrite
# the send_head entries of tokens a rank did not receive (-1) for its receivers' head
# bookkeeping; the receivers here skip those entries, so they are left out (one read of
# T x P ints by a handful of blocks, beside the barriers' round trips).
.kernel deepep_cached_notify
.param bar
.param ctl
.param ctl_bytes
.param epoch
    shl r3, %epoch, 1            # r3 = barrier-2 value 2e
    sub r4, r3, 1                # r4 = barrier-1 value 2e-1
    shl r5, %gpu, 3
    add r5, r5, %bar             # r5 = &bar[me] (the same address on every GPU)
    rank_barrier r5, r4, r6  # barrier before cleaning
    shr r8, %ctl_bytes, 2
    vzero.f32 %ctl, r8           # clean the rings' control words
    fence                        # cleaned before the barrier says so
    rank_barrier r5, r3, r6  # barrier after cleaning
    exit

# ------------------------------------------------------------------------------------------------
# deepep_combine (workload.layer.deepep.home_reduce: receivers, the default): DeepEP's intranode
# combine (csrc/kernels/intranode.cu, `combine`): the home reduction runs inside the kernel, on the
# channels' receiver SMs. Grid 2C blocks of P warp groups (launch warp_groups: P), one block per
# SM: blocks 0..C-1 the channels' sender SMs, C..2C-1 their receiver SMs (with more ranks than an
# SM holds fp32 accumulators for, one thread block per stream instead). %tb = block * P + group:
#   TB c*P + s (< C*P): sender of channel c to home s. Walks the records of the tokens this rank
#     received from s on channel c, in the order it received them: per token the fp32 weighted
#     sum of its local expert outputs (rank_partial_row: the caller's part in DeepEP, which takes
#     the rows already weighted; fused here), rounded to bf16 in a staging row - or, with
#     bench_rows = 1 (kernels: communication, DeepEP's tests/test_intranode.py, which combines the
#     rows each rank received, unweighted), the received row itself (rank_received_row) - then
#     copied with a warp copy (put.sm) into slot (i % R) of ring (c, me) on s - the token's i-th
#     position there,
#     as dispatch recorded it in send_head. Ring flow control in chunks of
#     min(send_chunk, max(1, R/2)) positions: fence and publish the tail every chunk (before
#     waiting on a full ring and at the end). With head_poll = 1 (workload.layer.deepep.head_poll:
#     remote, DeepEP's): before each chunk the sender reads the ring's head where it lives, on the
#     home rank (DeepEP: ld.volatile of channel_head_idx through NVLink, one round trip), and
#     reads it again until the whole chunk fits (R - (tail - head) >= the chunk's tokens); with
#     head_poll = 0 (pushed, the first model) the home pushes the head to the sender (flag.set)
#     and the sender waits on its local copy only when the ring is full.
#   TB C*P + c*P + 0: the channel's head updater (DeepEP's queue-head warp): walks the channel's
#     home tokens in order; once the reducer that owns a token has finished it, the token's slots
#     are free: with head_poll = 1 it stores the ring's head in its own memory at every position
#     (DeepEP: st.relaxed.sys of the minimum head, where the sender polls it); with head_poll = 0
#     every min(send_chunk, max(1, R/2)) positions of a ring it publishes the head back to that
#     ring's sender (flag.set).
#   TB C*P + c*P + w (w = 1..P-1): reducer w - 1 of the channel's P - 1 reducers (DeepEP's
#     reducer warps): takes the channel's home tokens w - 1, w - 1 + (P - 1), ...; per token
#     acc (fp32, shared memory: the register stand-in) = the shared experts' rows (ascending)
#     then waits until the tail of every ring (c, r) whose send_head word is >= 0 passes the
#     token's position in it (acquire; one wait.lanes.gt, a lane per rank: DeepEP's receiver warp
#     votes over its lanes with __any_sync before it reduces) and, for each such rank r
#     ascending, adds the bf16 row from its slot (vaxpy.f32.bf16.lsu: the warps load the row
#     through the LSU, the vector unit adds it in fp32); writes the fp32 row to out[t] (copy: DeepEP's TMA store of the bf16 row) and counts
#     the token in its progress word for the head updater.
# Summation order (the reference's combine="per_rank"): out[t] = ((0 + ys[0][t]) + ys[1][t] ...)
# + bf16(partial of the lowest rank) + ... + bf16(partial of the highest rank), each add in fp32.
# DeepEP writes the sum as bf16; the layer's output here is fp32 in every scheme (one reference).
.kernel deepep_combine
.param rec
.param ntf
.param recv_y
.param scratch               # per sender warp group: 8 bf16 staging rows
.param cring_x               # [C][P][R][rb] bf16: ring (c, r) slots on the home rank
.param cring_ctl             # tail [C][P] (home: rows rank r pushed into ring (c, r)), head [C][P] (head_poll 0, sender: tokens home s consumed from ring (c, me) on s; head_poll 1, home: tokens consumed from ring (c, r)), progress [C][P] (home: tokens reducer w finished), polled [C][P] (head_poll 1, sender (c, s): the head it last read from s)
.param send_head             # [T][P] from dispatch: token t's position in ring (c, me) on r, or -1
.param out
.param ys
.param one
.param acct
.param tokens
.param topk
.param hidden
.param channels
.param local_experts
.param ring_rows
.param send_chunk            # positions per published tail / head (capped at half the ring)
.param shared
.param shared_tbs
.param head_poll             # 1: the sender reads the head on the home before each chunk (DeepEP's); 0: the home pushes it
.param bench_rows            # 1: kernels: communication - the sender copies the row it received (DeepEP's benchmark input), no weighted sum
.smem 28KB                   # acc [H] f32 (H <= 7168; P <= 8 groups of 28 KB fit an SM's 228 KB)
.threads 768                 # DeepEP intranode.cu: kNumThreads = 768, __launch_bounds__(768, 1)
.regs 80                     # __launch_bounds__(768, 1): at most 65536 / 768 registers per thread, in allocation units of 8 (256 per warp): 80
    shl r1, %hidden, 1           # r1 = rb
    add r2, %tokens, %channels
    sub r2, r2, 1
    div r2, r2, %channels        # r2 = Tc
    mul r3, %channels, %ngpu     # r3 = C*P
    shr r7, %ring_rows, 1
    max r7, r7, 1
    min r7, r7, %send_chunk      # r7 = positions per publish
    bge %tb, r3, receiver
    # ---- sender of channel c to home s -----------------------------------------------------------
    combine_records_open %tb     # r5 = channel, r6 = home s, r9 = tokens, r12 = records
    shr r7, %ring_rows, 1
    max r7, r7, 1
    min r7, r7, %send_chunk      # r7 = positions per publish (open wrote r7)
    mov r10, %smem               # r10 = acc
    shl r4, r1, 3                # r4 = scratch bytes per warp group
    mul r11, %tb, r4
    add r11, r11, %scratch       # r11 = staging rows
    mul r8, r5, %ngpu
    add r8, r8, %gpu             # r8 = ring (c, me): its index on the home
    shl r13, r8, 3
    add r13, r13, %cring_ctl     # r13 = &tail[c][me] on s
    mul r8, r8, %ring_rows       # r8 = the ring's first slot
    mul r3, %channels, %ngpu
    shl r3, r3, 3                # r3 = bytes of one [C][P] table
    shl r14, %tb, 3
    add r14, r14, r3
    add r14, r14, %cring_ctl     # r14 = &head[c][s] here (head_poll 0: written by s's head updater)
    add r31, r13, r3             # r31 = &head[c][me] on s (head_poll 1: s's head updater stores it)
    shl r15, r3, 1
    add r15, r15, r14            # r15 = &polled[c][s] here (head_poll 1: the head read from s)
    mov r2, 0                    # r2 = tail published
    mov r3, 0                    # r3 = head last seen
    mov r24, 0                   # r24 = record i (= the token's position in the ring)
    mov r25, 0                   # r25 = pairs combined
tok:
    bge r24, r9, flush_end
    beq %head_poll, 0, compute
    bne r24, r2, compute         # inside a chunk: its room was checked at its start
    sub r26, r9, r24
    min r26, r26, r7             # r26 = the chunk's tokens
    add r26, r26, r24
    sub r26, r26, %ring_rows     # r26 = the head the chunk needs (DeepEP: room for the whole chunk)
poll:
    get r6, r15, r31, 8          # the head on s (DeepEP: ld.volatile across NVLink, a round trip)
    fence                        # the read is back (the last chunk's tail store was fenced already)
    ld r3, [r15]
    blt r3, r26, poll            # not enough room: read it again
compute:
    bne %bench_rows, 0, bench_row
    rank_partial_row %recv_y, %hidden, r25   # r10 = the fp32 sum, r27 = t, r25 += pairs
    and r29, r24, 7              # staging slot
    bne r29, 0, staged
    fence                        # slot reuse: the copies of 8 tokens ago are done
staged:
    mul r30, r29, r1
    add r30, r30, r11
    vcvt.bf16.f32 r30, r10, %hidden
    bra row_ready
bench_row:
    rank_received_row            # r29 = the received row (DeepEP's benchmark input), r25 += pairs
    mov r30, r29
row_ready:
    sub r26, r24, r3
    blt r26, %ring_rows, room
    beq r24, r2, full_wait       # ring full: publish first (the home may wait for it)
    fence
    flag.set r6, [r13], r24
    mov r2, r24
full_wait:
    sub r26, r24, %ring_rows
    wait.gt [r14], r26           # room for one more row
    ld r3, [r14]
room:
    rem r26, r24, %ring_rows
    add r26, r26, r8
    mul r26, r26, r1
    add r26, r26, %cring_x       # r26 = the slot's row on s
    put.sm r6, r26, r30, r1      # the partial row into the home's ring (warp copy)
    add r24, r24, 1
    sub r26, r24, r2
    blt r26, r7, tok
    fence                        # a chunk is complete: publish it
    flag.set r6, [r13], r24
    mov r2, r24
    bra tok
flush_end:
    beq r24, r2, sent_all
    fence
    flag.set r6, [r13], r24
sent_all:
    red.add %gpu, [%acct+24], r25    # acct 3: pairs combined
    exit
    # ---- receiver SM of channel c: head updater (group 0) and reducers --------------------------
receiver:
    sub r4, %tb, r3              # r4 = c*P + w
    div r5, r4, %ngpu            # r5 = channel c
    rem r6, r4, %ngpu            # r6 = w
    mul r8, r5, r2               # r8 = the channel's first token
    add r9, r8, r2
    min r9, r9, %tokens          # r9 = its end
    shl r3, r3, 3                # r3 = bytes of one [C][P] table
    mul r10, r5, %ngpu
    shl r10, r10, 3
    add r10, r10, %cring_ctl     # r10 = &tail[c][0] here
    shl r11, r3, 1
    add r11, r11, r10            # r11 = &progress[c][0] here
    sub r12, %ngpu, 1            # r12 = reducers per channel
    beq r6, 0, head_updater
    # ---- reducer w - 1 ------------------------------------------------------------------------------
    beq %shared, 0, inputs_ready
    wait.ge [%acct+40], %shared_tbs  # the shared experts' rows are written
inputs_ready:
    shl r13, r6, 3
    add r13, r13, r11            # r13 = &progress[c][w]
    sub r14, r6, 1
    add r14, r14, r8             # r14 = token t
    mov r15, 0                   # r15 = tokens finished
    mov r24, %smem               # r24 = acc
    shl r25, %hidden, 2          # r25 = fp32 row bytes
red_token:
    bge r14, r9, red_done
    vzero.f32 r24, %hidden
    mov r26, 0                   # shared experts ascending (the "bias" rows)
shared_rows:
    bge r26, %shared, ranks
    mul r27, r26, %tokens
    add r27, r27, r14
    mul r27, r27, r1
    add r27, r27, %ys
    vaxpy.f32.bf16.lsu r24, r27, %one, %hidden
    add r26, r26, 1
    bra shared_rows
ranks:
    mul r28, r14, %ngpu
    shl r28, r28, 3
    add r28, r28, %send_head     # r28 = &send_head[t][0]
    # every ring (c, r)'s tail passed the token's position in it (acquire), a lane per rank with
    # its own position (-1, no expert on rank r: any tail passes it) - DeepEP's one vote per token
    wait.lanes.gt [r10], r28, %ngpu
    mov r26, 0                   # r26 = rank r
rank_group:
    ld.v8 r16, [r28]             # positions of ranks r .. r + 7 (slot j's in r16 after j shifts)
    add r29, r26, 8
    min r29, r29, %ngpu          # r29 = end of the group
rank:
    blt r16, 0, rank_next        # the token has no expert on rank r
    mul r27, r5, %ngpu
    add r27, r27, r26
    mul r27, r27, %ring_rows
    rem r30, r16, %ring_rows
    add r27, r27, r30
    mul r27, r27, r1
    add r27, r27, %cring_x       # r27 = the row's slot
    vaxpy.f32.bf16.lsu r24, r27, %one, %hidden
rank_next:
    next_slot_word r26, r29, rank
    add r28, r28, 64
    blt r26, %ngpu, rank_group
    mul r27, r14, r25
    add r27, r27, %out
    copy r27, r24, r25           # the token's row out (DeepEP: a TMA store)
    add r15, r15, 1
    st [r13], r15                # progress: the token's slots may be reused
    add r14, r14, r12
    bra red_token
red_done:
    exit
    # ---- head updater -------------------------------------------------------------------------------
head_updater:
    mul r13, r5, %ngpu
    add r13, r13, %gpu
    shl r13, r13, 3
    add r13, r13, r3
    add r13, r13, %cring_ctl     # r13 = &head[c][me] (on each sender r)
    mov r14, r8                  # r14 = token t, in order
upd_token:
    bge r14, r9, upd_done
    sub r15, r14, r8
    rem r24, r15, r12            # r24 = its reducer
    div r15, r15, r12            # r15 = the reducer's tokens before it
    shl r24, r24, 3
    add r24, r24, r11
    add r24, r24, 8              # progress words follow the updater's place: w = reducer + 1
    wait.gt [r24], r15           # the reducer finished the token
    mul r28, r14, %ngpu
    shl r28, r28, 3
    add r28, r28, %send_head
    mov r26, 0                   # r26 = rank r
upd_group:
    ld.v8 r16, [r28]
    add r29, r26, 8
    min r29, r29, %ngpu
upd_rank:
    blt r16, 0, upd_next
    add r30, r16, 1              # r30 = positions of ring (c, r) consumed
    beq %head_poll, 0, upd_push
    mul r27, r5, %ngpu
    add r27, r27, r26
    shl r27, r27, 3
    add r27, r27, r3
    add r27, r27, %cring_ctl     # r27 = &head[c][r] here
    st [r27], r30                # the head where ring (c, r)'s sender reads it
    bra upd_next
upd_push:
    rem r27, r30, r7
    bne r27, 0, upd_next
    flag.set r26, [r13], r30     # publish every chunk of positions
upd_next:
    next_slot_word r26, r29, upd_rank
    add r28, r28, 64
    blt r26, %ngpu, upd_group
    add r14, r14, 1
    bra upd_token
upd_done:
    exit

# ------------------------------------------------------------------------------------------------
# deepep_reduce: waits for the shared experts and for done[g] = 1 from every GPU, then per token (round-robin over TBs)
# out[t] = sum_s ys[s][t] + sum over ranks r ascending in the token's mask of dp_comb[t*P + r],
# accumulated in fp32 in that order (the reference's combine="per_rank"). deepep_reduce reads the
# one mask word of up to 62 ranks, deepep_reduce_wide the words of up to 248 (deepep_layout).
#
# add_rank_partial mask, bit: unless bit `bit` of `mask` is clear, out row r2 += dp_comb[t*P +
# r3] (r7 = t*P, r10 = rb). Writes r8, r9.
.macro add_rank_partial mask, bit
    shr r8, \mask, \bit
    and r8, r8, 1
    beq r8, 0, skip_\@
    add r9, r7, r3
    mul r9, r9, r10
    add r9, r9, %comb
    vaxpy.f32.bf16 r2, r9, %one, %hidden
skip_\@:
.endm

.macro rank_partials_1word
    ld r6, [r5+96]               # r6 = rank mask
    mul r7, r1, %ngpu
    mov r3, 0                    # r3 = rank
rank_\@:
    add_rank_partial r6, r3
    add r3, r3, 1
    blt r3, %ngpu, rank_\@
.endm

.macro rank_partials_4words
    mul r7, r1, %ngpu
    mov r3, 0                    # r3 = rank
    mov r12, r5                  # r12 + 96 = the mask word of rank r3
word_\@:
    ld r6, [r12+96]              # r6 = rank mask word
    mov r13, 0                   # r13 = r3's bit in it
rank_\@:
    add_rank_partial r6, r13
    add r3, r3, 1
    bge r3, %ngpu, done_\@
    add r13, r13, 1
    blt r13, 62, rank_\@
    add r12, r12, 8
    bra word_\@
done_\@:
.endm

.macro reduce_kernel name, rank_partials
.kernel \name
.param out
.param ys
.param comb
.param meta
.param one
.param done
.param acct
.param tokens
.param hidden
.param shared
.param shared_tbs            # thread blocks of shared_ffn (they count themselves in acct word 5)
    wait_layer_inputs %shared, %shared_tbs, %acct, %done
    shl r10, %hidden, 1          # r10 = rb
    shl r11, %hidden, 2          # r11 = f32 row bytes
    mov r1, %tb                  # r1 = token
token:
    bge r1, %tokens, end
    start_output_row r2, r1, %out, r11, %shared, %ys, %one, %tokens, r10, %hidden, r3, r4
    shl r5, r1, 7
    add r5, r5, %meta
    \rank_partials
    add r1, r1, %ntb
    bra token
end:
    exit
.endm

reduce_kernel deepep_reduce, rank_partials_1word
reduce_kernel deepep_reduce_wide, rank_partials_4words
