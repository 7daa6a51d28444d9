"""CAIS in the switch: the group sync table (`sync.cais`).

Merging-aware thread-block coordination: every switch keeps a table of the groups in flight,
keyed by the flag's address; it counts the members' arrivals and, when all have arrived, sends
each a release that writes the group's value into its flag. A full table makes the arrival wait
at its input port. The model and its sources are __init__.py's docstring.
"""
from ...engine.jit import compiled

from ..nvlink import txq_push
from ..link_room import pick_switch_output
from ..packet import PK_CAIS_GO, VC_RESPONSE, header_flits, packet_alloc
from ..wakeups import unblock_request_port

from .layout import (CAIS_SENT, CAIS_TABLE_FULL, GRP_MEMBERS, S_FREE, S_WAIT, SY_ARRIVALS,
                     SY_FULL_STALLS, SY_PEAK, SY_RELEASES, SY_USED, SY_WAIT_MAX, SY_WAIT_SUM,
                     SY_WAITERS)


@compiled
def sync_request(st, c, pkt, tick):
    """A thread block's sync.cais arrival (PK_CAIS_SYNC) at switch input c: count it in the
    switch's group sync table under its flag's address; the last member's arrival releases the
    group - a PK_CAIS_GO to every member, in GPU order from where an attempt stopped for want of
    output room - and frees the entry."""
    p = st.p[0]
    G = p.num_gpus
    pk = st.pk[pkt]
    s = st.ch[c].switch
    m = pk.src
    E = p.cais_sync_entries
    hit = -1
    free = -1
    for e in range(s * E, (s + 1) * E):
        y = st.cais_sync[e]
        if y.state == S_WAIT and y.addr == pk.addr:
            hit = e
            break
        if y.state == S_FREE and free < 0:
            free = e
    tab = st.cais_sync_tab[s]
    if hit < 0:
        if free < 0:
            return _wait_sync(st, c, s, tick)
        hit = free
        y = st.cais_sync[hit]
        y.state = S_WAIT
        y.addr = pk.addr
        y.group = pk.mm_obj
        y.value = pk.value
        y.count = 0
        y.mask = 0
        y.served = 0
        y.first = tick
        tab[SY_USED] += 1
        if tab[SY_USED] > tab[SY_PEAK]:
            tab[SY_PEAK] = tab[SY_USED]
    y = st.cais_sync[hit]
    members = st.cais_groups[y.group, GRP_MEMBERS]
    if not (y.mask >> m) & 1:
        y.mask |= 1 << m
        y.count += 1
        y.last = tick
        st.cais_sync_req[hit, m] = pk.req
        tab[SY_ARRIVALS] += 1
        if y.count == members:
            wait = y.last - y.first
            tab[SY_RELEASES] += 1
            tab[SY_WAIT_SUM] += wait
            if wait > tab[SY_WAIT_MAX]:
                tab[SY_WAIT_MAX] = wait
    elif y.count < members:
        # this GPU's next sync on the flag before the group's release: after the release
        return _wait_sync(st, c, s, tick)
    if y.count < members:
        return CAIS_SENT
    for mm in range(G):
        if (y.mask >> mm) & 1 and not (y.served >> mm) & 1:
            out = pick_switch_output(st, s, mm, VC_RESPONSE)
            if out < 0:
                return G + mm
            _release_member(st, hit, mm, out, tick)
            y.served |= 1 << mm
    y.state = S_FREE
    tab[SY_USED] -= 1
    _wake_sync(st, s, tick)
    return CAIS_SENT


@compiled
def _release_member(st, e, m, out, tick):
    """The group's release to member m: a header-only packet that writes the value into m's flag
    and completes m's sync.cais."""
    y = st.cais_sync[e]
    q = packet_alloc(st)
    qk = st.pk[q]
    qk.kind = PK_CAIS_GO
    qk.req = st.cais_sync_req[e, m]
    qk.src = m
    qk.dst = m
    qk.addr = y.addr
    qk.src_addr = 0
    qk.payload = 0
    qk.value = y.value
    qk.npk = 1
    qk.flits = header_flits(st)
    qk.mm_entry = -1
    qk.ready = tick
    txq_push(st, out, q, tick)


@compiled
def _wait_sync(st, c, s, tick):
    ch = st.ch[c]
    if ch.cais_wait_sync == 0:
        ch.cais_wait_sync = s + 1
        ch.cais_wait_since = tick
        st.cais_sync_tab[s, SY_WAITERS] += 1
        st.cais_sync_tab[s, SY_FULL_STALLS] += 1
    return CAIS_TABLE_FULL


@compiled
def _wake_sync(st, s, tick):
    """A group of switch s was released: input ports waiting on its sync table try again."""
    if st.cais_sync_tab[s, SY_WAITERS] == 0:
        return
    st.cais_sync_tab[s, SY_WAITERS] = 0
    for c in range(st.ch.shape[0]):
        ch = st.ch[c]
        if ch.cais_wait_sync == s + 1:
            ch.cais_wait_sync = 0
            unblock_request_port(st, c, tick)
