# Kernel library: the body of the shared-expert FFN kernel (../common/moe_common.s shared_ffn,
# which says the job order and layouts), cut into macros so that a kernel that adds work at a
# job's edges - the TP scheme t3's FFN (../tp/t3.s tp_ffn_t3), which sends each finished row tile
# home - runs the same instructions around it. The kernel declares shared_ffn's params and
# .smem 160KB. Registers: r1 job number, r2 shared tile u, r3 s, r4 row tile, r5 q (gate/up) or
# c (down), r6 first token, r7 scratch, r8 .. r10 shared-memory tiles, r11 the tile's gate/up
# counter, r12 scratch, r13 rows, r14 A / output, r15 row index s T + t0, r16 rows x n, r17
# scratch, r18 x / ys row bytes, r19 jobs per block, r20 .. r21 gemm_smem, r22 J, r23 Jd, r24 Ju,
# r25 output row bytes of a job, r26 hs row bytes, r27 0 gate/up / 1 down, r28 row tiles per
# shared expert, r29 shared tiles, r30 jobs. Free for the caller: r31 (and r7, r12, r17 between
# the macros).
#   shared_ffn_setup                  the registers above that hold for the whole kernel
#   shared_ffn_next again, tile, end  takes the next job (r1): branches to `end` when none is
#                                     left, to `again` for a job of a tile past the last, to
#                                     `tile` for a down job (r27 = 1, r5 = c), falls through for a
#                                     gate/up job (r27 = 0, r5 = q); r2 = the shared tile
#   shared_ffn_tile down              the tile's rows and counters from r2; branches to `down`
#                                     for a down job
#   shared_ffn_gate_up                the gate/up job: hs[s][rows][q cols], then counts it
#   shared_ffn_down                   waits for the tile's gate/up jobs, then the down job:
#                                     ys[s][rows][c cols] (r14 = its first element)
.include "lib/gemm_tiles.s"
.include "lib/streaming.s"

.macro shared_ffn_setup
    gemm_smem r8, r9, %tile_rows, %n_tile, r20, r21    # r8 = G (gate/up) or Y (down); r9 = U, or Yq (down)
    add r10, r9, r21             # r10 = Hq
    shl r18, %hidden, 1          # r18 = x / ys row bytes
    shl r25, %n_tile, 1          # r25 = bytes of one row of a job's output
    shl r26, %ffn, 1             # r26 = hs row bytes
    div r24, %ffn, %n_tile       # r24 = Ju
    div r23, %hidden, %n_tile    # r23 = Jd
    add r22, r24, r23            # r22 = J, jobs per block
    sub r1, %tile_rows, 1
    add r1, r1, %tokens
    div r28, r1, %tile_rows      # r28 = row tiles per shared expert
    mul r29, r28, %experts       # r29 = shared tiles
    mul r19, r22, %swizzle       # r19 = jobs per block (G * J)
    sub r30, %swizzle, 1
    add r30, r30, r29
    div r30, r30, %swizzle       # r30 = groups
    add r30, r30, 1
    mul r30, r30, r19            # r30 = jobs (the last block holds the last group's down jobs)
.endm

.macro shared_ffn_next again, tile, end
    atom.add r1, %gpu, [%jobs], 1
    bge r1, r30, \end
    stream_job r1, r19, r24, %swizzle, 1, r2, r5, gate_up_\@, \again, r7    # r2 = shared tile u
    bge r2, r29, \again          # a tile past the last (the last group is partial)
    sub r5, r5, r24              # r5 = c
    mov r27, 1                   # r27 = 1: a down job
    bra \tile
gate_up_\@:
    bge r2, r29, \again          # the last block has only down jobs; the last group is partial
    mov r27, 0                   # r27 = 0: a gate/up job, r5 = q
.endm

.macro shared_ffn_tile down
    split_job r2, r28, r3, r4    # r3 = s; r4 = row tile
    mul r6, r4, %tile_rows       # r6 = first token
    sub r13, %tokens, r6
    min r13, r13, %tile_rows     # r13 = rows
    mul r16, r13, %n_tile        # r16 = rows * n
    shl r11, r2, 3
    add r11, r11, %jobs
    add r11, r11, 16             # r11 = the tile's gate/up counter
    mul r15, r3, %tokens
    add r15, r15, r6             # r15 = row index s * T + t0 in hs / ys
    bne r27, 0, \down
.endm

.macro shared_ffn_gate_up
    mul r14, r6, r18
    add r14, r14, %x             # r14 = A: the tile's rows of x
    mul r12, %hidden, %n_tile
    shl r12, r12, 1
    weight_tile_offset r7, r3, r24, r5, r12    # r7 = offset of weight tile (s, q)
    add r12, r7, %wu
    add r7, r7, %wg
    swiglu_tile r8, r9, r10, r14, r7, r12, r13, %n_tile, %hidden, r16, r5, r4, 0
    mul r14, r15, r26
    mul r17, r5, r25
    add r14, r14, r17
    add r14, r14, %hs            # r14 = hs[s][t0][q * n]
    copy2d r14, r10, r13, r25, r26, r25
    atom.add r14, %gpu, [r11], 1 # gate/up jobs done (after the copy: the TB waited for it)
.endm

.macro shared_ffn_down
    wait.ge [r11], r24           # every column of the tile's hs is there
    mul r14, r15, r26
    add r14, r14, %hs            # r14 = A: hs[s][t0]
    mul r12, %ffn, %n_tile
    shl r12, r12, 1
    weight_tile_offset r7, r3, r23, r5, r12
    add r7, r7, %wd              # r7 = weight tile (s, c)
    gemm_tile_a_l2 r8, r9, r14, r7, r13, %n_tile, %ffn, r16, r4, 0
    mul r14, r15, r18
    mul r17, r5, r25
    add r14, r14, r17
    add r14, r14, %ys            # r14 = ys[s][t0][c * n]
    copy2d r14, r9, r13, r25, r18, r25
.endm
