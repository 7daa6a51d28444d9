# Kernel library: the end of an MoE layer, shared by every scheme's combine kernels - waiting for
# the layer's inputs to the final sum, starting a token's output row with the shared experts, and
# telling every GPU that this GPU's expert outputs are home.
#
# Layouts (../common/moe_common.s): ys [S][T][H] bf16 shared-expert outputs; out [T][H] f32;
# done [ngpu] i64, the same address on every GPU (done[g] = 1: GPU g's routed outputs are home);
# acct word 5 (byte 40) counts the shared-expert thread blocks that have finished.
#
# Interfaces. Arguments are operands (registers, %params, immediates); `i` and `addr` name scratch
# registers the macro overwrites; nothing else is written but what the description says.
#
#   wait_layer_inputs shared, shared_tbs, acct, done
#       waits until the `shared_tbs` shared-expert thread blocks have counted themselves in acct
#       word 5 (skipped when `shared` is 0) and done[g] == 1 for every GPU g (one warp-wide check
#       of the ngpu flags: wait.all.eq).
#   start_output_row row, t, out, f32_row_bytes, shared, ys, one, tokens, bf16_row_bytes, hidden, s, addr
#       row = &out[t]; out[t] = sum over shared experts s ascending of ys[s][t] (fp32, from zero;
#       `one` points at an fp32 1.0). Writes row, s, addr.
#   tell_every_gpu done, i, addr
#       done[%gpu] = 1 on every GPU (flag.set, ascending GPU). Writes i, addr.
#   last_tb_tells jobs, done
#       counts this TB in the word `jobs`; the kernel's last TB to get there sets done[%gpu] = 1
#       on every GPU (tell_every_gpu). Writes r5-r7.
#   tiles_rows_home tile_entry, row_out
#       TB b takes tiles b, b + ntb, ... of r9 tiles (r1 = the tile); the macro `tile_entry` sets
#       r12 = the tile's first row position and r13 = its rows, then `row_out` sends row r4 =
#       r12 + r3 home (r3: the row in the tile); then fence and last_tb_tells %jobs, %done: the
#       backward's gradient combines (overlap_bwd_home, moehub_bwd_home). Writes r1, r3-r7.
#   combine_records_open i
#       for combine stream i = c * P + s (the tokens this rank received from s on channel c in
#       dispatch; %tb where each thread block or warp group is one such stream): r5 = c, r6 = s,
#       r9 = how many (notify's count %ntf[s][c]), r12 = their records (%rec, [C*P][Tc][12]
#       words; reads r2 = Tc). Writes r5..r9, r12.
#   rank_partial_row rows, n, pairs
#       DeepEP's per-rank combine of one received token (deepep_combine, deepep_combine_partials,
#       deepep_combine_internode): record r24 of the records at r12 (t << 32 | position + 1 per
#       slot, position 0 for a slot whose expert is elsewhere, then the weights); the fp32 row of
#       n elements at r10 (shared memory) = the sum over the local slots j ascending of
#       w_j * rows[position] (`rows` the address of element 0 of the bf16 rows' n-element window:
#       %recv_y and %hidden for whole rows, a slice of them further on), r27 = t, pairs += the
#       slots summed. Reads r1 = bf16 row bytes, %topk. Writes r10's row, r16..r23, r26..r30
#       and `pairs`.
#   rank_received_row (no arguments: the registers below)
#       DeepEP's benchmark combine input (tests/test_intranode.py passes the rows each rank
#       received, unweighted): of record r24 of the records at r12, r29 = &%recv_y[position of
#       the token's lowest local slot], r27 = t, r25 += the local slots. Reads r1 = bf16 row
#       bytes, %recv_y, %topk. Writes r16..r23, r25, r27..r30.
#   dot_row_bf16 dot, dyf, y, prod, n
#       the fp32 at dot = sum over h ascending of dyf[h] x fp32(y[h]) (dyf an fp32 row, y a bf16
#       row of n elements): the router weight's gradient <dy, y_j> in the MoE backward. Writes
#       the dot and the fp32 row prod.
#   scale_row_bf16 out, acc, row, w, n
#       the bf16 row out = bf16(fp32(w x row)) (row bf16, w the address of an fp32): a
#       router-weighted row (DySHARP's gate weighting, the backward's dO = bf16(w dy)). Writes out
#       and the fp32 row acc.

.macro wait_layer_inputs shared, shared_tbs, acct, done
    beq \shared, 0, shared_ready_\@
    wait.ge [\acct+40], \shared_tbs  # the shared experts' outputs are written
