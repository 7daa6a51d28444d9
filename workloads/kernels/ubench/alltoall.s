# All-to-all: every GPU sends `bytes_per_peer` to every GPU (itself included, as NCCL's alltoall
# does: the self chunk is a local copy). Thread block b serves peer (gpu + 1 + b) % ngpu and splits
# the chunk into `chunk`-byte puts. Grid = ngpu thread blocks per GPU (one per destination).
# Layout: send buffer [peer][bytes_per_peer]; receive buffer [source][bytes_per_peer].
.kernel alltoall
.param send
.param recv
.param bytes_per_peer
.param chunk
    add r1, %gpu, 1
    add r1, r1, %tb
    rem r1, r1, %ngpu            # r1 = destination GPU
    mul r2, r1, %bytes_per_peer
    add r2, r2, %send            # r2 = source address in my send buffer
    mul r3, %gpu, %bytes_per_peer
    add r3, r3, %recv            # r3 = destination address in the peer's receive buffer
    mov r4, 0                    # bytes sent
loop:
    put r1, r3, r2, %chunk
    add r2, r2, %chunk
    add r3, r3, %chunk
    add r4, r4, %chunk
    blt r4, %bytes_per_peer, loop
    fence
    exit
