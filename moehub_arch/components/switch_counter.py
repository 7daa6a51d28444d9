"""Switch counters: 64-bit counters in the NVSwitch that SMs fetch-and-add over NVLink (`ctr.add`).

A worked example of a block that carries its own packets and instruction (docs/adding_a_block.md):
everything it is and does is here - its packet and request kinds, its instruction's semantic, the
handlers of each - and the composition generates the dispatch to them; outside this module it is
its config section (system.switch.counter) and its data files (isa/counter.yaml, a kernel, a
config).

Model. Every switch chip holds `system.switch.counter.entries` counters (0, the default: none, and
the block is off: no stat, no event). Counter k lives on one switch, the same for every GPU: the
switch of link (k mod links) of a GPU, so every GPU reaches it. `ctr.add rd, counter, value` hands
the GPU's hub a request (REQ_CTR_ADD, through its request table and FIFO like a put); the hub sends
one header-only packet (PK_CTR_ADD: the counter in pk.addr, the addend in pk.value) up a link to
that switch, the first with request-queue room. When it reaches the head of the switch's input
port (after the traversal), the switch adds the value to the counter and answers the GPU with the
old value (PK_CTR_REPLY, 8 B of payload, in the response channel); while no output toward the GPU
has room in the response channel the request waits at the input port's head (back-pressure: the
response channel always drains). The GPU writes the old value into rd and the request completes:
like a load's destination, rd holds it after the thread block's next `fence`.

Sources and assumptions. NVSwitch's in-network reductions (NVLink SHARP: multimem.red, Hopper
architecture whitepaper; nvls.py) show a switch holding state and adding packet payloads; a
table of fetch-and-add counters is *not* a published NVSwitch feature - it is this example's
assumption, as are its costs: the adder keeps pace with the links (nothing beyond the
traversal, nvls.py's assumption for its adders) and counters start at 0 each run. A counter out
of range is a runtime error naming the kernel line; a system without switches, of one GPU, or of
several nodes is refused at build.
"""
from ..engine.jit import compiled
from ..engine.state import ROUTE_FIRST, ROUTE_N
from ..config.keys import key_param
from ..declare import (Array, Block, Crossing, Packet, Receive, Request, RunError, Semantic, Send,
                       Stat, StatGroup, counters, fields)
from .hbm import raise_error
from .hub import hub_accept, hub_emit, hub_enqueue, hub_request_packet, hub_wait_for_room
from .hub_receive import complete_request
from .nvlink import channel_count_arrival, credit_return_vc, txq_push
from .link_room import pick_switch_output, txq_room
from .packet import (VC_REQUEST, VC_RESPONSE, header_flits, packet_alloc, packet_flits, packet_free,
                     packet_vc)
from .sm_operands import operand, stall_on_hub
from ..isa.encoding import OP0

# its packet kinds and request kind (declared below: the composition checks the numbers are no
# other block's and leave no gap, and generates the dispatch of each to its handler)
PK_CTR_ADD, PK_CTR_REPLY = 23, 24   # ctr.add, GPU -> switch; its old value back
REQ_CTR_ADD = 12     # ctr.add: dst_addr = the counter, value = the addend
CTR_SENT = -1   # ctr_switch: the packet is consumed (declare.Crossing)
# ctr.add with a counter index outside system.switch.counter.entries (its own runtime error code:
# declared below, the composition checks it is no other block's or the engine's)
ERR_CTR_RANGE = 70
# ctr.add's semantic: its number, name and operands are declared in its ISA file too
# (isa/counter.yaml `semantics:`; the simulation refuses an ISA semantic no block executes)
SEM_CTR_ADD = 40


def _entries(cfg):
    return cfg.system.switch.counter.entries


def _on(st):
    return int(st.p[0].ctr_entries) > 0


