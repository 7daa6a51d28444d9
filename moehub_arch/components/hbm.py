"""HBM: per-GPU high-bandwidth memory as C independent channels, plus functional storage.

Timing: addresses are interleaved over channels in ``interleave``-byte granules. Each channel is a
bandwidth server (bandwidth / C bytes per second); the data is available one fixed access latency
(from microbenchmarks: load latency to HBM) after the access's last channel finished. Accesses
smaller than ``min_access`` (the 32 B sector) cost a sector.

Arbitration (system.gpu.hbm.arbitration) decides how a channel shares its bandwidth:

- ``fifo``: every access is served whole, first in first out (a work-conserving fluid queue:
  ``start = max(free, tick)``). Exact for streams and simple, but a GEMM job issues its whole-K
  operand read as one access (mma over K = 7168, N = 128 reads 1.8 MB at issue), so a 256 B link
  write arriving just after waits for the whole 1.8 MB.
- ``paced`` (the default): the mechanism real GPUs have. An SM does not fetch a GEMM's operands
  at issue: TMA multi-stage pipelines stream K-slices as the tensor cores consume them (NVIDIA
  Hopper tuning guide; CUTLASS 3 warp-specialised mainloops), and a copy or vector instruction moves
  bytes at its load/store port rate. So the traffic of an SM instruction is *paced* over the
  instruction's own occupancy of its unit (the same ``work / throughput`` cycles that occupy it):
  on each channel it takes at most ``bytes_on_channel / occupancy`` of the channel's rate. Memory
  controllers interleave requests from many sources at request granularity (FR-FCFS, Rixner et
  al., ISCA 2000), so another request is not queued behind a paced stream; it is served with the
  bandwidth the streams leave. Each channel keeps a calendar of windows
  (``arbitration_window``, 1 us on H100) with the work paced streams reserved in it and the work
  whole accesses (link writes, the RPM's reads, small SM accesses that are faster than their
  instruction) took in it. Paced streams take what is left in each window, up to their pace,
  spilling into later windows when the channel is saturated. Whole accesses stay first in first
  out among themselves (the ``free`` queue: exactly the fifo model when nothing is paced) and flow
  through each window at the rate the paced streams leave, but never later than their own transfer
  plus the drain of a full controller queue (``queue_depth`` 32 B requests): under FR-FCFS a
  request waits for the requests already queued, however many streams keep the queue full.
  That wait is latency, not channel occupancy: a whole access holds the ``free`` queue for its
  own bytes at the channel rate only, so the next whole access starts behind its bytes, not
  behind its wait (the controller interleaves queued requests at sector granularity: GPGPU-Sim's
  and Ramulator's DRAM models keep many requests in flight per channel, and FR-FCFS serves them
  as their banks allow). Without this, link writes arriving while streams leave little
  bandwidth queued behind each other's whole bounded time (the first paced model). Approximated: completion times are computed when an access is issued, so a later access cannot
  delay a stream already placed: the work a whole access takes beyond what its window had left
  is charged to the next window (later streams pay it; total work is conserved, its order is
  not). Within a window paced work is spread evenly (a request sees the window's mean paced load,
  not its instant load). Work beyond the calendar's horizon (1024 windows ahead of the current
  tick) is served at full rate and counted in ``system.gpuN.hbm.beyond_calendar_ticks``.
  Traffic whose transfer takes longer than its instruction's occupancy (memory-bound) is a whole
  access: the instruction waits for memory, as before.

What the calendar costs the simulator (issue 23; none of this changes a result): a paced GEMM
operand walks ~pace / window rows on each of the C channels (10-30 x 80 on H100), so the calendar
was ~11% of the run loop's time. The walks now load windows inline (`_window`, no call per window),
find a window's ring row with a mask (the ring has a power-of-two number of windows), take the
horizon once per access and a stream's whole-window pace once per walk (no division in the windows
between its first and last), and keep 4 columns (32 B rows, two per cache line; the per-window
stream count was written, never read). What was left was mostly a cache miss on each row a walk
loads: one channel's rows of a window are 32 KB from the next channel's, so no hardware prefetcher
finds them; a long access prefetches the rows of the next channel's walk while it walks this one
(`_prefetch_walk`, engine/prefetch.py; a no-op in the pure-Python engine). tests/test_memory_calendar.py
checks all this against the first implementation on random accesses.

The L2 in front of the channels (its capacity, its read port, where link writes land) is
components/l2.py; its read port shares this module's arbitration (one more calendar row per GPU).

Storage (functional contents) is ``st.hbm_mem[g]``, a byte array. In timing mode only the control
region at the bottom of the address space is backed; data beyond it is modelled by size only.
Shared memory is a separate window (addresses with SMEM_ADDR_BIT set), backed in functional mode.
"""
import numpy as np

