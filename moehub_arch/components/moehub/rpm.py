"""RPM, the runtime packet manager (sender side of the MoE-Hub).

`send_to_expert` hands a row to the RPM naming only an expert. The placement table gives the
expert's GPU; the row joins the byte stream toward that GPU as a `row_header_bytes` header (expert,
size, home slot, aux) followed by its data, and its descriptor takes an entry of the stream's row
ring (`row_queue_depth`; a full ring blocks the producer: back-pressure). Row descriptors stay in
the ring until the receiver has landed the row.

Each destination has a merge buffer of `merge_buffer_bytes`: the packetizer sends a packet to a
destination once its unsent bytes fill min(`packet_bytes`, merge buffer), so packets are full even
when rows are not packet multiples (a packet may carry the end of one row and the start of the
next). A partly filled buffer is flushed when its oldest byte has waited `flush_timeout`, or when
the stream ends. Packets carry the stream offset of their first byte; the data is read from local
HBM when the packet is built (charged on the HBM model) and copied at delivery.

Arbitration among destinations with a sendable packet and link room: `round_robin`, or
`longest_first` (the destination with the most unsent bytes first, which fills that expert GPU's
tiles early instead of interleaving every destination). `schedule` (system.gpu.hub.moe.rpm):
  arrival     every destination with a sendable packet (full, or a partial one whose flush timer
              expired) competes;
  full_first  destinations with a full packet go before flushed partial ones (the first of the
              MoE-Hub RPM's orders, arXiv 2605.05888);
  uncoalesced the ablation without the RPM: no coalescing - a packet never carries bytes of two
              rows, and a row's bytes leave as soon as it is accepted (no flush wait);
  paper       the MoE-Hub RPM's whole order (arXiv 2605.05888): full_first across destinations,
              and toward each destination critical rows before `.nop` ones (st.rowsp.nop), then
              the smallest row id first (so the receivers' early tiles fill first), ties in
              acceptance order. The row id is st.rowsp's row; a send_to_expert row, which names
              none, is ordered by its home index (the moehub dispatch's t * k + j, the row id its
              row-sparse dispatch stores). A row accepted behind rows it goes before overtakes
              them while none of their bytes has been packetized (a row being sent is not
              interrupted; a multi-expert store moves with its copies; a later store of a row
              never overtakes an earlier store of that row, which holds the row's window slot).
              Rows still wait for a full packet or the flush timer as under full_first.
The RPM emits `packets_per_cycle` packets per hub cycle and shares the NVLink transmit queues
with the address-centric packetizer.

End of stream: `notify_ready.eos N` counts producers; at the N-th the RPM marks every stream of this
GPU as ending; after its last data packet each stream sends an EOS packet carrying its total size
(so the receiver knows when it has everything even if packets overtake each other across links).
Packets to the sending GPU itself skip the links (loopback through the hub).

Across nodes (system.gpu.hub.moe.internode): per_expert streams each row to its expert's GPU,
whichever node it is on (the NIC carries the stream); per_node sends a multi-expert store naming
experts on another node to that node's forwarding hub, the GPU with this GPU's local rank there
(stream_target), marked `fwd` so that the receiver buffers and forwards it (forward.py). With
per_node the streams inside the node end later (rpm_end_forwarded): they carry forwarded rows.

Row-sparse stores (the published ISA, arXiv 2605.05888; workload.layer.moehub.stores: row_sparse).
`rowsp.malloc id, expert, row_bytes` registers allocation `id` in this GPU's hub (`rowsp_table`,
system.gpu.hub.moe.rpm.allocation_ids entries: the MMIO registration of a rowspMalloc call and
the TLB entry mapping the id to its logical destination; the expert's GPU comes from the
placement table and the rows land in that expert's receive window, whose base the AAU holds).
`st.rowsp id, row, offset, src, bytes` stores `bytes` at `offset` of row `row` of the
allocation. A store takes a descriptor of the stream toward the expert's GPU like a
send_to_expert row, but carries no row header in the stream (the packet header names id, row
and offset) and its bytes never share a packet with another store's: it leaves in packets of
at most packet_bytes, the last one as soon as it is accepted (nothing could fill it). Several
stores may fill one row at different offsets: later ones (`joins`) share the window slot the
row's first bytes got; the receiver's row table (rowtable.py) counts the row's landed bytes, and
the row is complete, and gets its one completion record, when they reach the registered row
size. Every store's ring entry frees when its own bytes landed, so the ring limits the stores in
flight, not the rows open at once (a ring of one entry carries rows of several stores). A row
whose first bytes took a window slot holds it until its later stores come, so the ring keeps an
entry free for the next store of each such row (ring_reserved): stores of new rows waiting at
the receiver for a slot of a full window can never take every entry from the stores that would
empty it. A kernel
may mix both kinds toward one GPU: send_to_expert rows coalesce up to the next st.rowsp store,
never into it.

Multi-expert stores (an ISA experiment beyond the paper; workload.layer.moehub.multi_expert_store).
`send_to_experts` / `st.rowsp.experts` name up to 8 experts on one GPU (a mask over 8
consecutive registers). The row enters the stream once, in a *carrier* descriptor; each further
expert takes a *copy* descriptor right behind it (a ring entry holding its expert, home and
window slot, no stream bytes). The AAU allocates the carrier's and its copies' slots together,
writes every packet's bytes into each, and completes them together: a record per expert.
"""
from ...engine.jit import compiled, inline

