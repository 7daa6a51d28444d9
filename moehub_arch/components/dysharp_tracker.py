"""DySHARP's token tracker: token-centric fusion's tile table at each GPU's hub (arXiv 2605.05607).

Token-centric fusion (workload.multicast[].tracker): the hub counts the bytes of
each row tile of the tracked layouts and raises the tile's ready word when it is complete. Its
tile table has system.switch.nvls.dysharp.tracker_tiles entries (1024 in the paper). A tile takes
an entry when its first bytes land and, where the objects name their tiles' finished-job counters
(workload.multicast[].done_counters: the paper's finished-TB counters), frees it when that counter
reaches done_jobs - a local atomic add by the tile's last GEMM job - so a table smaller than the
tiles a layer fills serves them over time. What a tile that finds the table full does is an
assumption (the paper gives the table's size, not this), a choice (tracker_full):
- defer (default): the copy is written as usual and the tile's bytes are counted aside (the
  paper's per-tile table in DRAM could hold them); the tile waits in arrival order for the next
  entry freed and is raised then if all its bytes are in. Nothing holds a link.
- stall: the copy waits at the destination hub, holding its link buffer space, so the
  back-pressure reaches the links and the senders; copies whose tiles hold entries are written
  meanwhile, and when an entry frees the waiting copies that fit are written in arrival order
  (event dysharp_retry).
Which tiles may take entries is a second assumption (the paper gives neither), a choice
(tracker_grant):
- arrival (the earlier model): every entry is shared first-come. It can deadlock with a table
  near the local experts' count: each expert's partial tile holds an entry until the dispatch's
  end closes it, and the GEMM group takes tiles in a fixed order (every expert's first tile, then
  its second, ...; tile b = layout tile x targets_per_gpu + local target, the hub's own index), so
  its blocks can all wait for full tiles that wait for entries held by tiles later in that order.
- expert_head (default): one entry per local expert is kept for the expert's head tile - its
  lowest tile whose jobs are not done - and the rest are shared first-come by the other tiles.
  When a head's jobs finish, the head moves to the expert's next tile, which takes the kept entry
  (giving back a shared one it held, or ending its wait). Why it cannot deadlock with defer: the
  lowest unfinished tile in the GEMM group's order is some expert's head (that expert's earlier
  tiles are done), so it holds an entry; with defer its bytes all land (nothing holds a link) or
  the dispatch's end closes it; so it is raised, its jobs run and its entry moves on. This leans
  on the GEMM group reaching that tile's jobs: its blocks take jobs in a fixed order, and a block
  that took a job of a tile without an entry waits holding it, so the jobs taken ahead of the
  head's last GEMM-2 job must leave a block free (not checked; the small-table study in
  docs/systems/dysharp.md completes at 8 entries). It needs one entry per local expert: the
  plan refuses fewer. With stall no grant order suffices: copies waiting for shared entries
  hold link buffer space, and a head tile's own bytes can queue behind them.
The stuck-run report names the waiting copies and tiles. Stats tracker_waits, tracker_wait_us,
tracker_entries_peak, tracker_entries_freed. Without done_counters every tile needs an entry at
once (checked when the system is built).

The tracker counts the bytes of the copies dysharp.py writes into the tracked layouts
(track_tile), frees entries from the finished-job counters' atomics (dysharp_counter_added,
called by the SM's atomic), and decides whether a copy may be written now (dysharp_copy_admit,
dysharp_park and dysharp_unpark, called by the hub's receive side, nvls_gpu.py).
"""
import numpy as np

from ..engine.events import push
from ..engine.jit import compiled
from ..config.keys import key_param
from ..declare import Array, Block, Event, Param, Stat, StatGroup, counters, fields
from .dysharp_objects import (OBJ_AL, OBJ_BASE, OBJ_COUNTS, OBJ_DONE, OBJ_DSTRIDE, OBJ_JOBS,
                              OBJ_LCAP, OBJ_LTILES, OBJ_ROWB, OBJ_TILE, OBJ_TILEB, OBJ_TPG,
                              OBJ_TRACK, after_translation, any_dynamic, recycled_on, tracked_on,
                              tracked_targets, tracked_tiles)
