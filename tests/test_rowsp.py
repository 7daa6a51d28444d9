"""Row-sparse registration and stores, the published MoE-Hub ISA (arXiv 2605.05888): rowsp.malloc
registers an allocation id (expert, row size) in the hub, st.rowsp names (id, row, offset). The
layer stays exact with either routing, a row written by several stores lands once in one slot,
a store's bytes never share a packet with another's (exact packet and byte counts), both engines
agree, and bad stores are runtime errors naming the kernel line (exit 2)."""
import pytest

from conftest import (assert_rows_home, cli_stats_per_engine, model_stats, run_cli, simulate)

FUNCTIONAL = "experiments/functional.yaml"
ROWSP = "workload.layer.moehub.stores=row_sparse"
MICRO = "hub/dispatch_combine_rowsp.yaml"
G = 4


@pytest.mark.parametrize("routing", ["uniform", "skewed"])
def test_row_sparse_layer_is_exact(routing):
    kind = f"workload.layer.routing.kind={routing}"
    sp = simulate(FUNCTIONAL, "scheme=moehub", ROWSP, kind).stats
    st = simulate(FUNCTIONAL, "scheme=moehub", kind).stats
    assert sp["system.moe.output_max_abs_error"] == 0.0     # invariants ran in simulate() too
    for g in range(G):
        pre = f"system.gpu{g}.hub"
        rows = sp[f"{pre}.rpm.rows_accepted"]
        # one whole-row store per routed row; the same rows as send_to_expert sends
        assert rows == sp[f"{pre}.rpm.rowsp_stores"] == sp[f"{pre}.rpm.rowsp_rows"]
        assert rows == st[f"{pre}.rpm.rows_accepted"]
        assert sp[f"{pre}.aau.allocations"] == st[f"{pre}.aau.allocations"]
        # tiny_functional rows are 64 bf16 = 128 B: no row header in the stream, one packet per
        # row (never shared), nothing waits for a flush; plus one end-of-stream packet per GPU
        assert sp[f"{pre}.rpm.payload_bytes"] == 128 * rows
        assert st[f"{pre}.rpm.payload_bytes"] == (128 + 16) * rows
        assert sp[f"{pre}.rpm.packets"] == rows + G
        assert sp[f"{pre}.rpm.flushes"] == 0


def _micro_stats(sim):
    s = model_stats(sim.stats)
    for g in range(G):
        pre = f"system.gpu{g}.hub"
        rows = s[f"{pre}.rpm.rows_accepted"]
        assert rows == 64                         # 32 tokens x top-2 sent by GPU g
        # every row is two stores (512 B then 488 B) sharing one slot and one record
        assert s[f"{pre}.rpm.rowsp_stores"] == 2 * rows
        assert s[f"{pre}.rpm.rowsp_rows"] == rows
        assert s[f"{pre}.rpm.payload_bytes"] == 1000 * rows
    assert sum(s[f"system.gpu{g}.hub.aau.records_written"] for g in range(G)) == 4 * 64
    assert sum(s[f"system.gpu{g}.hub.aau.allocations"] for g in range(G)) == 4 * 64
    return s


def test_rows_of_two_stores_come_home_exactly():
    sim = simulate(MICRO)
    assert_rows_home(sim, G, 32, 2, 1000)
    s = _micro_stats(sim)
    for g in range(G):
        pre = f"system.gpu{g}.hub.rpm"
        # 256 B packets (dgx_h100's rpm.packet_bytes) never cross a store: 512 -> 2 packets,
        # 488 -> 256 + 232; plus one end-of-stream packet per destination
        assert s[f"{pre}.packets"] == 4 * s[f"{pre}.rows_accepted"] + G


TINY = ["system.gpu.hub.moe.rpm.row_queue_depth=5", "system.gpu.hub.moe.rpm.merge_buffer_bytes=64B",
        "system.gpu.hub.moe.dam.tile_rows=2", "workload.moe.window_rows=4",
        "system.gpu.hub.moe.aau.overflow=spill", "system.gpu.hub.moe.aau.record_table_entries=2"]


