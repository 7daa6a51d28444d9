"""Ring-buffer positions without a division.

The link, switch and hub FIFOs are rings of `cap` slots with a head and a count, both kept below
`cap` (a push needs room, a pop a packet), so the slot `head + k` for 0 <= k <= cap wraps at most
once: one compare instead of `(head + k) % cap`, a 64-bit division (about 14-18 cycles on recent
x86 cores, more with the sign fix-up of Python's `%` that Numba adds) done a dozen times per packet
per hop. Same slots, so the same results. Rings indexed by ever-growing counters (the MoE-Hub
descriptor rings) still divide: this wrap needs the index itself below the ring size.
"""
from .jit import compiled


@compiled
def ring_add(i, k, cap):
    """(i + k) % cap for 0 <= i < cap and 0 <= k <= cap."""
    j = i + k
    if j >= cap:
        j -= cap
    return j


@compiled
def ring_next(i, cap):
    """(i + 1) % cap for 0 <= i < cap."""
    j = i + 1
    if j == cap:
        j = 0
    return j
