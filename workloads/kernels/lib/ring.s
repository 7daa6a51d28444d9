# Kernel library: the receiving side of DeepEP-style ring buffers (deepep_dispatch's receivers,
# overlap_receive). Source s pushes the tokens of channel c into ring (c, s) on this rank: row
# slots, 96-byte metadata slots (words 0..7 expert id | t << 32 per top-k slot, words 8..11 the
# router weights), a tail word it raises after a fence, and a head word on the source that the
# receiver raises once it has copied slots out (layouts in ../deepep/deepep.s, "dp_ring_ctl").
#
# Interfaces. Arguments are operands; the names in the descriptions are registers the macro
# writes. The macros also read these kernel parameters by name: %ntf (the count rows received in
# notify), %ring_ctl, %ring_rows, %channels and %local_experts.
#
#   ring_receiver_open ring, table_bytes, channel, source, count, tail, first_slot, head, addr, consumed
#       for ring index `ring` = c * P + s: channel = c, source = s, count = tokens s sends on
#       channel c, tail = &tail[c][s] (here), first_slot = the ring's first slot index,
#       head = &head[c][me] (on the source), consumed = 0; table_bytes = bytes of one [C][P]
#       word table. Writes channel, source, count, tail, first_slot, head, addr, consumed.
#   ring_wait_tokens consumed, count, tail, avail, done
#       branch to `done` once `consumed` == `count`; else wait until the tail passes `consumed`
#       (acquire: the sender fenced before raising it) and read it into avail.
#   ring_next_token consumed, avail, release, first_slot, meta_slots, slot, meta
#       branch to `release` once `consumed` == `avail` (every token up to the tail is done); else
#       slot = the slot index of token `consumed`, meta = its metadata slot (meta_slots: the
#       metadata ring base), and r16..r23 = its eight id words (slot j's in r16 after j shifts,
#       see slot_words.s). Writes slot, meta, r16..r23.

.macro ring_receiver_open ring, table_bytes, channel, source, count, tail, first_slot, head, addr, consumed
    div \channel, \ring, %ngpu       # channel c
    rem \source, \ring, %ngpu        # source s
    add \addr, %channels, %local_experts
    mul \addr, \addr, \source
    add \addr, \addr, \channel
    shl \addr, \addr, 3
    add \addr, \addr, %ntf
    ld \count, [\addr]               # tokens s sends on channel c
    shl \tail, \ring, 3
    add \tail, \tail, %ring_ctl      # &tail[c][s]
    mul \first_slot, \ring, %ring_rows
    mul \head, \channel, %ngpu
    add \head, \head, %gpu
    shl \head, \head, 3
    add \head, \head, \table_bytes
    add \head, \head, %ring_ctl      # &head[c][me] (on the source)
    mov \consumed, 0
.endm

.macro ring_wait_tokens consumed, count, tail, avail, done
    bge \consumed, \count, \done
    wait.gt [\tail], \consumed       # acquire: the sender fenced before moving the tail
    ld \avail, [\tail]
.endm

.macro ring_next_token consumed, avail, release, first_slot, meta_slots, slot, meta
    bge \consumed, \avail, \release
    rem \slot, \consumed, %ring_rows
    add \slot, \slot, \first_slot
    mul \meta, \slot, 96
    add \meta, \meta, \meta_slots
    ld.v8 r16, [\meta]               # words id | t << 32 (slot j's in r16 after j shifts)
.endm
