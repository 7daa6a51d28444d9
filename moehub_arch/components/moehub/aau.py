"""AAU, the address allocation unit (receiver side of the MoE-Hub).

Every local expert has a receive window of `window_rows` slots of `row_bytes` in HBM (base,
capacity and a bump pointer in the AAU) and a completion-record array with one `record_bytes`
record per slot. When the first bytes of a row arrive (whichever packet brings them: packets of one
stream may overtake each other on parallel links), the AAU allocates the expert's next slot
(`alloc_latency`), and takes a completion-record table entry (`record_table_entries` live records
per GPU). Each packet's data is written at its row's slot (through l2.link_write: into HBM, or
into the L2 with system.gpu.l2.link_writes = write_back; the packet's link buffer is held until
the memory took it); when a row is complete the AAU writes
its record {source GPU, home, aux, bytes} and tells the DAM, and the row's descriptor leaves the
sender's ring (which may unblock a producer waiting in send_to_expert).

The record table is the row address table (RAT) of MoE-Hub (arXiv 2605.05888): one entry per row
allocated whose tile is not yet released, mapping the row to its slot. What a full table does is
system.gpu.hub.moe.aau.overflow:
  stall  (this project's first reading) a row cannot be allocated while the table is full;
  spill  (the published design) the table keeps the newest `record_table_entries` entries: taking
         an entry when it is full evicts the oldest one (FIFO) to device memory (a record_bytes
         HBM write into the spill area, one entry per window slot, not waited for); a later packet
         of a row whose entry was evicted first reads it back (an HBM read the packet's writes wait
         for) and puts it back in the table, evicting the then oldest. Capacity costs HBM traffic
         and time, never an allocation stall. Entries leave the table when their tile is released.

A row cannot be allocated when its expert's window holds `window_rows` live rows (rows of tiles
not yet released) or (overflow: stall) the record table is full. The packet then waits in the AAU's staging store
and is retried whenever a consumer releases a tile (notify_ready.release); packets that need no
new slot (the rest of already allocated rows) keep flowing, so allocated rows always complete.
A staged packet gives its link buffer back (credits return): the store is sized to the bytes the
senders' row rings can have in flight (G x row_queue_depth rows), so the back-pressure that stops
the senders is their full row rings (send_to_expert blocks), and the links never wedge. Should
the store still fill (many tiny flush packets), further waiting packets keep their link credits.
Nothing is dropped.

Where a row's slot is: system.gpu.hub.moe.aau.allocation:
  bump    (the published design) the next slot of its expert's window, in arrival order;
  paired  (a training design beyond the paper) a gradient row takes the slot of its forward row,
         from a pairing table the AAU writes at each forward row's completion (pairing.py); the
         DAM makes each forward tile ready once its gradient rows landed (dam.py).

Assumption: the row header (expert, size, home, aux) is known with any piece of the row, as if
each packet carried a short row tag; its bytes are counted once per row in the stream.
"""
from ...engine.jit import compiled

from ..hbm import move_bytes
from ..l2 import link_write
from ..hub import owe_link_responses, wake_hub_waiters
from ..nvlink import channel_count_arrival, credit_return
from ..packet import PK_MOE, PK_MOE_EOS, packet_free
from ..wakeups import rpm_kick
from ..trace import CAT_AAU, TR_AAU_ALLOC, TR_AAU_STALL, trace_event
from .dam import dam_pair_slot, dam_source_ended, dam_tile_open
from .rpm import row_at, row_header
from ...config.keys import key_param
from ...declare import (Array, Block, Debug, Param, Receive, Record, Stat, StatGroup, counters,
                        fields)
from .rowtable import RS_ALLOC, RS_FIELDS, RS_LANDED, RS_RAT, RS_SIZE, open_row_link, open_row_slot
from .rpm import rpm_packet_bytes
from .rat import RAT_ON_CHIP, RAT_SPILLED, rat_insert, rat_refill, window_index
from .area import aau_sram_bytes, aau_staging_bytes
from .pairing import pair_read, pair_slot, paired_expert
from ...config.models import load_model, with_top_k
from ..sizing import experts_of_window, local_experts
from .aau_records import (row_complete, row_entry, row_tracked, slot_address, store_landed,
                          tracked_row_complete)
from .forward import (forward_address, forward_enqueue, forward_has_slot, forward_kick,
                      forward_source_ended, forward_take_slot)


