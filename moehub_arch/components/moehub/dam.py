"""DAM, the data availability manager (receiver side of the MoE-Hub).

Each local expert's window is cut into tiles of `tile_rows` consecutive slots. The DAM counts the
rows allocated and landed per tile; a tile becomes ready (claimable `notify_latency` after its last
row is visible in memory) when it has `tile_rows` landed rows, or, for the expert's last partial
tile, once every source GPU has ended its stream and the tile's rows have landed. Source GPUs end
their streams with EOS packets; the DAM counts ended sources per GPU.

Who starts the work on a ready tile is system.gpu.hub.moe.dam.consumers:
  claim   (this project's first reading) claim_buffer serves an expert's tiles in allocation
          order: a claimer thread block sleeps (no events) until the next tile is ready, and gets
          a zero row count once every source has ended and every tile was claimed;
  launch  (MoE-Hub, arXiv 2605.05888: the DAM dispatches a tile's consumer thread blocks from the
          write acknowledgements, no polling) the DAM starts the consumers itself: the GPU's launch
          with dam_tile_tbs = N (workload.launches) gets N more thread blocks placeable per ready
          tile (each expert's tiles in allocation order, experts as their tiles become ready), and
          the tile's descriptor in that launch's queue (its first parameter), which the blocks
          read: word 0 tiles started, word 1 the launch's final block count (0 until known), then
          64 B per tile from byte 64: rows, first row's address, first record's address, local
          expert, 1 (ready), two words the blocks count in, 1 if it is the expert's first tile
          (the layout of moe_layer.s's claim queue). Once every source ended and every tile was
          started, the DAM starts one last block (whose %tb is word 1 - 1) and the grid becomes
          exact, so the launch ends when that block exits. Assumption: the descriptor reaches the
          blocks as a memory word they load (the hardware hands it to the block dispatcher).
          Thread-block groups (the launch's dam_groups, e.g. [Ju, Jd] for a tile's gate/up and
          down GEMM jobs): the paper's DAM keeps a status counter per thread-block group; here a
          tile's first group starts when the tile is ready and its counter counts the group's
          blocks down as they exit (a block exits once its stores completed, so the intermediate
          rows are written); at zero the DAM starts the second group. The blocks get their index
          in the grid from the DAM (tile start position x dam_tile_tbs + job), whatever order
          they start in. Assumption (the paper does not say): a tile's second group goes before
          the first groups of later tiles (the DAM finishes started tiles first, as the streaming
          scheduler's lag does), so output rows go home while later tiles compute.
Which ready tiles the consumers get, and when, is system.gpu.hub.moe.dam.order:
  ready   (the paper's per-tile DAM) every tile as soon as it is ready; the experts' tiles
          interleave in the order their rows land;
  expert  (a scheduling policy beyond the paper, for L2 weight reuse) an expert's ready tiles are
          held until `expert_tiles` of them are ready (at most the window's tiles), or until every
          source ended and all its remaining tiles are ready, and are then handed out together:
          claim_buffer returns them back to back (the claimer publishes them next to each other),
          and the launch starts them as one group, column job outer and tile inner (the order of
          gemm_tiles.s swizzle_job), with one group counter for all of them, so the second group
          (the down jobs) starts once every tile's first group exited, again column outer. The
          blocks running at one time then read each weight column tile once from HBM and share it
          through the L2, instead of each tile walking the expert's weights alone (a DeepSeek-V3
          expert, 88 MB, does not fit the 50 MB L2). Assumption: the hub holds complete tiles
          instead of starting them (a counter per window of the tiles handed out in the current
          group); the cost is the wait for an expert's later rows.
notify_ready.release frees a tile's slots and completion records; the window's bump pointer may
reuse them once all earlier tiles are released too.
With system.gpu.hub.moe.aau.allocation: paired (pairing.py) a gradient window's rows sit at their
forward rows' slots: the DAM counts readiness per *forward* tile - tile k of a gradient window
expects min(tile_rows, n - k tile_rows) rows, n the forward window's bump pointer (its rows, known
since the forward) - so a tile is ready when those rows landed, whatever order they came in and
without waiting for the end of the stream; claim_buffer hands out any ready tile (the lowest
first, a ready bit per tile) and zero rows once every forward tile was handed out. The forward
window does not wrap (its rows stay for the backward), so the gradient window's slots are never
reused within the round and a tile is released whenever its consumer says so. dam.order applies
to the bump-allocated windows.
"""
import numpy as np
from ...engine.jit import compiled

