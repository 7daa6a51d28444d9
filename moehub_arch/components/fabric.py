"""The multi-level fabric: link classes on one channel model, forwarding nodes, per-link stats.

Every link of the system - NVLink (nvlink.py), PCIe (pcie.py), InfiniBand (infiniband.py) - is a
pair of channels of the one channel model in nvlink.py (per-direction serialisation, wire latency,
credit-based flow control, FIFO transmit queues, request and response virtual channels); what
differs per class is declared per channel here: its bandwidth, wire latency, receive buffer
(credits), the traversal of the node it leads into, and how many bytes a packet occupies on its
wire (NVLink flits, PCIe TLPs, IB packets). Every forwarding node - NVSwitch chip, NVLink bridge,
PCIe switch, NIC, IB leaf or spine - is a crossbar of switch.py with its own traversal latency;
the NIC adds its RDMA engine (nic.py). moehub_arch/topology.py builds the graph and the routing
tables once per system. A one-node NVSwitch system has only NVLink channels, with exactly the
numbers (and stats) it had before the fabric existed.

NVLink bridges (system.switch.topology: bridge_pairs, the RTX A6000 / A100 PCIe pairs) are
two-port forwarding nodes with no traversal; the bridge is one physical link, so its wire latency
counts once (on the GPU -> bridge half) and, with cut-through forwarding, its serialisation
overlaps.
"""
from ..declare import Array, Block, Stat, StatGroup, fields
from .nvlink import RX_STATS, TX_STATS


def _fabric_nodes(cfg):
    from ..topology import build_fabric
    return (max(len(build_fabric(cfg).nodes), 1), 4)


def _fabric_dests_shape(cfg):
    """[channels, 1 + G] when some channel joins two forwarding nodes, else a placeholder."""
    from ..topology import NODE_GPU, build_fabric
    fab = build_fabric(cfg)
    between = any(c["src"][0] != NODE_GPU and c["dst"][0] != NODE_GPU for c in fab.channels)
    return (len(fab.channels), cfg.system.num_gpus + 1) if between else (1, 1)


def fill_fabric_destinations(st):
    """State.fabric_dests: for each channel between two forwarding nodes, the destination GPUs
    whose routes from the node it leaves include it, in GPU order (link_room.fabric_output_freed
    wakes their waiters when the channel frees a transmit slot, without scanning every route)."""
    if st.fabric_dests.shape[1] == 1:
        return
    G = int(st.p[0].num_gpus)
    for c in range(st.ch.shape[0]):
        s = int(st.ch[c].src_switch)
        if not st.ch[c].to_switch or s < 0:
            continue
        dests = [h for h in range(G) if c in st.sw_routes[s * G + h, 2:2 + st.sw_routes[s * G + h, 0]]]
        st.fabric_dests[c, 0] = len(dests)
        st.fabric_dests[c, 1:1 + len(dests)] = dests


def fabric_link_instances(st, sim_ticks):
    """(name, Instance) of both ends of every PCIe and InfiniBand link: the first channel of a
    link is transmitted at its first end, the second at the other."""
    from ..declare import Instance
    from ..topology import end_name
    ch = st.ch
    first = int(st.p[0].num_gpus) * int(st.p[0].links_per_gpu) * 2
    out = []
    for c in range(first, ch.shape[0], 2):
        a, b = ch[c], ch[c + 1]
        out.append((end_name(int(a.src_kind), int(a.src_index), int(a.src_port)),
                    Instance(st, sim_ticks, index=c, tx=a, rx=b)))
        out.append((end_name(int(a.dst_kind), int(a.dst_index), int(a.dst_port)),
                    Instance(st, sim_ticks, index=c + 1, tx=b, rx=a)))
    return out


BLOCK = Block(
    "fabric", __doc__.split("\n\n")[0],
    arrays=(Array("sw_node", "forwarding nodes: kind, index within its kind, traversal (ps), "
                  "server (topology.SWN_*)", _fabric_nodes),
            Array("fabric_dests", "per channel between two forwarding nodes: the number of "
                  "destination GPUs routed through it, then those GPUs (fill_fabric_destinations)",
                  _fabric_dests_shape),),
    fields=fields(
        "ch", ("link_class", "LINK_* above"), ("fs_per_byte", "serialisation time per byte (fs; "
                                                   "its class's bandwidth, topology.py)"),
        ("latency", "wire latency (ps; its class's latency, topology.py)"),
        ("traversal", "traversal of the forwarding node the channel leads into (ps)"),
        ("rx_credits", "receive buffer of the request virtual channel (16 B units)"),
        ("src_switch", "forwarding node it leaves (-1: a GPU)"),
        ("src_kind", "names (topology.end_name)"), ("src_index", ""), ("src_port", ""),
        ("dst_kind", ""), ("dst_index", ""), ("dst_port", "")),
    stats=(StatGroup("fabric_link", "", TX_STATS + RX_STATS + (
        Stat("link_class", "class", "0 NVLink, 1 PCIe, 2 InfiniBand", lambda i: i.tx.link_class),
    )),),
)
