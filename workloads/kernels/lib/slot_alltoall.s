# Kernel library: the one-sided all-to-all on fixed receive slots (DeepEP's low-latency layout)
# that schemes deepep_ll (../deepep/low_latency.s) and counted (../counted/counted.s) share. Every
# (local expert le, source rank s) pair owns T receive slots on the expert's GPU; a sender takes
# the next slot of a row's expert itself and writes the row there; the receiver learns how many
# rows came from the per-(expert, source) count the sender sends afterwards, packs the slots
# expert-major for the grouped GEMM, and combine returns every expert output row into the slot its
# token took at home. The schemes differ only in how a row's completion is known (a fence before
# the count, or byte counters at the destination): those lines stay in their kernel files.
#
# Layouts (the scheme's buffers, named by the kernels' parameters): %next [E] sender-side slot
# counters; %slot_map [T*k] the slot token t's j-th row took; %count [El][P] rows + 1 from source
# s to local expert le (0: not yet known); %rows [El] packed rows per local expert; %range [El][P]
# where (le, s)'s rows were packed (first << 32 | rows); %recv [El][P][T] slots; %xe [El][P*T]
# packed rows; %comb [E][T] at home: expert e's output for the slot i of the rows sent to it.
#
# Interfaces (fixed registers, as the kernels use them):
#   slot_dispatch_begin receiver
#       the dispatch kernel's start: r1 = row bytes (%row_bytes), r2 = bytes of a token's ids; a
#       TB >= %send_tbs branches to `receiver`, a sender starts at token r5 = %tb with r10 = 0
#       rows sent. Writes r1, r2, r5, r10.
#   slot_token_head (no arguments: the registers below)
#       sender, token r5: r16.. = its expert ids (%topk_idx; r2 = bytes of a token's ids),
#       r7 = t*k, r8 = &%x[t] (r1 = row bytes), r9 = 0 (slot j). Writes r6..r9, r16..r23.
#   take_slot (no arguments: the registers below)
#       the row of slot j (expert r16): r11 = its GPU, r12 = its local expert there, r14 = the
#       slot it takes (atom.add on %next[e]), recorded in %slot_map[t*k + j]. Writes r11..r14.
#   send_expert_counts done
#       sender TB %tb after every sender's rows: for experts %tb, %tb + %send_tbs, ... the count
#       of rows this GPU sent to it, + 1, into %count[le][me] on its GPU (flag.set); then to
#       `done`. Writes r3, r5..r7, r11..r13.
#   receiver_count (no arguments: the registers below)
#       receiver TB %send_tbs + le*P + s: r3 = le*P + s, r4 = 8 * r3, waits for (le, s)'s count;
#       r6 = rows. Writes r3..r6.
#   receiver_pack (no arguments: the registers below)
#       then takes r6 packed positions of le (atom.add on %rows[le]), records them in %range,
#       copies the slots there (one warp copy), counts them in %acct word 1 and exits.
#   slot_combine_rows (no arguments: the registers below)
#       combine TB le*P + s: r1 = rb, r3 = rows, r6 = s, r7 = the first of (le, s)'s expert
#       output rows (%ye), r8 = %comb[me*El + le][0] on s, r9 = 0. Writes r1..r9.
#   slot_reduce_tokens (no arguments: the registers below)
#       the home reduction once every row is back: per token (round-robin over TBs) out[t] =
#       sum_s ys[s][t] + sum_j topk_w[t][j] * %comb[e_j][slot of (t, j)], fp32 in that order (the
#       reference's combine="per_slot"); counts the rows in %acct word 3 and exits. Reads r10 =
#       bf16 row bytes.

.macro slot_dispatch_begin receiver
    mov r1, %row_bytes           # r1 = row bytes
    shl r2, %topk, 3             # r2 = bytes of a token's ids
    bge %tb, %send_tbs, \receiver
    mov r5, %tb                  # r5 = token
    mov r10, 0                   # r10 = rows sent
.endm

.macro slot_token_head
    mul r6, r5, r2
    add r6, r6, %topk_idx
    ld.v8 r16, [r6]              # the token's expert ids
    mul r7, r5, %topk            # r7 = t*k
    mul r8, r5, r1
    add r8, r8, %x               # r8 = the row
    mov r9, 0                    # r9 = slot j
.endm

