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
notify_ready.release frees a tile's slots and completion records; the window's bump pointer may
reuse them once all earlier tiles are released too.
"""
from ...engine.jit import compiled

from ...engine.events import EV_DAM_READY, push
from ...engine.state import DAM_HIST_BINS, TB_WAIT_CLAIM, WAIT_CLAIM
from ..trace import CAT_DAM, TR_DAM_CLAIM, TR_DAM_READY, trace_event
from ..hbm import read_word, write_word
from ..scheduler import dispatch_blocks
from ..wakeups import tb_resume

CLAIM_WAIT = 0     # no tile ready: the thread block sleeps
CLAIM_TILE = 1     # a tile was handed out
CLAIM_END = 2      # every tile was claimed and every source has ended: zero rows


@compiled
def _tile(st, w, index):
    p = st.p[0]
    return st.tile[w * p.tiles_per_window + index % p.tiles_per_window]


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
        if win.alloc % p.tile_rows:
            last = win.alloc // p.tile_rows
            _tile(st, w, last).closed = 1
            _maybe_ready(st, w, last, tick)
        dam_wake(st, g, w, tick)  # claimers may now learn that the stream ended
    if p.dam_launch_mode:
        _launch_last_block(st, g, tick)
        dispatch_blocks(st, g, tick)


@compiled
def dam_tile_ready(st, w, index, tick):
    """EV_DAM_READY: the tile is claimable; wake the expert's claimers."""
    p = st.p[0]
    st.gpu[w // p.local_experts].dam_tiles_ready += 1
    trace_event(st, CAT_DAM, TR_DAM_READY, w // p.local_experts, w, index, tick)
    if p.dam_launch_mode:
        _launch_ready_tiles(st, w // p.local_experts, w, tick)
    else:
        dam_wake(st, w // p.local_experts, w, tick)


@compiled
def _launch_ready_tiles(st, g, w, tick):
    """consumers: launch: start the consumer blocks of the expert's ready tiles, in order."""
    p = st.p[0]
    gp = st.gpu[g]
    l = gp.dam_launch
    ln = st.ln[l]
    queue = st.ln_params[l, 0]
    win = st.win[w]
    le = w - g * p.local_experts
    while True:
        k = win.next_claim
        tl = _tile(st, w, k)
        if not (k * p.tile_rows < win.alloc and tl.index == k and tl.ready >= 0
                and tl.ready <= tick):
            break
        tl.claimed = 1
        win.next_claim += 1
        gp.dam_claims += 1
        trace_event(st, CAT_DAM, TR_DAM_CLAIM, g, le, k, tick)
        n = read_word(st, g, queue)
        entry = queue + 64 * (n + 1)
        slot = le * p.window_rows + (k * p.tile_rows) % p.window_rows
        write_word(st, g, entry, tl.rows_alloc)
        write_word(st, g, entry + 8, p.win_addr + slot * p.row_bytes)
        write_word(st, g, entry + 16, p.rec_addr + slot * p.record_bytes)
        write_word(st, g, entry + 24, le)
        write_word(st, g, entry + 32, 1)                     # ready (the claim queue's layout)
        write_word(st, g, entry + 56, 1 if k == 0 else 0)    # the expert's first tile
        write_word(st, g, queue, n + 1)
        ln.granted += ln.dam_tile_tbs
    _launch_last_block(st, g, tick)
    dispatch_blocks(st, g, tick)


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
    gp.dam_launch_final = 1
    ln = st.ln[gp.dam_launch]
    ln.granted += 1
    ln.grid = ln.granted
    write_word(st, g, st.ln_params[gp.dam_launch, 0] + 8, ln.grid)


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
    k = win.next_claim
    tl = _tile(st, w, k)
    if k * p.tile_rows < win.alloc and tl.index == k and tl.ready >= 0 and tl.ready <= tick:
        tl.claimed = 1
        win.next_claim += 1
        st.gpu[g].dam_claims += 1
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
