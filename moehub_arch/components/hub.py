"""GPU hub: the per-GPU unit between the SMs and the NVLink ports (address-centric path).

Sender side: SMs submit remote operations (put, get, 8-byte store, fetch-and-add) as *requests*.
A request needs a free entry in the hub's request table (bounded: ``max_outstanding_requests``)
and room in its request FIFO (``request_queue_depth``); otherwise the issuing thread block stalls
and retries when space frees (back-pressure to the SM); an RDMA work request (a put, flag store or
atomic to a GPU of another node, with system.nic.work_requests: send_queue) is posted to its queue
pair's send queue instead of the FIFO, and the packetizer takes the FIFO and the NIC's pick among
the send queues in turn (nic.py, ``_two_paths``). A request holds its table entry until it
completes, except a multimem store (multimem.st, multimem.red, dymultimem.st): the PTX ISA gives
them the semantics of weak stores and reductions - nothing waits on one until a fence - so its entry
frees once its last packet is out, and only a tag (``posted_store_tags``: the header's tag its
responses name, Foley & Danskin, IEEE Micro 2017) and the thread block's count for the fence wait
for its write responses; with every tag in use it keeps its table entry until they are in. A load
(multimem.ld_reduce, a get) holds its entry until its data is back. Puts and flag stores keep
their entry until their responses are in (unchanged here). The packetizer emits one packet every
``1 / (clock * packets_per_cycle)``: it reads the payload from local HBM (charged on the HBM model),
picks an NVLink whose switch reaches the destination (round-robin among links with transmit-queue
room; if none has room the packetizer stalls) and queues the packet there.

Receiver side (hub_receive.py): an arriving packet is processed ``rx_latency`` after arrival: data
is written to HBM, stores and atomics are performed at memory, and each read request of a get is
answered with its own data (NVLink reads are split transactions: a responder sends the data of the
requests it has, never ahead of them); the gets being read take turns at the response FIFO's head,
one read request's data each, as reads from several requesters interleave at a responder.
Link credits are returned when the memory system has absorbed a write (l2.link_write: the HBM
channels finished the transfer, or the L2 took it with system.gpu.l2.link_writes = write_back) or
an atomic completed, so a slow memory throttles the link; the written data becomes visible to
readers (flag waiters) one HBM (or L2) access latency later. Completions travel back as responses:
write responses (ACK packets, header only), the read data for a get, and the old value for an atomic.

Packets and their responses (system.nvlink, packet.py): puts, flag stores and get data travel in
packets of at most `store_packet_bytes` (SM stores coalesced from 32 B sectors), a get sends one
header-only read request per data packet it asks for, and with `write_responses: per_packet`
(NVLink writes are non-posted: every write packet is answered by a header-only response on the
reverse path) the serving hub owes one response per write packet it absorbed and sends them as
they accrue (up to `run.packet_train` per ACK record); the requester retires the put when every
response is in. `per_request` sends a single response for the whole put once all its packets are
written (each packet carries its request's packet count in its header, so the receiver knows when
it has them all): the responses' bandwidth is then almost free. The last response of a request
leaves only when every write of it is visible in memory, so a fence that saw every response
orders later flags after the data.

Response path (system.nvlink.response_path): NVLink carries requests and responses in separate
virtual channels, so responses never wait behind requests and request/response protocols stay
deadlock-free (public NVLink/NVSwitch material; the MoE-Hub and DySHARP simulators model 8 request
+ 8 response channels, arXiv 2605.05888 / 2605.05607). With `separate` (default) responses are
made as they fall due, beside the request packetizer rather than in its slots (assumption: the
response path is never the bottleneck: it sends at most one response per packet received), and
they queue in each link's response channel (nvlink.response_queue_packets) with their own credits.
`shared` is the earlier model, kept for comparison: responses take the request packetizer's slots
(with priority) and queue in the links' request FIFOs behind requests - where each one also takes
a slot of the read-ahead that the transmit queues give puts.

Extensions send through the same request table, FIFO and packetizer: their request kinds
(packet.py ``REQ_*``) are turned into packets by the block that declares them (``Send``:
multimem in nvls_send.py, DySHARP's dymultimem in dysharp_isa.py, CAIS in cais/send.py), which
submit with ``hub_accept`` / ``hub_enqueue`` and hand each packet to ``hub_emit``; the run loop
dispatches the FIFO's head by kind (dispatch/loop.py), so this module holds the base protocol
only. The MoE-Hub control plane (moehub/: RPM, AAU, DAM) has a packetizer of its own and shares
the links and the receive path's link-level responses.

Data semantics: a put's (or get's) bytes are copied from the source memory when each packet is
delivered. As with NVSHMEM's non-blocking puts, a program must not modify a put's source buffer
before its ``fence``; within that contract this equals a snapshot at send time.
"""
from ..engine.bitset import bit_clear, bit_set, cyclic_next, words_for
from ..engine.jit import compiled, inline
from ..engine.ring import ring_add, ring_next

from ..engine.state import (RESP_KIND, RESP_READY, RESP_REQ, ROUTE_FIRST, ROUTE_N, ROUTE_RR,
                            WAIT_HUB, WAITLIST_HUB)
from .hbm import hbm_access
from .nvlink import txq_push
from .link_room import hold_gpu_departures, txq_settle
from .packet import request_records
from .packet import (PK_ACK, PK_ATOM_REQ, PK_ATOM_RESP, PK_GET_REQ, PK_GET_RESP,
                     PK_PUT, PK_STORE, REQ_ATOM, REQ_GET, REQ_PUT, REQ_STORE, VC_REQUEST,
                     VC_RESPONSE, header_flits, packet_alloc, packet_flits, store_packets)
