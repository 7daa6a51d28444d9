# The backward pass of scheme `overlap` (workload.layer.passes: training; plan:
# moehub_arch/workloads/schemes/overlap.py), in Comet's way: the gradient all-to-all overlaps the
# experts' backward GEMMs tile by tile, as the forward's rows overlap its GEMMs. The forward's
# state serves as the handle: every received row position's home word (ov_home: source << 32 |
# t * k + j) and the tile table (dp_tiles) - no count exchange in the backward.
#   stream 3  moe_combine_bwd (../common/moe_backward.s; dw and dO = bf16(w dy) at home, one row
#             per pair in slot order), overlap_bwd_ready (this GPU's dO rows are readable: tell
#             every GPU), the shared experts' backward, deepep_bwd_tiles (../deepep/backward.s),
#             grouped_bwd_act with its per-tile counter (waits for each tile's dO rows),
#             grouped_dgrad, flag_set ov_bdgrad, grouped_wgrad, moe_dispatch_bwd
#   stream 2  flag_wait (this GPU's backward has begun), overlap_bwd_pull (the gradient dispatch: each row's dO
#             read from its home GPU into the forward's row position, tile by tile, each tile's
#             counter raised once its rows are in), flag_wait ov_bdgrad, overlap_bwd_home (the
#             gradient combine: each dX row put to its home GPU's slot while the wgrad runs)
# The gradient dispatch is a one-sided read (NVSHMEM get, as FlashDMoE's processors read their
# tiles): the expert side holds the positions, the home side the rows.
.include "lib/combine.s"

# overlap_bwd_ready (one TB): after moe_combine_bwd on this stream (its dO rows are written),
# ready[me] = 1 on every GPU, and the local start word for stream 2's flag_wait.
.kernel overlap_bwd_ready
.param ready                 # [P] i64
.param start
    tell_every_gpu %ready, r1, r2
    st [%start], 1
    exit

# overlap_bwd_pull: TB b takes tiles b, b + ntb, ... of the forward's tile table (dp_tiles: first
# row, rows, local expert, first tile; dp_info word 1: tiles, expert-major, in the order the
# GEMM blocks take them) and reads each row's dO from its home GPU (home word: source, slot) into
# the same position of dye; after the tile's reads complete (fence) its counter is raised by the
# tile's rows. It starts once every GPU's dO rows are ready.
.kernel overlap_bwd_pull
.param tiles
.param info
.param ready
.param home                  # [rows] i64: source << 32 | t * k + j (the forward's receivers')
.param dsend                 # [T * k][H] bf16 on every GPU: dO rows in slot order
.param dye                   # [rows][H] bf16: dO at the forward's row positions
.param tilecnt               # [tiles] i64
.param hidden
    wait_layer_inputs 0, 0, %ready, %ready
    shl r20, %hidden, 1          # r20 = rb
    ld r9, [%info+8]             # r9 = tiles
    mov r1, %tb
tile:
    bge r1, r9, end
    shl r2, r1, 5
    add r2, r2, %tiles
    ld.v8 r12, [r2]              # r12 first row, r13 rows
    mov r3, 0
row:
    bge r3, r13, pulled
    add r4, r12, r3              # r4 = position
    shl r5, r4, 3
    add r5, r5, %home
    ld r5, [r5]
    shr r6, r5, 32               # r6 = home GPU
    and r7, r5, 0xffffffff
    mul r7, r7, r20
    add r7, r7, %dsend           # r7 = the pair's dO row there
    mul r8, r4, r20
    add r8, r8, %dye
    get r6, r8, r7, r20
    add r3, r3, 1
    bra row
pulled:
    fence                        # the tile's rows are in
    shl r2, r1, 3
    add r2, r2, %tilecnt
    red.add %gpu, [r2], r13
    add r1, r1, %ntb
    bra tile
end:
    exit

# overlap_bwd_home: once grouped_dgrad is done (ov_bdgrad), TB b puts the dX rows of tiles b,
# b + ntb, ... to their home GPUs' dret rows (slot t * k + j), fences, and the GPU's last TB sets
# done[me] on every GPU (moe_dispatch_bwd there waits for all).
.kernel overlap_bwd_home
.param tiles
.param info
.param home
.param dxe                   # [rows][H] bf16: dX at the forward's row positions
.param dret                  # [T * k][H] bf16 on every GPU: dX rows in slot order
.param gate                  # 1 once the dgrad is done
.param jobs                  # [1] i64: TBs finished
.param done
.param hidden
    wait.ge [%gate], 1
    shl r20, %hidden, 1
    ld r9, [%info+8]
    mov r1, %tb
tile:
    bge r1, r9, sent
    shl r2, r1, 5
    add r2, r2, %tiles
    ld.v8 r12, [r2]              # r12 first row, r13 rows
    mov r3, 0
row:
    bge r3, r13, next_tile
    add r4, r12, r3
    shl r5, r4, 3
    add r5, r5, %home
    ld r5, [r5]
    shr r6, r5, 32
    and r7, r5, 0xffffffff
    mul r7, r7, r20
    add r7, r7, %dret
    mul r8, r4, r20
    add r8, r8, %dxe
    put r6, r7, r8, r20
    add r3, r3, 1
    bra row
next_tile:
    add r1, r1, %ntb
    bra tile
sent:
    fence                        # this TB's rows are home
    atom.add r5, %gpu, [%jobs], 1
    sub r6, %ntb, 1
    bne r5, r6, leave
    tell_every_gpu %done, r6, r7
leave:
    exit
