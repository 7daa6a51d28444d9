"""The fabric graph of a system, built once in Python: which channels join which GPUs and
forwarding nodes (NVSwitch chips, NVLink bridges, PCIe switches, NICs, InfiniBand leaf and spine
switches), their link class, timing and buffers, and the routing tables the compiled switches read.

Channel numbering keeps the single-level NVLink layout (engine/state.py): link l of GPU g is link
g * L + l, its GPU->switch channel 2 * link and its switch->GPU channel 2 * link + 1. Fabric links
(PCIe, InfiniBand) follow, link k as channels 2 * (G * L + k) (from its first end) and
2 * (G * L + k) + 1 (back). Forwarding nodes are numbered NVSwitch chips (or bridges) node by
node, then PCIe switches, NICs, IB leaves and spines.

Routing (computed here, read by hub.pick_channel and switch._cross): shortest paths by cost
latency + the receiving node's traversal + serialisation of a 256 B packet, with every
equal-cost next hop a candidate (round-robin at run time among those with room, as over parallel
NVLinks). GPUs do not forward. So inside a node traffic stays on NVLink; across nodes it takes
GPU -> PCIe -> NIC -> IB switch(es) -> NIC -> PCIe -> GPU, and on a rail-optimised fabric (NVIDIA
DGX SuperPOD reference architecture: NIC i of every node on leaf i) a packet between different
rails crosses a spine.

Which spine (`system.infiniband.routing`): an InfiniBand switch forwards a packet by its
destination LID through its linear forwarding table, one output port per destination LID,
written by the subnet manager (InfiniBand Architecture Specification vol. 1, ch. 18: unicast
forwarding by DLID); with LMC 0 (OpenSM's default) a port has one LID, so every packet to a
destination NIC - whatever its source or queue pair - leaves a switch on one port. Two of
OpenSM's routing engines build those tables (linux-rdma/opensm doc/current-routing.txt and
opensm/osm_ucast_ftree.c):
- `ftree` (the default; `_ftree_routes`): the engine OpenSM says to choose for a symmetrical
  fat tree, as a leaf/spine fabric is. For each leaf in order and each NIC on it in order, the
  destination's route climbs from its own leaf through the least-loaded up port (scanned in
  index order), and every other leaf reaches that destination through the same spine: so the
  NICs of a leaf are spread over the spines (the i-th NIC of a leaf on spine i mod spines) and a
  spine's link down to a leaf carries only the traffic of the NICs assigned to it.
- `minhop` (`_minhop_routes`): OpenSM's default engine when none is named. Each switch on its
  own visits the destination LIDs in order and gives each the equal-cost output port with the
  fewest LIDs assigned so far (ties: the lowest port); leaves decide independently, so one
  destination may be reached through different spines from different leaves and several
  destinations can share a spine's link down - the routing conflicts DeepEP's README names.
- `adaptive`: a candidate per equal-cost port, picked per packet round-robin among those with
  room: the switch-side adaptive routing of NVIDIA Quantum switches, which the subnet manager
  must enable (DeepEP's README, "Network configurations": static routing recommended under light
  load, adaptive under heavy load), and this model's behaviour before `routing` existed. It
  picks per 128 B hub packet, finer than a real switch's per-IB-packet choice (an approximation).
Assumptions: LIDs in the order of the NICs' index (node by node, rail by rail), which is also
the order of a leaf's ports; only the NICs' LIDs are counted (a real subnet manager also routes
the switches' own LIDs, which carry management traffic only). A GPU sharing a NIC shares its
LID, hence its route. NVLink and PCIe hops keep their per-packet choice: a GPU's NVLinks and an
NVSwitch's parallel links to a GPU are one destination's links, not alternative routes.
"""
import heapq

import attrs
import numpy as np

NODE_GPU, NODE_NVSWITCH, NODE_BRIDGE, NODE_PCIE_SWITCH, NODE_NIC, NODE_IB_LEAF, NODE_IB_SPINE = \
    range(7)
