"""The hub's forwarding unit: MoE-Hub across nodes, deduplicated per node.

system.gpu.hub.moe.internode: per_node (a design the MoE-Hub paper, arXiv 2605.05888, leaves
open; the seeds model one NVLink domain). A dispatch store naming a token's experts on one other
node (send_to_experts / st.rowsp.experts, the per-node dispatch of moe_layer.s) crosses
InfiniBand once: the sender's RPM puts the row, with one descriptor per named expert (a carrier and
its copies, as a multi-expert store), in its stream toward the *forwarding hub* of that node - the
GPU with the sender's own local rank there (rpm.stream_target). Every transfer then stays on one
rail (NIC i of every node on leaf i of the rail-optimised fabric): no spine hop, and each NIC talks
to N - 1 queue pairs instead of (N - 1) x G, as DeepEP's and HierMoE's internode kernels do.

At the forwarding hub the AAU gives the row one slot of the *forwarding buffer* (HBM,
`forward_buffer_rows` rows of the window slot size; none free: the packet parks in the AAU's
staging store like a row waiting for window space) and writes its bytes there. When the row's last
byte is written the unit queues one forwarding request per named expert; `forward_latency_cycles`
later each takes an entry of this hub's RPM ring toward the expert's GPU (a full ring: the request
waits in the *forwarding queue*, retried when that ring frees) and leaves as an ordinary RPM row:
read from the forwarding buffer, coalesced, over NVLink (or the hub's loopback for the forwarder's
own experts). The destination hub keeps MoE-Hub's semantics: its AAU allocates the window slot,
writes the completion record naming the *origin* GPU (the combine sends the output home there),
and its DAM counts the row.

What a row holds while it waits: the sender's descriptors (its ring entries toward the forwarder)
stay until every copy has landed at its destination - the end-to-end completion a fence waits for -
and the forwarding-buffer slot until the same moment (its copies read it). So the sender's ring
depth bounds the rows in flight over both hops, and a slow destination backs up to the sender.

End of streams. A forwarder's streams inside its node carry forwarded rows, so they end (EOS) only
once its own producers are done, every other node's stream to it (from its rail peers) has ended
and its forwarding queue is empty; its streams toward other nodes carry only its own rows and end
with its producers (ending them later too would make two forwarders wait for each other).

The combine stays per expert (each expert's output row goes home over its own put) unless
system.gpu.hub.moe.internode_combine: per_node, which sums a node's outputs on the forwarding GPU in
an SM kernel (moehub_forward_combine in workloads/kernels/moehub/moe_layer.s; this unit takes no
part). Not modelled:
the forwarder's own experts are reached through the loopback path (an HBM read and write more
than a direct write from the AAU would cost); single-expert stores (send_to_expert, st.rowsp) are
not forwarded (the per-node dispatch names every remote expert of a token in one store).
"""
from ...engine.jit import compiled

from ...engine.events import push
from ..hub import wake_hub_waiters
from ..wakeups import rpm_kick
from ...config.keys import key_param
from ...declare import Array, Block, Event, Param, Stat, StatGroup, counters, fields
from .rpm import SCHEDULE_PAPER, rpm_end_forwarded
from .rpm_accept import mark_rowsp, schedule_insert, take_descriptor

EV_HUB_FORWARD = 12  # a0 = GPU: its forwarding unit looks at its queue

FORWARD_COPIES = 8   # experts one multi-expert store names at most (send_to_experts' mask)


def per_node(cfg):
    return cfg.system.gpu.hub.moe.internode == "per_node"


def forward_rows(cfg):
    """Forwarding-buffer rows per GPU (0 when internode is per_expert)."""
    hub = cfg.system.gpu.hub.moe
    if not per_node(cfg):
        return 0
    if hub.forward_buffer_rows:
        return hub.forward_buffer_rows
    return (cfg.system.nodes.count - 1) * hub.rpm.row_queue_depth


def _ticks(cfg):
    hub = cfg.system.gpu.hub
    return int(round(hub.moe.forward_latency_cycles * 1e12 / hub.clock))


def _on(st):
    return int(st.p[0].fwd_per_node) == 1


