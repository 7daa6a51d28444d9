# Kernels of the all-to-all dispatchers (schemes megatron and tutel): the token rows are permuted
# into a contiguous send buffer in expert order, moved by an NCCL-style all-to-all of contiguous
# byte ranges, computed by the grouped GEMM of moe_common.s, moved back the same way and gathered
# into the common yhome layout for moe_combine. Launch plans: moehub_arch/workloads/schemes/
# megatron.py and tutel.py; layouts are described there.
#
# Tables are filled by the host (the plan) in control memory as 32-byte entries
# (word 0: source offset, word 1: destination offset, word 2: bytes, word 3: unused), offsets
# relative to the kernel's `src` and `dst` buffers; the host knows them once the per-expert
# counts are on the host (megatron: after its device-to-host synchronisation) or from the static
# capacity (tutel).

.include "lib/slot_words.s"
.include "lib/combine.s"
.include "lib/put_ranges.s"

# permute_rows: per token t (TB b takes t = b, b + ntb, ...) and slot j, with e = topk_idx[t][j]:
# pos = atom.add cnt[e]; if pos < cap the row x[t] is copied to row base[e] + pos of `out` and
# map[t * k + j] = that row; otherwise the pair is dropped (map = -1; acct word 6 counts it).
# Kept pairs are counted in acct word 0 (sent). Which pairs overflow an expert is the order its
# atomic cursor serves them (Tutel decides by slot priority and token order; the number dropped
# per expert, max(0, rows - cap), is the same).
.kernel permute_rows
.param x
.param topk_idx
.param cnt                   # [E] i64, zero: rows taken per expert
.param base                  # [E] i64: first row of expert e in out
.param out
.param map                   # [T * k] i64
.param acct
.param tokens
.param topk
.param hidden
.param cap                   # rows an expert may take (tutel: its capacity; megatron: all)
    shl r1, %hidden, 1           # r1 = row bytes
    shl r2, %topk, 3             # r2 = bytes of a token's ids
    mov r3, %tb                  # r3 = token
    mov r4, 0                    # r4 = pairs kept
    mov r5, 0                    # r5 = pairs dropped
    mov r15, -1
token:
    bge r3, %tokens, end
    mul r6, r3, r2
    add r6, r6, %topk_idx
    ld.v8 r16, [r6]              # r16.. = the token's expert ids (k <= 8)
    mul r7, r3, r1
    add r7, r7, %x               # r7 = x[t]
    mul r8, r3, r2
    add r8, r8, %map             # r8 = &map[t * k + j]
    mov r9, 0                    # r9 = slot j (its id is in r16: the ids shift down each slot)
slot:
    shl r10, r16, 3
    add r11, r10, %cnt
    atom.add r12, %gpu, [r11], 1
    bge r12, %cap, drop
    add r11, r10, %base
    ld r13, [r11]
    add r13, r13, r12            # r13 = row in out
    st [r8], r13
    mul r14, r13, r1
    add r14, r14, %out
    copy r14, r7, r1
    add r4, r4, 1
    bra next
drop:
    st [r8], r15
    add r5, r5, 1
next:
    add r8, r8, 8
    next_slot_word r9, %topk, slot
    add r3, r3, %ntb
    bra token
end:
    red.add %gpu, [%acct], r4        # acct word 0: rows sent
    red.add %gpu, [%acct+48], r5     # acct word 6: pairs dropped (capacity overflow)
    exit

# a2a_put: an all-to-all of contiguous byte ranges (NCCL's alltoall / alltoallv: a send and a
# receive per peer, the own range a local copy). Grid = ngpu: TB b serves peer
# r = (gpu + 1 + b) % ngpu, walking its `entries` table entries (table + (r * entries + i) * 32)
# and cutting each range into puts of at most `chunk` bytes. After a fence (its data landed) it
# signals the peer: atom.add 1 on the word `arrive` (if not 0) and done[gpu] = 1 at `done` (if
# not 0). With `wait_addr` not 0 it first waits until that local word >= wait_value.
.kernel a2a_put
.param table
.param entries
.param src
.param dst
.param chunk
.param wait_addr
.param wait_value
.param arrive
.param done
    beq %wait_addr, 0, go
    wait.ge [%wait_addr], %wait_value