from .hbm import hbm_access, read_word, write_word
from .waiters import notify_stores

EV_DY_RETRY = 13     # a0 = GPU: a tracker entry freed while copies wait for one


def _dy(cfg):
    return cfg.system.switch.nvls.dysharp


def _tile_array(name, doc):
    """A per-GPU array with an element per tracked row tile (tracked_tiles)."""
    return Array(name, doc, lambda cfg: (cfg.system.num_gpus, tracked_tiles(cfg))
                 if tracked_on(cfg) else (1, 1))


BLOCK = Block(
    "dysharp_tracker", __doc__.split("\n\n")[0],
    params=(
        key_param("dy_table_entries", "system.switch.nvls.dysharp.tracker_tiles"),
        key_param("dy_tracker_stall", "system.switch.nvls.dysharp.tracker_full",
                  lambda cfg: int(_dy(cfg).tracker_full == "stall"), "bool", "1: stall, 0: defer"),
        Param("dy_recycle", "", "bool", "1: the tracker frees a tile's entry when its jobs are "
              "done (tracked objects name their finished-job counters)",
              lambda cfg: int(recycled_on(cfg)), "derived: workload.multicast[].done_counters"),
        key_param("dy_reserve", "system.switch.nvls.dysharp.tracker_grant",
                  lambda cfg: int(recycled_on(cfg) and _dy(cfg).tracker_grant == "expert_head"),
                  "bool", "1: expert_head on a tracker that recycles its entries, else 0"),
    ),
    arrays=(_tile_array("dy_tile_bytes", "token tracker, tile table: bytes landed in each row "
                        "tile (tile = layout tile x targets_per_gpu + local target)"),
            _tile_array("dy_tile_visible", "token tracker, tile table: when the tile's latest "
                        "bytes are visible (its ready word is raised then)"),
            _tile_array("dy_tile_entry", "token tracker: 0 the tile has no table entry yet, 1 "
                        "it holds one, 2 its jobs are done (its entry freed), 3 it waits for "
                        "one (defer)"),
            _tile_array("dy_tile_queue", "token tracker (defer): the tiles waiting for an "
                        "entry, in the order their first bytes came (a ring per GPU)"),
            _tile_array("dy_tile_wait_at", "token tracker (defer): when each waiting tile began "
                        "to wait"),
            Array("dy_head", "token tracker (expert_head): each local expert's head tile, the "
                  "layout tile index of its lowest tile whose jobs are not done",
                  lambda cfg: (cfg.system.num_gpus, tracked_targets(cfg)) if tracked_on(cfg)
                  else (1, 1))),
    fields=fields("pk", ("dy_park_next", "next copy waiting for a tracker entry at its GPU "
                         "(-1: last)"),
                  ("dy_park_chan", "down channel a waiting copy arrived on"),
                  ("dy_park_at", "when it began to wait"))
    + fields("gpu", ("dy_tiles_ready", ""), ("dy_tracked_bytes", ""),
             ("dy_entries", "token-tracker tile-table entries in use"), ("dy_entries_peak", ""),
             ("dy_shared", "of them, those held by tiles that are not their expert's head "
              "(all of them with tracker_grant: arrival)"),
             ("dy_entries_freed", ""), ("dy_waits", ""), ("dy_wait_ticks", ""),
             ("dy_parked", "copies waiting for a tracker entry"),
             ("dy_park_head", "first of them (a list through pk.dy_park_next)"),
             ("dy_park_tail", "last of them"),
             ("dy_tq_head", "first waiting tile in dy_tile_queue"),
             ("dy_tq_count", "tiles in dy_tile_queue (some may have finished without an entry)")),
    stats=(
        StatGroup("gpu", "dysharp", counters((
            ("tracker_tiles_ready", "dy_tiles_ready", "count", "row tiles the token tracker "
             "raised as complete when their last byte landed (partial last tiles are closed by "
             "the kernel at the end of dispatch)"),
            ("tracker_bytes", "dy_tracked_bytes", "bytes", "bytes the token tracker counted into "
             "its tile table"),
        )), enabled=lambda st: any_dynamic(st)),
        StatGroup("gpu", "dysharp", counters((
            ("tracker_entries_peak", "dy_entries_peak", "entries", "most tile-table entries in "
             "use at once (system.switch.nvls.dysharp.tracker_tiles)"),
            ("tracker_entries_freed", "dy_entries_freed", "count", "tile-table entries freed "
             "when their tile's jobs were done"),
            ("tracker_waits", "dy_waits", "count", "waits for a tile-table entry (the table "
             "was full): row tiles whose bytes were counted aside (tracker_full: defer), or copies "
             "the hub held with their link buffer space (stall)"),
        )) + (Stat("tracker_wait_us", "us", "time those tiles or copies waited (summed)",
                   lambda i: float(i.rec.dy_wait_ticks) / 1e6),),
            enabled=lambda st: int(st.p[0].dy_recycle) > 0),
    ),
    events=(Event("dysharp_retry", EV_DY_RETRY, "a tracker entry freed while copies wait",
                  enabled=lambda st: int(st.p[0].dy_recycle) > 0,
                  handler="components.nvls_gpu.dysharp_retry"),),
    # its handler is compiled only for a run with a dynamic object (dispatch/indirect.py)
    on_demand=lambda st: any_dynamic(st),
    checks=(lambda sim, out: check_tracker(sim, out),),
    findings=(lambda sim: tracker_findings(sim),),
)


