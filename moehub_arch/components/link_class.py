"""What differs per link class on the one channel model (nvlink.py): the bytes a packet
occupies on the wire (who is woken when a transmit slot frees on a channel between two
forwarding nodes is link_room.py's; components/fabric.py describes the fabric)."""
from ..engine.jit import compiled

from .infiniband import ib_wire_bytes
from .pcie import pcie_wire_bytes

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
