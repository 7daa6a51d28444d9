"""CAIS in the switch: the merge table, its entries' life and its timer.

The switch's entry point for every CAIS packet (`cais_switch`) and the merging table it keeps per
home GPU: a miss allocates an entry (a load sends one read home, a reduction holds an FP32
partial sum), hits register as waiters or add in, a full table evicts its LRU evictable entry
(or the input port waits: back-pressure, optional throttling of GPUs that run ahead), and each
table's timer writes old partial sums home and drops old served loads. The model and its sources
are __init__.py's docstring; the group sync table, which shares the entry point, is
sync_table.py.
"""
import numpy as np
from ...engine.jit import compiled

from ...engine.events import timer_clear, timer_set
from ..hbm import hbm_backed
from ..nvlink import txq_push
from ..link_room import pick_switch_output
from ..packet import (PK_CAIS_DATA, PK_CAIS_LD, PK_CAIS_READ, PK_CAIS_REPLY, PK_CAIS_SYNC,
                      PK_CAIS_WRITE, VC_REQUEST, VC_RESPONSE, header_flits, packet_alloc,
                      packet_flits)
from ..wakeups import unblock_request_port

from .layout import (CAIS_SENT, CAIS_TABLE_FULL, E_FLUSH, E_FREE, E_LD_READY, E_LD_WAIT, E_RED,
                     GRP_MEMBERS, T_ALLOCS, T_BASE, T_CAP, T_CONFLICTS, T_DONE, T_EVICTIONS,
                     T_FULL_STALLS, T_MERGES, T_NFREE, T_NLIVE, T_PEAK, T_READS, T_REPLIES,
                     T_SKEW_MAX, T_SKEW_SUM, T_THROTTLES, T_TIMEOUTS, T_TIMER, T_USED, T_WAITERS,
                     T_WRITES)
from .sync_table import sync_request


@compiled
def cais_switch(st, c, pkt, tick):
    """The head packet of switch input c is a CAIS request (PK_CAIS_LD, PK_CAIS_RED) or a home's
    data for a merged load (PK_CAIS_DATA). Returns CAIS_SENT when it is consumed, CAIS_TABLE_FULL
    when the request channel must wait for a table entry, g to wait for room in a request-channel
    output toward GPU g, or num_gpus + g for a response-channel output toward g."""
    k = st.pk[pkt].kind
    if k == PK_CAIS_DATA:
        return _data_fanout(st, c, pkt, tick)
    if k == PK_CAIS_SYNC:
        return sync_request(st, c, pkt, tick)
    if k == PK_CAIS_LD:
        return _ld_request(st, c, pkt, tick)
    return _red_request(st, c, pkt, tick)


@compiled
def _scan(st, t, addr, nbytes, want_red, m):
    """Look GPU m's request up in table t (its live entries): (matching entry, the free slot to
    use, the LRU evictable entry - each -1 if none -, and whether every live entry already holds
    a request of m: m is level with or ahead of the other GPUs on every line the table holds)."""
    hit = -1
    victim = -1
    best = -1
    level = True
    tab = st.cais_tab[t]
    base = tab[T_BASE]
    for i in range(base, base + tab[T_NLIVE]):
        e = st.cais_live[i]
        en = st.cais_entry[e]
        s = en.state
        if en.addr == addr and en.line == nbytes and (s == E_RED) == want_red:
            hit = e
        if (s == E_RED or s == E_LD_READY) and (victim < 0 or en.use < best):
            victim = e
            best = en.use
        if not (en.mask >> m) & 1:
            level = False
    free = st.cais_free[base + tab[T_NFREE] - 1] if tab[T_NFREE] > 0 else -1
    return hit, free, victim, level


@compiled
def _touch(st, en):
    sy = st.sys[0]
    en.use = sy.cais_clock
    sy.cais_clock += 1


@compiled
def _alloc(st, t, e, pk, home, tick, state):
    """Entry e of table t takes the request in packet pk (the first of its address)."""
    p = st.p[0]
    en = st.cais_entry[e]
    tab = st.cais_tab[t]
    tab[T_NFREE] -= 1                       # e is the free stack's top (_scan)
    en.pos = tab[T_BASE] + tab[T_NLIVE]
    st.cais_live[en.pos] = e
    tab[T_NLIVE] += 1
    en.state = state
    en.addr = pk.addr
    en.home = home
    en.tab = t
    en.group = pk.mm_obj
    en.elem = pk.mm_dtype
    en.line = pk.payload if state == E_RED else pk.value
    en.count = 1
    en.mask = 1 << pk.src
    en.served = 0
    en.first = tick
    en.last = tick
    en.timer_at = tick + p.cais_timeout_ticks
    _touch(st, en)
    for m in range(p.num_gpus):
        st.cais_req[e, m] = -1
    st.cais_req[e, pk.src] = pk.req
    tab[T_USED] += 1
    tab[T_ALLOCS] += 1
    if tab[T_USED] > tab[T_PEAK]:
        tab[T_PEAK] = tab[T_USED]
    arm_timer(st, t, en.timer_at, tick)


