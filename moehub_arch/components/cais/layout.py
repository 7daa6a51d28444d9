"""The CAIS merge unit's layout: entry states, the columns of its tables, its event kind.

Shared by the switch's merge table (merge_table.py), its group sync table (sync_table.py), the
home GPU's handlers (home.py), the GPU side (gpu.py) and the block's declaration (__init__.py);
the model is __init__.py's docstring.
"""
from ...engine.jit import compiled

from ...isa.encoding import DT_BF16, DT_NONE


EV_CAIS_TIMEOUT = 11   # a0 = merge table: its timer (a component timer per table) expired

CAIS_SENT = -1         # cais_switch: the input packet is consumed (as nvls.NVLS_SENT)
CAIS_TABLE_FULL = -2   # cais_switch: no entry can be freed now: the request channel waits

E_FREE, E_RED, E_LD_WAIT, E_LD_READY, E_FLUSH = range(5)   # entry states
GRP_BASE, GRP_BYTES, GRP_MASK, GRP_MEMBERS = range(4)      # columns of State.cais_groups
# columns of State.cais_tab, one row per table (switch x home GPU)
(T_BASE, T_SLOTS, T_CAP, T_USED, T_PEAK, T_ALLOCS, T_MERGES, T_EVICTIONS, T_TIMEOUTS,
 T_CONFLICTS, T_READS, T_WRITES, T_REPLIES, T_DONE, T_SKEW_SUM, T_SKEW_MAX, T_WAITERS,
 T_FULL_STALLS, T_TIMER, T_NLIVE, T_NFREE, T_THROTTLES) = range(22)
TAB_COLUMNS = 22
S_FREE, S_WAIT = range(2)   # group sync table entry states
# columns of State.cais_sync_tab, one row per switch (its group sync table)
(SY_USED, SY_PEAK, SY_ARRIVALS, SY_RELEASES, SY_WAIT_SUM, SY_WAIT_MAX, SY_WAITERS,
 SY_FULL_STALLS) = range(8)
SYNC_COLUMNS = 8


@compiled
def cais_element_bytes(dtype):
    if dtype == DT_NONE:
        return 1
    return 2 if dtype == DT_BF16 else 4