from ...engine.bitset import bit_clear, bit_set, cyclic_next, words_for
from ...engine.events import push
from ...engine.state import RPM_HIST_BINS
from ..hbm import hbm_access
from ..nvlink import txq_push
from ..link_room import hold_gpu_departures
from ..packet import PK_MOE, PK_MOE_EOS, packet_alloc, packet_flits
from ..hub import pick_channel
from ..trace import CAT_RPM, TR_RPM_TX, trace_event
from ..wakeups import rpm_kick
from ...config.keys import key_param
from ...config.schema import RPM_SCHEDULES
from .area import rpm_sram_bytes
from ..sizing import stream_slots_per_sm
from ...declare import (Array, Block, Debug, Event, Param, Record, Semantic, Stat, StatGroup, Timer,
                        counters, fields)
from ...isa.encoding import (SEM_ROWSP_MALLOC, SEM_SEND_EXPERT, SEM_SEND_EXPERTS, SEM_ST_ROWSP,
                             SEM_ST_ROWSP_EXPERTS)

POLICY_ROUND_ROBIN = 0
POLICY_LONGEST_FIRST = 1
# rpm.schedule (config.schema.RPM_SCHEDULES)
SCHEDULE_ARRIVAL = 0
SCHEDULE_FULL_FIRST = 1
SCHEDULE_OFF = 2
SCHEDULE_PAPER = 3
POLICY_NAMES = ("round_robin", "longest_first")

EV_RPM_TX = 7        # a0 = GPU: the MoE-Hub RPM emits its next packet (its component timer)
EV_MOE_LOOPBACK = 8  # a0 = packet, a1 = GPU: an RPM packet to the sending GPU itself arrives


def rpm_packet_bytes(cfg):
    """Payload of a full RPM packet: at most rpm.packet_bytes, at most what one link packet
    carries (system.nvlink.max_payload_bytes) and at most what the merge buffer holds."""
    rpm = cfg.system.gpu.hub.moe.rpm
    return min(rpm.packet_bytes, cfg.system.nvlink.max_payload_bytes, rpm.merge_buffer_bytes)


def _rpm(key, field, value=None, unit=None, how=""):
    return key_param(field, f"system.gpu.hub.moe.rpm.{key}", value, unit, how)


def _tb_slots(cfg):
    """Thread-block slots of the whole system (State.tb's length)."""
    return cfg.system.num_gpus * cfg.system.gpu.num_sms * stream_slots_per_sm(cfg)


def _stream(st, s):
    G = int(st.p[0].num_gpus)
    return f"stream GPU {s // G} -> GPU {s % G}"


def check_streams(sim, out):
    st = sim.state
    if not int(st.p[0].num_experts):
        return
    sr = st.stream
    out.check(sr.sent == sr.accepted, "MoE-Hub stream bytes accepted but not sent",
              lambda s: f"{_stream(st, s)}: {int(sr.accepted[s])} accepted, {int(sr.sent[s])} sent")
    out.check(sr.recv == sr.accepted, "MoE-Hub stream bytes sent != received",
              lambda s: f"{_stream(st, s)}: {int(sr.accepted[s])} sent, {int(sr.recv[s])} received")
    out.check(sr.head == sr.tail, "MoE-Hub row rings not empty (rows not landed)",
              lambda s: f"{_stream(st, s)}: {int(sr.head[s] - sr.tail[s])} rows")
    out.check(sr.eos_sent == sr.done, "MoE-Hub end-of-stream markers sent but streams unfinished",
              lambda s: f"{_stream(st, s)}")


