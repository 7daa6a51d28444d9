# Kernel library: the job scheduler of the tile-streaming expert kernels (overlap_expert,
# moehub_expert, the streaming_gemm microbenchmark). Persistent thread blocks take jobs from one
# atomic counter. A row tile has Ju = I / n gate/up jobs and Jd = H / n down jobs (n = n_tile,
# gemm_tiles.s); jobs are numbered in blocks of J = Ju + Jd: block b holds the gate/up jobs of
# tile b, then the down jobs of tile b - lag. A down job needs every gate/up job of its tile done;
# `lag` tiles between them let those finish while other jobs run, so a down job rarely waits
# (stream_lag below). The last `lag` blocks hold down jobs only.
#
# Interfaces. Arguments are operands; the names written are said.
#
#   stream_lag lag, workers, ju, jd, hidden, ffn, tmp
#       lag = 1 + ceil(workers * Tgu / (Tavg * J)): the number of blocks whose jobs the other
#       workers take while one gate/up job runs, with job times in proportion to their k (a
#       gate/up job runs two mma over k = H, a down job one over k = I: Tgu = 2H,
#       Tavg = (Ju * 2H + Jd * I) / J). Writes lag, tmp.
#   stream_job job, per_block, ju, lag, tile, q, gate_up, again
#       job number -> its tile and its job q in the block: a gate/up job (q < ju) branches to
#       `gate_up` with tile = b; a down job (output column tile q - ju) falls through with
#       tile = b - lag, or branches to `again` when that tile does not exist (b < lag). The caller
#       skips gate/up jobs of blocks past the last tile. Writes tile, q.

.macro stream_lag lag, workers, ju, jd, hidden, ffn, tmp
    mul \tmp, \jd, \ffn
    mul \lag, \ju, \hidden
    shl \lag, \lag, 1
    add \tmp, \tmp, \lag             # Tavg * J, in units of k: Ju * 2H + Jd * I
    mul \lag, \workers, \hidden
    shl \lag, \lag, 1                # workers * Tgu
    add \lag, \lag, \tmp
    sub \lag, \lag, 1
    div \lag, \lag, \tmp             # ceil(workers * Tgu / (Tavg * J))
    add \lag, \lag, 1
.endm

.macro stream_job job, per_block, ju, lag, tile, q, gate_up, again
    split_job \job, \per_block, \tile, \q
    blt \q, \ju, \gate_up            # a gate/up job of tile b
    sub \tile, \tile, \lag           # a down job, of tile b - lag
    blt \tile, 0, \again             # (the first `lag` blocks have no down jobs)
.endm
