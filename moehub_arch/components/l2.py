"""L2: the per-GPU last-level cache in front of HBM, with a capacity, and where link writes land.

What it models:

- **The read port**: one bandwidth server per GPU (``system.gpu.l2.bandwidth``) with the L2 hit
  latency (``latency_cycles``), arbitrated like one HBM channel (components/hbm.py: paced streams
  and whole accesses share a calendar of windows; a whole access waits at most one drain of a
  full controller queue for the streams).
- **Capacity** (``system.gpu.l2.capacity``; H100 SXM and H800: 50 MB, NVIDIA H100 Tensor Core GPU
  Architecture whitepaper; the GH100 die has 60 MB of which 50 MB are enabled). The tensor-core
  operands an ``mma`` reads from global memory are the data a GEMM re-reads (weight column tiles,
  shared row tiles), so they are what the L2 holds here. Residency is tracked **per operand
  region** (the byte range one ``mma`` operand reads: a [k][n] weight tile, a [rows][k] row tile),
  not per line: a region read from HBM is filled whole, and the least recently used regions are
  evicted until the resident bytes fit the capacity (or the table of ``tracked_regions`` entries
  has room). Every operand read looks the L2 up: it is a *hit* when its whole range lies in one
  resident region: it is served by the read port, no earlier than the region's own fill has
  arrived from HBM (a reader that follows a miss to the same tile while its data is still on the
  way waits for it, as requests merging on an in-flight miss do); otherwise it is read from HBM
  (paced over the instruction like any operand stream, so misses cost HBM bandwidth) and filled.
  An operand the kernel marks L2-resident (``mma`` subops ``b_l2``, ``l2``, ``a_l2``,
  ``ra_b_l2``: weights after their first touch, a row tile several thread blocks share) that
  misses is a *miss*; an unmarked one (the kernel's cold read, the first touch in program order)
  that is not resident is a compulsory read, counted in neither. The first reader in program order
  is not always the first in time (thread blocks drift apart, and the grouped GEMMs' job order
  puts several readers of one tile side by side), so a cold read that finds its tile resident hits.
  Stats per GPU: ``system.gpuN.l2.hit_bytes``, ``miss_bytes``, ``evicted_bytes``.
- **Link writes** (``link_writes``): into HBM (the link buffer is held until the channels took the
  data) or, with ``write_back``, absorbed by the L2 at its port bandwidth (NVLink writes land in
  the destination GPU's L2 slices), the HBM write-back charged on the channels.

Approximated (say so when reading the hit/miss stats):

- Fully associative LRU over regions. The hardware is 2 partitions (Chips and Cheese, "Nvidia's
  H100: Funny L2, and Tons of Bandwidth", 2023: an SM sees the far partition at a higher
  latency), 128 B lines of four 32 B sectors (NVIDIA CUDA C++ Best Practices Guide: L2 accesses
  are 32 B sectors), set-associative with an undocumented policy; the far-partition latency and
  set conflicts are not modelled, and a region is resident or not as a whole (a partly evicted
  tile would still hit in part on hardware; here it misses whole). An operand range overlapping a
  resident region without lying inside it misses, and the fill replaces the overlapped regions.
- Only mma operands occupy the model: copies, vector operands, the hub's reads and link writes
  (also with ``write_back``) neither hit nor evict. They do pass through a real L2 and would evict
  weights; the hit bytes are therefore an upper bound when a kernel streams much other data.
- A region larger than the capacity is never filled (it streams through, as LRU does with a
  working set larger than the cache).
"""
from ..engine.jit import compiled

from ..engine.clock import bytes_ticks, cycle_edge, cycle_at_or_after
from ..config.keys import key_param
from ..config.schema import L2_LINK_WRITES
from ..declare import Array, Block, Param, Stat, StatGroup, counters, fields
from .hbm import (ARB_PACED, _paced, _whole, _whole_queue_end, calendar_horizon, hbm_access_paced,
                  hbm_latency_ticks, hbm_transfer, queue_drain_ticks)


def _l2(key, field, value=None, unit=None, how=""):
    return key_param(field, f"system.gpu.l2.{key}", value, unit=unit, how=how)


