# tp_cais_dataflow: CAIS's graph-level dataflow (CAIS, arXiv 2605.05628: thread-block-level
# dependencies across GEMM-ReduceScatter -> norm -> AllGather-GEMM, so that kernels whose traffic
# runs in opposite directions overlap) for the second half of a transformer layer under the TP
# scheme cais (workload.block.cais_dataflow, moehub_arch/workloads/block.py): one persistent
# kernel runs, as thread-block jobs with per-row-tile dependencies in memory,
#   A  the output projection as a GEMM-RS: ya = ao W_o (this rank's partial), each job's tile
#      added into its home's ar1 with one posted red.cais (merged in the switch);
#   B  on the home of a row tile, once every rank's A jobs of the tile are in its ar1: the
#      residual h1 = x + ar1 and the second norm hn = norm(h1), one job per block of norm_rows
#      rows (K = tile_rows / norm_rows jobs: a whole tile on one SM took ~60 us of vector work on
#      the critical path); the tile's last block sets the tile's ready flag on every rank;
#   C  the FFN's gate/up as an AG-GEMM: the tile's column job 0 pulls the tile's normed rows from
#      the home with ld.cais (the switch reads the home once and fans the reply out), in slices of
#      gather_rows rows (64 KB) one at a time - a whole tile at once, P tiles of a group at a
#      time, filled the homes' merge tables with Load-Wait entries -, the tile's other column
#      jobs wait for them; hs = bf16(silu(hn Wg) (hn Wu)) (lib/gemm_tiles.s);
#   D  the FFN's down GEMM as a GEMM-RS: ys = hs Wd, each job's tile added into its home's ar2
#      with one red.cais;
#   E  on the home, once every rank's D jobs of the tile are in: out = h1 + ar2.
# So the reductions of A (toward the homes: GPU uplinks) overlap the gathers of C (from the homes:
# downlinks) and both run under the FFN's GEMMs; no collective kernel and no launch gap sits
# between the output projection and the end of the layer.
#
# Row tiles: tile_rows divides T / P (a tile never spans two homes); rank g owns sequence chunk
# (g + 1) % P (sp_ring's shard), so the home of row t is (t / (T / P) - 1) mod P.
# Jobs (the same list on every rank, taken in order by whichever thread block is free: a local
# job counter, as shared_ffn's). The R row tiles are taken in G = R / P groups of P, one tile per
# home (group g: tile h G + g of chunk h, h = 0 .. P - 1), so that consecutive GEMM-RS jobs go to
# different homes (the window below spreads over every home's merge tables, and the norms over
# every home's SMs):
#   for g: for c < Jo: for h: A(tile(g, h), c)                              [R x Jo]
#   for g = 0 .. G: [for k < K: B(own tile of g, k)]  [for h: for q < Ju: C(tile(g, h), q)]
#                   [for c < Jd: for h: D(tile(g - 1, h), c)]               [S = K + P (Ju + Jd)]
#   for g: for k < K: E(own tile of g, k)                                   [G x K]
# (Jo = H / o_n, Ju = I / n, Jd = H / n, K = tile_rows / norm_rows; B and C of g = G and D of g = 0
# are empty slots). B and E, one block of norm_rows rows each, run on the tile's home: every rank
# is the home of one tile of each group and norms it at the same place in the list, so every
# rank does the same work in the same order. Every job waits only for jobs earlier in the list
# (on any rank) and jobs are taken in order by resident thread blocks (grid <= SMs, one 160 KB
# block per SM), so the earliest unfinished job can always run: no deadlock.
# The reductions of a GEMM-RS job are one red.cais of its whole tile: ar1, ar2 (and the partials
# ya, ys) are tile-major - row tile r's column job c is the contiguous [rows][n] block at
# (r rows H + c rows n) elements - and the home's B / E jobs turn a tile back into rows (copy2d)
# before the residual. One request per job keeps the hub's request table (256 entries) from
# filling with lines the other ranks have not sent yet (per-row requests did: every rank's
# table held lines its peers had not reached, each waiting for the others, until the merge
# unit's timers flushed them: 7% of the lines merged).
# Merging-aware coordination (CAIS's throttling of GPUs that run ahead, at the source): the
# GEMM-RS jobs are numbered in list order (s: A jobs first, then D jobs) and job s posts its
# reductions only once s - window + 1 jobs of this rank are complete (`released`), so every rank
# has at most `window` jobs of reductions in flight, the same jobs in the same order: the ranks'
# contributions to a line reach the switch close together, within the merge table and its
# timer (an order that differed between ranks, or a window larger than the tables, overflowed
# them). The smallest unmerged job can always be posted by every rank (every earlier job is
# complete), so the window cannot deadlock.
# Completion signals: a job's reductions are complete once this thread block's `fence` returns
# (the merge unit answers a contribution once the line's sum is in home memory); the thread
# block then counts the job in its tile's cnt1 / cnt2, the rank's last job of the tile sets the
# rank's done word at the home (flag.set, posted), and the job leaves the window (`released`).
# Between two GEMM-RS jobs the fence is deferred - it runs after the next job's GEMM,
# before that job posts its own reductions - so a thread block computes while its previous job's
# reductions travel; before any other job (a gate/up GEMM posts nothing, and would hold the job's
# place in the window for its whole length) and before every wait that would block, the thread
# block flushes first: it never holds an unsignalled job while it blocks.
#
# ctrl (i64 words, zero before the call): next job, released; cnt1 [R], cnt2 [R] (this rank's
# complete A / D jobs of tile r); done1 [R][P], done2 [R][P] (at the home: every A / D job of
# rank q for tile r is in - one word per rank, set by the rank's job that completes its count, so
# that the home waits for P words, not for P x H / n: a satisfied wait still costs a memory read,
# and 128 of them took 50 us); ready [R] (every rank: the home's normed rows of tile r are
# written), gathered [R] (this rank has pulled tile r), gu [R] (this rank's gate/up jobs of tile
# r done), normed [R] (at the home: the tile's norm blocks done).
# dims = o_n | n << 12 | norm_rows << 24 | layernorm << 36 | window << 40 | gather_rows << 52
# (norm_rows and gather_rows divide tile_rows).
# Reduction order: the merge unit's (rank order in FP32, one rounding to bf16 at the home), exactly,
# while no line is evicted or timed out: the output is the NumPy reference bit for bit.
.include "lib/gemm_tiles.s"
.include "lib/norm.s"