def tracker_findings(sim):
    """Copies or tiles waiting for a token-tracker entry (the stuck-run report)."""
    st = sim.state
    if not int(st.p[0].dy_recycle):
        return []
    out = []
    for g in range(st.gpu.shape[0]):
        gp = st.gpu[g]
        waiting = int((st.dy_tile_entry[g] == 3).sum())
        if int(gp.dy_parked) or waiting:
            out.append(f"system.gpu{g}: {int(gp.dy_parked)} copies and {waiting} row tiles wait "
                       f"for a token-tracker entry; {int(gp.dy_entries)} of "
                       f"{int(st.p[0].dy_table_entries)} are held "
                       f"(system.switch.nvls.dysharp.tracker_tiles, tracker_full, "
                       f"tracker_grant)")
    return out


def check_tracker(sim, out):
    """The token tracker's tile table holds every tracked byte; every tile it counted full had its
    ready word raised, and no tile got more bytes than complete it."""
    st = sim.state
    objs = [st.mm_objects[k] for k in range(int(st.p[0].mm_objects))]
    tracked = {int(o[OBJ_TRACK]): o for o in objs if o[OBJ_TPG] > 0 and o[OBJ_TRACK] > 0}
    if not tracked:
        return
    out.empty(st.gpu.dy_parked, "copies still waiting for a token-tracker entry",
              lambda g: f"system.gpu{g}", " copies")
    if int(st.p[0].dy_recycle):
        out.empty(st.gpu.dy_entries, "token-tracker entries still held (a tile whose jobs did "
                  "not finish)", lambda g: f"system.gpu{g}", " entries")
        out.empty(st.gpu.dy_shared, "token-tracker shared entries still counted as held",
                  lambda g: f"system.gpu{g}", " entries")
        out.empty((st.dy_tile_entry == 3).sum(axis=1), "row tiles still waiting for a "
                  "token-tracker entry", lambda g: f"system.gpu{g}", " tiles")
    out.equal("bytes the token tracker counted vs held in its tile table",
              int(st.gpu.dy_tracked_bytes.sum()), int(st.dy_tile_bytes.sum()))
    for track, o in tracked.items():
        n = int(o[OBJ_TPG] * o[OBJ_LTILES])
        full = st.dy_tile_bytes[:, :n] == o[OBJ_TILEB]
        out.equal(f"tiles counted full vs tiles the tracker raised (tracker at {track - 1})",
                  int(full.sum()), int(st.gpu.dy_tiles_ready.sum()))
        over = np.argwhere(st.dy_tile_bytes[:, :n] > o[OBJ_TILEB])
        if len(over):
            g, b = over[0]
            out.equal(f"bytes of tile {b} at system.gpu{g} vs a full tile",
                      int(st.dy_tile_bytes[g, b]), int(o[OBJ_TILEB]))
        for g in range(st.hbm_mem.shape[0]):
            words = st.hbm_mem[g, track - 1:track - 1 + 8 * n].view(np.int64)
            out.equal(f"system.gpu{g}: full tiles with their ready word raised",
                      int(full[g].sum()), int((full[g] & (words >= 1)).sum()))