def test_tiny_tables_spill_and_engines_agree(tmp_path):
    """Row rings of 5 stores (one more than the 4 producer TBs, each with one row open at a
    time), 64 B packets, windows of 4 rows and a row table of 2 entries that spills: the later
    store of a row may find the row's entry evicted and read it back; every row still comes
    home (a later store of a row is never held behind a new row waiting for a slot of the
    window that row keeps full: not at the receiver, not in the sender's ring), and the
    reference engine gives the same stats."""
    sim = simulate(MICRO, *TINY)
    assert_rows_home(sim, G, 32, 2, 1000)
    s = _micro_stats(sim)
    for g in range(G):
        # 64 B packets: 512 B -> 8, 488 B -> 8 (the last 40 B alone), + end of stream
        assert s[f"system.gpu{g}.hub.rpm.packets"] == 16 * 64 + G
    assert sum(s[f"system.gpu{g}.hub.aau.spills"] for g in range(G)) > 0
    assert sum(s[f"system.gpu{g}.hub.rpm.accept_stalls"] for g in range(G)) > 0
    # the engines compared on 8 of the 32 tokens: a quarter of the events, every row still home,
    # still spilling, reading entries back and refusing stores at full rings
    small = TINY + ["workload.launches.0.params.tokens=8"]
    sim = simulate(MICRO, *small)
    assert_rows_home(sim, G, 8, 2, 1000)
    s = model_stats(sim.stats)
    for n in ("aau.spills", "aau.refills", "rpm.accept_stalls"):
        assert sum(s[f"system.gpu{g}.hub.{n}"] for g in range(G)) > 0, n
    stats = cli_stats_per_engine(f"configs/{MICRO}", tmp_path,
                                 *[a for o in small for a in ("--set", o)])
    assert stats["python"] == stats["numba"] == s


HUB = "configs/hub/dispatch_combine.yaml"


def _kernel(tmp_path, body):
    kernel = tmp_path / "k.s"
    kernel.write_text(".kernel moe_dispatch\n.param x\n.param tokens\n.param topk\n.param row_bytes\n"
                      f".param num_experts\n{body}    exit\n"
                      ".kernel moe_expert\n.param log\n.param y\n.param out\n.param row_bytes\n"
                      ".param slot_bytes\n.param record_bytes\n.param tile_rows\n    exit\n")
    return kernel


@pytest.mark.parametrize("body, line, message", [
    # line 7 is the first instruction
    ("    st.rowsp 3, 0, 0, %x, 64\n", 7, "has not registered"),
    ("    rowsp.malloc 3, 1, 64\n    st.rowsp 2, 0, 0, %x, 64\n", 8, "has not registered"),
    ("    rowsp.malloc 256, 1, 64\n", 7, "outside 0 .. system.gpu.hub.moe.rpm.allocation_ids"),
    ("    rowsp.malloc 3, 1, 64\n    st.rowsp 3, 0, 32, %x, 64\n", 8, "above the registered row size"),
    ("    rowsp.malloc 3, 1, 64\n    st.rowsp 3, %tb, 0, %x, 48\n    st.rowsp 3, %tb, 16, %x, 32\n",
     9, "the row's stores together above it"),
    ("    rowsp.malloc 3, 8, 64\n", 7, "rowsp.malloc of an expert id out of range"),
    ("    rowsp.malloc 3, 1, 2048\n", 7, "above the window slot"),
])
def test_bad_row_sparse_stores_name_the_kernel_line(tmp_path, body, line, message):
    kernel = _kernel(tmp_path, body)
    r = run_cli("run", HUB, "-o", tmp_path / "out", "--set", f"workload.kernel_files=[{kernel}]")
    assert r.returncode == 2, r.stderr
    assert f"k.s:{line}: runtime error in kernel 'moe_dispatch'" in r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr


def test_allocation_table_of_zero_entries_is_a_config_error(tmp_path):
    r = run_cli("run", f"configs/{MICRO}", "-o", tmp_path,
                "--set", "system.gpu.hub.moe.rpm.allocation_ids=0")
    assert r.returncode == 2
    assert "system.gpu.hub.moe.rpm.allocation_ids: expected an integer >= 1, found 0" in r.stderr
    assert "Traceback" not in r.stderr
