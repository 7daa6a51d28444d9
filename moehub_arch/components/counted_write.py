"""Counted writes: a remote write that names a byte counter at its destination, and a wait for an
expected byte count (Blackwell, SM100).

What is modelled (public descriptions: NVSHMEM's counted-put API and NCCL's Compute Fabric
Transport, NCCL 2.31 / CUDA 13.3; nvbandwidth v0.11.0's counted-put tests; FlashInfer's one-sided
NVLink all-to-all, which waits on these counters): a put names, besides its destination range, the
address of a 64-bit counter on the destination GPU; every packet of the put, once its payload is
written at the destination, adds its payload bytes to that counter. A receiver waits until a
counter reaches the byte count it expects. So the receiver learns that data has landed without a
flag the sender must order behind the data: the sender needs no fence (the round trip of every
write response) between its data and the signal, and many senders can feed one counter in any
order. Addresses are still computed in software (the sender chooses the destination slot); only
completion moves into the fabric - a shipped cousin of MoE-Hub's DAM tile counters and DySHARP's
token tracker, which also count arrivals at the destination, but there the hub also chooses the
address.

Instructions (isa/counted.yaml): ``put.counted gpu, dst, src, bytes, counter`` (the hub reads the
source, as ``put``), ``put.sm.counted`` (a warp copy, as ``put.sm``) and ``wait.count [counter],
expected`` (sleep until the local counter >= expected). A put completes at ``fence`` as any put
(its write responses come back); the counter does not depend on the fence.

Where the counter is added (assumption: NVIDIA does not publish where the hardware adds it): at the
destination, after the packet's payload write, by the memory side's atomic unit (as a posted
reduction: ``system.gpu.hbm.atomic_latency_cycles`` after the payload is visible); the counter's
word is taken to stay in the L2, so the adds cost no HBM channel bandwidth. The counter and the
data are visible together in order: a waiter released by the counter sees the payload. A counter
must be an aligned 8-byte word of backed memory (a control-region buffer), checked at issue (a bad
address stops the run with the kernel's file and line, exit status 2); a counted put to a GPU of
another node (an RDMA write) is refused the same way - counted writes are an NVLink feature here.

Stats (system.gpuN.counted_write.*, present when a run uses them): counted puts issued and their
bytes (source side), counter updates and the bytes added (destination side), wait.count
instructions, those that slept, and the time they slept. The end-of-run check: every byte issued
as a counted put was added to a counter (conservation). A wait.count that never completes is named
in the stuck-run report with its counter's value.
"""
from ..engine.jit import compiled
from ..engine.state import ERR_CW_COUNTER
from .hbm import hbm_backed, raise_error, read_word, write_word
from ..declare import Block, Stat, StatGroup, counters, fields


def _used(st):
    gp = st.gpu
    return bool(int(gp.cw_puts.sum()) + int(gp.cw_waits.sum()) + int(gp.cw_updates.sum()) > 0)


def check_counted(sim, out):
    """Every counted byte issued reached a counter (no packet of a counted put was lost)."""
    st = sim.state
    if not _used(st):
        return
    out.equal("bytes added to counters (counted puts' bytes issued)",
              int(st.gpu.cw_counted_bytes.sum()), int(st.gpu.cw_put_bytes.sum()))


def counted_findings(sim):
    """The stuck-run report: thread blocks asleep in wait.count, with their counter's value."""
    st = sim.state
    out = []
    P = st.p[0]
    for slot in range(st.tb.shape[0]):
        tb = st.tb[slot]
        if not int(tb.cw_waiting):
            continue
        sm = slot // int(P.slots_per_sm)
        g = sm // int(P.sms_per_gpu)
        addr = int(tb.wait_addr)
        have = int(read_word(st, g, addr)) if addr + 8 <= st.hbm_mem.shape[1] else 0
        out.append(f"system.gpu{g}.sm{sm % int(P.sms_per_gpu)} thread-block slot {slot}: wait.count on "
                   f"the counter at {addr:#x} for {int(tb.wait_value)} bytes; it holds {have} "
                   f"(no counted put in flight adds the rest: a wait on a counter no one writes, "
                   f"or an expected count larger than what is sent)")
    return out


