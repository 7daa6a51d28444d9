"""DySHARP: dynamic multimem addressing in the NVSwitch for MoE (arXiv 2605.05607).

NVLink SHARP (nvls.py) multicasts and reduces over *static* multicast objects: a fixed group of
GPUs created ahead of time. An MoE token goes to a different set of experts every time, so
DySHARP lets one multimem operation name its own targets:

- `dymultimem.st dst, src, bytes, targets, count` (dispatch): one token row to `count` target
  experts. `dst` is a multimem address of a *dynamic object* (workload.multicast[] with
  targets_per_gpu > 0) whose offset is the algebraic (token) index: buffer address + u x
  row_bytes + byte offset. `targets` holds the expert ids (i64 words, HBM or shared memory).
- `dymultimem.ld_reduce.add.<t> dst, src, bytes, targets, count` (combine): the switch gathers
  the targets' rows of algebraic row u (the expert outputs, already scaled by their gate weights)
  and returns their sum, written at the local `dst`.

The mechanism, as the paper describes it, and what this module models of it:

- **Source GPU: the MultimemQ** (system.switch.nvls.dysharp.multimemq_entries, 32 in the paper),
  a queue in the LSU that fetches each operation's target list. Here an entry is taken at issue
  (the list is read through the LSU: an HBM or shared-memory access of 8 B per id) and freed when
  the hub has sent the operation's last packet; a full queue stalls the issuing thread block
  (back-pressure, stat multimemq_stalls). Assumption: the entry is held until the packets are
  out, not until the operation completes (the queue exists to fetch lists, not to track them).
- **Packet format**: the first flit's 64-bit address becomes a 48-bit multimem address, a stage
  bit and a 15-bit target count, followed by target-extension flits of 16-bit expert ids
  (flit_bytes / 2 per flit: eight with 16 B flits); payload flits are unchanged. Every link
  packet of the operation carries its list, so a packet costs ceil(targets / 8) more flits
  (stat target_flits; they are in every wire-byte count). The request of a ld_reduce carries it
  too.
- **Switch**: the output port of target e is GPU e // targets_per_gpu (the placement table);
  the switch sends one copy per distinct GPU (not per target) with the target list trimmed to
  that GPU's experts (its extension flits shrink accordingly). A ld_reduce reserves a
  reduction-buffer entry at its input port (system.switch.nvls.reduction_buffer_bytes, 64 KB in
  the paper) that counts down one contribution per *target*, sends one read per distinct GPU
  (trimmed list), and returns one row when the count reaches zero (nvls.py's engine, with the
  request's target GPUs and count).
- **Destination hub: algebraic-to-layout translation.** A copy for algebraic row u and local
  target e is written at row AL(u, e) of e's receive layout (the object's buffer, [targets_per_gpu]
  [layout rows][row_bytes]). The AL table lives in HBM (one entry per algebraic row and local
  target; workload.multicast[].al_table) and is cached by the AL-TLB (al_tlb_entries, 512 in the
  paper, which gives the entry count only; al_tlb_ways, LRU within a set - assumption: fully
  associative, 0, as small TLBs usually are; a direct-mapped one (1) is kept for comparison: with
  the entry's index u x targets_per_gpu + e, the same token of every source GPU (u = g T + t, T a
  multiple of the sets) falls in one set, and the GPUs send token t at about the same time). A miss reads the
  entry from HBM before the row can be written or read (assumption: one HBM read of the 4 B
  entry, charged on the HBM model; the paper gives no miss latency). The TLB is non-blocking, as
  GPU TLBs are: a lookup that hits an entry whose fill is still on its way waits for that fill
  (it cannot translate before the entry arrives), and a miss delays only its own packet - the
  reads behind it that hit are answered first (the answers leave in the order their data is
  ready; NVLink responses carry their request's tag, so they need not leave in request order).
  The first chunk of (u, e) to
  arrive places the row: the hub takes the next free row of e from a counter it keeps on chip
  (assumption: as MoE-Hub's AAU keeps its allocation pointers; the paper does not say) and writes
  the counter (workload.multicast[].counts: the expert GEMMs read it) and the new entry through
  to HBM (posted writes).
  Assumption: the paper does not say who fills the AL table; placing rows on arrival lets the
  destination build its layout without knowing the routing in advance (the counts are what the
  expert GEMMs need). A ld_reduce's read translates (u, e) for each of the GPU's targets again and
  sends one data packet per target. (Until this was modelled, the answers left in the order the
  reads came, so every miss on the combine's read path held all of the GPU's answers behind it,
  on all its links: README "DySHARP" gives the figures.)

Token tracker (token-centric fusion; workload.multicast[].tracker): the hub counts the bytes of
each row tile of the tracked layouts in a bounded tile table and raises the tile's ready word when
it is complete - a block of its own, dysharp_tracker.py. The objects' columns and the layout-row
arithmetic, which both use, are in dysharp_objects.py.

Functional mode: a copy's bytes are written into every local target's layout row; a ld_reduce's
result is computed when it reaches the source, as FP32 accumulation over the targets in the order
of the target list (acc = y_t0; acc = fp32(acc + y_t1); ...) rounded once to the element type -
the order workloads/reference.py follows for combine="switch_targets". The hardware adds in
arrival order, which the paper does not specify; a fixed order keeps runs bit-identical.
"""
import numpy as np
from ..engine.jit import compiled

