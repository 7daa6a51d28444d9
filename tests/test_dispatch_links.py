"""Does the dispatch use the links it has? system.moe.dispatch_link_efficiency for every scheme,
the per-kernel wire-byte accounting behind it, the MoE-Hub's memory-wait stats, and
tools/layer_table.py's --systems / --json."""
import importlib.util
import json
import subprocess
import sys

import pytest
from conftest import REPO, load, simulate
from moehub_arch.paths import tree_digest

FUNCTIONAL = "experiments/functional.yaml"


@pytest.fixture(scope="module", params=["moehub", "deepep", "overlap"])
def layer(request):
    # deepep with its combine head read pushed: with head_poll remote (the default) the combine
    # senders' head reads are remote gets, whose data responses are neither ACKs nor a kernel's
    # request (tests/test_deepep_combine.py counts those)
    extra = ("workload.layer.deepep.head_poll=pushed",) if request.param == "deepep" else ()
    return request.param, simulate(FUNCTIONAL, f"scheme={request.param}", *extra)


def test_every_wire_byte_is_a_kernels_request_or_a_response(layer):
    """Conservation: what the GPU links transmit is exactly the bytes attributed to kernels (their
    requests and rows, to remote GPUs) plus the responses, which in these layers are ACKs only
    (one header flit each: every put and store is acknowledged, no remote gets or atomics)."""
    scheme, sim = layer
    st, s = sim.state, sim.stats
    p = st.p[0]
    G, L = int(p.num_gpus), int(p.links_per_gpu)
    uplinks = sum(int(st.ch[2 * (g * L + l)].tx_wire_bytes) for g in range(G) for l in range(L))
    attributed = int(st.ln.tx_wire.sum())
    acks = sum(s[f"system.gpu{g}.hub.acks_received"] for g in range(G))
    assert attributed > 0
    assert uplinks == attributed + acks * int(p.flit_bytes), scheme


def test_dispatch_link_efficiency_is_the_defined_ratio(layer):
    scheme, sim = layer
    st, s = sim.state, sim.stats
    p = st.p[0]
    names = sim.layer.plan.phases["dispatch"]
    per_gpu = {}
    for l in sim.launches:
        if l.kernel in names:
            per_gpu[l.gpu] = per_gpu.get(l.gpu, 0) + int(st.ln[l.index].tx_wire)
    busiest = max(per_gpu.values())
    assert s["system.moe.dispatch_wire_bytes_max"] == busiest
    cfg = sim.cfg.system.nvlink
    seconds_at_full_rate = busiest / (cfg.links_per_gpu * cfg.bandwidth)
    expected = seconds_at_full_rate / (s["system.moe.phase.dispatch_us"] * 1e-6)
    assert s["system.moe.dispatch_link_efficiency"] == pytest.approx(expected, rel=1e-6)
    assert 0 < s["system.moe.dispatch_link_efficiency"] < 1.0


def test_moehub_memory_wait_stats_count_every_data_packet():
    sim = simulate(FUNCTIONAL)
    s = sim.stats
    for g in range(4):
        pre = f"system.gpu{g}.hub"
        # every row's bytes arrived in data packets the AAU wrote, each waiting >= 0 for HBM
        assert s[f"{pre}.aau.data_packets"] > 0
        assert s[f"{pre}.aau.write_wait_ticks"] > 0
        assert s[f"{pre}.aau.write_wait_mean_ns"] == pytest.approx(
            s[f"{pre}.aau.write_wait_ticks"] / 1000 / s[f"{pre}.aau.data_packets"])
        # a packet's payload is read from local HBM: at least the HBM latency each
        assert s[f"{pre}.rpm.read_wait_mean_ns"] >= 700 / 1.83


