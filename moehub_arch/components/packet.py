"""Link-level packets: a fixed pool (no allocation in the run loop), the packet kinds, and what a
packet costs on the wire (the one place every sender - hub, RPM - asks).

Wire format (NVLink as the public material describes it: Foley & Danskin, "Ultra-Performance
Pascal GPU and NVLink Interconnect", IEEE Micro 37(2), 2017; the MoE-Hub/DySHARP/CAIS simulators,
arXiv 2605.05888 / 2605.05607 / 2605.05628): a packet is a header flit (request type, address,
flow-control credits, tag, CRC and the data-link sequence/acknowledge fields all ride in it, so
credits and CRC add no flits) followed by its payload in whole flits. SM stores reach the link as
32 B sectors coalesced into packets of at most `nvlink.store_packet_bytes` (128 B: the seeds'
simulators), which the hub's address-centric path uses for puts, flag stores and remote-read data
(`store_payload` = that size capped at the link's `max_payload_bytes`). Header-only packets -
read requests and write responses - are `header_flits` each.

Packet trains (run.packet_train = k > 1, a documented approximation): a put's or a stream's
consecutive full packets travel as one simulated packet of up to k packets (`npk` counts them).
Link serialisation, header and flit overhead, credits and every byte and packet statistic are the
same as for k separate packets; what is approximated is that a train moves through each hop as a
unit (store-and-forward of the whole train, one arbitration decision per train). Per-packet
simulation (k = 1, the default) is exact; tools/bench.py measures the error of k > 1.

The pool is sized by the builder to the number of packets the fabric can hold at once (every
transmit queue full plus every receive buffer full), so allocation never fails: a packet that has no
room to go anywhere waits upstream (back-pressure), it is never dropped.
"""
from ..engine.jit import compiled
from ..declare import Block, Packet, Record, Request, Stat, StatGroup, fields


def request_records(cfg):
    """Hub request records per GPU: the request table (system.gpu.hub.max_outstanding_requests)
    plus, when the workload has multicast objects, the tags of multimem stores that left the table
    once their last packet was out and whose write responses are still due
    (system.gpu.hub.posted_store_tags: a packet's header carries the tag its response names)."""
    hub = cfg.system.gpu.hub
    return hub.max_outstanding_requests + (hub.posted_store_tags if cfg.workload.multicast else 0)

PK_PUT = 0        # write data (payload) to pk.addr at the destination
PK_STORE = 1      # 8-byte store of pk.value (flag.set)
PK_GET_REQ = 2    # read request (header only); the destination streams PK_GET_RESP back
PK_GET_RESP = 3   # read data returning to the requester
PK_ATOM_REQ = 4   # fetch-and-add of pk.value at pk.addr
PK_ATOM_RESP = 5  # old value returning to the requester
PK_ACK = 6        # write completion returning to the writer (header only)
PK_MOE = 7        # MoE-Hub stream bytes [pk.addr, pk.addr + payload) of stream pk.src -> pk.dst
PK_MOE_EOS = 8    # MoE-Hub end of stream; pk.value = the stream's total bytes (header only)
# NVLink SHARP (components/nvls.py): multimem operations through the switch's engine
PK_MM_ST = 9      # multimem.st / red data, source GPU -> switch (the switch multicasts it)
PK_MM_COPY = 10   # one multicast copy, switch -> member (written, or added, at pk.addr)
PK_MM_LD = 11     # multimem.ld_reduce request, source GPU -> switch (header only)
PK_MM_READ = 12   # the switch's read of one member's values, switch -> member (header only)
PK_MM_DATA = 13   # a member's values, member -> switch (response channel; reduced there)
PK_MM_RESULT = 14  # the reduced values, switch -> source GPU (response channel)
# CAIS (components/cais/): merged loads and reductions in the switch's merge unit
PK_CAIS_LD = 15     # ld.cais request, GPU -> switch (header only; pk.value = bytes asked)
PK_CAIS_RED = 16    # red.cais contribution, GPU -> switch (data)
PK_CAIS_DATA = 17   # the home's data for a merged load, home -> switch (response channel)
PK_CAIS_READ = 18   # the merge unit's one read of a load's line, switch -> home (header only)
PK_CAIS_REPLY = 19  # a merged load's data, switch -> each GPU that asked (response channel)
PK_CAIS_WRITE = 20  # a merged (or evicted, timed-out) partial sum, switch -> home (data)
PK_CAIS_SYNC = 21   # sync.cais arrival of a thread block, GPU -> switch (header only; addr = flag)
PK_CAIS_GO = 22     # the group sync table's release, switch -> each member (response channel;
                    # writes pk.value to the flag at pk.addr)