from ...engine.events import push
from ...engine.state import DAM_HIST_BINS, ERR_DAM_START_QUEUE, TB_WAIT_CLAIM, WAIT_CLAIM
from ..trace import CAT_DAM, TR_DAM_CLAIM, TR_DAM_READY, trace_event
from ..hbm import raise_error, read_word, write_word
from ..scheduler import dispatch_blocks, grant_block
from ..wakeups import tb_resume
from .area import dam_sram_bytes, moe_sram_bytes
from ..sizing import experts_of_window
from ...config.keys import key_param
from ...declare import Block, Debug, Event, Param, Record, Semantic, Stat, StatGroup, counters, fields
from ...isa.encoding import SEM_CLAIM, SEM_NOTIFY

CLAIM_WAIT = 0     # no tile ready: the thread block sleeps
CLAIM_TILE = 1     # a tile was handed out
CLAIM_END = 2      # every tile was claimed and every source has ended: zero rows

EV_DAM_READY = 9     # a0 = window, a1 = tile index: a tile became claimable


def _dam_ticks(cfg):
    hub = cfg.system.gpu.hub
    return int(round(hub.moe.dam.notify_latency_cycles * 1e12 / hub.clock))


def _claim_wait_desc(i, b):
    lo = 0 if b == 0 else 2 ** (b - 1)
    return (f"claimers woken after waiting [{lo}, {2 ** b}) ns"
            + (" or more" if b == DAM_HIST_BINS - 1 else ""))


def check_windows(sim, out):
    st = sim.state
    p = st.p[0]
    if not int(p.num_experts):
        return
    win = st.win
    claimed = np.minimum(win.next_claim * int(p.tile_rows), win.alloc)
    out.check(claimed == win.alloc, "MoE-Hub expert windows with landed rows never claimed",
              lambda w: f"window {w} (GPU {w // int(p.local_experts)}): {int(win.alloc[w])} rows "
                        f"allocated, {int(claimed[w])} claimed")


def check_groups(sim, out):
    """consumers: launch: every tile started ran each of its thread-block groups."""
    st = sim.state
    if not int(st.p[0].dam_launch_mode):
        return
    gp = st.gpu
    ln = st.ln
    launch = gp.dam_launch
    split = np.array([int(ln.dam_first_group[l]) < int(ln.dam_tile_tbs[l]) if l >= 0 else False
                      for l in launch])
    groups = np.array([int(ln.dam_tile_tbs[l]) if l >= 0 else 0 for l in launch])
    # the launch's tiles: the first round's (later rounds' tiles are claimed: dam_reopen)
    launched = gp.dam_claims - gp.dam_round_claims
    out.check(np.where(split, gp.dam_groups_started == launched, True),
              "MoE-Hub DAM tiles whose second thread-block group never started",
              lambda g: f"GPU {g}: {int(launched[g])} tiles started, "
                        f"{int(gp.dam_groups_started[g])} second groups")
    out.check(np.where(launch >= 0, gp.dam_blocks_started == launched * groups + 1, True),
              "MoE-Hub DAM blocks started differ from the tiles' groups plus the last block",
              lambda g: f"GPU {g}: {int(gp.dam_blocks_started[g])} blocks for "
                        f"{int(launched[g])} tiles of {int(groups[g])}")


