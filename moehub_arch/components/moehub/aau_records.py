"""The AAU's completion records (MoE-Hub, arXiv 2605.05888: the consumer side tells a tile's
thread blocks which rows landed where): where a window slot and its record lie in HBM, writing a
complete row's record {source GPU, home, aux, bytes} after its data, and what follows a row's
last byte - the DAM's counter, the producer's completion, a forwarded row's origin.

Split from aau.py (the block: receive, staging and retry, allocation), which imports it; the
row-table helpers a row-sparse row's completion needs are here too.
"""
from ...engine.jit import compiled
from ...engine.state import TB_WAIT_FENCE, WAIT_FENCE
from ..hbm import write_word
from ..l2 import link_write
from ..wakeups import tb_resume
from .dam import dam_row_landed
from .forward import forward_landed
from .pairing import pair_record
from .rat import window_index, window_slot
from .rowtable import RS_ALLOC, RS_RID, RS_ROW, RS_SIZE, open_row_unlink


@compiled
def slot_address(st, g, expert, index):
    """HBM address of window slot `index` (a monotonic row index) of a local expert."""
    p = st.p[0]
    return p.win_addr + window_slot(p, st.moe_place[expert, 1], index) * p.row_bytes


@compiled
def record_address(st, g, expert, index):
    p = st.p[0]
    return p.rec_addr + window_slot(p, st.moe_place[expert, 1], index) * p.record_bytes


@compiled
def row_complete(st, g, src, row, written):
    """The row's last bytes are written: record, DAM counter, producer completion (a forwarded
    row's record names its origin GPU, where its output goes home; its origin descriptor and
    forwarding-buffer slot free: forward.py)."""
    origin = src if row.fwd_from < 0 else row.fwd_from // st.p[0].num_gpus
    visible = write_record(st, g, origin, row.expert, row.alloc, row.home, row.aux,
                            row.row_size if row.rowsp else row.length, written)
    row.done = 1
    dam_row_landed(st, g, row.expert, row.alloc, visible)
    store_landed(st, row.slot, visible)
    if row.fwd_from >= 0:
        forward_landed(st, row.fwd_from, row.fwd_idx, visible)


@compiled
def write_record(st, g, src, expert, index, home, aux, nbytes, written):
    """Write a complete row's record {source GPU, home, aux, bytes} (after its data, at
    `written`) into slot `index`'s record; returns when it is visible."""
    p = st.p[0]
    rec = record_address(st, g, expert, index)
    _, visible = link_write(st, g, rec, p.record_bytes, written)
    pair_record(st, g, src, expert, index, home, written)
    if rec + 32 <= st.hbm_mem.shape[1]:
        write_word(st, g, rec, src)
        write_word(st, g, rec + 8, home)
        write_word(st, g, rec + 16, aux)
        write_word(st, g, rec + 24, nbytes)
    st.gpu[g].aau_records_written += 1
    return visible


@compiled
def row_tracked(row):
    """A row-sparse store of a row that several stores fill (it joins a row, or leaves part of
    its row to later stores): the row table tracks the row (rowtable.py)."""
    return row.rowsp != 0 and (row.joins != 0 or row.length < row.row_size)


@compiled
def row_entry(st, g, row):
    """The row-table entry (State.aau_rows index) of an allocated row: its window slot's."""
    return window_index(st, g, row.expert) * st.p[0].window_rows + row.alloc % st.p[0].window_rows


@compiled
def tracked_row_complete(st, g, src, s, e, expert, written):
    """Every byte of the half-landed row of entry e is written: its record, the DAM's counter;
    the entry leaves the table's list (its stores' producers were told as each landed)."""
    r = st.aau_rows[e]
    index = r[RS_ALLOC]
    visible = write_record(st, g, src, expert, index, r[RS_ROW], r[RS_RID], r[RS_SIZE], written)
    open_row_unlink(st, s, e)
    dam_row_landed(st, g, expert, index, visible)


@compiled
def store_landed(st, slot, visible):
    """A row (or a later st.rowsp store of one) has landed: its TB has one operation less
    outstanding (a fence waiting on it may go on)."""
    tb = st.tb[slot]
    tb.outstanding -= 1
    if tb.outstanding == 0 and tb.state == TB_WAIT_FENCE:
        tb_resume(st, slot, visible, WAIT_FENCE)
