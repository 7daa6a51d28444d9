"""The hub's read-data FIFO: a GPU's answers to the reads a switch sends it.

An in-switch engine that reduces or merges reads the members' (or the home GPU's) values from their
memory: NVLink SHARP's multimem.ld_reduce and DySHARP's dymultimem.ld_reduce send a read to every
member (nvls.py, dysharp.py), the CAIS merge unit reads a line from its home GPU (components/cais/).
Each such read reaches the GPU's hub like any request, is read from HBM (`answer_read`) and
becomes a data packet back up the link it came down, in the response channel. The answers of all
three wait in one FIFO per GPU (State.mm_rdq, in the order the reads came, DySHARP's by readiness:
dysharp.queue_read_data_by_ready) and leave through the hub's response path (hub.py calls
`read_data_send` for the FIFO's head). A read keeps the receive-buffer flits it arrived in until its
data leaves, so the reads a switch sends cannot outrun the member's up link (the credits go back
when the answer leaves, `send_read_data`); the FIFO is sized so that every read the receive
buffers can hold has a place (`rdq_depth`).

A block of its own because it is neither NVLS's nor CAIS's: the FIFO, its fields and its sender are
the hub's, shared by every engine that reads from a switch (the same FIFO for all three, as
their answers share the hub's one response path).
"""
from ..engine.jit import compiled

from ..declare import Array, Block, fields
from .dysharp_objects import dynamic_on
from .hbm import hbm_access
from .link_room import txq_room
from .nvlink import credit_return_vc, txq_push
from .packet import PK_CAIS_DATA, VC_REQUEST, packet_flits, packet_vc
from .wakeups import hub_kick_response


def multicast_on(cfg):
    """Multicast objects are configured (workload.multicast): NVLS (and DySHARP) reads."""
    return len(cfg.workload.multicast) > 0


def answers_reads(cfg):
    """The hubs answer switch reads: NVLS's and DySHARP's reduction reads (workload.multicast) or
    the CAIS merge unit's line reads (workload.cais, components/cais/)."""
    return multicast_on(cfg) or len(cfg.workload.cais) > 0


def rdq_depth(cfg):
    """Reads a GPU can hold: each holds at least one flit of one of its receive buffers."""
    if not answers_reads(cfg):
        return 1
    depth = cfg.system.nvlink.links_per_gpu * cfg.system.nvlink.rx_buffer_flits + 1
    # a DySHARP read is answered with one data packet per target (dysharp.py)
    return depth * (cfg.system.switch.nvls.dysharp.max_targets if dynamic_on(cfg) else 1)


BLOCK = Block(
    "read_data", __doc__.split("\n\n")[0],
    arrays=(Array("mm_rdq", "a GPU's answered switch reads (NVLS, DySHARP, CAIS) whose data waits "
                  "to leave (packet ids, FIFO)",
                  lambda cfg: (cfg.system.num_gpus if answers_reads(cfg) else 1, rdq_depth(cfg))),),
    fields=fields("pk", ("mm_chan", "down channel a read arrived on (its data goes back up that link)"),
                  ("mm_rflits", "flits of the read, freed when its data leaves"))
    + fields("gpu", ("mm_rdq_head", "read-data FIFO (State.mm_rdq)"), ("mm_rdq_count", "")),
)


@compiled
def answer_read(st, g, c, pkt, kind, tick):
    """Turn a switch's read (NVLS's reduction read, the CAIS merge unit's line read) that reached
    GPU g on down-channel c into its answer: the bytes read from HBM, a `kind` data packet back to
    the switch, ready one hub transmit latency after the read; it remembers the request's flits and
    channel (send_read_data returns their credits). The caller queues it (queue_read_data)."""
    p = st.p[0]
    pk = st.pk[pkt]
    n = pk.value
    ready = hbm_access(st, g, pk.addr, n, tick, False)
    pk.mm_rflits = pk.flits
    pk.mm_chan = c
    pk.kind = kind
    pk.dst = pk.src
    pk.src = g
    pk.payload = n
    pk.flits, pk.npk = packet_flits(st, n, p.store_payload)
    pk.ready = ready + p.hub_tx_latency_ticks


@compiled
def queue_read_data(st, g, pkt):
    """Queue an answered switch read (NVLS's, the CAIS merge unit's) in GPU g's one read-data
    FIFO (State.mm_rdq: the hub sends the answers up in the order the reads came; their data is
    ready in about that order, one HBM read each) and kick the hub for when it is ready. DySHARP's
    answers, whose AL-TLB lookups can miss, go in by readiness
    (dysharp.queue_read_data_by_ready)."""
    gp = st.gpu[g]
    st.mm_rdq[g, (gp.mm_rdq_head + gp.mm_rdq_count) % st.mm_rdq.shape[1]] = pkt
    gp.mm_rdq_count += 1
    hub_kick_response(st, g, st.pk[pkt].ready)


@compiled
def send_read_data(st, g, pkt, tick):
    """Send an answered switch read (a FIFO's head: NVLS's here, the CAIS merge unit's too) up the
    link the read came down: the packets sent (> 0), 0 if it is not ready yet (the hub is kicked
    when it is), -1 if that link's queue has no room. The caller pops its FIFO on > 0."""
    pk = st.pk[pkt]
    if pk.ready > tick:
        hub_kick_response(st, g, pk.ready)
        return 0
    up = pk.mm_chan - 1     # the GPU->switch channel of the link the read came down
    if not txq_room(st, up, packet_vc(st, pkt)):
        return -1
    if pk.mm_rflits > 0:
        # (a DySHARP read's other answers carry no flits: filing empty returns would let a read
        # with many targets here fill the channel's return list, sized one return per flit)
        credit_return_vc(st, pk.mm_chan, pk.mm_rflits, tick + st.ch[pk.mm_chan].latency,
                         VC_REQUEST)
    txq_push(st, up, pkt, tick)
    return pk.npk


@compiled
def read_data_send(st, g, tick):
    """Send the head of GPU g's read-data FIFO up its link (send_read_data's answer): NVLS's and
    DySHARP's reduction data (counted in mm_data_tx) and the CAIS merge unit's line data
    (cais_data_tx) share it, as they share the hub's response path."""
    gp = st.gpu[g]
    if gp.mm_rdq_count == 0:
        return 0
    pkt = st.mm_rdq[g, gp.mm_rdq_head]
    n = send_read_data(st, g, pkt, tick)
    if n > 0:
        gp.mm_rdq_head = (gp.mm_rdq_head + 1) % st.mm_rdq.shape[1]
        gp.mm_rdq_count -= 1
        if st.pk[pkt].kind == PK_CAIS_DATA:
            gp.cais_data_tx += n
        else:
            gp.mm_data_tx += n
    return n