def test_h800_layer_configs_exist_and_load():
    for system in ("hgx_h800", "dgx_h800"):
        for model in ("deepseek_v3", "mixtral_8x7b", "qwen3_30b_a3b"):
            for tokens in (256, 1024, 4096):
                for scheme in ("deepep", "overlap", "moehub"):
                    cfg = load(f"experiments/layer/{model}_{tokens}_{scheme}_{system}.yaml")
                    assert cfg.system.name == system and cfg.scheme == scheme
                    assert cfg.workload.layer.tokens_per_gpu == tokens
    d = load("systems/dgx_h800.yaml").system
    h = load("systems/hgx_h800.yaml").system
    # the seeds' platform: 400 GB/s bidirectional per GPU, 250 ns per link, 128 B packets, 16 B flits
    assert d.nvlink.links_per_gpu * d.nvlink.bandwidth * 2 == 400e9
    assert h.nvlink.links_per_gpu * h.nvlink.bandwidth == d.nvlink.links_per_gpu * d.nvlink.bandwidth
    assert (d.nvlink.latency, d.nvlink.max_payload_bytes, d.nvlink.flit_bytes) == (250_000, 128, 16)
    assert d.switch.count == 4 and d.num_gpus == 8


def test_layer_table_systems_and_json(tmp_path):
    """--systems picks <model>_<tokens>_<scheme>_<system>.yaml; --json writes one object per run
    (reusing finished runs' stats.json stamped with their inputs' digest, so nothing is simulated
    here)."""
    layer_table, run_cache = _tool_module("layer_table"), _tool_module("run_cache")
    out = tmp_path / "runs"
    for scheme, layer_us in (("deepep", 300.0), ("moehub", 200.0)):
        name = f"deepseek_v3_1024_{scheme}_hgx_h800"
        d = out / name
        d.mkdir(parents=True)
        stats = {"system.moe.layer_time_us": {"value": layer_us},
                 "system.moe.dispatch_link_efficiency": {"value": 0.5}}
        (d / "stats.json").write_text(json.dumps(stats))
        digest = run_cache.run_inputs_digest(layer_table.LAYER_DIR / f"{name}.yaml", [])
        (d / run_cache.STAMP).write_text(digest + "\n")
    js = tmp_path / "t.json"
    r = subprocess.run([sys.executable, "tools/layer_table.py", "--models", "deepseek_v3",
                        "--tokens", "1024", "--schemes", "deepep", "moehub", "--systems", "hgx_h800",
                        "--outdir", str(out), "--json", str(js)], cwd=REPO, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    rows = json.loads(js.read_text())
    assert [(o["scheme"], o["system"], o["tokens_per_gpu"]) for o in rows] == [
        ("deepep", "hgx_h800", 1024), ("moehub", "hgx_h800", 1024)]
    assert rows[0]["layer_us"] == 300.0 and rows[1]["dispatch_link_eff"] == 0.5
    assert rows[0]["expert_us"] is None
    assert "| deepseek_v3 | 1024 | deepep | hgx_h800 | 300.0 |" in r.stdout and "1.50x" in r.stdout
    r = subprocess.run([sys.executable, "tools/layer_table.py", "--systems", "nowhere",
                        "--outdir", str(out)], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 2 and "_nowhere.yaml" in r.stderr


def test_layer_table_hub_design_variants(tmp_path):
    """Scheme moehub is the published design the layer configs extend; moehub_first and
    moehub_expert run the same moehub config with configs/hub/designs/{first_reading,
    expert_order}.yaml put on top as --set overrides, in their own output folders, and every
    baseline line gets one speedup column per moehub design."""
    layer_table, run_cache = _tool_module("layer_table"), _tool_module("run_cache")
    config = layer_table.LAYER_DIR / "deepseek_v3_1024_moehub.yaml"
    published = load("experiments/layer/deepseek_v3_1024_moehub.yaml")
    first = load("experiments/layer/deepseek_v3_1024_moehub.yaml",
                 *layer_table.design_sets("moehub_first"))
    expert = load("experiments/layer/deepseek_v3_1024_moehub.yaml",
                  *layer_table.design_sets("moehub_expert"))
    design = lambda c: (c.system.gpu.hub.moe.rpm.schedule, c.system.gpu.hub.moe.aau.overflow,
                        c.system.gpu.hub.moe.dam.consumers, c.system.gpu.hub.moe.dam.order,
                        c.workload.layer.moehub.stores)
    assert design(published) == ("paper", "spill", "launch", "ready", "row_sparse")
    assert design(first) == ("arrival", "stall", "claim", "ready", "send_to_expert")
    assert first.system.gpu.hub.moe.aau.record_table_entries == 8192
    assert design(expert) == ("paper", "spill", "launch", "expert", "row_sparse")
    assert layer_table.design_sets("deepep") == []
    out = tmp_path / "runs"
    for scheme, layer_us in (("deepep", 300.0), ("moehub", 250.0), ("moehub_first", 200.0),
                             ("moehub_expert", 150.0)):
        point = ("deepseek_v3", 1024, scheme, "dgx_h100")
        d = out / layer_table.run_name(*point)
        d.mkdir(parents=True)
        (d / "stats.json").write_text(json.dumps({"system.moe.layer_time_us": {"value": layer_us}}))
        name = layer_table.config_name(*point)
        digest = run_cache.run_inputs_digest(layer_table.LAYER_DIR / f"{name}.yaml",
                                             layer_table.design_sets(scheme))
        (d / run_cache.STAMP).write_text(digest + "\n")
    assert sorted(p.name for p in out.iterdir()) == [
        "deepseek_v3_1024_deepep", "deepseek_v3_1024_moehub", "deepseek_v3_1024_moehub_expert",
        "deepseek_v3_1024_moehub_first"]
    r = subprocess.run([sys.executable, "tools/layer_table.py", "--models", "deepseek_v3",
                        "--tokens", "1024", "--schemes", "deepep", "moehub", "moehub_first",
                        "moehub_expert", "--outdir", str(out)], cwd=REPO, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert "moehub speedup | moehub_first speedup | moehub_expert speedup |" in r.stdout
    assert "| 1.20x | 1.50x | 2.00x |" in r.stdout     # 300 / 250, 300 / 200, 300 / 150
    assert config.is_file()


def _tool_module(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_layer_table_reuses_a_run_only_from_the_same_inputs(tmp_path):
    """A finished run is reused only when its stamp matches the config, the overrides and the
    sources: another --set, a missing stamp or an edited source file means the stats are stale
    (tools/run_cache.py, shared by layer_table.py, dysharp_table.py and e2e.py)."""
    layer_table, run_cache = _tool_module("layer_table"), _tool_module("run_cache")
    config = layer_table.LAYER_DIR / "deepseek_v3_1024_moehub.yaml"
    digest = run_cache.run_inputs_digest(config, [])
    assert digest == run_cache.run_inputs_digest(config, [])
    assert digest != run_cache.run_inputs_digest(config, ["workload.layer.gemm_swizzle=1"])
    assert digest != run_cache.run_inputs_digest(layer_table.LAYER_DIR / "deepseek_v3_1024_deepep.yaml", [])
    d = tmp_path / "run"
    d.mkdir()
    (d / "stats.json").write_text(json.dumps({"system.moe.layer_time_us": {"value": 1.0}}))
    (d / run_cache.STAMP).write_text(digest + "\n")
    stats, _, how = layer_table.run_one(config, d, False, [])
    assert how == "reused" and stats["system.moe.layer_time_us"]["value"] == 1.0
    (d / run_cache.STAMP).write_text(run_cache.run_inputs_digest(config, ["scheme=deepep"]) + "\n")
    stats, _, how = layer_table.run_one(config, d, False, ["workload.layer.no_such_key=1"])
    assert stats is None and "no_such_key" in how          # stale: re-run (here a bad override)
    src = tmp_path / "tree"   # an edited kernel file changes the sources' digest
    (src / "workloads" / "kernels").mkdir(parents=True)
    kernel = src / "workloads" / "kernels" / "k.s"
    kernel.write_text("mov r1, 1\n")
    before = tree_digest(src, ["workloads"])
    kernel.write_text("mov r1, 2\n")
    assert tree_digest(src, ["workloads"]) != before


# ------------------------------------------------------------- where link writes land; RPM packets
@pytest.mark.parametrize("scheme", ["moehub", "deepep"])
def test_l2_write_back_keeps_the_layer_exact_and_moves_the_same_bytes(scheme):
    """link_writes: write_back only changes when a write frees its link buffer: the output is the
    NumPy reference's, and HBM sees the same bytes written (the write-back is still charged)."""
    # deepep: rings that never fill, so its combine senders read each ring head once per chunk
    # (head_poll remote polls again while a ring is full: as often as the timing makes it, and
    # each read's answer is an 8 B write into the sender's memory)
    extra = ("workload.layer.deepep.ring_rows=64",) if scheme == "deepep" else ()
    hbm = simulate(FUNCTIONAL, f"scheme={scheme}", *extra).stats
    wb = simulate(FUNCTIONAL, f"scheme={scheme}", "system.gpu.l2.link_writes=write_back",
                  *extra).stats
    assert wb["system.moe.output_max_abs_error"] == hbm["system.moe.output_max_abs_error"] == 0.0
    for g in range(4):
        assert wb[f"system.gpu{g}.hbm.write_bytes"] == hbm[f"system.gpu{g}.hbm.write_bytes"]
        assert hbm[f"system.gpu{g}.l2.link_write_bytes"] == 0
        # every byte that arrived from a link went through the L2
        assert wb[f"system.gpu{g}.l2.link_write_bytes"] > 0
    received = sum(wb[f"system.gpu{g}.l2.link_write_bytes"] for g in range(4))
    if scheme == "moehub":
        # rows (data, without their stream headers), one record per row, the combine's puts
        # (row bytes each, 8 B flag stores are the only other writes from links)
        s = wb
        rows = sum(s[f"system.gpu{g}.hub.aau.records_written"] for g in range(4))
        data = sum(s[f"system.gpu{g}.hub.rpm.payload_bytes"] for g in range(4)) - rows * 16
        assert received >= data + rows * sim_record_bytes()


def sim_record_bytes():
    return load(FUNCTIONAL).system.gpu.hub.moe.aau.record_bytes


def test_rpm_packet_bytes_sets_the_packet_size():
    s = simulate(FUNCTIONAL, "system.gpu.hub.moe.rpm.packet_bytes=64B").stats
    big = simulate(FUNCTIONAL).stats
    assert s["system.moe.output_max_abs_error"] == 0.0
    for g in range(4):
        pre = f"system.gpu{g}.hub.rpm"
        assert s[f"{pre}.payload_bytes"] == big[f"{pre}.payload_bytes"]   # the same stream
        # full packets carry 64 B (one 16 B header flit each): at least payload / 64 packets
        assert s[f"{pre}.packets"] * 64 >= s[f"{pre}.payload_bytes"]
        assert s[f"{pre}.packets"] > big[f"{pre}.packets"]
        assert s[f"{pre}.payload_efficiency"] <= 64 / (64 + 16)


def test_rpm_packets_never_exceed_a_link_packet():
    """rpm.packet_bytes is a cap, as the link payload and the merge buffer are: with 64 B link
    packets the RPM sends the same packets whether packet_bytes is 256 B or 64 B."""
    a = simulate(FUNCTIONAL, "system.nvlink.max_payload_bytes=64B").stats
    b = simulate(FUNCTIONAL, "system.nvlink.max_payload_bytes=64B",
                 "system.gpu.hub.moe.rpm.packet_bytes=64B").stats
    assert a["system.moe.output_max_abs_error"] == 0.0
    for g in range(4):
        pre = f"system.gpu{g}.hub.rpm"
        assert a[f"{pre}.packets"] == b[f"{pre}.packets"]
        assert a[f"{pre}.wire_bytes"] == b[f"{pre}.wire_bytes"]
