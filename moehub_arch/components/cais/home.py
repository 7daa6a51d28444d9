"""CAIS at the home GPU: what the merge unit's reads, merged writes and releases do there.

A merge unit's read is answered from HBM up the link it came by (as an NVLS reduction read,
nvls.py); a merged partial sum is added into memory (FP32 over the contributors in rank order,
rounded once to the element type); a group sync release writes the group's value into the
member's flag. The hub's receive path calls these. The model is __init__.py's docstring.
"""
import numpy as np
from ...engine.jit import compiled

from ..elements import load_f32, store_f32
from ..hbm import hbm_backed, write_word
from ..nvls import answer_read, queue_read_data
from ..packet import PK_CAIS_DATA

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
    queue_read_data(st, g, pkt)   # the hub's one read-data FIFO (nvls.nvls_send_data sends it)


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
