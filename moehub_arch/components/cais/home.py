"""CAIS at the home GPU: what the merge unit's reads, merged writes and releases do there.

A merge unit's read is answered from HBM up the link it came by (as an NVLS reduction read,
nvls.py); a merged partial sum is added into memory (FP32 over the contributors in rank order,
rounded once to the element type); a group sync release writes the group's value into the
member's flag. `receive_cais` is the GPU's receive of those packets: the run loop dispatches
their kinds to it (the block declares them, dispatch/loop.py). It completes requests in the hub
(hub.py), which imports nothing of this module. The model is __init__.py's docstring.
"""
import numpy as np
from ...engine.jit import compiled

from ..elements import load_f32, store_f32
from ..hbm import hbm_backed, write_word
from ..read_data import answer_read, queue_read_data
from ..hbm import move_bytes
from ..hub_receive import complete_request, owe_acks
from ..l2 import link_write
from ..nvlink import channel_count_arrival, credit_return_vc
from ..packet import PK_CAIS_DATA, PK_CAIS_GO, PK_CAIS_READ, PK_CAIS_REPLY, packet_free, packet_vc
from ..trace import CAT_HUB, TR_HUB_RX, trace_event
from ..waiters import notify_stores

from .layout import E_FREE, cais_element_bytes
from .merge_table import free_slot


@compiled
def cais_read_arrived(st, g, c, pkt, tick):
    """A merge unit's read (PK_CAIS_READ) reached home g on down-channel c at `tick`: read the
    line from HBM and queue it to go back up the same link (response channel). The read keeps
    its receive-buffer space until then (as an NVLS reduction read, nvls.py)."""
    gp = st.gpu[g]
    gp.cais_reads_rx += 1
    answer_read(st, g, c, pkt, PK_CAIS_DATA, tick)
    queue_read_data(st, g, pkt)   # the hub's one read-data FIFO (read_data.py)


@compiled
def cais_write_arrived(st, g, pkt):
    """A partial sum (PK_CAIS_WRITE) reached home g: add it into memory (FP32, rounded once to
    the element type) and free its write-back slot. Returns the entry (its mask and cais_req name
    the contributors the home answers)."""
    pk = st.pk[pkt]
    e = pk.mm_entry
    en = st.cais_entry[e]
    gp = st.gpu[g]
    gp.cais_writes_rx += 1
    gp.cais_contribs_rx += en.count
    n = en.line
    if st.cais_acc.shape[1] > 1 and hbm_backed(st, en.addr, n):
        line = st.p[0].store_payload
        held = st.cais_acc[e].view(np.uint8)
        dst = st.hbm_mem[g, en.addr:en.addr + n]
        dt = en.elem
        for i in range(n // cais_element_bytes(dt)):
            acc = np.float32(0.0)
            first = True
            for m in range(st.p[0].num_gpus):
                if (en.mask >> m) & 1:
                    v = load_f32(held[m * line:(m + 1) * line], i, dt)
                    if first:
                        acc = v
                        first = False
                    else:
                        acc = np.float32(acc + v)
            store_f32(dst, i, dt, np.float32(load_f32(dst, i, dt) + acc))
    en.state = E_FREE
    free_slot(st, e)
    return e


@compiled
def cais_go_arrived(st, g, pkt):
    """A group sync release (PK_CAIS_GO) reached member g: its flag takes the group's value."""
    pk = st.pk[pkt]
    st.gpu[g].cais_go_rx += 1
    if hbm_backed(st, pk.addr, 8):
        write_word(st, g, pk.addr, pk.value)


@compiled
def receive_cais(st, g, c, pkt, tick):
    """A packet of the CAIS merge unit (PK_CAIS_READ, PK_CAIS_REPLY, PK_CAIS_WRITE, PK_CAIS_GO)
    reached GPU g over down-channel c (the run loop dispatches these kinds here,
    dispatch/loop.py), processed after the hub's receive latency: a read of this home's memory
    is served (its packet returns as the data); a merged load's reply is written and counts
    toward its ld.cais; a partial sum is added into memory and every contribution it carries is
    answered (one write response each, once the sum is visible); a group sync release writes
    the flag and completes the sync.cais."""
    channel_count_arrival(st, c, pkt)
    t = tick + st.p[0].hub_rx_latency_ticks
    pk = st.pk[pkt]
    kind = pk.kind
    trace_event(st, CAT_HUB, TR_HUB_RX, g, kind, pk.src, tick)
    if kind == PK_CAIS_READ:
        cais_read_arrived(st, g, c, pkt, t)
        return
    if kind == PK_CAIS_GO:
        # the group sync table's release: the flag takes its value; the sync.cais completes
        free_at, visible = link_write(st, g, pk.addr, 8, t)
        cais_go_arrived(st, g, pkt)
        notify_stores(st, g, pk.addr, 8, visible)
        rq = st.req[pk.req]
        rq.pkts_arrived += 1
        if rq.pkts_arrived == rq.pkts_total:
            complete_request(st, pk.req, visible)
        credit_return_vc(st, c, pk.flits, free_at + st.ch[c].latency, packet_vc(st, pkt))
        packet_free(st, pkt)
        return
    free_at, visible = link_write(st, g, pk.addr, pk.payload, t)
    if kind == PK_CAIS_REPLY:
        r = pk.req
        rq = st.req[r]
        st.gpu[g].cais_replies_rx += 1
        move_bytes(st, pk.src, pk.src_addr, g, pk.addr, pk.payload, rq.slot)
        notify_stores(st, g, pk.addr, pk.payload, visible)
        rq.pkts_arrived += 1
        if rq.pkts_arrived == rq.pkts_total:
            complete_request(st, r, visible)
    else:  # PK_CAIS_WRITE
        e = cais_write_arrived(st, g, pkt)
        notify_stores(st, g, pk.addr, pk.payload, visible)
        mask = st.cais_entry[e].mask
        for m in range(st.p[0].num_gpus):
            if (mask >> m) & 1:
                r = st.cais_req[e, m]
                st.req[r].pkts_arrived += 1
                owe_acks(st, g, r, 1, visible)
    credit_return_vc(st, c, pk.flits, free_at + st.ch[c].latency, packet_vc(st, pkt))
    packet_free(st, pkt)
