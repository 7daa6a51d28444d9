"""DySHARP's dynamic multimem (components/dysharp.py on NVLS's engine, components/nvls.py) and
scheme dysharp (workloads/kernels/dysharp/dysharp.s, schemes/dysharp.py).

- dymultimem.st to k experts on m distinct GPUs puts one row on the source's uplink and m rows
  on the downlinks, exactly (payload bytes), and each packet's target-extension flits are on the
  wire (the trimmed list on each downlink); every target's layout holds the row;
- a dymultimem.st leaves the hub's request table at its last packet (a posted-store tag waits for
  its responses), a dymultimem.ld_reduce holds its entry until the result: occupancy pinned;
- dymultimem.ld_reduce returns the FP32 sum of the targets' rows in target-list order (bit for
  bit), with one row down to the source and one row up per target;
- bad input (target count 0 or above the limit, an expert outside the object or named twice, an
  address outside every dynamic object, a full layout, a reduction buffer of 0 bytes, a dynamic
  object without its tables, a tracker without its buffer, tile rows or table room) -> one
  paragraph, exit 2;
- scheme dysharp: the layer output equals the NumPy reference (combine="switch_targets") with
  error 0.0 on uniform and skewed routing, fused (token-centric fusion, the default) and unfused,
  exact token accounting, both engines identical;
- token-centric fusion: the token tracker's tile table counts every byte of every placed row,
  raises exactly the full tiles, every tile-ready word is up at the end (the kernel closed the
  partial ones), every token's k ready flags were set at its source; a tracker too small for the
  layer (or of 0 entries) is exit 2.
"""
import numpy as np
import pytest

import conftest
from conftest import model_stats, simulate
from moehub_arch.checks import run_invariants
from moehub_arch.workloads.reference import to_bf16

UBENCH = "ubench/dymultimem.yaml"
ROWS, R, TPG = 16, 4096, 4          # configs/ubench/dymultimem.yaml


def ubench(targets, reduce=1, *extra):
    ts = list(targets) + [0] * (8 - len(targets))
    sets = [f"workload.launches.0.params.t{i}={t}" for i, t in enumerate(ts)]
    return simulate(UBENCH, f"workload.launches.0.params.count={len(targets)}",
                    f"workload.launches.0.params.reduce={reduce}", *sets, *extra)


def _links(sim, g, what):
    links = sim.cfg.system.nvlink.links_per_gpu
    return sum(int(sim.stats[f"system.gpu{g}.nvlink{l}.{what}"]) for l in range(links))