@compiled
def _release(st, e, tick):
    """Entry e leaves the table (state set: freed, or a write-back on its way home)."""
    en = st.cais_entry[e]
    t = en.tab
    tab = st.cais_tab[t]
    tab[T_NLIVE] -= 1
    last = st.cais_live[tab[T_BASE] + tab[T_NLIVE]]
    st.cais_live[en.pos] = last
    st.cais_entry[last].pos = en.pos
    if en.state == E_FREE:
        free_slot(st, e)
    st.cais_tab[t, T_USED] -= 1
    if st.cais_tab[t, T_USED] == 0 and st.cais_tab[t, T_TIMER] != 0:
        # an empty table's timer has nothing to time (it would only prolong the run)
        st.cais_tab[t, T_TIMER] = 0
        timer_clear(st, st.p[0].tm_cais + t)
    _wake_table(st, t, tick)


@compiled
def free_slot(st, e):
    tab = st.cais_tab[st.cais_entry[e].tab]
    st.cais_free[tab[T_BASE] + tab[T_NFREE]] = e
    tab[T_NFREE] += 1


@compiled
def _complete(st, en):
    """Every GPU of the group reached the entry: its request skew."""
    tab = st.cais_tab[en.tab]
    skew = en.last - en.first
    tab[T_DONE] += 1
    tab[T_SKEW_SUM] += skew
    if skew > tab[T_SKEW_MAX]:
        tab[T_SKEW_MAX] = skew


@compiled
def _wait_table(st, c, t, tick):
    ch = st.ch[c]
    if ch.cais_wait_tab == 0:
        ch.cais_wait_tab = t + 1
        ch.cais_wait_since = tick
        st.cais_tab[t, T_WAITERS] += 1
        st.cais_tab[t, T_FULL_STALLS] += 1
    return CAIS_TABLE_FULL


@compiled
def _full_table_miss(st, c, t, victim, level, tick):
    """A miss in full table t: True if the request waits at its input port - nothing can be
    evicted, or (system.switch.cais.throttle) the requesting GPU is level with or ahead of every
    entry, so an eviction would only send home a partial sum the others have yet to reach and
    the GPU is held back until an entry completes or times out (CAIS's throttling of GPUs that
    run ahead). A GPU behind on some entry evicts the LRU one: holding it could block, behind it
    on the same input port, the very requests that complete the table's entries."""
    if victim >= 0 and not (level and st.p[0].cais_throttle):
        return False
    if level and victim >= 0 and st.ch[c].cais_wait_tab == 0:
        st.cais_tab[t, T_THROTTLES] += 1
    _wait_table(st, c, t, tick)
    return True


@compiled
def _wake_table(st, t, tick):
    """An entry of table t freed (or changed state): input ports waiting on it try again."""
    if st.cais_tab[t, T_WAITERS] == 0:
        return
    st.cais_tab[t, T_WAITERS] = 0
    for c in range(st.ch.shape[0]):
        ch = st.ch[c]
        if ch.cais_wait_tab == t + 1:
            ch.cais_wait_tab = 0
            unblock_request_port(st, c, tick)


@compiled
def _accumulate(st, e, pk):
    """Functional mode: the entry keeps the contribution's bytes (the sum is formed in rank order
    when it reaches home: see the module docstring)."""
    n = pk.payload
    if st.cais_acc.shape[1] <= 1 or not hbm_backed(st, pk.src_addr, n):
        return
    line = st.p[0].store_payload
    held = st.cais_acc[e].view(np.uint8)
    src = st.hbm_mem[pk.src, pk.src_addr:pk.src_addr + n]
    for i in range(n):
        held[pk.src * line + i] = src[i]


@compiled
def _send_write(st, e, out, tick):
    """Entry e's partial sum goes home on output `out` (it keeps its data, in a write-back slot,
    until the home has it)."""
    p = st.p[0]
    en = st.cais_entry[e]
    q = packet_alloc(st)
    qk = st.pk[q]
    qk.kind = PK_CAIS_WRITE
    qk.req = -1
    qk.src = en.home
    qk.dst = en.home
    qk.addr = en.addr
    qk.src_addr = 0
    qk.payload = en.line
    qk.value = en.count
    qk.flits, qk.npk = packet_flits(st, en.line, p.store_payload)
    qk.mm_entry = e
    qk.mm_dtype = en.elem
    qk.mm_obj = en.group
    qk.ready = tick
    st.cais_tab[en.tab, T_WRITES] += 1
    en.state = E_FLUSH
    txq_push(st, out, q, tick)
    _release(st, e, tick)


