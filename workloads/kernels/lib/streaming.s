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