def _flits(sim, nbytes):
    F = sim.cfg.system.nvlink.flit_bytes
    return -(-nbytes // F)


@pytest.mark.parametrize("targets", [(0, 5, 9, 13), (4, 5, 6, 12), (8, 9), (28, 1, 17, 30, 2, 7)],
                         ids=["k4-m4", "k4-m2", "k2-m1", "k6-m4"])
def test_dymultimem_st_one_row_up_m_rows_down(targets):
    sim = ubench(targets, reduce=0)
    assert run_invariants(sim) == []
    gpus = sorted({e // TPG for e in targets})
    m, k = len(gpus), len(targets)
    P = sim.cfg.system.num_gpus
    # payload: one row per operation on the source's uplink, one per distinct GPU down
    assert _links(sim, 0, "tx_payload_bytes") == ROWS * R
    assert sum(_links(sim, g, "rx_payload_bytes") for g in range(P)) == m * ROWS * R
    for g in range(P):
        assert _links(sim, g, "rx_payload_bytes") == (ROWS * R if g in gpus else 0), g
    # wire: every link packet carries its list in extension flits of eight 16-bit ids; a copy
    # carries the list trimmed to its GPU's targets
    cfg = sim.cfg.system.nvlink
    F, pay = cfg.flit_bytes, cfg.store_packet_bytes
    packets = ROWS * R // pay
    per = F // 2
    head = _flits(sim, cfg.header_bytes + pay)
    up = packets * (head + -(-k // per)) * F
    ack = _flits(sim, cfg.header_bytes) * F     # a target GPU answers each operation once
    assert _links(sim, 0, "tx_wire_bytes") == up + (ROWS * ack if 0 in gpus else 0)
    for g in gpus:
        k_g = sum(1 for e in targets if e // TPG == g)
        assert sim.stats[f"system.gpu{g}.dysharp.rows_written"] == packets * k_g
        down = packets * (head + -(-k_g // per)) * F
        assert _links(sim, g, "rx_wire_bytes") == down + (m * ROWS * ack if g == 0 else 0), g
    assert sim.stats["system.gpu0.dysharp.target_flits"] == packets * -(-k // per)
    assert sim.stats["system.dysharp.copies"] == m * packets
    # every target's layout holds every row, in arrival order of its rows
    src = sim.read_buffer(0, "src", "bf16").reshape(ROWS, -1)
    for e in targets:
        g, el = divmod(e, TPG)
        counts = sim.read_buffer(g, "counts", "i64")
        assert counts[el] == ROWS
        al = sim.read_buffer(g, "al", "i64").reshape(ROWS, TPG)
        layout = sim.read_buffer(g, "layout", "bf16").reshape(TPG, -1, R // 2)
        assert sorted(al[:, el]) == list(range(1, ROWS + 1))
        for u in range(ROWS):
            assert (layout[el, al[u, el] - 1] == src[u]).all(), (e, u)


def test_dymultimem_ld_reduce_sums_the_targets_in_list_order():
    targets = (28, 1, 17, 30, 2, 7)
    sim = ubench(targets, reduce=1)
    assert run_invariants(sim) == []        # every reduction entry completed and freed
    src = sim.read_buffer(0, "src", "bf16").reshape(ROWS, -1)
    acc = src.astype(np.float32)
    for _ in targets[1:]:
        acc = (acc + src).astype(np.float32)
    out = sim.read_buffer(0, "out", "bf16").reshape(ROWS, -1)
    assert np.array_equal(out, to_bf16(acc))
    # combine: one row down to the source, one row up per target (the switch counts them down)
    P = sim.cfg.system.num_gpus
    up = {g: ROWS * R * sum(1 for e in targets if e // TPG == g) for g in range(P)}
    # GPU 0 (targets 1 and 2): its dispatch copy and the results down; its row and its two
    # targets' rows up
    assert _links(sim, 0, "rx_payload_bytes") == 2 * ROWS * R
    assert _links(sim, 0, "tx_payload_bytes") == ROWS * R + up[0]
    for g in range(1, P):
        assert _links(sim, g, "tx_payload_bytes") == up[g], g
    pay = sim.cfg.system.nvlink.store_packet_bytes
    assert sim.stats["system.nvls.reductions"] == ROWS * R // pay
    assert sum(int(sim.stats[f"system.gpu{g}.dysharp.rows_read"]) for g in range(P)) \
        == len(targets) * ROWS * R // pay


def test_small_al_tlb_misses_more_and_changes_no_data():
    big = ubench((0, 5, 9, 13))
    small = ubench((0, 5, 9, 13), 1, "system.switch.nvls.dysharp.al_tlb_entries=1")
    assert run_invariants(small) == []
    assert np.array_equal(small.read_buffer(0, "out", "bf16"), big.read_buffer(0, "out", "bf16"))
    P = big.cfg.system.num_gpus
    miss = lambda s: sum(int(s.stats[f"system.gpu{g}.dysharp.al_tlb_misses"]) for g in range(P))  # noqa: E731
    assert miss(small) > miss(big)


def test_a_direct_mapped_al_tlb_thrashes_where_lru_holds_both_targets():
    """Experts 0 and 2 on GPU 0 (entries u x 4 + 0 and u x 4 + 2): in a 2-entry direct-mapped
    AL-TLB both fall in set 0 and evict each other at every packet (16 rows x 32 packets x 2
    targets, dispatch and reduce); fully associative with LRU, each row misses once per target."""
    tiny = ("system.switch.nvls.dysharp.al_tlb_entries=2", "workload.launches.0.params.count=2",
            "workload.launches.0.params.t1=2")
    lru = ubench((0, 2), 1, *tiny)
    direct = ubench((0, 2), 1, *tiny, "system.switch.nvls.dysharp.al_tlb_ways=1")
    miss = lambda s: int(s.stats["system.gpu0.dysharp.al_tlb_misses"])  # noqa: E731
    assert miss(lru) == 2 * 16 * 2
    assert miss(direct) == 2 * 16 * 32 * 2
    assert int(direct.stats["system.gpu0.dysharp.al_tlb_hits"]) == 0
    assert np.array_equal(lru.read_buffer(0, "out", "bf16"), direct.read_buffer(0, "out", "bf16"))


def test_a_one_entry_multimemq_stalls_and_changes_no_data():
    # a slow hub (32 packets per operation at 100 MHz) keeps the entry while the next one issues
    slow = "system.gpu.hub.clock=100MHz"
    big = ubench((0, 5, 9, 13), 1, slow)
    small = ubench((0, 5, 9, 13), 1, slow, "system.switch.nvls.dysharp.multimemq_entries=1")
    assert run_invariants(small) == []
    assert small.stats["system.gpu0.dysharp.multimemq_peak"] == 1
    assert small.stats["system.gpu0.dysharp.multimemq_stalls"] > 0
    assert np.array_equal(small.read_buffer(0, "out", "bf16"), big.read_buffer(0, "out", "bf16"))


def test_a_multimem_store_frees_its_request_table_entry_at_its_last_packet(tmp_path):
    """dymultimem.st is a weak store (PTX ISA memory model): its table entry frees once its last
    packet is out and a posted-store tag waits for its write responses; dymultimem.ld_reduce is a
    load and holds its entry until the result is back. GPU 0 issues 16 of each."""
    one = "system.gpu.hub.max_outstanding_requests=1"
    base = ubench((0, 5, 9, 13))
    posted = ubench((0, 5, 9, 13), 1, one)
    held = ubench((0, 5, 9, 13), 1, one, "system.gpu.hub.posted_store_tags=0")
    two_tags = ubench((0, 5, 9, 13), 1, "system.gpu.hub.posted_store_tags=2")
    peaks = lambda s: (s.stats["system.gpu0.hub.request_table_peak"],   # noqa: E731
                       s.stats["system.gpu0.hub.posted_stores_peak"])
    assert peaks(base) == (16, 16)
    assert peaks(posted) == (1, 16)     # all 16 stores out of a one-entry table at once
    assert peaks(held) == (1, 0)        # no tags: each store waits for its responses in the table
    assert peaks(two_tags) == (16, 2)   # tags run out: the other stores stay in the table
    out = base.read_buffer(0, "out", "bf16")
    for sim in (posted, held, two_tags):
        assert run_invariants(sim) == []   # every record, table entry and tag given back
        assert np.array_equal(sim.read_buffer(0, "out", "bf16"), out)
    stats = conftest.cli_stats_per_engine("configs/" + UBENCH, tmp_path, "--set", one)
    assert stats["numba"] == stats["python"]


def test_answers_leave_in_the_order_their_data_is_ready(monkeypatch):
    """A DySHARP read whose AL-TLB lookup missed is ready one HBM read later than reads behind it
    that hit: the hub's read-data FIFO takes each answer before every answer ready later (ties in
    arrival order), so a miss delays only its own reads. Runs the Python function (no compile) on
    a FIFO that wraps around its end."""
    from types import SimpleNamespace
    from moehub_arch.components import dysharp
    kicks = []
    monkeypatch.setattr(dysharp, "hub_kick_response", lambda st, g, t: kicks.append((g, t)))
    depth, ready = 8, [50, 30, 30, 70, 10, 30]
    st = SimpleNamespace(
        gpu=np.zeros(2, [("mm_rdq_head", np.int64), ("mm_rdq_count", np.int64)]).view(np.recarray),
        pk=np.array([(t,) for t in ready], [("ready", np.int64)]).view(np.recarray),
        mm_rdq=np.full((2, depth), -1, np.int64))
    st.gpu[1].mm_rdq_head = depth - 2
    queue = dysharp.queue_read_data_by_ready
    queue = getattr(queue, "py_func", queue)     # (a plain function under NUMBA_DISABLE_JIT)
    for pkt in range(len(ready)):
        queue(st, 1, pkt)
    fifo = [int(st.mm_rdq[1, (depth - 2 + i) % depth]) for i in range(int(st.gpu[1].mm_rdq_count))]
    assert fifo == [4, 1, 2, 5, 0, 3]
    assert kicks == [(1, t) for t in ready]      # the hub looks again when each one is ready
    assert (st.mm_rdq[0] == -1).all() and st.gpu[0].mm_rdq_count == 0


def test_an_al_tlb_miss_holds_no_hbm_channel():
    """Four targets on GPU 0 and a one-entry AL-TLB: every one of the 4096 lookups misses. A
    miss delays its own row access by one HBM read of the entry; the access itself is charged
    when the packet arrives, so it holds no HBM channel in the meantime. (Issued at the time the
    entry is known instead, each access would hold its channel for that long and every access
    behind it would wait: 3.7 times the round trip of the 512-entry TLB, against 1.3 now.)"""
    four = (0, 1, 2, 3)
    thrash = ubench(four, 1, "system.switch.nvls.dysharp.al_tlb_entries=1")
    fits = ubench(four, 1)
    assert int(thrash.stats["system.gpu0.dysharp.al_tlb_misses"]) == 2 * ROWS * (R // 128) * 4
    assert int(thrash.stats["system.gpu0.dysharp.al_tlb_hits"]) == 0
    assert int(fits.stats["system.gpu0.dysharp.al_tlb_misses"]) == ROWS * 4
    assert thrash.stats["simTicks"] < 1.5 * fits.stats["simTicks"]
    assert run_invariants(thrash) == []
    assert np.array_equal(thrash.read_buffer(0, "out", "bf16"), fits.read_buffer(0, "out", "bf16"))


def test_a_thrashing_al_tlb_changes_no_data_and_frees_every_read():
    """Two AL-TLB entries for the layer's 512 token-expert pairs: most lookups miss, the answers
    leave out of request order, and each read's receive-buffer space frees with the last of its
    answers: the output is still exact and every credit, read and entry is given back."""
    sim = run("system.switch.nvls.dysharp.al_tlb_entries=2")
    s = sim.stats
    assert s["system.moe.output_max_abs_error"] == 0.0
    assert run_invariants(sim) == []
    assert sum(int(s[f"system.gpu{g}.dysharp.al_tlb_misses"]) for g in range(P)) > P * T * K


@pytest.mark.parametrize("sets,fragments", [
    (["workload.launches.0.params.count=0"], ["dymultimem target count of 0 or above"]),
    (["workload.launches.0.params.count=3", "system.switch.nvls.dysharp.max_targets=2"],
     ["dymultimem target count of 0 or above system.switch.nvls.dysharp.max_targets"]),
    (["workload.launches.0.params.t1=0"], ["names one expert twice"]),
    (["workload.launches.0.params.t1=32"], ["outside its dynamic object"]),
    (["workload.launches.0.params.mm='@src'"], ["multimem address outside every multicast object"]),
    (["workload.launches.0.params.row_bytes=8192"], ["crosses an algebraic row"]),
    (["workload.buffers.layout.bytes=64KB"], ["receive layout is full"]),
    (["system.switch.nvls.dysharp.al_tlb_ways=3"],
     ["system.switch.nvls.dysharp.al_tlb_ways", "do not divide"]),
    (["system.switch.nvls.reduction_buffer_bytes=0B"],
     ["system.switch.nvls.reduction_buffer_bytes", "cannot hold one multimem.ld_reduce entry"]),
    (["workload.multicast.0.counts=nope"], ["workload.multicast[0].counts", "no buffer 'nope'"]),
    (["workload.multicast.0.row_bytes=0B"], ["workload.multicast[0]", "row_bytes and rows"]),
    (["workload.multicast.0.tracker=nope", "workload.multicast.0.tile_rows=4"],
     ["workload.multicast[0].tracker", "no buffer 'nope'"]),
    (["workload.multicast.0.tracker=counts"], ["workload.multicast[0].tile_rows", "at least 1"]),
    (["workload.multicast.0.tracker=counts", "workload.multicast.0.tile_rows=1"],
     ["workload.multicast[0].tracker", "at least 1024 bytes (one word per row tile)"]),
    (["workload.multicast.0.tracker=counts", "workload.multicast.0.tile_rows=100000",
      "system.switch.nvls.dysharp.tracker_tiles=2"],
     ["system.switch.nvls.dysharp.tracker_tiles", "4 row tiles"]),
], ids=["count-0", "count-above-limit", "repeated", "outside-object", "outside-every-object",
        "crosses-row", "layout-full", "tlb-ways", "zero-buffer", "no-counts", "no-row-bytes",
        "no-tracker", "tracker-no-tile", "tracker-buffer-small", "tracker-too-small"])
def test_bad_input_gives_one_paragraph_and_exit_2(tmp_path, capsys, sets, fragments):
    from moehub_arch.cli import main
    argv = ["run", str(conftest.CONFIGS / UBENCH), "-o", str(tmp_path / "out")]
    for s in sets:
        argv += ["--set", s]
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, (rc, err)
    assert err.startswith("moehub-sim: error: ") and "Traceback" not in err, err
    for f in fragments:
        assert f in err, (f, err)


# ------------------------------------------------------------------------------ scheme dysharp
CONFIG = "experiments/functional.yaml"
P, T, K = 4, 64, 2                       # configs/experiments/functional.yaml (tiny_functional)


def run(*overrides):
    return simulate(CONFIG, "scheme=dysharp", *overrides)


@pytest.mark.parametrize("routing,fusion,ready,walk", [
    ("uniform", "token", "count", "tracked"), ("skewed", "token", "count", "tracked"),
    ("skewed", "token", "slots", "stride"), ("uniform", "none", "count", "tracked")])
def test_layer_output_exact_and_accounted(routing, fusion, ready, walk):
    sim = run(f"workload.layer.routing.kind={routing}", f"workload.layer.dysharp.fusion={fusion}",
              f"system.switch.nvls.dysharp.tracker_ready={ready}",
              f"workload.layer.dysharp.walk={walk}")
    s = sim.stats
    assert s["system.moe.output_max_abs_error"] == 0.0
    assert s["system.moe.output_max_abs_reference"] > 1.0
    for name in ("sent", "received", "computed", "combined"):
        assert s[f"system.moe.rows_{name}"] == P * T * K, name
    assert run_invariants(sim) == []
    # every token-expert pair placed once at its expert (the meta row shares the row's AL entry)
    assert sum(int(s[f"system.gpu{g}.dysharp.rows_placed"]) for g in range(P)) == P * T * K
    # one dymultimem.st of the row and one of its meta row per token, one ld_reduce per token
    assert sum(int(s[f"system.gpu{g}.dysharp.st_ops"]) for g in range(P)) == 2 * P * T
    assert sum(int(s[f"system.gpu{g}.dysharp.ld_reduce_ops"]) for g in range(P)) == P * T


TILE = 16                                # functional.yaml: system.gpu.hub.moe.dam.tile_rows


def test_token_tracker_counts_every_byte_tile_and_notice():
    """Token-centric fusion: the hub's tile table counts every byte of every placed row and meta
    row (R + M per pair), raises exactly the full tiles, the kernel closes the others (every
    tile-ready word up), and each token's source saw k ready flags - one per (token, slot)."""
    from moehub_arch.workloads.schemes.dysharp import meta_row_bytes
    sim = run("workload.layer.routing.kind=skewed")
    s = sim.stats
    R, M = 2 * 64, meta_row_bytes(K, True)
    assert run_invariants(sim) == []
    full = 0
    for g in range(P):
        placed = int(s[f"system.gpu{g}.dysharp.rows_placed"])
        assert s[f"system.gpu{g}.dysharp.tracker_bytes"] == placed * (R + M)
        cnt = sim.read_buffer(g, "dy_cnt", "i64")
        assert int(cnt.sum()) == placed
        assert s[f"system.gpu{g}.dysharp.tracker_tiles_ready"] == int((cnt // TILE).sum())
        full += int((cnt // TILE).sum())
        assert (sim.read_buffer(g, "dy_tready", "i64") == 1).all()       # full or closed
        # every tile with rows ran all its GEMM-1 (I / n = 4) and GEMM-2 (H / n = 2) jobs, and
        # the gate group weighted each of its rows; an empty tile ran none
        tiles = sim.read_buffer(g, "dy_tready", "i64").size
        jobs = sim.read_buffer(g, "dy_jobs", "i64")[2:2 + 2 * tiles].reshape(tiles, 2)
        rows = np.array([min(TILE, max(0, int(cnt[b % (8 // P)]) - (b // (8 // P)) * TILE))
                         for b in range(tiles)])
        assert (jobs[rows > 0] == [4, 2]).all() and (jobs[rows == 0] == 0).all()
        assert (sim.read_buffer(g, "dy_wdone", "i64") == rows).all()
        assert (sim.read_buffer(g, "dy_tokready", "i64") == 1).all()     # T x k notices
        assert sim.read_buffer(g, "dy_tokready", "i64").size == T * K
    assert full > 0 and sum(int(s[f"system.gpu{g}.dysharp.rows_placed"]) for g in range(P)) \
        == P * T * K
    assert sum(int(s[f"system.gpu{g}.dysharp.ld_reduce_ops"]) for g in range(P)) == P * T


@pytest.mark.parametrize("fusion,ready,walk", [("token", "count", "tracked"),
                                               ("token", "slots", "stride"),
                                               ("none", "count", "tracked")])
def test_engines_agree(fusion, ready, walk):
    # a 4-entry AL-TLB: misses on both paths, answers reordered by readiness
    small = (f"workload.layer.dysharp.fusion={fusion}",
             f"system.switch.nvls.dysharp.tracker_ready={ready}",
             f"workload.layer.dysharp.walk={walk}",
             "workload.layer.tokens_per_gpu=8", "system.gpu.num_sms=8",
             "workload.layer.combine_tbs=2", "workload.layer.shared_tbs=2",
             "workload.layer.dysharp.channels=2", "workload.layer.dysharp.scale_tbs=4",
             "system.switch.nvls.dysharp.al_tlb_entries=4")
    a = model_stats(run(*small).stats)
    b = model_stats(run(*small, "run.engine=python").stats)
    assert a == b
    assert a["system.moe.output_max_abs_error"] == 0.0


@pytest.mark.parametrize("override,key", [
    ("workload.layer.dysharp.channels=0", "workload.layer.dysharp.channels"),
    ("system.switch.topology=bridge_pairs", "system.switch.topology"),
    ("system.switch.nvls.dysharp.max_targets=1", "system.switch.nvls.dysharp.max_targets"),
    ("system.switch.nvls.dysharp.tracker_tiles=0", "system.switch.nvls.dysharp.tracker_tiles"),
    ("system.switch.nvls.dysharp.tracker_full=spill", "system.switch.nvls.dysharp.tracker_full"),
    ("system.switch.nvls.dysharp.tracker_tokens=0", "system.switch.nvls.dysharp.tracker_tokens"),
    ("system.switch.nvls.dysharp.tracker_tokens=32", "system.switch.nvls.dysharp.tracker_tokens"),
    ("workload.layer.dysharp.fusion=tiles", "workload.layer.dysharp.fusion"),
    ("system.switch.nvls.dysharp.tracker_ready=words", "system.switch.nvls.dysharp.tracker_ready"),
    ("workload.layer.dysharp.walk=all", "workload.layer.dysharp.walk"),
    ("workload.layer.dysharp.compute_tbs=0", "workload.layer.dysharp.compute_tbs"),
])
def test_scheme_bad_input_is_exit_2(override, key, tmp_path):
    r = conftest.run_cli("run", "configs/experiments/functional.yaml", "--set", "scheme=dysharp",
                         "--set", override, "-o", tmp_path)
    assert r.returncode == 2, r.stderr
    assert key in r.stderr and "Traceback" not in r.stderr


def test_top_k_above_eight_is_exact(tmp_path):
    """Scheme dysharp hands a token's ids to the hub as a list (no ld.v8 limit): top-12 of 32
    experts (the gate-weight pass reads the ids in two groups of eight)."""
    model = tmp_path / "wide.yaml"
    model.write_text("model:\n  name: wide\n  hidden: 64\n  expert_ffn: 128\n  experts: 32\n"
                     "  top_k: 12\n  shared_experts: 0\n  shared_expert_ffn: 0\n  moe_layers: 1\n"
                     "  layers: 1\n  dtype: bf16\n  router:\n    kind: topk_softmax\n"
                     "    normalize: true\n    scale: 1.0\n")
    sim = run(f"workload.layer.model={model}", "workload.layer.tokens_per_gpu=16")
    s = sim.stats
    assert s["system.moe.output_max_abs_error"] == 0.0
    assert s["system.moe.rows_combined"] == P * 16 * 12
    assert run_invariants(sim) == []
    # every packet names 12 targets: two extension flits up
    assert s["system.gpu0.dysharp.target_flits"] == 2 * int(s["system.gpu0.nvls.multimem_packets"]
                                                           + s["system.gpu0.nvls.reduce_requests"])