# Request kinds of the hub's request table and FIFO (State.req.kind): what an SM asked the hub to
# send. The base protocol's (hub.py) and each extension's, sent by the block that declares them
# (declare.Send: a block's packetizer for its kinds; the run loop's dispatch by kind is generated
# from them). A block may own kinds of its own (declare.Request, as switch_counter.py does).
REQ_PUT, REQ_GET, REQ_STORE, REQ_ATOM = range(4)
REQ_MM_ST, REQ_MM_RED, REQ_MM_LD = 4, 5, 6   # multimem st / red / ld_reduce (nvls_send.py); value =
                                              # multicast object x 16 + element type
REQ_DY_ST, REQ_DY_LD = 7, 8   # DySHARP dymultimem st / ld_reduce (dysharp_isa.py): as REQ_MM_ST /
                              # REQ_MM_LD, with the target list staged by the SM
REQ_CAIS_LD, REQ_CAIS_RED = 9, 10   # ld.cais / red.cais (cais/send.py); value = group x 16 + element type
REQ_CAIS_SYNC = 11   # sync.cais (cais/send.py): dst_addr = the flag, src_addr = the value released
_REQUEST_NAMES = ("put", "get", "store", "atomic", "multimem.st", "multimem.red",
                  "multimem.ld_reduce", "dymultimem.st", "dymultimem.ld_reduce", "ld.cais",
                  "red.cais", "sync.cais")
VC_REQUEST = 0    # virtual channels (nvlink.response_path): requests and writes ...
VC_RESPONSE = 1   # ... and the responses that complete them (write responses, read data, atomics)
# (packet_vc returns a kind's bit of the composed mask: VC_RESPONSE must be 1)
_PACKET_NAMES = ("put", "store", "get_req", "get_resp", "atom_req", "atom_resp", "ack", "moe",
                 "moe_eos", "mm_st", "mm_copy", "mm_ld", "mm_read", "mm_data", "mm_result",
                 "cais_ld", "cais_red", "cais_data", "cais_read", "cais_reply", "cais_write",
                 "cais_sync", "cais_go")
_RESPONSES = (PK_ACK, PK_GET_RESP, PK_ATOM_RESP, PK_MM_DATA, PK_MM_RESULT, PK_CAIS_DATA,
              PK_CAIS_REPLY, PK_CAIS_GO)


def packets_in_use(st):
    """Pool entries allocated and not freed (0 at the end of a run: check_pool)."""
    return int(st.sys[0].pk_fresh) - int(st.sys[0].pk_top)


def check_pool(sim, out):
    pool = sim.state.pk_free.shape[0]
    out.equal("packets still allocated (pool entries free at the end, of "
              f"{pool})", pool - packets_in_use(sim.state), pool)


