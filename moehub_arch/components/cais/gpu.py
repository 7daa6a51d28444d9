"""CAIS on the GPU side: which group an access belongs to and which link carries it.

What a GPU's SM and hub ask of the registered CAIS groups (State.cais_groups) before a request
leaves: the group holding an address range, a peer whose route reaches every switch (for a
sync's link), the uplink whose switch a request line hashes to (the same switch from every GPU,
so one merge unit sees the group's requests for that line), and the bytes of a request's next
line. The model is __init__.py's docstring.
"""
from ...engine.jit import compiled

from ...engine.state import ROUTE_FIRST, ROUTE_N
from ..link_room import txq_room
from ..packet import VC_REQUEST

from .layout import GRP_BASE, GRP_BYTES, GRP_MASK


@compiled
def cais_group(st, g, home, addr, nbytes):
    """The CAIS group holding [addr, addr + nbytes) with both GPU g and the home; -1 if none."""
    for k in range(st.p[0].cais_groups):
        o = st.cais_groups[k]
        if (addr >= o[GRP_BASE] and addr + nbytes <= o[GRP_BASE] + o[GRP_BYTES]
                and (o[GRP_MASK] >> g) & 1 and (o[GRP_MASK] >> home) & 1):
            return k
    return -1


@compiled
def cais_sync_peer(st, g, grp):
    """A GPU of group grp other than g: GPU g's route toward it reaches every switch, so the
    sync's link is picked from it (the flag's address picks the switch, cais_uplink)."""
    mask = st.cais_groups[grp, GRP_MASK]
    for m in range(st.p[0].num_gpus):
        if m != g and (mask >> m) & 1:
            return m
    return g


@compiled
def cais_uplink(st, g, home, addr):
    """GPU g's link for a request line at `addr` of GPU `home`: one on the switch the line hashes
    to (the switch of link (addr / line) mod links: the same switch from every GPU), the first
    with request-queue room; -1 if none has room (the hub waits for a dequeue)."""
    p = st.p[0]
    route = st.gpu_routes[g * p.num_gpus + home]
    n = route[ROUTE_N]
    s = st.ch[route[ROUTE_FIRST + (addr // p.store_payload) % n]].switch
    for k in range(n):
        c = route[ROUTE_FIRST + k]
        if st.ch[c].switch == s and txq_room(st, c, VC_REQUEST):
            return c
    return -1


@compiled
def cais_request_line(st, rq, sent):
    """Bytes of a cais request's next line (one store packet at most: an entry holds one line)."""
    return min(rq.length - sent, st.p[0].store_payload)