# flush_signal: the deferred completion of the previous GEMM-RS job (r30 = 1 + its row tile for an
# A job, -(1 + tile) for a D job, 0: none; r31 = the tile's home): wait for its reductions, count
# the job in the tile's cnt1 / cnt2; the rank's last job of the tile sets the rank's done word at
# the home; release the job's place in the window. Writes r19, r20.
.macro flush_signal
    beq r30, 0, none_\@
    fence
    blt r30, 0, down_\@
    sub r19, r30, 1                  # r19 = tile
    shl r20, r19, 3
    add r20, r20, %ctrl
    add r20, r20, 16                 # &cnt1[tile]
    atom.add r20, %gpu, [r20], 1
    add r20, r20, 1
    blt r20, r25, counted_\@         # the rank has more A jobs of the tile in flight
    mov r20, 0                       # done1 = word 2 + 2 R
    bra tell_\@
down_\@:
    sub r19, 0, r30
    sub r19, r19, 1                  # r19 = tile
    add r20, r19, r23
    shl r20, r20, 3
    add r20, r20, %ctrl
    add r20, r20, 16                 # &cnt2[tile]
    atom.add r20, %gpu, [r20], 1
    add r20, r20, 1
    blt r20, r27, counted_\@
    mul r20, r23, %ngpu              # done2 = done1 + R P words
tell_\@:
    add r20, r20, r23
    add r20, r20, r23
    add r20, r20, 2                  # + 2 + 2 R words
    mul r19, r19, %ngpu
    add r19, r19, %gpu
    add r20, r20, r19                # [tile][gpu]
    shl r20, r20, 3
    add r20, r20, %ctrl
    flag.set r31, [r20], 1
counted_\@:
    add r20, %ctrl, 8
    red.add %gpu, [r20], 1           # released
    mov r30, 0
none_\@:
.endm

# wait_flushing addr, value, t: wait until the word at addr >= value, flushing the pending signal
# first only if the wait would block (a satisfied dependency costs one load, not a fence).
.macro wait_flushing addr, value, t
    ld \t, [\addr]
    bge \t, \value, ok_\@
    flush_signal
    wait.ge [\addr], \value
ok_\@:
.endm

