# PyTorch's NVSHMEM all-to-all-v with splits on the device (torch.ops.symm_mem.all_to_all_vdev;
# pytorch/pytorch torch/csrc/distributed/c10d/symm_mem/nvshmem_extension.cu: exchangeSplitAndOffset
# and allToAllV), at thread-block level. Its two kernels:
#
# a2av_exchange (one 512-thread block, launched collectively): for every peer p the block writes,
#   on p, this rank's input split for p and the offset in this rank's input where p's data starts
#   (nvshmem_int64_p: one 8-byte remote store each; the offsets are the exclusive prefix sum of
#   the input splits), then nvshmemx_barrier_all_block (a quiet - the stores have landed - and a
#   barrier over the ranks: here a flag per rank on every rank, then a wait for all of them).
# a2av (grid `num_blocks` of 512 threads, launched collectively): blocks_per_peer = max(grid /
#   npes, 1); block b serves peers i = b / blocks_per_peer, + grid / blocks_per_peer, ... (peer =
#   (me + i) % npes), each time *reading* its 1 / blocks_per_peer share of what that peer sends
#   this rank with nvshmemx_getmem_nbi_block (a one-sided get from the peer's input, at the
#   offset the peer published, into this rank's output at the exclusive prefix sum of the output
#   splits), then nvshmem_quiet (here: fence). Block-scoped gets over NVLink are the block's warps
#   loading from the peer's memory: one read request per packet on the link and the data coming
#   back as responses - the hub's `get`.
#
# Splits are in bytes here (PyTorch's are rows x the row stride in bytes: the same products).
# Layouts (symmetric): send, recv [npes x bytes_per_peer]; splits ctl [3][npes] i64 (input splits,
# output splits, source offsets - PyTorch's in_out_splits); barrier ctl [npes] i64.
.kernel a2av_exchange
.param splits
.param barrier
.param bytes_per_peer
    shl r10, %ngpu, 3                 # r10 = bytes of one row of splits
    shl r11, %gpu, 3                  # r11 = this rank's column
    mov r1, 0                         # r1 = peer p
    mov r2, 0                         # r2 = exclusive prefix sum of the input splits
publish:
    st [%splits], %bytes_per_peer     # equal splits: the input split of every peer (row 0)
    add r3, %splits, r10
    add r3, r3, r11                   # &output_splits[me] (row 1), on p
    flag.set r1, [r3], %bytes_per_peer
    add r3, r3, r10                   # &source_offsets[me] (row 2), on p
    flag.set r1, [r3], r2
    add r2, r2, %bytes_per_peer
    add r1, r1, 1
    blt r1, %ngpu, publish
    fence                             # quiet: every store has landed
    mov r1, 0
    add r3, %barrier, r11             # &barrier[me], on every rank
raise:
    flag.set r1, [r3], 1
    add r1, r1, 1
    blt r1, %ngpu, raise
    fence
    wait.all.eq [%barrier], 1, %ngpu  # every rank arrived (a lane per rank's flag)
    exit

.kernel a2av
.param send
.param recv
.param splits
    shl r10, %ngpu, 3                 # r10 = bytes of one row of splits
    div r1, %ntb, %ngpu
    max r1, r1, 1                     # r1 = blocks_per_peer
    div r2, %tb, r1                   # r2 = i
    div r3, %ntb, r1                  # r3 = peers step
    rem r12, %tb, r1                  # r12 = this block's share
peer:
    bge r2, %ngpu, done
    add r4, %gpu, r2
    rem r4, r4, %ngpu                 # r4 = peer
    mov r5, 0                         # r5 = write offset: prefix sum of the output splits < peer
    mov r6, 0
prefix:
    bge r6, r4, summed
    shl r7, r6, 3
    add r7, r7, r10
    add r7, r7, %splits
    ld r8, [r7]
    add r5, r5, r8
    add r6, r6, 1
    bra prefix
summed:
    shl r7, r4, 3
    add r7, r7, r10
    add r7, r7, %splits
    ld r8, [r7]                       # output split from peer
    div r9, r8, r1                    # block_size
    mul r11, r9, r12                  # block_offset
    add r7, r7, r10
    ld r13, [r7]                      # source offset of this rank's data in peer's input
    add r13, r13, r11
    add r13, r13, %send               # source on peer
    add r14, r5, r11
    add r14, r14, %recv               # destination here
    get r4, r14, r13, r9              # nvshmemx_getmem_nbi_block
    add r2, r2, r3
    bra peer
done:
    fence                             # nvshmem_quiet
    exit