from .read_data import read_data_send
from .trace import CAT_HUB, TR_HUB_RX, TR_HUB_TX, trace_event
from .wakeups import hub_kick, hub_kick_response, tb_resume
from .nic import (nic_overtake, nic_post, nic_queue_pair, nic_schedule, nic_served, nic_sq_done,
                  nic_sq_path_room, nic_sq_pick, nic_sq_room, nic_to_send_queue, rdma_message)
from ..engine.events import timer_set
from ..config.keys import key_param
from ..declare import (Array, Block, Debug, Event, Param, Receive, Record, Send, StatGroup, Timer,
                       counters, fields)

# the base protocol's request kinds (REQ_PUT, REQ_GET, REQ_STORE, REQ_ATOM) are packet.py's,
# beside the extensions'
RESP_ACK, RESP_GET_DATA, RESP_ATOM = range(3)
RESP_MM_ACK = 3   # a member's one write response to a multimem st/red (nvls.py)

EV_HUB_TX = 2        # a0 = GPU: the hub packetizer emits its next packet (its component timer)


def _hub_ticks(cycles_of):
    return lambda cfg: int(round(cycles_of(cfg.system.gpu.hub) * 1e12 / cfg.system.gpu.hub.clock))


def check_hub(sim, out):
    st = sim.state
    gp = st.gpu
    R = int(st.p[0].reqs_per_gpu)
    out.check(gp.free_top == R, f"hub request records not freed (of {R})",
              lambda g: f"system.gpu{g}.hub: {R - int(gp.free_top[g])} in use")
    out.empty(gp.req_table_used, "hub request-table entries not freed",
              lambda g: f"system.gpu{g}.hub", " in use")
    out.empty(gp.posted_stores, "posted multimem stores never answered",
              lambda g: f"system.gpu{g}.hub", " store(s)")
    hub = lambda g: f"system.gpu{g}.hub"   # noqa: E731
    out.empty(gp.reqq_count, "hub request FIFOs not empty", hub, " request(s)")
    out.empty(gp.respq_count, "hub response FIFOs not empty", hub, " response(s)")
    out.empty(gp.link_resp_total, "link-level write responses never sent", hub, " response(s)")


def check_received(sim, out):
    """Every packet a hub or its MoE-Hub RPM emitted was received by a hub (conservation over
    both senders, which share the receive path)."""
    gp = sim.state.gpu
    out.equal("packets received by the hubs vs emitted (hub + MoE-Hub RPM)",
              gp.hub_rx_packets.sum(), gp.hub_tx_packets.sum() + gp.rpm_packets.sum())
    out.equal("payload bytes received by the hubs vs emitted (hub + MoE-Hub RPM)",
              gp.hub_rx_payload.sum(), gp.hub_tx_payload.sum() + gp.rpm_payload.sum())


def hub_findings(sim):
    """Full hub tables and FIFOs, a blocked packetizer (the stuck-run report)."""
    st = sim.state
    R = int(st.p[0].req_table)
    out = []
    for g in range(int(st.p[0].num_gpus)):
        gp = st.gpu[g]
        hub = f"system.gpu{g}.hub"
        if int(gp.req_table_used) == R:
            tags = int(st.p[0].posted_tags)
            out.append(f"{hub}: request table full ({R} of {R} remote operations in flight; "
                       f"system.gpu.hub.max_outstanding_requests)"
                       + (f"; every posted-store tag in use too ({tags} multimem stores wait for "
                          f"write responses; system.gpu.hub.posted_store_tags)"
                          if tags and int(gp.posted_stores) == tags else ""))
        if int(gp.reqq_count) == st.reqq.shape[1]:
            out.append(f"{hub}: request FIFO full ({int(gp.reqq_count)} entries; "
                       f"system.gpu.hub.request_queue_depth)")
        if int(gp.respq_count):
            out.append(f"{hub}: {int(gp.respq_count)} response(s) queued")
        if gp.hub_blocked:
            out.append(f"{hub}: packetizer waiting for transmit-queue room on its links")
    return out