.macro take_slot
    div r11, r16, %local_experts # r11 = destination GPU
    mul r12, r11, %local_experts
    sub r12, r16, r12            # r12 = local expert there
    shl r13, r16, 3
    add r13, r13, %next
    atom.add r14, %gpu, [r13], 1 # r14 = the row's slot at the expert
    add r13, r7, r9
    shl r13, r13, 3
    add r13, r13, %slot_map
    st [r13], r14                # remembered for the combine
.endm

.macro send_expert_counts done
    mul r3, %ngpu, %local_experts   # r3 = E
    mov r5, %tb                  # r5 = expert
counts_\@:
    bge r5, r3, \done
    shl r6, r5, 3
    add r6, r6, %next
    ld r7, [r6]                  # rows this GPU sent to expert e
    add r7, r7, 1
    div r11, r5, %local_experts
    mul r12, r11, %local_experts
    sub r12, r5, r12
    mul r13, r12, %ngpu
    add r13, r13, %gpu
    shl r13, r13, 3
    add r13, r13, %count
    flag.set r11, [r13], r7      # count + 1
    add r5, r5, %send_tbs
    bra counts_\@
.endm

.macro receiver_count
    sub r3, %tb, %send_tbs       # r3 = le*P + s
    shl r4, r3, 3
    add r5, r4, %count
    wait.gt [r5], 0              # the count arrived
    ld r6, [r5]
    sub r6, r6, 1                # r6 = rows n
.endm

.macro receiver_pack
    div r7, r3, %ngpu            # r7 = le
    shl r8, r7, 3
    add r8, r8, %rows
    atom.add r9, %gpu, [r8], r6  # r9 = first packed position
    shl r10, r9, 32
    or r10, r10, r6
    add r11, r4, %range
    st [r11], r10
    beq r6, 0, received_\@
    mul r11, r7, %ngpu
    mul r11, r11, %tokens
    add r11, r11, r9
    mul r11, r11, r1
    add r11, r11, %xe            # r11 = packed rows
    mul r12, r3, %tokens
    mul r12, r12, r1
    add r12, r12, %recv          # r12 = the slots of (le, s)
    mul r13, r6, r1
    put.sm %gpu, r11, r12, r13   # pack them (warp copy)
    fence
received_\@:
    red.add %gpu, [%acct+8], r6  # acct 1: pairs received
    exit
.endm

.macro slot_combine_rows
    shl r1, %hidden, 1           # r1 = rb
    shl r2, %tb, 3
    add r2, r2, %range
    ld r3, [r2]
    shr r4, r3, 32               # r4 = first packed position
    and r3, r3, 0xffffffff       # r3 = rows
    div r5, %tb, %ngpu           # r5 = le
    rem r6, %tb, %ngpu           # r6 = s
    mul r7, r5, %ngpu
    mul r7, r7, %tokens
    add r7, r7, r4
    mul r7, r7, r1
    add r7, r7, %ye              # r7 = the first output row
    mul r8, %gpu, %local_experts
    add r8, r8, r5               # r8 = e = me*El + le
    mul r8, r8, %tokens
    mul r8, r8, r1
    add r8, r8, %comb            # r8 = %comb[e][0] on s
    mov r9, 0
.endm

.macro slot_reduce_tokens
    shl r11, %hidden, 2          # r11 = f32 row bytes
    shl r12, %topk, 3            # r12 = bytes of a token's ids
    mov r1, %tb                  # r1 = token
    mov r9, 0                    # r9 = rows combined by this TB
token_\@:
    bge r1, %tokens, end_\@
    start_output_row r2, r1, %out, r11, %shared, %ys, %one, %tokens, r10, %hidden, r3, r4
    mul r5, r1, r12
    add r5, r5, %topk_idx
    ld.v8 r16, [r5]              # expert ids (slot j's in r16 after j shifts)
    mul r5, r1, %topk            # r5 = t*k
    mov r3, 0                    # r3 = slot j
choice_\@:
    add r6, r5, r3
    shl r7, r6, 3
    add r7, r7, %slot_map
    ld r7, [r7]                  # the slot this row took at its expert
    mul r8, r16, %tokens
    add r8, r8, r7
    mul r8, r8, r10
    add r8, r8, %comb            # %comb[e][slot]
    shl r7, r6, 2
    add r7, r7, %topk_w
    vaxpy.f32.bf16 r2, r8, r7, %hidden
    next_slot_word r3, %topk, choice_\@
    add r9, r9, %topk
    add r1, r1, %ntb
    bra token_\@
end_\@:
    atom.add r13, %gpu, [%acct+24], r9   # acct 3: rows combined
    exit
.endm
