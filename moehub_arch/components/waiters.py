"""Flag waits: thread blocks sleeping in ``wait.*`` until a memory word satisfies a condition.

A waiting TB costs no events (it does not spin): every write that can change a word of the
backed memory on a GPU with sleepers calls ``notify_stores``, which re-checks the conditions of the
TBs waiting on words inside the written range and wakes those now satisfied at the write's
completion tick. A ``wait.all`` over a range of words (a warp's coalesced load of n done flags)
sleeps on the first word not yet satisfied; the write that satisfies it compares the rest of the
range in the same pass and moves the sleeper to the next unsatisfied word, or wakes it when none
is left - one wake-up for the whole range, as the warp's last poll sees every flag set. A
``wait.lanes`` is the same with an expected value per word (each lane's own operand, the word at
the same index of a second range: DeepEP's combine waits for every rank's ring tail to pass the
token's position in that rank's ring). This models a polling loop whose poll hits right after the
write lands.
Each GPU keeps its sleepers in a list (State.wait_list, in the order they started waiting), so a
write costs nothing when nobody waits and a pass over the sleepers otherwise; the same lists hold
the TBs stalled on a full hub (hub.wake_hub_waiters).
"""
from ..engine.jit import compiled

from ..engine.state import WAIT_FLAG, WAITLIST_FLAG
from ..isa.encoding import CMP_EQ, CMP_GE, CMP_GT, CMP_LE, CMP_LT, CMP_NE
from .hbm import read_word
from .wakeups import tb_resume
from .counted_write import counted_wait_released
from ..declare import Block, fields

BLOCK = Block("waiters", __doc__.split("\n\n")[0],
              fields=fields("gpu", ("waiters", "thread blocks sleeping on a flag (State.wait_list)"),
                            ("wait_lo", "lowest word address a flag waiter watches"),
                            ("wait_hi", "end of the highest word a flag waiter watches (a write "
                                        "outside [wait_lo, wait_hi) wakes nobody: no scan)")))


@compiled
def compare(cmp, a, b):
    if cmp == CMP_EQ:
        return a == b
    if cmp == CMP_NE:
        return a != b
    if cmp == CMP_LT:
        return a < b
    if cmp == CMP_LE:
        return a <= b
    if cmp == CMP_GT:
        return a > b
    if cmp == CMP_GE:
        return a >= b
    return True  # CMP_ALWAYS


@compiled
def add_waiter(st, g, which, slot):
    """Put TB `slot` on GPU g's list of flag waiters (which = WAITLIST_FLAG) or of TBs stalled on
    a full hub (WAITLIST_HUB); the GPU record counts them (waiters, hub_tb_waiters)."""
    gp = st.gpu[g]
    if which == WAITLIST_FLAG:
        a = st.tb[slot].wait_addr
        if gp.waiters == 0 or a < gp.wait_lo:
            gp.wait_lo = a
        if gp.waiters == 0 or a + 8 > gp.wait_hi:
            gp.wait_hi = a + 8
        st.wait_list[g, which, gp.waiters] = slot
        gp.waiters += 1
    else:
        st.wait_list[g, which, gp.hub_tb_waiters] = slot
        gp.hub_tb_waiters += 1


@compiled
def notify_stores(st, g, addr, nbytes, tick):
    """Bytes [addr, addr+nbytes) of GPU g's HBM were written, visible from `tick`."""
    gp = st.gpu[g]
    if gp.waiters == 0 or addr >= st.hbm_mem.shape[1]:
        return  # nobody waits, or the write is to unbacked data (flags are backed words)
    if addr >= gp.wait_hi or addr + nbytes <= gp.wait_lo:
        return  # the write misses every watched word (e.g. payload next to a few flags)
    kept = 0
    lo = 0
    hi = 0
    for i in range(gp.waiters):
        slot = st.wait_list[g, WAITLIST_FLAG, i]
        tb = st.tb[slot]
        a = tb.wait_addr
        if not (a + 8 <= addr or a >= addr + nbytes
                or not compare(tb.wait_cmp, read_word(st, g, a), tb.wait_value)):
            # the watched word is satisfied: a wait.all's poll compares the rest of its range (the
            # words before it were satisfied already) and sleeps on the next one that is not; a
            # wait.lanes' lane compares with its own expected word (wait_ref, same index)
            ref = tb.wait_ref
            value = tb.wait_value
            while True:
                a += 8
                if a >= tb.wait_end:
                    break
                if ref >= 0:
                    ref += 8
                    value = read_word(st, g, ref)
                if not compare(tb.wait_cmp, read_word(st, g, a), value):
                    break
            if a >= tb.wait_end:
                counted_wait_released(st, g, slot, tick)   # a wait.count's sleep (counted_write.py)
                tb_resume(st, slot, tick, WAIT_FLAG)
                continue
            tb.wait_addr = a
            tb.wait_ref = ref
            tb.wait_value = value
        st.wait_list[g, WAITLIST_FLAG, kept] = slot   # still waiting (list order kept)
        if kept == 0 or a < lo:
            lo = a
        if kept == 0 or a + 8 > hi:
            hi = a + 8
        kept += 1
    gp.waiters = kept
    gp.wait_lo = lo
    gp.wait_hi = hi
