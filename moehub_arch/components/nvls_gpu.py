"""NVLink SHARP on the GPU side (nvls.py is the switch's): the multimem instructions as the SM
issues them, and the multimem packets a GPU receives (nvls_send.py sends its requests).

`multimem.st`, `multimem.red` and `multimem.ld_reduce` name a multimem address (dst for st and
red, src for ld_reduce) in an object bound to a multicast group; the hub takes the operation and
sends it to the switch that serves the group. The dynamic subops (`dymultimem.*`, DySHARP) name
their targets themselves and are dysharp_isa.py's. Called by the SM's interpreter
(sm_interpreter.py): True when the hub took the operation, False when it raised an error or
blocked the thread block (which re-executes it). `receive_multimem` is the GPU's receive of the
switch's copies, reads and results; the run loop dispatches those packet kinds to it
(nvls.BLOCK declares them, dispatch/loop.py). A module of its own, above the hub: it submits
to the hub and completes requests there, while the hub's base protocol imports nothing of it.
"""
from ..engine.jit import compiled
from ..engine.state import ERR_ADDR_RANGE, ERR_BAD_SIZE, ERR_MULTIMEM_ADDR
from ..isa.encoding import DTYPE, DTYPE_SRC_MASK, MM_DY_ST, MM_LD_REDUCE, MM_RED, SUBOP
from .dysharp_isa import dymultimem
from .hbm import raise_error
from .hub import RESP_MM_ACK, hub_respond
from .hub_receive import complete_request
from .nvls_send import multimem_submit
from .nvls import (multimem_element_bytes, multimem_object, multimem_route_peer,
                   nvls_copies_answered, nvls_copy_arrived, nvls_read_arrived, nvls_result_arrived)
from .dysharp import dysharp_copy_write, dysharp_read_arrived, dysharp_result
from .dysharp_objects import OBJ_TPG
from .dysharp_tracker import dysharp_copy_admit, dysharp_park, dysharp_unpark
from .l2 import link_write
from .nvlink import channel_count_arrival, credit_return_vc
from .packet import PK_MM_COPY, PK_MM_READ, REQ_MM_LD, REQ_MM_RED, REQ_MM_ST, packet_free, packet_vc
from .trace import CAT_HUB, TR_HUB_RX, trace_event
from .waiters import notify_stores
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
    if not multimem_submit(st, g, kind, slot, multimem_route_peer(st, obj, g), dst, src, nb,
                           obj * 16 + dt, tick):
        stall_on_hub(st, slot, g, tick)
        return False
    st.tb[slot].outstanding += 1
    return True


@compiled
def receive_multimem(st, g, c, pkt, tick):
    """A multimem packet from a switch (PK_MM_COPY, PK_MM_READ, PK_MM_RESULT) reached GPU g over
    down-channel c (the run loop dispatches these kinds here, dispatch/loop.py), processed after
    the hub's receive latency: a multicast copy is written (or added) and, once every chunk of
    its operation is in, answered with one write response; a reduction read is served (its
    packet returns as the data, and holds its buffer space until it leaves); a reduced result is
    written and completes its ld_reduce. DySHARP's dynamic objects (dysharp.py) write each copy
    into its targets' layout rows and serve reads and results there."""
    channel_count_arrival(st, c, pkt)
    p = st.p[0]
    t = tick + p.hub_rx_latency_ticks
    pk = st.pk[pkt]
    kind = pk.kind
    trace_event(st, CAT_HUB, TR_HUB_RX, g, kind, pk.src, tick)
    dynamic = st.mm_objects[pk.mm_obj, OBJ_TPG] > 0   # DySHARP (dysharp.py)
    if kind == PK_MM_READ:
        if dynamic:
            dysharp_read_arrived(st, g, c, pkt, t)
        else:
            nvls_read_arrived(st, g, c, pkt, t)
        return
    if (kind == PK_MM_COPY and dynamic and st.p[0].dy_tracker_stall
            and not dysharp_copy_admit(st, g, pkt)):
        # tracker_full: stall - its tiles need token-tracker entries the table lacks: it waits
        # (dysharp_retry)
        dysharp_park(st, g, c, pkt, t)
        return
    _multimem_written(st, g, c, pkt, t, dynamic)


@compiled
def dysharp_retry(st, g, tick):
    """EV_DY_RETRY: a token-tracker entry freed at GPU g; the waiting copies that can be written
    now are, in arrival order (dysharp_tracker.py dysharp_unpark), at this tick or their own processing
    time, whichever is later."""
    q = dysharp_unpark(st, g, tick)
    while q >= 0:
        _multimem_written(st, g, st.pk[q].dy_park_chan, q, max(tick, st.pk[q].dy_park_at), True)
        q = dysharp_unpark(st, g, tick)


@compiled
def _multimem_written(st, g, c, pkt, t, dynamic):
    """The write of a multimem copy or result that reached GPU g on down-channel c, at t: its
    answer, its completion and its link buffer space returned."""
    pk = st.pk[pkt]
    kind = pk.kind
    r = pk.req
    if kind == PK_MM_COPY and dynamic:
        # written into the layout row of each of its targets here (and notified there)
        free_at, visible = dysharp_copy_write(st, g, pkt, t)
    else:
        free_at, visible = link_write(st, g, pk.addr, pk.payload, t)
    if kind == PK_MM_COPY:
        answered = nvls_copy_arrived(st, g, pkt, visible)
        if not dynamic:
            notify_stores(st, g, pk.addr, pk.payload, visible)
        if answered:
            hub_respond(st, g, r, RESP_MM_ACK, nvls_copies_answered(st, g, r))
    else:  # PK_MM_RESULT
        if dynamic:
            dysharp_result(st, g, pkt)
        else:
            nvls_result_arrived(st, g, pkt)
        notify_stores(st, g, pk.addr, pk.payload, visible)
        rq = st.req[r]
        rq.pkts_arrived += 1
        if rq.pkts_arrived == rq.pkts_total:
            complete_request(st, r, visible)
    credit_return_vc(st, c, pk.flits, free_at + st.ch[c].latency, packet_vc(st, pkt))
    packet_free(st, pkt)
