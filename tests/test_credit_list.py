"""The credit-return list's head and tail ticks kept in the channel record (components/nvlink.py:
ch.cr_next, ch.cr_last), so a transmitter with nothing matured and an in-order return do not read
State.credit_ret. An exact refactor (the golden stats cover it as a whole); here, after every
return filed and every reclaim of a run (pure-Python engine), the two ticks are checked against the
list itself, and the list is checked to stay in tick order with returns of one tick in the order
they were filed. Configs: a MoE-Hub dispatch and combine, the NVLS all-reduce (the switch's
engine returns credits for its reads), small. In the MoE-Hub run some returns come out of order
(a cut-through switch input frees a packet's space once its tail is in, a GPU once the packet is
written) and take the walk back. Each patched run has the compiled engine's stats."""
import pytest

from conftest import run_patched, simulate, stats_json
from test_nvls import tiny

DRIVER = """
import json, sys
from moehub_arch.components import hub_receive, nvlink, nvls, switch
from moehub_arch.components.moehub import aau
file_return, reclaim = nvlink.credit_return_vc, nvlink._reclaim_credits
calls = [0, 0, 0, 0]  # returns filed, of them out of order (not at the tail), reclaims, that read
filed = {}            # channel -> the returns filed so far, in filing order, per tick


def check_list(st, c):
    ch = st.ch[c]
    cap = st.credit_ret.shape[1]
    ticks = [int(st.credit_ret[c, (int(ch.cr_head) + i) % cap, 0]) for i in range(int(ch.cr_count))]
    assert ticks == sorted(ticks), ("credit list out of order", c, ticks)
    if ticks:
        assert int(ch.cr_next) == ticks[0], ("cr_next", c, int(ch.cr_next), ticks)
        assert int(ch.cr_last) == ticks[-1], ("cr_last", c, int(ch.cr_last), ticks)


def checked_return(st, c, flits, tick, vc):
    ch = st.ch[c]
    out_of_order = int(ch.cr_count) > 0 and int(ch.cr_last) > tick
    file_return(st, c, flits, tick, vc)
    check_list(st, c)
    # a return goes after every return of the same tick filed before it
    cap = st.credit_ret.shape[1]
    rows = [(int(st.credit_ret[c, (int(ch.cr_head) + i) % cap, 0]),
             int(st.credit_ret[c, (int(ch.cr_head) + i) % cap, 1]),
             int(st.credit_ret[c, (int(ch.cr_head) + i) % cap, 2])) for i in range(int(ch.cr_count))]
    last_of_tick = max(i for i, r in enumerate(rows) if r[0] == tick)
    assert rows[last_of_tick] == (tick, flits, vc), ("same-tick order", c, rows)
    calls[0] += 1
    calls[1] += out_of_order


def checked_reclaim(st, c, tick):
    ch = st.ch[c]
    reads = int(ch.cr_count) > 0 and int(ch.cr_next) <= tick
    before = int(ch.cr_count)
    reclaim(st, c, tick)
    check_list(st, c)
    cap = st.credit_ret.shape[1]
    if int(ch.cr_count):   # what is left has not matured
        assert int(st.credit_ret[c, int(ch.cr_head), 0]) > tick
    if not reads:
        assert int(ch.cr_count) == before
    calls[2] += 1
    calls[3] += reads


for module in (nvlink, switch, hub_receive, nvls, aau):
    if hasattr(module, "credit_return_vc"):
        module.credit_return_vc = checked_return
nvlink._reclaim_credits = checked_reclaim
"""


@pytest.mark.parametrize("config, sets, out_of_order", [
    ("hub/dispatch_combine_multi.yaml", [], True),
    ("ubench/allreduce_nvls.yaml", list(tiny()), False),
])
def test_credit_list_head_and_tail_ticks_match_the_list(config, sets, out_of_order):
    out = run_patched(DRIVER, config, *sets)
    filed, unordered, reclaims, reads = out["calls"]
    assert filed > 0 and reclaims > reads > 0     # most looks find nothing matured
    if out_of_order:
        assert unordered > 0                      # the walk back ran
    assert out["stats"] == stats_json(simulate(config, *sets).stats)