# home_of dst, row: dst = the home of row `row`, (row / (T / P) - 1) mod P. Writes dst.
.macro home_of dst, row
    div \dst, %tokens, %ngpu
    div \dst, \row, \dst
    add \dst, \dst, %ngpu
    sub \dst, \dst, 1
    rem \dst, \dst, %ngpu
.endm

# ctrl_done dst, which: dst = &done1[0][0] (which 0) or &done2[0][0] (which 1). ctrl_ready dst:
# dst = &ready[0] (after done2). Write dst.
.macro ctrl_done dst, which
    mul \dst, r23, %ngpu
    mul \dst, \dst, \which
    add \dst, \dst, r23
    add \dst, \dst, r23
    add \dst, \dst, 2
    shl \dst, \dst, 3
    add \dst, \dst, %ctrl
.endm
.macro ctrl_ready dst
    mul \dst, r23, %ngpu
    add \dst, \dst, r23
    shl \dst, \dst, 1
    add \dst, \dst, 2
    shl \dst, \dst, 3
    add \dst, \dst, %ctrl
.endm

# post_window seq, t: wait (flushing) until job seq may post: released >= seq - window + 1.
# Writes t, r22.
.macro post_window seq, t
    shr r22, %dims, 40
    and r22, r22, 4095               # window
    sub r22, \seq, r22
    add r22, r22, 1
    add \t, %ctrl, 8
    wait_flushing \t, r22, r21
.endm

# untile off, first, rows, src, dst, n: rows [first, first + rows) of the row tile at byte offset
# off of the tile-major src (H / n blocks of [tile_rows][n]) to the same rows of the row-major dst
# ([T][H]). Writes r7 .. r9, r11, r13, r14.
.macro untile off, first, rows, src, dst, n
    shl r7, \n, 1                    # r7 = a block row's bytes
    mul r13, \first, r7
    add r13, r13, \off
    add r13, r13, \src               # r13 = the rows in block 0
    mul r14, \first, %hidden
    shl r14, r14, 1
    add r14, r14, \off
    add r14, r14, \dst               # r14 = the rows' first column in dst
    mul r8, %tile_rows, r7           # r8 = a block's bytes
    shl r9, %hidden, 1
    mov r11, 0
blocks_\@:
    copy2d r14, r13, \rows, r7, r9, r7
    add r13, r13, r8
    add r14, r14, r7
    add r11, r11, \n
    blt r11, %hidden, blocks_\@
.endm

.kernel tp_cais_dataflow
.param a                     # ao [T][H/P] bf16: the attention output (the output projection's A)
.param wo                    # [H/o_n][H/P][o_n] bf16 column tiles
.param ya                    # [T][H] bf16 tile-major: this rank's partial of the output projection
.param x                     # [T][H] bf16: the layer input (the first residual)
.param ar1                   # [T][H] bf16 tile-major, registered, zero: the output projection's sum
.param h1                    # [T][H] bf16: x + ar1 (home rows)
.param hn                    # [T][H] bf16, registered: norm(h1) (home rows; pulled by every rank)
.param gain                  # [H] fp32 (the second norm)
.param bias                  # [H] fp32
.param consts                # fp32 words 1 eps, 2 H
.param wg                    # [I/n][H][n] bf16 (this rank's I = FFN / P columns)
.param wu
.param wd                    # [H/n][I][n] bf16
.param hs                    # [T][I] bf16
.param ys                    # [T][H] bf16 tile-major: this rank's partial of the FFN
.param ar2                   # [T][H] bf16 tile-major, registered, zero: the FFN's sum
.param out                   # [T][H] bf16: h1 + ar2 (home rows): the layer output
.param ctrl                  # i64 words, zero (see above)
.param tokens
.param hidden
.param ffn                   # I = FFN / P
.param tile_rows             # divides T / P
.param dims                  # o_n, n, norm_rows, layernorm, window, gather_rows (see above)
.smem 160KB                  # the FFN job's three tiles (as shared_ffn) or the norm's rows
    div r23, %tokens, %tile_rows     # r23 = R row tiles
    and r1, %dims, 4095              # o_n
    shr r2, %dims, 12
    and r2, r2, 4095                 # n
    div r25, %hidden, r1             # r25 = Jo
    div r26, %ffn, r2                # r26 = Ju
    div r27, %hidden, r2             # r27 = Jd
    mul r28, r23, r25                # r28 = A jobs
    shr r3, %dims, 24
    and r3, r3, 4095
    div r3, %tile_rows, r3           # r3 = K norm blocks per row tile
    add r29, r26, r27
    mul r29, r29, %ngpu
    add r29, r29, r3                 # r29 = S = K + P (Ju + Jd), slots per group
    div r24, r23, %ngpu              # G
    mul r3, r3, r24                  # G K
    add r24, r24, 1
    mul r24, r24, r29
    add r24, r24, r28
    add r24, r24, r3                 # r24 = jobs: A + (G + 1) S + G K
    mov r30, 0                       # no pending signal
