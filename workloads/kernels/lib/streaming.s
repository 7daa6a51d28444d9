# Kernel library: the job scheduler of the tile-streaming expert kernels (overlap_expert,
# moehub_expert, the streaming_gemm microbenchmark). Persistent thread blocks take jobs from one
# atomic counter. A row tile has Ju = I / n gate/up jobs and Jd = H / n down jobs (n = n_tile,
# gemm_tiles.s). Tiles are taken in groups of G consecutive tiles (`group`: the L2-aware order of
# gemm_tiles.s swizzle_job, for tiles that arrive over time) and jobs are numbered in blocks of
# G * J jobs (J = Ju + Jd): block b holds the gate/up jobs of group b, then the down jobs of group
# b - lag, each part column job outer and tile inner, so the workers running at one time share a
# few weight column tiles (read from HBM once, by the group's other tiles from the L2) instead of
# each walking its own tile through every weight tile of the expert (an expert's weights cycle
# through the L2 once per tile, and LRU keeps none of them when they exceed it). A down job
# needs every gate/up job of its tile done; `lag` groups between them let those finish while
# other jobs run, so a down job rarely waits (stream_lag below). The last `lag` blocks hold down
# jobs only; the last group may hold fewer than G tiles (the caller skips jobs of tiles past the
# last). G = 1 is the order tile by tile.
#
# Interfaces. Arguments are operands; the names written are said.
#
#   stream_lag lag, workers, ju, jd, hidden, ffn, group, tmp
#       lag = 1 + ceil(workers * Tgu / (Tavg * J * G)): the number of blocks whose jobs the other
#       workers take while one gate/up job runs, with job times in proportion to their k (a
#       gate/up job runs two mma over k = H, a down job one over k = I: Tgu = 2H,
#       Tavg = (Ju * 2H + Jd * I) / J). Writes lag, tmp.
#   stream_job job, per_block, ju, group, lag, tile, q, gate_up, again, tmp
#       job number -> its tile and its job q in the tile (per_block = G * J): a gate/up job
#       (q < ju) branches to `gate_up`; a down job (output column tile q - ju) of group b - lag
#       falls through, or branches to `again` when that group does not exist (b < lag). The
#       caller skips jobs of tiles past the last. Writes tile, q, tmp.
#
# The jobs of one row tile, as the streaming expert kernels run them (overlap_expert,
# dysharp_fused_expert). Registers as they set them: r8, r9, r10 the shared-memory tiles
# (gemm_smem: G or Y, U or Yq, Hq); r12 the tile's first row, r13 its rows, r14 its local expert,
# r15 1 on the expert's first tile (weights from HBM), r3 the job's column tile (q, or c for a
# down job), r11 the tile's job counters (gate/up jobs done, down jobs done), r20 Ju, r21 Jd,
# r23 bytes of an H row, r24 bytes of an I row. Weight layout and L2 rules of gemm_tiles.s.
#
#   stream_job_setup (no operands)
#       from r31 = the tiles: r20 = Ju, r21 = Jd, r22 = jobs per block (G x J), r29 = lag
#       (stream_lag over %ntb workers), r30 = jobs in all blocks (the last `lag` hold down jobs
#       only); r8 - r10 the shared-memory tiles, r23 and r24 the H and I row bytes, r25 = 0 (the
#       rows a worker completes). Needs %ffn, %hidden, %n_tile, %swizzle (= G), %tile_rows.
#       Writes r4 too.
#   stream_gate_up_job x, hh, wg, wu
#       Hh[rows][q cols] = silu(X Wg[e][q]) * (X Wu[e][q]) (row r of X at x + r x r23, of Hh at
#       hh + r x r24), then counts the job at [r11] (after the copy: the TB waited for it).
#       Writes r4 - r7, r16, r17.
#   stream_down_gemm hh, wd
#       waits until [r11] counts Ju (every column of Hh is there), then Yq (r9) = bf16(Hh Wd[e][c])
#       over the full I. Leaves r7 = rows x n. Writes r4 - r7, r16, r17.
#   stream_down_copy y
#       Y[rows][c cols] = Yq (row r of Y at y + r x r23). Writes r4 - r6.
#   stream_down_store y
#       stream_down_copy y, then counts the job at [r11 + 8]; r4 = down jobs of the tile done,
#       this one included. Writes r4 - r6.