NODE_NAMES = ("gpu", "switch", "bridge", "pcieswitch", "nic", "ibleaf", "ibspine")
LINK_NVLINK, LINK_PCIE, LINK_IB = 0, 1, 2
LINK_NAMES = ("nvlink", "pcie", "infiniband")
# sw_node columns: kind, index within its kind, traversal (ps), node (server) it sits in
SWN_KIND, SWN_INDEX, SWN_TRAVERSAL, SWN_SERVER = range(4)
_ROUTE_PACKET = 256   # bytes: the packet size whose serialisation weighs a hop in route costs


class TopologyError(Exception):
    """A system whose fabric cannot be built (message names the key)."""


@attrs.define
class Fabric:
    nodes: list          # forwarding nodes: (kind, index, traversal ps, server)
    channels: list       # dicts: src/dst (node kind, id, port), class, latency, fs_per_byte, buffer
    nvlink_channels: int


def gpus_per_node(sysc):
    return sysc.nodes.gpus_per_node or sysc.num_gpus


def multi_node(sysc):
    return sysc.nodes.count > 1


def channel_count(cfg):
    """Channels of the system (NVLink, then PCIe and InfiniBand), without building it."""
    return len(build_fabric(cfg).channels)


def _fs(bandwidth):
    return int(round(1e15 / bandwidth))


