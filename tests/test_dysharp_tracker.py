"""DySHARP's token tracker tile table (system.switch.nvls.dysharp.tracker_tiles, the paper's 1024
entries): the fused layer's tiles are those rows land in (the most rows an expert receives,
workload.multicast[].layout_rows), not those of the layouts' stride (which spans the algebraic
range); a tile holds an entry from its first bytes until its GEMM-2 jobs are done (the tile's
finished-job counter, workload.multicast[].done_counters), so a table smaller than the tiles a
layer fills serves them over time, copies that find it full waiting at the hub; a table smaller
than the local experts is a clear input error; a layout capacity below the rows that arrive is a
run error; the paper's shapes at their sequence lengths plan against its 1024 entries. The grant
order (tracker_grant): expert_head keeps one entry per local expert for its head tile, which makes
defer deadlock-free at any table of at least the local experts - pinned on the small-table study
(S top-8, 8 GPUs x 256 tokens on the NVL32, 8 local experts, 24 tiles), where arrival order and
stall deadlock. The combine's ready check (tracker_ready): count, the paper's per-token ready
count, checks a token's k ready words once (one coalesced access); slots, the earlier model, waits
for them one by one - pinned to the tick on both, with the same packets, every token combined
once after its k notices, and the same output."""
import pytest

import conftest
from conftest import simulate
from moehub_arch.checks import run_invariants
from moehub_arch.simulation import SimulationError
from moehub_arch.workloads.layer import MoeLayer, expert_load_max

CONFIG = "experiments/functional.yaml"


@pytest.fixture(scope="module")
def default_layer():
    """The config's DySHARP layer with the default table (1024 entries): its model stats, which
    several tests compare with."""
    return conftest.model_stats(simulate(CONFIG, "scheme=dysharp").stats)


