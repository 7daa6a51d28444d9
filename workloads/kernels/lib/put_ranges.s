# Kernel library: an NCCL-style send of contiguous byte ranges to one peer, from a host-written
# table of 32-byte entries (word 0 source offset, word 1 destination offset, word 2 bytes, word 3
# unused; offsets relative to the kernel's %src and %dst). Used by the all-to-all dispatchers
# (../common/moe_alltoall.s) and FasterMoE's group-wise exchange (../fastermoe/fastermoe.s).
# The including kernel declares the params table, entries, src, dst, chunk, arrive (and done for
# tell_done).
#
# Macros:
#   put_ranges peer, index
#       put the `entries` table entries of table row `index` (at %table + index * entries * 32)
#       to GPU `peer` (ranges relative to %src and %dst, cut into puts of at most %chunk bytes),
#       fence (every put landed), then add 1 to the peer's %arrive word if it is not 0.
#       Uses r2-r7, r16-r23.
#   tell_done peer
#       done[gpu] = 1 on GPU `peer` if %done is not 0 (after put_ranges' fence: my ranges to it
#       have landed). Uses r8.
.macro put_ranges peer, index
    mul r2, \index, %entries
    shl r2, r2, 5
    add r2, r2, %table           # r2 = the row's first entry
    mov r3, 0
entry_\@:
    bge r3, %entries, sent_\@
    ld.v8 r16, [r2]              # r16 source offset, r17 destination offset, r18 bytes
    add r4, r16, %src
    add r5, r17, %dst
piece_\@:
    ble r18, 0, next_entry_\@
    min r6, r18, %chunk
    put \peer, r5, r4, r6
    add r4, r4, r6
    add r5, r5, r6
    sub r18, r18, r6
    bra piece_\@
next_entry_\@:
    add r2, r2, 32
    add r3, r3, 1
    bra entry_\@
sent_\@:
    fence                        # every put of this TB landed
    beq %arrive, 0, arrived_\@
    atom.add r7, \peer, [%arrive], 1
arrived_\@:
.endm

.macro tell_done peer
    beq %done, 0, told_\@
    shl r8, %gpu, 3
    add r8, r8, %done
    flag.set \peer, [r8], 1
told_\@:
.endm