job:
    atom.add r0, %gpu, [%ctrl], 1    # r0 = the next job in the list
    bge r0, r24, end
    div r9, r23, %ngpu               # r9 = G groups (row tiles per home)
    blt r0, r28, adecode
    sub r1, r0, r28
    add r2, r9, 1
    mul r2, r2, r29
    bge r1, r2, resid                # E(r1 - (G + 1) S)
    div r10, r1, r29                 # r10 = group
    rem r11, r1, r29                 # r11 = slot
    shr r4, %dims, 24
    and r4, r4, 4095
    div r4, %tile_rows, r4           # r4 = K
    blt r11, r4, bdecode             # B(this rank's tile of the group, k = r11)
    sub r11, r11, r4
    mul r12, r26, %ngpu
    blt r11, r12, cdecode            # C(tile, q)
    sub r11, r11, r12                # D(tile of group - 1, c): c major, home minor
    beq r10, 0, next
    div r3, r11, %ngpu               # r3 = c
    rem r12, r11, %ngpu              # r12 = chunk
    sub r10, r10, 1
    mul r2, r12, r9
    add r2, r2, r10                  # r2 = tile
    mul r5, r10, %ngpu
    mul r5, r5, r27
    add r5, r5, r11
    add r5, r5, r28                  # r5 = s, its place among the GEMM-RS jobs
    bra down
bdecode:
    bge r10, r9, next
    mov r3, r11                      # r3 = k
    add r12, %gpu, 1
    rem r12, r12, %ngpu              # r12 = this rank's chunk, (gpu + 1) mod P
    mul r2, r12, r9
    add r2, r2, r10                  # r2 = this rank's tile of the group
    bra normjob
cdecode:
    bge r10, r9, next
    div r12, r11, r26                # r12 = chunk
    rem r3, r11, r26                 # r3 = q
    mul r2, r12, r9
    add r2, r2, r10                  # r2 = tile
    bra gateup
adecode:
    mul r12, r25, %ngpu
    div r10, r0, r12                 # r10 = group
    rem r11, r0, r12
    div r3, r11, %ngpu               # r3 = c
    rem r12, r11, %ngpu              # r12 = chunk
    mul r2, r12, r9
    add r2, r2, r10                  # r2 = tile
    bra oproj

# ---- A: output projection job (r2 row tile, r3 column job), GEMM-RS ----
oproj:
    and r6, %dims, 4095              # r6 = o_n
    mul r4, r2, %tile_rows           # r4 = first row
    mul r7, %tile_rows, r6           # r7 = rows x o_n
    div r8, %hidden, %ngpu           # r8 = K = H / P
    shl r9, r8, 1
    mul r10, r4, r9
    add r10, r10, %a                 # r10 = A rows
    mul r11, r8, r6
    shl r11, r11, 1
    mul r11, r11, r3
    add r11, r11, %wo                # r11 = W_o column tile
    mov r12, %smem                   # r12 = fp32 accumulator
    shl r13, r7, 2
    add r13, r13, %smem              # r13 = bf16 tile
    gemm_tile r12, r13, r10, r11, %tile_rows, r6, r8, r7, r3, r2, 0
    mul r14, r4, %hidden
    mul r15, r3, r7
    add r14, r14, r15
    shl r14, r14, 1                  # r14 = byte offset of the job's block (tile-major)
    add r15, r14, %ya
    shl r16, r7, 1                   # r16 = the block's bytes
    copy r15, r13, r16
    post_window r0, r17              # A job r0 is GEMM-RS job s = r0
    flush_signal                     # the previous job's reductions are home: tell the home
    home_of r31, r4
    add r14, r14, %ar1               # r14 = the same block at the home
    red.cais.add.bf16 r31, r14, r15, r16
    add r30, r2, 1                   # pending: A job of tile r
    bra next

