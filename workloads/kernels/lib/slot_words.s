# Kernel library: walking the words of one ld.v8 group. Registers cannot be indexed, so a loop
# over a token's top-k slots (or over 8 home words) loads 8 words into r16..r23 and shifts them
# down one register per step: after j shifts, word j is in r16.
#
#   next_slot_word j, n, loop
#       r16 = r17, r17 = r18, ..., r22 = r23 (r23 keeps its value); j += 1; branch to `loop`
#       while j < n. Writes r16..r22 and j.

.macro next_slot_word j, n, loop
    mov r16, r17
    mov r17, r18
    mov r18, r19
    mov r19, r20
    mov r20, r21
    mov r21, r22
    mov r22, r23
    add \j, \j, 1
    blt \j, \n, \loop
.endm