BLOCK = Block(
    "hub", __doc__.split("\n\n")[0],
    params=(
        Param("hub_ticks_per_packet", "system.gpu.hub.clock, system.gpu.hub.packets_per_cycle",
              "ps", "packetizer time per packet",
              lambda cfg: int(round(1e12 / (cfg.system.gpu.hub.clock
                                            * cfg.system.gpu.hub.packets_per_cycle))),
              "derived: 1 / (clock x packets_per_cycle)"),
        key_param("hub_tx_latency_ticks", "system.gpu.hub.tx_latency_cycles",
                  _hub_ticks(lambda h: h.tx_latency_cycles), "ps", "in ticks at the hub clock"),
        key_param("hub_rx_latency_ticks", "system.gpu.hub.rx_latency_cycles",
                  _hub_ticks(lambda h: h.rx_latency_cycles), "ps", "in ticks at the hub clock"),
        Param("reqs_per_gpu", "system.gpu.hub.max_outstanding_requests, "
              "system.gpu.hub.posted_store_tags, workload.multicast",
              "requests", "request records per GPU: the request table and the posted stores' tags",
              request_records, "derived: max_outstanding_requests, + posted_store_tags with "
              "multicast objects (packet.request_records)"),
        key_param("req_table", "system.gpu.hub.max_outstanding_requests"),
        key_param("posted_tags", "system.gpu.hub.posted_store_tags",
                  lambda cfg: request_records(cfg) - cfg.system.gpu.hub.max_outstanding_requests,
                  how="0 without multicast objects"),
    ),
    records=(Record("req", "remote operations in flight, reqs_per_gpu per GPU (request table and "
                    "posted multimem stores)"),),
    arrays=(Array("link_resp_owed", "per GPU, a bit set (engine/bitset.py) of the GPUs it owes "
                  "link-level responses (State.link_resp > 0): the next one owed is found without "
                  "scanning every GPU", lambda cfg: (cfg.system.num_gpus, words_for(cfg.system.num_gpus))),),
    fields=fields(
        "req", ("kind", "REQ_* above"), ("slot", "issuing TB slot"), ("src_gpu", "requester"),
        ("dst_gpu", "target GPU"), ("dst_addr", "target address"), ("src_addr", "source address"),
        ("length", "bytes"), ("sent", "bytes packetized"), ("resp_sent", "response bytes sent"),
        ("resp_pkts", "a get's data packets sent (serving hub): at most the read requests in"),
        ("resp_queued", "1: a get has an entry in the serving hub's response FIFO"),
        ("pkts_total", "packets (or trains) in all"), ("pkts_arrived", "packets arrived"),
        ("acks_total", "write responses to expect (requester)"),
        ("acks_due", "responses owed but not yet sent (serving hub)"),
        ("acks_arrived", "responses received (requester)"),
        ("acks_ready", "tick the owed responses may leave"),
        ("value", "store value, atomic operand or result"), ("ret_reg", "register for the result"),
        ("launch", "launch of the issuing TB (wire-byte stats)"),
        ("data_ready", "put.sm: tick the SM's loads deliver the payload (-1: the hub reads HBM)"),
        ("posted", "1: a multimem store that left the request table for a posted-store tag"),
        init={"data_ready": -1})
    + fields(
        "gpu", ("hub_next_tx", "tick of the packetizer's timer (-1: idle)"),
        ("hub_blocked", "1: the packetizer waits for transmit-queue room"),
        ("hub_blocked_since", "tick it started waiting"),
        ("hub_tb_waiters", "TBs stalled on a full hub (State.wait_list)"),
        ("hub_req_free", "tick from which the packetizer may emit the next request packet"),
        ("reqq_head", "request FIFO head"), ("reqq_count", "request FIFO occupancy"),
        ("respq_head", "response FIFO head"), ("respq_count", "response FIFO occupancy"),
        ("free_top", "free request records (stack top of State.free_reqs)"),
        ("req_table_used", "request-table entries in use (posted stores leave at their last "
         "packet)"), ("req_table_peak", ""),
        ("posted_stores", "multimem stores out of the table with responses due"),
        ("posted_peak", ""),
        ("hub_requests", ""), ("hub_tx_packets", ""), ("hub_tx_payload", ""),
        ("hub_rx_packets", ""), ("hub_rx_payload", ""), ("hub_stall_ticks", ""),
        ("hub_reqq_peak", ""), ("hub_respq_peak", ""),
        ("hub_rx_first", "arrival of the first data packet (-1: none)"),
        ("hub_rx_last", "arrival of the last data packet (-1: none)"), ("hub_acks", ""),
        ("link_resp_total", "link-level write responses owed (State.link_resp)"),
        ("link_resp_rr", "round-robin pointer over the GPUs owed responses"),
        init={"hub_next_tx": -1, "hub_rx_first": -1, "hub_rx_last": -1,
              "free_top": request_records}),
    stats=(StatGroup("gpu", "hub", counters((
        ("requests", "hub_requests", "count", "remote operations accepted from SMs"),
        ("tx_packets", "hub_tx_packets", "packets", "packets emitted by the packetizer"),
        ("tx_payload_bytes", "hub_tx_payload", "bytes", "payload bytes emitted"),
        ("rx_packets", "hub_rx_packets", "packets", "packets received"),
        ("rx_payload_bytes", "hub_rx_payload", "bytes", "payload bytes received"),
        ("stall_ticks", "hub_stall_ticks", "ps", "time the packetizer waited for link transmit-queue room"),
        ("request_queue_peak", "hub_reqq_peak", "entries", "peak occupancy of the request FIFO"),
        ("response_queue_peak", "hub_respq_peak", "entries", "peak occupancy of the response FIFO"),
        ("request_table_peak", "req_table_peak", "entries", "peak request-table occupancy "
         "(system.gpu.hub.max_outstanding_requests)"),
        ("posted_stores_peak", "posted_peak", "operations", "peak multimem stores out of the "
         "request table with write responses still due (system.gpu.hub.posted_store_tags)"),
        ("acks_received", "hub_acks", "count",
         "write responses received (one per write packet with system.nvlink.write_responses: "
         "per_packet, one per put or flag store with per_request)"),
        ("rx_first_tick", "hub_rx_first", "ps", "arrival of the first data packet (-1: none)"),
        ("rx_last_tick", "hub_rx_last", "ps", "arrival of the last data packet (-1: none)"),
    ))),),
    events=(Event("hub_tx", EV_HUB_TX, "the hub packetizer emits its next packet"),),
    timers=(Timer("hub", EV_HUB_TX, lambda cfg: cfg.system.num_gpus, "one per GPU: its packetizer"),),
    checks=(check_hub, check_received),
    findings=(hub_findings,),
    receives=(Receive((PK_PUT, PK_STORE, PK_GET_REQ, PK_GET_RESP, PK_ATOM_REQ, PK_ATOM_RESP, PK_ACK),
                      "components.hub_receive.hub_receive", "the base protocol: puts, stores, gets, "
                      "atomics and their responses"),),
    sends=(Send((REQ_PUT, REQ_GET, REQ_STORE, REQ_ATOM), "components.hub.hub_send",
                "the base protocol: puts, flag stores, gets and atomics"),),
    debug=(Debug("Hub", CAT_HUB, (TR_HUB_TX, TR_HUB_RX), describe={
        TR_HUB_TX: lambda n, g, kind, peer: (f"system.gpu{g}.hub",
                                             f"sends {n.packet_kind(kind)} to GPU {peer}"),
        TR_HUB_RX: lambda n, g, kind, peer: (f"system.gpu{g}.hub",
                                             f"receives {n.packet_kind(kind)} from GPU {peer}")}),),
)