# ---- B: residual + norm of row tile b = r2 on its home ----
normjob:
    bge r2, r23, next
    mul r4, r2, %tile_rows           # r4 = first row of the tile
    home_of r5, r4
    bne r5, %gpu, next
    flush_signal
    mov r19, r2                      # r19 = b (norm_smem and norm_rows write r1 .. r6)
    mov r18, r3                      # r18 = k
    ctrl_done r7, 0
    mul r8, r19, %ngpu
    shl r8, r8, 3
    add r7, r7, r8                   # r7 = &done1[b][0]
    mov r9, 0
norm_wait:
    wait.ge [r7], 1                  # rank r9's output projection of the tile is in
    add r7, r7, 8
    add r9, r9, 1
    blt r9, %ngpu, norm_wait
    mul r10, r4, %hidden
    shl r10, r10, 1                  # r10 = byte offset of the tile in [T][H]
    shr r15, %dims, 24
    and r15, r15, 4095               # r15 = norm rows
    mul r17, r18, r15                # r17 = the block's first row in the tile
    and r6, %dims, 4095              # r6 = o_n
    untile r10, r17, r15, %ar1, %h1, r6
    mul r12, r17, %hidden
    shl r12, r12, 1
    add r12, r12, r10                # r12 = byte offset of the block's rows in [T][H]
    add r13, r12, %hn                # r13 = hn rows
    add r14, r12, %h1                # r14 = h1 rows
    add r12, r12, %x
    mul r11, r15, %hidden
    vadd.bf16 r14, r12, r14, r11     # h1 = x + ar1
    norm_smem %gain, %bias, %consts, %hidden
    shr r16, %dims, 36
    and r16, r16, 15                 # r16 = layernorm
    norm_rows r13, r14, r15, %hidden, r16
    ctrl_ready r7
    mul r8, r23, 24
    add r8, r8, r7
    shl r9, r19, 3
    add r8, r8, r9                   # r8 = &normed[b] (after ready, gathered, gu)
    atom.add r9, %gpu, [r8], 1       # one more block of the tile normed (the TB waited for it)
    add r9, r9, 1
    div r10, %tile_rows, r15         # r10 = K blocks per tile
    blt r9, r10, next                # the tile's last block tells every rank
    shl r8, r19, 3
    add r7, r7, r8                   # r7 = &ready[b]
    mov r9, 0
norm_tell:
    flag.set r9, [r7], 1             # the tile's normed rows are on their home
    add r9, r9, 1
    blt r9, %ngpu, norm_tell
    bra next

# ---- C: gate/up job (b = r2, q = r3), AG-GEMM ----
gateup:
    bge r2, r23, next
    flush_signal                     # no unsignalled job through a long GEMM that posts nothing
    mul r4, r2, %tile_rows           # r4 = first row
    ctrl_ready r7
    shl r8, r2, 3
    add r7, r7, r8                   # r7 = &ready[b]
    shl r8, r23, 3
    add r8, r8, r7                   # r8 = &gathered[b]
    mul r10, r4, %hidden
    shl r10, r10, 1
    add r10, r10, %hn                # r10 = the tile's rows of hn (here and at the home)
    bne r3, 0, gateup_wait
    wait.ge [r7], 1                  # the home's rows are normed
    home_of r9, r4
    shr r11, %dims, 52               # gather rows per slice
    mul r11, r11, %hidden
    shl r11, r11, 1                  # r11 = slice bytes
    mul r12, %tile_rows, %hidden
    shl r12, r12, 1
    add r12, r12, r10                # r12 = the tile's end
    mov r13, r10
gather:
    ld.cais r9, r13, r13, r11        # every rank pulls the slice: one read of the home
    fence                            # one slice at a time (the merge tables' Load-Wait entries)
    add r13, r13, r11
    blt r13, r12, gather
    atom.add r9, %gpu, [r8], 1       # gathered (after the fence: the TB waited)
    bra gateup_compute
gateup_wait:
    wait.ge [r8], 1