def rpm_findings(sim):
    """A blocked packetizer, full row rings (the stuck-run report)."""
    st = sim.state
    p = st.p[0]
    G = int(p.num_gpus)
    out = []
    for g in range(G):
        hub = f"system.gpu{g}.hub"
        if st.gpu[g].rpm_blocked:
            out.append(f"{hub}.rpm: packetizer waiting for transmit-queue room on its links")
        for d in range(G):
            sr = st.stream[g * G + d]
            if int(p.num_experts) and int(sr.head - sr.tail) >= int(p.rpm_ring):
                out.append(f"{hub}.rpm: row ring toward GPU {d} full ({int(p.rpm_ring)} rows "
                           f"accepted, not yet landed; system.gpu.hub.moe.rpm.row_queue_depth)")
    return out


def _mean_read_wait(i):
    G, gr = int(i.p.num_gpus), i.rec
    return gr.rpm_read_wait / 1000 / (gr.rpm_packets - G) if gr.rpm_packets > G else 0.0


def _multi_used(st):
    return int(st.gpu.multi_stores.sum()) > 0


def _order_used(st):
    return int(st.p[0].rpm_schedule) == SCHEDULE_PAPER or int(st.gpu.rowsp_nop.sum()) > 0


def _data_efficiency(i):
    gr = i.rec
    data = gr.rpm_payload - gr.rpm_headers * i.p.rpm_header_bytes
    return data / gr.rpm_wire if gr.rpm_wire else 0.0


