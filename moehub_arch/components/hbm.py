"""HBM: per-GPU high-bandwidth memory as C independent channels, plus functional storage.

Timing: addresses are interleaved over channels in ``interleave``-byte granules. Each channel is a
bandwidth server (bandwidth / C bytes per second) with a FIFO of work: an access of n bytes that
touches a channel occupies it for n_channel / channel_bandwidth after whatever it already had
queued (work-conserving fluid model, exact for streaming and for contention between SMs), and the
data is available one fixed access latency (from microbenchmarks: load latency to HBM) after the
last channel finishes. Accesses smaller than ``min_access`` (the 32 B sector) cost a sector.

The L2 is modelled only for reads a kernel marks as L2-resident (``mma`` subops ``b_l2``, ``l2``,
``a_l2``: expert weights after their first touch, a row tile several thread blocks share): a per-GPU
bandwidth server with the L2 hit latency. Every other access goes to HBM.

Storage (functional contents) is ``st.hbm_mem[g]``, a byte array. In timing mode only the control
region at the bottom of the address space is backed; data beyond it is modelled by size only.
Shared memory is a separate window (addresses with SMEM_ADDR_BIT set), backed in functional mode.
"""
import numpy as np
from ..engine.jit import compiled

from ..engine.clock import bytes_ticks, cycle_edge, cycle_at_or_after
from ..engine.state import ERR_UNBACKED_COPY
from ..config.schema import L2_LINK_WRITES
from .block import Block, Param, Record, Stat, StatGroup, counters, fields

HBM_MIN_ACCESS = 32  # bytes: the DRAM sector, the smallest unit HBM transfers


def _hbm(key, field, unit, doc, value=None):
    return Param(field, f"system.gpu.hbm.{key}", unit, doc,
                 value or (lambda cfg: getattr(cfg.system.gpu.hbm, key)), f"config: system.gpu.hbm.{key}")


def _hbm_utilization(i):
    C = int(i.p.hbm_channels)
    busy = i.st.hbm_chan.busy[i.g * C:(i.g + 1) * C].sum()
    return busy / (C * i.sim_ticks) if i.sim_ticks else 0.0


BLOCK = Block(
    "hbm", __doc__.split("\n\n")[0],
    params=(
        _hbm("channels", "hbm_channels", "channels", "independent channels per GPU"),
        _hbm("interleave_bytes", "hbm_interleave", "bytes", "address interleave granule"),
        _hbm("bandwidth", "hbm_fs_per_byte_channel", "fs/byte", "one channel's time per byte "
             "(bandwidth / channels)", lambda cfg: int(round(1e15 * cfg.system.gpu.hbm.channels
                                                             / cfg.system.gpu.hbm.bandwidth))),
        _hbm("latency_cycles", "hbm_latency_cycles", "SM cycles", "load latency"),
        _hbm("atomic_latency_cycles", "hbm_atomic_cycles", "SM cycles", "extra latency of an atomic"),
        _hbm("capacity", "hbm_capacity", "bytes", "capacity per GPU"),
        Param("hbm_min_access", "", "bytes", "smallest transfer (a sector)",
              lambda cfg: HBM_MIN_ACCESS, "HBM_MIN_ACCESS: the 32 B DRAM sector"),
    ),
    records=(Record("hbm_chan", "HBM channels, channels per GPU"),),
    fields=fields("hbm_chan", ("free", "tick the queued transfers end"),
                  ("busy", "time spent transferring (stat)"))
    + fields("gpu", ("hbm_read_bytes", "bytes read"), ("hbm_write_bytes", "bytes written"),
             ("hbm_accesses", "accesses"), ("hbm_atomics", "atomics performed at memory")),
    stats=(StatGroup("gpu", "hbm", counters((
        ("read_bytes", "hbm_read_bytes", "bytes", "bytes read"),
        ("write_bytes", "hbm_write_bytes", "bytes", "bytes written"),
        ("accesses", "hbm_accesses", "count", "accesses (bulk accesses count once)"),
        ("atomics", "hbm_atomics", "count", "atomic read-modify-writes performed at memory"),
    )) + (
        Stat("utilization", "ratio", "mean fraction of time the channels were transferring",
             _hbm_utilization),
        Stat("bandwidth_GBps", "GB/s", "bytes read and written per second, averaged over the run",
             lambda i: i.per_second(i.rec.hbm_read_bytes + i.rec.hbm_write_bytes) / 1e9),
    )),),
)

# The L2 (reads marked L2-resident and, with link_writes: write_back, writes from the links).
L2_BLOCK = Block(
    "l2", "L2: a per-GPU bandwidth server for reads marked L2-resident and link writes it absorbs",
    params=(
        Param("l2_fs_per_byte", "system.gpu.l2.bandwidth", "fs/byte", "L2 read port time per byte",
              lambda cfg: int(round(1e15 / cfg.system.gpu.l2.bandwidth)),
              "config: system.gpu.l2.bandwidth"),
        Param("l2_latency_cycles", "system.gpu.l2.latency_cycles", "SM cycles", "L2 hit latency",
              lambda cfg: cfg.system.gpu.l2.latency_cycles, "config: system.gpu.l2.latency_cycles"),
        Param("l2_link_writes", "system.gpu.l2.link_writes", "choice",
              "where link writes land: 0 hbm, 1 write_back",
              lambda cfg: L2_LINK_WRITES.index(cfg.system.gpu.l2.link_writes),
              "config: system.gpu.l2.link_writes"),
    ),
    fields=fields("gpu", ("l2_free", "tick the L2 port's queued transfers end"),
                  ("l2_busy", "time the L2 port transferred (stat)"),
                  ("l2_read_bytes", "reads served"), ("l2_link_write_bytes", "link writes absorbed")),
    stats=(StatGroup("gpu", "l2", (
        Stat("shared_read_bytes", "bytes", "reads served by the L2 (mma operands marked "
             "L2-resident: weights, shared row tiles)", "l2_read_bytes"),
        Stat("link_write_bytes", "bytes", "writes from the links absorbed by the L2 "
             "(system.gpu.l2.link_writes: write_back)", "l2_link_write_bytes"),
        Stat("utilization", "ratio", "fraction of time the L2 read port was transferring",
             lambda i: i.fraction(i.rec.l2_busy)),
    )),),
)


