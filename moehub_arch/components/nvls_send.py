"""NVLink SHARP on the GPU side: the multimem requests as the hub sends them (the model is nvls.py's).

A multimem.st / multimem.red / multimem.ld_reduce (nvls_gpu.py issues them) is a request of the
hub's request table and FIFO (packet.py REQ_MM_ST, REQ_MM_RED, REQ_MM_LD): `multimem_submit`
gives it its packets (the put-sized chunks of its range, trains included) and the write
responses its source waits for (one per member of the multicast object for st and red: each
member answers once, when it has every chunk; one result for ld_reduce). `multimem_send` is its
kinds' packetizer (nvls.BLOCK declares it, ``Send``; the run loop calls it for the FIFO's head):
st and red send each chunk once to the switch (PK_MM_ST: the payload read from HBM, the multimem
address), ld_reduce one header-only request per chunk (PK_MM_LD: pk.value its bytes, addr the
multimem address, src_addr where the result goes). A store's entry leaves the request table at
its last packet when a posted-store tag is free (hub.hub_post_store: PTX's weak-store semantics).
DySHARP's dymultimem requests are built the same way (dysharp_isa.py calls `multimem_packet`).
"""
from ..engine.jit import compiled
from ..isa.encoding import MM_RED, MM_ST
from .dysharp_objects import OBJ_MEMBERS
from .hub import (hub_accept, hub_data_packet, hub_emit, hub_enqueue, hub_post_store,
                  hub_request_packet, hub_wait_for_room, pick_channel_vc)
from .packet import (PK_MM_LD, PK_MM_ST, REQ_MM_LD, REQ_MM_RED, VC_REQUEST, header_flits,
                     packet_flits, store_packets)


@compiled
def multimem_submit(st, g, kind, slot, peer, dst, src, nbytes, value, tick):
    """Hand a multimem operation (REQ_MM_*: value = object x 16 + element type) of TB `slot` to
    GPU g's hub, toward `peer` (a member whose route reaches the object's switch); False if the hub
    is full (the TB retries)."""
    r = hub_accept(st, g, kind, slot, peer, dst, src, nbytes, value, 0, tick, -1)
    if r < 0:
        return False
    rq = st.req[r]
    rq.pkts_total = multimem_chunks(st, nbytes)
    if kind == REQ_MM_LD:
        rq.acks_total = 1   # its result
    else:
        rq.acks_total = st.mm_objects[value // 16, OBJ_MEMBERS]   # one per member
    hub_enqueue(st, g, r, tick)
    return True


@compiled
def multimem_chunks(st, nbytes):
    """Put-sized chunks (packets, or trains of run.packet_train) of a multimem range."""
    mp = st.p[0].store_payload * st.p[0].packet_train
    return (nbytes + mp - 1) // mp


@compiled
def multimem_packet(st, g, r, ld, red, tick):
    """The next packet of multimem request r of GPU g (a plain one, or DySHARP's), on the next
    link toward its peer with room (round-robin): the next chunk of st (red: `red`) data, or the
    next ld_reduce request (`ld`). Returns (channel, packet, when its data is ready, whether it is
    the request's last); channel -1 (no packet): no link has room, the hub waits for one."""
    rq = st.req[r]
    p = st.p[0]
    c = pick_channel_vc(st, g, rq.dst_gpu, True, VC_REQUEST)
    if c < 0:
        hub_wait_for_room(st, g, tick)
        return c, -1, tick, False
    pkt = hub_request_packet(st, r, g, rq.dst_gpu)
    pk = st.pk[pkt]
    ready = tick
    pk.mm_obj = rq.value // 16
    pk.mm_dtype = rq.value % 16
    pk.mm_entry = -1
    pk.mm_sent = 0
    if ld:
        pk.kind = PK_MM_LD
        n = min(rq.length - rq.sent, p.store_payload * p.packet_train)
        pk.addr = rq.src_addr + rq.sent
        pk.src_addr = rq.dst_addr + rq.sent
        pk.payload = 0
        pk.value = n
        pk.npk = store_packets(st, n)
        rq.sent += n
    else:
        pk.kind = PK_MM_ST
        pk.mm_op = MM_RED if red else MM_ST
        ready = hub_data_packet(st, g, pk, rq, rq.sent, tick)
        rq.sent += pk.payload
    return c, pkt, ready, rq.sent == rq.length


@compiled
def multimem_flits(st, g, pkt):
    """A multimem packet's link flits (a ld_reduce request is header only) and the source's
    counters of them (the switch turns them into copies and reads: nvls.py counts those)."""
    gp = st.gpu[g]
    pk = st.pk[pkt]
    if pk.kind == PK_MM_LD:
        pk.flits = pk.npk * header_flits(st)
        gp.mm_tx_ld += pk.npk
    else:
        pk.flits, pk.npk = packet_flits(st, pk.payload, st.p[0].store_payload)
        gp.mm_tx_st += pk.npk


@compiled
def multimem_send(st, g, r, tick):
    """The packetizer of REQ_MM_ST, REQ_MM_RED and REQ_MM_LD (declare.Send): send the next packet
    of request r, the head of GPU g's request FIFO, to the switch on the next link toward its peer
    with room (round-robin), or wait for room."""
    rq = st.req[r]
    kind = rq.kind
    c, pkt, ready, done = multimem_packet(st, g, r, kind == REQ_MM_LD, kind == REQ_MM_RED, tick)
    if c < 0:
        return
    if done and kind != REQ_MM_LD:
        hub_post_store(st, g, rq)
    multimem_flits(st, g, pkt)
    hub_emit(st, g, r, c, pkt, ready, done, tick)
