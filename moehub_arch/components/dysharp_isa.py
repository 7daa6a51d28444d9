"""DySHARP's instructions as the SM issues them: `dymultimem.st` and `dymultimem.ld_reduce`.

The SM-side half of DySHARP (dysharp.py; arXiv 2605.05607): the operation names its own targets
(a list of expert ids in memory), the MultimemQ stages that list, and the hub takes the
operation. Called by the multimem instruction (nvls_gpu.py) for its dynamic subops. It is a
module of its own because it submits to the hub, which sits above dysharp.py. `dysharp_send` is
the packetizer of its request kinds (packet.py REQ_DY_ST, REQ_DY_LD; dysharp.BLOCK declares it,
``Send``): a multimem packet (nvls_send.py) that waits for the MultimemQ's target list and
carries the list in extension flits.
"""
import numpy as np

from ..engine.jit import compiled
from ..engine.state import (ERR_DY_COUNT, ERR_DY_ROW, ERR_DY_TARGET, ERR_MISALIGNED,
                            ERR_MULTIMEM_ADDR, ERR_UNBACKED_WORD)
from ..isa.encoding import MM_DY_LD_REDUCE
from .dysharp import dymultimem_object, dysharp_bind, dysharp_sent, dysharp_stage, ext_flits
from .hbm import raise_error
from .hub import hub_accept, hub_emit, hub_enqueue, hub_post_store, hub_room
from .nvls import multimem_route_peer
from .nvls_send import multimem_chunks, multimem_flits, multimem_packet
from .packet import REQ_DY_LD, REQ_DY_ST
from .sm_operands import check_range, mem_access, operand, stall_on_hub, tb_bytes


@compiled
def dymultimem(st, g, sm, slot, row, sub, dst, src, nb, dt, tick, cyc):
    """dymultimem.st / dymultimem.ld_reduce (DySHARP, components/dysharp.py): the multimem address
    (dst for st, src for ld_reduce) lies in a dynamic object's algebraic range; the MultimemQ
    fetches the target list (`count` i64 expert ids at `targets`) and the hub takes the operation.
    A full MultimemQ or hub stalls the thread block (it re-executes the instruction later).
    Returns True once the hub has the operation."""
    p = st.p[0]
    gp = st.gpu[g]
    tl = operand(st, slot, row, 3, tick, cyc)
    count = operand(st, slot, row, 4, tick, cyc)
    if count <= 0 or count > p.dy_max_targets:
        raise_error(st, ERR_DY_COUNT, slot, count)
        return False
    ld = sub == MM_DY_LD_REDUCE
    mm = src if ld else dst
    local = dst if ld else src
    if not check_range(st, slot, local, nb):
        return False
    obj = dymultimem_object(st, g, mm, nb)
    if obj < 0:
        raise_error(st, ERR_DY_ROW if obj == -2 else ERR_MULTIMEM_ADDR, slot, mm)
        return False
    if gp.dy_queue >= p.dy_queue_entries or not hub_room(st, g):
        if gp.dy_queue >= p.dy_queue_entries:
            gp.dy_queue_stalls += 1
        stall_on_hub(st, slot, g, tick)
        return False
    if tl % 8 != 0:
        raise_error(st, ERR_MISALIGNED, slot, tl)
        return False
    if not check_range(st, slot, tl, 8 * count):
        return False
    view = tb_bytes(st, g, sm, tl, 8 * count)
    if view.shape[0] == 0:
        raise_error(st, ERR_UNBACKED_WORD, slot, tl)
        return False
    ids = view.view(np.int64)
    bad = dysharp_stage(st, g, obj, ids, count)
    if bad >= 0:
        raise_error(st, ERR_DY_TARGET, slot, ids[bad])
        return False
    gp.dy_stage_ready = mem_access(st, g, tl, 8 * count, tick, False)   # the list is fetched
    kind = REQ_DY_LD if ld else REQ_DY_ST
    r = hub_accept(st, g, kind, slot, multimem_route_peer(st, obj, g), dst, src, nb,
                   obj * 16 + dt, 0, tick, -1)   # (hub_room above: it has room)
    rq = st.req[r]
    rq.pkts_total = multimem_chunks(st, nb)
    if ld:
        rq.acks_total = 1   # its result
        dysharp_bind(st, g, r, True)
    else:
        rq.acks_total = dysharp_bind(st, g, r, False)   # one per GPU holding a target
    hub_enqueue(st, g, r, tick)
    st.tb[slot].outstanding += 1
    return True


@compiled
def dysharp_send(st, g, r, tick):
    """The packetizer of REQ_DY_ST and REQ_DY_LD (declare.Send): the next multimem packet of
    request r (nvls_send.multimem_packet), ready once the MultimemQ has fetched the target list,
    with the list in extension flits on every link packet; the last one frees its MultimemQ entry."""
    rq = st.req[r]
    kind = rq.kind
    c, pkt, ready, done = multimem_packet(st, g, r, kind == REQ_DY_LD, False, tick)
    if c < 0:
        return
    ready = max(ready, rq.dy_ready)   # the MultimemQ has fetched the target list
    if done:
        dysharp_sent(st, g)
        if kind == REQ_DY_ST:
            hub_post_store(st, g, rq)
    multimem_flits(st, g, pkt)
    pk = st.pk[pkt]
    extra = pk.npk * ext_flits(st, rq.dy_count)
    pk.flits += extra
    st.gpu[g].dy_ext_flits += extra
    hub_emit(st, g, r, c, pkt, ready, done, tick)
