# MoE layer, scheme `overlap`: the best software overlap we know of, in the style of Comet
# (MLSys'25: tiles rescheduled so that communication-ready tiles compute first) and FlashDMoE
# (NeurIPS'25: persistent blocks specialised into communicators and processors, fine-grained
# readiness flags). It stays address-centric: the count exchange must finish before rows move,
# because a sender needs the receive offsets; what it removes is the host round trip and the bulk
# synchronous phases - GEMM tiles start as soon as their rows have landed, and every tile's
# outputs go home as soon as the tile is done. Launch plan: moehub_arch/workloads/schemes/overlap.py.
#
#   stream 0  deepep_layout, deepep_notify (align = tile rows; no host round trip after it), then the
#             senders of deepep_dispatch (grid C*P: TB c*P + r sends channel c's tokens to rank r
#             through ring (c, me) on r) - ../deepep/deepep.s
#   stream 2  overlap_receive (C*P TBs, one per ring (c, s)): unpacks rows into the expert-major
#             receive buffer and counts every landed row in its GEMM tile's counter
#   stream 3  overlap_expert (persistent GEMM blocks): takes jobs in tile order, waits for a tile's
#             rows by its counter, runs the SwiGLU column jobs, sends the tile's rows home; then the
#             common moe_combine (waits for the shared experts and for done[g] from every GPU)
#   stream 1  shared experts
# Streams 2 and 3 start with the layer and wait (without polling events) for deepep_notify's
# "tile table complete" flag, dp_info[2] = epoch.
#
# Buffers, besides the DeepEP ones (deepep.s): per GPU, symmetric
#   ov_tilecnt ctl [tiles]       rows landed in tile b (the tile table is dp_tiles, expert-major;
#                                regions are tile-aligned, so the tile of row position p is p / tile)
#   ov_home    ctl [rows]        per received row position: source GPU << 32 | home slot (t*k + j)
#   ov_jobs    ctl [2 + 2*tiles] word 0 jobs taken, 1 workers finished, then per tile: gate/up jobs
#                                done, down jobs done
#   ov_hh, ov_y data [rows][I], [rows][H] bf16: SwiGLU activations and expert outputs
#   yhome, done, acct (../common/moe_common.s)
# Receive buffers are provisioned for the worst case (no host sizes them): P * T * min(k, El) rows
# plus a tile of alignment per local expert.

# the kernel library (workloads/kernels/lib/): routines several schemes share
.include "lib/gemm_tiles.s"
.include "lib/combine.s"
.include "lib/slot_words.s"
.include "lib/ring.s"
.include "lib/streaming.s"

# ------------------------------------------------------------------------------------------------
# overlap_receive: grid C*P, TB c*P + s drains ring (c, s) (filled by deepep_dispatch's senders,
# same protocol as deepep_dispatch's receivers: wait for the tail, read the token's metadata, copy
# each locally routed row, publish the head). Each row takes its position from the expert's cursor
# (atomic), is copied synchronously (copy retires when the row is written), then its tile counter
# is incremented (posted red.add: the GEMM block waiting on the tile sees it once the row is there)
# and its home word recorded for the send-home.
.kernel overlap_receive
.param ring_x
.param ring_ctl              # tail [C][P], head [C][P], then the metadata ring slots
.param ntf
.param info
.param cursor
.param recv_x
.param tilecnt
.param home
.param acct
.param tokens
.param topk
.param hidden
.param channels
.param ring_rows
.param local_experts
.param tile_rows
.param epoch
    wait.ge [%info+16], %epoch   # counts exchanged, cursors and tile table written
    shl r1, %hidden, 1           # r1 = rb
    mul r3, %channels, %ngpu
    shl r3, r3, 3                # r3 = bytes of one [C][P] table
    shl r4, r3, 1
    add r4, r4, %ring_ctl        # r4 = metadata ring slots
    mov r6, %tb                  # r6 = ring index c*P + s
    ring_receiver_open r6, r3, r5, r7, r9, r10, r11, r13, r8, r24    # r24 = tokens consumed
    mul r14, %gpu, %local_experts   # r14 = first local expert (global id)
    shl r12, r7, 32              # r12 = s << 32 (home word)
    mov r25, 0                   # r25 = rows received
rx_wait:
    ring_wait_tokens r24, r9, r10, r26, rx_done   # r26 = tail
rx_token:
    ring_next_token r24, r26, rx_release, r11, r4, r27, r28    # r27 = slot index, r28 = its metadata
    mul r27, r27, r1
    add r27, r27, %ring_x        # r27 = the slot's row
    shr r30, r16, 32             # r30 = t
    mul r29, r30, %topk          # r29 = home slot of choice 0 (t * k)
    shl r30, r30, 32             # r30 = t << 32
    mov r31, 0                   # r31 = slot j
rx_choice:
    sub r2, r16, r30
    sub r2, r2, r14              # r2 = local expert of slot j
    blt r2, 0, rx_next
    bge r2, %local_experts, rx_next
    shl r2, r2, 3
    add r2, r2, %cursor
    atom.add r3, %gpu, [r2], 1   # r3 = the row's position (expert-major, tile-aligned regions)
    mul r2, r3, r1
    add r2, r2, %recv_x
    copy r2, r27, r1             # the row into its position (synchronous)
    shl r2, r3, 3
    add r2, r2, %home
    add r15, r29, r31
    or r15, r15, r12
    st [r2], r15                 # home word: source << 32 | t * k + j
    div r2, r3, %tile_rows
    shl r2, r2, 3
    add r2, r2, %tilecnt
    red.add %gpu, [r2], 1        # one more row of that tile has landed
    add r25, r25, 1
