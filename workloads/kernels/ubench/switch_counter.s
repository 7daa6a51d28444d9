# Switch-counter microbenchmark (configs/ubench/switch_counter.yaml; components/switch_counter.py):
# every thread block of every GPU takes `iters` tickets from one counter in the switch
# (ctr.add rd, counter, 1) and writes each ticket it got into `tickets` on its own GPU, at
# [tb][i] (an i64 each). Over all GPUs the tickets are 0 .. GPUs x grid x iters - 1, each once, in
# whatever order the adds reached the switch.
.kernel switch_counter
.param tickets               # [grid][iters] i64 on each GPU: the old values this GPU's blocks got
.param counter               # the counter's index
.param iters
    mul r1, %tb, %iters
    shl r1, r1, 3
    add r1, r1, %tickets     # r1 = this block's first ticket slot
    mov r2, 0                # r2 = i
next:
    bge r2, %iters, done
    ctr.add r3, %counter, 1
    fence                    # r3 holds the old value once the answer is in
    st [r1], r3
    add r1, r1, 8
    add r2, r2, 1
    bra next
done:
    exit
