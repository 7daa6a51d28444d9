"""DySHARP's combine in the order tokens become ready (workload.layer.dysharp.combine_order: ready,
components/dysharp_ready.py): the source's token tracker appends a token to a ready queue when its
last ready word is set, and the combine blocks take the queue's positions in turn. On the
functional fused layer (4 GPUs x 64 tokens, top-2): the output equals the NumPy reference, every
token is queued exactly once, in an order that is not token order, the same packets go on the wire
as in token order and only the combine's timing moves - pinned to the tick, the same on both
engines; the default (token order) does not name a queue. A ready queue misdeclared is an input
error naming the key."""
import numpy as np
import pytest

import conftest
from conftest import simulate
from moehub_arch.checks import run_invariants
from moehub_arch.workloads.layer import MoeLayer

CONFIG = "experiments/functional.yaml"
READY = "workload.layer.dysharp.combine_order=ready"


def test_ready_order_is_exact_queues_every_token_once_and_moves_only_the_combine():
    sim = simulate(CONFIG, "scheme=dysharp", READY)
    s = conftest.model_stats(sim.stats)
    base = conftest.model_stats(simulate(CONFIG, "scheme=dysharp").stats)
    layer = MoeLayer(conftest.load(CONFIG, "scheme=dysharp"))
    P, T, k = layer.shape.num_gpus, layer.shape.tokens, layer.shape.top_k
    assert s["system.moe.output_max_abs_error"] == 0.0
    assert run_invariants(sim) == []
    assert s["simTicks"] == 45_845_894           # token order: 45_569_938 (test_dysharp_tracker)
    assert base["simTicks"] == 45_569_938
    orders = []
    for g in range(P):
        assert s[f"system.gpu{g}.dysharp.ready_queue_tokens"] == T
        queue = sim.read_buffer(g, "dy_rqueue", "i64")
        assert sorted(queue - 1) == list(range(T))       # each token once
        orders.append(queue - 1)
        assert (sim.read_buffer(g, "dy_tokready", "i64") == 1).all()
    # the queue's order is the readiness order, not token order
    assert any((np.diff(o) < 0).any() for o in orders)
    assert s["system.moe.rows_combined"] == P * T * k
    for key in ("system.moe.nvlink.up_wire_bytes", "system.moe.nvlink.down_wire_bytes",
                "system.moe.rows_sent", "system.moe.rows_combined"):
        assert s[key] == base[key], key
    # token order names no queue: no such stat, no such buffer
    assert not any("ready_queue" in name for name in base)


def test_ready_order_is_the_same_on_both_engines(tmp_path):
    stats = conftest.cli_stats_per_engine(
        "configs/" + CONFIG, tmp_path, "--set", "scheme=dysharp", "--set", READY,
        "--set", "workload.layer.tokens_per_gpu=16")
    assert stats["numba"]["system.gpu0.dysharp.ready_queue_tokens"] == 16
    assert stats["numba"]["system.moe.output_max_abs_error"] == 0.0
    assert stats["numba"] == stats["python"]


@pytest.mark.parametrize("sets,words", [
    (["workload.multicast.0.ready_words=counts"], "needs ready_count"),
    (["workload.multicast.0.ready_queue=counts"], "ready_queue and ready_count need ready_words"),
    (["workload.multicast.0.ready_words=layout", "workload.multicast.0.ready_count=1",
      "workload.multicast.0.ready_queue=counts"], "no control-region buffer 'layout'"),
    (["workload.multicast.0.ready_words=al", "workload.multicast.0.ready_count=1",
      "workload.multicast.0.ready_queue=counts"], "must hold one i64 per token")])
def test_a_misdeclared_ready_queue_is_an_input_error(tmp_path, sets, words):
    args = [a for s_ in sets for a in ("--set", s_)]
    r = conftest.run_cli("run", "configs/ubench/dymultimem.yaml", *args, "-o", tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "workload.multicast[0]" in r.stderr and words in r.stderr, r.stderr
