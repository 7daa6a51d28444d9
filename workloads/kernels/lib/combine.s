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
#   wait_layer_inputs shared, shared_tbs, acct, done, i, addr
#       waits until the `shared_tbs` shared-expert thread blocks have counted themselves in acct
#       word 5 (skipped when `shared` is 0) and done[g] == 1 for every GPU g.
#   start_output_row row, t, out, f32_row_bytes, shared, ys, one, tokens, bf16_row_bytes, hidden, s, addr
#       row = &out[t]; out[t] = sum over shared experts s ascending of ys[s][t] (fp32, from zero;
#       `one` points at an fp32 1.0). Writes row, s, addr.
#   tell_every_gpu done, i, addr
#       done[%gpu] = 1 on every GPU (flag.set, ascending GPU). Writes i, addr.

.macro wait_layer_inputs shared, shared_tbs, acct, done, i, addr
    beq \shared, 0, shared_ready_\@
    wait.ge [\acct+40], \shared_tbs  # the shared experts' outputs are written
shared_ready_\@:
    mov \i, 0
wait_all_\@:
    shl \addr, \i, 3
    add \addr, \addr, \done
    wait.eq [\addr], 1
    add \i, \i, 1
    blt \i, %ngpu, wait_all_\@
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

.macro tell_every_gpu done, i, addr
    shl \addr, %gpu, 3
    add \addr, \addr, \done      # &done[gpu] (the same address on every GPU)
    mov \i, 0
tell_\@:
    flag.set \i, [\addr], 1
    add \i, \i, 1
    blt \i, %ngpu, tell_\@
.endm
