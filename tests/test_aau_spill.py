"""AAU row table with overflow: spill (MoE-Hub, arXiv 2605.05888): a table of a few entries spills
its oldest entries to device memory and reads them back, the layer stays exact, every spilled and
refilled byte is HBM traffic, a table that never fills is today's design exactly, both engines
agree, and the stall-only load-time minimum does not apply."""
import pytest

from conftest import assert_rows_home, model_stats, read_stats_json, run_cli, simulate

FUNCTIONAL = "experiments/functional.yaml"
SPILL = "system.gpu.hub.moe.aau.overflow=spill"
G = 4


def _sum(s, name):
    return sum(s[f"system.gpu{g}.hub.aau.{name}"] for g in range(G))


@pytest.mark.parametrize("routing", ["uniform", "skewed"])
def test_tiny_spilling_table_keeps_the_layer_exact(routing):
    kind = f"workload.layer.routing.kind={routing}"
    tiny = simulate(FUNCTIONAL, kind, SPILL, "system.gpu.hub.moe.aau.record_table_entries=4")
    big = simulate(FUNCTIONAL, kind, SPILL, "system.gpu.hub.moe.aau.record_table_entries=100000")
    s, b = tiny.stats, big.stats
    assert s["system.moe.output_max_abs_error"] == 0.0     # invariants ran in simulate() too
    assert _sum(s, "spills") > 0 and _sum(s, "refills") > 0
    assert _sum(b, "spills") == _sum(b, "refills") == 0
    for g in range(G):
        pre = f"system.gpu{g}"
        # the table never blocks an allocation: rows per GPU and records are the same
        assert s[f"{pre}.hub.aau.allocations"] == b[f"{pre}.hub.aau.allocations"]
        # conservation: the only extra HBM traffic is the evictions (writes) and refills (reads),
        # one record_bytes entry each (32 B: one HBM sector, no rounding)
        assert s[f"{pre}.hbm.write_bytes"] - b[f"{pre}.hbm.write_bytes"] == s[f"{pre}.hub.aau.spill_bytes"]
        assert s[f"{pre}.hbm.read_bytes"] - b[f"{pre}.hbm.read_bytes"] == s[f"{pre}.hub.aau.refill_bytes"]
        assert s[f"{pre}.hub.aau.spill_bytes"] == 32 * s[f"{pre}.hub.aau.spills"]
        assert s[f"{pre}.hub.aau.refills"] <= s[f"{pre}.hub.aau.spills"]
        assert (s[f"{pre}.hub.aau.refill_wait_ticks"] > 0) == (s[f"{pre}.hub.aau.refills"] > 0)


def test_spill_with_a_table_that_never_fills_is_the_stall_design():
    stall = model_stats(simulate(FUNCTIONAL).stats)
    spill = model_stats(simulate(FUNCTIONAL, SPILL,
                                 "system.gpu.hub.moe.aau.record_table_entries=100000").stats)
    assert spill["system.gpu0.hub.aau.spills"] == 0
    # the table's size is only an area figure; every timing and traffic stat is the same
    differ = {k for k in stall if stall[k] != spill[k]}
    assert differ == {f"system.gpu{g}.hub.{name}" for g in range(G)
                      for name in ("aau.sram_bytes", "aau.spill_area_bytes", "moe_sram_bytes")}
    for s, spilling in ((stall, False), (spill, True)):
        pre = "system.gpu0.hub"
        # area proxies: the control plane's SRAM is its blocks' sum; the spill area is one
        # record_bytes entry per window slot (4 experts' windows per GPU here), spill only
        parts = ("rpm.sram_bytes", "aau.sram_bytes", "aau.staging_sram_bytes", "dam.sram_bytes")
        assert s[f"{pre}.moe_sram_bytes"] == sum(s[f"{pre}.{n}"] for n in parts)
        assert s[f"{pre}.aau.sram_bytes"] == (100000 if spilling else 4096) * 32 + 2 * 3 * 8
        assert (s[f"{pre}.aau.spill_area_bytes"] > 0) == spilling


def test_spill_engines_agree_and_every_row_lands(tmp_path):
    """hub/tiny_tables.yaml (windows of 4 rows, tiles of 2) with a row table of 2 entries: the
    records would deadlock a stalling table (the loader refuses it); spilling, every row lands
    once and comes home, and the reference engine gives the same stats."""
    overrides = [SPILL, "system.gpu.hub.moe.aau.record_table_entries=2"]
    fast = simulate("hub/tiny_tables.yaml", *overrides)
    assert_rows_home(fast, 4, 32, 2, 1000)
    assert _sum(fast.stats, "spills") > 0
    # the engines compared on 8 of the 32 tokens (a quarter of the events, still spilling)
    overrides.append("workload.launches.0.params.tokens=8")
    small = simulate("hub/tiny_tables.yaml", *overrides)
    assert_rows_home(small, 4, 8, 2, 1000)
    assert _sum(small.stats, "spills") > 0
    args = [a for o in overrides for a in ("--set", o)]
    r = run_cli("run", "configs/hub/tiny_tables.yaml", "-o", tmp_path, "--engine", "python",
                "--quiet", *args)
    assert r.returncode == 0, r.stderr
    slow = {k: v for k, v in read_stats_json(tmp_path).items() if not k.startswith("host")}
    assert slow == model_stats(small.stats)


def test_overflow_choice_errors_and_stall_minimum(tmp_path):
    r = run_cli("run", "configs/hub/tiny_tables.yaml", "-o", tmp_path, "--set",
                "system.gpu.hub.moe.aau.overflow=evict")
    assert r.returncode == 2
    assert "system.gpu.hub.moe.aau.overflow" in r.stderr and "spill" in r.stderr
    assert "Traceback" not in r.stderr
    r = run_cli("run", "configs/hub/tiny_tables.yaml", "-o", tmp_path, "--set",
                "system.gpu.hub.moe.aau.record_table_entries=2")
    assert r.returncode == 2 and "deadlocks" in r.stderr     # stall: the minimum applies
