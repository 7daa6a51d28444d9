# Flag ping-pong between two GPUs: GPU 0 raises round r on GPU 1's flag, GPU 1 waits for it and
# answers on GPU 0's flag. One-way latency = elapsed / (2 * iters). Only GPU 0's timestamps count.
.kernel pingpong
.param peer          # the other GPU
.param flag          # address of the flag word (same address on both GPUs: symmetric buffers)
.param iters         # round trips
.param times         # two 8-byte words: start and end tick
    mov r1, 1                    # round number
    st [%times], %tick
    beq %gpu, 0, ping
pong:
    wait.ge [%flag], r1          # sleep until the peer's store of round r1 lands
    flag.set %peer, [%flag], r1
    add r1, r1, 1
    ble r1, %iters, pong
    bra done
ping:
    flag.set %peer, [%flag], r1
    wait.ge [%flag], r1
    add r1, r1, 1
    ble r1, %iters, ping
done:
    st [%times+8], %tick
    exit                         # exit waits for the outstanding store completions
