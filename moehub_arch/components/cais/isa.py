"""CAIS's instructions as the SM issues them: `ld.cais`, `red.cais` and `sync.cais`.

The SM-side half of CAIS (this package; arXiv 2605.05628): a load or reduction names the home
GPU and an address in a registered group (src at the home for ld.cais, dst for red.cais); the hub
sends it to the switch's merge table. `sync.cais flag, value` is the group sync table's
pre-access sync: the switch writes value into the flag on every member once all have arrived.
Called by the SM's interpreter (components/sm_interpreter.py): True when the hub took the
operation, False when it raised an error or blocked the thread block (which re-executes it). The
package's other modules do not import it: it submits to the hub (send.py), which sits above the
switch-side modules.
"""
from ...engine.jit import compiled
from ...engine.state import ERR_ADDR_RANGE, ERR_BAD_GPU, ERR_BAD_SIZE, ERR_CAIS_ADDR
from ...isa.encoding import CAIS_LD, CAIS_SYNC, DTYPE, DTYPE_SRC_MASK, SUBOP
from .gpu import cais_group, cais_sync_peer
from .layout import cais_element_bytes
from ..hbm import raise_error
from ..packet import REQ_CAIS_LD, REQ_CAIS_RED, REQ_CAIS_SYNC
from .send import cais_submit
from ..sm_operands import check_hbm_word, check_range, is_smem, operand, stall_on_hub


@compiled
def cais_execute(st, g, sm, slot, row, tick, cyc):
    """The SM executes a CAIS instruction (declare.Semantic: the interpreter's generated call)."""
    if row[SUBOP] == CAIS_SYNC:
        return cais_sync(st, g, slot, row, tick, cyc)
    return cais_access(st, g, slot, row, tick, cyc)


@compiled
def cais_sync(st, g, slot, row, tick, cyc):
    """sync.cais flag, value: join the group sync of the group the flag belongs to."""
    flag = operand(st, slot, row, 1, tick, cyc)
    value = operand(st, slot, row, 4, tick, cyc)
    if not check_hbm_word(st, slot, flag):
        return False
    grp = cais_group(st, g, g, flag, 8)
    if grp < 0:
        raise_error(st, ERR_CAIS_ADDR, slot, flag)
        return False
    if not cais_submit(st, g, REQ_CAIS_SYNC, slot, cais_sync_peer(st, g, grp), flag, value, 0,
                       grp * 16, tick):
        stall_on_hub(st, slot, g, tick)
        return False
    st.tb[slot].outstanding += 1
    return True


@compiled
def cais_access(st, g, slot, row, tick, cyc):
    """ld.cais / red.cais home, dst, src, bytes: a load from or a reduction into the home GPU's
    copy, merged in the switch with the group's other requests for the same data."""
    sub = row[SUBOP]
    home = operand(st, slot, row, 0, tick, cyc)
    dst = operand(st, slot, row, 1, tick, cyc)
    src = operand(st, slot, row, 2, tick, cyc)
    nb = operand(st, slot, row, 3, tick, cyc)
    dt = row[DTYPE] & DTYPE_SRC_MASK
    if home < 0 or home >= st.p[0].num_gpus:
        raise_error(st, ERR_BAD_GPU, slot, home)
        return False
    if nb <= 0 or nb % cais_element_bytes(dt) != 0:
        raise_error(st, ERR_BAD_SIZE, slot, nb)
        return False
    if is_smem(dst) or is_smem(src):
        raise_error(st, ERR_ADDR_RANGE, slot, dst if is_smem(dst) else src)
        return False
    if not check_range(st, slot, dst, nb) or not check_range(st, slot, src, nb):
        return False
    at_home = src if sub == CAIS_LD else dst
    grp = cais_group(st, g, home, at_home, nb)
    if grp < 0:
        raise_error(st, ERR_CAIS_ADDR, slot, at_home)
        return False
    kind = REQ_CAIS_LD if sub == CAIS_LD else REQ_CAIS_RED
    if not cais_submit(st, g, kind, slot, home, dst, src, nb, grp * 16 + dt, tick):
        stall_on_hub(st, slot, g, tick)
        return False
    st.tb[slot].outstanding += 1
    return True