def build_counters(cfg, building):
    """Counters need a switch every GPU reaches (Block.build: refused at build, exit 2)."""
    if not _entries(cfg):
        return
    s = cfg.system
    if s.switch.topology != "nvswitch" or s.num_gpus < 2 or s.nodes.count > 1:
        raise ValueError("system.switch.counter.entries: switch counters need one node of two or "
                         "more GPUs on NVSwitches (system.switch.topology: nvswitch), found "
                         f"topology {s.switch.topology}, {s.num_gpus} GPU(s), {s.nodes.count} "
                         "node(s)")


def check_counters(sim, out):
    """Every ctr.add sent was served by a switch once and answered once."""
    st = sim.state
    sent = int(st.gpu.ctr_adds.sum())
    out.equal("ctr.add requests sent vs served by the switches", sent, int(st.sys[0].ctr_served))
    out.equal("ctr.add requests sent vs answered", sent, int(st.gpu.ctr_replies.sum()))


BLOCK = Block(
    "switch_counter", __doc__.split("\n\n")[0],
    params=(key_param("ctr_entries", "system.switch.counter.entries"),),
    errors=(RunError(ERR_CTR_RANGE, "switch counter index outside "
                     "system.switch.counter.entries (0: no counters)"),),
    arrays=(Array("ctr_table", "per switch, its counters' values (0 at the start of a run)",
                  lambda cfg: (max(1, cfg.system.switch.count * cfg.system.nodes.count),
                               max(1, _entries(cfg)))),),
    fields=fields("gpu", ("ctr_adds", "ctr.add requests this GPU sent"),
                  ("ctr_replies", "ctr.add answers this GPU received"))
    + fields("sys", ("ctr_served", "ctr.add requests the switches served")),
    stats=(StatGroup("gpu", "switch_counter", counters((
        ("adds", "ctr_adds", "count", "ctr.add requests sent to a switch's counters"),
        ("replies", "ctr_replies", "count", "old counter values received"),
    )), enabled=_on),
        StatGroup("system", "switch_counter", (
            Stat("adds_served", "count", "ctr.add requests the switches served",
                 lambda i: int(i.st.sys[0].ctr_served)),
            Stat("counter_sum", "count", "sum of every counter's final value",
                 lambda i: int(i.st.ctr_table.sum())),
        ), enabled=_on)),
    checks=(check_counters,),
    build=(build_counters,),
    packets=(Packet("ctr_add", PK_CTR_ADD, "ctr.add, GPU -> the counter's switch (header only)"),
             Packet("ctr_reply", PK_CTR_REPLY, "the counter's old value, switch -> GPU",
                    response=True)),
    requests=(Request("ctr.add", REQ_CTR_ADD, "a fetch-and-add of a switch counter",
                      switched=True),),
    crossings=(Crossing((PK_CTR_ADD,), "components.switch_counter.ctr_switch",
                        "the switch adds to the counter and answers with its old value"),),
    semantics=(Semantic((SEM_CTR_ADD,), "components.switch_counter.ctr_add",
                        "ctr.add: fetch-and-add of a switch counter"),),
    sends=(Send((REQ_CTR_ADD,), "components.switch_counter.ctr_send",
                "a ctr.add request, GPU -> the counter's switch"),),
    receives=(Receive((PK_CTR_REPLY,), "components.switch_counter.ctr_reply_received",
                      "a counter's old value reaches the GPU that added to it"),),
    # its handlers are compiled only for a run with counters or a ctr.add instruction
    # (dispatch/indirect.py)
    on_demand=_on,
)


