"""DySHARP's ready queue: the token tracker's output-readiness table appending tokens, in the order
they become ready, to a queue the combine takes them from (token-centric fusion; an extension of
arXiv 2605.05607's tracker, workload.layer.dysharp.combine_order: ready).

The paper (Sec. IV-B, IV-C, Fig. 13): when a GEMM-2 thread-block row (a row tile) is done, the
expert GPU's tracker notifies the source GPU of each of its tokens; the source's Output Readiness
(OR) table counts a token's notifications (nReady) and the token is ready for its
dymultimem.ld_reduce at top-k; the combine's communication kernel polls a token's nReady before
issuing its ld_reduce. In what order a combine block takes its tokens the paper does not say;
polling them in token order (combine_order: token, the default) lets one slow token hold back every
later token of its block. A ready queue removes that: when a notification completes a token's
count, the tracker appends the token's index to a queue in the source's memory, and the combine
blocks take the queue's positions in turn (block b the positions b, b + blocks, ...), so tokens are
combined in the order they become ready.

What is modelled: the notices are the per-(token, slot) ready words (workload.multicast[].ready_words,
[tokens][ready_count] i64: the OR table, as the fused kernels already write it). When a store - a
remote flag.set through the hub, or a local one - sets a word that was 0 and the token's other
words are all set, the hub appends t + 1 at the queue's next position (an on-chip tail per GPU,
field dy_rq_tail) and wakes whoever waits on that word. Assumption (the paper has no queue): the
OR table counts a notice when its write is visible and the append is one posted word write by the
memory side's atomic unit, visible system.gpu.hbm.atomic_latency_cycles later, its word kept in the
L2 (no HBM channel time) - as a counted write's counter add (counted_write.py). A combine block
finds its next position's token by polling the word (a load in a loop, the paper's "dedicated
load instruction within a loop"), one memory access when the token is there already.

Stats: system.gpuN.dysharp.ready_queue_tokens (tokens appended). End-of-run check: every token
whose ready words are all set was appended once, the queue holds exactly those tokens.
"""
import numpy as np

from ..engine.jit import compiled
from ..declare import Block, Param, StatGroup, counters, fields
from .dysharp_objects import OBJ_RK, OBJ_RQUEUE, OBJ_RTOK, OBJ_RWORDS, ready_queue_on
from .hbm import read_word, write_word
from .waiters import notify_stores


def check_ready_queue(sim, out):
    """Each GPU's queue holds exactly the tokens whose ready words are all set, each once."""
    st = sim.state
    if not int(st.p[0].dy_ready_queue):
        return
    for k in range(int(st.p[0].mm_objects)):
        o = st.mm_objects[k]
        if o[OBJ_RWORDS] == 0:
            continue
        base, kk, T, q = int(o[OBJ_RWORDS]) - 1, int(o[OBJ_RK]), int(o[OBJ_RTOK]), int(o[OBJ_RQUEUE])
        for g in range(st.hbm_mem.shape[0]):
            words = st.hbm_mem[g, base:base + 8 * kk * T].view(np.int64).reshape(T, kk)
            ready = np.flatnonzero((words != 0).all(axis=1))
            queue = st.hbm_mem[g, q:q + 8 * T].view(np.int64)
            n = int(st.gpu[g].dy_rq_tail)
            out.equal(f"system.gpu{g}: tokens appended to the ready queue vs tokens with every "
                      f"ready word set", n, len(ready))
            out.equal(f"system.gpu{g}: ready-queue positions filled vs appended",
                      int((queue != 0).sum()), n)
            out.equal(f"system.gpu{g}: distinct tokens in the ready queue that are ready",
                      len(np.intersect1d(queue[:n] - 1, ready)), n)


BLOCK = Block(
    "dysharp_ready", __doc__.split("\n\n")[0],
    params=(Param("dy_ready_queue", "", "bool", "1: a dynamic object names a ready queue (the hub "
                  "appends tokens to it as their ready words fill)",
                  lambda cfg: int(ready_queue_on(cfg)),
                  "derived: workload.multicast[].ready_words"),),
    fields=fields("gpu", ("dy_rq_tail", "ready queue: tokens appended (the tracker's on-chip tail "
                          "pointer)")),
    stats=(StatGroup("gpu", "dysharp", counters((
        ("ready_queue_tokens", "dy_rq_tail", "count", "tokens the token tracker appended to the "
         "ready queue (workload.layer.dysharp.combine_order: ready), in the order their last "
         "expert output was noticed"),
    )), enabled=lambda st: int(st.p[0].dy_ready_queue) > 0),),
    checks=(check_ready_queue,),
)


@compiled
def dysharp_ready_word(st, g, addr, old, t):
    """A store on GPU g set the word at addr, which held `old`, visible at t: if it is a token's
    last ready word to be set (every word of the token now set, this one was 0), the token tracker
    appends the token to its object's ready queue."""
    p = st.p[0]
    for k in range(p.mm_objects):
        o = st.mm_objects[k]
        if o[OBJ_RWORDS] == 0:
            continue
        rel = addr - (o[OBJ_RWORDS] - 1)
        kk = o[OBJ_RK]
        if rel < 0 or rel % 8 != 0 or rel >= 8 * kk * o[OBJ_RTOK]:
            continue
        if old != 0 or read_word(st, g, addr) == 0:
            return
        tok = rel // (8 * kk)
        first = addr - rel + tok * 8 * kk
        for j in range(kk):
            if read_word(st, g, first + 8 * j) == 0:
                return
        gp = st.gpu[g]
        at = o[OBJ_RQUEUE] + 8 * gp.dy_rq_tail
        gp.dy_rq_tail += 1
        write_word(st, g, at, tok + 1)
        notify_stores(st, g, at, 8, t + (p.hbm_atomic_cycles * p.sm_period_fs + 999) // 1000)
        return
