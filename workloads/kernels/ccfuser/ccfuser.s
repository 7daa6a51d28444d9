# MoE layer, scheme `ccfuser`: CCFuser (Wang et al., PPoPP'25, "Harnessing Inter-GPU Shared Memory
# for Seamless MoE Communication-Computation Fusion"): the expert GPU reads its tokens' rows
# straight out of the source GPUs' memory over NVLink (GPU-initiated loads through the shared
# address space: no send buffer, no sender kernel, no all-to-all), tile by tile into the GEMM's
# operand rows, and the persistent GEMM blocks store each finished tile's output rows straight
# into the home GPU's yhome. Launch plan and layouts: moehub_arch/workloads/schemes/ccfuser.py; the
# GEMM blocks are ../overlap/overlap.s's overlap_expert (per-tile readiness counters, send-home on
# tile completion), the count exchange megatron's (../megatron/megatron.s).

# ccf_pull: TB b takes GEMM row tiles b, b + ntb, ... of the tile table (the table's expert-major
# order, the order the GEMM blocks take them) and, for each row of the tile, reads the row out of
# its source GPU's x (get: an NVLink read of the remote address, landing in the tile's row of
# recv_x); after a fence (every read of the tile has landed) it adds the tile's rows to its
# counter, which the GEMM block of the tile waits for. list [rows] (host-written after the count
# exchange): source GPU << 32 | token. Rows pulled are counted in acct word 1 (received).
.kernel ccf_pull
.param tiles                 # [tiles][4]: first row, rows, local expert, first tile of the expert
.param info                  # word 1: tiles
.param list
.param x
.param recv_x
.param tilecnt
.param acct
.param hidden
    shl r1, %hidden, 1           # r1 = row bytes
    ld r2, [%info+8]             # r2 = tiles
    mov r3, %tb                  # r3 = tile
    mov r25, 0                   # r25 = rows pulled
tile:
    bge r3, r2, end
    shl r4, r3, 5
    add r4, r4, %tiles
    ld.v8 r12, [r4]              # r12 first row, r13 rows
    mov r5, 0                    # r5 = row in tile
row:
    bge r5, r13, pulled
    add r6, r12, r5              # r6 = row position
    shl r7, r6, 3
    add r7, r7, %list
    ld r8, [r7]
    shr r9, r8, 32               # r9 = source GPU
    and r10, r8, 0xffffffff      # r10 = token
    mul r10, r10, r1
    add r10, r10, %x             # r10 = its row there
    mul r11, r6, r1
    add r11, r11, %recv_x        # r11 = the row's place in the tile
    get r9, r11, r10, r1
    add r5, r5, 1
    bra row
pulled:
    fence                        # the tile's rows have landed
    shl r7, r3, 3
    add r7, r7, %tilecnt
    red.add %gpu, [r7], r13
    add r25, r25, r13
    add r3, r3, %ntb
    bra tile
end:
    red.add %gpu, [%acct+8], r25 # acct 1: pairs received
    exit