BLOCK = Block(
    "packets", "the packet pool every sender allocates from (this module)",
    records=(Record("pk", "link packets in flight (pool entries; State.pk_free: the freed ones)",
                    cache_lines=True),),
    # the first eight fields are what every hop reads (link transmit and arrival, switch
    # routing): one cache line per packet per hop (Record.cache_lines)
    fields=fields("pk", ("kind", "PK_* above"),
                  ("npk", "link packets it stands for (1, or a train: run.packet_train)"),
                  ("flits", "flits on the wire (header + payload)"),
                  ("wire", "bytes it took on the wire of its last link (the receiver counts "
                           "them; link_class.py)"),
                  ("ready", "tick from which it may leave (its payload is read)"),
                  ("payload", "payload bytes"), ("src", "source GPU"), ("dst", "destination GPU"),
                  ("req", "hub request it belongs to (-1: none)"),
                  ("addr", "destination address (MoE-Hub: stream offset)"),
                  ("src_addr", "source address of the payload"),
                  ("value", "store value, atomic operand or result, EOS stream size"))
    + fields("sys", ("pk_top", "free-stack top: freed pool entries waiting to be reused"),
             ("pk_fresh", "pool entries handed out at least once (the next never-used one)"),
             ("pk_peak", "peak packets in flight")),
    stats=(StatGroup("system", "packets", (
        Stat("pool_peak", "packets", "peak packets in flight", lambda i: i.st.sys[0].pk_peak),)),),
    checks=(check_pool,),
    # the kinds of the base protocol, MoE-Hub, NVLS and CAIS (their comments above); a block may
    # declare kinds of its own, numbered after these (declare.Packet, declare.Request)
    packets=tuple(Packet(n, k, "", k in _RESPONSES) for k, n in enumerate(_PACKET_NAMES)),
    requests=tuple(Request(n, k, "", k >= REQ_MM_ST) for k, n in enumerate(_REQUEST_NAMES)),
)


@compiled
def packet_vc(st, pkt):
    """The virtual channel a packet travels in: responses (write responses, read data, atomic
    results: the kinds declared ``Packet(response=True)``, whose bits the composition sets in
    ``response_kinds``) in the response channel when nvlink.response_path is separate, else
    everything in the request channel (one FIFO per link, responses behind requests)."""
    p = st.p[0]
    if not p.response_vc:
        return VC_REQUEST
    return (p.response_kinds >> st.pk[pkt].kind) & 1


@compiled
def packet_alloc(st):
    """A free pool entry: the one freed last, or (none freed waiting) the lowest never used. The
    pool is sized for the worst case (builder.py: every queue and buffer full) and mostly never
    touched, so its entries are not put on the free stack up front: the pages of State.pk and
    State.pk_free that no packet reaches are never written (64 GPUs: 12.4 GB of packet records
    and 0.5 GB of free stack allocated, the stack alone was 0.5 GB resident and 0.7 s to fill).
    The same entries in the same order as a stack that started with every entry, lowest on top."""
    sy = st.sys[0]
    if sy.pk_top > 0:
        sy.pk_top -= 1
        pkt = st.pk_free[sy.pk_top]
    else:
        pkt = sy.pk_fresh
        sy.pk_fresh = pkt + 1
    in_use = sy.pk_fresh - sy.pk_top
    if in_use > sy.pk_peak:
        sy.pk_peak = in_use
    return pkt


@compiled
def packet_free(st, pkt):
    sy = st.sys[0]
    st.pk_free[sy.pk_top] = pkt
    sy.pk_top += 1


@compiled
def packet_flits(st, payload, unit):
    """(flits, packets) on the wire for `payload` bytes sent as link packets of at most `unit`
    payload bytes each: one packet, or a train of them (run.packet_train). Every packet carries a
    header and occupies whole flits, so a train costs exactly what its packets cost."""
    p = st.p[0]
    F = p.flit_bytes
    if payload <= 0:
        return (p.header_bytes + F - 1) // F, 1
    full = payload // unit
    rem = payload - full * unit
    flits = full * ((p.header_bytes + unit + F - 1) // F)
    if rem > 0:
        flits += (p.header_bytes + rem + F - 1) // F
        full += 1
    return flits, full


@compiled
def header_flits(st):
    """Flits of a header-only packet (a read request or a write response)."""
    p = st.p[0]
    return (p.header_bytes + p.flit_bytes - 1) // p.flit_bytes


@compiled
def store_packets(st, payload):
    """Link packets the address-centric path makes of `payload` bytes (at least one)."""
    unit = st.p[0].store_payload
    return max(1, (payload + unit - 1) // unit)