@compiled
def hub_room(st, g):
    """True if GPU g's hub can accept a request now (a request-table entry and FIFO room; a free
    table entry implies a free record: records = table entries + posted-store tags)."""
    gp = st.gpu[g]
    return gp.req_table_used < st.p[0].req_table and gp.reqq_count < st.reqq.shape[1]


@compiled
def hub_room_for(st, g, kind, slot, dst_gpu):
    """True if GPU g's hub can accept a request of `kind` from TB `slot` to dst_gpu now: a
    request-table entry, and room in the request FIFO or - an RDMA work request with
    system.nic.work_requests: send_queue - a free slot of its queue pair's send queue (nic.py)."""
    if nic_to_send_queue(st, g, kind, dst_gpu):
        return (st.gpu[g].req_table_used < st.p[0].req_table
                and nic_sq_room(st, g, nic_queue_pair(st, slot, dst_gpu)))
    return hub_room(st, g)


@compiled
def hub_submit(st, g, kind, slot, dst_gpu, dst_addr, src_addr, nbytes, value, ret_reg, tick,
               data_ready):
    """Accept a remote operation of the base protocol (REQ_PUT, REQ_GET, REQ_STORE, REQ_ATOM)
    from TB `slot`; returns False (TB must retry) if the hub is full. `data_ready` >= 0: a put
    whose payload the SM's own loads deliver at that tick (put.sm: the hub reads no HBM); -1: the
    hub reads the source from HBM as it packetizes."""
    r = hub_accept(st, g, kind, slot, dst_gpu, dst_addr, src_addr, nbytes, value, ret_reg, tick,
                   data_ready)
    if r < 0:
        return False
    rq = st.req[r]
    if kind == REQ_PUT or kind == REQ_GET:
        mp = st.p[0].store_payload * st.p[0].packet_train   # one (train of) packet(s)
        rq.pkts_total = (nbytes + mp - 1) // mp
    else:
        rq.pkts_total = 1
    # write responses the requester waits for: one per link packet, or one per put
    # (a put to another node is an RDMA write: one completion per message, nic.rdma_message)
    if kind == REQ_PUT and st.p[0].write_resp_per_packet and not rdma_message(st, g, dst_gpu):
        rq.acks_total = store_packets(st, nbytes)
    else:
        rq.acks_total = 1
    hub_enqueue(st, g, r, tick)
    return True


@compiled
def hub_accept(st, g, kind, slot, dst_gpu, dst_addr, src_addr, nbytes, value, ret_reg, tick,
               data_ready):
    """Take a request record and a request-table entry for a remote operation of TB `slot`
    (hub_submit's arguments); -1 (the TB must retry) if the hub is full. The caller sets the
    record's pkts_total and acks_total (its kind's packets and the write responses it waits for)
    and queues it (hub_enqueue): how an extension (declare.Send) submits its request kinds."""
    gp = st.gpu[g]
    if not hub_room_for(st, g, kind, slot, dst_gpu):
        return -1
    gp.free_top -= 1
    r = st.free_reqs[g, gp.free_top]
    gp.req_table_used += 1
    if gp.req_table_used > gp.req_table_peak:
        gp.req_table_peak = gp.req_table_used
    rq = st.req[r]
    rq.kind = kind
    rq.slot = slot
    rq.src_gpu = g
    rq.dst_gpu = dst_gpu
    rq.dst_addr = dst_addr
    rq.src_addr = src_addr
    rq.length = nbytes
    rq.sent = 0
    rq.resp_sent = 0
    rq.resp_pkts = 0
    rq.resp_queued = 0
    rq.pkts_arrived = 0
    rq.acks_due = 0
    rq.acks_arrived = 0
    rq.acks_ready = 0
    rq.issued = tick      # a NIC's doorbell for it rings now (nic.py)
    rq.nic_qp = nic_queue_pair(st, slot, dst_gpu)
    rq.sq_held = 0        # nic_post sets it for a work request posted to its QP's send queue
    rq.value = value
    rq.ret_reg = ret_reg
    rq.data_ready = data_ready
    rq.posted = 0
    rq.cw_counter = -1   # a counted put: set by the SM after this (counted_write.py)
    rq.launch = st.tb[slot].launch
    return r