from ..engine.state import ERR_DY_LAYOUT_FULL, ERR_DY_UNPLACED, ERR_UNBACKED_COPY
from .elements import load_f32, store_f32
from .hbm import hbm_access, hbm_backed, move_bytes, raise_error, read_word, write_word
from .l2 import link_write
from .packet import PK_MM_DATA, REQ_DY_LD, REQ_DY_ST, packet_alloc, packet_flits, request_records
from .waiters import notify_stores
from .wakeups import hub_kick_response
from .dysharp_objects import (OBJ_AL, OBJ_BASE, OBJ_COUNTS, OBJ_LCAP, OBJ_ROWB, OBJ_ROWS,
                              OBJ_TPG, OBJ_TRACK, after_translation, any_dynamic, dynamic_on,
                              row_address)
# EV_DY_RETRY is the tracker's event kind; the run loop (dispatch/loop.py) imports it from here
from .dysharp_tracker import EV_DY_RETRY, track_tile  # noqa: F401
from ..config.keys import key_param
from ..declare import Array, Block, Param, Send, Stat, StatGroup, counters, fields
from ..isa.encoding import DT_BF16


def _requests(cfg):
    return cfg.system.num_gpus * request_records(cfg)


def _dy(cfg):
    return cfg.system.switch.nvls.dysharp


