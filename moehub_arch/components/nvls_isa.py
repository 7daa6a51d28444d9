"""The multimem instructions as the SM issues them (NVLink SHARP, nvls.py).

`multimem.st`, `multimem.red` and `multimem.ld_reduce` name a multimem address (dst for st and
red, src for ld_reduce) in an object bound to a multicast group; the hub takes the operation and
sends it to the switch that serves the group. The dynamic subops (`dymultimem.*`, DySHARP) name
their targets themselves and are dysharp_isa.py's. Called by the SM's interpreter
(sm_interpreter.py): True when the hub took the operation, False when it raised an error or
blocked the thread block (which re-executes it). A module of its own because it submits to the
hub, which imports nvls.py for its receive side.
"""
from ..engine.jit import compiled
from ..engine.state import ERR_ADDR_RANGE, ERR_BAD_SIZE, ERR_MULTIMEM_ADDR
from ..isa.encoding import DTYPE, DTYPE_SRC_MASK, MM_DY_ST, MM_LD_REDUCE, MM_RED, SUBOP
from .dysharp_isa import dymultimem
from .hbm import raise_error
from .hub import REQ_MM_LD, REQ_MM_RED, REQ_MM_ST, hub_submit
from .nvls import multimem_element_bytes, multimem_object, multimem_route_peer
from .sm_operands import check_range, is_smem, operand, stall_on_hub


@compiled
def multimem(st, g, sm, slot, row, tick, cyc):
    """multimem.{st,red,ld_reduce} dst, src, bytes (and dymultimem.* dst, src, bytes, targets,
    count): check the operands, then hand the operation to the hub."""
    sub = row[SUBOP]
    dst = operand(st, slot, row, 0, tick, cyc)
    src = operand(st, slot, row, 1, tick, cyc)
    nb = operand(st, slot, row, 2, tick, cyc)
    dt = row[DTYPE] & DTYPE_SRC_MASK
    if nb <= 0 or nb % multimem_element_bytes(dt) != 0:
        raise_error(st, ERR_BAD_SIZE, slot, nb)
        return False
    if is_smem(dst) or is_smem(src):
        raise_error(st, ERR_ADDR_RANGE, slot, dst if is_smem(dst) else src)
        return False
    if sub >= MM_DY_ST:
        # DySHARP (dysharp.py): the operation names its own targets
        return dymultimem(st, g, sm, slot, row, sub, dst, src, nb, dt, tick, cyc)
    if not check_range(st, slot, dst, nb) or not check_range(st, slot, src, nb):
        return False
    mm = src if sub == MM_LD_REDUCE else dst
    obj = multimem_object(st, g, mm, nb)
    if obj < 0:
        raise_error(st, ERR_MULTIMEM_ADDR, slot, mm)
        return False
    kind = REQ_MM_LD if sub == MM_LD_REDUCE else (REQ_MM_RED if sub == MM_RED else REQ_MM_ST)
    if not hub_submit(st, g, kind, slot, multimem_route_peer(st, obj, g), dst, src, nb,
                      obj * 16 + dt, 0, tick, -1):
        stall_on_hub(st, slot, g, tick)
        return False
    st.tb[slot].outstanding += 1
    return True
