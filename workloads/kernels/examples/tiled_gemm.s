# Tiled GEMM: C[m, n] (f32) = A[m, k] (bf16) @ B[k, n] (bf16), all row-major in HBM.
# Output tiles of tile x tile elements are dealt round-robin to the thread blocks (tile index
# %tb, %tb + %ntb, ...). For each output tile a TB zeroes an fp32 accumulator in shared memory,
# then for every k-step stages a tile of A and a tile of B into shared memory (copy2d) and
# accumulates them with one tensor-core mma; finally it writes the accumulator back to C.
# m, n and k must be multiples of `tile`; tile <= 32 fits the shared-memory reservation.
.kernel tiled_gemm
.param c
.param a
.param b
.param m
.param n
.param k
.param tile
.smem 16384                      # C tile (4 T^2 B) + A tile (2 T^2 B) + B tile (2 T^2 B), T <= 32
    mul r20, %tile, %tile        # T^2
    shl r21, r20, 2
    add r21, r21, %smem          # r21 = A tile in shared memory (after the 4 T^2-byte C tile)
    shl r22, r20, 1
    add r22, r22, r21            # r22 = B tile in shared memory
    shl r23, %tile, 1            # r23 = 2T: bytes of one bf16 tile row
    shl r24, %tile, 2            # r24 = 4T: bytes of one fp32 tile row
    shl r25, %k, 1               # r25 = A row stride in bytes
    shl r26, %n, 1               # r26 = B row stride in bytes
    shl r27, %n, 2               # r27 = C row stride in bytes
    div r28, %n, %tile           # r28 = tiles per row of C
    div r29, %m, %tile
    mul r29, r29, r28            # r29 = number of output tiles
    mov r1, %tb                  # r1 = current output tile
next_tile:
    bge r1, r29, done
    div r2, r1, r28
    mul r2, r2, %tile            # r2 = first row of the tile
    rem r3, r1, r28
    mul r3, r3, %tile            # r3 = first column of the tile
    vzero.f32 %smem, r20         # accumulator = 0
    mov r4, 0                    # r4 = k-step start
k_step:
    mul r5, r2, %k               # A tile origin: A + (row * k + kk) * 2
    add r5, r5, r4
    shl r5, r5, 1
    add r5, r5, %a
    copy2d r21, r5, %tile, r23, r23, r25
    mul r6, r4, %n               # B tile origin: B + (kk * n + col) * 2
    add r6, r6, r3
    shl r6, r6, 1
    add r6, r6, %b
    copy2d r22, r6, %tile, r23, r23, r26
    mma.bf16 %smem, r21, r22, %tile, %tile, %tile
    add r4, r4, %tile
    blt r4, %k, k_step
    mul r7, r2, %n               # C tile origin: C + (row * n + col) * 4
    add r7, r7, r3
    shl r7, r7, 2
    add r7, r7, %c
    copy2d r7, %smem, %tile, r24, r27, r24
    add r1, r1, %ntb
    bra next_tile
done:
    exit