BLOCK = Block(
    "counted_write", __doc__.split("\n\n")[0],
    fields=fields("req", ("cw_counter", "counted put: the counter's address at the destination "
                                        "(-1: a plain put)"))
    + fields("pk", ("cw_counter", "the counter a put packet adds its payload to (-1: none)"))
    + fields("tb", ("cw_waiting", "1 while the thread block sleeps in wait.count"))
    + fields("gpu", ("cw_puts", ""), ("cw_put_bytes", ""), ("cw_updates", ""),
             ("cw_counted_bytes", ""), ("cw_waits", ""), ("cw_waits_blocked", ""),
             ("cw_wait_ticks", "")),
    stats=(StatGroup("gpu", "counted_write", counters((
        ("puts", "cw_puts", "count", "counted puts issued by this GPU (put.counted, "
         "put.sm.counted)"),
        ("put_bytes", "cw_put_bytes", "bytes", "bytes of the counted puts this GPU issued"),
        ("counter_updates", "cw_updates", "packets", "counter additions at this GPU (one per "
         "link packet of a counted put landed here; one per local counted put)"),
        ("counted_bytes", "cw_counted_bytes", "bytes", "payload bytes added to this GPU's "
         "counters"),
        ("waits", "cw_waits", "count", "wait.count instructions executed here"),
        ("waits_blocked", "cw_waits_blocked", "count", "wait.count instructions that slept (the "
         "counter was below the expected count at issue)"),
    )) + (Stat("wait_us", "us", "time thread blocks slept in wait.count (summed over blocks)",
               lambda i: float(i.rec.cw_wait_ticks) / 1e6),),
        enabled=_used),),
    checks=(check_counted,),
    findings=(counted_findings,),
)


@compiled
def counter_ok(st, slot, counter):
    """True if `counter` is a legal counter address (an aligned, backed 8-byte word: counters
    live in the symmetric control region, so the same address is legal on every GPU); else the
    run stops with ERR_CW_COUNTER naming the instruction's line."""
    if counter % 8 != 0 or not hbm_backed(st, counter, 8):
        raise_error(st, ERR_CW_COUNTER, slot, counter)
        return False
    return True


@compiled
def counted_put_issued(st, g, r, counter, nbytes):
    """The hub accepted request r (a put of nbytes from GPU g) as a counted put: its packets will
    carry the counter's address (hub.hub_packetize copies it into each put packet)."""
    st.req[r].cw_counter = counter
    gp = st.gpu[g]
    gp.cw_puts += 1
    gp.cw_put_bytes += nbytes


@compiled
def counted_local_put(st, g, nbytes):
    """A counted put to this GPU itself (no packets): counted once at issue."""
    gp = st.gpu[g]
    gp.cw_puts += 1
    gp.cw_put_bytes += nbytes


@compiled
def counter_add(st, g, counter, nbytes, npk, visible):
    """Payload bytes of a counted put landed on GPU g, visible from `visible`: the atomic unit
    adds them to the counter. Returns when the new count is visible (the caller wakes the
    counter's waiters then: waiters.notify_stores)."""
    write_word(st, g, counter, read_word(st, g, counter) + nbytes)
    gp = st.gpu[g]
    gp.cw_updates += npk
    gp.cw_counted_bytes += nbytes
    p = st.p[0]
    return visible + (p.hbm_atomic_cycles * p.sm_period_fs + 999) // 1000


@compiled
def counted_wait_issued(st, g, slot, blocked):
    """wait.count executed on GPU g; `blocked`: the counter was short and the block sleeps."""
    gp = st.gpu[g]
    gp.cw_waits += 1
    if blocked:
        gp.cw_waits_blocked += 1
        st.tb[slot].cw_waiting = 1


@compiled
def counted_wait_released(st, g, slot, tick):
    """A block asleep in wait.count is woken at `tick` (waiters.notify_stores): its sleep counts."""
    tb = st.tb[slot]
    if tb.cw_waiting:
        tb.cw_waiting = 0
        st.gpu[g].cw_wait_ticks += tick - tb.wait_start
