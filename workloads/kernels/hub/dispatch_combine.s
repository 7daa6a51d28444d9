# MoE-Hub dispatch -> expert -> combine, exercising RPM, AAU and DAM together.
#
# moe_dispatch (producers): thread block b sends tokens b, b + ntb, ... Token t of GPU g goes to
# topk experts e = (7t + 3k + g) % num_experts, naming only the expert; home = t * topk + k is the
# row's slot in the combine buffer back home; aux tags the row with (g << 20) | home so tests can
# check every completion record. Each producer ends with notify_ready.eos (the hub ends its
# streams once all %ntb producers did).
.kernel moe_dispatch
.param x             # token rows [tokens][row_bytes]
.param tokens
.param topk
.param row_bytes
.param num_experts
    mov r1, %tb                  # r1 = token
token:
    bge r1, %tokens, end
    mul r2, r1, %row_bytes
    add r2, r2, %x               # r2 = the token's row
    mov r3, 0                    # r3 = k
expert:
    mul r4, r1, 7
    mul r5, r3, 3
    add r4, r4, r5
    add r4, r4, %gpu
    rem r4, r4, %num_experts     # r4 = expert
    mul r5, r1, %topk
    add r5, r5, r3               # r5 = home slot
    shl r6, %gpu, 20
    or r6, r6, r5                # r6 = aux tag
    send_to_expert r4, r2, %row_bytes, r5, r6
    add r3, r3, 1
    blt r3, %topk, expert
    add r1, r1, %ntb
    bra token
end:
    notify_ready.eos %ntb
    exit                         # waits until every row sent has landed

# moe_dispatch_rowsp: moe_dispatch with the published row-sparse ISA (MoE-Hub, arXiv 2605.05888).
# The TBs register allocation id e for every expert e (rowsp.malloc, rows of row_bytes; ids tb,
# tb + ntb, ...) and wait until every TB did (sync: one control word). Each row then goes as two
# st.rowsp stores naming (expert e's id, row home, offset): its second half first (from byte
# `half`), then its first half, so the row's first store is not at offset 0 and its slot is shared
# by two stores. The completion record's aux is the allocation id.
.kernel moe_dispatch_rowsp
.param x             # token rows [tokens][row_bytes]
.param tokens
.param topk
.param row_bytes
.param num_experts
.param half          # bytes of the first store: offset of the second half
.param sync
    mov r1, %tb
register:
    bge r1, %num_experts, registered
    rowsp.malloc r1, r1, %row_bytes
    add r1, r1, %ntb
    bra register
registered:
    atom.add r7, %gpu, [%sync], 1
    wait.ge [%sync], %ntb
    sub r8, %row_bytes, %half    # r8 = bytes of the second half
    mov r1, %tb                  # r1 = token
token_sp:
    bge r1, %tokens, end_sp
    mul r2, r1, %row_bytes
    add r2, r2, %x               # r2 = the token's row
    add r9, r2, %half            # r9 = its second half
    mov r3, 0                    # r3 = k
expert_sp:
    mul r4, r1, 7
    mul r5, r3, 3
    add r4, r4, r5
    add r4, r4, %gpu
    rem r4, r4, %num_experts     # r4 = expert (as moe_dispatch)
    mul r5, r1, %topk
    add r5, r5, r3               # r5 = home slot = the row id
    st.rowsp r4, r5, %half, r9, r8
    st.rowsp r4, r5, 0, r2, %half
    add r3, r3, 1
    blt r3, %topk, expert_sp
    add r1, r1, %ntb
    bra token_sp
end_sp:
    notify_ready.eos %ntb
    exit

# moe_dispatch_multi: multi-expert stores (send_to_experts, or st.rowsp.experts with rowsp = 1),
# topk = 2 on a hand-written routing: choice 0 of token t on GPU g is expert e = (7t + g) % 8; an
# even token's choice 1 is e ^ 1, the other expert on e's GPU (experts 2d and 2d + 1 sit on GPU
# d): one store names both and the row crosses the links once; an odd token's choice 1 is
# (e + 2) % 8, on the next GPU: one store per GPU. Home t * 2 + k as moe_dispatch; rowsp = 1
# registers allocation id e for expert e first, as moe_dispatch_rowsp (rows of row_bytes).
.kernel moe_dispatch_multi
.param x             # token rows [tokens][row_bytes]
.param tokens
.param row_bytes
.param num_experts
.param rowsp
.param sync
    beq %rowsp, 0, registered_m
    mov r1, %tb