from ..engine.jit import compiled, inline
from ..engine.prefetch import prefetch_address

from ..engine.clock import bytes_ticks, cycle_edge, cycle_at_or_after
from ..engine.state import ERR_UNBACKED_COPY
from ..config.keys import key_param
from ..config.schema import MEMORY_ARBITRATION
from ..declare import Block, Param, Record, Stat, StatGroup, counters, fields
from .elements import add_elements_bf16

HBM_MIN_ACCESS = 32  # bytes: the DRAM sector, the smallest unit HBM transfers


def _hbm(key, field, value=None, unit=None, how=""):
    return key_param(field, f"system.gpu.hbm.{key}", value, unit=unit, how=how)


def queue_drain_ticks(queue_depth, bandwidth):
    """Ticks (ps) to drain a full controller queue of 32 B requests at `bandwidth` (B/s), rounded up
    as this module rounds transfers (whole femtoseconds per byte)."""
    fs_per_byte = int(round(1e15 / bandwidth))
    return -(-queue_depth * HBM_MIN_ACCESS * fs_per_byte // 1000)


def _hbm_utilization(i):
    C = int(i.p.hbm_channels)
    busy = i.st.hbm_chan.busy[i.g * C:(i.g + 1) * C].sum()
    return busy / (C * i.sim_ticks) if i.sim_ticks else 0.0


BLOCK = Block(
    "hbm", __doc__.split("\n\n")[0],
    params=(
        _hbm("channels", "hbm_channels"),
        _hbm("interleave_bytes", "hbm_interleave"),
        Param("hbm_fs_per_byte_channel", "system.gpu.hbm.bandwidth, system.gpu.hbm.channels",
              "fs/byte", "one channel's time per byte",
              lambda cfg: int(round(1e15 * cfg.system.gpu.hbm.channels
                                    / cfg.system.gpu.hbm.bandwidth)),
              "derived: 1 / (bandwidth / channels)"),
        _hbm("latency_cycles", "hbm_latency_cycles"),
        _hbm("atomic_latency_cycles", "hbm_atomic_cycles"),
        _hbm("capacity", "hbm_capacity"),
        Param("hbm_min_access", "", "bytes", "smallest transfer (a sector)",
              lambda cfg: HBM_MIN_ACCESS, "HBM_MIN_ACCESS: the 32 B DRAM sector"),
        _hbm("arbitration", "mem_arbitration",
             lambda cfg: MEMORY_ARBITRATION.index(cfg.system.gpu.hbm.arbitration), "choice",
             "its index in MEMORY_ARBITRATION: 0 paced, 1 fifo"),
        _hbm("arbitration_window", "mem_window_ticks"),
        Param("hbm_queue_ticks", "system.gpu.hbm.queue_depth, system.gpu.hbm.bandwidth, "
              "system.gpu.hbm.channels", "ps", "drain of a full channel controller queue",
              lambda cfg: queue_drain_ticks(cfg.system.gpu.hbm.queue_depth,
                                            cfg.system.gpu.hbm.bandwidth / cfg.system.gpu.hbm.channels),
              "derived: queue_drain_ticks(queue_depth, bandwidth / channels)"),
    ),
    records=(Record("hbm_chan", "HBM channels, channels per GPU"),),
    fields=fields("hbm_chan", ("free", "tick the queued transfers end"),
                  ("busy", "time spent transferring (stat)"))
    + fields("gpu", ("hbm_read_bytes", "bytes read"), ("hbm_write_bytes", "bytes written"),
             ("hbm_accesses", "accesses"), ("hbm_atomics", "atomics performed at memory"),
             ("hbm_paced_accesses", "accesses streamed over their instruction's duration"),
             ("mem_beyond_calendar", "channel and L2 work past the calendar's horizon (ps)")),
    stats=(StatGroup("gpu", "hbm", counters((
        ("read_bytes", "hbm_read_bytes", "bytes", "bytes read"),
        ("write_bytes", "hbm_write_bytes", "bytes", "bytes written"),
        ("accesses", "hbm_accesses", "count", "accesses (bulk accesses count once)"),
        ("atomics", "hbm_atomics", "count", "atomic read-modify-writes performed at memory"),
        ("paced_accesses", "hbm_paced_accesses", "count",
         "accesses streamed over their instruction's duration (system.gpu.hbm.arbitration: paced)"),
        ("beyond_calendar_ticks", "mem_beyond_calendar", "ps",
         "channel and L2 work past the paced-arbitration calendar's horizon, served at full rate "
         "(an approximation; 0 unless memory is oversubscribed by more than the horizon)"),
    )) + (
        Stat("utilization", "ratio", "mean fraction of time the channels were transferring",
             _hbm_utilization),
        Stat("bandwidth_GBps", "GB/s", "bytes read and written per second, averaged over the run",
             lambda i: i.per_second(i.rec.hbm_read_bytes + i.rec.hbm_write_bytes) / 1e9),
    )),),
)

ARB_PACED, ARB_FIFO = 0, 1            # config.schema.MEMORY_ARBITRATION
# calendar columns: window index, work (ticks) paced streams and whole accesses took, and for a
# full window a later window to try next (skip link; 0: none), so a stream placed behind a long
# saturated stretch does not walk it window by window every time. Four int64 columns: a row is
# 32 B, two rows per cache line and none straddles one.
CAL_TAG, CAL_PACED, CAL_WHOLE, CAL_NEXT = 0, 1, 2, 3
CAL_COLUMNS = 4

# rows of a channel's calendar a long access prefetches (a stream's walk is ~pace / window rows:
# 10-30 for a GEMM operand at 1 us windows); assumption: enough to cover one walk, few enough not
# to flood the core's outstanding-miss buffers
PREFETCH_ROWS = 32


@compiled
def hbm_access(st, g, addr, nbytes, tick, is_write):
    """Charge an access of nbytes at addr on GPU g issued at `tick`; returns the tick at which the
    data is available (reads) or visible to other readers (writes)."""
    done = hbm_transfer(st, g, addr, nbytes, tick, is_write)
    return done + hbm_latency_ticks(st, done)


@compiled
def hbm_access_paced(st, g, addr, nbytes, tick, is_write, pace_ticks):
    """hbm_access for the traffic of an SM instruction that occupies its unit for `pace_ticks`: the
    bytes stream over that time (see the module docstring)."""
    done = _transfer(st, g, addr, nbytes, tick, is_write, pace_ticks)
    return done + hbm_latency_ticks(st, done)


@compiled
def hbm_transfer(st, g, addr, nbytes, tick, is_write):
    """Charge the channels for a whole access; returns when the last channel finished transferring
    (for a write arriving from a link: when the memory system has absorbed it)."""
    return _transfer(st, g, addr, nbytes, tick, is_write, 0)


@compiled
def _transfer(st, g, addr, nbytes, tick, is_write, pace_ticks):
    """hbm_transfer, paced over pace_ticks when > 0."""
    p = st.p[0]
    n = nbytes
    if n < p.hbm_min_access:
        n = p.hbm_min_access
    C = p.hbm_channels
    Q = p.hbm_interleave
    fs = p.hbm_fs_per_byte_channel
    base = g * C
    horizon = calendar_horizon(st)       # the current tick does not move during one access
    last_done = tick
    first_granule = addr // Q
    last_granule = (addr + n - 1) // Q
    ngranules = last_granule - first_granule + 1
    paced = 0
    short = ngranules <= C
    # a short access walks its granules (each lands on a distinct channel, k = granule % C,
    # counted from the first); a long one gives every channel its full rounds plus its share of
    # the partial ends: channel k gets the inner granules first_granule+1 .. last_granule-1 with
    # gi % C == k (one more round for the `extra` channels from first_granule+1's), the head
    # granule's bytes if it holds first_granule, the tail's if it holds last_granule
    head_channel = first_granule % C
    # the long access's shares (set below; a short access, the frequent one, needs none of them)
    tail_channel = head = tail = rounds = extra = offset = 0
    walk = 0
    first_window = 0
    if not short:
        tail_channel = last_granule % C
        head = Q - addr % Q                        # bytes in the first granule
        tail = (addr + n) - last_granule * Q       # bytes in the last granule
        inner = ngranules - 2
        rounds = (inner // C) * Q
        extra = inner % C
        offset = head_channel + 1                  # (k - (first_granule + 1)) % C, from k = 0
        offset = C - offset if offset < C else 0
        # the calendar rows a channel's walk will load (windows from the one of `tick`, as many
        # as the stream's pace spans) are prefetched one channel ahead: their misses overlap the
        # previous channel's walk instead of following it (a window's rows are 32 KB apart from
        # channel to channel, so no hardware prefetcher guesses them)
        if p.mem_arbitration == ARB_PACED:
            W = p.mem_window_ticks
            first_window = tick // W
            walk = 1
            if pace_ticks > 0:
                walk = (tick + pace_ticks) // W - first_window + 1
            _prefetch_walk(st, base, first_window, walk)
    k = head_channel if short else 0
    for j in range(ngranules if short else C):
        if short:
            gi = first_granule + j
            lo = gi * Q
            if lo < addr:
                lo = addr
            hi = gi * Q + Q
            if hi > addr + n:
                hi = addr + n
            ch_bytes = hi - lo
        else:
            k = j
            if walk > 0 and k + 1 < C:
                _prefetch_walk(st, base + k + 1, first_window, walk)
            ch_bytes = rounds
            if offset < extra:
                ch_bytes += Q
            offset += 1
            if offset == C:
                offset = 0
            if k == head_channel:
                ch_bytes += head
            if k == tail_channel:
                ch_bytes += tail
        if ch_bytes > 0:
            done = _hbm_channel(st, g, base + k, bytes_ticks(ch_bytes, fs), tick, pace_ticks,
                                horizon)
            if done < 0:
                paced = 1
                done = -done
            if done > last_done:
                last_done = done
        if short:
            k += 1
            if k == C:
                k = 0
    gp = st.gpu[g]
    if is_write:
        gp.hbm_write_bytes += nbytes
    else:
        gp.hbm_read_bytes += nbytes
    gp.hbm_accesses += 1
    gp.hbm_paced_accesses += paced
    return last_done


@compiled
def _hbm_channel(st, g, c, busy, tick, pace_ticks, horizon):
    """Serve `busy` ticks of work on HBM channel c (global index); returns the end tick, negated
    when the work was paced."""
    chan = st.hbm_chan[c]
    chan.busy += busy
    p = st.p[0]
    if p.mem_arbitration == ARB_PACED and pace_ticks > busy:
        return -_paced(st, g, c, busy, tick, pace_ticks, horizon)
    end = _whole(st, g, c, chan.free, busy, tick, p.hbm_queue_ticks, horizon)
    chan.free = _whole_queue_end(chan.free, busy, tick)
    return end


@compiled
def calendar_horizon(st):
    """The first window past the calendar's horizon: a server's ring holds the windows from the one
    of the current tick up to mem_cal.shape[1] windows ahead. The caller computes it once per
    access (the current tick does not move meanwhile), not once per window it loads."""
    return st.sys[0].q_now // st.p[0].mem_window_ticks + st.mem_cal.shape[1]


@inline
def _prefetch_walk(st, srv, first_window, walk):
    """Prefetch the calendar rows of server srv's windows from first_window on, `walk` of them (at
    most PREFETCH_ROWS): where a walk will load them (paced arbitration only: the fifo
    placeholder calendar has one row)."""
    nw = st.mem_cal.shape[1]
    if walk > PREFETCH_ROWS:
        walk = PREFETCH_ROWS
    row_bytes = CAL_COLUMNS * 8
    server = st.mem_cal.ctypes.data + srv * nw * row_bytes
    line = -1
    for j in range(walk):
        at = server + ((first_window + j) & (nw - 1)) * row_bytes
        if at >> 6 != line:             # one prefetch per 64 B cache line
            line = at >> 6
            prefetch_address(at)


@inline
def _window(st, srv, i, horizon):
    """Load window i of server srv's calendar; returns its row, or -1 past the horizon (the ring
    row still holds a later window or i is too far ahead of the current tick). Inlined into the
    window walks: one call per window crossed was the largest part of the calendar's cost."""
    if i >= horizon:
        return -1
    # the ring has a power-of-two number of windows (builder.MEMORY_CALENDAR_WINDOWS) and i >= 0:
    # a mask, not a division
    row = i & (st.mem_cal.shape[1] - 1)
    tag = st.mem_cal[srv, row, CAL_TAG]
    if tag != i:
        if tag > i:
            return -1
        st.mem_cal[srv, row, CAL_TAG] = i
        st.mem_cal[srv, row, CAL_PACED] = 0
        st.mem_cal[srv, row, CAL_WHOLE] = 0
        st.mem_cal[srv, row, CAL_NEXT] = 0
    return row


@compiled
def _whole(st, g, srv, free, busy, tick, queue_ticks, horizon):
    """A whole access: first in first out behind the server's other whole accesses (`free`, which
    advances by their bytes only: _whole_queue_end), at the rate the paced streams leave in each
    window it crosses, but never later than its own transfer plus the drain of a full controller
    queue (`queue_ticks`): FR-FCFS serves a request after the requests already queued, however many
    streams keep the queue full. Work beyond what a window had left is a debt the next window's
    paced streams pay (the streams already placed keep their times). Returns its end tick.
    `horizon`: calendar_horizon."""
    start = free
    if start < tick:
        start = tick
    if st.p[0].mem_arbitration != ARB_PACED:
        return start + busy
    W = st.p[0].mem_window_ticks
    limit = start + busy + queue_ticks
    t = start
    rem = busy
    i = t // W
    w_end = (i + 1) * W
    while rem > 0:
        row = _window(st, srv, i, horizon)
        if row < 0:
            st.gpu[g].mem_beyond_calendar += rem
            return t + rem
        stop = w_end if w_end < limit else limit
        paced_work = st.mem_cal[srv, row, CAL_PACED]
        left = W - paced_work                      # the channel's share not paced away
        end = -1
        got = 0
        if left > 0:
            end = t + (rem * W + left - 1) // left
        if end >= 0 and end <= stop:
            got = rem
        elif stop == limit:
            got = rem                                  # the queue bound: served now
            end = limit
        else:
            end = -1
            if left > 0:
                got = (w_end - t) * left // W
        used = st.mem_cal[srv, row, CAL_WHOLE] + got
        over = used + paced_work - W
        if over > 0:
            # oversubscribed: the excess is charged to the next window (paced room there)
            used -= over
            nxt = _window(st, srv, i + 1, horizon)
            if nxt >= 0:
                st.mem_cal[srv, nxt, CAL_WHOLE] += over
            else:
                st.gpu[g].mem_beyond_calendar += over
        st.mem_cal[srv, row, CAL_WHOLE] = used
        if end >= 0:
            return end
        rem -= got
        t = w_end
        i += 1
        w_end += W
    return t


@compiled
def _whole_queue_end(free, busy, tick):
    """Where a server's queue of whole accesses ends once one more of `busy` ticks issued at `tick`
    joins it: the access occupies the queue for its own bytes at the full rate only. The time it
    waits for the streams (the drain of the controller queue ahead of it) is latency: the
    controller interleaves the next whole access with it and with the streams at sector
    granularity, it does not hold the channel meanwhile."""
    start = free
    if start < tick:
        start = tick
    return start + busy


@compiled
def _paced(st, g, srv, busy, tick, pace_ticks, horizon):
    """A paced stream of `busy` ticks of work spread over `pace_ticks` from `tick`: in each window
    it takes at most its pace and what the window has left. Returns when its last byte is served.
    A window stays full once full (until its ring row is reused), so a run of full windows gets a
    skip link from its first window to the next window found open. `horizon`: calendar_horizon.
    The stream's pace in a whole window (ceil(W * busy / pace_ticks)) is the same in every window
    after the first, so the walk divides only in its first and last windows."""
    W = st.p[0].mem_window_ticks
    t = tick
    rem = busy
    i = t // W
    first_full = -1        # ring row of the first full window of the run being crossed
    whole_window_cap = -1  # the pace in a whole window, computed when first needed
    while True:
        row = _window(st, srv, i, horizon)
        if row < 0:
            st.gpu[g].mem_beyond_calendar += rem
            return t + (rem * pace_ticks + busy - 1) // busy
        w_end = (i + 1) * W
        room = W - st.mem_cal[srv, row, CAL_PACED] - st.mem_cal[srv, row, CAL_WHOLE]
        if room <= 0:
            if first_full < 0:
                first_full = row
            nxt = st.mem_cal[srv, row, CAL_NEXT]
            if nxt > i:
                t = nxt * W
                i = nxt
            else:
                t = w_end
                i += 1
            continue
        if first_full >= 0:
            st.mem_cal[srv, first_full, CAL_NEXT] = i
            first_full = -1
        if t == w_end - W:
            if whole_window_cap < 0:
                whole_window_cap = (W * busy + pace_ticks - 1) // pace_ticks
            cap = whole_window_cap
        else:
            cap = ((w_end - t) * busy + pace_ticks - 1) // pace_ticks   # the stream's pace
        if rem <= cap and rem <= room:
            st.mem_cal[srv, row, CAL_PACED] += rem
            end = t + (rem * pace_ticks + busy - 1) // busy
            return end if end < w_end else w_end
        take = cap if cap < room else room
        st.mem_cal[srv, row, CAL_PACED] += take
        rem -= take
        t = w_end
        i += 1


@compiled
def hbm_latency_ticks(st, tick):
    """The fixed HBM access latency (given in SM cycles) as ticks starting at `tick`."""
    p = st.p[0]
    c = cycle_at_or_after(tick, p.sm_period_fs)
    return cycle_edge(c + p.hbm_latency_cycles, p.sm_period_fs) - tick


@compiled
def hbm_backed(st, addr, nbytes):
    return addr >= 0 and addr + nbytes <= st.hbm_mem.shape[1]


@compiled
def read_word(st, g, addr):
    return st.hbm_mem[g, addr:addr + 8].view(np.int64)[0]


@compiled
def write_word(st, g, addr, value):
    st.hbm_mem[g, addr:addr + 8].view(np.int64)[0] = value


@compiled
def functional_transfer(st, src_addr, dst_addr, nbytes, slot):
    """Whether a functional transfer of nbytes from src_addr to dst_addr moves data: not when the
    destination is unbacked (timing-mode data region: only sizes matter there); an unbacked
    source into a backed destination would silently produce zeros, so it is an error instead."""
    if not hbm_backed(st, dst_addr, nbytes):
        return False
    if not hbm_backed(st, src_addr, nbytes):
        raise_error(st, ERR_UNBACKED_COPY, slot, src_addr)
        return False
    return True


@compiled
def move_bytes(st, src_gpu, src_addr, dst_gpu, dst_addr, nbytes, slot):
    """Functional data movement between HBM locations (possibly on two GPUs).

    Unbacked destinations are skipped and unbacked sources are an error (functional_transfer).
    """
    if functional_transfer(st, src_addr, dst_addr, nbytes, slot):
        copy_overlapping(st.hbm_mem[dst_gpu, dst_addr:dst_addr + nbytes],
                         st.hbm_mem[src_gpu, src_addr:src_addr + nbytes], nbytes)


@compiled
def update_bytes_bf16(st, src_gpu, src_addr, dst_gpu, dst_addr, nbytes, slot):
    """Functional near-memory update (put.add.bf16): the bf16 elements at dst_addr on dst_gpu +=
    those at src_addr on src_gpu (fp32 add, one rounding to bf16). Unbacked destinations are
    skipped and unbacked sources are an error (functional_transfer)."""
    if functional_transfer(st, src_addr, dst_addr, nbytes, slot):
        add_elements_bf16(st.hbm_mem[dst_gpu, dst_addr:dst_addr + nbytes],
                          st.hbm_mem[src_gpu, src_addr:src_addr + nbytes], nbytes)


@compiled
def copy_overlapping(dst, src, nbytes):
    """dst[:nbytes] = src[:nbytes] with memmove semantics (the views may overlap); no temporary
    (the engine does not allocate, see engine/jit.py)."""
    if nbytes <= 0:
        return
    if dst.ctypes.data <= src.ctypes.data:
        for i in range(nbytes):
            dst[i] = src[i]
    else:
        for i in range(nbytes - 1, -1, -1):
            dst[i] = src[i]


@compiled
def raise_error(st, code, slot, value):
    """Record the first runtime error; the run loop stops before its next event."""
    sy = st.sys[0]
    if sy.err_code == 0:
        sy.err_code = code
        sy.err_slot = slot
        sy.err_pc = st.tb[slot].pc if slot >= 0 else -1
        sy.err_value = value
