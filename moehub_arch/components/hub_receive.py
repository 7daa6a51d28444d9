"""GPU hub, the receive side of the base protocol: puts, stores, gets, atomics and their responses
arriving at a GPU (hub.py is the block, its model and its send side).

A packet is processed `rx_latency` after arrival: data is written through the memory system
(l2.link_write), stores and atomics are performed at memory, a get's read requests start its
response stream, write responses are owed (owe_acks: one per write packet, or one per request)
and sent by the hub's response path; a requester retires its request when its last response is
in (complete_request, which the extensions' receive handlers call too). Link credits go back when
the memory system has absorbed the packet.
"""
from ..engine.jit import compiled, inline

from ..engine.state import TB_WAIT_FENCE, WAIT_FENCE, WAIT_REMOTE
from .counted_write import counter_add
from .dysharp_ready import dysharp_ready_word
from .hbm import hbm_access, move_bytes, read_word, update_bytes_bf16, write_word
from .hub import (REQ_ATOM, RESP_ACK, RESP_ATOM, RESP_GET_DATA, atomic_ticks, hub_respond,
                  wake_hub_waiters)
from .l2 import link_write
from .nic import nic_in_order, nic_placed, rdma_message
from .nvlink import channel_count_arrival, credit_return_vc
from .packet import (PK_ATOM_REQ, PK_ATOM_RESP, PK_GET_REQ, PK_GET_RESP, PK_PUT, PK_STORE,
                     packet_free, packet_vc)
from .trace import CAT_HUB, TR_HUB_RX, trace_event
from .waiters import notify_stores
from .wakeups import tb_resume


@compiled
def complete_request(st, r, tick):
    """The requester's hub saw the last response of request r: retire it and wake its TB."""
    rq = st.req[r]
    g = rq.src_gpu
    slot = rq.slot
    tb = st.tb[slot]
    rq.sq_held = 0    # its completion frees its send-queue slot (nic.py), if it held one
    if rq.posted:
        st.gpu[g].posted_stores -= 1
    else:
        st.gpu[g].req_table_used -= 1
    if rq.kind == REQ_ATOM:
        st.regs[slot, rq.ret_reg] = rq.value
        tb_resume(st, slot, tick, WAIT_REMOTE)
    else:
        tb.outstanding -= 1
        if tb.outstanding == 0 and tb.state == TB_WAIT_FENCE:
            tb_resume(st, slot, tick, WAIT_FENCE)
    gp = st.gpu[g]
    st.free_reqs[g, gp.free_top] = r
    gp.free_top += 1
    wake_hub_waiters(st, g, tick)


@inline
def hub_receive(st, g, c, pkt, tick):
    """A packet reached GPU g over down-channel c."""
    channel_count_arrival(st, c, pkt)
    p = st.p[0]
    gp = st.gpu[g]
    pk = st.pk[pkt]
    t = tick + p.hub_rx_latency_ticks
    kind = pk.kind
    r = pk.req
    rq = st.req[r]
    n = pk.payload
    addr = pk.addr
    free_at = t  # when the packet leaves the receive buffer (credits go back)
    gp.hub_rx_packets += pk.npk
    gp.hub_rx_payload += n
    trace_event(st, CAT_HUB, TR_HUB_RX, g, kind, pk.src, tick)
    if kind == PK_PUT or kind == PK_GET_RESP:
        if gp.hub_rx_first < 0:
            gp.hub_rx_first = tick
        gp.hub_rx_last = tick
        free_at, visible = link_write(st, g, addr, n, t)
        if kind == PK_PUT and pk.value == 1:
            # put.add.bf16: the memory adds the payload into what it holds (T3's near-memory
            # op-and-store; timed as the write it is on the channels)
            update_bytes_bf16(st, pk.src, pk.src_addr, g, addr, n, rq.slot)
        else:
            move_bytes(st, pk.src, pk.src_addr, g, addr, n, rq.slot)
        notify_stores(st, g, addr, n, visible)
        if kind == PK_PUT and pk.cw_counter >= 0:
            # a counted put: the landed bytes add to its counter (counted_write.py)
            c_at = counter_add(st, g, pk.cw_counter, n, pk.npk, visible)
            notify_stores(st, g, pk.cw_counter, 8, c_at)
        rq.pkts_arrived += 1
        if kind == PK_PUT:
            nic_placed(st, g, pk.src, visible)   # later RDMA flags and atomics follow it
            if p.write_resp_per_packet and not rdma_message(st, pk.src, g):
                owe_acks(st, g, r, pk.npk, visible)
            elif rq.pkts_arrived == rq.pkts_total:
                owe_acks(st, g, r, 1, visible)
        elif rq.pkts_arrived == rq.pkts_total:
            complete_request(st, r, visible)
    elif kind == PK_STORE:
        free_at, visible = link_write(st, g, addr, 8, t)
        visible = nic_in_order(st, g, pk.src, visible)   # behind its queue pair's writes
        # the word's value before the store: only a ready queue asks (no read on other runs)
        old = read_word(st, g, addr) if p.dy_ready_queue else 0
        write_word(st, g, addr, pk.value)
        notify_stores(st, g, addr, 8, visible)
        if p.dy_ready_queue:
            # a token's ready word: the tracker may append the token to its ready queue
            dysharp_ready_word(st, g, addr, old, visible)
        rq.pkts_arrived += 1
        owe_acks(st, g, r, 1, visible)
    elif kind == PK_GET_REQ:
        # every read request is answered by its own data (acks_arrived counts the requests
        # here: a get has no write responses); a get with read requests to answer has one entry
        # in the response FIFO (_send_response)
        rq.acks_arrived += pk.npk
        if not rq.resp_queued:
            rq.resp_queued = 1
            hub_respond(st, g, r, RESP_GET_DATA, t)
    elif kind == PK_ATOM_REQ:
        # the read-modify-write occupies the receive buffer until it is done
        free_at = hbm_access(st, g, addr, 8, t, True) + atomic_ticks(st)
        gp.hbm_atomics += 1
        old = read_word(st, g, addr)
        write_word(st, g, addr, old + pk.value)
        rq.value = old
        done = nic_in_order(st, g, pk.src, free_at)      # behind its queue pair's writes
        notify_stores(st, g, addr, 8, done)
        hub_respond(st, g, r, RESP_ATOM, done)
    elif kind == PK_ATOM_RESP:
        complete_request(st, r, t)
    else:  # PK_ACK: write responses (req < 0: link-level responses to MoE-Hub packets)
        gp.hub_acks += pk.npk
        if r >= 0:
            rq.acks_arrived += pk.npk
            if rq.acks_arrived == rq.acks_total:
                complete_request(st, r, t)
    credit_return_vc(st, c, pk.flits, free_at + st.ch[c].latency, packet_vc(st, pkt))
    packet_free(st, pkt)


@compiled
def owe_acks(st, g, r, n, visible):
    """Serving hub g owes `n` more write responses for request r, for writes visible at
    `visible`. A request has at most one entry in the response FIFO: it is queued when responses
    start being owed and leaves when the packetizer has sent them all."""
    rq = st.req[r]
    if visible > rq.acks_ready:
        rq.acks_ready = visible
    rq.acks_due += n
    if rq.acks_due == n:
        hub_respond(st, g, r, RESP_ACK, visible)