def windows_unclaimed(sim):
    """Likely cause of a stuck run: full windows that no thread block claims from."""
    st = sim.state
    p = st.p[0]
    if not int(p.num_experts):
        return []
    per_gpu = int(p.slots_per_sm) * int(p.sms_per_gpu)
    claiming = {int(s) // per_gpu for s in np.nonzero(st.tb.state == TB_WAIT_CLAIM)[0]}
    out = []
    for g in range(int(p.num_gpus)):
        full = []
        for le in range(int(p.local_experts)):
            w = g * int(p.local_experts) + le
            win = st.win[w]
            if int(win.alloc) - int(win.released_tiles) * int(p.tile_rows) >= int(p.window_rows):
                full += experts_of_window(st, w)
        if full and g not in claiming:
            out.append(f"the windows of expert(s) {', '.join(map(str, full))} on GPU {g} "
                       f"are full and no thread block claims from them: the consumers are "
                       f"not running (queued behind the producers on their stream?), or "
                       f"workload.moe.window_rows is too small for a protocol that sends "
                       f"everything before it consumes")
    return out


BLOCK = Block(
    "dam", __doc__.split("\n\n")[0],
    params=(
        key_param("tile_rows", "system.gpu.hub.moe.dam.tile_rows"),
        Param("tiles_per_window", "workload.moe.window_rows, system.gpu.hub.moe.dam.tile_rows",
              "tiles", "tiles per expert window",
              lambda cfg: max(cfg.workload.moe.window_rows, cfg.system.gpu.hub.moe.dam.tile_rows)
              // cfg.system.gpu.hub.moe.dam.tile_rows, "derived: window_rows / tile_rows"),
        key_param("dam_launch_mode", "system.gpu.hub.moe.dam.consumers",
                  lambda cfg: int(cfg.system.gpu.hub.moe.dam.consumers == "launch"), "bool",
                  "1: launch, 0: claim"),
        key_param("dam_expert_order", "system.gpu.hub.moe.dam.order",
                  lambda cfg: int(cfg.system.gpu.hub.moe.dam.order == "expert"), "bool",
                  "1: expert, 0: ready"),
        key_param("dam_expert_tiles", "system.gpu.hub.moe.dam.expert_tiles"),
        key_param("dam_notify_ticks", "system.gpu.hub.moe.dam.notify_latency_cycles", _dam_ticks,
                  "ps", "in ticks at the hub clock"),
    ),
    records=(Record("tile", "tiles of the expert windows, tiles_per_window per window"),),
    fields=fields("tile", ("index", "tile index held (-1: none)"),
                  ("rows_alloc", "rows allocated in it"), ("rows_landed", "rows landed"),
                  ("landed_visible", "tick the last landed row is visible"),
                  ("closed", "1: no more rows will be allocated in it"),
                  ("ready", "tick it became claimable (-1: not yet)"), ("claimed", "1: handed out"),
                  ("released", "1: notify_ready.release freed it"),
                  # consumers: launch
                  ("position", "start position in the DAM's launch (its blocks are position x "
                               "dam_tile_tbs + job)"),
                  ("group_left", "blocks of its first thread-block group not exited yet (the "
                                 "first tile of a group of tiles counts the whole group's)"),
                  ("group_tiles", "tiles started with it as one group (order: expert; 1: alone)"),
                  init={"index": -1})
    + fields("win", ("released_tiles", "tiles released (in order)"),
             ("next_claim", "next tile claim_buffer hands out"),
             ("ended", "1: every source ended and every tile was claimed"),
             ("waiters", "claimers sleeping on it"),
             ("group_open", "order: expert: tiles of the group being handed out not claimed yet"))
    + fields("gpu", ("dam_sources_done", "source GPUs that ended their streams"),
             ("dam_tiles_ready", ""), ("dam_claims", ""), ("dam_zero_claims", ""),
             ("dam_notifies", ""), ("dam_eos_received", ""),
             # consumers: launch: the GPU's DAM-started launch (-1: none; set by the builder),
             # every tile started
             ("dam_launch", ""), ("dam_launch_final", ""),
             ("dam_blocks_started", "thread blocks the DAM started"),
             ("dam_groups_started", "second thread-block groups started (first group done)"),
             ("dam_round", "rounds begun since the first (notify_ready.reopen): with consumers: "
                           "launch the DAM's launch serves the first round, later rounds' tiles "
                           "are claimed"),
             ("dam_round_claims", "tiles claimed in later rounds with consumers: launch"))
    + fields("ln", ("dam_tile_tbs", "TBs the DAM starts per ready tile (0: an ordinary launch)"),
             ("dam_first_group", "TBs of a tile's first group (dam_tile_tbs: one group)"),
             ("granted", "TBs that may be placed (grid, or what the DAM started so far)")),
    stats=(StatGroup("gpu", "hub.dam", counters((
        ("tiles_ready", "dam_tiles_ready", "tiles", "tiles made ready"),
        ("claims", "dam_claims", "tiles", "tiles handed to claim_buffer"),
        ("zero_claims", "dam_zero_claims", "count", "claims answered with zero rows (stream ended)"),
        ("notifications", "dam_notifies", "count", "notify_ready calls (eos and release)"),
        ("eos_received", "dam_eos_received", "count", "end-of-stream packets received"),
        ("blocks_started", "dam_blocks_started", "count", "consumer thread blocks the DAM started "
         "(consumers: launch)"),
        ("groups_started", "dam_groups_started", "count", "tiles whose second thread-block group "
         "the DAM started when the first group's counter reached zero (consumers: launch)"),
    )) + (
        Stat("claim_wait_bin{k}", "claims", _claim_wait_desc,
             lambda i, b: i.st.dam_hist[i.g, b], each=range(DAM_HIST_BINS)),
        Stat("sram_bytes", "bytes", "area proxy: per-tile allocated/landed counters (4 B each) + "
             "per-source end-of-stream state", lambda i: dam_sram_bytes(i.p)),
    )), StatGroup("gpu", "hub", (
        Stat("moe_sram_bytes", "bytes", "area proxy of the whole MoE-Hub control plane: RPM, AAU "
             "(table and staging store), DAM", lambda i: moe_sram_bytes(i.p)),))),
    events=(Event("dam_ready", EV_DAM_READY, "a tile became claimable"),),
    checks=(check_windows, check_groups),
    causes=(windows_unclaimed,),
    debug=(Debug("DAM", CAT_DAM, (TR_DAM_READY, TR_DAM_CLAIM), groups=("MoEHub",), describe={
        TR_DAM_READY: lambda n, g, w, tile: (
            f"system.gpu{g}.hub.dam", f"tile {tile} of expert {n.window_expert.get(w, '?')} ready"),
        TR_DAM_CLAIM: lambda n, g, expert, tile: (
            f"system.gpu{g}.hub.dam", f"tile {tile} of expert {expert} claimed")}),),
    semantics=(Semantic((SEM_CLAIM,), "components.moehub.isa.claim",
                        "claim: the next ready tile of a local expert"),
               Semantic((SEM_NOTIFY,), "components.moehub.isa.notify",
                        "notify: a tile consumed, a stream ended, a new round")),
)


@compiled
def _tile(st, w, index):
    p = st.p[0]
    return st.tile[w * p.tiles_per_window + index % p.tiles_per_window]


@compiled
def dam_pair_window(st, w):
    """allocation: paired - the forward window a gradient window pairs with (-1: not paired)."""
    p = st.p[0]
    if p.pair_local == 0 or w % p.local_experts < p.pair_local:
        return -1
    return w - p.pair_local


@compiled
def dam_pair_slot(st, w, index):
    """A paired row takes slot `index` of gradient window w: at the first of its tile, the tile
    expects its forward tile's rows and is closed (nothing else is allocated in it)."""
    p = st.p[0]
    k = index // p.tile_rows
    if _tile(st, w, k).index == k:
        return
    n = st.win[dam_pair_window(st, w)].alloc
    dam_tile_open(st, w, k, min(p.tile_rows, n - k * p.tile_rows), 1)


@compiled
def dam_tile_open(st, w, index, rows, closed):
    """Tile `index` of window w begins: `rows` allocated so far, `closed` if no more will be."""
    tl = _tile(st, w, index)
    tl.index = index
    tl.rows_alloc = rows
    tl.rows_landed = 0
    tl.landed_visible = 0
    tl.closed = closed
    tl.ready = -1
    tl.claimed = 0
    tl.released = 0


@compiled
def _paired_claim(st, g, w, fw, expert, tick):
    """claim_buffer on a paired window: the lowest ready, unclaimed tile; zero rows once every
    forward tile was claimed."""
    p = st.p[0]
    win = st.win[w]
    tiles = -(-st.win[fw].alloc // p.tile_rows)
    for k in range(tiles):
        tl = _tile(st, w, k)
        if tl.index == k and tl.claimed == 0 and tl.ready >= 0 and tl.ready <= tick:
            tl.claimed = 1
            win.next_claim += 1      # tiles claimed (a count: they go out of order)
            st.gpu[g].dam_claims += 1
            if p.dam_launch_mode:
                st.gpu[g].dam_round_claims += 1
            trace_event(st, CAT_DAM, TR_DAM_CLAIM, g, expert, k, tick)
            return CLAIM_TILE, tl.rows_alloc, k * p.tile_rows
    if win.next_claim >= tiles:
        st.gpu[g].dam_zero_claims += 1
        return CLAIM_END, 0, 0
    win.waiters += 1
    return CLAIM_WAIT, 0, 0


@compiled
def _maybe_ready(st, w, index, visible):
    """Schedule the tile's readiness if it is closed and every allocated row has landed."""
    tl = _tile(st, w, index)
    if tl.index == index and tl.closed and tl.ready < 0 and tl.rows_landed == tl.rows_alloc:
        # claimable once its last row is visible in memory, plus the DAM's own latency
        tl.ready = max(visible, tl.landed_visible) + st.p[0].dam_notify_ticks
        push(st, tl.ready, EV_DAM_READY, w, index)


@compiled
def dam_row_landed(st, g, expert, index, visible):
    """A row's data and completion record are written (visible at `visible`)."""
    p = st.p[0]
    w = g * p.local_experts + st.moe_place[expert, 1]
    tl = _tile(st, w, index // p.tile_rows)
    tl.rows_landed += 1
    if visible > tl.landed_visible:
        tl.landed_visible = visible
    _maybe_ready(st, w, index // p.tile_rows, visible)


@compiled
def dam_source_ended(st, g, tick):
    """One source GPU's stream to GPU g is complete; after the last, close every partial tile."""
    p = st.p[0]
    gp = st.gpu[g]
    gp.dam_sources_done += 1
    if gp.dam_sources_done < p.num_gpus:
        return
    for le in range(p.local_experts):
        w = g * p.local_experts + le
        win = st.win[w]
        win.ended = 1
        if win.alloc % p.tile_rows and dam_pair_window(st, w) < 0:
            last = win.alloc // p.tile_rows
            _tile(st, w, last).closed = 1
            _maybe_ready(st, w, last, tick)
        dam_wake(st, g, w, tick)  # claimers may now learn that the stream ended
    if p.dam_launch_mode and not gp.dam_round:
        if p.dam_expert_order:
            # the experts whose held tiles are now all their tiles (no partial tile to wait for)
            for le in range(p.local_experts):
                if not _start_ready_tiles(st, g, g * p.local_experts + le, tick):
                    return
        _launch_last_block(st, g, tick)
        dispatch_blocks(st, g, tick)


@compiled
def dam_reopen(st, g):
    """notify_ready.reopen (rpm_reopen has reset the streams): GPU g's windows wait for the new
    round's end of stream. Their rows, records and tiles stay (a backward reads the forward's);
    the new round's rows go to windows of their own (other logical destinations). With
    consumers: launch the DAM's launch served the first round (it must have ended: False
    otherwise); the new round's tiles are claimed (claim_buffer), as with consumers: claim.
    Assumption: one consumer launch per GPU (a launch per round is not modelled)."""
    p = st.p[0]
    if p.dam_launch_mode and not st.gpu[g].dam_launch_final:
        return False
    st.gpu[g].dam_round += 1
    st.gpu[g].dam_sources_done = 0
    for le in range(p.local_experts):
        st.win[g * p.local_experts + le].ended = 0
    return True


@compiled
def dam_tile_ready(st, w, index, tick):
    """EV_DAM_READY: the tile is claimable; wake the expert's claimers."""
    p = st.p[0]
    st.gpu[w // p.local_experts].dam_tiles_ready += 1
    trace_event(st, CAT_DAM, TR_DAM_READY, w // p.local_experts, w, index, tick)
    if p.dam_launch_mode and not st.gpu[w // p.local_experts].dam_round:
        _launch_ready_tiles(st, w // p.local_experts, w, tick)
    else:
        dam_wake(st, w // p.local_experts, w, tick)


@compiled
def _tiles_to_hand_out(st, w, tick):
    """How many of the window's next tiles go to the consumers now, as one group (0: none).
    order: ready: the next tile once it is ready. order: expert: expert_tiles ready tiles (at
    most the window's tiles), or fewer once every source ended and they are all the expert's
    remaining tiles; until then the ready tiles are held."""
    p = st.p[0]
    win = st.win[w]
    limit = min(p.dam_expert_tiles, p.tiles_per_window) if p.dam_expert_order else 1
    n = 0
    while n < limit:
        k = win.next_claim + n
        tl = _tile(st, w, k)
        if not (k * p.tile_rows < win.alloc and tl.index == k and tl.ready >= 0
                and tl.ready <= tick):
            break
        n += 1
    if n == limit or (n > 0 and win.ended and (win.next_claim + n) * p.tile_rows >= win.alloc):
        return n
    return 0


@compiled
def _launch_ready_tiles(st, g, w, tick):
    """consumers: launch: start the consumer blocks of the expert's ready tiles, in order."""
    if _start_ready_tiles(st, g, w, tick):
        _launch_last_block(st, g, tick)
        dispatch_blocks(st, g, tick)


@compiled
def _start_ready_tiles(st, g, w, tick):
    """Start the first thread-block group of every group of tiles the window hands out now:
    one tile at a time (order: ready) or an expert's tiles together, column job outer (order:
    expert). Returns False after an internal error (the start queue overflowed)."""
    p = st.p[0]
    gp = st.gpu[g]
    l = gp.dam_launch
    ln = st.ln[l]
    queue = st.ln_params[l, 0]
    win = st.win[w]
    le = w - g * p.local_experts
    while True:
        m = _tiles_to_hand_out(st, w, tick)
        if m == 0:
            break
        n0 = read_word(st, g, queue)
        for i in range(m):
            k = win.next_claim
            tl = _tile(st, w, k)
            tl.claimed = 1
            win.next_claim += 1
            gp.dam_claims += 1
            trace_event(st, CAT_DAM, TR_DAM_CLAIM, g, le, k, tick)
            n = n0 + i
            entry = queue + 64 * (n + 1)
            slot = le * p.window_rows + (k * p.tile_rows) % p.window_rows
            write_word(st, g, entry, tl.rows_alloc)
            write_word(st, g, entry + 8, p.win_addr + slot * p.row_bytes)
            write_word(st, g, entry + 16, p.rec_addr + slot * p.record_bytes)
            write_word(st, g, entry + 24, le)
            write_word(st, g, entry + 32, 1)                     # ready (the claim queue's layout)
            write_word(st, g, entry + 56, 1 if k == 0 else 0)    # the expert's first tile
            write_word(st, g, queue, n + 1)
            tl.position = n
        # the group's first tile counts the group's first thread-block group down
        k0 = win.next_claim - m
        lead = _tile(st, w, k0)
        lead.group_tiles = m
        first = ln.dam_first_group
        # one group: its blocks track nothing; two: the first group's exits count down
        tag = -1 if first == ln.dam_tile_tbs else w * p.tiles_per_window + k0 % p.tiles_per_window
        lead.group_left = first * m
        # column job outer, tile inner: the tiles' blocks of one weight column tile start together
        for j in range(first):
            for i in range(m):
                if not _start(st, g, l, (n0 + i) * ln.dam_tile_tbs + j, tag, False):
                    return False
    return True


@compiled
def _start(st, g, l, tb_index, tag, first):
    if grant_block(st, g, l, tb_index, tag, first):
        st.gpu[g].dam_blocks_started += 1
        return True
    raise_error(st, ERR_DAM_START_QUEUE, -1, tb_index)
    return False


@compiled
def dam_block_exited(st, slot, tick):
    """A block the DAM started exits (its stores are complete): count its tile's first group down
    (the whole group's, for tiles started together); at zero start the second group of every tile
    of the group, column job outer, ahead of later tiles' first groups."""
    tag = st.tb[slot].start_tag
    if tag < 0:
        return
    p = st.p[0]
    tl = st.tile[tag]
    tl.group_left -= 1
    if tl.group_left > 0:
        return
    g = tag // (p.local_experts * p.tiles_per_window)
    l = st.gpu[g].dam_launch
    ln = st.ln[l]
    m = tl.group_tiles
    st.gpu[g].dam_groups_started += m
    # pushed to the queue's front in reverse, so they are placed in job order (column job outer,
    # the group's tiles inner; their positions are consecutive)
    for j in range(ln.dam_tile_tbs - 1, ln.dam_first_group - 1, -1):
        for i in range(m - 1, -1, -1):
            if not _start(st, g, l, (tl.position + i) * ln.dam_tile_tbs + j, -1, True):
                return
    _launch_last_block(st, g, tick)
    # block_exit places them when it frees the slot


@compiled
def _launch_last_block(st, g, tick):
    """consumers: launch: once every source ended and every tile was started, start the launch's
    last block and make its grid exact (it ends when every started block exited)."""
    p = st.p[0]
    gp = st.gpu[g]
    if gp.dam_launch_final or gp.dam_sources_done < p.num_gpus:
        return
    for le in range(p.local_experts):
        win = st.win[g * p.local_experts + le]
        if win.next_claim * p.tile_rows < win.alloc:
            return
    l = gp.dam_launch
    ln = st.ln[l]
    # the grid becomes exact: every started tile's blocks (some of its second groups may still be
    # to start) and this last block
    started = read_word(st, g, st.ln_params[l, 0])
    if ln.granted < started * ln.dam_tile_tbs:
        return   # a second group is still to start: its first group's last exit calls again
    gp.dam_launch_final = 1
    ln.grid = started * ln.dam_tile_tbs + 1
    write_word(st, g, st.ln_params[l, 0] + 8, ln.grid)
    _start(st, g, l, ln.grid - 1, -1, False)


@compiled
def dam_wake(st, g, w, tick):
    win = st.win[w]
    if win.waiters == 0:
        return
    per_gpu = st.p[0].sms_per_gpu * st.p[0].slots_per_sm
    for slot in range(g * per_gpu, (g + 1) * per_gpu):
        tb = st.tb[slot]
        if tb.state == TB_WAIT_CLAIM and tb.wait_addr == w:
            win.waiters -= 1
            # claim wait histogram: bin i holds waits in [2^(i-1), 2^i) ns
            ns = (tick - tb.wait_start) // 1000
            b = 0
            while ns > 0 and b < DAM_HIST_BINS - 1:
                ns >>= 1
                b += 1
            st.dam_hist[g, b] += 1
            tb_resume(st, slot, tick, WAIT_CLAIM)


@compiled
def dam_claim(st, g, slot, expert, tick):
    """claim_buffer: returns (CLAIM_*, rows, monotonic index of the tile's first row)."""
    p = st.p[0]
    w = g * p.local_experts + st.moe_place[expert, 1]
    win = st.win[w]
    fw = dam_pair_window(st, w)
    if fw >= 0:
        status, rows, first = _paired_claim(st, g, w, fw, expert, tick)
        if status == CLAIM_WAIT:
            st.tb[slot].wait_addr = w
        return status, rows, first
    k = win.next_claim
    tl = _tile(st, w, k)
    if win.group_open == 0:
        # a new group: one ready tile (order: ready) or an expert's tiles together (order: expert)
        win.group_open = _tiles_to_hand_out(st, w, tick)
    if win.group_open > 0:
        win.group_open -= 1
        tl.claimed = 1
        win.next_claim += 1
        st.gpu[g].dam_claims += 1
        if p.dam_launch_mode:
            st.gpu[g].dam_round_claims += 1
        trace_event(st, CAT_DAM, TR_DAM_CLAIM, g, expert, k, tick)
        return CLAIM_TILE, tl.rows_alloc, k * p.tile_rows
    if win.ended and k * p.tile_rows >= win.alloc:
        st.gpu[g].dam_zero_claims += 1
        return CLAIM_END, 0, 0
    win.waiters += 1
    st.tb[slot].wait_addr = w
    return CLAIM_WAIT, 0, 0


@compiled
def dam_release(st, g, expert, first_index):
    """notify_ready.release of the claimed tile whose first slot index (mod window) is given;
    returns the tile's number (its first monotonic slot index / tile_rows), or -1 if no claimed,
    unreleased tile starts there."""
    p = st.p[0]
    w = g * p.local_experts + st.moe_place[expert, 1]
    win = st.win[w]
    if first_index % p.tile_rows:
        return -1
    if dam_pair_window(st, w) >= 0:
        # paired: tile k is at slot k tile_rows (the window does not wrap); out of order
        k = first_index // p.tile_rows
        tl = _tile(st, w, k)
        if tl.index != k or tl.released or not tl.claimed:
            return -1
        tl.released = 1
        st.gpu[g].records_live -= tl.rows_alloc
        st.gpu[g].dam_notifies += 1
        win.released_tiles += 1     # a count
        return k
    found = -1
    for k in range(win.released_tiles, win.next_claim):
        if (k * p.tile_rows) % p.window_rows == first_index:
            found = k
            break
    if found < 0:
        return -1
    tl = _tile(st, w, found)
    if tl.released or not tl.claimed:
        return -1
    tl.released = 1
    st.gpu[g].records_live -= tl.rows_alloc
    st.gpu[g].dam_notifies += 1
    while win.released_tiles < win.next_claim and _tile(st, w, win.released_tiles).released:
        _tile(st, w, win.released_tiles).index = -1
        win.released_tiles += 1
    return found
