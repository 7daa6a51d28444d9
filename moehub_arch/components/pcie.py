"""PCIe links between a GPU and its NIC (and PCIe switches where GPUs share a NIC).

A PCIe link is modelled like an NVLink channel pair (nvlink.py: per-direction serialisation, wire
latency, credit-based flow control with a finite receive buffer, store-and-forward or cut-through
at the far end) with PCIe's own packetisation: data moves as transaction-layer packets (TLPs) of
at most Max_Payload_Size bytes, and each TLP costs `tlp_overhead_bytes` on the wire besides its
payload - the physical-layer framing token, the data-link sequence number and LCRC, and the
TLP header (PCI Express Base Specification 4.0/5.0: 3- or 4-DW headers, 2 B sequence number,
4 B LCRC, 4 B framing token at 8 GT/s and above). Traffic between GPUs of one node (peer stores
through a PCIe switch) is SM stores: a simulated packet of `payload` bytes is max(packets,
ceil(payload / Max_Payload_Size)) TLPs. An RDMA message (a put, get data or MoE-Hub stream to
another node, nic.rdma_message) is DMA by the NIC - read completions on the sender's link,
posted writes on the receiver's - in TLPs of Max_Payload_Size cut at Max_Payload_Size
boundaries of the message, so its packets carry one TLP overhead per boundary of the message
they cross (as infiniband.py charges IB headers per MTU), ceil(n / Max_Payload_Size) for a
message of n bytes whatever the hub's packet size. A header-only packet (a response, a read
request) is one TLP header. The link bandwidth is the data rate after line encoding (128b/130b
for Gen3-5), so encoding costs nothing here.

Flow control: PCIe advertises receive-buffer credits per packet type in units of 16 B of data
(one credit = 4 DW); we keep one buffer per virtual channel counted in 16 B units, the same
granularity (`system.pcie.buffer_bytes` / 16). Not modelled: DLLPs (Ack/Nak, UpdateFC: 8 B each,
sent on the reverse direction and coalesced; assumption: a few per cent of the reverse bandwidth at
most), replays, and the read-request round trip of a NIC's DMA reads (nic.py folds it into the
doorbell latency of each work request).
"""
from ..engine.jit import compiled

from ..config.keys import key_param
from ..declare import Block
from .infiniband import message_offset
from .nic import rdma_message

BLOCK = Block(
    "pcie", __doc__.split("\n\n")[0],
    params=(
        key_param("pcie_max_payload", "system.pcie.max_payload_bytes"),
        key_param("pcie_tlp_overhead", "system.pcie.tlp_overhead_bytes"),
    ),
)


@compiled
def pcie_wire_bytes(st, pkt):
    """Bytes packet pkt occupies on a PCIe link: its payload plus one TLP overhead per TLP."""
    p = st.p[0]
    pk = st.pk[pkt]
    tlps = pk.npk
    if pk.payload > 0 and p.pcie_max_payload > 0 and rdma_message(st, pk.src, pk.dst):
        off = message_offset(st, pkt)
        if off >= 0:
            # the NIC's DMA: TLPs of Max_Payload_Size starting at each boundary of the message
            m = p.pcie_max_payload
            tlps = (off + pk.payload + m - 1) // m - (off + m - 1) // m
            return pk.payload + tlps * p.pcie_tlp_overhead
    if pk.payload > 0 and p.pcie_max_payload > 0:
        need = (pk.payload + p.pcie_max_payload - 1) // p.pcie_max_payload
        if need > tlps:
            tlps = need
    return pk.payload + tlps * p.pcie_tlp_overhead