@compiled
def hbm_access(st, g, addr, nbytes, tick, is_write):
    """Charge an access of nbytes at addr on GPU g issued at `tick`; returns the tick at which the
    data is available (reads) or visible to other readers (writes)."""
    done = hbm_transfer(st, g, addr, nbytes, tick, is_write)
    return done + hbm_latency_ticks(st, done)


@compiled
def hbm_transfer(st, g, addr, nbytes, tick, is_write):
    """Charge the channels for an access; returns when the last channel finished transferring
    (for a write arriving from a link: when the memory system has absorbed it)."""
    p = st.p[0]
    n = nbytes
    if n < p.hbm_min_access:
        n = p.hbm_min_access
    C = p.hbm_channels
    Q = p.hbm_interleave
    base = g * C
    last_done = tick
    first_granule = addr // Q
    last_granule = (addr + n - 1) // Q
    ngranules = last_granule - first_granule + 1
    if ngranules <= C:
        # short access: walk its granules (each lands on a distinct channel)
        for gi in range(first_granule, last_granule + 1):
            lo = gi * Q
            if lo < addr:
                lo = addr
            hi = (gi + 1) * Q
            if hi > addr + n:
                hi = addr + n
            chan = st.hbm_chan[base + gi % C]
            start = chan.free
            if start < tick:
                start = tick
            busy = bytes_ticks(hi - lo, p.hbm_fs_per_byte_channel)
            chan.free = start + busy
            chan.busy += busy
            if start + busy > last_done:
                last_done = start + busy
    else:
        # long access: every channel gets the full rounds plus its share of the partial ends
        head = Q - addr % Q                        # bytes in the first granule
        tail = (addr + n) - last_granule * Q       # bytes in the last granule
        inner = ngranules - 2
        for k in range(C):
            ch_bytes = (inner // C) * Q
            # inner granules first_granule+1 .. last_granule-1: channel of granule gi is gi % C
            if (k - (first_granule + 1)) % C < inner % C:
                ch_bytes += Q
            if first_granule % C == k:
                ch_bytes += head
            if last_granule % C == k:
                ch_bytes += tail
            if ch_bytes == 0:
                continue
            chan = st.hbm_chan[base + k]
            start = chan.free
            if start < tick:
                start = tick
            busy = bytes_ticks(ch_bytes, p.hbm_fs_per_byte_channel)
            chan.free = start + busy
            chan.busy += busy
            if start + busy > last_done:
                last_done = start + busy
    gp = st.gpu[g]
    if is_write:
        gp.hbm_write_bytes += nbytes
    else:
        gp.hbm_read_bytes += nbytes
    gp.hbm_accesses += 1
    return last_done


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
    done = _l2_transfer(st, g, nbytes, tick)
    c = cycle_at_or_after(done, p.sm_period_fs)
    return done, cycle_edge(c + p.l2_latency_cycles, p.sm_period_fs)


@compiled
def _l2_transfer(st, g, nbytes, tick):
    """Charge GPU g's L2 bandwidth server (one fluid FIFO per GPU, like an HBM channel) for
    nbytes issued at `tick`; returns when the transfer ends."""
    p = st.p[0]
    gp = st.gpu[g]
    start = gp.l2_free
    if start < tick:
        start = tick
    busy = bytes_ticks(nbytes, p.l2_fs_per_byte)
    gp.l2_free = start + busy
    gp.l2_busy += busy
    return start + busy


@compiled
def l2_access(st, g, nbytes, tick):
    """A read of nbytes served by GPU g's L2 (data the kernel asserts many tiles share, such as
    expert weights): one bandwidth server per GPU (the L2's aggregate read bandwidth, fluid FIFO
    like an HBM channel) plus the L2 hit latency. Returns the tick the data is available."""
    p = st.p[0]
    st.gpu[g].l2_read_bytes += nbytes
    c = cycle_at_or_after(_l2_transfer(st, g, nbytes, tick), p.sm_period_fs)
    return cycle_edge(c + p.l2_latency_cycles, p.sm_period_fs)


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
def move_bytes(st, src_gpu, src_addr, dst_gpu, dst_addr, nbytes, slot):
    """Functional data movement between HBM locations (possibly on two GPUs).

    Unbacked destinations (timing-mode data region) are skipped: only sizes matter there. Copying
    unbacked source bytes into the backed control region would silently produce zeros, so it is an
    error instead.
    """
    if not hbm_backed(st, dst_addr, nbytes):
        return
    if not hbm_backed(st, src_addr, nbytes):
        raise_error(st, ERR_UNBACKED_COPY, slot, src_addr)
        return
    copy_overlapping(st.hbm_mem[dst_gpu, dst_addr:dst_addr + nbytes],
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