# ------------------------------------------------------------------------------ tile table


@compiled
def track_tile(st, g, o, el, row, n, t, visible):
    """Token-centric fusion's tile table at GPU g's hub (the token tracker): n bytes of layout row
    `row` of local target el are written, visible at `visible`. When its tile has all its bytes
    (every row of the tile, in every object sharing the tracker), the tracker raises the tile's
    ready word (a posted write to the word in HBM, charged at t, the packet's arrival, and visible
    one write after the tile's latest bytes: see after_translation), on which the expert GEMM
    thread blocks wait. A partial last tile never fills: the kernel closes it once every source
    has finished its dispatch (workloads/kernels/dysharp/dysharp.s)."""
    b = (row // o[OBJ_TILE]) * o[OBJ_TPG] + el
    gp = st.gpu[g]
    if st.dy_tile_entry[g, b] == 0:
        # the tile's first bytes take a table entry: its expert's kept one if it is the head
        # tile (expert_head), else a shared one; no shared entry free (or tiles already waiting:
        # they go first) makes the tile wait (tracker_full: defer - its bytes are counted aside;
        # stall admitted the copy only with an entry free: dysharp_copy_admit)
        head = _is_head(st, g, o, b)
        if o[OBJ_DONE] > 0 and not head and (gp.dy_shared >= _shared_entries(st, o)
                                             or gp.dy_tq_count > 0):
            st.dy_tile_entry[g, b] = 3
            st.dy_tile_wait_at[g, b] = t
            st.dy_tile_queue[g, (gp.dy_tq_head + gp.dy_tq_count) % st.dy_tile_queue.shape[1]] = b
            gp.dy_tq_count += 1
            gp.dy_waits += 1
        else:
            _take_entry(st, g, b, not head)
    st.dy_tile_bytes[g, b] += n
    gp.dy_tracked_bytes += n
    if visible > st.dy_tile_visible[g, b]:
        st.dy_tile_visible[g, b] = visible
    if st.dy_tile_entry[g, b] == 1 and st.dy_tile_bytes[g, b] == o[OBJ_TILEB]:
        _raise_tile(st, g, o, b, t)


@compiled
def _is_head(st, g, o, b):
    """Tile b is its expert's head tile (tracker_grant: expert_head): the lowest of the expert's
    tiles whose jobs are not done, which the GEMM group - taking tiles in layout order, every
    expert's first tile, then its second... (workloads/kernels/dysharp/dysharp.s) - needs before
    the expert's later ones."""
    tpg = o[OBJ_TPG]
    return st.p[0].dy_reserve != 0 and b // tpg == st.dy_head[g, b % tpg]


@compiled
def _shared_entries(st, o):
    """Entries the tiles that are not heads share: the table less one kept per local expert
    (expert_head), or all of it (arrival). The layer plan refuses a table smaller than the local
    experts."""
    if st.p[0].dy_reserve != 0:
        return st.p[0].dy_table_entries - o[OBJ_TPG]
    return st.p[0].dy_table_entries


@compiled
def _take_entry(st, g, b, shared):
    gp = st.gpu[g]
    st.dy_tile_entry[g, b] = 1
    gp.dy_entries += 1
    if shared:
        gp.dy_shared += 1
    if gp.dy_entries > gp.dy_entries_peak:
        gp.dy_entries_peak = gp.dy_entries


@compiled
def _advance_head(st, g, o, el, t):
    """The head tile of local expert el finished its jobs (tracker_grant: expert_head): the head
    moves to the expert's next tile whose jobs are not done. If that tile holds a shared entry,
    the entry kept for the expert replaces it (a shared entry frees); if it waits for one, it
    takes the kept entry now and is raised if its bytes are all in."""
    tpg = o[OBJ_TPG]
    h = st.dy_head[g, el] + 1
    while h < o[OBJ_LTILES] and st.dy_tile_entry[g, h * tpg + el] == 2:
        h += 1
    st.dy_head[g, el] = h
    if h >= o[OBJ_LTILES]:
        return
    b = h * tpg + el
    gp = st.gpu[g]
    if st.dy_tile_entry[g, b] == 1:
        gp.dy_shared -= 1
    elif st.dy_tile_entry[g, b] == 3:
        _take_entry(st, g, b, False)     # (its place in the waiting ring is skipped later)
        gp.dy_wait_ticks += t - st.dy_tile_wait_at[g, b]
        if st.dy_tile_bytes[g, b] == o[OBJ_TILEB]:
            _raise_tile(st, g, o, b, t)


@compiled
def _raise_tile(st, g, o, b, t):
    """The tile's bytes are all in and it holds an entry: the tracker raises its ready word (a
    posted write charged at t, visible one write after the tile's latest bytes or t)."""
    word = o[OBJ_TRACK] - 1 + b * 8
    write_word(st, g, word, 1)
    done = after_translation(hbm_access(st, g, word, 8, t, True), t,
                              max(t, st.dy_tile_visible[g, b]))
    notify_stores(st, g, word, 8, done)
    st.gpu[g].dy_tiles_ready += 1


@compiled
def _grant_waiting(st, g, o, t):
    """Shared entries are free at GPU g (tracker_full: defer): the waiting tiles take them in the
    order they came, and each that already has all its bytes is raised at t."""
    gp = st.gpu[g]
    depth = st.dy_tile_queue.shape[1]
    while gp.dy_tq_count > 0 and gp.dy_shared < _shared_entries(st, o):
        b = st.dy_tile_queue[g, gp.dy_tq_head]
        gp.dy_tq_head = (gp.dy_tq_head + 1) % depth
        gp.dy_tq_count -= 1
        if st.dy_tile_entry[g, b] != 3:
            continue     # it finished without an entry (a partial tile the kernel closed), or
                         # became its expert's head and took the kept entry
        _take_entry(st, g, b, True)
        gp.dy_wait_ticks += t - st.dy_tile_wait_at[g, b]
        if st.dy_tile_bytes[g, b] == o[OBJ_TILEB]:
            _raise_tile(st, g, o, b, t)


@compiled
def _tile_of(st, g, o, u, el):
    """The tile the row of (u, el) lies in at GPU g's layout - placed already, or the next free
    row of el if (u, el) is new - read without side effects (no AL-TLB lookup, nothing placed)."""
    v = read_word(st, g, o[OBJ_AL] + (u * o[OBJ_TPG] + el) * 8)
    row = v - 1 if v > 0 else read_word(st, g, o[OBJ_COUNTS] + el * 8)
    if row >= o[OBJ_LCAP]:
        return -1       # the layout is full: the write reports it
    return (row // o[OBJ_TILE]) * o[OBJ_TPG] + el


@compiled
def dysharp_copy_admit(st, g, pkt):
    """May the dynamic multicast copy pkt be written at GPU g now? A copy whose rows land in tiles
    that hold no tile-table entry yet needs a shared entry per such tile that is not its
    expert's head (a head takes the entry kept for it); if the table lacks them (or copies
    already wait: they go first, in arrival order) the copy waits. Copies of untracked objects,
    and copies whose tiles hold entries or are heads, are written at once."""
    o = st.mm_objects[st.pk[pkt].mm_obj]
    gp = st.gpu[g]
    if o[OBJ_TRACK] == 0 or o[OBJ_DONE] == 0:
        return True
    r = st.pk[pkt].req
    tpg = o[OBJ_TPG]
    here = 0
    for j in range(st.req[r].dy_count):
        if st.dy_targets[r, j] // tpg == g:
            here += 1
    room = _shared_entries(st, o)
    if gp.dy_parked == 0 and gp.dy_shared + here <= room:
        return True     # room for every tile it could open: the common case, no look-up
    u = (st.pk[pkt].addr - o[OBJ_BASE]) // o[OBJ_ROWB]
    need = 0
    for j in range(st.req[r].dy_count):
        e = st.dy_targets[r, j]
        if e // tpg == g:
            b = _tile_of(st, g, o, u, e - g * tpg)
            if b >= 0 and st.dy_tile_entry[g, b] == 0 and not _is_head(st, g, o, b):
                need += 1
    return need == 0 or (gp.dy_parked == 0 and gp.dy_shared + need <= room)


@compiled
def dysharp_park(st, g, c, pkt, t):
    """The copy pkt (down channel c, processed at t) waits for tracker entries at GPU g's hub: it
    joins the end of the GPU's waiting list and keeps its link buffer space (back-pressure)."""
    gp = st.gpu[g]
    pk = st.pk[pkt]
    pk.dy_park_next = -1
    pk.dy_park_chan = c
    pk.dy_park_at = t
    if gp.dy_parked == 0:
        gp.dy_park_head = pkt
    else:
        st.pk[gp.dy_park_tail].dy_park_next = pkt
    gp.dy_park_tail = pkt
    gp.dy_parked += 1
    gp.dy_waits += 1


@compiled
def dysharp_counter_added(st, g, addr, value, t):
    """A local atomic left `value` in the word at addr of GPU g, visible at t: if it is a tracked
    tile's finished-job counter (the paper's finished-TB counter) and the tile's jobs are now all
    done, the tile's table entry frees; copies waiting for one are retried at t."""
    p = st.p[0]
    for k in range(p.mm_objects):
        o = st.mm_objects[k]
        if o[OBJ_DONE] == 0 or o[OBJ_TRACK] == 0:
            continue
        rel = addr - (o[OBJ_DONE] - 1)
        if (rel < 0 or rel % o[OBJ_DSTRIDE] != 0
                or rel // o[OBJ_DSTRIDE] >= o[OBJ_TPG] * o[OBJ_LTILES]):
            continue
        b = rel // o[OBJ_DSTRIDE]
        if value != o[OBJ_JOBS]:
            return
        gp = st.gpu[g]
        if st.dy_tile_entry[g, b] == 1:
            head = _is_head(st, g, o, b)
            st.dy_tile_entry[g, b] = 2
            gp.dy_entries -= 1
            gp.dy_entries_freed += 1
            if head:
                _advance_head(st, g, o, b % o[OBJ_TPG], t)
            else:
                gp.dy_shared -= 1
            if gp.dy_parked > 0:
                push(st, t, EV_DY_RETRY, g, 0)      # stall: the waiting copies
            _grant_waiting(st, g, o, t)             # defer: the waiting tiles
        elif st.dy_tile_entry[g, b] == 3:
            # a partial last tile the kernel closed while it waited: its jobs ran on its rows
            st.dy_tile_entry[g, b] = 2
            gp.dy_wait_ticks += t - st.dy_tile_wait_at[g, b]
        return


@compiled
def dysharp_unpark(st, g, t):
    """The first waiting copy at GPU g, in arrival order, that the table has room for now
    (dysharp_copy_admit), taken off the waiting list; -1 if none fits. (A later copy whose tiles
    need fewer new entries may go before an earlier one that needs more than are free.)"""
    gp = st.gpu[g]
    prev = -1
    q = gp.dy_park_head
    for _ in range(gp.dy_parked):
        # the admission test counts only entries: the waiting copies ahead are not in the way
        parked = gp.dy_parked
        gp.dy_parked = 0
        ok = dysharp_copy_admit(st, g, q)
        gp.dy_parked = parked
        if ok:
            nxt = st.pk[q].dy_park_next
            if prev < 0:
                gp.dy_park_head = nxt
            else:
                st.pk[prev].dy_park_next = nxt
            if q == gp.dy_park_tail:
                gp.dy_park_tail = prev
            gp.dy_parked -= 1
            gp.dy_wait_ticks += max(t, st.pk[q].dy_park_at) - st.pk[q].dy_park_at
            return q
        prev = q
        q = st.pk[q].dy_park_next
    return -1
