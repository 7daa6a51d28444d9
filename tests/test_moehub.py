"""MoE-Hub control plane: every row lands once where its completion record says, tiles are
claimed in order then a zero claim, tiny tables stall but lose nothing, combine returns every row."""
import numpy as np
import pytest

from moehub_arch.components.packet import packets_in_use
from conftest import assert_rows_home, model_stats, read_stats_json, run_cli, simulate

G, T, K, E, ROW, SLOT = 4, 32, 2, 8, 1000, 1024


@pytest.fixture(scope="module")
def hub():
    return simulate("hub/dispatch_combine.yaml")


@pytest.fixture(scope="module")
def tiny():
    return simulate("hub/tiny_tables.yaml")


def expert_of(src, token, k):
    return (7 * token + 3 * k + src) % E


def check_combine(sim):
    assert_rows_home(sim, G, T, K, ROW)


def test_every_row_lands_once_where_its_record_says(hub):
    seen = set()
    W = hub.cfg.workload.moe.window_rows
    for d in range(G):
        records = hub.read_buffer(d, "moe_records", "i64").reshape(-1, 4)
        windows = hub.buffer_bytes(d, "moe_windows").reshape(-1, SLOT)
        for le in range(E // G):
            expert = d * (E // G) + le
            rows = hub.stats[f"system.gpu{d}.hub.aau.allocations"]
            for slot in range(le * W, le * W + W):
                src, home, aux, nbytes = records[slot]
                if nbytes == 0:
                    continue
                token, k = divmod(int(home), K)
                assert aux == (src << 20) | home and nbytes == ROW
                assert expert_of(int(src), token, k) == expert, "row landed at the wrong expert"
                x = hub.buffer_bytes(int(src), "x").reshape(T, ROW)
                assert np.array_equal(windows[slot, :ROW], x[token]), "row data differs"
                assert (src, home) not in seen, "row landed twice"
                seen.add((int(src), int(home)))
            assert rows > 0
    assert len(seen) == G * T * K


def test_claims_get_every_tile_then_zero(hub):
    s = hub.stats
    tile = hub.cfg.system.gpu.hub.moe.dam.tile_rows
    for g in range(G):
        rows = s[f"system.gpu{g}.hub.aau.allocations"]
        assert s[f"system.gpu{g}.hub.dam.tiles_ready"] == s[f"system.gpu{g}.hub.dam.claims"]
        # per expert: full tiles plus one partial tile
        assert s[f"system.gpu{g}.hub.dam.claims"] >= -(-rows // tile)
        assert s[f"system.gpu{g}.hub.dam.zero_claims"] == E // G     # one per expert thread block
        assert s[f"system.gpu{g}.hub.dam.eos_received"] == G
    assert sum(s[f"system.gpu{g}.hub.aau.records_written"] for g in range(G)) == G * T * K
    assert sum(s[f"system.gpu{g}.hub.rpm.rows_accepted"] for g in range(G)) == G * T * K
    assert sum(s[f"system.gpu{g}.hub.combine_rows"] for g in range(G)) == G * T * K


def test_combine_returns_every_row_home(hub):
    check_combine(hub)


def test_tiny_tables_stall_but_lose_nothing(tiny):
    check_combine(tiny)
    s = tiny.stats
    assert sum(s[f"system.gpu{g}.hub.aau.alloc_stalls"] for g in range(G)) > 0
    assert sum(s[f"system.gpu{g}.hub.rpm.accept_stalls"] for g in range(G)) > 0
    assert sum(s[f"system.gpu{g}.hub.rpm.flushes"] for g in range(G)) > 0
    assert max(s[f"system.gpu{g}.hub.aau.window_peak_rows"] for g in range(G)) <= 4
    assert max(s[f"system.gpu{g}.hub.aau.records_peak"] for g in range(G)) <= 6
    assert sum(s[f"system.gpu{g}.hub.aau.records_written"] for g in range(G)) == G * T * K
    st = tiny.state
    assert packets_in_use(st) == 0       # every packet returned
    assert (st.ch.credits == tiny.cfg.system.nvlink.rx_buffer_flits).all()


def test_hub_timing_mode_and_python_engine_agree(tmp_path, hub):
    timing = simulate("hub/dispatch_combine.yaml", "workload.mode=timing")
    assert model_stats(timing.stats) == model_stats(hub.stats)
    # the tiny tables with 8 of the 32 tokens (a quarter of the events, both stalls still taken)
    tokens = "workload.launches.0.params.tokens=8"
    r = run_cli("run", "configs/hub/tiny_tables.yaml", "-o", tmp_path, "--engine", "python", "--quiet",
                "--set", tokens)
    assert r.returncode == 0, r.stderr
    fast = model_stats(simulate("hub/tiny_tables.yaml", tokens).stats)
    for stall in ("alloc_stalls", "accept_stalls"):
        assert sum(v for k, v in fast.items() if k.endswith(f".{stall}")) > 0
    slow = {k: v for k, v in read_stats_json(tmp_path).items() if not k.startswith("host")}
    assert slow == fast


def test_hub_stats_are_declared_with_units(hub):
    names = {st.name: st for st in hub.stats.match("system.gpu0.hub.*.*")}
    for block in ("rpm", "aau", "dam"):
        assert any(n.startswith(f"system.gpu0.hub.{block}.") for n in names)
    assert names["system.gpu0.hub.aau.sram_bytes"].unit == "bytes"
    assert names["system.gpu0.hub.rpm.payload_efficiency"].value > 0.5


def test_moe_config_and_runtime_errors_are_clear(tmp_path):
    from conftest import run_cli
    r = run_cli("run", "configs/hub/dispatch_combine.yaml", "-o", tmp_path, "--set",
                "workload.moe.window_rows=12")
    assert r.returncode == 2 and "workload.moe.window_rows" in r.stderr and "multiple" in r.stderr
    r = run_cli("run", "configs/hub/dispatch_combine.yaml", "-o", tmp_path, "--set",
                "system.gpu.hub.moe.aau.record_table_entries=3")
    assert r.returncode == 2 and "record_table_entries" in r.stderr and "deadlocks" in r.stderr
    kernel = tmp_path / "k.s"
    kernel.write_text(".kernel moe_dispatch\n.param x\n.param tokens\n.param topk\n.param row_bytes\n"
                      ".param num_experts\n    notify_ready.eos 1\n"
                      "    send_to_expert 0, %x, %row_bytes, 0, 0\n    exit\n"
                      ".kernel moe_expert\n.param log\n.param y\n.param out\n.param row_bytes\n.param slot_bytes\n"
                      ".param record_bytes\n.param tile_rows\n    exit\n")
    r = run_cli("run", "configs/hub/dispatch_combine.yaml", "-o", tmp_path, "--set",
                f"workload.kernel_files=[{kernel}]")
    assert r.returncode == 2, r.stderr
    assert "k.s:8: runtime error in kernel 'moe_dispatch'" in r.stderr
    assert "after this GPU's end of stream" in r.stderr


def test_dispatch_only_path_delivers_every_row():
    sim = simulate("hub/dispatch_only.yaml", "workload.launches.0.params.tokens=256",
                   "workload.launches.0.grid=32")
    s = sim.stats
    assert sum(s[f"system.gpu{g}.hub.aau.allocations"] for g in range(G)) == G * 256 * K
    assert sum(s[f"system.gpu{g}.hub.combine_rows"] for g in range(G)) == 0
    assert s["system.report.dispatch_GBps_per_gpu"] > 0


@pytest.mark.parametrize("fixture", ["hub", "tiny"])
def test_claims_follow_allocation_order_then_zero(request, fixture):
    sim = request.getfixturevalue(fixture)
    tile = sim.cfg.system.gpu.hub.moe.dam.tile_rows
    W = sim.cfg.workload.moe.window_rows
    base = sim.buffers["moe_windows"].addr
    for g in range(G):
        log = sim.read_buffer(g, "log", "i64").reshape(2, 64, 2)
        for tb in range(2):
            expert_slot = tb                         # expert g * 2 + tb is local slot tb
            claims = []
            for rows, addr in log[tb]:
                claims.append((int(rows), int(addr)))
                if rows == 0:
                    break
            assert claims[-1][0] == 0                 # the stream ends with a zero-row claim
            for i, (rows, addr) in enumerate(claims[:-1]):
                assert 0 < rows <= tile
                slot = (addr - base) // SLOT - expert_slot * W
                assert slot == (i * tile) % W, "tiles must be claimed in allocation order"
            landed = sum(r for r, _ in claims)
            assert landed == sum(1 for t in range(T) for src in range(G) for k in range(K)
                                 if expert_of(src, t, k) == g * 2 + tb)