go:
    add r1, %gpu, 1
    add r1, r1, %tb
    rem r1, r1, %ngpu            # r1 = peer
    put_ranges r1, r1
    tell_done r1
    exit

# copy_chunks: local copies from a table of `count` entries (TB b takes entries b, b + ntb, ...):
# megatron's sort of the received chunks from source-major to expert-major and back. With
# `wait_addr` not 0 it first waits until that local word >= wait_value (every peer's rows are in).
.kernel copy_chunks
.param table
.param count
.param src
.param dst
.param wait_addr
.param wait_value
    beq %wait_addr, 0, go
    wait.ge [%wait_addr], %wait_value
go:
    mov r1, %tb
loop:
    bge r1, %count, end
    shl r2, r1, 5
    add r2, r2, %table
    ld.v8 r16, [r2]
    ble r18, 0, skip
    add r4, r16, %src
    add r5, r17, %dst
    copy r5, r4, r18
skip:
    add r1, r1, %ntb
    bra loop
end:
    exit

# gather_rows: the unpermute. Waits until done[g] = 1 for every GPU g (their rows are back), then
# per pair i = t * k + j (TB b takes i = b, b + ntb, ...): yhome[i] = src row map[i], or a zero
# row where map[i] < 0 (a dropped pair contributes nothing to moe_combine's weighted sum).
.kernel gather_rows
.param map
.param src
.param yhome
.param done
.param pairs
.param hidden
    # every GPU's done flag (no shared experts to wait for here: moe_combine waits for them)
    wait_layer_inputs 0, 0, %done, %done
    shl r10, %hidden, 1          # r10 = row bytes
    mov r1, %tb
pair:
    bge r1, %pairs, end
    shl r2, r1, 3
    add r2, r2, %map
    ld r3, [r2]
    mul r4, r1, r10
    add r4, r4, %yhome
    blt r3, 0, zero
    mul r5, r3, r10
    add r5, r5, %src
    copy r4, r5, r10
    bra next
zero:
    vzero.bf16 r4, %hidden
next:
    add r1, r1, %ntb
    bra pair
end:
    exit

# flag_wait / flag_set: stream-ordered hand-offs between streams (a CUDA event wait / record):
# flag_wait ends once the local word at addr >= value; flag_set stores value at addr.
.kernel flag_wait
.param addr
.param value
    wait.ge [%addr], %value
    exit

.kernel flag_set
.param addr
.param value
    st [%addr], %value
    exit

# a2a_put_group: a2a_put among a group of `span` GPUs whose ids are `stride` apart (Tutel's 2-D
# hierarchical all-to-all, schemes/tutel.py: stride 1 and span = GPUs per node for the intra-node
# step, stride = GPUs per node and span = nodes for the inter-node step among GPUs of one local
# rank). My index in the group is i = (gpu / stride) % span; grid = span: TB b serves the member
# of index j = (i + 1 + b) % span (the last TB itself, a local copy), walking its `entries` table
# entries at table + (j * entries + e) * 32. After the fence it adds 1 to the peer's `arrive` word
# (if not 0) and, with `done` not 0, sets done[h] = 1 on the peer for the `done_span` GPUs h of my
# aligned block of that many ids (the GPUs whose rows this step brought in).
.kernel a2a_put_group
.param table
.param entries
.param src
.param dst
.param chunk
.param span
.param stride
.param arrive
.param done
.param done_span
    div r9, %gpu, %stride
    rem r9, r9, %span            # r9 = my index in the group
    mul r10, r9, %stride
    sub r10, %gpu, r10           # r10 = the group's first GPU
    add r11, r9, 1
    add r11, r11, %tb
    rem r11, r11, %span          # r11 = the peer's index in the group
    mul r1, r11, %stride
    add r1, r1, r10              # r1 = peer
    put_ranges r1, r11
    beq %done, 0, end
    rem r8, %gpu, %done_span
    sub r8, %gpu, r8             # r8 = first GPU of my done block
    add r9, r8, %done_span
tell:
    shl r10, r8, 3
    add r10, r10, %done
    flag.set r1, [r10], 1
    add r8, r8, 1
    blt r8, r9, tell
end:
    exit
