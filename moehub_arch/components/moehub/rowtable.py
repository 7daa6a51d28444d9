"""The AAU row table's entries of half-landed row-sparse rows (MoE-Hub, arXiv 2605.05888).

A row that several st.rowsp stores fill is tracked by the receiver's AAU row table: the entry
mapping (allocation id, row) to the row's window slot also counts the row's bytes that landed
and the bytes its stores announced, so the row's completion record is written when the landed
bytes reach the registered size - and no store keeps its RPM ring entry at the sender beyond its
own bytes' landing (the ring then limits the stores in flight, not the rows open at once).

State.aau_rows (declared by the AAU block, components/moehub/aau.py) has one entry per window
slot, the slot the row got when its first bytes arrived; the entries of one stream's half-landed
rows form a doubly linked list from stream.open_head, searched by (id, row) when a later store
of a row arrives (at the sender, to check the row's stores against its size; at the receiver,
to find the row's slot). The list holds the rows open at once (in practice one per producer),
so the search is short. Where the entry sits (on chip or spilled to device memory) is the row
table's business (aau.py: RS_RAT); this module only keeps the entries. Whole-row stores (the
moehub dispatch's) complete with their one store and never enter the list.
"""
from ...engine.jit import compiled

# State.aau_rows[slot, field]
RS_RID = 0          # allocation id (st.rowsp `id`)
RS_ROW = 1          # row id (st.rowsp `row`)
RS_SIZE = 2         # the registered row size
RS_STORED = 3       # bytes of the row's stores accepted so far (the sender's checks)
RS_LANDED = 4       # bytes of the row written so far
RS_RAT = 5          # where its row-table entry is (aau.RAT_*)
RS_ALLOC = 6        # the window slot (monotonic index; -1: the entry is free)
RS_PREV = 7         # the stream's list of half-landed rows
RS_NEXT = 8
RS_FIELDS = 9


@compiled
def open_row_slot(st, s, rid, rowid):
    """Entry (State.aau_rows index) of stream s's half-landed row `rowid` of allocation `rid`,
    or -1."""
    k = st.stream[s].open_head
    while k >= 0:
        if st.aau_rows[k, RS_RID] == rid and st.aau_rows[k, RS_ROW] == rowid:
            return k
        k = st.aau_rows[k, RS_NEXT]
    return -1


@compiled
def open_row_link(st, s, k, rid, rowid, size, stored, alloc):
    """Stream s's row (rid, rowid) got window slot `alloc` (entry k) with part of its bytes to
    come: start tracking it."""
    e = st.aau_rows[k]
    e[RS_RID] = rid
    e[RS_ROW] = rowid
    e[RS_SIZE] = size
    e[RS_STORED] = stored
    e[RS_LANDED] = 0
    e[RS_RAT] = 0
    e[RS_ALLOC] = alloc
    sr = st.stream[s]
    e[RS_PREV] = -1
    e[RS_NEXT] = sr.open_head
    if sr.open_head >= 0:
        st.aau_rows[sr.open_head, RS_PREV] = k
    sr.open_head = k


@compiled
def open_row_unlink(st, s, k):
    """The row of entry k is complete: it leaves stream s's list and frees the entry."""
    e = st.aau_rows[k]
    prev = e[RS_PREV]
    nxt = e[RS_NEXT]
    if prev >= 0:
        st.aau_rows[prev, RS_NEXT] = nxt
    else:
        st.stream[s].open_head = nxt
    if nxt >= 0:
        st.aau_rows[nxt, RS_PREV] = prev
    e[RS_ALLOC] = -1
    e[RS_PREV] = -1
    e[RS_NEXT] = -1