BLOCK = Block(
    "dysharp", __doc__.split("\n\n")[0],
    params=(
        key_param("dy_max_targets", "system.switch.nvls.dysharp.max_targets"),
        key_param("dy_queue_entries", "system.switch.nvls.dysharp.multimemq_entries"),
        key_param("al_tlb_ways", "system.switch.nvls.dysharp.al_tlb_ways",
                  lambda cfg: _dy(cfg).al_tlb_ways or _dy(cfg).al_tlb_entries,
                  how="al_tlb_entries if 0: fully associative"),
        Param("dy_ids_per_flit", "", "ids", "16-bit expert ids per target-extension flit",
              lambda cfg: max(1, cfg.system.nvlink.flit_bytes // 2),
              "derived: system.nvlink.flit_bytes / 2 B per id (arXiv 2605.05607's format)"),
    ),
    arrays=(Array("dy_targets", "target list (expert ids) of each hub request",
                  lambda cfg: (_requests(cfg), _dy(cfg).max_targets) if dynamic_on(cfg)
                  else (1, 1)),
            Array("dy_stage", "the target list an SM is handing its hub (validated at issue)",
                  lambda cfg: (cfg.system.num_gpus, _dy(cfg).max_targets) if dynamic_on(cfg)
                  else (1, 1)),
            Array("al_tlb", "AL-TLB tags per GPU (AL-table entry address + 1; 0: empty)",
                  lambda cfg: (cfg.system.num_gpus, _dy(cfg).al_tlb_entries) if dynamic_on(cfg)
                  else (1, 1)),
            Array("al_tlb_used", "AL-TLB: when each entry was last used (LRU within its set)",
                  lambda cfg: (cfg.system.num_gpus, _dy(cfg).al_tlb_entries) if dynamic_on(cfg)
                  else (1, 1)),
            Array("al_tlb_fill", "AL-TLB: when each entry's fill from HBM completes (a hit "
                  "under that miss waits for it)",
                  lambda cfg: (cfg.system.num_gpus, _dy(cfg).al_tlb_entries) if dynamic_on(cfg)
                  else (1, 1))),
    fields=fields("req", ("dy_count", "targets of a dymultimem request"),
                  ("dy_gpus", "GPUs holding its targets"),
                  ("dy_ready", "when its target list has been fetched"))
    + fields("gpu", ("dy_stage_n", ""), ("dy_stage_gpus", ""), ("dy_stage_ready", ""),
             ("dy_queue", "MultimemQ entries in use"), ("dy_queue_peak", ""),
             ("dy_queue_stalls", ""), ("dy_st_ops", ""), ("dy_ld_ops", ""), ("dy_ext_flits", ""),
             ("al_hits", ""), ("al_misses", ""), ("al_clock", "AL-TLB lookups (LRU stamps)"),
             ("al_placed", ""), ("dy_rows_written", ""),
             ("dy_data_extra", "data packets beyond one per read (one per target)"),
             ("dy_rows_read", ""))
    + fields("ch", ("dy_copies", "dynamic copies sent from this input port's operations"),
             ("dy_targets_in", "targets named by the dymultimem packets entering here")),
    stats=(
        StatGroup("gpu", "dysharp", counters((
            ("st_ops", "dy_st_ops", "count", "dymultimem.st operations issued"),
            ("ld_reduce_ops", "dy_ld_ops", "count", "dymultimem.ld_reduce operations issued"),
            ("multimemq_peak", "dy_queue_peak", "entries", "peak MultimemQ occupancy "
             "(system.switch.nvls.dysharp.multimemq_entries)"),
            ("multimemq_stalls", "dy_queue_stalls", "count", "issues refused because the "
             "MultimemQ was full (the thread block retried)"),
            ("target_flits", "dy_ext_flits", "flits", "target-extension flits this GPU sent "
             "(16-bit expert ids)"),
            ("al_tlb_hits", "al_hits", "count", "AL-TLB hits at this GPU's hub"),
            ("al_tlb_misses", "al_misses", "count", "AL-TLB misses (an HBM read of the entry)"),
            ("rows_placed", "al_placed", "rows", "layout rows this hub assigned (AL entries "
             "written)"),
            ("rows_written", "dy_rows_written", "count", "copy chunks written into a target's "
             "layout row"),
            ("rows_read", "dy_rows_read", "count", "layout-row chunks read for a switch "
             "reduction (one per target)"),
        )), enabled=lambda st: any_dynamic(st)),
        StatGroup("system", "dysharp", (
            Stat("copies", "packets", "dynamic multicast copies the switches sent (one per "
                 "distinct GPU of a packet's targets)", lambda i: int(i.st.ch.dy_copies.sum())),
            Stat("targets", "count", "targets named by the dymultimem packets into the switches",
                 lambda i: int(i.st.ch.dy_targets_in.sum())),
        ), enabled=lambda st: any_dynamic(st)),
    ),
    checks=(lambda sim, out: check_dysharp(sim, out),),
    sends=(Send((REQ_DY_ST, REQ_DY_LD), "components.dysharp_isa.dysharp_send",
                "dymultimem.st / ld_reduce packets with their target lists, GPU -> switch"),),
    # its packetizer is compiled only for a run with a dynamic object (dispatch/indirect.py)
    on_demand=lambda st: any_dynamic(st),
)


def check_dysharp(sim, out):
    """Every MultimemQ entry freed; every placed row counted in its target's counter."""
    st = sim.state
    if not any_dynamic(st):
        return
    out.empty(st.gpu.dy_queue, "MultimemQ entries still held", lambda g: f"system.gpu{g}",
              " entries")
    counted = 0
    seen = set()
    for k in range(int(st.p[0].mm_objects)):
        o = st.mm_objects[k]
        if o[OBJ_TPG] == 0 or int(o[OBJ_COUNTS]) in seen:
            continue
        seen.add(int(o[OBJ_COUNTS]))
        a, n = int(o[OBJ_COUNTS]), int(o[OBJ_TPG])
        if a + 8 * n <= st.hbm_mem.shape[1]:
            counted += int(st.hbm_mem[:, a:a + 8 * n].view(np.int64).sum())
    out.equal("layout rows placed by the hubs vs counted in the targets' counters",
              int(st.gpu.al_placed.sum()), counted)


# ------------------------------------------------------------------------------ issue (SM, hub)
@compiled
def dymultimem_object(st, g, addr, nbytes):
    """The dynamic object whose algebraic range holds [addr, addr + nbytes) with GPU g a member:
    its index, -1 if none, -2 if the range crosses an algebraic row."""
    for k in range(st.p[0].mm_objects):
        o = st.mm_objects[k]
        if o[OBJ_TPG] == 0 or not st.mm_member[k, g]:
            continue
        if addr >= o[OBJ_BASE] and addr + nbytes <= o[OBJ_BASE] + o[OBJ_ROWS] * o[OBJ_ROWB]:
            if (addr - o[OBJ_BASE]) % o[OBJ_ROWB] + nbytes > o[OBJ_ROWB]:
                return -2
            return k
    return -1


@compiled
def dysharp_stage(st, g, k, ids, count):
    """Validate the target list `ids[:count]` of an operation on object k and stage it for GPU g's
    hub; returns -1, or the position of the first bad target (outside the object's experts, on a
    GPU that is not a member, or named twice)."""
    o = st.mm_objects[k]
    tpg = o[OBJ_TPG]
    gpus = 0                        # distinct GPUs holding the targets
    gp = st.gpu[g]
    for j in range(count):
        e = ids[j]
        if e < 0 or e >= tpg * st.p[0].num_gpus or not st.mm_member[k, e // tpg]:
            return j
        new_gpu = 1
        for i in range(j):
            if st.dy_stage[g, i] == e:
                return j
            if st.dy_stage[g, i] // tpg == e // tpg:
                new_gpu = 0
        st.dy_stage[g, j] = e
        gpus += new_gpu
    gp.dy_stage_n = count
    gp.dy_stage_gpus = gpus
    return -1


@compiled
def dysharp_bind(st, g, r, ld):
    """The hub took request r: it keeps the staged target list and holds a MultimemQ entry until
    its last packet is out. Returns the GPUs it reaches (each answers a dymultimem.st once)."""
    gp = st.gpu[g]
    rq = st.req[r]
    n = gp.dy_stage_n
    for j in range(n):
        st.dy_targets[r, j] = st.dy_stage[g, j]
    rq.dy_count = n
    rq.dy_gpus = gp.dy_stage_gpus
    rq.dy_ready = gp.dy_stage_ready
    gp.dy_queue += 1
    if gp.dy_queue > gp.dy_queue_peak:
        gp.dy_queue_peak = gp.dy_queue
    if ld:
        gp.dy_ld_ops += 1
    else:
        gp.dy_st_ops += 1
    return gp.dy_stage_gpus


@compiled
def dysharp_sent(st, g):
    """The hub sent the last packet of a dymultimem request: its MultimemQ entry frees."""
    st.gpu[g].dy_queue -= 1


@compiled
def ext_flits(st, targets):
    """Target-extension flits of a packet naming `targets` experts."""
    per = st.p[0].dy_ids_per_flit
    return (targets + per - 1) // per


@compiled
def targets_on_gpu(st, r, k, m):
    """Targets of request r (object k) placed on GPU m: the trimmed list the switch sends m."""
    tpg = st.mm_objects[k, OBJ_TPG]
    n = 0
    for j in range(st.req[r].dy_count):
        if st.dy_targets[r, j] // tpg == m:
            n += 1
    return n


# ------------------------------------------------------------------------------ destination hub
@compiled
def _al_translate(st, g, k, u, el, t, place):
    """AL(u, el) at GPU g for object k, looked up at t: (layout row, when it is known); row -1 if
    (u, el) has no row and `place` is False, or its layout is full. `place`: give it the next free
    row of target el and write the entry."""
    gp = st.gpu[g]
    o = st.mm_objects[k]
    idx = u * o[OBJ_TPG] + el
    entry = o[OBJ_AL] + idx * 8
    w = _al_tlb_lookup(st, g, entry)
    if w >= 0:
        # a hit; if the miss that installed the entry is still reading it, wait for that read
        ready = max(t, st.al_tlb_fill[g, w])
    else:
        ready = hbm_access(st, g, entry, 4, t, False)   # the 4 B entry from the table in HBM
        st.al_tlb_fill[g, -w - 1] = ready
    v = read_word(st, g, entry)
    if v > 0:
        return v - 1, ready
    if not place:
        return -1, ready
    # the target's next free row: a counter the hub keeps on chip and writes through to the
    # counts buffer (posted), as MoE-Hub's AAU keeps its allocation pointers; the new AL entry is
    # written through as well (posted: the TLB holds it)
    counter = o[OBJ_COUNTS] + el * 8
    row = read_word(st, g, counter)
    if row >= o[OBJ_LCAP]:
        return -1, ready
    write_word(st, g, counter, row + 1)
    hbm_access(st, g, counter, 8, t, True)
    write_word(st, g, entry, row + 1)
    hbm_access(st, g, entry, 4, t, True)
    gp.al_placed += 1
    return row, ready


@compiled
def _al_tlb_lookup(st, g, entry):
    """Look the AL-table entry at `entry` up in GPU g's AL-TLB: its way on a hit; on a miss the
    entry takes the set's empty or least recently used way w and the answer is -w - 1 (the caller
    reads the entry and records when the fill completes). Set = entry index modulo the sets."""
    gp = st.gpu[g]
    ways = st.p[0].al_tlb_ways
    first = ((entry // 8) % (st.al_tlb.shape[1] // ways)) * ways
    gp.al_clock += 1
    victim = first
    for w in range(first, first + ways):
        if st.al_tlb[g, w] == entry + 1:
            st.al_tlb_used[g, w] = gp.al_clock
            gp.al_hits += 1
            return w
        if st.al_tlb_used[g, w] < st.al_tlb_used[g, victim]:
            victim = w
    gp.al_misses += 1
    st.al_tlb[g, victim] = entry + 1
    st.al_tlb_used[g, victim] = gp.al_clock
    return -victim - 1


@compiled
def dysharp_copy_write(st, g, pkt, t):
    """A dynamic multicast copy reached GPU g (processed at t): write it into the layout row of
    each of its targets on g, in list order, placing rows that are new. Returns (absorbed,
    visible) over those writes, as l2.link_write does for one."""
    pk = st.pk[pkt]
    r = pk.req
    k = pk.mm_obj
    o = st.mm_objects[k]
    tpg = o[OBJ_TPG]
    rel = pk.addr - o[OBJ_BASE]
    u = rel // o[OBJ_ROWB]
    off = rel - u * o[OBJ_ROWB]
    n = pk.payload
    free_at = t
    visible = t
    for j in range(st.req[r].dy_count):
        e = st.dy_targets[r, j]
        if e // tpg != g:
            continue
        el = e - g * tpg
        row, ready = _al_translate(st, g, k, u, el, t, True)
        if row < 0:
            raise_error(st, ERR_DY_LAYOUT_FULL, st.req[r].slot, e)
            return free_at, visible
        addr = row_address(o, el, row, off)
        # the write goes to the memory system now and completes once the row is known (see
        # after_translation: a write issued at `ready` would hold its HBM channel meanwhile)
        f, v = link_write(st, g, addr, n, t)
        f = after_translation(f, t, ready)
        v = after_translation(v, t, ready)
        move_bytes(st, pk.src, pk.src_addr, g, addr, n, st.req[r].slot)
        notify_stores(st, g, addr, n, v)
        st.gpu[g].dy_rows_written += 1
        if o[OBJ_TRACK] > 0:
            track_tile(st, g, o, el, row, n, t, v)
        if f > free_at:
            free_at = f
        if v > visible:
            visible = v
    return free_at, visible


@compiled
def dysharp_read_arrived(st, g, c, pkt, t):
    """A switch's read for a dymultimem.ld_reduce reached GPU g on down-channel c (processed at
    t): for each of its targets here (list order), translate the algebraic row, read the layout
    row and queue one data packet to go back up the same link. The read keeps its receive-buffer
    space until the last of them leaves."""
    p = st.p[0]
    gp = st.gpu[g]
    pk = st.pk[pkt]
    r = pk.req
    k = pk.mm_obj
    o = st.mm_objects[k]
    tpg = o[OBJ_TPG]
    rel = pk.addr - o[OBJ_BASE]
    u = rel // o[OBJ_ROWB]
    off = rel - u * o[OBJ_ROWB]
    n = pk.value
    home = pk.src
    rflits = pk.flits
    gp.mm_reads_rx += pk.npk
    q = pkt
    last = pkt
    first = True
    for j in range(st.req[r].dy_count):
        e = st.dy_targets[r, j]
        if e // tpg != g:
            continue
        el = e - g * tpg
        row, ready = _al_translate(st, g, k, u, el, t, False)
        if row < 0:
            raise_error(st, ERR_DY_UNPLACED, st.req[r].slot, e)
            row = 0
        addr = row_address(o, el, row, off)
        ready = after_translation(hbm_access(st, g, addr, n, t, False), t, ready)
        if first:
            first = False
        else:
            q = packet_alloc(st)
            qk = st.pk[q]
            qk.req = r
            qk.mm_obj = k
            qk.mm_dtype = pk.mm_dtype
            qk.mm_entry = pk.mm_entry
            qk.value = n
            gp.dy_data_extra += 1
        qk = st.pk[q]
        qk.kind = PK_MM_DATA
        qk.dst = home
        qk.src = g
        qk.addr = addr
        qk.payload = n
        qk.flits, qk.npk = packet_flits(st, n, p.store_payload)
        qk.ready = ready + p.hub_tx_latency_ticks
        qk.mm_chan = c
        qk.mm_rflits = 0
        gp.dy_rows_read += 1
        queue_read_data_by_ready(st, g, q)
        if qk.ready >= st.pk[last].ready:
            last = q
    # the read's receive-buffer space frees when the last of its answers to be ready leaves
    st.pk[last].mm_rflits = rflits


@compiled
def queue_read_data_by_ready(st, g, pkt):
    """read_data.queue_read_data for an answer whose data may be ready before answers that came earlier
    (a read whose AL-TLB lookup hit, behind one that missed): it goes into
    GPU g's read-data FIFO before every answer that becomes ready later, so the hub sends the
    answers in the order their data is ready and a miss delays only its own reads (reads complete
    out of order at the memory, and NVLink responses carry their request's tag). Answers ready at
    the same tick keep the order the reads came in."""
    gp = st.gpu[g]
    depth = st.mm_rdq.shape[1]
    ready = st.pk[pkt].ready
    i = gp.mm_rdq_count
    while i > 0:
        prev = st.mm_rdq[g, (gp.mm_rdq_head + i - 1) % depth]
        if st.pk[prev].ready <= ready:
            break
        st.mm_rdq[g, (gp.mm_rdq_head + i) % depth] = prev
        i -= 1
    st.mm_rdq[g, (gp.mm_rdq_head + i) % depth] = pkt
    gp.mm_rdq_count += 1
    hub_kick_response(st, g, ready)


@compiled
def dysharp_result(st, g, pkt):
    """A dymultimem.ld_reduce result reached the source GPU g: the functional sum, FP32
    accumulation over the targets in list order, rounded once to the element type."""
    pk = st.pk[pkt]
    n = pk.payload
    st.gpu[g].mm_results_rx += pk.npk
    if not hbm_backed(st, pk.addr, n):
        return
    r = pk.req
    k = pk.mm_obj
    o = st.mm_objects[k]
    tpg = o[OBJ_TPG]
    rel = pk.src_addr - o[OBJ_BASE]
    u = rel // o[OBJ_ROWB]
    off = rel - u * o[OBJ_ROWB]
    dt = pk.mm_dtype
    es = 2 if dt == DT_BF16 else 4
    count = st.req[r].dy_count
    # every target's row is in place (a missing one is a program error, reported once)
    for j in range(count):
        e = st.dy_targets[r, j]
        m = e // tpg
        row = read_word(st, m, o[OBJ_AL] + (u * tpg + e - m * tpg) * 8) - 1
        if row < 0:
            raise_error(st, ERR_DY_UNPLACED, st.req[r].slot, e)
            return
        addr = row_address(o, e - m * tpg, row, off)
        if not hbm_backed(st, addr, n):
            raise_error(st, ERR_UNBACKED_COPY, st.req[r].slot, addr)
            return
    out = st.hbm_mem[g, pk.addr:pk.addr + n]
    for i in range(n // es):
        acc = np.float32(0.0)
        for j in range(count):
            e = st.dy_targets[r, j]
            m = e // tpg
            el = e - m * tpg
            addr = row_address(o, el, read_word(st, m, o[OBJ_AL] + (u * tpg + el) * 8) - 1, off)
            v = load_f32(st.hbm_mem[m, addr:addr + n], i, dt)
            acc = v if j == 0 else np.float32(acc + v)
        store_f32(out, i, dt, acc)