BLOCK = Block(
    "rpm", __doc__.split("\n\n")[0],
    params=(
        _rpm("merge_buffer_bytes", "rpm_merge_bytes"),
        _rpm("packet_bytes", "rpm_packet_bytes", rpm_packet_bytes,
             how="capped by the link payload and the merge buffer: rpm_packet_bytes()"),
        _rpm("flush_timeout", "rpm_flush_ticks"),
        _rpm("row_queue_depth", "rpm_ring"),
        _rpm("row_header_bytes", "rpm_header_bytes"),
        _rpm("packets_per_cycle", "rpm_ticks_per_packet",
             lambda cfg: int(round(1e12 / (cfg.system.gpu.hub.clock
                                           * cfg.system.gpu.hub.moe.rpm.packets_per_cycle))),
             "ps", "as the packetizer's time per packet at the hub clock"),
        _rpm("arbitration", "rpm_policy",
             lambda cfg: POLICY_NAMES.index(cfg.system.gpu.hub.moe.rpm.arbitration), "choice",
             "its index: POLICY_* above"),
        _rpm("schedule", "rpm_schedule",
             lambda cfg: RPM_SCHEDULES.index(cfg.system.gpu.hub.moe.rpm.schedule), "choice",
             "its index: SCHEDULE_* above, config.schema.RPM_SCHEDULES"),
    ),
    records=(Record("stream", "byte streams from one GPU's RPM to one GPU (index src * G + dst)"),
             Record("mrow", "row descriptors in flight, a ring of rpm_ring per stream")),
    arrays=(Array("rowsp_table", "per GPU, the registered row-sparse allocations (rowsp.malloc): "
                  "[expert, row bytes] per id (-1: not registered)",
                  lambda cfg: (cfg.system.num_gpus, cfg.system.gpu.hub.moe.rpm.allocation_ids, 2),
                  fill=-1),
            Array("rpm_active", "per GPU, a bit set (engine/bitset.py) of the destinations whose "
                  "stream may have something to send: set when bytes or an end of stream are "
                  "accepted, cleared when the packetizer finds the stream empty (so it visits only "
                  "those, in round-robin order, instead of every GPU per packet)",
                  lambda cfg: (cfg.system.num_gpus, words_for(cfg.system.num_gpus))),
            Array("mrow_key", "per State.mrow entry (same index, scratch row included), "
                  "row_key(aux, home) of its descriptor, kept in step with the ring (set when the "
                  "descriptor is taken, moved with it by schedule_insert): _open_row compares "
                  "these contiguous words and reads a descriptor only where they match",
                  lambda cfg: (cfg.system.num_gpus ** 2 * cfg.system.gpu.hub.moe.rpm.row_queue_depth
                               + 1,)),
            Array("rpm_open_miss", "per TB slot, the last st.rowsp search of an open row that "
                  "found none: [stream head then, stream, allocation id, row id] (-1: none); "
                  "a retry of the same store skips the search while the stream's head is "
                  "unchanged (_open_row_of_store)",
                  lambda cfg: (_tb_slots(cfg), 4), fill=-1),),
    fields=fields(
        "stream",
        ("accepted", "stream bytes accepted (row headers + data), i.e. the stream's end offset"),
        ("sent", "stream bytes packetized"),
        ("head", "row descriptors: next to accept (monotonic)"),
        ("tail", "oldest not yet landed (monotonic)"),
        ("oldest", "acceptance tick of the oldest unsent byte's row (-1: nothing unsent)"),
        ("eos_pending", "end of stream requested"), ("eos_sent", "EOS marker sent"),
        ("recv", "receiver side: bytes processed"), ("total", "receiver side: final size"),
        ("eos_seen", "receiver side: EOS arrived"), ("done", "receiver side: finished"),
        ("allocs", "receiver side: rows of the stream given a window slot (parked packets' stamp)"),
        ("sent_row", "sender side: monotonic index of the descriptor holding the next unsent "
                     "byte (row_at(sent)), kept by sent_row() from where it last was, so the "
                     "packetizer finds it in a step or two instead of a binary search of the ring"),
        ("rowsp_end", "sender side: 1 + the highest monotonic ring index an st.rowsp descriptor "
                      "may hold (0: none since the stream began); an upper bound, raised by "
                      "mark_rowsp and schedule_insert, where _coalesce_end's walk stops"),
        init={"oldest": -1})
    # the first eight fields (64 bytes: one cache line of the 64-byte aligned array) are what the
    # packetizer reads of a descriptor for every packet (sent_row, _sendable, _emit); the rest
    # are read when a row is accepted, reordered or lands
    + fields("mrow", ("start", "stream offset of the row"), ("length", ""),
             ("carrier", "multi-expert copy: monotonic index of the descriptor whose stream bytes "
                         "it shares (-1: its own bytes)"),
             ("rowsp", "1: an st.rowsp store (no row header in the stream; home = row id, "
                       "aux = allocation id)"),
             ("src_addr", ""), ("launch", "of the TB that sent it (wire-byte stats)"),
             ("accept_tick", ""), ("home", ""),
             ("expert", ""), ("aux", ""), ("alloc", "window slot (receiver)"),
             ("recv", "bytes landed"), ("done", "1: landed"), ("slot", "TB slot that sent it"),
             ("joins", "st.rowsp: 1 if the store joins a row an earlier store began (0: it "
                       "begins the row)"),
             ("offset", "st.rowsp: byte offset of the store in its row"),
             ("row_size", "st.rowsp: the registered row size"),
             ("row_stored", "st.rowsp, a row's first store: bytes stored into the row so far, "
                            "until the row has a window slot (then its row-table entry counts)"),
             ("copies", "multi-expert carrier: copy descriptors right behind it"),
             ("nop", "1: non-critical (st.rowsp.nop); schedule paper sends it after critical rows"))
    + fields("gpu", ("rpm_next_tx", "tick of the packetizer's timer (-1: idle)"),
             ("rpm_blocked", "1: waiting for transmit-queue room"), ("rpm_blocked_since", ""),
             ("rpm_rr", "round-robin pointer over destinations"),
             ("eos_notes", "notify_ready.eos calls counted"),
             ("loop_inflight", "loopback packets in flight"),
             ("rpm_rows", ""), ("rpm_packets", ""), ("rpm_payload", ""), ("rpm_wire", ""),
             ("rpm_stall_ticks", ""), ("rpm_flushes", ""), ("rpm_accept_stalls", ""),
             ("combine_rows", "rows sent home by send_home"), ("rpm_read_wait", ""),
             ("rowsp_stores", ""), ("rowsp_rows", ""),
             ("rpm_headers", "row headers put in the streams"),
             ("multi_stores", ""), ("multi_copies", ""), ("multi_saved", ""),
             ("rpm_reordered", ""), ("rowsp_nop", ""),
             init={"rpm_next_tx": -1}),
    stats=(
        StatGroup("gpu", "hub", (Stat("combine_rows", "rows", "rows sent home by send_home",
                                      "combine_rows"),)),
        StatGroup("gpu", "hub.rpm", counters((
            ("rows_accepted", "rpm_rows", "rows", "rows taken by send_to_expert"),
            ("packets", "rpm_packets", "packets", "packets emitted (data and end-of-stream)"),
            ("payload_bytes", "rpm_payload", "bytes", "stream bytes sent (row headers + row data)"),
            ("wire_bytes", "rpm_wire", "bytes", "bytes on the wire for those packets (link headers included)"),
            ("flushes", "rpm_flushes", "packets", "partly filled packets sent because the flush timeout expired"),
            ("stall_ticks", "rpm_stall_ticks", "ps", "time the RPM had a packet ready but no link queue room"),
            ("accept_stalls", "rpm_accept_stalls", "count", "send_to_expert attempts refused: row ring full"),
            ("rowsp_stores", "rowsp_stores", "stores", "st.rowsp stores accepted"),
            ("rowsp_rows", "rowsp_rows", "rows", "rows begun by st.rowsp stores (counted in rows_accepted)"),
            ("read_wait_ticks", "rpm_read_wait", "ps", "sum over data packets of the time from packetizing "
             "to their payload read from local HBM (a link sends its head packet only once it is read)"),
        )) + (
            Stat("payload_efficiency", "ratio", "stream bytes / wire bytes",
                 lambda i: i.rec.rpm_payload / i.rec.rpm_wire if i.rec.rpm_wire else 0.0),
            Stat("data_efficiency", "ratio",
                 "row data bytes / wire bytes (row and link headers are overhead)", _data_efficiency),
            Stat("read_wait_mean_ns", "ns", "mean time a data packet waited for its payload "
                 "to be read from HBM (end-of-stream packets excluded)", _mean_read_wait),
            Stat("merge_fill_bin{k}", "packets",
                 lambda i, b: f"packets emitted with the merge buffer {b}/{RPM_HIST_BINS} to "
                              f"{b + 1}/{RPM_HIST_BINS} full (last bin: full)",
                 lambda i, b: i.st.rpm_hist[i.g, b], each=range(RPM_HIST_BINS)),
            Stat("sram_bytes", "bytes", "area proxy: merge buffers + row descriptor rings (header + "
                 "16 B of state)", lambda i: rpm_sram_bytes(i.p)),
        )),
        # multi-expert stores (an experiment beyond the paper): their stats appear once a kernel
        # used one, so runs without them keep their stat lists
        StatGroup("gpu", "hub.rpm", counters((
            ("multi_expert_stores", "multi_stores", "stores", "send_to_experts / st.rowsp.experts "
             "stores accepted (each moves its row once toward one GPU)"),
            ("multi_expert_copies", "multi_copies", "rows", "rows those stores named beyond their "
             "first expert: written at the receiver without crossing a link again (counted in "
             "rows_accepted)"),
            ("multi_expert_bytes_saved", "multi_saved", "bytes", "stream bytes (row headers + data) "
             "those copies did not put on the wires, against one store per expert"),
        )), enabled=_multi_used),
        # the paper's RPM order and .nop stores: their stats appear when one is used
        StatGroup("gpu", "hub.rpm", counters((
            ("reordered_rows", "rpm_reordered", "rows", "rows (stores, multi-expert groups) that "
             "schedule paper placed ahead of rows accepted before them toward the same GPU"),
            ("nop_stores", "rowsp_nop", "stores", "st.rowsp.nop stores accepted (non-critical "
             "rows)"),
        )), enabled=_order_used),
        StatGroup("system", "moe", (
            Stat("multi_expert_bytes_saved", "bytes", "stream bytes every GPU's multi-expert "
                 "stores did not put on the wires (system.gpu.hub.rpm.multi_expert_bytes_saved)",
                 lambda i: int(i.st.gpu.multi_saved.sum())),
        ), enabled=_multi_used),
    ),
    events=(Event("rpm_tx", EV_RPM_TX, "the RPM emits its next packet"),
            Event("moe_loopback", EV_MOE_LOOPBACK, "an RPM packet to its own GPU arrives")),
    timers=(Timer("rpm", EV_RPM_TX, lambda cfg: cfg.system.num_gpus, "one per GPU: its RPM packetizer"),),
    checks=(check_streams,),
    findings=(rpm_findings,),
    debug=(Debug("RPM", CAT_RPM, (TR_RPM_TX,), groups=("MoEHub",), describe={
        TR_RPM_TX: lambda n, g, dst, nbytes: (
            f"system.gpu{g}.hub.rpm",
            f"sends {f'{nbytes} B of stream' if nbytes else 'end-of-stream marker'} to GPU {dst}")}),),
    # the stores that hand it rows (moehub/isa.py: they check their operands, then call the RPM)
    semantics=(Semantic((SEM_SEND_EXPERT,), "components.moehub.isa.send_to_expert",
                        "send_to_expert: a row to a logical destination"),
               Semantic((SEM_ROWSP_MALLOC,), "components.moehub.isa.rowsp_malloc",
                        "rowsp.malloc: register an allocation id"),
               Semantic((SEM_ST_ROWSP,), "components.moehub.isa.st_rowsp",
                        "st.rowsp: a row-sparse store"),
               Semantic((SEM_SEND_EXPERTS, SEM_ST_ROWSP_EXPERTS),
                        "components.moehub.isa.store_experts",
                        "send_to_experts / st.rowsp.experts: one row to several experts")),
)


