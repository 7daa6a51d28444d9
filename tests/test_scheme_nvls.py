"""Scheme nvls (DySHARP's NVLink SHARP baseline: all-gather dispatch, reduce-scatter combine over
static multicast objects): the layer output equals the NumPy reference in the switch's reduction
order, token accounting is exact, every multicast copy and reduction is accounted for, the
traffic does not depend on the routing, both engines agree, and bad input is an error."""
import pytest

import conftest
from conftest import model_stats, simulate

CONFIG = "experiments/functional.yaml"
P, T, K, H = 4, 64, 2, 64                # configs/experiments/functional.yaml (tiny_functional)


def run(*overrides):
    return simulate(CONFIG, "scheme=nvls", *overrides)


@pytest.fixture(scope="module")
def uniform():
    return run()


def _sum(sim, pattern):
    return sum(int(x.value) for x in sim.stats.match(pattern))


def test_output_and_accounting(uniform):
    s = uniform.stats
    assert s["system.moe.output_max_abs_error"] == 0.0
    assert s["system.moe.output_max_abs_reference"] > 1.0
    for name in ("sent", "received", "computed", "combined"):
        assert s[f"system.moe.rows_{name}"] == P * T * K, name


def test_every_token_reaches_every_gpu_and_every_row_is_reduced(uniform):
    sim = uniform
    # the all-gather: every GPU holds every GPU's rows (bit for bit)
    x = [sim.read_buffer(g, "x", "bf16") for g in range(P)]
    for g in range(P):
        gathered = sim.read_buffer(g, "nv_xall", "bf16").reshape(P, -1)
        for src in range(P):
            assert (gathered[src][:T * H] == x[src][:T * H]).all(), (g, src)
    # every multicast packet went to all P members; every ld_reduce chunk read all P members
    st_packets = int(sim.state.gpu.mm_tx_st.sum())
    assert _sum(sim, "system.switch*.port*.nvls.multicast_copies") == P * st_packets > 0
    ld = int(sim.state.gpu.mm_tx_ld.sum())
    assert _sum(sim, "system.switch*.port*.nvls.reductions") == ld > 0
    # the reduce-scatter reduces each GPU's own T rows once, one entry per store packet
    line = min(sim.cfg.system.nvlink.store_packet_bytes, sim.cfg.system.nvlink.max_payload_bytes)
    assert ld == P * T * H * 2 // line
    assert int(sim.state.gpu.mm_reads_rx.sum()) == P * ld


def test_skewed_routing_same_traffic(uniform):
    sim = run("workload.layer.routing.kind=skewed")
    s, u = sim.stats, uniform.stats
    assert s["system.moe.output_max_abs_error"] == 0.0
    assert s["system.moe.rows_combined"] == P * T * K
    # all-gather and reduce-scatter move every token to every GPU and back, whatever the routing
    for d in ("up", "down"):
        assert s[f"system.moe.nvlink.{d}_wire_bytes"] == u[f"system.moe.nvlink.{d}_wire_bytes"]


def test_engines_agree():
    small = ("workload.layer.tokens_per_gpu=8", "system.num_gpus=2", "system.gpu.num_sms=4",
             "workload.layer.combine_tbs=2", "workload.layer.shared_tbs=2",
             "workload.layer.nvls.select_tbs=2", "workload.layer.nvls.channels=2",
             "workload.layer.nvls.chunk_bytes=256B")
    a = model_stats(run(*small).stats)
    b = model_stats(run(*small, "run.engine=python").stats)
    assert a == b
    assert a["system.moe.output_max_abs_error"] == 0.0


@pytest.mark.parametrize("override,key", [
    ("workload.layer.nvls.channels=0", "workload.layer.nvls.channels"),
    ("system.switch.topology=bridge_pairs", "system.switch.topology"),
    ("system.num_gpus=1", "system.num_gpus"),
])
def test_bad_input_is_exit_2(override, key, tmp_path):
    r = conftest.run_cli("run", "configs/experiments/functional.yaml", "--set", "scheme=nvls",
                         "--set", override, "-o", tmp_path)
    assert r.returncode == 2, r.stderr
    assert key in r.stderr and "Traceback" not in r.stderr