def build_fabric(cfg):
    sysc = cfg.system
    G, L = sysc.num_gpus, sysc.nvlink.links_per_gpu
    gpn = gpus_per_node(sysc)
    N = sysc.nodes.count
    nv, sw = sysc.nvlink, sysc.switch
    nodes, channels = [], []
    ports = []

    def add_node(kind, index, traversal, server):
        nodes.append((kind, index, traversal, server))
        ports.append(0)
        return len(nodes) - 1

    def end(kind, ident, port_name):
        return (kind, ident, port_name)

    flit = nv.flit_bytes
    bridges = sw.topology == "bridge_pairs"
    per_node = gpn // 2 if bridges else sw.count
    if bridges and gpn % 2:
        raise TopologyError(f"system.switch.topology: bridge_pairs joins GPUs in pairs, but a node "
                            f"has {gpn} GPUs")
    for n in range(N):
        for s in range(per_node):
            if bridges:
                add_node(NODE_BRIDGE, n * per_node + s, 0, n)
            else:
                add_node(NODE_NVSWITCH, n * per_node + s, sw.traversal_latency, n)
    nv_fs = _fs(nv.bandwidth)
    for g in range(G):
        n, local = divmod(g, gpn)
        for l in range(L):
            s = n * per_node + (local // 2 if bridges else sw.gpu_link_switch[l])
            port = ports[s]
            ports[s] += 1
            # a bridge is one physical link: its wire latency counts once (GPU -> bridge half)
            channels.append(dict(src=end(NODE_GPU, g, f"nvlink{l}"), dst=end(NODE_NVSWITCH, s, port),
                                 cls=LINK_NVLINK, latency=nv.latency, fs=nv_fs,
                                 buffer=nv.rx_buffer_flits))
            channels.append(dict(src=end(NODE_NVSWITCH, s, port), dst=end(NODE_GPU, g, f"nvlink{l}"),
                                 cls=LINK_NVLINK, latency=0 if bridges else nv.latency, fs=nv_fs,
                                 buffer=nv.rx_buffer_flits))
    if not bridges:
        for s in range(per_node):
            if ports[s] > sw.ports:
                raise TopologyError(f"system.switch.ports: switch {s} needs {ports[s]} ports for "
                                    f"{gpn} GPUs x its links in system.switch.gpu_link_switch, "
                                    f"but has {sw.ports}")
    nvlink_channels = len(channels)
    if N > 1:
        _fabric_links(cfg, nodes, channels, ports, add_node, end)
    return Fabric(nodes, channels, nvlink_channels)


def _require(section, obj, keys):
    for k in keys:
        if not getattr(obj, k):
            raise TopologyError(f"system.{section}.{k}: a multi-node system (system.nodes.count > "
                                f"1) needs it; expected a positive value, found none")


def _fabric_links(cfg, nodes, channels, ports, add_node, end):
    sysc = cfg.system
    G, N = sysc.num_gpus, sysc.nodes.count
    gpn = gpus_per_node(sysc)
    pcie, nic, ib = sysc.pcie, sysc.nic, sysc.infiniband
    flit = sysc.nvlink.flit_bytes
    _require("pcie", pcie, ("bandwidth", "latency", "max_payload_bytes", "tlp_overhead_bytes",
                            "buffer_bytes"))
    _require("nic", nic, ("per_node", "message_rate", "dma_read_ahead"))
    _require("infiniband", ib, ("bandwidth", "latency", "mtu_bytes", "packet_overhead_bytes",
                                "ack_bytes", "buffer_bytes", "switch_ports"))
    if nic.per_node * nic.gpus_per_nic > gpn:
        raise TopologyError(f"system.nic.per_node: {nic.per_node} NICs x {nic.gpus_per_nic} GPUs "
                            f"each (system.nic.gpus_per_nic) need {nic.per_node * nic.gpus_per_nic} "
                            f"GPUs, but a node has {gpn}: a NIC would be attached to nothing")
    if nic.gpus_per_nic > 1 and not pcie.switch_latency:
        _require("pcie", pcie, ("switch_latency",))
    pcie_fs, ib_fs = _fs(pcie.bandwidth), _fs(ib.bandwidth)
    max_pkt = (sysc.nvlink.header_bytes + sysc.nvlink.max_payload_bytes + flit - 1) // flit
    pcie_buf, ib_buf = pcie.buffer_bytes // flit, ib.buffer_bytes // flit
    for key, buf in (("pcie", pcie_buf), ("infiniband", ib_buf)):
        if buf < max_pkt:
            raise TopologyError(f"system.{key}.buffer_bytes: expected at least one largest packet "
                                f"({max_pkt * flit} B), found {buf * flit} B; a smaller buffer "
                                f"deadlocks")

    def link(a, b, cls, latency, fs, buffer, a_node, b_node):
        for src, dst, sn, dn in ((a, b, a_node, b_node), (b, a, b_node, a_node)):
            channels.append(dict(src=src, dst=dst, cls=cls, latency=latency, fs=fs, buffer=buffer,
                                 src_node=sn, dst_node=dn))

    def port_of(s):
        p = ports[s]
        ports[s] += 1
        return p

    pcie_switch = {}
    if nic.gpus_per_nic > 1:
        for n in range(N):
            for i in range(nic.per_node):
                pcie_switch[(n, i)] = add_node(NODE_PCIE_SWITCH, n * nic.per_node + i,
                                               pcie.switch_latency, n)
    nic_node = {}
    for n in range(N):
        for i in range(nic.per_node):
            nic_node[(n, i)] = add_node(NODE_NIC, n * nic.per_node + i, nic.processing_latency, n)
    # PCIe: each GPU to its NIC (or to the PCIe switch its NIC shares)
    for g in range(G):
        n, local = divmod(g, gpn)
        i = local // nic.gpus_per_nic
        if i >= nic.per_node:
            continue   # no NIC: found unreachable by the routing below (names system.nic.per_node)
        s = pcie_switch.get((n, i), nic_node[(n, i)])
        dst_name = "pcie" if s == nic_node[(n, i)] else port_of(s)
        link(end(NODE_GPU, g, "pcie"), end(nodes[s][0], s, dst_name), LINK_PCIE, pcie.latency,
             pcie_fs, pcie_buf, -1, s)
    for (n, i), s in pcie_switch.items():
        t = nic_node[(n, i)]
        link(end(NODE_PCIE_SWITCH, s, port_of(s)), end(NODE_NIC, t, "pcie"), LINK_PCIE,
             pcie.latency, pcie_fs, pcie_buf, s, t)
    # InfiniBand
    if ib.topology == "single_switch":
        leaves = [add_node(NODE_IB_LEAF, 0, ib.switch_latency, -1)]
        rail = lambda i: 0   # noqa: E731
    else:
        leaves = [add_node(NODE_IB_LEAF, r, ib.switch_latency, -1) for r in range(nic.per_node)]
        rail = lambda i: i   # noqa: E731
    for (n, i), t in nic_node.items():
        leaf = leaves[rail(i)]
        link(end(NODE_NIC, t, "ib"), end(NODE_IB_LEAF, leaf, port_of(leaf)), LINK_IB, ib.latency,
             ib_fs, ib_buf, t, leaf)
    if ib.topology == "rail_optimized":
        if ib.spine_switches == 0 and len(leaves) > 1:
            raise TopologyError("system.infiniband.spine_switches: a rail-optimised fabric with "
                                f"{len(leaves)} rails needs spine switches to join them, found 0")
        spines = [add_node(NODE_IB_SPINE, k, ib.switch_latency, -1)
                  for k in range(ib.spine_switches)]
        for leaf in leaves:
            for sp in spines:
                link(end(NODE_IB_LEAF, leaf, port_of(leaf)), end(NODE_IB_SPINE, sp, port_of(sp)),
                     LINK_IB, ib.latency, ib_fs, ib_buf, leaf, sp)
        for s in leaves + spines:
            if ports[s] > ib.switch_ports:
                raise TopologyError(f"system.infiniband.switch_ports: {NODE_NAMES[nodes[s][0]]}"
                                    f"{nodes[s][1]} needs {ports[s]} ports, found {ib.switch_ports}")
    elif ports[leaves[0]] > ib.switch_ports:
        raise TopologyError(f"system.infiniband.switch_ports: the switch needs {ports[leaves[0]]} "
                            f"ports (one per NIC), found {ib.switch_ports}")


def _endpoint(e, G):
    """Graph vertex of a channel end: GPUs 0..G-1, forwarding node s as G + s."""
    kind, ident, _ = e
    return ident if kind == NODE_GPU else G + ident


def build_routes(cfg, fab):
    """Routing tables: gpu_routes [G*G, 2+W], sw_routes [S*G, 2+W] (ROUTE_* columns), sw_inputs."""
    sysc = cfg.system
    G = sysc.num_gpus
    S = len(fab.nodes)
    V = G + S
    trav = [0] * G + [n[2] for n in fab.nodes]
    src = [_endpoint(c["src"], G) for c in fab.channels]
    dst = [_endpoint(c["dst"], G) for c in fab.channels]
    cost = [c["latency"] + trav[dst[i]] + _ROUTE_PACKET * c["fs"] // 1000
            for i, c in enumerate(fab.channels)]
    into = [[] for _ in range(V)]
    out_of = [[] for _ in range(V)]
    for i in range(len(fab.channels)):
        into[dst[i]].append(i)
        out_of[src[i]].append(i)
    INF = 1 << 62
    hops = {}
    width = 1
    for h in range(G):
        dist = [INF] * V
        dist[h] = 0
        heap = [(0, h)]
        while heap:
            d, v = heapq.heappop(heap)
            if d > dist[v] or (v < G and v != h):
                continue   # GPUs do not forward
            for c in into[v]:
                u = src[c]
                nd = d + cost[c]
                if nd < dist[u]:
                    dist[u] = nd
                    heapq.heappush(heap, (nd, u))
        for u in range(V):
            best = INF
            for c in out_of[u]:
                w = dst[c]
                if w < G and w != h:
                    continue
                if w == u:
                    continue
                best = min(best, cost[c] + dist[w])
            if best >= INF:
                if u < G and u != h:
                    raise TopologyError(_unreachable(cfg, u, h))
                continue
            cands = [c for c in out_of[u] if (dst[c] >= G or dst[c] == h)
                     and cost[c] + dist[dst[c]] == best]
            hops[(u, h)] = cands
            width = max(width, len(cands))
    if multi_node(sysc) and sysc.infiniband.routing != "adaptive":
        engine = _ftree_routes if sysc.infiniband.routing == "ftree" else _minhop_routes
        engine(sysc, fab, hops, G)
        width = max((len(c) for c in hops.values()), default=1)
    gpu_routes = np.full((G * G, 2 + width), -1, np.int64)
    gpu_routes[:, :2] = 0
    sw_routes = np.full((max(S, 1) * G, 2 + width), -1, np.int64)
    sw_routes[:, :2] = 0
    for (u, h), cands in hops.items():
        row = gpu_routes[u * G + h] if u < G else sw_routes[(u - G) * G + h]
        row[0] = len(cands)
        row[2:2 + len(cands)] = cands
    ins = [[c for c in into[G + s]] for s in range(S)]
    max_in = max((len(x) for x in ins), default=0)
    sw_inputs = np.full((max(S, 1), 1 + max_in), -1, np.int64)
    sw_inputs[:, 0] = 0
    for s, lst in enumerate(ins):
        sw_inputs[s, 0] = len(lst)
        sw_inputs[s, 1:1 + len(lst)] = lst
    return gpu_routes, sw_routes, sw_inputs


def destination_nic(sysc, h):
    """The NIC (its index, node by node) through which GPU h is reached from other nodes (its
    LID)."""
    n, local = divmod(h, gpus_per_node(sysc))
    return n * sysc.nic.per_node + local // sysc.nic.gpus_per_nic


def _ib_switches(fab):
    return [s for s, node in enumerate(fab.nodes) if node[0] in (NODE_IB_LEAF, NODE_IB_SPINE)]


def _minhop_routes(sysc, fab, hops, G):
    """OpenSM Min Hop (module docstring): at every IB leaf and spine on its own, one output port per
    destination NIC, the least-loaded of its equal-cost ports, destinations in LID order."""
    for s in _ib_switches(fab):
        u = G + s
        load = {}           # output channel -> destination LIDs routed through it
        chosen = {}         # destination NIC -> its output channel at this switch
        for h in range(G):
            cands = hops.get((u, h))
            if not cands:
                continue
            lid = destination_nic(sysc, h)
            if lid not in chosen:
                best = min(cands, key=lambda c: (load.get(c, 0), fab.channels[c]["src"][2]))
                chosen[lid] = best
                load[best] = load.get(best, 0) + 1
            hops[(u, h)] = [chosen[lid]]


def _ftree_routes(sysc, fab, hops, G):
    """OpenSM fat-tree routing (module docstring): each destination NIC gets one spine - the i-th
    NIC of a leaf (in port order) the leaf's (i mod spines)-th up port, the least-loaded one in
    index order - and every switch forwards that NIC's packets toward it: leaves up to that spine
    (or down, on the NIC's own leaf), the spine down to the NIC's leaf."""
    spine_of = {}           # destination NIC -> the spine node its routes climb to
    for s, node in enumerate(fab.nodes):
        if node[0] != NODE_IB_LEAF:
            continue
        up = [c for c in range(len(fab.channels)) if fab.channels[c]["src"][:2] == (NODE_IB_LEAF, s)
              and fab.nodes[fab.channels[c]["dst"][1]][0] == NODE_IB_SPINE]
        if not up:
            continue
        down = sorted((fab.channels[c]["src"][2], fab.nodes[fab.channels[c]["dst"][1]][1])
                      for c in range(len(fab.channels))
                      if fab.channels[c]["src"][:2] == (NODE_IB_LEAF, s)
                      and fab.nodes[fab.channels[c]["dst"][1]][0] == NODE_NIC)
        for i, (_, nic) in enumerate(down):
            spine_of[nic] = fab.channels[up[i % len(up)]]["dst"][1]
    for s in _ib_switches(fab):
        u = G + s
        for h in range(G):
            cands = hops.get((u, h))
            if cands and len(cands) > 1:
                spine = spine_of[destination_nic(sysc, h)]
                hops[(u, h)] = [c for c in cands if fab.channels[c]["dst"][1] == spine]


def _unreachable(cfg, g, h):
    sysc = cfg.system
    gpn = gpus_per_node(sysc)
    if g // gpn != h // gpn:
        return (f"system.nic.per_node: GPU {g} (node {g // gpn}) has no path to GPU {h} (node "
                f"{h // gpn}): every GPU needs a NIC (system.nic.per_node x system.nic.gpus_per_nic "
                f"= {sysc.nic.per_node * sysc.nic.gpus_per_nic} of {gpn} GPUs per node have one)")
    if sysc.switch.topology == "bridge_pairs":
        return (f"system.switch.topology: with bridge_pairs GPU {g} reaches only its bridge partner; "
                f"it has no path to GPU {h} (a node needs a shared PCIe switch: system.nic."
                f"gpus_per_nic > 1, and system.nodes.count > 1 for the PCIe fabric)")
    return (f"system.switch.gpu_link_switch: GPU {g} has no switch path to GPU {h}")


def channel_arrays(fab, G):
    """Per-channel integer columns for the ch record (link class, timing, ends)."""
    C = len(fab.channels)
    cols = {k: np.zeros(C, np.int64) for k in (
        "to_switch", "gpu", "switch", "port", "src_switch", "link_class", "fs_per_byte", "latency",
        "traversal", "rx_credits", "src_kind", "src_index", "src_port", "dst_kind", "dst_index",
        "dst_port")}
    for i, c in enumerate(fab.channels):
        (sk, si, sp), (dk, di, dp) = c["src"], c["dst"]
        skind = NODE_GPU if sk == NODE_GPU else fab.nodes[si][0]
        dkind = NODE_GPU if dk == NODE_GPU else fab.nodes[di][0]
        cols["to_switch"][i] = int(dkind != NODE_GPU)
        cols["src_switch"][i] = -1 if skind == NODE_GPU else si
        if dkind == NODE_GPU:
            cols["gpu"][i], cols["switch"][i] = di, si
            cols["port"][i] = sp if isinstance(sp, int) else 0
        else:
            cols["gpu"][i] = si if skind == NODE_GPU else -1
            cols["switch"][i] = di
            cols["port"][i] = dp if isinstance(dp, int) else 0
            cols["traversal"][i] = fab.nodes[di][2]
        cols["link_class"][i] = c["cls"]
        cols["fs_per_byte"][i] = c["fs"]
        cols["latency"][i] = c["latency"]
        cols["rx_credits"][i] = c["buffer"]
        for prefix, kind, ident, port in (("src", skind, si, sp), ("dst", dkind, di, dp)):
            cols[f"{prefix}_kind"][i] = kind
            cols[f"{prefix}_index"][i] = ident if kind == NODE_GPU else fab.nodes[ident][1]
            # port: a switch port number, or -1-k for a named port ("nvlink<k>": -1-k; "pcie": -100;
            # "ib": -101)
            if isinstance(port, int):
                cols[f"{prefix}_port"][i] = port
            elif port.startswith("nvlink"):
                cols[f"{prefix}_port"][i] = -1 - int(port[6:])
            else:
                cols[f"{prefix}_port"][i] = -100 if port == "pcie" else -101
    return cols


def end_name(kind, index, port):
    """'system.gpu3.pcie', 'system.nic3.ib', 'system.ibleaf0.port2'."""
    if port >= 0:
        pname = f"port{port}"
    elif port > -100:
        pname = f"nvlink{-1 - port}"
    else:
        pname = "pcie" if port == -100 else "ib"
    return f"system.{NODE_NAMES[kind]}{index}.{pname}"


def node_array(fab):
    arr = np.zeros((max(len(fab.nodes), 1), 4), np.int64)
    for s, (kind, index, trav, server) in enumerate(fab.nodes):
        arr[s] = (kind, index, trav, server)
    return arr
