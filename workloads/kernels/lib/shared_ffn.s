# Kernel library: the body of the shared-expert FFN kernel (../common/moe_common.s shared_ffn,
# which says the job order and layouts), cut into macros so that a kernel that adds work at a
# job's edges - the TP scheme t3's FFN (../tp/t3.s tp_ffn_t3), which sends each finished row tile
# home - runs the same instructions around it. The kernel declares shared_ffn's params and
# .smem 160KB. Registers: r0 tiles in the last group, r1 job number, r2 shared tile u, r3 s, r4
# row tile, r5 q (gate/up) or c (down), r6 first token, r7 scratch, r8 .. r10 shared-memory
# tiles, r11 the tile's gate/up counter, r12 scratch, r13 rows, r14 A / output, r15 row index
# s T + t0, r16 rows x n, r17 scratch, r18 x / ys row bytes, r19 jobs of a full block (G x J),
# r20 .. r21 gemm_smem, r22 J, r23 Jd, r24 Ju, r25 output row bytes of a job, r26 hs row bytes,
# r27 0 gate/up / 1 down, r28 row tiles per shared expert, r29 shared tiles, r30 jobs. Free for
# the caller: r31 (and r7, r12, r17 between the macros).
#   shared_ffn_setup                  the registers above that hold for the whole kernel
#   shared_ffn_next tile, end         takes the next job (r1): branches to `end` when none is
#                                     left, to `tile` for a down job (r27 = 1, r5 = c), falls
#                                     through for a gate/up job (r27 = 0, r5 = q); r2 = the
#                                     shared tile
#   shared_ffn_tile down              the tile's rows and counters from r2; branches to `down`
#                                     for a down job
#   shared_ffn_gate_up                the gate/up job: hs[s][rows][q cols], then counts it
#   shared_ffn_down                   waits for the tile's gate/up jobs, then the down job:
#                                     ys[s][rows][c cols] (r14 = its first element)
#
# The job numbers cover the real jobs only, J per shared tile, as DeepGEMM's persistent
# scheduler numbers only the blocks of real tiles and lets the last swizzle group hold fewer
# tiles (deepseek-ai/DeepGEMM, deep_gemm/include/deep_gemm/common/scheduler.cuh: num_blocks =
# the real blocks, get_swizzled_block_idx's group size min(G, tiles - first tile of the group)).
# The order is lib/streaming.s's with a lag of one block - gate/up jobs of group 0, then for
# b = 1 .. groups - 1 the gate/up jobs of group b followed by the down jobs of group b - 1, then
# the down jobs of the last group; each part column job outer and tile inner - with every job of
# a tile past the last left out (streaming.s numbers whole groups and has the caller skip them:
# at few tokens most of those jobs would be such, each an atomic take of the job counter).
.include "lib/gemm_tiles.s"

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
    mul r19, r22, %swizzle       # r19 = jobs of a full block (G * J)
    sub r0, r29, 1
    div r0, r0, %swizzle
    mul r0, r0, %swizzle         # the last group's first tile
    sub r0, r29, r0              # r0 = tiles in the last group (1 .. G)
    mul r30, r29, r22            # r30 = jobs: J per shared tile, the real ones only
.endm

.macro shared_ffn_next tile, end
    atom.add r1, %gpu, [%jobs], 1
    bge r1, r30, \end
    mul r7, r0, r23
    sub r7, r30, r7              # r7 = the last group's first down job (the last r0 * Jd jobs)
    bge r1, r7, last_\@
    mul r12, r24, %swizzle
    sub r17, r1, r12             # r17 = job - the gate/up jobs of group 0 if it is full
    blt r17, 0, first_\@
    split_job r17, r19, r2, r5   # r5 = job in block b = r2 + 1 (every block before the last is full)
    add r2, r2, 1
    mul r7, r2, %swizzle         # r7 = group b's first tile
    sub r12, r29, r7
    min r12, r12, %swizzle       # r12 = tiles of group b (the last may hold fewer)
    mul r17, r12, r24
    blt r5, r17, gate_up_\@      # a gate/up job of group b
    sub r5, r5, r17              # a down job of group b - 1, a full group
    sub r7, r7, %swizzle
    mov r12, %swizzle
    bra down_\@
last_\@:
    sub r5, r1, r7               # a down job of the last group
    sub r7, r29, r0
    mov r12, r0
down_\@:
    rem r2, r5, r12
    add r2, r2, r7               # r2 = shared tile u: tile inner
    div r5, r5, r12              # r5 = c: column job outer
    mov r27, 1                   # r27 = 1: a down job
    bra \tile
first_\@:
    mov r5, r1                   # a gate/up job of group 0 (full, or the only group)
    mov r7, 0
    min r12, r29, %swizzle
gate_up_\@:
    rem r2, r5, r12
    add r2, r2, r7               # r2 = shared tile u
    div r5, r5, r12              # r5 = q
    mov r27, 0                   # r27 = 0: a gate/up job
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