def check_forward(sim, out):
    st = sim.state
    p = st.p[0]
    if not int(p.fwd_per_node) or not int(p.num_experts):
        return
    gp = st.gpu
    n = int(p.nic_gpus_per_node)
    out.check(gp.fwd_q_count == 0, "MoE-Hub forwarding requests left in the forwarding queue",
              lambda g: f"system.gpu{g}.hub.forward: {int(gp.fwd_q_count[g])} waiting")
    out.check(gp.fwd_live == 0, "MoE-Hub forwarding-buffer rows never released (copies not landed)",
              lambda g: f"system.gpu{g}.hub.forward: {int(gp.fwd_live[g])} rows held")
    out.check(gp.fwd_in_done == int(p.num_gpus) // n - 1,
              "MoE-Hub forwarders did not see every other node's stream end",
              lambda g: f"system.gpu{g}.hub.forward: {int(gp.fwd_in_done[g])} ended")
    out.equal("MoE-Hub rows forwarded vs copies of the rows received for forwarding",
              gp.fwd_copies.sum(), gp.fwd_copies_in.sum())


def forward_findings(sim):
    """Requests waiting for ring room, a full buffer, streams held for forwarding (the stuck-run
    report)."""
    st = sim.state
    p = st.p[0]
    if not int(p.fwd_per_node) or not int(p.num_experts):
        return []
    n = int(p.nic_gpus_per_node)
    out = []
    for g in range(int(p.num_gpus)):
        gp = st.gpu[g]
        hub = f"system.gpu{g}.hub.forward"
        if int(gp.fwd_q_count):
            out.append(f"{hub}: {int(gp.fwd_q_count)} forwarding request(s) waiting for RPM ring "
                       f"room toward their experts' GPUs (system.gpu.hub.moe.rpm.row_queue_depth)")
        if int(gp.fwd_live) >= int(p.fwd_rows):
            out.append(f"{hub}: forwarding buffer full ({int(gp.fwd_live)} rows held until their "
                       f"copies land; system.gpu.hub.moe.forward_buffer_rows)")
        if int(gp.eos_local) == 1:
            out.append(f"{hub}: streams inside the node held open for forwarding "
                       f"({int(gp.fwd_in_done)} of {int(p.num_gpus) // n - 1} rail peers' "
                       f"streams ended)")
    return out


