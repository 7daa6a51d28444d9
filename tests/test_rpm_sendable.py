"""The RPM packetizer's per-stream look-ups (components/moehub/rpm.py) are O(1) per packet, not
O(ring): `sent_row` steps from the stream's last position (State.stream.sent_row) instead of
row_at's binary search of the ring, and `_coalesce_end` stops its walk at the stream's bound on
where st.rowsp stores lie (State.stream.rowsp_end) instead of the ring's head. Both must return
exactly what the searches they replace return - so the packetizer picks the same stream, packet
size and flush time under every schedule. An exact refactor (the golden stats cover the layer
configs as a whole); here every call of a run is checked against the reference search (the
pure-Python engine), on a kernel that mixes send_to_expert rows and st.rowsp stores toward one
GPU (the walk finds stores) under every schedule and both arbitrations, the same with each
row accepted right after a store it goes before (the paper schedule moves the stores up, past
the bound they were taken under), and on rows of two st.rowsp stores in a ring of 4 that the
paper schedule reorders; and each run has the compiled engine's stats."""
import pytest

from conftest import run_patched, simulate, stats_json
from test_multi_expert_store import MICRO, MIXED

DRIVER = """
import json, sys
from moehub_arch.components.moehub import rpm
fast_row, fast_end = rpm.sent_row, rpm._coalesce_end
calls = [0, 0, 0, 0]  # sent_row calls, rows it stepped past the hint, _coalesce_end calls, found


def checked_row(st, s):
    sr = st.stream[s]
    want = rpm.row_at(st, s, sr.sent)
    hint = int(sr.sent_row)
    got = fast_row(st, s)
    assert got == want, ("sent_row", s, int(sr.sent), hint, got, want)
    calls[0] += 1
    calls[1] += abs(got - hint)
    return got


def checked_end(st, s, i):
    p = st.p[0]
    sr = st.stream[s]
    want = sr.accepted
    if st.gpu[s // p.num_gpus].rowsp_stores:
        for k in range(i + 1, sr.head):      # the whole ring, as before the bound
            r = st.mrow[s * p.rpm_ring + k % p.rpm_ring]
            if r.rowsp and r.carrier < 0:
                want = r.start
                break
    got = fast_end(st, s, i)
    assert got == want, ("_coalesce_end", s, i, got, want)
    calls[2] += 1
    calls[3] += got < sr.accepted
    return got


rpm.sent_row = checked_row
rpm._coalesce_end = checked_end
"""

MIXED_SETS = ["workload.launches.0.kernel=moe_dispatch_mixed"]
SEND = "    send_to_expert r16, r2, %row_bytes, r5, 0\n"
STORE = "    st.rowsp r17, r6, 0, r2, %row_bytes\n"
assert SEND + STORE in MIXED
# the store first, then the row (home 2t < the store's row 2t + 1): schedule paper moves each
# row ahead of the store accepted just before it, so the store moves up past its bound
STORE_FIRST = MIXED.replace(SEND + STORE, STORE + SEND)


def _kernel_sets(tmp_path, text):
    kernel = tmp_path / "mixed.s"
    kernel.write_text(text)
    return MIXED_SETS + [f"workload.kernel_files=[workloads/kernels/hub/dispatch_combine.s, "
                         f"{kernel}]"]


@pytest.mark.parametrize("case", [
    # send_to_expert rows followed by st.rowsp stores toward one GPU: _coalesce_end finds them
    ("mixed", "arrival", "round_robin"),
    ("mixed", "full_first", "longest_first"),
    ("mixed", "paper", "round_robin"),
    ("mixed", "uncoalesced", "round_robin"),
    ("store_first", "paper", "round_robin"),
    # rows of two st.rowsp stores, a ring of 4 and the paper order: descriptors move in the ring
    ("rowsp", "paper", "round_robin"),
])
def test_packetizer_lookups_match_the_ring_searches(tmp_path, case):
    kind, schedule, arbitration = case
    sets = [f"system.gpu.hub.moe.rpm.schedule={schedule}",
            f"system.gpu.hub.moe.rpm.arbitration={arbitration}"]
    if kind in ("mixed", "store_first"):
        config = MICRO
        sets += _kernel_sets(tmp_path, MIXED if kind == "mixed" else STORE_FIRST)
    else:
        config = "hub/dispatch_combine_rowsp.yaml"
        sets += ["system.gpu.hub.moe.rpm.row_queue_depth=4"]
    out = run_patched(DRIVER, config, *sets)     # pure-Python engine: rpm patchable
    rows, stepped, ends, found = out["calls"]
    assert rows > 0 and stepped > 0              # the hint had to move
    if kind != "rowsp" and schedule != "uncoalesced":
        assert ends > 0 and found > 0            # rows were cut short by a following store
    if schedule == "paper" and kind != "mixed":
        assert out["reordered"] > 0
    # and the patched pure-Python run is the compiled engine's run
    assert out["stats"] == stats_json(simulate(config, *sets).stats)