@compiled
def _oldest_unsent(st, s):
    """Acceptance tick of the oldest row with unsent bytes in stream s (schedule paper: rows
    leave out of acceptance order, so it is not always the next row's)."""
    p = st.p[0]
    sr = st.stream[s]
    oldest = -1
    for k in range(sent_row(st, s), sr.head):
        t = st.mrow[s * p.rpm_ring + k % p.rpm_ring].accept_tick
        if oldest < 0 or t < oldest:
            oldest = t
    return oldest


@compiled
def row_header(p, row):
    """Stream bytes ahead of a descriptor's data: the row header, or none for st.rowsp."""
    return 0 if row.rowsp else p.rpm_header_bytes


@compiled
def stream_bytes(p, row):
    """Bytes a descriptor holds in its stream: header + data, none for a multi-expert copy."""
    return 0 if row.carrier >= 0 else row_header(p, row) + row.length


@compiled
def rpm_end_of_stream(st, g, producers, tick):
    """notify_ready.eos: one producer finished; the N-th ends every stream of this GPU."""
    gp = st.gpu[g]
    gp.eos_notes += 1
    gp.dam_notifies += 1
    if gp.eos_notes == producers:
        p = st.p[0]
        G = p.num_gpus
        n = p.nic_gpus_per_node
        for d in range(G):
            if p.fwd_per_node and d // n == g // n:
                continue    # streams in the node also carry forwarded rows: rpm_end_forwarded
            st.stream[g * G + d].eos_pending = 1
            bit_set(st.rpm_active[g], d)
        if p.fwd_per_node:
            gp.eos_local = 1
            rpm_end_forwarded(st, g, tick)
        rpm_kick(st, g, tick)


