"""What differs per link class on the one channel model (nvlink.py): the bytes a packet
occupies on the wire, and who is woken when a transmit slot frees on a channel between two
forwarding nodes (components/fabric.py describes the fabric)."""
from ..engine.jit import compiled

from .infiniband import ib_wire_bytes
from .pcie import pcie_wire_bytes
from .wakeups import switch_output_freed

LINK_NVLINK, LINK_PCIE, LINK_IB = 0, 1, 2   # topology.LINK_* (ch.link_class)


@compiled
def wire_bytes(st, c, pkt):
    """Bytes packet pkt occupies on channel c's wire."""
    cls = st.ch[c].link_class
    if cls == LINK_PCIE:
        return pcie_wire_bytes(st, pkt)
    if cls == LINK_IB:
        return ib_wire_bytes(st, c, pkt)
    return st.pk[pkt].flits * st.p[0].flit_bytes


@compiled
def fabric_output_freed(st, c, vc, tick):
    """A slot freed in the transmit queue of channel c, which leaves forwarding node
    ch.src_switch toward another forwarding node: grant it to an input waiting for any destination
    the channel leads to (switch.py wait lists are per destination GPU)."""
    s = st.ch[c].src_switch
    row = st.fabric_dests[c]   # those destinations, in GPU order (fabric.fill_fabric_destinations)
    for k in range(row[0]):
        switch_output_freed(st, s, row[1 + k], vc, tick)
