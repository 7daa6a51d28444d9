# tp_gemm_t3: the TP scheme t3's row-parallel GEMM fused with its reduce-scatter, after T3 (Pati
# et al., "T3: Transparent Tracking & Triggering for Fine-grained Overlap of Compute &
# Collectives", ASPLOS 2024, arXiv 2401.16677): the producer GEMM's output is configured to go to
# the rank that owns it, a tracker counts the producer's stores to each region and, once the
# region is complete, triggers a pre-programmed DMA that sends it there, where near-memory compute
# adds it into the owner's copy (op-and-store), so the reduce-scatter runs under the GEMM without
# SM reduction work. workload.block (moehub_arch/workloads/block.py) launches it for the output
# projection (Y = A W row-parallel, A [T][K], W [N/n][K][n], Y row-major [T][N]: group = N).
#
# Ownership: rank g owns sequence chunk (g + 1) % P (T / P rows, the shard of sp_ring and of the
# all-gathers that follow: tp/allreduce_ring.s ring_half, tp/allreduce_nvls.s); the home of row t
# is (t / (T / P) - 1) mod P. recv (zero before the call) ends holding, on each rank, the sum over
# the ranks of its own chunk.
# Order (T3's staggered ring steps): rank g walks the row tiles starting at chunk (g + 2) % P, so
# its first chunk goes to its ring neighbour g + 1 and its own chunk comes last; at any step the P
# ranks send to P different homes. Jobs are row tile major within that order (%tb + i %ntb).
# Tracking and triggering, as modelled here: each job stores its tile to the local Y (the partial
# sum, as tp_gemm does) and counts it in its row tile's tracker word (ready [row tiles] i64, zero
# before the call; atom.add after the store, which the TB waited for); the job that completes a
# row tile (tile_rows x N, contiguous in Y) issues the tile's DMA: put.add.bf16 of the tile into
# the same rows of recv on their home (the hub reads Y and sends it; the home's memory adds it,
# isa/base.yaml put.add.bf16; to itself a local copy-add). The TB does not wait for the DMA. T3's
# tracker sits at the memory controller and fires without the SM; here the TB that finished the
# tile does (one local atomic per job, one instruction per tile: assumption, see block.py).
# End: every TB fences (its DMAs are in their homes' memory) and meets the same TB of every rank
# (flags [grid][P] i64, zero before the call, lib/nvls_allreduce.s nvls_barrier): every rank's
# contributions are home, so the chunk is complete when the kernel ends (T3's tracker tells the
# consumer when a region's updates are all in; a kernel boundary is this model's).
# Reduction order: each home adds the P contributions to a row in the order they arrive, each add
# rounded to bf16 - not a fixed order: block.py checks the sum against the exact one within the
# bound of P - 1 such roundings.
.include "lib/tp_gemm.s"
.include "lib/nvls_allreduce.s"

# t3_track_and_trigger tile, jobs, row, rows, row_bytes, y, skip, t1, t2, t3, t4
#   The job just stored its part of row tile `tile` (first row `row`, `rows` rows of `row_bytes`
#   in y and recv): count it in the tile's tracker word (%ready); unless that made `jobs`, go to
#   `skip`; else send the tile to its home's %recv with put.add.bf16 (the DMA, added there).
#   The kernel declares the params ready, recv and tokens. Writes t1 .. t4.
.macro t3_track_and_trigger tile, jobs, row, rows, row_bytes, y, skip, t1, t2, t3, t4
    shl \t1, \tile, 3
    add \t1, \t1, %ready             # t1 = the row tile's tracker word
    atom.add \t2, %gpu, [\t1], 1     # track: one more job of the row tile stored
    add \t2, \t2, 1
    blt \t2, \jobs, \skip            # the row tile is not complete yet
    div \t1, %tokens, %ngpu
    div \t1, \row, \t1
    add \t1, \t1, %ngpu
    sub \t1, \t1, 1
    rem \t1, \t1, %ngpu              # t1 = the row tile's home: (chunk - 1) mod P
    mul \t2, \row, \row_bytes        # t2 = the row tile's offset in y and recv
    add \t3, \t2, \y
    add \t2, \t2, %recv
    mul \t4, \rows, \row_bytes       # t4 = its bytes
    put.add.bf16 \t1, \t2, \t3, \t4  # trigger: the tile's DMA, added into the home's recv
