"""Flag waits: thread blocks sleeping in ``wait.*`` until a memory word satisfies a condition.

A waiting TB costs no events (it does not spin): every write that can change a word of the
backed memory on a GPU with sleepers calls ``notify_stores``, which re-checks the conditions of the
TBs waiting on words inside the written range and wakes those now satisfied at the write's
completion tick. This models a polling loop whose poll hits right after the write lands.
"""
from ..engine.jit import compiled

from ..engine.state import TB_WAIT_FLAG, WAIT_FLAG
from ..isa.encoding import CMP_EQ, CMP_GE, CMP_GT, CMP_LE, CMP_LT, CMP_NE
from .hbm import read_word
from .wakeups import tb_resume


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
def notify_stores(st, g, addr, nbytes, tick):
    """Bytes [addr, addr+nbytes) of GPU g's HBM were written, visible from `tick`."""
    gp = st.gpu[g]
    if gp.waiters == 0:
        return
    per_gpu = st.p[0].sms_per_gpu * st.p[0].slots_per_sm
    for slot in range(g * per_gpu, (g + 1) * per_gpu):
        tb = st.tb[slot]
        if tb.state != TB_WAIT_FLAG:
            continue
        a = tb.wait_addr
        if a + 8 <= addr or a >= addr + nbytes:
            continue
        if compare(tb.wait_cmp, read_word(st, g, a), tb.wait_value):
            gp.waiters -= 1
            tb_resume(st, slot, tick, WAIT_FLAG)
