# Tensor-core peak: every thread block repeats a 64x64x64 BF16 mma on shared-memory tiles
# (A 8 KB, B 8 KB, C 16 KB fp32). FLOPs per mma = 2 * 64^3.
.kernel mma_loop
.param iters
.smem 32768
    add r1, %smem, 16384         # A
    add r2, %smem, 24576         # B
    mov r3, 0
loop:
    mma.bf16 %smem, r1, r2, 64, 64, 64
    add r3, r3, 1
    blt r3, %iters, loop
    exit