@compiled
def hub_enqueue(st, g, r, tick):
    """Queue the accepted request r (hub_accept) in GPU g's request FIFO - or post it to its queue
    pair's send queue, an RDMA work request with work_requests: send_queue (nic.py) - and wake the
    packetizer."""
    gp = st.gpu[g]
    rq = st.req[r]
    if nic_to_send_queue(st, g, rq.kind, rq.dst_gpu):
        nic_post(st, g, r)
        gp.hub_requests += 1
        hub_kick(st, g, tick)
        return
    st.reqq[g, ring_add(gp.reqq_head, gp.reqq_count, st.reqq.shape[1])] = r
    gp.reqq_count += 1
    if gp.reqq_count > gp.hub_reqq_peak:
        gp.hub_reqq_peak = gp.reqq_count
    gp.hub_requests += 1
    hub_kick(st, g, tick)


@compiled
def hub_respond(st, g, r, resp_kind, ready):
    """Queue a response (ACK, read data, atomic result) for request r at the serving hub g."""
    gp = st.gpu[g]
    entry = st.respq[g, ring_add(gp.respq_head, gp.respq_count, st.respq.shape[1])]
    entry[RESP_REQ] = r
    entry[RESP_KIND] = resp_kind
    entry[RESP_READY] = ready
    gp.respq_count += 1
    if gp.respq_count > gp.hub_respq_peak:
        gp.hub_respq_peak = gp.respq_count
    hub_kick_response(st, g, ready)


@compiled
def pick_channel(st, g, dst, advance):
    """Round-robin over GPU g's links toward dst that have request-channel transmit-queue room;
    -1 if none. `advance`: move the round-robin pointer past the chosen link (when a packet is
    queued)."""
    return pick_channel_vc(st, g, dst, advance, VC_REQUEST)


@compiled
def pick_channel_vc(st, g, dst, advance, vc):
    """pick_channel for virtual channel vc (VC_REQUEST, or VC_RESPONSE for responses)."""
    p = st.p[0]
    route = st.gpu_routes[g * p.num_gpus + dst]
    n = route[ROUTE_N]
    j = route[ROUTE_RR]              # the round-robin pointer: always < n (it wraps here only)
    for _ in range(n):
        c = route[ROUTE_FIRST + j]
        j += 1                       # (rr + k + 1) % n, counted: no division per candidate
        if j == n:
            j = 0
        # link_room.txq_room, written out (the departure of a packet sent ahead, then the
        # room): a call per candidate link (it was not inlined) was most of this function's
        # time, and this runs once per packet sent
        txq_settle(st, c)
        ch = st.ch[c]
        if vc == VC_RESPONSE:
            room = ch.rsq_pkts + p.packet_train <= ch.rsq_cap
        else:
            room = ch.txq_pkts + p.packet_train <= ch.txq_cap
        if room:
            if advance:
                route[ROUTE_RR] = j
            return c
    return -1


@compiled
def _response_vc(st):
    """The virtual channel responses leave in (packet.packet_vc)."""
    return VC_RESPONSE if st.p[0].response_vc else VC_REQUEST


@compiled
def hub_request_packet(st, r, g, dst):
    """A fresh packet from GPU g to GPU dst for request r (its request or response packets alike),
    addressed at the request's destination address; the caller sets kind and payload."""
    pkt = packet_alloc(st)
    pk = st.pk[pkt]
    pk.req = r
    pk.src = g
    pk.dst = dst
    pk.value = 0
    pk.addr = st.req[r].dst_addr
    pk.src_addr = 0
    return pkt


@compiled
def hub_wait_for_room(st, g, tick):
    """No link toward the packet's destination has queue room: wait for a dequeue."""
    hold_gpu_departures(st, g)   # packets sent ahead on its links wake it when they depart
    gp = st.gpu[g]
    gp.hub_blocked = 1
    gp.hub_blocked_since = tick


@inline
def hub_packetize(st, g, tick):
    """EV_HUB_TX: emit the next response (priority), or return the request at the FIFO's head
    whose next packet may go now (-1: none may), for the run loop to hand to the packetizer of its
    kind (declare.Send: hub_send here for the base protocol; dispatch/loop.py).

    The request packetizer emits one packet per `hub_ticks_per_packet` (gp.hub_req_free).
    With nvlink.response_path: separate, responses take the response path: they are made as
    they become due, whatever the request packetizer is doing, and queue in the links'
    response channels (a full response channel does not stop requests, nor the reverse). With
    `shared` they go through the request packetizer (and its rate) and the request queues."""
    gp = st.gpu[g]
    if gp.hub_next_tx != tick:
        return -1  # superseded by an earlier activation
    gp.hub_next_tx = -1
    p = st.p[0]
    if gp.hub_blocked and gp.sq_wake >= 0:
        # the requests wait for link room and a work request's payload may be pulled at sq_wake
        # (_two_paths): keep that wake armed, or at it look again
        if gp.sq_wake > tick:
            _arm_sq_wake(st, g)
        else:
            gp.hub_blocked = 0
            gp.hub_stall_ticks += tick - gp.hub_blocked_since
            gp.sq_wake = -1
    separate = p.response_vc != 0
    if not separate and gp.hub_req_free > tick:
        hub_kick(st, g, gp.hub_req_free)
        return -1
    sent = _send_response(st, g, tick)
    if sent > 0:
        if not separate:
            gp.hub_req_free = tick + sent * p.hub_ticks_per_packet
            if _responses_pending(gp) or gp.reqq_count > 0 or gp.sq_count > 0:
                hub_kick(st, g, gp.hub_req_free)
        elif _responses_pending(gp):
            hub_kick_response(st, g, tick)
        elif gp.reqq_count > 0 or gp.sq_count > 0:
            hub_kick(st, g, tick)
        return -1
    if sent < 0 and not separate:
        hub_wait_for_room(st, g, tick)   # responses first: wait for room for the head response
        return -1
    if gp.hub_blocked:
        return -1      # (separate: woken for a response) requests still wait for a dequeue
    gp.sq_wake = -1
    if gp.reqq_count == 0 and gp.sq_count == 0:
        if sent < 0:
            hub_wait_for_room(st, g, tick)
        return -1
    if gp.hub_req_free > tick:
        hub_kick(st, g, gp.hub_req_free)
        return -1
    if gp.sq_count > 0:
        return _two_paths(st, g, tick)
    if p.nic_qp_round_robin:
        nic_schedule(st, g, tick)   # the NIC's send scheduler picks the RDMA message served next
    t_dma = nic_overtake(st, g, tick)
    if t_dma > tick:
        hub_kick(st, g, t_dma)      # the NIC pulls the payload after its doorbell (nic.py)
        return -1
    return st.reqq[g, gp.reqq_head]