gateup_compute:
    shr r6, %dims, 12
    and r6, r6, 4095                 # r6 = n
    gemm_smem r12, r13, %tile_rows, r6, r14, r15    # r12 = G, r13 = U, r14 = rows x n, r15 bytes
    add r15, r13, r15                # r15 = Hq (bf16)
    mul r11, %hidden, r6
    shl r11, r11, 1
    mul r11, r11, r3                 # r11 = offset of weight tile q
    add r16, r11, %wu
    add r11, r11, %wg
    swiglu_tile r12, r13, r15, r10, r11, r16, %tile_rows, r6, %hidden, r14, r3, r2, 0
    mul r16, r4, %ffn
    mul r17, r3, r6
    add r16, r16, r17
    shl r16, r16, 1
    add r16, r16, %hs                # r16 = hs[first row][q n]
    shl r17, r6, 1
    shl r18, %ffn, 1
    copy2d r16, r15, %tile_rows, r17, r18, r17
    shl r8, r23, 3
    add r8, r8, r7                   # r8 = &gathered[b]
    shl r9, r23, 3
    add r8, r8, r9                   # r8 = &gu[b]
    atom.add r9, %gpu, [r8], 1       # gate/up jobs of the tile done (after the copy)
    bra next

# ---- D: down job (b = r2, c = r3), GEMM-RS ----
down:
    mul r4, r2, %tile_rows           # r4 = first row
    ctrl_ready r7
    shl r8, r23, 4                   # gu = ready + 2 R words
    add r7, r7, r8
    shl r8, r2, 3
    add r7, r7, r8                   # r7 = &gu[b]
    wait_flushing r7, r26, r9        # every column of the tile's hs is here
    shr r6, %dims, 12
    and r6, r6, 4095                 # r6 = n
    gemm_smem r12, r13, %tile_rows, r6, r14, r15    # r12 = acc, r13 = bf16 tile
    mul r10, r4, %ffn
    shl r10, r10, 1
    add r10, r10, %hs                # r10 = A: hs rows
    mul r11, %ffn, r6
    shl r11, r11, 1
    mul r11, r11, r3
    add r11, r11, %wd                # r11 = W_down column tile
    gemm_tile_a_l2 r12, r13, r10, r11, %tile_rows, r6, %ffn, r14, r2, 0
    mul r14, r4, %hidden
    mul r15, r3, %tile_rows
    mul r15, r15, r6
    add r14, r14, r15
    shl r14, r14, 1                  # r14 = byte offset of the job's block (tile-major)
    add r15, r14, %ys
    mul r16, %tile_rows, r6
    shl r16, r16, 1                  # r16 = the block's bytes
    copy r15, r13, r16
    post_window r5, r18              # r5 = s
    flush_signal
    home_of r31, r4
    add r14, r14, %ar2
    red.cais.add.bf16 r31, r14, r15, r16
    sub r30, 0, r2
    sub r30, r30, 1                  # pending: D job of tile b
    bra next

# ---- E: out = h1 + ar2 on the home of row tile r ----
resid:
    sub r1, r1, r2                   # r1 = e = g K + k (r2 = (G + 1) S)
    shr r15, %dims, 24
    and r15, r15, 4095               # r15 = norm rows
    div r16, %tile_rows, r15         # r16 = K
    rem r18, r1, r16                 # r18 = k
    div r1, r1, r16                  # r1 = g
    add r12, %gpu, 1
    rem r12, r12, %ngpu              # this rank's chunk
    mul r12, r12, r9
    add r1, r1, r12                  # r1 = r: this rank's tile of group g
    mul r4, r1, %tile_rows
    home_of r5, r4
    bne r5, %gpu, next
    flush_signal
    ctrl_done r7, 1
    mul r8, r1, %ngpu
    shl r8, r8, 3
    add r7, r7, r8                   # r7 = &done2[r][0]
    mov r9, 0
resid_wait:
    wait.ge [r7], 1                  # rank r9's FFN of the tile is in
    add r7, r7, 8
    add r9, r9, 1
    blt r9, %ngpu, resid_wait
    mul r10, r4, %hidden
    shl r10, r10, 1                  # r10 = byte offset of the tile in [T][H]
    mul r17, r18, r15                # r17 = the block's first row in the tile
    shr r6, %dims, 12
    and r6, r6, 4095                 # r6 = n
    untile r10, r17, r15, %ar2, %out, r6
    mul r12, r17, %hidden
    shl r12, r12, 1
    add r12, r12, r10
    add r13, r12, %h1
    add r12, r12, %out
    mul r11, r15, %hidden
    vadd.bf16 r12, r13, r12, r11     # out = h1 + ar2
next:
    bra job
end:
    flush_signal
    exit