BLOCK = Block(
    "forward", __doc__.split("\n\n")[0],
    params=(
        key_param("fwd_per_node", "system.gpu.hub.moe.internode", lambda cfg: int(per_node(cfg)),
                  "bool", "1: rows to another node go once per node to a forwarding hub"),
        key_param("fwd_rows", "system.gpu.hub.moe.forward_buffer_rows", forward_rows,
                  how="forward_rows(): derived from the rings if 0"),
        key_param("fwd_ticks", "system.gpu.hub.moe.forward_latency_cycles", _ticks, "ps",
                  "in ticks at the hub clock"),
        Param("fwd_addr", "", "address", "base of the forwarding buffer (moe_forward)", None,
              "derived: the builder's memory layout"),
    ),
    arrays=(
        Array("fwd_free", "per GPU, a stack of released forwarding-buffer slots",
              lambda cfg: (cfg.system.num_gpus, max(forward_rows(cfg), 1))),
        Array("fwd_refs", "per GPU and forwarding-buffer slot, the copies of its row not yet "
              "landed at their destination", lambda cfg: (cfg.system.num_gpus,
                                                          max(forward_rows(cfg), 1))),
        Array("fwd_q", "per GPU, the forwarding queue: [stream, descriptor index, ready tick] of "
              "each copy waiting to enter the RPM (one per named expert of each buffered row)",
              lambda cfg: (cfg.system.num_gpus, max(forward_rows(cfg), 1) * FORWARD_COPIES, 3)),
    ),
    fields=fields("gpu", ("fwd_q_count", "requests in the forwarding queue"),
                  ("fwd_next", "tick of the unit's pending event (-1: none)"),
                  ("fwd_retry", "1: slots freed while AAU packets were parked"),
                  ("fwd_fresh", "slots ever handed out (the buffer is filled in order first)"),
                  ("fwd_nfree", "slots on the free stack"),
                  ("fwd_live", "slots holding a row"),
                  ("fwd_in_done", "other nodes' streams to this forwarder ended"),
                  ("eos_local", "1: own producers done, streams in the node wait for forwarding; "
                                "2: those ended too"),
                  ("fwd_rows_in", ""), ("fwd_copies_in", ""), ("fwd_copies", ""),
                  ("fwd_ring_waits", ""), ("fwd_wait_ticks", ""), ("fwd_peak", ""),
                  init={"fwd_next": -1})
    + fields("mrow", ("fwd", "1: a row toward a forwarding hub (it lands in the forwarding buffer)"),
             ("fwd_from", "a forwarded copy: the stream of its origin descriptor (-1: none)"),
             ("fwd_idx", "a forwarded copy: its origin descriptor's monotonic index"),
             init={"fwd_from": -1}),
    stats=(StatGroup("gpu", "hub.forward", counters((
        ("rows_received", "fwd_rows_in", "rows", "rows other nodes sent this hub to forward (one "
         "per token and node)"),
        ("copies_received", "fwd_copies_in", "rows", "token-expert rows those rows stand for"),
        ("copies_forwarded", "fwd_copies", "rows", "rows the unit put into this hub's RPM streams"),
        ("ring_waits", "fwd_ring_waits", "count", "times a request found the RPM ring toward its "
         "expert's GPU full"),
        ("wait_ticks", "fwd_wait_ticks", "ps", "sum over copies of the time from ready to "
         "accepted by the RPM"),
        ("buffer_peak_rows", "fwd_peak", "rows", "peak forwarding-buffer rows held"),
    )) + (
        Stat("wait_mean_ns", "ns", "mean time a copy waited for RPM ring room",
             lambda i: i.rec.fwd_wait_ticks / 1000 / i.rec.fwd_copies if i.rec.fwd_copies else 0.0),
        Stat("buffer_bytes", "bytes", "HBM reserved for the forwarding buffer",
             lambda i: i.p.fwd_rows * i.p.row_bytes),
    ), enabled=_on),),
    events=(Event("hub_forward", EV_HUB_FORWARD, "a forwarding unit looks at its queue",
                  enabled=_on),),
    checks=(check_forward,),
    findings=(forward_findings,),
)


@compiled
def forward_has_slot(st, g):
    p = st.p[0]
    gp = st.gpu[g]
    return gp.fwd_nfree > 0 or gp.fwd_fresh < p.fwd_rows


@compiled
def forward_take_slot(st, g, copies):
    """A forwarding-buffer slot for a row of `copies` named experts (forward_has_slot first)."""
    gp = st.gpu[g]
    if gp.fwd_nfree > 0:
        gp.fwd_nfree -= 1
        slot = st.fwd_free[g, gp.fwd_nfree]
    else:
        slot = gp.fwd_fresh
        gp.fwd_fresh += 1
    st.fwd_refs[g, slot] = copies
    gp.fwd_live += 1
    if gp.fwd_live > gp.fwd_peak:
        gp.fwd_peak = gp.fwd_live
    gp.fwd_rows_in += 1
    gp.fwd_copies_in += copies
    return slot


@compiled
def forward_address(st, slot):
    p = st.p[0]
    return p.fwd_addr + slot * p.row_bytes


@compiled
def forward_kick(st, g, tick):
    """Ask GPU g's forwarding unit to look at its queue at `tick` (an earlier request wins)."""
    gp = st.gpu[g]
    if gp.fwd_next < 0 or tick < gp.fwd_next:
        gp.fwd_next = tick
        push(st, tick, EV_HUB_FORWARD, g, 0)


@compiled
def forward_enqueue(st, g, s, i, n, ready):
    """Row i of stream s (n descriptors: the carrier and its copies) is in the buffer at `ready`:
    one forwarding request per named expert."""
    gp = st.gpu[g]
    for c in range(n):
        e = st.fwd_q[g, gp.fwd_q_count]
        e[0] = s
        e[1] = i + c
        e[2] = ready
        gp.fwd_q_count += 1
    forward_kick(st, g, ready)