@compiled
def _arm_sq_wake(st, g):
    """Arm GPU g's packetizer timer for its DMA wake (gp.sq_wake) unless it is armed earlier:
    hub_kick does nothing while the hub waits for link room, and this wake must still come."""
    gp = st.gpu[g]
    if gp.hub_next_tx < 0 or gp.sq_wake < gp.hub_next_tx:
        gp.hub_next_tx = gp.sq_wake
        timer_set(st, st.p[0].tm_hub + g, gp.sq_wake)


@compiled
def _fifo_head_room(st, g, r):
    """Whether the request FIFO's head r may give a packet now as far as its link is concerned: a
    base-protocol request to another GPU needs request transmit-queue room toward it; other kinds
    (the extensions') find out in their own packetizers."""
    rq = st.req[r]
    k = rq.kind
    if (k == REQ_PUT or k == REQ_GET or k == REQ_STORE or k == REQ_ATOM) and rq.dst_gpu != g:
        return nic_sq_path_room(st, g, r)
    return True


@compiled
def _two_paths(st, g, tick):
    """The hub's next packet when RDMA work requests wait in GPU g's send queues (nic.py): the
    NIC's pick among its queue pairs (nic_sq_pick) and the request FIFO's head (the NVLink path)
    take turns when both may go; a path whose link has no room, or whose work requests' payload
    may not be pulled yet, leaves its turn to the other. If neither may go, the packetizer waits
    for link room (and for the first work request's DMA start, gp.sq_wake), or only for that."""
    gp = st.gpu[g]
    t_dma = nic_sq_pick(st, g, tick)
    rs = st.sqq[g, gp.sq_head]
    rd_room = t_dma == 0 and nic_sq_path_room(st, g, rs)
    rn = st.reqq[g, gp.reqq_head] if gp.reqq_count > 0 else -1
    nv_room = rn >= 0 and _fifo_head_room(st, g, rn)
    if rd_room and nv_room:
        if gp.sq_turn != 0:
            gp.sq_turn = 0
            return rs
        gp.sq_turn = 1
        return rn
    if rd_room:
        return rs
    if nv_room:
        return rn
    if t_dma == 0 or rn >= 0:
        hub_wait_for_room(st, g, tick)   # a departure on one of its links wakes it
        if t_dma > tick:
            gp.sq_wake = t_dma
            _arm_sq_wake(st, g)
    else:
        hub_kick(st, g, t_dma)           # the NIC pulls the payload after its doorbell
    return -1


@inline
def hub_send(st, g, r, tick):
    """Emit the next packet of request r, the head of GPU g's request FIFO, of the base protocol
    (declare.Send): a put's next data packet (train), a flag store, a get's next read requests
    (header only, one per data packet asked for), an atomic."""
    p = st.p[0]
    gp = st.gpu[g]
    rq = st.req[r]
    dst = rq.dst_gpu
    kind = rq.kind
    c = pick_channel_vc(st, g, dst, True, VC_REQUEST)
    if c < 0:
        hub_wait_for_room(st, g, tick)
        return  # a dequeue on one of our links wakes us
    pkt = hub_request_packet(st, r, g, dst)
    pk = st.pk[pkt]
    ready = tick
    done = False
    if kind == REQ_PUT:
        pk.kind = PK_PUT
        pk.value = rq.value     # 1: a near-memory update (put.add.bf16), 0: a plain write
        pk.cw_counter = rq.cw_counter   # >= 0: a counted put's counter (counted_write.py)
        ready = hub_data_packet(st, g, pk, rq, rq.sent, tick)
        rq.sent += pk.payload
        done = rq.sent == rq.length
    elif kind == REQ_STORE:
        pk.kind = PK_STORE
        pk.payload = 8
        pk.value = rq.value
        done = True
    elif kind == REQ_GET:
        # one header-only read request per data packet asked for (rq.sent counts them),
        # up to packet_train per record
        pk.kind = PK_GET_REQ
        pk.payload = 0
        pk.npk = min(store_packets(st, rq.length) - rq.sent, p.packet_train)
        rq.sent += pk.npk
        done = rq.sent == store_packets(st, rq.length)
    else:   # REQ_ATOM
        pk.kind = PK_ATOM_REQ
        pk.payload = 8
        pk.value = rq.value
        done = True
    if kind == REQ_GET:
        pk.flits = pk.npk * header_flits(st)   # header-only packets
    else:
        pk.flits, pk.npk = packet_flits(st, pk.payload, p.store_payload)
    gp.hub_tx_packets += pk.npk
    gp.hub_tx_payload += pk.payload
    hub_emit(st, g, r, c, pkt, ready, done, tick)