rx_next:
    next_slot_word r31, %topk, rx_choice
    add r24, r24, 1
    bra rx_token
rx_release:
    flag.set r7, [r13], r24      # head back to the sender (the copies have retired)
    bra rx_wait
rx_done:
    red.add %gpu, [%acct+8], r25 # acct 1: pairs received
    exit

# ------------------------------------------------------------------------------------------------
# overlap_expert: persistent GEMM blocks with the streaming scheduler of ../lib/streaming.s (shared
# with moehub_expert): block b holds the gate/up jobs of the group of `swizzle` tiles b (Ju = I / n
# per tile, column job outer: the workers share weight tiles in the L2) and then the down jobs of
# group b - lag (Jd = H / n per tile), so a tile's down jobs come once its gate/up jobs are done. Tiles
# are taken in the tile table's (expert-major) order, the
# order in which the senders' rings deliver rows of every source, so ready tiles come first.
# A gate/up job waits until its tile's counter reaches the tile's rows; a down job waits until all
# gate/up jobs of its tile are done; the tile's last down job sends each output row to its home
# (put to GPU s at yhome + home * rb) and fences. When every worker has finished, the last one
# raises done[me] on every GPU. Weight layout and L2 conventions as in ../common/moe_common.s.
.kernel overlap_expert
.param tiles                 # dp_tiles: first row, rows, local expert, first tile of the expert
.param info
.param tilecnt
.param home
.param jobs
.param recv_x
.param hh                    # [rows][I] bf16
.param y                     # [rows][H] bf16
.param yhome
.param wg                    # [El][I/n][H][n] bf16
.param wu
.param wd                    # [El][H/n][I][n] bf16
.param acct
.param done
.param hidden
.param ffn
.param tile_rows
.param n_tile
.param epoch
.param swizzle               # tiles per group of the job order (../lib/streaming.s)
.smem 160KB                  # G, U [tile][n] f32 + Hq [tile][n] bf16, or Y + Yq
.smem_job 10                 # bytes per element of a tile_rows x n_tile job (fits a smaller SM)
    wait.ge [%info+16], %epoch   # the tile table is complete
    ld r31, [%info+8]            # r31 = tiles
    stream_job_setup             # r20 = Ju, r21 = Jd, r22 = jobs per block, r29 = lag, r30 = jobs,
                                 # r8 - r10 shared memory, r23 / r24 row bytes, r25 = 0
job:
    atom.add r1, %gpu, [%jobs], 1    # r1 = my next job
    bge r1, r30, finished
    stream_job r1, r22, r20, %swizzle, r29, r2, r3, gate_up, job, r4    # r2 = tile; r3 = job in tile
gate_up:
    bge r2, r31, job             # past the last tile (the last `lag` blocks have no gate/up jobs)
    shl r11, r2, 5
    add r11, r11, %tiles
    ld.v8 r12, [r11]             # r12 first row, r13 rows, r14 expert, r15 first tile of expert
    shl r11, r2, 4
    add r11, r11, %jobs
    add r11, r11, 16             # r11 = the tile's job counters (gate/up done, down done)
    bge r3, r20, down
# ---- gate/up job q = r3: Hh[:, q cols] = silu(X Wg_q) * (X Wu_q)
    shl r4, r2, 3
    add r4, r4, %tilecnt
    wait.ge [r4], r13            # every row of the tile has landed
    stream_gate_up_job %recv_x, %hh, %wg, %wu
    bra job
# ---- down job c: Y[:, c cols] = Hh Wd_c over the full I
down:
    sub r3, r3, r20              # r3 = output column tile c
    stream_down_gemm %hh, %wd
    stream_down_store %y
    bne r4, r21, job             # not the tile's last down job
# ---- the tile is complete: every row goes home (home words read 8 at a time; the ld.v8 into
# r16..r23 overwrites the job constants r20..r23, restored once the tile is home)
    mov r26, 0                   # r26 = row in tile
home_batch:
    bge r26, r13, homed
    add r4, r12, r26
    shl r5, r4, 3
    add r5, r5, %home
    shl r1, %hidden, 1           # r1 = rb
    mul r14, r4, r1
    add r14, r14, %y             # r14 = the batch's first output row
    sub r2, r13, r26
    min r2, r2, 8                # r2 = rows in this batch
    ld.v8 r16, [r5]              # home words of these rows (slot j's in r16 after j shifts)
    mov r3, 0
home_row:
    shr r5, r16, 32              # r5 = home GPU
    and r6, r16, 0xffffffff
    mul r6, r6, r1
    add r6, r6, %yhome           # r6 = the row's slot there
    put r5, r6, r14, r1
    add r14, r14, r1
    next_slot_word r3, r2, home_row
    add r26, r26, 8
    bra home_batch
homed:
    fence                        # the tile's rows are home
    div r20, %ffn, %n_tile       # restore Ju, Jd, jobs per block, rb
    div r21, %hidden, %n_tile
    add r22, r20, r21
    mul r22, r22, %swizzle
    shl r23, %hidden, 1
    add r25, r25, r13
    bra job
finished:
    red.add %gpu, [%acct+16], r25    # acct 2: rows computed
    atom.add r5, %gpu, [%jobs+8], 1
    sub r6, %ntb, 1
    bne r5, r6, leave            # not the GPU's last worker
    tell_every_gpu %done, r6, r7
leave:
    exit