.macro stream_lag lag, workers, ju, jd, hidden, ffn, group, tmp
    mul \tmp, \jd, \ffn
    mul \lag, \ju, \hidden
    shl \lag, \lag, 1
    add \tmp, \tmp, \lag             # Tavg * J, in units of k: Ju * 2H + Jd * I
    mul \tmp, \tmp, \group           # Tavg * J * G: the jobs of one block
    mul \lag, \workers, \hidden
    shl \lag, \lag, 1                # workers * Tgu
    add \lag, \lag, \tmp
    sub \lag, \lag, 1
    div \lag, \lag, \tmp             # ceil(workers * Tgu / (Tavg * J * G))
    add \lag, \lag, 1
.endm

.macro stream_job job, per_block, ju, group, lag, tile, q, gate_up, again, tmp
    split_job \job, \per_block, \tile, \q    # tile = block b; q = job in the block
    mul \tmp, \ju, \group
    blt \q, \tmp, gate_up_\@           # a gate/up job of group b
    sub \q, \q, \tmp                  # a down job, of group b - lag
    sub \tile, \tile, \lag
    blt \tile, 0, \again              # (the first `lag` blocks have no down jobs)
    mul \tile, \tile, \group
    rem \tmp, \q, \group
    add \tile, \tile, \tmp
    div \q, \q, \group
    add \q, \q, \ju                   # q = Ju + c
    bra out_\@
gate_up_\@:
    mul \tile, \tile, \group
    rem \tmp, \q, \group
    add \tile, \tile, \tmp
    div \q, \q, \group
    bra \gate_up
out_\@:
.endm

.macro stream_job_setup
    div r20, %ffn, %n_tile       # r20 = Ju
    div r21, %hidden, %n_tile    # r21 = Jd
    add r22, r20, r21
    mul r22, r22, %swizzle       # r22 = jobs per block
    stream_lag r29, %ntb, r20, r21, %hidden, %ffn, %swizzle, r4    # r29 = lag
    add r30, r31, %swizzle
    sub r30, r30, 1
    div r30, r30, %swizzle       # r30 = groups
    add r30, r30, r29
    mul r30, r30, r22            # r30 = jobs in all blocks (the last `lag` hold down jobs only)
    gemm_smem r8, r9, %tile_rows, %n_tile, r4, r4    # r8 = G (gate/up) or Y (down); r9 = U, or Yq (down)
    add r10, r9, r4              # r10 = Hq
    shl r23, %hidden, 1          # r23 = H row bytes
    shl r24, %ffn, 1             # r24 = Hh row bytes
    mov r25, 0                   # r25 = rows this worker completed
.endm

.macro stream_gate_up_job x, hh, wg, wu
    mul r16, r12, r23
    add r16, r16, \x             # r16 = A: the tile's rows
    mul r17, %hidden, %n_tile
    shl r17, r17, 1
    weight_tile_offset r4, r14, r20, r3, r17    # r4 = offset of weight tile (expert, q)
    add r5, r4, \wg
    add r6, r4, \wu
    mul r7, r13, %n_tile         # r7 = rows * n
    # job 0 reads the rows from HBM, the others through the L2
    swiglu_tile r8, r9, r10, r16, r5, r6, r13, %n_tile, %hidden, r7, r3, r15, 1
    mul r4, r12, r24
    shl r5, %n_tile, 1           # r5 = bytes of one row of a job's output
    mul r6, r3, r5
    add r4, r4, r6
    add r4, r4, \hh              # r4 = Hh[first row][q * n]
    copy2d r4, r10, r13, r5, r24, r5
    atom.add r4, %gpu, [r11], 1  # gate/up jobs done (after the copy: the TB waited for it)
.endm

.macro stream_down_gemm hh, wd
    wait.ge [r11], r20           # every column of Hh is there
    mul r16, r12, r24
    add r16, r16, \hh            # r16 = A: the tile's Hh rows
    mul r17, %ffn, %n_tile
    shl r17, r17, 1
    weight_tile_offset r4, r14, r21, r3, r17
    add r5, r4, \wd              # r5 = Wd tile (expert, c)
    mul r7, r13, %n_tile         # r7 = rows * n
    gemm_tile_a_l2 r8, r9, r16, r5, r13, %n_tile, %ffn, r7, r15, 1
.endm

.macro stream_down_copy y
    mul r4, r12, r23
    shl r5, %n_tile, 1
    mul r6, r3, r5
    add r4, r4, r6
    add r4, r4, \y               # r4 = Y[first row][c * n]
    copy2d r4, r9, r13, r5, r23, r5
.endm

.macro stream_down_store y
    stream_down_copy \y
    atom.add r4, %gpu, [r11+8], 1
    add r4, r4, 1
.endm
