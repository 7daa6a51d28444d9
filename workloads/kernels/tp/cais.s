# cais_tp_collective: the TP scheme cais's collectives (workload.block, moehub_arch/workloads/
# block.py): phase 1 the reduce-scatter with red.cais, 2 the all-gather with ld.cais
# (lib/cais_collectives.s; the switch's merge unit, components/cais_merge.py). GPU g owns chunk
# (g + shift) % P: the block passes 1, so that its sequence shard is sp_ring's (tp/transformer.s).
.include "lib/cais_collectives.s"
.kernel cais_tp_collective
.param send
.param recv
.param flags         # [grid][ngpu] i64, zero before the call
.param elems
.param slice
.param phase
.param shift
.param sync          # [grid] i64 flags of the group sync (workload.cais), zero before the call; -1: none
    cais_collective %send, %recv, %flags, %elems, %slice, %phase, %shift, %sync
    exit

# tp_gemm_cais: a tensor-parallel GEMM (lib/tp_gemm.s) fused with a CAIS collective at thread-block
# level (workload.block.cais_fusion; CAIS, arXiv 2605.05628: GEMM thread blocks load and reduce
# through the switch with memory semantics, so no collective kernel runs between the GEMMs).
# Rank g owns sequence chunk (g + 1) % P (T / P rows, sp_ring's shard): the home of row t is
# (t / (T / P) - 1) mod P. Both modes start and end with the collectives' flag barrier over the
# thread blocks of every rank (flags [grid][P] i64, zero before the call): CAIS's pre-access
# synchronisation of matching thread blocks.
#   mode 2, AG-GEMM (the column-parallel GEMM after a sharded norm): A is registered
#     (workload.cais) and complete only on its homes; the row tile's column job 0 pulls the tile's
#     rows from their homes with ld.cais (every rank's job 0 of a tile asks for the same lines:
#     the switch reads each home once and fans the reply out), fences and counts the tile ready
#     (ready [row tiles] i64, zero before the call); the tile's other column jobs wait for that.
#     The barrier before: every home's rows are written (its norm kernel ended).
#   mode 1, GEMM-RS (the row-parallel GEMM before the residual; group must be N: Y row-major):
#     each job stores its tile to the local Y (the partial sum) and adds every row's n columns
#     into the row's home's recv with red.cais (posted), which the switch merges over the ranks;
#     recv (registered, zero before the call) ends complete on this rank's shard. The fence and
#     the barrier after: every rank's sums are home.
# Rank order: every rank takes the jobs in the same order (row tile major, %tb + i %ntb), so thread
# block b runs the same jobs on every rank: the b's of all ranks are one group of matching thread
# blocks (CAIS's merging-aware thread-block coordination). With sync >= 0 each job's loads (mode 2,
# before the gather) or reductions (mode 1, before the scatter) are preceded by the group's
# pre-access sync in the switch's group sync table (sync.cais on sync[b], wait.ge for the
# release): no rank's thread block accesses more than one job ahead of the slowest rank's, so
# the ranks' requests for a line meet in the merge table close together.
.include "lib/tp_gemm.s"
.kernel tp_gemm_cais
.param a
.param w
.param y
.param tokens
.param k
.param ncols                 # N
.param n_tile
.param tile_rows
.param group
.param recv                  # mode 1: the registered sum (the same offsets as y)
.param ready                 # mode 2: [row tiles] i64
.param flags                 # [grid][P] i64
.param mode                  # 1 GEMM-RS, 2 AG-GEMM
.param sync                  # [grid] i64 group sync flags (workload.cais), zero before the call; -1: none
.smem 96KB
    beq %mode, 1, setup
    nvls_barrier %flags, 1           # every home's rows of A are written
setup:
    tp_gemm_setup
    div r14, %tokens, %ngpu          # r14 = rows per shard
    mov r30, 0                       # r30 = this thread block's syncs so far
    shl r31, %tb, 3
    add r31, r31, %sync              # r31 = &sync[tb] (used only if sync >= 0)
job:
    bge r0, r24, end
    tp_gemm_split
    beq %mode, 1, compute
    shl r13, r2, 3
    add r13, r13, %ready             # r13 = &ready[row tile]
    bne r3, 0, wait_rows
    blt %sync, 0, gather_rows
    add r30, r30, 1
    sync.cais r31, r30               # the group's pre-access sync before its loads
    wait.ge [r31], r30
gather_rows:
    mov r15, r4                      # r15 = first row of a segment in one shard
    add r18, r4, r5                  # r18 = the tile's end
gather:
    div r16, r15, r14                # r16 = the segment's chunk
    add r17, r16, 1
    mul r17, r17, r14
    min r17, r17, r18                # r17 = the segment's end (its chunk's or the tile's)
    add r16, r16, %ngpu
    sub r16, r16, 1
    rem r16, r16, %ngpu              # r16 = the chunk's home
    sub r19, r17, r15
    mul r19, r19, r25                # r19 = the segment's bytes
    mul r29, r15, r25
    add r29, r29, %a                 # r29 = the segment in A (here and at the home)
    ld.cais r16, r29, r29, r19
    mov r15, r17
    blt r15, r18, gather
    fence                            # the tile's rows are here
    atom.add r19, %gpu, [r13], 1     # the tile is ready (after the fence: the TB waited)
    bra compute
wait_rows:
    wait.ge [r13], 1
compute:
    tp_gemm_compute
    tp_gemm_store
    beq %mode, 2, next
    blt %sync, 0, scatter_rows
    add r30, r30, 1
    sync.cais r31, r30               # the group's pre-access sync before its reductions
    wait.ge [r31], r30
scatter_rows:
    sub r17, r12, %y
    add r17, r17, %recv              # r17 = the same element in recv (at the home)
    mov r15, r4                      # r15 = row
    add r18, r4, r5
scatter:
    div r16, r15, r14
    add r16, r16, %ngpu
    sub r16, r16, 1
    rem r16, r16, %ngpu              # r16 = the row's home
    red.cais.add.bf16 r16, r17, r12, r28
    add r12, r12, r27
    add r17, r17, r27
    add r15, r15, 1
    blt r15, r18, scatter
next:
    add r0, r0, %ntb
    bra job
end:
    beq %mode, 2, done
    fence                            # this thread block's sums are home
    nvls_barrier %flags, 2           # every rank's sums are home: the shard is complete
done:
    exit
