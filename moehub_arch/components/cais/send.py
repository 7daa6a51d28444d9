"""CAIS's requests as the hub sends them: ld.cais, red.cais and sync.cais lines to the switch.

The hub's request table and FIFO hold them as request kinds REQ_CAIS_LD, REQ_CAIS_RED and
REQ_CAIS_SYNC (packet.py; isa.py submits them). A load or a reduction is one request line per
merge-table entry (at most a store packet: never a train) and goes up the link whose switch the
line's address hashes to (gpu.cais_uplink: the same switch from every GPU, so one merge unit
sees the group's requests for that line): a load line is header only (PK_CAIS_LD, pk.value the
bytes asked), a reduction line carries its contribution read from HBM (PK_CAIS_RED). The home
answers each reduction line's write once. A sync is one header-only arrival (PK_CAIS_SYNC) at the
switch the flag's address picks, behind every request this GPU issued before it (the FIFO); the
switch's release completes it. `cais_send` is the packetizer of these kinds (the package's BLOCK
declares it, ``Send``; the run loop calls it for the FIFO's head).
"""
from ...engine.jit import compiled
from ..hbm import hbm_access
from ..hub import hub_accept, hub_emit, hub_enqueue, hub_request_packet, hub_wait_for_room
from ..packet import (PK_CAIS_LD, PK_CAIS_RED, PK_CAIS_SYNC, REQ_CAIS_LD, REQ_CAIS_RED,
                      REQ_CAIS_SYNC, header_flits, packet_flits)
from .gpu import cais_request_line, cais_uplink


@compiled
def cais_submit(st, g, kind, slot, home, dst, src, nbytes, value, tick):
    """Hand a CAIS request (REQ_CAIS_*: value = group x 16 + element type) of TB `slot` to GPU g's
    hub; False if the hub is full (the TB retries)."""
    r = hub_accept(st, g, kind, slot, home, dst, src, nbytes, value, 0, tick, -1)
    if r < 0:
        return False
    rq = st.req[r]
    if kind == REQ_CAIS_SYNC:
        rq.pkts_total = 1   # one header-only arrival; the switch's release completes it
    else:
        # one request line per merge-table entry: never a packet train
        rq.pkts_total = (nbytes + st.p[0].store_payload - 1) // st.p[0].store_payload
    if kind == REQ_CAIS_RED:
        rq.acks_total = rq.pkts_total   # the home answers each line's write once
    else:
        rq.acks_total = 1
    hub_enqueue(st, g, r, tick)
    return True


@compiled
def cais_send(st, g, r, tick):
    """The packetizer of REQ_CAIS_LD, REQ_CAIS_RED and REQ_CAIS_SYNC (declare.Send): the next
    request line of request r, the head of GPU g's request FIFO (addr: the address at the home),
    or its sync arrival, on the link whose switch the address picks; or wait for room there."""
    rq = st.req[r]
    kind = rq.kind
    dst = rq.dst_gpu
    if kind == REQ_CAIS_SYNC:
        c = cais_uplink(st, g, dst, rq.dst_addr)   # the flag's address picks the switch
    else:
        c = cais_uplink(st, g, dst, (rq.src_addr if kind == REQ_CAIS_LD else rq.dst_addr) + rq.sent)
    if c < 0:
        hub_wait_for_room(st, g, tick)
        return  # a dequeue on one of our links wakes us
    pkt = hub_request_packet(st, r, g, dst)
    pk = st.pk[pkt]
    gp = st.gpu[g]
    ready = tick
    pk.mm_obj = rq.value // 16
    pk.mm_entry = -1
    pk.npk = 1
    if kind == REQ_CAIS_SYNC:
        pk.kind = PK_CAIS_SYNC
        pk.addr = rq.dst_addr
        pk.src_addr = 0
        pk.payload = 0
        pk.value = rq.src_addr
        done = True
    else:
        n = cais_request_line(st, rq, rq.sent)
        pk.mm_dtype = rq.value % 16
        if kind == REQ_CAIS_LD:
            pk.kind = PK_CAIS_LD
            pk.addr = rq.src_addr + rq.sent
            pk.src_addr = rq.dst_addr + rq.sent
            pk.payload = 0
            pk.value = n
        else:
            pk.kind = PK_CAIS_RED
            pk.addr = rq.dst_addr + rq.sent
            pk.src_addr = rq.src_addr + rq.sent
            pk.payload = n
            ready = hbm_access(st, g, pk.src_addr, n, tick, False)
        rq.sent += n
        done = rq.sent == rq.length
    if kind == REQ_CAIS_RED:
        pk.flits, pk.npk = packet_flits(st, pk.payload, st.p[0].store_payload)
        gp.cais_red_tx += 1
    else:
        pk.flits = pk.npk * header_flits(st)   # header-only packets
        if kind == REQ_CAIS_LD:
            gp.cais_ld_tx += 1
        else:
            gp.cais_sync_tx += 1
    hub_emit(st, g, r, c, pkt, ready, done, tick)
