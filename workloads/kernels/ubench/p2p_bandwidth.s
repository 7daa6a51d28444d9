# One GPU streams remote writes (puts) to one peer. Each thread block writes its own contiguous
# share of the destination buffer in `chunk`-byte puts, keeping many puts in flight, then fences.
.kernel stream_puts
.param peer
.param dst
.param src
.param chunk             # bytes per put
.param chunks_per_tb
    mul r1, %tb, %chunks_per_tb
    mul r1, r1, %chunk           # r1 = byte offset of this TB's share
    mov r2, 0
loop:
    add r3, %dst, r1
    add r4, %src, r1
    put %peer, r3, r4, %chunk
    add r1, r1, %chunk
    add r2, r2, 1
    blt r2, %chunks_per_tb, loop
    fence
    exit