@compiled
def _reply(st, e, m, req, dst_addr, out, tick):
    """A merged load's reply to GPU m (its request req, written at its dst_addr)."""
    p = st.p[0]
    en = st.cais_entry[e]
    q = packet_alloc(st)
    qk = st.pk[q]
    qk.kind = PK_CAIS_REPLY
    qk.req = req
    qk.src = en.home
    qk.dst = m
    qk.addr = dst_addr
    qk.src_addr = en.addr
    qk.payload = en.line
    qk.value = 0
    qk.flits, qk.npk = packet_flits(st, en.line, p.store_payload)
    qk.mm_entry = -1
    qk.ready = tick
    st.cais_tab[en.tab, T_REPLIES] += 1
    txq_push(st, out, q, tick)


@compiled
def _make_room(st, t, s, h, free, victim, tick):
    """A miss in a full table t: evict the LRU entry (a partial sum goes home on an output toward
    h). Returns the free slot to use, or a wait code (< -2 never; see cais_switch) as -(code+10)."""
    en = st.cais_entry[victim]
    if en.state == E_RED:
        out = pick_switch_output(st, s, h, VC_REQUEST)
        if out < 0:
            return -(h + 10)
        _send_write(st, victim, out, tick)
    else:
        en.state = E_FREE
        _release(st, victim, tick)
        free = victim
    st.cais_tab[t, T_EVICTIONS] += 1
    return free


@compiled
def _red_request(st, c, pkt, tick):
    p = st.p[0]
    pk = st.pk[pkt]
    s = st.ch[c].switch
    h = pk.dst
    t = s * p.num_gpus + h
    members = st.cais_groups[pk.mm_obj, GRP_MEMBERS]
    hit, free, victim, level = _scan(st, t, pk.addr, pk.payload, True, pk.src)
    if hit >= 0:
        en = st.cais_entry[hit]
        if (en.mask >> pk.src) & 1:
            # a second contribution of this GPU: its tag slot is taken: the entry goes home first
            out = pick_switch_output(st, s, h, VC_REQUEST)
            if out < 0:
                return h
            _send_write(st, hit, out, tick)
            st.cais_tab[t, T_CONFLICTS] += 1
            hit, free, victim, level = _scan(st, t, pk.addr, pk.payload, True, pk.src)
        else:
            last = en.count + 1 == members
            out = -1
            if last:
                out = pick_switch_output(st, s, h, VC_REQUEST)
                if out < 0:
                    return h
            _accumulate(st, hit, pk)
            en.count += 1
            en.mask |= 1 << pk.src
            st.cais_req[hit, pk.src] = pk.req
            en.last = tick
            _touch(st, en)
            st.cais_tab[t, T_MERGES] += 1
            if last:
                _complete(st, en)
                _send_write(st, hit, out, tick)
            return CAIS_SENT
    if st.cais_tab[t, T_USED] >= st.cais_tab[t, T_CAP]:
        if _full_table_miss(st, c, t, victim, level, tick):
            return CAIS_TABLE_FULL
        free = _make_room(st, t, s, h, free, victim, tick)
        if free <= -10:
            return -free - 10
    if free < 0:
        return h    # every write-back slot holds a sum on its way home: wait for one to drain
    _alloc(st, t, free, pk, h, tick, E_RED)
    _accumulate(st, free, pk)
    return CAIS_SENT


