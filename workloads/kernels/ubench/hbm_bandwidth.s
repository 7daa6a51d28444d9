# Device-memory copy bandwidth: every thread block copies its share of `src` to `dst` in
# `chunk`-byte bulk copies. Bytes moved = 2 x bytes copied (read + write).
.kernel hbm_copy
.param dst
.param src
.param chunk
.param chunks_per_tb
    mul r1, %tb, %chunks_per_tb
    mul r1, r1, %chunk
    mov r2, 0
loop:
    add r3, %dst, r1
    add r4, %src, r1
    copy r3, r4, %chunk
    add r1, r1, %chunk
    add r2, r2, 1
    blt r2, %chunks_per_tb, loop
    exit