@compiled
def hub_emit(st, g, r, c, pkt, ready, done, tick):
    """Send packet pkt of request r (made by its kind's packetizer, declare.Send: kind, payload,
    flits and its own counters set; `ready`: when its data is) on GPU g's channel c: `done`, the
    request's last packet, leaves the FIFO; the packetizer's next slot is one packet time per
    link packet later."""
    p = st.p[0]
    gp = st.gpu[g]
    rq = st.req[r]
    pk = st.pk[pkt]
    if done:
        if gp.sq_count > 0 and st.sqq[g, gp.sq_head] == r and rq.sq_held != 0:
            nic_sq_done(st, g)   # its send-queue slot stays held until its completion
        else:
            gp.reqq_head = ring_next(gp.reqq_head, st.reqq.shape[1])
            gp.reqq_count -= 1
            wake_hub_waiters(st, g, tick)
    if rq.launch >= 0:
        # wire bytes per kernel (dispatch_link_efficiency); responses serve another GPU's kernel
        st.ln[rq.launch].tx_wire += pk.flits * p.flit_bytes
    pk.ready = ready + p.hub_tx_latency_ticks
    trace_event(st, CAT_HUB, TR_HUB_TX, g, pk.kind, rq.dst_gpu, tick)
    txq_push(st, c, pkt, tick)
    if p.nic_qp_round_robin:
        nic_served(st, g, r)
    gp.hub_req_free = tick + pk.npk * p.hub_ticks_per_packet
    if gp.reqq_count > 0 or gp.sq_count > 0 or _responses_pending(gp):
        hub_kick(st, g, gp.hub_req_free)


@compiled
def _responses_pending(gp):
    """Responses of any kind wait at hub gp (link-level, the response FIFO, multimem read data)."""
    return gp.link_resp_total > 0 or gp.respq_count > 0 or gp.mm_rdq_count > 0


@compiled
def _send_response(st, g, tick):
    """Emit one response record if one is due: link-level responses owed to MoE-Hub streams
    first, then the head of the response FIFO. Returns the link packets sent (> 0), 0 if none
    is due (a later one kicks the hub when it is), -1 if no link toward its destination has
    room in the responses' virtual channel."""
    gp = st.gpu[g]
    if gp.link_resp_total > 0:
        return _send_link_responses(st, g, tick)
    mm = read_data_send(st, g, tick)   # a switch's read (NVLS, DySHARP, CAIS), answered (read_data.py)
    if mm > 0:
        return mm
    if gp.respq_count == 0:
        return mm
    head_ready = st.respq[g, gp.respq_head, RESP_READY]
    if st.respq[g, gp.respq_head, RESP_KIND] == RESP_ACK:
        head_ready = max(head_ready, _final_ack_ready(st, st.respq[g, gp.respq_head, RESP_REQ]))
    if head_ready > tick:
        hub_kick_response(st, g, head_ready)
        return mm
    p = st.p[0]
    r = st.respq[g, gp.respq_head, RESP_REQ]
    rq = st.req[r]
    dst = rq.src_gpu
    c = pick_channel_vc(st, g, dst, True, _response_vc(st))
    if c < 0:
        return -1
    pkt = hub_request_packet(st, r, g, dst)
    pk = st.pk[pkt]
    ready = tick
    kind = st.respq[g, gp.respq_head, RESP_KIND]
    requeue = False
    if kind == RESP_GET_DATA:
        # the data of one read request (record); then the get leaves the FIFO's head: to its
        # tail while read requests of it wait for their data (the gets being read take turns,
        # as read requests from several requesters interleave at a responder), out of the FIFO
        # until its next read request arrives otherwise (hub_receive)
        pk.kind = PK_GET_RESP
        ready = hub_data_packet(st, g, pk, rq, rq.resp_sent, tick)
        rq.resp_sent += pk.payload
        pk.flits, pk.npk = packet_flits(st, pk.payload, p.store_payload)
        rq.resp_pkts += pk.npk
        done = True
        requeue = rq.resp_sent < rq.length and rq.resp_pkts < rq.acks_arrived
        if not requeue:
            rq.resp_queued = 0
    elif kind == RESP_MM_ACK:
        pk.kind = PK_ACK
        pk.payload = 0
        pk.npk = 1
        done = True
        pk.flits = header_flits(st)
    elif kind == RESP_ATOM:
        pk.kind = PK_ATOM_RESP
        pk.payload = 8
        pk.value = rq.value
        done = True
        pk.flits, pk.npk = packet_flits(st, pk.payload, p.store_payload)
    else:
        # write responses owed so far (a train of up to packet_train)
        pk.kind = PK_ACK
        pk.payload = 0
        pk.npk = min(rq.acks_due, p.packet_train)
        rq.acks_due -= pk.npk
        done = rq.acks_due == 0
        pk.flits = pk.npk * header_flits(st)   # header-only packets
    if done:
        gp.respq_head += 1           # the FIFO's ring wraps (a compare, not a division)
        if gp.respq_head == st.respq.shape[1]:
            gp.respq_head = 0
        gp.respq_count -= 1
    if requeue:
        hub_respond(st, g, r, RESP_GET_DATA, tick)
    pk.ready = ready + p.hub_tx_latency_ticks
    gp.hub_tx_packets += pk.npk
    gp.hub_tx_payload += pk.payload
    trace_event(st, CAT_HUB, TR_HUB_TX, g, pk.kind, dst, tick)
    txq_push(st, c, pkt, tick)
    return pk.npk