.endm

.kernel tp_gemm_t3
.param a
.param w
.param y
.param tokens
.param k
.param ncols                 # N (= group: Y row-major)
.param n_tile
.param tile_rows             # divides T / P: a row tile never spans two homes
.param group
.param recv                  # [T][N] bf16 at every rank, zero before the call
.param ready                 # [row tiles] i64 tracker words, zero before the call
.param flags                 # [grid][P] i64, zero before the call
.smem 96KB
    tp_gemm_setup
    div r14, %tokens, %ngpu          # r14 = rows per chunk
    div r13, r14, %tile_rows         # r13 = row tiles per chunk
    add r30, %gpu, 2
    mul r30, r30, r13                # r30 = this rank's first row tile: chunk (g + 2) % P
job:
    bge r0, r24, end
    split_job r0, r22, r15, r3       # r15 = step (row tile in this rank's order), r3 = column job
    add r2, r15, r30
    rem r2, r2, r23                  # r2 = row tile
    mul r4, r2, %tile_rows           # r4 = first row
    mov r5, %tile_rows               # r5 = rows
    mul r6, r5, %n_tile              # r6 = rows x n
    mul r7, r4, r25
    add r7, r7, %a                   # r7 = A
    mul r10, r3, r26
    add r10, r10, %w                 # r10 = W column tile
    gemm_tile r8, r9, r7, r10, r5, %n_tile, %k, r6, r3, r15, 0    # weights from HBM at step 0
    tp_gemm_store                    # the partial tile to the local Y (r12 = its first element)
    t3_track_and_trigger r2, r22, r4, r5, r27, %y, next, r16, r17, r18, r19
next:
    add r0, r0, %ntb
    bra job
end:
    fence                            # this TB's DMAs are in their homes' memory
    nvls_barrier %flags, 1           # every rank's: each home's chunk is complete
    exit

# tp_ffn_t3: the FFN of the TP scheme t3 - the shared-expert FFN kernel (../common/moe_common.s
# shared_ffn: gate/up jobs column-parallel, down jobs row-parallel, taken dynamically with a
# lag of one row tile; lib/shared_ffn.s runs the same instructions) with T3's reduce-scatter
# fused into its down GEMM, as tp_gemm_t3 above does it: rank g walks the row tiles starting at
# chunk (g + 2) % P (the job order turned by that many tiles; experts must be 1), each down job
# counts its stored tile in the row tile's tracker word (ready [row tiles] i64, zero before the
# call), and the job that completes the row tile (Jd = H / n down jobs) sends it - tile_rows x H,
# contiguous in ys - to its home's recv with put.add.bf16. End: fence and the barrier over the
# ranks (flags [grid][P] i64, zero before the call): every home's chunk is complete.
.include "lib/shared_ffn.s"
.kernel tp_ffn_t3
.param x
.param wg                    # [1][I/t/n][H][n] bf16
.param wu
.param wd                    # [1][H/n][I/t][n] bf16
.param hs                    # [T][I/t] bf16
.param ys                    # [T][H] bf16: this rank's partial sum
.param jobs
.param acct
.param tokens
.param hidden
.param ffn                   # I / t
.param experts               # 1
.param tile_rows             # divides T / P: a row tile never spans two homes
.param n_tile
.param swizzle
.param recv                  # [T][H] bf16 at every rank, zero before the call
.param ready                 # [row tiles] i64 tracker words, zero before the call
.param flags                 # [grid][P] i64, zero before the call
.smem 160KB
.smem_job 10                 # bytes per element of a tile_rows x n_tile job (fits a smaller SM)
    shared_ffn_setup
job:
    shared_ffn_next tile, end
tile:
    div r7, r28, %ngpu               # r7 = row tiles per chunk
    add r12, %gpu, 2
    mul r7, r7, r12
    add r2, r2, r7
    rem r2, r2, r29                  # r2 = the row tile, this rank's order: from chunk (g + 2) % P
    shared_ffn_tile down
    shared_ffn_gate_up
    bra job
down:
    shared_ffn_down                  # the partial tile to ys (r14)
    t3_track_and_trigger r2, r23, r6, r13, r18, %ys, job, r12, r7, r14, r17
    bra job
end:
    fence                            # this TB's DMAs are in their homes' memory
    nvls_barrier %flags, 1           # every rank's: each home's chunk is complete
    exit