BLOCK = Block(
    "l2", __doc__.split("\n\n")[0],
    params=(
        _l2("bandwidth", "l2_fs_per_byte", lambda cfg: int(round(1e15 / cfg.system.gpu.l2.bandwidth)),
            "fs/byte", "as the read port's time per byte"),
        _l2("latency_cycles", "l2_latency_cycles"),
        Param("l2_queue_ticks", "system.gpu.hbm.queue_depth, system.gpu.l2.bandwidth", "ps",
              "drain of a full L2 port controller queue",
              lambda cfg: queue_drain_ticks(cfg.system.gpu.hbm.queue_depth, cfg.system.gpu.l2.bandwidth),
              "derived: queue_drain_ticks(hbm queue_depth, l2 bandwidth)"),
        _l2("link_writes", "l2_link_writes",
            lambda cfg: L2_LINK_WRITES.index(cfg.system.gpu.l2.link_writes), "choice",
            "its index in L2_LINK_WRITES: 0 hbm, 1 write_back"),
        _l2("capacity", "l2_capacity"),
        _l2("tracked_regions", "l2_tracked_regions"),
    ),
    arrays=(Array("l2_res", "per GPU, the resident regions: [start, end, last use, tick the "
                  "fill's data is in] (RES_*); the first gpu.l2_regions rows are in use",
                  lambda cfg: (cfg.system.num_gpus, cfg.system.gpu.l2.tracked_regions, 4)),),
    fields=fields("gpu", ("l2_free", "tick the L2 port's queued transfers end"),
                  ("l2_busy", "time the L2 port transferred (stat)"),
                  ("l2_read_bytes", "reads served"), ("l2_link_write_bytes", "link writes absorbed"),
                  ("l2_hit_bytes", "mma operand bytes found resident"),
                  ("l2_miss_bytes", "marked mma operand bytes read from HBM"),
                  ("l2_evicted_bytes", "resident bytes evicted (LRU)"),
                  ("l2_resident_bytes", "bytes of the resident regions"),
                  ("l2_regions", "resident regions (rows of l2_res in use)"),
                  ("l2_clock", "last-use counter of the residency table")),
    stats=(StatGroup("gpu", "l2", counters((
        ("shared_read_bytes", "l2_read_bytes", "bytes", "reads served by the L2 read port (mma "
         "operands that hit: weights, shared row tiles)"),
        ("link_write_bytes", "l2_link_write_bytes", "bytes", "writes from the links absorbed by "
         "the L2 (system.gpu.l2.link_writes: write_back)"),
        ("hit_bytes", "l2_hit_bytes", "bytes", "mma operand bytes that were resident (marked "
         "L2-resident by subops b_l2, l2, a_l2, ra_b_l2, or a cold read after another reader "
         "filled the tile): served by the L2"),
        ("miss_bytes", "l2_miss_bytes", "bytes", "mma operand bytes marked L2-resident that were "
         "not (evicted, never read, or beyond system.gpu.l2.capacity): read from HBM"),
        ("evicted_bytes", "l2_evicted_bytes", "bytes", "resident operand bytes evicted to make room "
         "(least recently used region first)"),
    )) + (
        Stat("utilization", "ratio", "fraction of time the L2 read port was transferring",
             lambda i: i.fraction(i.rec.l2_busy)),
    )),),
)

RES_START, RES_END, RES_USE, RES_READY = 0, 1, 2, 3     # l2_res columns


@compiled
def l2_port_transfer(st, g, nbytes, tick, pace_ticks):
    """Charge GPU g's L2 read port (one bandwidth server per GPU, arbitrated like an HBM channel)
    for nbytes issued at `tick`, paced over pace_ticks when > 0; returns when the transfer ends."""
    p = st.p[0]
    gp = st.gpu[g]
    busy = bytes_ticks(nbytes, p.l2_fs_per_byte)
    gp.l2_busy += busy
    srv = p.num_gpus * p.hbm_channels + g
    if p.mem_arbitration == ARB_PACED and pace_ticks > busy:
        return _paced(st, g, srv, busy, tick, pace_ticks, calendar_horizon(st))
    end = _whole(st, g, srv, gp.l2_free, busy, tick, p.l2_queue_ticks, calendar_horizon(st))
    gp.l2_free = _whole_queue_end(gp.l2_free, busy, tick)
    return end