@compiled
def owe_link_responses(st, g, dst, n, tick):
    """GPU g received `n` write packets from GPU `dst` that no hub request tracks (MoE-Hub stream
    packets: the RPM-AAU protocol does its own completion): with write_responses: per_packet the
    link still answers each with a header-only response, which costs the reverse path the same
    as the address-centric path's ACKs."""
    if not st.p[0].write_resp_per_packet or rdma_message(st, g, dst):
        return      # (an RDMA stream from another node: its NIC acknowledges, no link response)
    gp = st.gpu[g]
    st.link_resp[g, dst] += n
    bit_set(st.link_resp_owed[g], dst)
    gp.link_resp_total += n
    hub_kick_response(st, g, tick)


@compiled
def _send_link_responses(st, g, tick):
    """Emit one record of owed link-level responses (up to packet_train) toward the next
    destination that is owed some (round-robin); returns the packets sent, or -1 if no link
    toward it has room in the responses' virtual channel."""
    p = st.p[0]
    gp = st.gpu[g]
    G = p.num_gpus
    # the first GPU owed responses in round-robin order from link_resp_rr (if none is, which the
    # callers rule out, the last one looked at, as a scan of every GPU would end)
    k = cyclic_next(st.link_resp_owed[g], gp.link_resp_rr, 0, G)
    dst = gp.link_resp_rr + min(k, G - 1)      # (rr + k) % G: rr < G, so one wrap at most
    if dst >= G:
        dst -= G
    c = pick_channel_vc(st, g, dst, True, _response_vc(st))
    if c < 0:
        return -1  # a dequeue on one of our links wakes us
    gp.link_resp_rr = dst + 1 if dst + 1 < G else 0
    n = min(st.link_resp[g, dst], p.packet_train)
    st.link_resp[g, dst] -= n
    if st.link_resp[g, dst] == 0:
        bit_clear(st.link_resp_owed[g], dst)
    gp.link_resp_total -= n
    pkt = packet_alloc(st)
    pk = st.pk[pkt]
    pk.kind = PK_ACK
    pk.req = -1          # no request: the receiver only counts it
    pk.src = g
    pk.dst = dst
    pk.value = 0
    pk.addr = 0
    pk.src_addr = 0
    pk.payload = 0
    pk.npk = n
    pk.flits = n * header_flits(st)
    pk.ready = tick + p.hub_tx_latency_ticks
    gp.hub_tx_packets += n
    trace_event(st, CAT_HUB, TR_HUB_TX, g, pk.kind, dst, tick)
    txq_push(st, c, pkt, tick)
    return n


@compiled
def hub_data_packet(st, g, pk, rq, off, tick):
    """Fill pk with the next chunk (from byte `off`) of a put or get response; the payload is read
    from local HBM: returns when it is ready to send."""
    n = min(rq.length - off, st.p[0].store_payload * st.p[0].packet_train)
    pk.addr = rq.dst_addr + off
    pk.src_addr = rq.src_addr + off
    pk.payload = n
    if rq.data_ready >= 0:
        return max(tick, rq.data_ready)   # SM stores: the data comes from the SM's registers
    return hbm_access(st, g, pk.src_addr, n, tick, False)


@compiled
def wake_hub_waiters(st, g, tick):
    """Request-table or FIFO space freed: TBs stalled on the hub retry their instruction (in the
    order they stalled)."""
    gp = st.gpu[g]
    n = gp.hub_tb_waiters
    gp.hub_tb_waiters = 0
    for i in range(n):
        tb_resume(st, st.wait_list[g, WAITLIST_HUB, i], tick, WAIT_HUB)


@compiled
def hub_post_store(st, g, rq):
    """A multimem store's (st, red, dymultimem.st: a weak store in the PTX ISA's memory model)
    last packet left GPU g's hub: with a posted-store tag free it gives back
    its request-table entry and keeps only its record (the tag its write responses name) until they
    are in; with every tag in use it stays in the table until then, as a load does."""
    gp = st.gpu[g]
    if gp.posted_stores >= st.p[0].posted_tags:
        return
    rq.posted = 1
    gp.req_table_used -= 1
    gp.posted_stores += 1
    if gp.posted_stores > gp.posted_peak:
        gp.posted_peak = gp.posted_stores


@compiled
def _final_ack_ready(st, r):
    """When the next ACK record of request r may leave its serving hub: at once, unless it is the
    last one (every data packet is in and it carries the last owed responses); that one waits
    until every write of the request is visible, so the requester's fence (which completes on
    it) orders its later flags after the data. The gate is applied before the record is made,
    so a waiting response never sits at the head of a link's transmit FIFO."""
    rq = st.req[r]
    if rq.pkts_arrived == rq.pkts_total and rq.acks_due <= st.p[0].packet_train:
        return rq.acks_ready
    return 0


@compiled
def atomic_ticks(st):
    """The atomic unit's read-modify-write time (SM cycles) in ticks."""
    p = st.p[0]
    return (p.hbm_atomic_cycles * p.sm_period_fs + 999) // 1000