@compiled
def _forward_one(st, g, s, i, ready, tick):
    """Put forwarding request (s, i) into this hub's RPM stream toward its expert's GPU; False
    if that ring is full."""
    p = st.p[0]
    R = p.rpm_ring
    o = st.mrow[s * R + i % R]              # the origin descriptor (stream origin -> g)
    s2 = g * p.num_gpus + st.moe_place[o.expert, 0]
    sr2 = st.stream[s2]
    if sr2.head - sr2.tail >= R:
        st.gpu[g].fwd_ring_waits += 1
        return False
    # every descriptor of the row holds the buffer slot (the carrier's ring entry may free first)
    src = forward_address(st, o.alloc)
    in_stream = o.length if o.rowsp else p.rpm_header_bytes + o.length
    row = take_descriptor(st, g, s2, o.slot, o.expert, src, o.length, o.home, o.aux, in_stream,
                           tick)
    st.tb[o.slot].outstanding -= 1      # the origin's thread block counts the row once
    if o.rowsp:
        mark_rowsp(st, s2, row)
    row.row_size = o.row_size
    row.row_stored = o.row_stored
    row.nop = o.nop
    row.fwd_from = s
    row.fwd_idx = i
    if p.rpm_schedule == SCHEDULE_PAPER:
        schedule_insert(st, g, s2, 1)
    gp = st.gpu[g]
    gp.fwd_copies += 1
    gp.fwd_wait_ticks += tick - ready
    rpm_kick(st, g, tick)
    return True


@compiled
def forward_run(st, g, tick):
    """EV_HUB_FORWARD: every ready request whose RPM ring has room enters it (queue order kept
    for the rest). Returns True when buffer slots were freed while AAU packets were parked (the
    caller retries them: the AAU imports this module, not the other way round)."""
    gp = st.gpu[g]
    if gp.fwd_next != tick:
        return False        # superseded by an earlier request
    gp.fwd_next = -1
    retry = gp.fwd_retry == 1
    gp.fwd_retry = 0
    kept = 0
    later = -1
    for q in range(gp.fwd_q_count):
        s = st.fwd_q[g, q, 0]
        i = st.fwd_q[g, q, 1]
        ready = st.fwd_q[g, q, 2]
        if ready <= tick:
            if _forward_one(st, g, s, i, ready, tick):
                continue
        elif later < 0 or ready < later:
            later = ready
        e = st.fwd_q[g, kept]
        e[0] = s
        e[1] = i
        e[2] = ready
        kept += 1
    gp.fwd_q_count = kept
    if later >= 0:
        forward_kick(st, g, later)
    if kept == 0:
        rpm_end_forwarded(st, g, tick)
    return retry


@compiled
def forward_landed(st, s, i, tick):
    """The forwarded copy of origin descriptor i of stream s (origin -> forwarder) has landed at
    its destination: the origin descriptor is done (its ring entry frees in order), and the
    forwarding-buffer slot frees with the row's last copy."""
    p = st.p[0]
    R = p.rpm_ring
    G = p.num_gpus
    f = s % G
    o = st.mrow[s * R + i % R]
    o.done = 1
    slot = o.alloc
    st.fwd_refs[f, slot] -= 1
    if st.fwd_refs[f, slot] == 0:
        gf = st.gpu[f]
        st.fwd_free[f, gf.fwd_nfree] = slot
        gf.fwd_nfree += 1
        gf.fwd_live -= 1
        if gf.aau_q_count > 0:
            gf.fwd_retry = 1        # parked packets may get the slot
            forward_kick(st, f, tick)
    sr = st.stream[s]
    if sr.tail < sr.head and st.mrow[s * R + sr.tail % R].done:
        while sr.tail < sr.head and st.mrow[s * R + sr.tail % R].done:
            sr.tail += 1
        wake_hub_waiters(st, s // G, tick)


@compiled
def forward_source_ended(st, g, src, tick):
    """Stream src -> g has ended at g: one more of the rail peers that forward through g."""
    p = st.p[0]
    n = p.nic_gpus_per_node
    if p.fwd_per_node and src // n != g // n and src % n == g % n:
        st.gpu[g].fwd_in_done += 1
        rpm_end_forwarded(st, g, tick)