# ------------------------------------------------------------------------------ the SM
@compiled
def ctr_add(st, g, sm, slot, row, tick, cyc):
    """ctr.add rd, counter, value: hand the fetch-and-add to the hub (the interpreter,
    sm_interpreter.py, calls it: declare.Semantic; True when the hub took it; False when it raised an error or the
    hub is full, which blocks the thread block until it re-executes the instruction)."""
    k = operand(st, slot, row, 1, tick, cyc)
    value = operand(st, slot, row, 2, tick, cyc)
    if k < 0 or k >= st.p[0].ctr_entries:
        raise_error(st, ERR_CTR_RANGE, slot, k)
        return False
    peer = g + 1 if g + 1 < st.p[0].num_gpus else 0   # its route holds every link of g's
    r = hub_accept(st, g, REQ_CTR_ADD, slot, peer, k, 0, 0, value, row[OP0], tick, -1)
    if r < 0:
        stall_on_hub(st, slot, g, tick)
        return False
    st.req[r].pkts_total = 1
    st.req[r].acks_total = 1   # its answer
    hub_enqueue(st, g, r, tick)
    st.tb[slot].outstanding += 1
    return True


# ------------------------------------------------------------------------------ the hub
@compiled
def ctr_send(st, g, r, tick):
    """The packetizer of REQ_CTR_ADD (declare.Send): one header-only packet up a link to the
    counter's switch, or wait for request-queue room on one."""
    p = st.p[0]
    rq = st.req[r]
    route = st.gpu_routes[g * p.num_gpus + rq.dst_gpu]
    n = route[ROUTE_N]
    s = st.ch[route[ROUTE_FIRST + rq.dst_addr % n]].switch
    c = -1
    for j in range(n):
        if st.ch[route[ROUTE_FIRST + j]].switch == s and txq_room(st, route[ROUTE_FIRST + j],
                                                                    VC_REQUEST):
            c = route[ROUTE_FIRST + j]
            break
    if c < 0:
        hub_wait_for_room(st, g, tick)
        return
    pkt = hub_request_packet(st, r, g, rq.dst_gpu)
    pk = st.pk[pkt]
    pk.kind = PK_CTR_ADD
    pk.value = rq.value
    pk.payload = 0
    pk.npk = 1
    pk.flits = header_flits(st)
    st.gpu[g].ctr_adds += 1
    hub_emit(st, g, r, c, pkt, tick, True, tick)


# ------------------------------------------------------------------------------ the switch
@compiled
def ctr_switch(st, c, pkt, tick):
    """A ctr.add at the head of switch input c (declare.Crossing): add to the counter and answer the GPU
    with its old value; CTR_SENT once done (the request packet is consumed), else num_gpus + the
    GPU: wait for response-channel room toward it (nothing changed, so the retry redoes it)."""
    pk = st.pk[pkt]
    s = st.ch[c].switch
    out = pick_switch_output(st, s, pk.src, VC_RESPONSE)
    if out < 0:
        return st.p[0].num_gpus + pk.src
    old = st.ctr_table[s, pk.addr]
    st.ctr_table[s, pk.addr] = old + pk.value
    st.sys[0].ctr_served += 1
    q = packet_alloc(st)
    qk = st.pk[q]
    qk.kind = PK_CTR_REPLY
    qk.req = pk.req
    qk.src = pk.src
    qk.dst = pk.src
    qk.addr = pk.addr
    qk.src_addr = 0
    qk.value = old
    qk.payload = 8
    qk.flits, qk.npk = packet_flits(st, 8, st.p[0].store_payload)
    qk.ready = tick
    txq_push(st, out, q, tick)
    return CTR_SENT


# ------------------------------------------------------------------------------ the answer
@compiled
def ctr_reply_received(st, g, c, pkt, tick):
    """A counter's old value reached GPU g over down-channel c (the run loop dispatches
    PK_CTR_REPLY here): after the hub's receive latency it lands in the instruction's rd and the
    request completes (a fence waiting on it goes on)."""
    channel_count_arrival(st, c, pkt)
    pk = st.pk[pkt]
    t = tick + st.p[0].hub_rx_latency_ticks
    st.gpu[g].ctr_replies += 1
    rq = st.req[pk.req]
    st.regs[rq.slot, rq.ret_reg] = pk.value
    complete_request(st, pk.req, t)
    credit_return_vc(st, c, pk.flits, t + st.ch[c].latency, packet_vc(st, pkt))
    packet_free(st, pkt)
