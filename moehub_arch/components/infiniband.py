"""InfiniBand links and switches (leaf and spine): packetisation, bandwidth, latency, credits.

Wire format (InfiniBand Architecture Specification vol. 1, ch. 5-9): a data packet carries at
most the path MTU of payload (256 B to 4 KB) and costs `packet_overhead_bytes` besides it - the
local route header (LRH, 8 B), base transport header (BTH, 12 B), the RDMA-write extended header
(RETH, 16 B) and the invariant and variant CRCs (ICRC 4 B, VCRC 2 B); an RC acknowledgement is
LRH + BTH + AETH (4 B) + CRCs (`ack_bytes`).

Segmentation: the NIC cuts an RDMA message (a put, or an MTU's worth of a MoE-Hub stream) into
MTU-sized IB packets. The simulator moves the hub's smaller packets (at most
nvlink.store_packet_bytes each) through the fabric; an IB packet header is charged on the
simulated packet whose bytes cross an MTU boundary of the message (offset 0, mtu, 2 mtu...), so a
message of n bytes costs ceil(n / mtu) headers exactly, whatever the order its pieces travel in.
Header-only and small requests (flag stores, atomics, read requests, end-of-stream markers) are
one IB packet each. Responses: the hub's write responses of one request that follow each other
on a link travel as one coalesced acknowledgement (IB RC acknowledges several packets at once;
assumption: a new acknowledgement whenever the previous packet on the link was of another
request or not a response).

Links: per-direction serialisation at the port's data rate (the link rate after 64b/66b or
256b/257b encoding: 400 Gb/s NDR, 200 Gb/s HDR as the ConnectX-7 / ConnectX-6 data sheets
state), wire latency per link, credit-based link-level flow control (the receiver advertises
buffer space per virtual lane in 64 B blocks; we count 16 B units of the same buffer,
`system.infiniband.buffer_bytes` / 16). Switches are the crossbar of switch.py (per-port input
buffers, output queues, cut-through when system.switch.forwarding is cut_through) with the IB
switch's port-to-port latency. The fabric is deadlock-free as routed: up-down over a tree
(leaf -> spine -> leaf), requests and responses in separate virtual channels. Which spine a
packet between rails climbs to is the routing's (`system.infiniband.routing`, topology.py):
`static`, one spine per destination NIC, as a subnet manager's forwarding tables route by
destination LID; `adaptive`, per packet among the spines with room.
"""
from ..engine.jit import compiled

from ..config.keys import key_param
from ..declare import Block, fields
from .packet import PK_ACK, PK_GET_RESP, PK_MOE, PK_PUT

BLOCK = Block(
    "infiniband", __doc__.split("\n\n")[0],
    params=(
        key_param("ib_mtu", "system.infiniband.mtu_bytes"),
        key_param("ib_overhead", "system.infiniband.packet_overhead_bytes"),
        key_param("ib_ack_bytes", "system.infiniband.ack_bytes"),
    ),
    fields=fields("ch", ("seg_req", "IB: request of the last response sent (ack coalescing)"),
                  init={"seg_req": -1}),
)


@compiled
def message_offset(st, pkt):
    """Offset of packet pkt's first payload byte in its RDMA message (a put or read-data
    response: from the request's destination address; a MoE-Hub stream: the stream offset);
    -1 for packets that are messages of their own."""
    pk = st.pk[pkt]
    if pk.kind == PK_MOE:
        return pk.addr
    if (pk.kind == PK_PUT or pk.kind == PK_GET_RESP) and pk.req >= 0:
        return pk.addr - st.req[pk.req].dst_addr
    return -1


@compiled
def mtu_boundaries(st, pkt):
    """IB packets that start inside packet pkt's payload: MTU boundaries of its message in
    [offset, offset + payload)."""
    p = st.p[0]
    off = message_offset(st, pkt)
    n = st.pk[pkt].payload
    if off < 0 or n <= 0:
        return st.pk[pkt].npk
    return (off + n + p.ib_mtu - 1) // p.ib_mtu - (off + p.ib_mtu - 1) // p.ib_mtu


@compiled
def ib_wire_bytes(st, c, pkt):
    """Bytes packet pkt occupies on InfiniBand channel c (its payload and the IB headers it
    carries)."""
    p = st.p[0]
    pk = st.pk[pkt]
    ch = st.ch[c]
    if pk.kind == PK_ACK:
        # the request acknowledged (link-level responses to MoE-Hub streams: the stream)
        key = pk.req if pk.req >= 0 else -2 - (pk.src * p.num_gpus + pk.dst)
        if ch.seg_req == key:
            return 0       # coalesced into the acknowledgement already on its way
        ch.seg_req = key
        return p.ib_ack_bytes
    ch.seg_req = -1
    return pk.payload + mtu_boundaries(st, pkt) * p.ib_overhead