def aau_staging_packets(cfg):
    """Packets the AAU staging store holds: every row the senders' rings may have in flight to
    one GPU, as full packets plus one partial packet per row. A full packet carries
    min(max payload, merge buffer) bytes: a merge buffer smaller than the link payload makes
    more, smaller packets (sizing by the payload alone let the store fill, parked packets kept
    their link credits and wedged the link for other traffic: found by tests/test_fuzz.py)."""
    hub, moe = cfg.system.gpu.hub, cfg.workload.moe
    if not moe.num_experts:
        return 0
    payload = rpm_packet_bytes(cfg)
    per_row = -(-(moe.row_bytes + hub.moe.rpm.row_header_bytes) // payload) + 1
    return cfg.system.num_gpus * hub.moe.rpm.row_queue_depth * per_row


def check_aau(sim, out):
    st = sim.state
    if not int(st.p[0].num_experts):
        return
    gp = st.gpu
    out.check((gp.aau_q_count == 0) & (gp.aau_staged == 0) & (gp.loop_inflight == 0),
              "MoE-Hub AAU packets still waiting (or loopback packets in flight)",
              lambda g: f"system.gpu{g}.hub.aau: {int(gp.aau_q_count[g])} waiting, "
                        f"{int(gp.loop_inflight[g])} in loopback")
    out.equal("MoE-Hub rows landed with a completion record vs rows accepted",
              gp.aau_records_written.sum(), gp.rpm_rows.sum())
    out.check(gp.records_live == 0, "MoE-Hub completion records never released "
              "(claimed tiles without notify_ready.release)",
              lambda g: f"system.gpu{g}.hub.aau: {int(gp.records_live[g])} live records")
    # overflow: spill: released tiles take their rows' entries out of the table; a refill reads
    # back an entry that an eviction wrote
    out.check(gp.rat_live == 0, "MoE-Hub AAU row-table entries left after every tile was released",
              lambda g: f"system.gpu{g}.hub.aau: {int(gp.rat_live[g])} entries on chip")
    out.check(st.stream.open_head < 0, "MoE-Hub row-sparse rows left half landed (stores that "
              "never came)", lambda s: f"stream {s}: row-table entry {int(st.stream[s].open_head)}")
    out.check(gp.aau_refills <= gp.aau_spills, "MoE-Hub AAU row-table refills without a spill",
              lambda g: f"system.gpu{g}.hub.aau: {int(gp.aau_refills[g])} refills, "
                        f"{int(gp.aau_spills[g])} spills")


def aau_findings(sim):
    """Packets waiting for space, a full record table, full windows (the stuck-run report)."""
    st = sim.state
    p = st.p[0]
    if not int(p.num_experts):
        return []
    out = []
    for g in range(int(p.num_gpus)):
        gp = st.gpu[g]
        hub = f"system.gpu{g}.hub"
        if int(gp.aau_q_count):
            out.append(f"{hub}.aau: {int(gp.aau_q_count)} packet(s) waiting for window or "
                       f"record-table space ({int(gp.aau_staged)} in the staging store)")
        if not int(p.aau_spill) and int(gp.records_live) >= int(p.records_cap):
            out.append(f"{hub}.aau: completion-record table full ({int(gp.records_live)} of "
                       f"{int(p.records_cap)}; system.gpu.hub.moe.aau.record_table_entries)")
    for w in range(st.win.shape[0]):
        win = st.win[w]
        live = int(win.alloc) - int(win.released_tiles) * int(p.tile_rows)
        if live >= int(p.window_rows):
            claimed = int(win.next_claim) - int(win.released_tiles)
            experts = ", ".join(map(str, experts_of_window(st, w)))
            out.append(f"system.gpu{w // int(p.local_experts)}.hub.aau: window of expert "
                       f"{experts} full ({live} of {int(p.window_rows)} rows live: {claimed} "
                       f"tile(s) claimed and not released, the rest not claimed; "
                       f"workload.moe.window_rows)")
    return out


def record_table_full(sim):
    """Likely cause of a stuck run: a full completion-record table with packets waiting on it."""
    st = sim.state
    p = st.p[0]
    out = []
    if not int(p.num_experts):
        return out
    for g in range(int(p.num_gpus)):
        gp = st.gpu[g]
        if not int(p.aau_spill) and int(gp.records_live) >= int(p.records_cap) \
                and int(gp.aau_q_count):
            out.append(
                f"the completion-record table of GPU {g}'s AAU is full ({int(gp.records_live)} "
                f"of {int(p.records_cap)}) with {int(gp.aau_q_count)} packet(s) waiting for a "
                f"record: no tile can complete to free one. Each of {int(p.local_experts)} "
                f"local expert(s) may hold a partial tile of up to {int(p.tile_rows) - 1} "
                f"rows, so system.gpu.hub.moe.aau.record_table_entries needs at least "
                f"{int(p.local_experts) * (int(p.tile_rows) - 1) + 1} with "
                f"system.gpu.hub.moe.dam.tile_rows = {int(p.tile_rows)}")
    return out


def _aau_ticks(cfg):
    hub = cfg.system.gpu.hub
    return int(round(hub.moe.aau.alloc_latency_cycles * 1e12 / hub.clock))


def _window_slots(cfg):
    """Window slots of every GPU (the params window_rows and local_experts, times the GPUs)."""
    return (cfg.system.num_gpus * max(local_experts(cfg), 1)
            * max(cfg.workload.moe.window_rows, cfg.system.gpu.hub.moe.dam.tile_rows))


def _paired(cfg):
    return cfg.system.gpu.hub.moe.aau.allocation == "paired" and cfg.workload.moe.num_experts > 0


def pair_homes(cfg):
    """allocation: paired - row ids (homes) per source GPU the pairing table indexes: a layer's
    token-expert pairs per GPU (tokens_per_gpu x top_k; 0 when not paired)."""
    if not _paired(cfg):
        return 0
    layer = cfg.workload.layer
    return layer.tokens_per_gpu * with_top_k(load_model(layer.model), layer.top_k).top_k


def _pair_table_shape(cfg):
    return (cfg.system.num_gpus, cfg.system.num_gpus * pair_homes(cfg)) if _paired(cfg) \
        else (1, 1)


def unpaired_rows(sim):
    """Likely cause of a stuck run (allocation: paired): gradient rows waiting for a forward row
    that never named their (source, home)."""
    st = sim.state
    p = st.p[0]
    if not int(p.num_experts) or not int(p.aau_paired):
        return []
    out = []
    for g in range(int(p.num_gpus)):
        if int(st.gpu[g].aau_q_count) or int(st.gpu[g].aau_pair_unindexed):
            out.append(
                f"GPU {g}'s AAU (system.gpu.hub.moe.aau.allocation: paired) holds "
                f"{int(st.gpu[g].aau_q_count)} waiting packet(s); a gradient row (expert >= "
                f"{int(p.pair_base)}) whose (source GPU, home) no forward row named has no slot "
                f"to take ({int(st.gpu[g].aau_pair_unindexed)} forward row(s) had a home outside "
                f"0 .. {int(p.pair_homes) - 1}, the table's range)")
    return out


BLOCK = Block(
    "aau", __doc__.split("\n\n")[0],
    params=(
        key_param("num_experts", "workload.moe.num_experts"),
        Param("local_experts", "workload.moe.placement, workload.moe.num_experts, system.num_gpus",
              "experts", "windows per GPU (most experts on one GPU, at least 1)",
              lambda cfg: max(local_experts(cfg), 1), "derived: sizing.local_experts"),
        key_param("window_rows", "workload.moe.window_rows",
                  lambda cfg: max(cfg.workload.moe.window_rows, cfg.system.gpu.hub.moe.dam.tile_rows),
                  how="at least one tile"),
        key_param("row_bytes", "workload.moe.row_bytes", lambda cfg: max(cfg.workload.moe.row_bytes, 1),
                  how="at least 1"),
        Param("win_addr", "", "address", "base of the windows buffer (moe_windows)", None,
              "derived: the builder's memory layout"),
        Param("rec_addr", "", "address", "base of the completion records (moe_records)", None,
              "derived: the builder's memory layout"),
        key_param("record_bytes", "system.gpu.hub.moe.aau.record_bytes"),
        key_param("records_cap", "system.gpu.hub.moe.aau.record_table_entries"),
        key_param("aau_spill", "system.gpu.hub.moe.aau.overflow",
                  lambda cfg: int(cfg.system.gpu.hub.moe.aau.overflow == "spill"), "bool",
                  "1: spill, 0: stall"),
        Param("rat_spill_addr", "", "address", "base of the spill area (moe_rat_spill)", None,
              "derived: the builder's memory layout"),
        key_param("aau_alloc_ticks", "system.gpu.hub.moe.aau.alloc_latency_cycles", _aau_ticks,
                  "ps", "in ticks at the hub clock"),
        Param("aau_staging", "", "packets", "staging store capacity (aau_staging_packets())",
              aau_staging_packets, "derived: the senders' row rings in full packets"),
        key_param("aau_paired", "system.gpu.hub.moe.aau.allocation", lambda cfg: int(_paired(cfg)),
                  "bool", "1: paired, 0: bump"),
        Param("pair_base", "workload.moe.num_experts, system.gpu.hub.moe.aau.allocation", "experts", "allocation: paired - the "
              "first gradient window's expert (the forward's experts: half the windows)",
              lambda cfg: cfg.workload.moe.num_experts // 2 if _paired(cfg) else 0,
              "derived: a training layer's experts E, then their gradient windows E + e"),
        Param("pair_local", "workload.moe.placement, system.gpu.hub.moe.aau.allocation", "windows", "allocation: paired - forward "
              "windows per GPU (a gradient window's forward window is pair_local before it)",
              lambda cfg: max(local_experts(cfg), 1) // 2 if _paired(cfg) else 0,
              "derived: block placement, the gradient windows after the forward's"),
        Param("pair_homes", "workload.layer.tokens_per_gpu, workload.layer.top_k, "
              "system.gpu.hub.moe.aau.allocation", "rows", "allocation: paired - row "
              "ids per source GPU in the pairing table", pair_homes,
              "derived: tokens_per_gpu x the model's top_k (the layer's pairs per GPU)"),
        key_param("pair_entry_bytes", "system.gpu.hub.moe.aau.pair_entry_bytes"),
        key_param("pair_on_chip", "system.gpu.hub.moe.aau.pair_table",
                  lambda cfg: int(_paired(cfg) and cfg.system.gpu.hub.moe.aau.pair_table == "on_chip"),
                  "bool", "with allocation: paired - 1: hub SRAM, 0: device memory"),
        Param("pair_addr", "", "address", "base of the pairing table (moe_pair)", None,
              "derived: the builder's memory layout"),
    ),
    records=(Record("win", "expert receive windows (index gpu * local_experts + local slot)"),),
    arrays=(Array("aau_rows", "row-table state of half-landed row-sparse rows, one entry per "
                  "window slot (components/moehub/rowtable.py: RS_* fields; RS_ALLOC -1: free)",
                  lambda cfg: (_window_slots(cfg), RS_FIELDS), fill=-1),
            Array("aau_pair", "allocation: paired - each GPU's pairing table (pairing.py): "
                  "[source GPU x pair_homes + home] = forward slot + 1 (0: none); its contents "
                  "live in device memory (moe_pair), whose accesses are charged to HBM",
                  _pair_table_shape),),
    fields=fields("win", ("alloc", "rows allocated (bump pointer)"))
    + fields("gpu", ("aau_staged", "packets in the staging store"),
             ("aau_q_count", "packets waiting (State.aau_q)"),
             ("aau_stall_since", "tick the head packet started waiting"),
             ("records_live", "completion records in use"),
             ("aau_allocs", ""), ("aau_stalls", ""), ("aau_stall_ticks", ""),
             ("aau_records_written", ""), ("aau_records_peak", ""), ("aau_window_peak", ""),
             ("aau_data_packets", ""), ("aau_write_wait", ""),
             # row address table with overflow: spill (State.aau_rat: a FIFO ring with holes of
             # released entries): ring head, ring span, entries on chip; spills, refills, time
             # packets waited for refills
             ("rat_head", ""), ("rat_span", ""), ("rat_live", ""), ("aau_spills", ""),
             ("aau_refills", ""), ("aau_refill_wait", ""),
             # allocation: paired (pairing.py)
             ("aau_pair_writes", ""), ("aau_pair_reads", ""), ("aau_pair_wait", ""),
             ("aau_pair_unindexed", ""))
    + fields("mrow", ("rat", "the row's AAU row-table entry: RAT_* above"))
    + fields("stream", ("open_head", "receiver side: first State.aau_rows entry of the stream's "
                        "half-landed row-sparse rows (-1: none; rowtable.py)"),
             ("alloc_next", "receiver side: the stream's first row waiting for a window slot "
                            "in stream order, or an index before it (_first_unallocated)"),
             init={"open_head": -1}),
    stats=(StatGroup("gpu", "hub.aau", counters((
        ("allocations", "aau_allocs", "rows", "window slots allocated"),
        ("alloc_stalls", "aau_stalls", "packets", "packets that waited for window or record-table space"),
        ("alloc_stall_ticks", "aau_stall_ticks", "ps", "time packets were waiting for space"),
        ("window_peak_rows", "aau_window_peak", "rows", "peak live rows in one expert window"),
        ("records_written", "aau_records_written", "records", "completion records written"),
        ("records_peak", "aau_records_peak", "records", "peak live completion records"),
        ("data_packets", "aau_data_packets", "packets", "data packets written on arrival (not parked)"),
        ("write_wait_ticks", "aau_write_wait", "ps", "sum over those packets of the time from the AAU "
         "taking them to HBM having absorbed their writes (their link buffer space is held meanwhile)"),
        ("spills", "aau_spills", "entries", "row-table entries evicted to device memory (overflow: spill)"),
        ("refills", "aau_refills", "entries", "evicted row-table entries read back for a later packet "
         "of their row (overflow: spill)"),
        ("refill_wait_ticks", "aau_refill_wait", "ps", "sum of the time packets waited for those reads"),
        ("pair_writes", "aau_pair_writes", "entries", "pairing-table entries written at forward rows' "
         "completion (allocation: paired; posted HBM writes)"),
        ("pair_reads", "aau_pair_reads", "entries", "pairing-table entries read for gradient rows "
         "(allocation: paired; each an HBM read the row's writes wait for)"),
        ("pair_read_wait_ticks", "aau_pair_wait", "ps", "sum of the time gradient rows waited for "
         "their pairing-table reads"),
        ("pair_unindexed", "aau_pair_unindexed", "rows", "forward rows whose home lies outside the "
         "pairing table (no gradient row can pair with them)"),
    )) + (
        Stat("write_wait_mean_ns", "ns", "mean time from the AAU taking a data packet to HBM having "
             "absorbed its writes (link credits return only then)",
             lambda i: i.rec.aau_write_wait / 1000 / i.rec.aau_data_packets
             if i.rec.aau_data_packets else 0.0),
        Stat("spill_bytes", "bytes", "HBM bytes written by row-table evictions",
             lambda i: i.rec.aau_spills * i.p.record_bytes),
        Stat("refill_bytes", "bytes", "HBM bytes read back by row-table refills",
             lambda i: i.rec.aau_refills * i.p.record_bytes),
        Stat("sram_bytes", "bytes", "area proxy: completion-record table + per-window "
             "base/capacity/bump registers (+ the pairing table with pair_table: on_chip)",
             lambda i: aau_sram_bytes(i.p)),
        Stat("staging_sram_bytes", "bytes", "area proxy: the staging store's packets (parked for "
             "window space), each up to one RPM packet of payload", lambda i: aau_staging_bytes(i.p)),
        Stat("pair_table_bytes", "bytes", "the pairing table (allocation: paired): num_gpus x "
             "pair_homes entries of pair_entry_bytes, in device memory or (pair_table: on_chip) "
             "hub SRAM, where sram_bytes counts it too",
             lambda i: i.p.num_gpus * i.p.pair_homes * i.p.pair_entry_bytes),
        Stat("pair_hbm_bytes", "bytes", "HBM bytes the pairing table moved (its writes and reads; "
             "0 with pair_table: on_chip)",
             lambda i: (i.rec.aau_pair_writes + i.rec.aau_pair_reads) * i.p.pair_entry_bytes
             * (1 - i.p.pair_on_chip)),
        Stat("spill_area_bytes", "bytes", "device memory reserved for evicted row-table entries "
             "(one per window slot; overflow: spill)",
             lambda i: i.p.aau_spill * i.p.local_experts * i.p.window_rows * i.p.record_bytes
             if i.p.num_experts else 0),
    )),),
    checks=(check_aau,),
    findings=(aau_findings,),
    receives=(Receive((PK_MOE, PK_MOE_EOS), "components.moehub.aau.aau_receive",
                      "a stream's bytes or its end reach the destination's AAU (the link answers "
                      "them as writes: hub.owe_link_responses)", by_address=True),),
    causes=(record_table_full, unpaired_rows),
    debug=(Debug("AAU", CAT_AAU, (TR_AAU_ALLOC, TR_AAU_STALL), groups=("MoEHub",), describe={
        TR_AAU_ALLOC: lambda n, g, expert, row: (
            f"system.gpu{g}.hub.aau", f"allocates row {row} of expert {expert}'s window"),
        TR_AAU_STALL: lambda n, g, src, waiting: (
            f"system.gpu{g}.hub.aau",
            f"packet from GPU {src} waits for window or record space ({waiting} waiting)")}),),
)



@compiled
def aau_receive(st, g, c, pkt, tick):
    """An MoE-Hub packet reached GPU g (over channel c, or c = -1 for loopback)."""
    if c >= 0:
        # MoE-Hub packets are link writes too: the link answers them (hub.py)
        owe_link_responses(st, g, st.pk[pkt].src, st.pk[pkt].npk, tick)
        channel_count_arrival(st, c, pkt)
    pk = st.pk[pkt]
    pk.ready = tick + st.p[0].hub_rx_latency_ticks   # ready to be processed by the AAU
    gp = st.gpu[g]
    gp.hub_rx_packets += pk.npk
    allocs = gp.aau_allocs
    t = pk.ready
    done = _process(st, g, pkt, t)
    if done >= 0:
        if st.pk[pkt].kind != PK_MOE_EOS:
            # the link buffer is held until memory has absorbed the packet's writes
            gp.aau_data_packets += 1
            gp.aau_write_wait += done - t
        _leave_link(st, g, c, pkt, done)
        packet_free(st, pkt)
    else:
        # no window slot or record entry: the packet waits in the AAU's staging store. While the
        # store has room the link buffer entry is freed (credits return); a full store keeps the
        # credits.
        e = st.aau_q[g, gp.aau_q_count]
        e[0] = pkt
        e[1] = c
        e[2] = 0
        e[3] = _stream_allocs(st, g, pkt)
        if gp.aau_staged < st.p[0].aau_staging:
            gp.aau_staged += 1
            e[2] = 1
            _leave_link(st, g, c, pkt, t)
        if gp.aau_q_count == 0:
            gp.aau_stall_since = tick
        gp.aau_q_count += 1
        gp.aau_stalls += 1
        trace_event(st, CAT_AAU, TR_AAU_STALL, g, pk.src, gp.aau_q_count, tick)
    if gp.aau_allocs != allocs and gp.aau_q_count > 0:
        # rows got their slots: waiting packets of the same streams may now proceed
        aau_retry(st, g, t)


@compiled
def _leave_link(st, g, c, pkt, t):
    """The packet no longer occupies its link receive buffer (or the loopback path) from t."""
    p = st.p[0]
    if c >= 0:
        credit_return(st, c, st.pk[pkt].flits, t + st.ch[c].latency)
    else:
        gp = st.gpu[g]
        gp.loop_inflight -= 1
        if gp.rpm_blocked:  # the RPM may be waiting for loopback room
            gp.rpm_blocked = 0
            gp.rpm_stall_ticks += t - gp.rpm_blocked_since
            rpm_kick(st, g, t)


@compiled
def aau_retry(st, g, tick):
    """Space was freed (or rows allocated): process every waiting packet that can proceed now
    (any order: each carries its own stream offsets), keeping the others in arrival order.
    Passes repeat while they allocate: a packet may wait for a row another one allocates."""
    gp = st.gpu[g]
    while gp.aau_q_count > 0:
        allocs = gp.aau_allocs
        _retry_pass(st, g, tick)
        if gp.aau_allocs == allocs:
            break


@compiled
def _retry_pass(st, g, tick):
    gp = st.gpu[g]
    kept = 0
    for i in range(gp.aau_q_count):
        pkt = st.aau_q[g, i, 0]
        c = st.aau_q[g, i, 1]
        staged = st.aau_q[g, i, 2]
        # a packet still blocked on its first row would change nothing in _process: skip it (a
        # full record table otherwise makes every allocation re-walk the whole staging store)
        done = -1
        if not _still_blocked(st, g, pkt, st.aau_q[g, i, 3]):
            done = _process(st, g, pkt, max(tick, st.pk[pkt].ready))
        if done >= 0:
            if staged:
                gp.aau_staged -= 1
            else:
                _leave_link(st, g, c, pkt, done)
            packet_free(st, pkt)
            continue
        st.aau_q[g, kept, 0] = pkt
        st.aau_q[g, kept, 1] = c
        st.aau_q[g, kept, 2] = staged
        st.aau_q[g, kept, 3] = _stream_allocs(st, g, pkt)   # blocked as of now
        kept += 1
    if gp.aau_q_count > 0 and kept == 0:
        gp.aau_stall_ticks += tick - gp.aau_stall_since
    gp.aau_q_count = kept
    # packets that kept their credits move to the store as it frees up
    for i in range(kept):
        if st.aau_q[g, i, 2] == 0 and gp.aau_staged < st.p[0].aau_staging:
            st.aau_q[g, i, 2] = 1
            gp.aau_staged += 1
            _leave_link(st, g, st.aau_q[g, i, 1], st.aau_q[g, i, 0], tick)


@compiled
def _first_unallocated(st, s):
    """Monotonic index of stream s's first live row that waits for a window slot in stream order
    (sr.head if none). Rows get their slots in stream order, so the rows before it are allocated
    - or later stores of rows (`joins`), which take no slot of their own: the slot their row's
    first store got, whenever that is (_process). A row before the index stays so while it is in
    the ring, so the index only moves on: kept in sr.alloc_next, amortised O(1)."""
    p = st.p[0]
    sr = st.stream[s]
    i = max(sr.alloc_next, sr.tail)
    while i < sr.head:
        row = st.mrow[s * p.rpm_ring + i % p.rpm_ring]
        if row.alloc < 0 and not row.joins:
            break
        i += 1
    sr.alloc_next = i
    return i


@compiled
def _stream_allocs(st, g, pkt):
    """Rows of the packet's stream that got a window slot so far (-1 for end-of-stream packets,
    which never wait)."""
    pk = st.pk[pkt]
    if pk.kind == PK_MOE_EOS:
        return -1
    return st.stream[pk.src * st.p[0].num_gpus + g].allocs


@compiled
def _has_room(st, g, src, row):
    """The row's expert window has a free slot and the record table a free entry (a paired row:
    its forward row's slot, which is its own, is known and the record table has an entry)."""
    p = st.p[0]
    if paired_expert(st, row.expert):
        return pair_slot(st, g, src, row.home) >= 0 and \
            (p.aau_spill or st.gpu[g].records_live < p.records_cap)
    win = st.win[window_index(st, g, row.expert)]
    live = win.alloc - win.released_tiles * p.tile_rows
    return live < p.window_rows and (p.aau_spill or st.gpu[g].records_live < p.records_cap)


@compiled
def _still_blocked(st, g, pkt, parked_allocs):
    """True if a parked packet would still make no progress: its first byte belongs to a row
    without a slot that cannot get one now (not the stream's next row to allocate, or no room).
    A parked packet always starts at such a row (_process keeps the rest from the blocking row
    on), so this is exactly the case where _process would return -1 and change nothing.
    `parked_allocs`: its stream's allocation count when it was last found blocked; with the
    record table full and no slot given to the stream since, the answer is yes in O(1)."""
    p = st.p[0]
    pk = st.pk[pkt]
    if pk.kind == PK_MOE_EOS:
        return False
    s = pk.src * p.num_gpus + g
    if not p.aau_spill and st.gpu[g].records_live >= p.records_cap \
            and st.stream[s].allocs == parked_allocs:
        return True
    first = row_at(st, s, pk.addr)
    if first >= st.stream[s].head:
        return False
    row = st.mrow[s * p.rpm_ring + first % p.rpm_ring]
    if row.alloc >= 0:
        return False
    if row.joins:       # a later store needs no space, only its row's slot
        return open_row_slot(st, s, row.aux, row.home) < 0
    return first != _first_unallocated(st, s) or not _room_for_row(st, g, s, first)


@compiled
def _room_for_row(st, g, s, i):
    """Row i of stream s can be allocated now: its expert window has a free slot and the table a
    free entry - and so have the windows of a multi-expert carrier's copies, which are allocated
    with it (all or none: a copy never waits for its own space)."""
    p = st.p[0]
    row = st.mrow[s * p.rpm_ring + i % p.rpm_ring]
    if row.fwd:
        return forward_has_slot(st, g)   # a row to forward: one slot of the forwarding buffer
    if not _has_room(st, g, s // p.num_gpus, row):
        return False
    if row.copies == 0:
        return True
    if not p.aau_spill and st.gpu[g].records_live + 1 + row.copies > p.records_cap:
        return False
    for c in range(1, row.copies + 1):
        if not _has_room(st, g, s // p.num_gpus, st.mrow[s * p.rpm_ring + (i + c) % p.rpm_ring]):
            return False
    return True


@compiled
def _allocate(st, g, src, row):
    """Bump-allocate the next slot of the row's expert window (a paired row: its forward row's
    slot); False if window or table is full."""
    p = st.p[0]
    gp = st.gpu[g]
    if not _has_room(st, g, src, row):
        return False
    w = window_index(st, g, row.expert)
    win = st.win[w]
    paired = paired_expert(st, row.expert)
    if paired:
        # its forward row's slot; the DAM opens the tile for the forward tile's rows
        index = pair_slot(st, g, src, row.home)
        dam_pair_slot(st, w, index)
    else:
        index = win.alloc
        tile_index = index // p.tile_rows
        if index % p.tile_rows == 0:  # first row of a new tile
            dam_tile_open(st, w, tile_index, 0, 0)
        tl = st.tile[w * p.tiles_per_window + tile_index % p.tiles_per_window]
        tl.rows_alloc += 1
        if tl.rows_alloc == p.tile_rows:
            tl.closed = 1
    win.alloc += 1
    row.alloc = index
    trace_event(st, CAT_AAU, TR_AAU_ALLOC, g, row.expert, index, st.sys[0].q_now)
    gp.records_live += 1
    gp.aau_allocs += 1
    if gp.records_live > gp.aau_records_peak:
        gp.aau_records_peak = gp.records_live
    live = win.alloc - win.released_tiles * p.tile_rows   # including this row
    if live > gp.aau_window_peak and not paired:     # a paired window's slots are its own
        gp.aau_window_peak = live
    return True


@compiled
def _process(st, g, pkt, t):
    """Allocate, write and account one packet; returns when its data is written, or -1 (nothing
    changed but allocations) if it must wait for window or record-table space."""
    p = st.p[0]
    pk = st.pk[pkt]
    src = pk.src
    s = src * p.num_gpus + g
    sr = st.stream[s]
    free_at = t
    if pk.kind == PK_MOE_EOS:
        sr.total = pk.value
        sr.eos_seen = 1
        st.gpu[g].dam_eos_received += 1
    else:
        lo = pk.addr
        hi = pk.addr + pk.payload
        stop = hi
        # rows in stream order: allocate where needed (stopping at the first that cannot be),
        # then write every piece before that point
        first = row_at(st, s, lo)   # rows before it ended earlier in the stream
        # rows get their slots in stream order: a later row allocated while an earlier one waits
        # (its packet parked) could take the slot or record the earlier row needs, yet never
        # complete (its first bytes are in the parked packet): a deadlock found by fuzzing
        nxt = _first_unallocated(st, s)
        for i in range(first, sr.head):
            row = st.mrow[s * p.rpm_ring + i % p.rpm_ring]
            if row.start >= hi:
                break
            if row.carrier >= 0:
                continue        # a multi-expert copy: allocated, refilled and written with its carrier
            if row.alloc < 0 and row.joins:
                # a later st.rowsp store of a row: once the row's first bytes have their slot
                # (its first store is earlier in the stream) the row table names it - a hit,
                # whatever other rows of the stream still wait for space. Waiting in stream
                # order behind a new row that waits for a slot of a window this very row keeps
                # full would never end (tests/test_rowsp.py's tiny tables)
                e = open_row_slot(st, s, row.aux, row.home)
                if e < 0:
                    stop = max(lo, row.start)   # its first store has no slot yet
                    break
                row.alloc = st.aau_rows[e, RS_ALLOC]
                sr.allocs += 1
            if row.alloc >= 0:
                if row_tracked(row):
                    # a row of several stores: its row-table entry is its own (rowtable.py)
                    e = row_entry(st, g, row)
                    if st.aau_rows[e, RS_RAT] == RAT_SPILLED:
                        t = rat_refill(st, g, s, i, row, t)
                        st.aau_rows[e, RS_RAT] = RAT_ON_CHIP
                        if t > free_at:
                            free_at = t
                    continue
                k = i
                owner = row
                for c in range(row.copies + 1):
                    if c > 0:
                        k = i + c       # a multi-expert copy's own entry
                        owner = st.mrow[s * p.rpm_ring + k % p.rpm_ring]
                    if owner.rat == RAT_SPILLED:
                        # the row's table entry was evicted: read it back before writing
                        t = rat_refill(st, g, s, k, owner, t)
                        if t > free_at:
                            free_at = t
                continue
            if i != nxt or not _room_for_row(st, g, s, i):
                stop = max(lo, row.start)
                break
            if row.fwd:
                # a row this hub forwards (forward.py): one buffer slot for it and its copies
                fs = forward_take_slot(st, g, row.copies + 1)
                for c in range(row.copies + 1):
                    st.mrow[s * p.rpm_ring + (i + c) % p.rpm_ring].alloc = fs
                    sr.allocs += 1
            for c in range(0 if row.fwd else row.copies + 1):   # the row, each multi-expert copy
                d = st.mrow[s * p.rpm_ring + (i + c) % p.rpm_ring]
                _allocate(st, g, src, d)
                sr.allocs += 1
                if paired_expert(st, d.expert):
                    # the slot came from the pairing table in device memory: the row's writes
                    # wait for that read (then the allocation pipeline, below)
                    t = pair_read(st, g, src, d.home, t)
                    free_at = t
                if p.aau_spill:
                    rat_insert(st, g, s, i + c, d, t)
                if row_tracked(d):
                    # the first bytes of a row that more stores fill: the row table tracks it
                    e = row_entry(st, g, d)
                    open_row_link(st, s, e, d.aux, d.home, d.row_size, d.row_stored, d.alloc)
                    st.aau_rows[e, RS_RAT] = d.rat
            nxt = _first_unallocated(st, s)
            if free_at == t:
                t += p.aau_alloc_ticks   # the allocation pipeline, once per packet
                free_at = t
        for i in range(first, sr.head):
            row = st.mrow[s * p.rpm_ring + i % p.rpm_ring]
            H = row_header(p, row)
            end = row.start + H + row.length
            if row.start >= stop:
                break
            if row.carrier >= 0:
                continue
            a = max(lo, row.start + H) - (row.start + H)      # data bytes [a, b) of the row
            b = min(stop, end) - (row.start + H)
            got = min(stop, end) - max(lo, row.start)
            if row.fwd:
                # into the forwarding buffer, once for every expert the row names; complete, it
                # queues one forwarding request per expert (forward.py)
                if b > a:
                    dst = forward_address(st, row.alloc) + a
                    done, _ = link_write(st, g, dst, b - a, t)
                    if done > free_at:
                        free_at = done
                    move_bytes(st, src, row.src_addr + a, g, dst, b - a, -1)
                for c in range(row.copies + 1):
                    st.mrow[s * p.rpm_ring + (i + c) % p.rpm_ring].recv += got
                if got > 0 and row.recv == H + row.length:
                    forward_enqueue(st, g, s, i, row.copies + 1, free_at + p.fwd_ticks)
                continue
            for c in range(row.copies + 1):
                # the AAU writes the bytes into the row's slot and each multi-expert copy's
                d = st.mrow[s * p.rpm_ring + (i + c) % p.rpm_ring]
                if b > a:
                    dst = slot_address(st, g, d.expert, d.alloc) + d.offset + a
                    done, _ = link_write(st, g, dst, b - a, t)
                    if done > free_at:
                        free_at = done
                    move_bytes(st, src, d.src_addr + a, g, dst, b - a, -1)
                d.recv += got
            if row.copies > 0:
                # a multi-expert store is whole rows (st.rowsp.experts: offset 0, the row size)
                if row.recv == H + row.length:
                    for c in range(row.copies + 1):
                        row_complete(st, g, src, st.mrow[s * p.rpm_ring + (i + c) % p.rpm_ring],
                                      free_at)
                continue
            if not row.rowsp:
                if row.recv == H + row.length:
                    row_complete(st, g, src, row, free_at)
                continue
            if not row_tracked(row):
                # a whole row in one st.rowsp store
                if row.recv == row.length and not row.done:
                    row_complete(st, g, src, row, free_at)
                continue
            # a row of several st.rowsp stores: complete when their landed bytes reach the
            # registered size (the row table counts them); each store's ring entry frees when
            # its own bytes landed
            if got == 0:
                continue        # none of its bytes here (a later packet waiting for its slot)
            e = row_entry(st, g, row)
            st.aau_rows[e, RS_LANDED] += got
            if row.recv == row.length and not row.done:
                row.done = 1
                store_landed(st, row.slot, free_at)
            if st.aau_rows[e, RS_LANDED] == st.aau_rows[e, RS_SIZE]:
                tracked_row_complete(st, g, src, s, e, row.expert, free_at)
        sr.recv += stop - lo
        st.gpu[g].hub_rx_payload += stop - lo
        # rows complete out of order; the ring frees in order (and may unblock the producers)
        if sr.tail < sr.head and st.mrow[s * p.rpm_ring + sr.tail % p.rpm_ring].done:
            while sr.tail < sr.head and st.mrow[s * p.rpm_ring + sr.tail % p.rpm_ring].done:
                sr.tail += 1
            wake_hub_waiters(st, src, t)
            if st.gpu[src].fwd_q_count > 0:
                forward_kick(st, src, t)    # forwarding requests may wait for this ring's room
        if stop < hi:
            # the rest waits for space; what was written is done
            pk.addr = stop
            pk.payload = hi - stop
            return -1
    if sr.eos_seen and not sr.done and sr.recv == sr.total:
        sr.done = 1
        dam_source_ended(st, g, free_at)
        if p.fwd_per_node:
            forward_source_ended(st, g, src, free_at)
    return free_at
