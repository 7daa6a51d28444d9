"""A row written by several st.rowsp stores is tracked in the receiver's row table (the MoE-Hub
AAU's, arXiv 2605.05888), not by its first store's RPM ring entry: every store's ring entry frees
once its own bytes landed. A ring of one entry therefore carries rows of two stores (four producer
TBs, each with a row open; the entry is kept for an open row's next store, so toward one GPU one
row is open at a time), each row still lands in one slot with one completion record, the spill
path (a row table of 2 entries and windows of 4 rows: a full window of half-landed rows must not
lock out their own later stores) reads the entries of half-landed rows back, both engines agree,
and a store that overfills a row whose first store already left the ring is still an error."""
import pytest

from conftest import assert_rows_home, cli_stats_per_engine, model_stats, run_cli, simulate

MICRO = "hub/dispatch_combine_rowsp.yaml"     # 4 GPUs, 32 tokens x top-2 rows of 2 stores each
G = 4
DEPTH_1 = ["system.gpu.hub.moe.rpm.row_queue_depth=1"]
TINY = DEPTH_1 + ["system.gpu.hub.moe.rpm.merge_buffer_bytes=64B",
                  "system.gpu.hub.moe.dam.tile_rows=2", "workload.moe.window_rows=4",
                  "system.gpu.hub.moe.aau.overflow=spill",
                  "system.gpu.hub.moe.aau.record_table_entries=2"]


def _rows_once(sim):
    s = model_stats(sim.stats)
    assert_rows_home(sim, G, 32, 2, 1000)
    for g in range(G):
        pre = f"system.gpu{g}.hub"
        # 64 rows sent by GPU g, each two stores (512 B then 488 B) into one slot, one record
        assert s[f"{pre}.rpm.rows_accepted"] == 64
        assert s[f"{pre}.rpm.rowsp_stores"] == 128
        assert s[f"{pre}.rpm.rowsp_rows"] == 64
        assert s[f"{pre}.rpm.payload_bytes"] == 64 * 1000
        # the 4 producer TBs wait for the one ring entry toward each GPU
        assert s[f"{pre}.rpm.accept_stalls"] > 0
    assert sum(s[f"system.gpu{g}.hub.aau.records_written"] for g in range(G)) == 4 * 64
    assert sum(s[f"system.gpu{g}.hub.aau.allocations"] for g in range(G)) == 4 * 64
    return s


def test_a_ring_of_one_entry_carries_rows_of_two_stores():
    _rows_once(simulate(MICRO, *DEPTH_1))


def test_half_landed_rows_spill_and_engines_agree(tmp_path):
    s = _rows_once(simulate(MICRO, *TINY))
    assert sum(s[f"system.gpu{g}.hub.aau.spills"] for g in range(G)) > 0
    assert sum(s[f"system.gpu{g}.hub.aau.refills"] for g in range(G)) > 0
    stats = cli_stats_per_engine(f"configs/{MICRO}", tmp_path,
                                 *[a for o in TINY for a in ("--set", o)])
    assert stats["python"] == stats["numba"] == s


HUB = "configs/hub/dispatch_combine.yaml"


def test_overfilling_a_row_whose_first_store_left_the_ring_is_an_error(tmp_path):
    """The fence waits until the first store's bytes landed (its ring entry is free, the row is
    half in the receiver's row table); the second store then overfills the row."""
    kernel = tmp_path / "k.s"
    kernel.write_text(".kernel moe_dispatch\n.param x\n.param tokens\n.param topk\n"
                      ".param row_bytes\n.param num_experts\n"
                      "    rowsp.malloc 3, 1, 64\n"
                      "    st.rowsp 3, %tb, 0, %x, 48\n"
                      "    fence\n"
                      "    st.rowsp 3, %tb, 16, %x, 32\n"
                      "    exit\n"
                      ".kernel moe_expert\n.param log\n.param y\n.param out\n.param row_bytes\n"
                      ".param slot_bytes\n.param record_bytes\n.param tile_rows\n    exit\n")
    r = run_cli("run", HUB, "-o", tmp_path / "out", "--set", f"workload.kernel_files=[{kernel}]")
    assert r.returncode == 2, r.stderr
    assert "k.s:10: runtime error in kernel 'moe_dispatch'" in r.stderr
    assert "the row's stores together above it" in r.stderr and "Traceback" not in r.stderr
