"""The AAU's pairing table (system.gpu.hub.moe.aau.allocation: paired; aau.py is the block).

A design beyond MoE-Hub (arXiv 2605.05888), for training. A layer's backward sends one gradient
row dO per forward row X to the same expert, and the expert's backward GEMMs need dO at the row
position X holds. With the published bump allocator (allocation: bump) the AAU puts the gradient
rows in *arrival* order, so the expert side copies every dO row to its forward position
(workloads/moehub_backward.py: moehub_bwd_place) and cannot start a forward tile's GEMMs before
that copy. With allocation: paired:

- forward: when a forward row completes, the AAU writes its completion record (as always) and,
  beside it, one pairing-table entry: table[source GPU][home] = the row's slot + 1 (home: the
  row id the producer named, send_to_expert's home / st.rowsp's row, t * k + j for a layer). The
  table lives in device memory, direct-indexed (`pair_homes` ids per source GPU, `pair_entry_bytes`
  each): a posted HBM write per forward row, nobody waits for it;
- backward: the windows of experts pair_base + e (the gradient windows; the scheme places them on
  expert e's GPU, in the same order) are *paired*: the first bytes of a gradient row make the AAU
  read table[source][home] (an HBM read the row's writes wait for, as a row-table refill) and give
  the row that slot of the gradient window - its forward row's position - instead of the next
  free one. A row whose entry is 0 (no forward row named that home) cannot be placed: it waits,
  and the stuck-run report names it (aau.py record_table_full's neighbour, `unpaired_rows`);
- the DAM (dam.py) knows each paired tile's rows from the forward window's bump pointer (tile k of
  a window of n rows holds min(tile_rows, n - k tile_rows)), so a forward tile's gradients are
  ready as soon as its rows landed, in any order, and claim_buffer hands out any ready tile.

system.gpu.hub.moe.aau.pair_table says where the table lives: memory (above) or on_chip (hub
SRAM of the same size, counted in aau.sram_bytes: no HBM access, the lookup rides the allocation
pipeline as an on-chip row-table entry does).

What it costs (memory): HBM for the table (num_gpus x pair_homes x pair_entry_bytes per GPU: 64 KB
for 8 GPUs x 2,048 pairs at 4 B), one posted HBM write per forward row and one HBM read on each
gradient row's path (latency the gradient row's packets wait for); on chip only a ready bit per
tile in the DAM (dam.py, area.py). Assumption: the AAU issues these table accesses like its row-
table spills and refills (one per row, pipelined; no cache of the table on chip).
"""
from ...engine.jit import compiled

from ..hbm import hbm_access


@compiled
def paired_expert(st, expert):
    """The expert's window is a gradient window whose rows take their forward rows' slots."""
    p = st.p[0]
    return p.aau_paired != 0 and expert >= p.pair_base


@compiled
def _entry(st, src, home):
    """Index of (source GPU, home) in a GPU's table, -1 if home is outside the table."""
    p = st.p[0]
    if home < 0 or home >= p.pair_homes:
        return -1
    return src * p.pair_homes + home


@compiled
def pair_record(st, g, src, expert, index, home, written):
    """A forward row of a paired expert completed (its data and record written at `written`):
    its table entry names its slot; a posted HBM write."""
    p = st.p[0]
    if p.aau_paired == 0 or expert >= p.pair_base:
        return
    e = _entry(st, src, home)
    if e < 0:
        st.gpu[g].aau_pair_unindexed += 1
        return
    st.aau_pair[g, e] = index + 1
    if p.pair_on_chip == 0:
        hbm_access(st, g, p.pair_addr + e * p.pair_entry_bytes, p.pair_entry_bytes, written, True)
    st.gpu[g].aau_pair_writes += 1


@compiled
def pair_slot(st, g, src, home):
    """The forward slot of the row (source, home), or -1 if no forward row named it."""
    e = _entry(st, src, home)
    if e < 0:
        return -1
    return st.aau_pair[g, e] - 1


@compiled
def pair_read(st, g, src, home, t):
    """The AAU reads the entry of (source, home) at t; returns when the slot is known."""
    p = st.p[0]
    gp = st.gpu[g]
    gp.aau_pair_reads += 1
    if p.pair_on_chip:
        return t        # an SRAM lookup in the allocation pipeline (aau_alloc_ticks)
    done = hbm_access(st, g, p.pair_addr + _entry(st, src, home) * p.pair_entry_bytes,
                      p.pair_entry_bytes, t, False)
    gp.aau_pair_wait += done - t
    return done