@compiled
def rpm_reopen_ready(st, g):
    """Every stream of the last round into and out of GPU g has finished (and no internode
    per_node forwarding, whose units keep no rounds): notify_ready.reopen may begin a new one."""
    p = st.p[0]
    G = p.num_gpus
    if p.fwd_per_node:
        return False
    for d in range(G):
        if not (st.stream[g * G + d].eos_sent and st.stream[d * G + g].done):
            return False
    return True


@compiled
def rpm_reopen(st, g):
    """notify_ready.reopen (rpm_reopen_ready held): GPU g's streams, both ways, begin a new round
    (the layer's backward sends gradient rows through the hub after the forward's rows): the
    sender's end-of-stream requests and count, the receiver's EOS state start again; the byte
    counts run on (an EOS carries the stream's total since the first round)."""
    p = st.p[0]
    G = p.num_gpus
    for d in range(G):
        out = st.stream[g * G + d]
        out.eos_pending = 0
        out.eos_sent = 0
        into = st.stream[d * G + g]
        into.eos_seen = 0
        into.done = 0
    st.gpu[g].eos_notes = 0


@compiled
def rpm_end_forwarded(st, g, tick):
    """internode per_node (forward.py): end GPU g's streams inside its node once its producers are
    done, every rail peer's stream to it has ended and its forwarding queue is empty (nothing more
    can enter them)."""
    p = st.p[0]
    gp = st.gpu[g]
    n = p.nic_gpus_per_node
    if gp.eos_local != 1 or gp.fwd_q_count > 0 or gp.fwd_in_done < p.num_gpus // n - 1:
        return
    gp.eos_local = 2
    for d in range(g - g % n, g - g % n + n):
        st.stream[g * p.num_gpus + d].eos_pending = 1
        bit_set(st.rpm_active[g], d)
    rpm_kick(st, g, tick)


@compiled
def stream_target(st, g, d):
    """The GPU whose stream carries GPU g's rows for GPU d: d itself, or with internode per_node
    and d on another node, the forwarding hub there - the GPU with g's local rank (one rail)."""
    p = st.p[0]
    n = p.nic_gpus_per_node
    if p.fwd_per_node and d // n != g // n:
        return d - d % n + g % n
    return d


