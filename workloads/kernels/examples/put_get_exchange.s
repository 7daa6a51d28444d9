# Put/get exchange between all GPUs, with flag signalling.
# Thread block b of GPU g serves peer p = (g + 1 + b) % ngpu (grid = ngpu - 1):
#   1. put: my `src` (bytes) -> slot g of p's `recv`      (recv is [ngpu][bytes])
#   2. fence (the put has landed), then raise flag g on p  (flags is [ngpu] words)
#   3. wait for p's flag on me: p's data has landed in slot p of my `recv`
#   4. get: slot g of p's `recv` (what I put there) -> slot p of my `pulled`
# Afterwards recv[g][p] = src[p], pulled[g][p] = src[g] and flags[g][p] = 1 for every p != g.
.kernel exchange
.param src
.param recv
.param pulled
.param flags
.param bytes
    add r1, %gpu, 1
    add r1, r1, %tb
    rem r1, r1, %ngpu            # r1 = peer
    mul r2, %gpu, %bytes
    add r2, r2, %recv            # r2 = my slot in the peer's recv
    put r1, r2, %src, %bytes
    fence
    shl r3, %gpu, 3
    add r3, r3, %flags           # r3 = my flag word on the peer
    flag.set r1, [r3], 1
    shl r4, r1, 3
    add r4, r4, %flags           # r4 = the peer's flag word here
    wait.ge [r4], 1
    mul r5, r1, %bytes
    add r5, r5, %pulled          # r5 = slot `peer` of my pulled buffer
    get r1, r5, r2, %bytes
    fence
    exit
