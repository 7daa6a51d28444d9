"""DySHARP's dynamic multimem objects (arXiv 2605.05607): the columns of their rows in
State.mm_objects, which config features are on, and the arithmetic of a target's receive layout.

A dynamic object (workload.multicast[] with targets_per_gpu > 0) is a multimem object whose
offset is an algebraic (token) index; each member GPU keeps one receive layout per local target
expert ([targets_per_gpu][layout rows][row_bytes]), filled through the AL table (dysharp.py) and,
where the object is tracked, watched tile by tile by the token tracker (dysharp_tracker.py). Both
of those modules, and NVLS's object table (nvls.py), read the columns defined here; it lies below
them so that neither needs the other for the layout.
"""
from ..engine.jit import compiled

# columns of State.mm_objects (static NVLS objects use the first three; nvls.py; the members
# themselves are State.mm_member)
(OBJ_BASE, OBJ_BYTES, OBJ_MEMBERS, OBJ_TPG, OBJ_ROWB, OBJ_ROWS, OBJ_LROWS, OBJ_COUNTS,
 OBJ_AL, OBJ_TRACK, OBJ_TILE, OBJ_TILEB, OBJ_LTILES, OBJ_LCAP, OBJ_DONE, OBJ_DSTRIDE,
 OBJ_JOBS, OBJ_RWORDS, OBJ_RK, OBJ_RTOK, OBJ_RQUEUE) = range(21)
OBJ_COLUMNS = 21
# OBJ_TRACK: address of the token tracker's tile-ready words + 1 (0: the object is not tracked);
# OBJ_TILE: rows of a tracked tile; OBJ_TILEB: bytes that complete one (tile rows x the row bytes
# of every object sharing the tracker); OBJ_LTILES: tracked tiles per target's layout (of its
# OBJ_LCAP rows); OBJ_LROWS: a target's layout stride in rows; OBJ_LCAP: rows it may hold
# (workload.multicast[].layout_rows, at most OBJ_LROWS); OBJ_DONE: address of tile 0's
# finished-job counter + 1 (0: the tracker's entries are not recycled), OBJ_DSTRIDE: bytes from
# one tile's counter to the next, OBJ_JOBS: the count at which a tile's jobs are done
# (workload.multicast[].done_counters, done_offset, done_stride, done_jobs); OBJ_RWORDS: address
# of the per-token ready words + 1 (0: no ready queue), OBJ_RK: words per token, OBJ_RTOK: tokens,
# OBJ_RQUEUE: address of the ready queue (workload.multicast[].ready_words, ready_count,
# ready_queue; dysharp_ready.py)


def dynamic_on(cfg):
    return any(o.targets_per_gpu > 0 for o in cfg.workload.multicast)


def tracked_on(cfg):
    return any(o.targets_per_gpu > 0 and o.tracker for o in cfg.workload.multicast)


def recycled_on(cfg):
    """The token tracker frees a tile's entry when its jobs are done (the objects name their
    finished-job counters)."""
    return any(o.targets_per_gpu > 0 and o.tracker and o.done_counters
               for o in cfg.workload.multicast)


def ready_queue_on(cfg):
    """A dynamic object names a ready queue (dysharp_ready.py: the token tracker appends tokens
    to it as their expert outputs are all ready)."""
    return any(o.targets_per_gpu > 0 and o.ready_words for o in cfg.workload.multicast)


def tracked_targets(cfg):
    """Most local targets (experts per GPU) of a tracked object: the token tracker keeps a head
    tile per local target (dysharp_tracker.py, tracker_grant: expert_head)."""
    return max([o.targets_per_gpu for o in cfg.workload.multicast
                if o.targets_per_gpu > 0 and o.tracker] or [1])


def tracked_tiles(cfg):
    """Row tiles the tracked objects' layouts hold on one GPU (targets x ceil(layout rows / tile
    rows)): the tile-state arrays are indexed by tile, the table's entries are counted apart."""
    sizes = {b.name: b.bytes for b in cfg.workload.buffers}
    n = 1
    for o in cfg.workload.multicast:
        if o.targets_per_gpu > 0 and o.tracker and o.tile_rows > 0 and o.row_bytes > 0:
            rows = o.layout_rows or sizes.get(o.buffer, 0) // (o.targets_per_gpu * o.row_bytes)
            n = max(n, o.targets_per_gpu * -(-rows // o.tile_rows))
    return n


def any_dynamic(st):
    """A built State holds a dynamic object."""
    return bool((st.mm_objects[:, OBJ_TPG] > 0).any()) and int(st.p[0].mm_objects) > 0


@compiled
def after_translation(done, t, known):
    """When an access to a layout row, charged on the memory system at t (the packet's arrival)
    and done at `done` had it started then, is done given that its row is known only at `known`
    (an AL-TLB miss, or a hit waiting for a fill): `done` + (known - t). The access is charged at
    t, not at `known`, because an HBM channel serves its accesses in issue order (hbm.py: its
    queue ends at the last access's end) - an access issued ahead of time would hold the channel
    for every access made meanwhile, one HBM latency per miss on each channel a miss touches."""
    return done + (known - t)


@compiled
def row_address(o, el, row, off):
    """Address of byte `off` of layout row `row` of local target el."""
    return o[OBJ_BASE] + (el * o[OBJ_LROWS] + row) * o[OBJ_ROWB] + off