@compiled
def l2_operand_read_span(st, g, addr, span, nbytes, tick, pace_ticks, marked):
    """An mma operand read of nbytes at addr on GPU g, streamed over pace_ticks; `marked`: the
    kernel marks it L2-resident (a miss is then counted). Returns the tick the data is available.
    A strided operand (an mma's lda / ldb) moves nbytes, and its residency is that of the span
    [addr, addr + span) its rows lie in (span = nbytes for a dense one) (a miss fills the whole span: assumption, the operand is
    one column block of a matrix whose other column blocks the same kernel reads next, as a
    weight-gradient GEMM sweeps them)."""
    p = st.p[0]
    gp = st.gpu[g]
    r = _touch(st, g, addr, addr + span)
    if r >= 0:
        gp.l2_hit_bytes += nbytes
        gp.l2_read_bytes += nbytes
        c = cycle_at_or_after(l2_port_transfer(st, g, nbytes, tick, pace_ticks), p.sm_period_fs)
        return max(cycle_edge(c + p.l2_latency_cycles, p.sm_period_fs), st.l2_res[g, r, RES_READY])
    if marked:
        gp.l2_miss_bytes += nbytes
    r = _fill(st, g, addr, addr + span)
    ready = hbm_access_paced(st, g, addr, nbytes, tick, False, pace_ticks)
    if r >= 0:
        st.l2_res[g, r, RES_READY] = ready
    return ready


@compiled
def _touch(st, g, lo, hi):
    """The row of the resident region of GPU g that [lo, hi) lies in (marked used now), or -1."""
    gp = st.gpu[g]
    for r in range(gp.l2_regions):
        if st.l2_res[g, r, RES_START] <= lo and hi <= st.l2_res[g, r, RES_END]:
            gp.l2_clock += 1
            st.l2_res[g, r, RES_USE] = gp.l2_clock
            return r
    return -1


@compiled
def _fill(st, g, lo, hi):
    """Make [lo, hi) resident on GPU g: regions it overlaps are replaced by it, the least recently
    used regions are evicted until it fits. A region larger than the capacity is not filled.
    Returns its row (the caller sets its RES_READY), or -1 when not filled."""
    p = st.p[0]
    gp = st.gpu[g]
    size = hi - lo
    if size > p.l2_capacity:
        return -1
    r = 0
    while r < gp.l2_regions:
        if st.l2_res[g, r, RES_START] < hi and lo < st.l2_res[g, r, RES_END]:
            _drop(st, g, r)            # the row now holds the last region: look at it again
        else:
            r += 1
    while gp.l2_regions > 0 and (gp.l2_resident_bytes + size > p.l2_capacity
                                 or gp.l2_regions >= p.l2_tracked_regions):
        lru = 0
        for q in range(1, gp.l2_regions):
            if st.l2_res[g, q, RES_USE] < st.l2_res[g, lru, RES_USE]:
                lru = q
        gp.l2_evicted_bytes += st.l2_res[g, lru, RES_END] - st.l2_res[g, lru, RES_START]
        _drop(st, g, lru)
    r = gp.l2_regions
    gp.l2_regions += 1
    gp.l2_resident_bytes += size
    gp.l2_clock += 1
    st.l2_res[g, r, RES_START] = lo
    st.l2_res[g, r, RES_END] = hi
    st.l2_res[g, r, RES_USE] = gp.l2_clock
    st.l2_res[g, r, RES_READY] = 0
    return r


@compiled
def _drop(st, g, r):
    """Remove region row r of GPU g (the last row in use moves into it)."""
    gp = st.gpu[g]
    gp.l2_resident_bytes -= st.l2_res[g, r, RES_END] - st.l2_res[g, r, RES_START]
    last = gp.l2_regions - 1
    for col in range(4):
        st.l2_res[g, r, col] = st.l2_res[g, last, col]
    gp.l2_regions = last


@compiled
def link_write(st, g, addr, nbytes, tick):
    """A write arriving from a link (the hub's receive path: puts, stores, MoE-Hub rows) issued
    at `tick`. Returns (absorbed, visible): when the packet may leave the link receive buffer (its
    credits go back) and when readers see the data. system.gpu.l2.link_writes:
      hbm        the buffer is held until the HBM channels have taken the data (visible one HBM
                 latency later): writes queue behind every access already on those channels;
      write_back the L2 (a write-back cache, as NVLink writes land in the destination GPU's L2
                 slices) takes the data at its bandwidth and it is visible one L2 latency later;
                 the HBM write-back is charged on the channels (their bandwidth) but holds no
                 link buffer."""
    p = st.p[0]
    if p.l2_link_writes == 0:
        done = hbm_transfer(st, g, addr, nbytes, tick, True)
        return done, done + hbm_latency_ticks(st, done)
    hbm_transfer(st, g, addr, nbytes, tick, True)   # the write-back, later: bandwidth only
    st.gpu[g].l2_link_write_bytes += nbytes
    done = l2_port_transfer(st, g, nbytes, tick, 0)
    c = cycle_at_or_after(done, p.sm_period_fs)
    return done, cycle_edge(c + p.l2_latency_cycles, p.sm_period_fs)
