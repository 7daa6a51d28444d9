# CAIS merge unit microbenchmark (moehub_arch/components/cais_merge.py): every GPU reduces its
# `data` lines into the home GPU's `acc` with red.cais (the switch merges the group's contributions
# into one partial sum per line and writes it home once) and loads the home's `data` lines into its
# own `got` with ld.cais (the switch reads home memory once per line and fans the reply out).
# Thread block b handles lines [b * bytes, (b + 1) * bytes) of the buffers. With sync >= 0 (an i64
# flag per thread block in a registered group) thread block b of every GPU is one group of matching
# thread blocks: it syncs in the switch's group sync table (sync.cais) before its requests.
.kernel cais_merge
.param data          # bf16 elements this GPU contributes (and, on the home, the lines loaded)
.param acc           # the home's reduction target (zero at start)
.param got           # where this GPU's loads of the home's data land
.param home          # the home GPU
.param bytes         # bytes per thread block
.param sync          # -1: no coordination; else [grid] i64 flags, zero at start (workload.cais)
    blt %sync, 0, requests
    shl r5, %tb, 3
    add r5, r5, %sync
    sync.cais r5, 1                  # the pre-access sync of thread block b's group ...
    wait.ge [r5], 1                  # ... released once every GPU's thread block b arrived
requests:
    mul r1, %tb, %bytes
    add r2, %data, r1
    add r3, %acc, r1
    add r4, %got, r1
    red.cais.add.bf16 %home, r3, r2, %bytes
    ld.cais %home, r4, r2, %bytes
    fence
    exit