@compiled
def _sendable(st, s, tick):
    """Bytes stream s would put in a packet now (0: nothing to send yet; -1: only its EOS)."""
    p = st.p[0]
    sr = st.stream[s]
    avail = sr.accepted - sr.sent
    if avail == 0:
        return -1 if (sr.eos_pending and not sr.eos_sent) else 0
    full = p.rpm_packet_bytes
    i = sent_row(st, s)
    row = st.mrow[s * p.rpm_ring + i % p.rpm_ring]
    if row.rowsp:
        # a row-sparse store's bytes travel alone: full packets (or a train), then its tail at once
        rest = row.start + row.length - sr.sent
        return rest if rest < full else min(rest // full, p.packet_train) * full
    if p.rpm_schedule == SCHEDULE_OFF:
        # no coalescing: up to the end of the row the next byte belongs to (rows are accepted
        # whole, so it is all there)
        return min(row.start + p.rpm_header_bytes + row.length - sr.sent, full)
    end = _coalesce_end(st, s, i)
    if end < sr.accepted:
        # send_to_expert rows followed by an st.rowsp store: they coalesce up to it, never into
        # it (its packets name id, row and offset), and nothing else can fill their last packet
        rest = end - sr.sent
        return rest if rest < full else min(rest // full, p.packet_train) * full
    if avail >= full:
        return min(avail // full, p.packet_train) * full   # one packet, or a train of them
    if sr.eos_pending or tick - sr.oldest >= p.rpm_flush_ticks:
        return avail
    return 0


@compiled
def _coalesce_end(st, s, i):
    """Stream offset where the send_to_expert rows from descriptor i on end: the start of the
    first later st.rowsp store, or the stream's end (a kernel may mix both kinds toward one GPU)."""
    p = st.p[0]
    sr = st.stream[s]
    if st.gpu[s // p.num_gpus].rowsp_stores == 0:
        return sr.accepted
    # no st.rowsp descriptor lies at or beyond rowsp_end (a send_to_expert run after the
    # stores of an earlier phase ends with the stream, found without a walk of the ring)
    for k in range(i + 1, min(sr.head, sr.rowsp_end)):
        r = st.mrow[s * p.rpm_ring + k % p.rpm_ring]
        if r.rowsp and r.carrier < 0:
            return r.start
    return sr.accepted


@compiled
def _has_room(st, g, d):
    """A link transmit queue toward d has room (loopback: fewer packets in flight than one
    receive buffer holds, the loopback path's own back-pressure)."""
    if d == g:
        return st.gpu[g].loop_inflight < st.p[0].rx_buffer_flits
    return pick_channel(st, g, d, False) >= 0


@compiled
def row_at(st, s, offset):
    """Monotonic index of the first live row of stream s that ends after byte `offset` (the row
    holding it); sr.head if none. Rows are contiguous in the stream, so a binary search."""
    p = st.p[0]
    sr = st.stream[s]
    lo, hi = sr.tail, sr.head
    while lo < hi:
        mid = (lo + hi) // 2
        row = st.mrow[s * p.rpm_ring + mid % p.rpm_ring]
        if row.start + stream_bytes(p, row) > offset:
            hi = mid
        else:
            lo = mid + 1
    return lo


@compiled
def sent_row(st, s):
    """row_at(st, s, sr.sent) - the descriptor holding stream s's next unsent byte - found by
    stepping from where it was last (State.stream.sent_row) instead of a binary search of the
    ring. Rows are contiguous in the stream (descriptor k + 1 starts where k ends; a multi-expert
    copy holds no bytes), so row_at's answer is the one live index i whose row starts at or
    before `sent` and ends after it - or, all bytes sent, the head; the walk reads one
    descriptor per step and stops exactly there, whatever moved since (the tail, the paper
    schedule's reordering). It is a step or two: `sent` moves by a packet (or train) at a
    time, and rows are packets long or longer."""
    p = st.p[0]
    sr = st.stream[s]
    base = s * p.rpm_ring
    i = min(max(sr.sent_row, sr.tail), sr.head)
    if i == sr.head and i > sr.tail and sr.sent < sr.accepted:
        i -= 1              # bytes unsent: the row holding them is further back
    while i > sr.tail and st.mrow[base + i % p.rpm_ring].start > sr.sent:
        i -= 1              # (rows ahead of `sent` moved in: the paper schedule)
    while i < sr.head:
        row = st.mrow[base + i % p.rpm_ring]
        if row.start + stream_bytes(p, row) > sr.sent:
            break
        i += 1
    sr.sent_row = i
    return i


@inline
def rpm_packetize(st, g, tick):
    """EV_RPM_TX: pick a destination by the arbitration policy and emit one packet to it."""
    p = st.p[0]
    gp = st.gpu[g]
    if gp.rpm_next_tx != tick:
        return  # superseded by an earlier activation
    gp.rpm_next_tx = -1
    G = p.num_gpus
    best = -1
    best_n = 0
    partial = -1        # schedule full_first: the first destination with only a partial packet
    waiting_room = False
    next_flush = -1
    # the streams in round-robin order from rpm_rr, skipping those known to be empty (an empty
    # stream is one the scan of every destination would pass over without effect)
    active = st.rpm_active[g]
    k = -1
    while True:
        k = cyclic_next(active, gp.rpm_rr, k + 1, G)
        if k >= G:
            break
        d = (gp.rpm_rr + k) % G
        s = g * G + d
        n = _sendable(st, s, tick)
        if n == 0:
            sr = st.stream[s]
            if sr.accepted == sr.sent:
                bit_clear(active, d)   # nothing left, no end of stream to send: empty
                continue
            t = sr.oldest + p.rpm_flush_ticks   # bytes that wait for the flush timer
            if next_flush < 0 or t < next_flush:
                next_flush = t
            continue
        if not _has_room(st, g, d):
            waiting_room = True
            continue
        size = st.stream[s].accepted - st.stream[s].sent
        if (p.rpm_schedule == SCHEDULE_FULL_FIRST or p.rpm_schedule == SCHEDULE_PAPER) \
                and 0 <= n < p.rpm_packet_bytes:
            if partial < 0:
                partial = d
            continue
        if best < 0 or (p.rpm_policy == POLICY_LONGEST_FIRST and size > best_n):
            best = d
            best_n = size
            if p.rpm_policy == POLICY_ROUND_ROBIN:
                break
    if best < 0:
        best = partial      # no full packet anywhere: a flushed partial one (or an EOS)
    if best < 0:
        if waiting_room:
            hold_gpu_departures(st, g)   # packets sent ahead on its links wake it on departure
            gp.rpm_blocked = 1
            gp.rpm_blocked_since = tick
        elif next_flush >= 0:
            rpm_kick(st, g, next_flush)
        return
    gp.rpm_rr = (best + 1) % G
    npk = _emit(st, g, best, tick)
    rpm_kick(st, g, tick + npk * p.rpm_ticks_per_packet)


@compiled
def _emit(st, g, d, tick):
    """Build and send the next packet (or train) of stream g -> d; returns its link packets."""
    p = st.p[0]
    gp = st.gpu[g]
    s = g * p.num_gpus + d
    sr = st.stream[s]
    n = _sendable(st, s, tick)
    pkt = packet_alloc(st)
    pk = st.pk[pkt]
    pk.src = g
    pk.dst = d
    pk.req = -1
    pk.src_addr = 0
    ready = tick
    launch = st.mrow[s * p.rpm_ring + (sr.head - 1) % p.rpm_ring].launch if sr.head > 0 else -1
    if n < 0:  # end of stream marker, after every data byte
        pk.kind = PK_MOE_EOS
        pk.payload = 0
        pk.addr = sr.accepted
        pk.value = sr.accepted
        sr.eos_sent = 1
    else:
        pk.kind = PK_MOE
        pk.addr = sr.sent
        pk.payload = n
        pk.value = 0
        full = p.rpm_packet_bytes
        # the data is read from the producers' buffers in local HBM (from the packet's first byte)
        i = sent_row(st, s)
        row = st.mrow[s * p.rpm_ring + i % p.rpm_ring]
        if n < full and not sr.eos_pending and p.rpm_schedule != SCHEDULE_OFF and not row.rowsp \
                and _coalesce_end(st, s, i) == sr.accepted:
            gp.rpm_flushes += 1     # (not a run of rows cut short by a following st.rowsp store)
        # merge-buffer fill at emission, in eighths of the buffer
        fill = min(sr.accepted - sr.sent, p.rpm_merge_bytes)
        b = fill * RPM_HIST_BINS // p.rpm_merge_bytes
        st.rpm_hist[g, min(b, RPM_HIST_BINS - 1)] += 1
        launch = row.launch   # the packet's bytes count for the kernel that sent its first row
        first = row.src_addr + max(0, sr.sent - row.start - row_header(p, row))
        ready = hbm_access(st, g, first, n, tick, False)
        gp.rpm_read_wait += ready - tick   # the packet cannot leave before its data is read
        sr.sent += n
        sr.oldest = -1
        if sr.sent < sr.accepted:
            if p.rpm_schedule == SCHEDULE_PAPER and sr.accepted - sr.sent < full:
                # the flush timer is read only while less than a full packet is unsent: then the
                # few rows left are scanned (their order is not their acceptance order)
                sr.oldest = _oldest_unsent(st, s)
            else:
                sr.oldest = st.mrow[s * p.rpm_ring + sent_row(st, s) % p.rpm_ring].accept_tick
        gp.rpm_payload += n
    pk.flits, pk.npk = packet_flits(st, pk.payload, p.rpm_packet_bytes)
    pk.ready = ready + p.hub_tx_latency_ticks
    gp.rpm_packets += pk.npk
    gp.rpm_wire += pk.flits * p.flit_bytes
    trace_event(st, CAT_RPM, TR_RPM_TX, g, d, pk.payload, tick)
    if d != g and launch >= 0:
        st.ln[launch].tx_wire += pk.flits * p.flit_bytes
    if d == g:
        gp.loop_inflight += 1
        push(st, pk.ready, EV_MOE_LOOPBACK, pkt, g)
    else:
        c = pick_channel(st, g, d, True)
        txq_push(st, c, pkt, tick)
    return pk.npk