register_m:
    bge r1, %num_experts, synced_m
    rowsp.malloc r1, r1, %row_bytes
    add r1, r1, %ntb
    bra register_m
synced_m:
    atom.add r7, %gpu, [%sync], 1
    wait.ge [%sync], %ntb
registered_m:
    mov r1, %tb                  # r1 = token
token_m:
    bge r1, %tokens, end_m
    mul r2, r1, %row_bytes
    add r2, r2, %x               # r2 = the token's row
    mul r16, r1, 7
    add r16, r16, %gpu
    rem r16, r16, %num_experts   # r16 = choice 0
    shl r5, r1, 1                # r5 = home of choice 0 (choice k: r5 + k)
    shl r6, %gpu, 20
    or r6, r6, r5                # r6 = aux tag
    and r4, r1, 1
    bne r4, 0, apart_m
    xor r17, r16, 1              # even token: both choices on one GPU, one store
    bne %rowsp, 0, even_sp_m
    send_to_experts r16, 3, r2, %row_bytes, r5, r6
    bra next_m
even_sp_m:
    st.rowsp.experts r16, 3, r5, r2, %row_bytes
    bra next_m
apart_m:
    add r17, r16, 2
    rem r17, r17, %num_experts   # odd token: choice 1 on the next GPU, one store each
    bne %rowsp, 0, apart_sp_m
    send_to_experts r16, 1, r2, %row_bytes, r5, r6
    send_to_experts r16, 2, r2, %row_bytes, r5, r6
    bra next_m
apart_sp_m:
    st.rowsp.experts r16, 1, r5, r2, %row_bytes
    st.rowsp.experts r16, 2, r5, r2, %row_bytes
next_m:
    add r1, r1, %ntb
    bra token_m
end_m:
    notify_ready.eos %ntb
    exit

# moe_expert (consumers): thread block b serves local expert g * ntb + b (block placement, grid =
# experts per GPU). It claims tiles in arrival order, "computes" y = x + x for each row into its
# scratch rows, sends y home with send_home (the completion record names the home GPU and slot),
# fences, releases the tile, and stops at the zero-row claim. It logs each claim (row count and
# first-row address) so tests can check that tiles arrive in allocation order.
.kernel moe_expert
.param log           # claim log [ntb][64 claims][2 words]
.param y             # scratch [ntb][tile_rows][slot_bytes]
.param out           # combine buffer [tokens * topk][row_bytes] on every GPU
.param row_bytes
.param slot_bytes    # window slot stride (workload.moe.row_bytes)
.param record_bytes  # completion record stride (system.gpu.hub.moe.aau.record_bytes)
.param tile_rows
    mul r1, %gpu, %ntb
    add r1, r1, %tb              # r1 = my expert
    mul r2, %tb, %tile_rows
    mul r2, r2, %slot_bytes
    add r2, r2, %y               # r2 = my scratch rows
    shr r11, %row_bytes, 2       # r11 = f32 elements per row
    shl r12, %tb, 10
    add r12, r12, %log           # r12 = my claim log (1 KB: 64 claims)
next:
    claim_buffer r3, r4, r5, r1  # r3 = rows, r4 = first row, r5 = first record
    st [r12], r3
    st [r12+8], r4
    add r12, r12, 16
    beq r3, 0, done
    mov r6, 0                    # r6 = row in tile
row:
    mul r7, r6, %slot_bytes
    add r8, r4, r7               # window row
    add r9, r2, r7               # scratch row
    vadd.f32 r9, r8, r8, r11     # the expert's work: y = 2x
    mul r10, r6, %record_bytes
    add r10, r10, r5             # this row's completion record
    send_home r10, r9, %row_bytes, %out
    add r6, r6, 1
    blt r6, r3, row
    fence                        # every y row of the tile is home: the scratch may be reused
    notify_ready.release r1, r4
    bra next
done:
    exit

# moe_drain (consumers for bandwidth studies): thread block b of GPU g claims and immediately
# releases every tile of local expert g * ntb + b, so only the dispatch moves data.
.kernel moe_drain
    mul r1, %gpu, %ntb
    add r1, r1, %tb              # r1 = my expert
drain:
    claim_buffer r3, r4, r5, r1
    beq r3, 0, drained
    notify_ready.release r1, r4
    bra drain
drained:
    exit