def need(layer):
    s = layer.shape
    return s.local_experts * -(-expert_load_max(layer) // s.tile_rows)


def test_fused_layout_rows_are_the_most_rows_an_expert_receives():
    layer = MoeLayer(conftest.load(CONFIG, "scheme=dysharp"))
    tile = layer.shape.tile_rows
    tracked = [m for m in layer.plan.multicast if m.tracker]
    assert len(tracked) == 2
    for m in tracked:
        assert m.layout_rows == -(-expert_load_max(layer) // tile) * tile
    # the layouts' stride (the algebraic range per target) is wider than the rows that land
    P, T, El = layer.shape.num_gpus, layer.shape.tokens, layer.shape.local_experts
    assert P * T // El > tracked[0].layout_rows


def _tracker(stats, name):
    return sum(v for k, v in stats.items()
               if k.startswith("system.gpu") and k.endswith(f".dysharp.{name}"))


def test_a_table_as_large_as_needed_never_waits_and_times_as_the_default(default_layer):
    n = need(MoeLayer(conftest.load(CONFIG, "scheme=dysharp")))
    exact = simulate(CONFIG, "scheme=dysharp", f"system.switch.nvls.dysharp.tracker_tiles={n}")
    s = conftest.model_stats(exact.stats)
    assert s["system.moe.output_max_abs_error"] == 0.0
    assert _tracker(s, "tracker_waits") == 0
    assert max(v for k, v in s.items() if k.endswith("tracker_entries_peak")) <= n
    # every tile's entry was taken and freed once: the tiles raised full plus the closed ones
    assert _tracker(s, "tracker_entries_freed") >= _tracker(s, "tracker_tiles_ready")
    assert conftest.model_stats(exact.stats) == default_layer


@pytest.mark.parametrize("full,entries", [("defer", 2), ("defer", 3), ("stall", 2)])
def test_a_table_smaller_than_its_tiles_recycles_entries(full, entries, default_layer):
    """2 or 3 entries for a layer whose GPUs fill 10 tiles (2 local experts): tiles beyond the
    table wait for entries freed by finished tiles - counted aside (defer) or with their copies
    held at the hub (stall); the layer completes exactly either way, and later."""
    layer = MoeLayer(conftest.load(CONFIG, "scheme=dysharp"))
    assert need(layer) > entries >= layer.shape.local_experts
    big = default_layer
    sim = simulate(CONFIG, "scheme=dysharp", f"system.switch.nvls.dysharp.tracker_tiles={entries}",
                   f"system.switch.nvls.dysharp.tracker_full={full}")
    s = conftest.model_stats(sim.stats)
    assert s["system.moe.output_max_abs_error"] == 0.0
    assert run_invariants(sim) == []
    assert _tracker(s, "tracker_waits") > 0 and _tracker(s, "tracker_wait_us") > 0
    assert max(v for k, v in s.items() if k.endswith("tracker_entries_peak")) == entries
    # every tile that held an entry gave it back (defer: a partial tile may finish without one)
    assert _tracker(s, "tracker_entries_freed") <= _tracker(big, "tracker_entries_freed")
    assert _tracker(s, "tracker_tiles_ready") == _tracker(big, "tracker_tiles_ready")
    assert s["simTicks"] > big["simTicks"]     # the waits cost time
    assert (s["system.engine.events.dysharp_retry"] > 0) == (full == "stall")


@pytest.mark.parametrize("full", ["defer", "stall"])
def test_the_waiting_layer_is_the_same_on_both_engines(tmp_path, full):
    # 16 tokens per GPU (4 tiles for 2 entries: 4 waits with defer, 14 and 5 retries with stall)
    # rather than the config's 64: the same waits and retries, a third of the pure-Python run
    stats = conftest.cli_stats_per_engine(
        "configs/" + CONFIG, tmp_path, "--set", "scheme=dysharp", "--set",
        "workload.layer.tokens_per_gpu=16", "--set",
        "system.switch.nvls.dysharp.tracker_tiles=2", "--set",
        f"system.switch.nvls.dysharp.tracker_full={full}")
    assert _tracker(stats["numba"], "tracker_waits") > 0
    assert (stats["numba"]["system.engine.events.dysharp_retry"] > 0) == (full == "stall")
    assert stats["numba"] == stats["python"]


@pytest.mark.parametrize("full", ["defer", "stall"])
def test_a_table_smaller_than_the_local_experts_is_refused(tmp_path, full):
    El = MoeLayer(conftest.load(CONFIG, "scheme=dysharp")).shape.local_experts
    r = conftest.run_cli("run", "configs/experiments/functional.yaml", "--set", "scheme=dysharp",
                         "--set", f"system.switch.nvls.dysharp.tracker_tiles={El - 1}",
                         "--set", f"system.switch.nvls.dysharp.tracker_full={full}",
                         "-o", tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "system.switch.nvls.dysharp.tracker_tiles" in r.stderr
    assert f"{El} local experts" in r.stderr


def test_without_done_counters_every_tile_needs_an_entry_at_once(tmp_path):
    # the micro-benchmark's object, tracked, names no finished-job counters: its 4 targets x 1
    # tile need 4 entries at once
    r = conftest.run_cli("run", "configs/ubench/dymultimem.yaml",
                         "--set", "workload.multicast.0.tracker=counts",
                         "--set", "workload.multicast.0.tile_rows=100000",
                         "--set", "system.switch.nvls.dysharp.tracker_tiles=3", "-o", tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "done_counters" in r.stderr and "tracker_tiles" in r.stderr


def test_a_layout_capacity_below_the_arriving_rows_is_a_run_error(tmp_path):
    # the micro-benchmark sends 16 rows to each target: a capacity of 8 rows fills up
    r = conftest.run_cli("run", "configs/ubench/dymultimem.yaml", "--set",
                         "workload.multicast.0.layout_rows=8", "-o", tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "receive layout is full" in r.stderr
    r = conftest.run_cli("run", "configs/ubench/dymultimem.yaml", "--set",
                         "workload.multicast.0.layout_rows=100000", "-o", tmp_path / "b")
    assert r.returncode == 2 and "workload.multicast[0].layout_rows" in r.stderr


@pytest.mark.parametrize("model,tokens", [("dysharp_s", 2048), ("dysharp_m_k32", 4096),
                                          ("dysharp_l_k16", 8192), ("dysharp_l_k32", 8192)])
def test_the_papers_shapes_plan_against_its_1024_entry_table(model, tokens):
    """M top-32, L top-16 and L top-32 fill more tiles than 1024 (1036, 1048, 2080 on the busiest
    GPU): they plan now, recycling entries."""
    cfg = conftest.load("experiments/dysharp/base_gh200_nvl32.yaml", "scheme=dysharp",
                        f"workload.layer.model={model}", f"workload.layer.tokens_per_gpu={tokens}",
                        "system.num_gpus=32")
    assert cfg.system.switch.nvls.dysharp.tracker_tiles == 1024
    layer = MoeLayer(cfg)
    tracked = [m for m in layer.plan.multicast if m.tracker]
    assert tracked and all(m.done_counters == "dy_jobs" for m in tracked)
    assert (need(layer) > 1024) == (model != "dysharp_s")


# the small-table study: S top-8 on 8 GPUs x 256 tokens per GPU of the NVL32 (8 local experts, 24
# row tiles on the busiest GPU), timing mode
STUDY = ("experiments/dysharp/base_gh200_nvl32.yaml", "scheme=dysharp",
         "workload.layer.model=dysharp_s", "workload.layer.tokens_per_gpu=256", "system.num_gpus=8")


def _study(grant, full, entries, ready="count"):
    # ready: slots runs the earlier kernels (the per-slot check, the stride's tiles walked)
    return simulate(*STUDY, f"system.switch.nvls.dysharp.tracker_tiles={entries}",
                    f"system.switch.nvls.dysharp.tracker_full={full}",
                    f"system.switch.nvls.dysharp.tracker_grant={grant}",
                    f"system.switch.nvls.dysharp.tracker_ready={ready}",
                    "workload.layer.dysharp.walk=" + ("stride" if ready == "slots" else "tracked"))


@pytest.mark.parametrize("grant,entries,ready,layer_ticks,waits", [
    ("expert_head", 8, "count", 107_399_982, 96),   # = the local experts: no shared entry at all
    ("expert_head", 12, "count", 103_399_982, 64),
    ("arrival", 8, "count", 108_399_982, 96),       # the earlier grant order, for comparison
    # the earlier kernels (one wait per slot, the stride walked): the figures of branch papers4
    ("expert_head", 8, "slots", 135_399_977, 96),
    ("expert_head", 12, "slots", 130_399_978, 64),
    ("arrival", 8, "slots", 136_399_977, 96)])
def test_the_small_table_study_with_defer(grant, entries, ready, layer_ticks, waits):
    """With defer, a table as small as the local experts completes the layer exactly as pinned
    (branch papers4; dysharp8 for the per-token ready check): expert_head by construction (the
    lowest unfinished tile in the GEMM blocks' order is an expert's head, which holds its kept
    entry), arrival here by luck of the order the tiles came in (it deadlocked with 4 entries
    before those were refused). The tile table's waits do not depend on the ready check."""
    sim = _study(grant, "defer", entries, ready)
    s = conftest.model_stats(sim.stats)
    assert run_invariants(sim) == []
    assert round(s["system.moe.layer_time_us"] * 1e6) == layer_ticks
    assert _tracker(s, "tracker_waits") == waits
    assert max(v for k, v in s.items() if k.endswith("tracker_entries_peak")) == entries


@pytest.mark.parametrize("grant", ["expert_head", "arrival"])
def test_stall_deadlocks_with_a_small_table_whatever_the_grant_order(grant):
    """stall holds a waiting copy's link buffer space, so a head tile's own bytes can queue behind
    copies that wait for shared entries: no grant order makes it safe (8 entries deadlock with
    either; expert_head also deadlocks at 12, while 16 completes)."""
    with pytest.raises(SimulationError, match="deadlock"):
        _study(grant, "stall", 8)


# ---------------------------------------------- the combine's ready check (tracker_ready)
@pytest.mark.parametrize("ready,walk,ticks", [
    ("count", "tracked", 45_569_938),  # the paper's per-token ready count; the tracked tiles
    ("count", "stride", 45_571_030),   # the same check, the kernels walking the layouts' stride
    ("slots", "stride", 51_913_652)])  # the earlier model, to the tick (its golden stats)
def test_the_ready_check_times_as_pinned_and_changes_no_data(ready, walk, ticks):
    """The functional fused layer (4 GPUs x 64 tokens, top-2): with either ready check and
    either walk every token is combined exactly once, after its k = 2 ready words were set by
    its experts' GPUs (P T k notices, one per placed row), and the output is exact; only the
    time moves - `slots` with `stride` is the model before either choice existed."""
    sim = simulate(CONFIG, "scheme=dysharp", f"system.switch.nvls.dysharp.tracker_ready={ready}",
                   f"workload.layer.dysharp.walk={walk}")
    s = conftest.model_stats(sim.stats)
    layer = MoeLayer(conftest.load(CONFIG, "scheme=dysharp"))
    P, T, k = layer.shape.num_gpus, layer.shape.tokens, layer.shape.top_k
    assert s["simTicks"] == ticks
    assert s["system.moe.output_max_abs_error"] == 0.0
    assert run_invariants(sim) == []
    assert s["system.moe.rows_combined"] == P * T * k
    assert sum(s[f"system.gpu{g}.dysharp.ld_reduce_ops"] for g in range(P)) == P * T
    assert sum(s[f"system.gpu{g}.dysharp.rows_placed"] for g in range(P)) == P * T * k
    for g in range(P):
        words = sim.read_buffer(g, "dy_tokready", "i64")
        assert words.size == T * k and (words == 1).all()   # each token's k notices, once each


def test_the_ready_check_moves_only_the_combine(default_layer):
    """count and slots send the same packets (the same rows, notices and reductions on the wire)
    and only the combine blocks' reads of the ready words differ: one coalesced access per token
    against k."""
    a = default_layer
    b = conftest.model_stats(simulate(CONFIG, "scheme=dysharp",
                                      "system.switch.nvls.dysharp.tracker_ready=slots").stats)
    for key in ("system.moe.nvlink.up_wire_bytes", "system.moe.nvlink.down_wire_bytes",
                "system.moe.rows_sent", "system.moe.rows_combined"):
        assert a[key] == b[key], key
    assert a["simTicks"] < b["simTicks"]
