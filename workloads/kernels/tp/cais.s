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
    cais_collective %send, %recv, %flags, %elems, %slice, %phase, %shift
    exit