shared_ready_\@:
    wait.all.eq [\done], 1, %ngpu    # every GPU's outputs are home (a lane per flag)
.endm

.macro start_output_row row, t, out, f32_row_bytes, shared, ys, one, tokens, bf16_row_bytes, hidden, s, addr
    mul \row, \t, \f32_row_bytes
    add \row, \row, \out
    vzero.f32 \row, \hidden
    mov \s, 0
shared_rows_\@:
    bge \s, \shared, summed_\@
    mul \addr, \s, \tokens
    add \addr, \addr, \t
    mul \addr, \addr, \bf16_row_bytes
    add \addr, \addr, \ys
    vaxpy.f32.bf16 \row, \addr, \one, \hidden
    add \s, \s, 1
    bra shared_rows_\@
summed_\@:
.endm

.macro last_tb_tells jobs, done
    atom.add r5, %gpu, [\jobs], 1
    sub r6, %ntb, 1
    bne r5, r6, told_\@
    tell_every_gpu \done, r6, r7
told_\@:
.endm

.macro tiles_rows_home tile_entry, row_out
    mov r1, %tb
tile_\@:
    bge r1, r9, sent_\@
    \tile_entry
    mov r3, 0
row_\@:
    bge r3, r13, next_tile_\@
    add r4, r12, r3
    \row_out
    add r3, r3, 1
    bra row_\@
next_tile_\@:
    add r1, r1, %ntb
    bra tile_\@
sent_\@:
    fence                        # this TB's rows are home
    last_tb_tells %jobs, %done
.endm

.macro tell_every_gpu done, i, addr
    shl \addr, %gpu, 3
    add \addr, \addr, \done      # &done[gpu] (the same address on every GPU)
    mov \i, 0
tell_\@:
    flag.set \i, [\addr], 1
    add \i, \i, 1
    blt \i, %ngpu, tell_\@
.endm

.macro rank_partial_row rows, n, pairs
    mul r26, r24, 96
    add r26, r26, r12            # r26 = record
    ld.v8 r16, [r26]             # slot j's word in r16 after j shifts
    shr r27, r16, 32             # r27 = home token t
    vzero.f32 r10, \n
    mov r28, 0                   # r28 = slot j
choice_\@:
    and r29, r16, 0xffffffff     # position + 1 (0: slot j's expert is on another rank)
    beq r29, 0, choice_next_\@
    sub r29, r29, 1
    mul r29, r29, r1
    add r29, r29, \rows
    shl r30, r28, 2
    add r30, r30, r26
    add r30, r30, 64             # &w_j in the record
    vaxpy.f32.bf16 r10, r29, r30, \n
    add \pairs, \pairs, 1
choice_next_\@:
    next_slot_word r28, %topk, choice_\@
.endm

.macro rank_received_row
    mul r26, r24, 96
    add r26, r26, r12            # r26 = record
    ld.v8 r16, [r26]             # slot j's word in r16 after j shifts
    shr r27, r16, 32             # r27 = home token t
    mov r29, 0                   # r29 = the lowest local slot's position + 1 (0: none yet)
    mov r28, 0                   # r28 = slot j
pick_\@:
    and r30, r16, 0xffffffff     # position + 1 (0: slot j's expert is on another rank)
    beq r30, 0, pick_next_\@
    add r25, r25, 1
    bne r29, 0, pick_next_\@
    mov r29, r30
pick_next_\@:
    next_slot_word r28, %topk, pick_\@
    sub r29, r29, 1
    mul r29, r29, r1
    add r29, r29, %recv_y        # r29 = the row as this rank received it
.endm

.macro combine_records_open i
    div r5, \i, %ngpu            # r5 = channel
    rem r6, \i, %ngpu            # r6 = source s
    add r7, %channels, %local_experts
    mul r8, r6, r7
    add r8, r8, r5
    shl r8, r8, 3
    add r8, r8, %ntf
    ld r9, [r8]                  # r9 = tokens received from s on channel c
    mul r12, \i, r2
    mul r12, r12, 96
    add r12, r12, %rec           # r12 = the records
.endm

.macro dot_row_bf16 dot, dyf, y, prod, n
    vcvt.f32.bf16 \prod, \y, \n
    vmul.f32 \prod, \dyf, \prod, \n
    vrow_sum.f32 \dot, \prod, \n, \n
.endm

.macro scale_row_bf16 out, acc, row, w, n
    vzero.f32 \acc, \n
    vaxpy.f32.bf16 \acc, \row, \w, \n
    vcvt.bf16.f32 \out, \acc, \n
.endm
