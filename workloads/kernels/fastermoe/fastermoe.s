# MoE layer, scheme `fastermoe`: FasterMoE's group-wise exchange (PPoPP'22, "smart scheduling"; the
# public fastmoe code, cuda/fastermoe/smart_schedule.h). The GPUs form n = P / G groups of G
# consecutive ids; in step s a GPU sends to every member of group (my group + s) % n and receives
# from every member of group (my group - s) % n, so each step is one NCCL group of G sends per GPU
# and the experts can compute a step's rows while the next step's rows move. The expert outputs go
# back the same way, step by step (to group (my group - s) % n). Launch plan and layouts:
# moehub_arch/workloads/schemes/fastermoe.py; the count exchange, permutation, grouped GEMM and
# unpermute kernels are megatron's and the common ones (../megatron/megatron.s,
# ../common/moe_alltoall.s, ../common/moe_common.s).

.include "lib/put_ranges.s"

# fm_put_step: one step of the group-wise exchange. Grid = G (the group size): TB j serves the
# peer ((gpu / G + shift) % (ngpu / G)) * G + j (shift = s for step s of the send, n - s for step
# s of the return: the group the rows came from), walking the peer's row of the host-written table
# (entries per peer, as a2a_put's) and cutting each range into puts of at most `chunk` bytes. After
# its fence (the data landed) it adds 1 to the peer's `arrive` word (the step's arrival counter,
# if not 0: the receiver's compute waits for G of them) and sets done[gpu] = 1 on the peer (if
# `done` is not 0: the return's last word to the home GPU).
.kernel fm_put_step
.param table
.param entries
.param src
.param dst
.param chunk
.param group                 # G, GPUs per group
.param shift                 # groups ahead of mine this step (mod ngpu / G)
.param arrive
.param done
    div r9, %gpu, %group         # r9 = my group
    add r9, r9, %shift
    div r10, %ngpu, %group       # r10 = groups
    rem r9, r9, r10              # r9 = the peer group
    mul r1, r9, %group
    add r1, r1, %tb              # r1 = peer
    put_ranges r1, r1
    tell_done r1
    exit