@compiled
def _ld_request(st, c, pkt, tick):
    p = st.p[0]
    G = p.num_gpus
    pk = st.pk[pkt]
    s = st.ch[c].switch
    h = pk.dst
    m = pk.src
    t = s * G + h
    members = st.cais_groups[pk.mm_obj, GRP_MEMBERS]
    hit, free, victim, level = _scan(st, t, pk.addr, pk.value, False, m)
    if hit >= 0:
        en = st.cais_entry[hit]
        if en.state == E_LD_READY:
            out = pick_switch_output(st, s, m, VC_RESPONSE)
            if out < 0:
                return G + m
            _reply(st, hit, m, pk.req, pk.src_addr, out, tick)
            st.cais_tab[t, T_MERGES] += 1
            _touch(st, en)
            if not (en.mask >> m) & 1:
                en.mask |= 1 << m
                en.count += 1
                en.last = tick
            en.served |= 1 << m
            if en.count == members:
                _complete(st, en)
                en.state = E_FREE
                _release(st, hit, tick)
            return CAIS_SENT
        if (en.mask >> m) & 1:
            return _wait_table(st, c, t, tick)   # this GPU already waits on the line: after it
        en.mask |= 1 << m
        en.count += 1
        en.last = tick
        st.cais_req[hit, m] = pk.req
        st.cais_dst[hit, m] = pk.src_addr
        st.cais_tab[t, T_MERGES] += 1
        return CAIS_SENT
    out = pick_switch_output(st, s, h, VC_REQUEST)
    if out < 0:
        return h
    if st.cais_tab[t, T_USED] >= st.cais_tab[t, T_CAP]:
        if _full_table_miss(st, c, t, victim, level, tick):
            return CAIS_TABLE_FULL
        free = _make_room(st, t, s, h, free, victim, tick)
        if free <= -10:
            return -free - 10
        out = pick_switch_output(st, s, h, VC_REQUEST)
        if out < 0:
            return h
    if free < 0:
        return h
    _alloc(st, t, free, pk, h, tick, E_LD_WAIT)
    st.cais_dst[free, m] = pk.src_addr
    q = packet_alloc(st)
    qk = st.pk[q]
    qk.kind = PK_CAIS_READ
    qk.req = -1
    qk.src = m
    qk.dst = h
    qk.addr = pk.addr
    qk.src_addr = 0
    qk.payload = 0
    qk.value = pk.value
    qk.npk = 1
    qk.flits = header_flits(st)
    qk.mm_entry = free
    qk.ready = tick
    st.cais_tab[t, T_READS] += 1
    txq_push(st, out, q, tick)
    return CAIS_SENT


@compiled
def _data_fanout(st, c, pkt, tick):
    """The home's data for a Load-Wait entry: reply to every GPU waiting on it (in GPU order, from
    where the last attempt stopped), then the entry is Load-Ready."""
    p = st.p[0]
    G = p.num_gpus
    pk = st.pk[pkt]
    e = pk.mm_entry
    en = st.cais_entry[e]
    s = st.ch[c].switch
    for m in range(G):
        if (en.mask >> m) & 1 and not (en.served >> m) & 1:
            out = pick_switch_output(st, s, m, VC_RESPONSE)
            if out < 0:
                return G + m
            _reply(st, e, m, st.cais_req[e, m], st.cais_dst[e, m], out, tick)
            en.served |= 1 << m
    en.state = E_LD_READY
    _touch(st, en)
    en.timer_at = tick + p.cais_timeout_ticks
    arm_timer(st, en.tab, en.timer_at, tick)
    if en.count == st.cais_groups[en.group, GRP_MEMBERS]:
        _complete(st, en)
        en.state = E_FREE
        _release(st, e, tick)
    else:
        _wake_table(st, en.tab, tick)   # a GPU's second load of the line may go on
    return CAIS_SENT


@compiled
def arm_timer(st, t, at, tick):
    """Table t's timer fires at `at` at the latest."""
    tab = st.cais_tab[t]
    if tab[T_TIMER] == 0 or at < tab[T_TIMER]:
        tab[T_TIMER] = at
        timer_set(st, st.p[0].tm_cais + t, at)


@compiled
def cais_timeout(st, t, tick):
    """EV_CAIS_TIMEOUT: table t's timer. Every entry whose timer expired: a partial sum goes home,
    a Load-Ready entry is dropped (a Load-Wait entry's data is on the way: its timer counts from
    its data's arrival). A partial sum whose output toward home has no room tries again one
    timeout later. The timer is set again for the earliest entry left."""
    p = st.p[0]
    tab = st.cais_tab[t]
    tab[T_TIMER] = 0
    nxt = 0
    base = tab[T_BASE]
    # backwards over the live list: an entry that leaves it is replaced by one already seen
    for i in range(base + tab[T_NLIVE] - 1, base - 1, -1):
        e = st.cais_live[i]
        en = st.cais_entry[e]
        if en.state != E_RED and en.state != E_LD_READY:
            continue
        if en.timer_at <= tick:
            if en.state == E_LD_READY:
                en.state = E_FREE
                _release(st, e, tick)
                tab[T_TIMEOUTS] += 1
                continue
            out = pick_switch_output(st, t // p.num_gpus, en.home, VC_REQUEST)
            if out >= 0:
                _send_write(st, e, out, tick)
                tab[T_TIMEOUTS] += 1
                continue
            en.timer_at = tick + p.cais_timeout_ticks
        if nxt == 0 or en.timer_at < nxt:
            nxt = en.timer_at
    if nxt > 0:
        arm_timer(st, t, nxt, tick)
