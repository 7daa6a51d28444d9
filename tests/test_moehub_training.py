"""MoE-Hub's backward (workload.layer.passes: training; moehub_arch/workloads/moehub_backward.py,
workloads/kernels/moehub/backward.s): the gradient rows through the hub's gradient windows in a
second round of its streams (notify_ready.reopen), with every hub design the forward offers
there; exact gradients, rows conserved, both rounds visible in the hub's counters, both engines
identical, and the configurations without a backward refused by name."""
import json

import pytest

from conftest import REPO, drive_both_engines, run_cli, simulate

GRADIENTS = ("dx", "dw", "dw_gate", "dw_up", "dw_down", "ds_gate", "ds_up", "ds_down")
PAIRS = 4 * 64 * 2                      # functional.yaml: GPUs x tokens x top-k
ROWSP = "workload.layer.moehub.stores=row_sparse"
# configs/hub/designs/published.yaml as overrides (the layer tables' hub design)
PUBLISHED = ("system.gpu.hub.moe.rpm.schedule=paper", "system.gpu.hub.moe.aau.overflow=spill",
             "system.gpu.hub.moe.aau.record_table_entries=1024",
             "system.gpu.hub.moe.dam.consumers=launch", ROWSP)


def _training(*sets):
    return simulate("experiments/functional.yaml", "scheme=moehub",
                    "workload.layer.passes=training", *sets).stats


@pytest.mark.parametrize("sets", [
    (ROWSP,),                                                      # the published ISA's stores
    PUBLISHED,                                                     # the published hub design
    ("system.gpu.hub.moe.aau.overflow=spill",                      # a row table that spills
     "system.gpu.hub.moe.aau.record_table_entries=16"),
    ("system.gpu.hub.moe.dam.order=expert",),                      # tiles handed out per expert
    ("workload.layer.moehub.multi_expert_store=true",),            # forward: a row per GPU
    ("system.num_gpus=8",),                                        # one expert per GPU
    ("workload.layer.routing.kind=skewed", "workload.layer.routing.gini=0.74"),   # idle experts
], ids=["row_sparse", "published", "spill", "order_expert", "multi_expert_store",
        "one_local_expert", "skewed"])
def test_moehub_backward_exact_with_each_hub_design(sets):
    st = _training(*sets)
    pairs = PAIRS * (2 if "system.num_gpus=8" in sets else 1)
    assert st["system.moe.output_max_abs_error"] == 0.0
    for g in GRADIENTS:
        assert st[f"system.moe.backward.{g}_max_abs_error"] == 0.0, g
    for name in ("dispatched", "computed", "combined"):
        assert st[f"system.moe.backward.rows_{name}"] == pairs, name
    # the forward's counts leave the gradient windows' rows out
    assert st["system.moe.rows_received"] == pairs


def test_moehub_backward_is_a_second_round_of_the_hub():
    """Each hub receives two ends of stream from every GPU (the forward's round and the
    backward's), its RPM takes every pair's row twice (x, then dO) and sends the input gradients
    home with send_home; the backward has no mediation and its gradient dispatch is its own
    kernel (inside the combine's backward), not a forward one."""
    st = _training()
    for g in range(4):
        assert st[f"system.gpu{g}.hub.dam.eos_received"] == 2 * 4
    accepted = sum(st[f"system.gpu{g}.hub.rpm.rows_accepted"] for g in range(4))
    assert accepted == 2 * PAIRS
    assert sum(st[f"system.gpu{g}.hub.combine_rows"] for g in range(4)) == 2 * PAIRS
    assert st["system.moe.phase.mediation_us"] == 0
    assert st["system.moe.backward.kernel.moehub_combine_bwd_us"] > 0
    assert st["system.moe.backward.kernel.moehub_bwd_place_us"] > 0
    assert "system.moe.kernel.moehub_combine_bwd_us" not in st


def test_moehub_forward_unchanged_by_keeping_the_activations():
    """Training keeps the activations beside the windows' rows (moehub_expert_train): the
    forward's output stays exact and its rows counted once."""
    st = _training()
    fwd = simulate("experiments/functional.yaml", "scheme=moehub").stats
    assert st["system.moe.output_max_abs_error"] == fwd["system.moe.output_max_abs_error"] == 0
    for name in ("sent", "received", "computed", "combined"):
        assert st[f"system.moe.rows_{name}"] == fwd[f"system.moe.rows_{name}"] == PAIRS


DRIVER = r"""
import json, sys
sys.path.insert(0, {tests!r})
from conftest import simulate, mini_system
st = simulate("experiments/functional.yaml", "scheme=moehub", "workload.layer.passes=training",
              *mini_system(num_gpus=2, num_sms=4), "workload.layer.tokens_per_gpu=16",
              "workload.layer.moehub.dispatch_tbs=2", "workload.layer.moehub.expert_tbs=2").stats
print(json.dumps({{s.name: float(s.value) for s in st if not s.name.startswith("host")}}))
"""


def test_moehub_training_engines_identical():
    numba, python = drive_both_engines(DRIVER.format(tests=str(REPO / "tests")))
    assert numba == python
    assert numba["system.moe.backward.dx_max_abs_error"] == 0.0
    assert numba["system.moe.backward.dw_down_max_abs_error"] == 0.0
    assert numba["system.moe.backward.rows_combined"] == 2 * 16 * 2


def test_moehub_per_node_training_is_an_error(tmp_path):
    r = run_cli("run", "configs/experiments/hiermoe/functional_tiny_2x2.yaml",
                "--set", "scheme=moehub", "--set", "system.gpu.hub.moe.internode=per_node",
                "--set", "workload.layer.passes=training", "-o", str(tmp_path / "x"))
    assert r.returncode == 2
    assert "workload.layer.passes" in r.stderr and "internode" in r.stderr
    assert "Traceback" not in r.stderr


def test_reopen_before_the_round_ended_is_an_error(tmp_path):
    """notify_ready.reopen while this GPU's streams of the first round are still open (no
    notify_ready.eos yet): the run stops with the error naming the instruction."""
    kernel = tmp_path / "reopen.s"
    kernel.write_text(".kernel early\n    notify_ready.reopen\n    exit\n")
    cfg = tmp_path / "reopen.yaml"
    cfg.write_text(json.dumps({
        "extends": str(REPO / "configs" / "systems" / "dgx_h100.yaml"),
        "workload": {"kernel_files": [str(kernel)],
                     "moe": {"num_experts": 8, "window_rows": 64, "row_bytes": "128B"},
                     "launches": [{"kernel": "early", "grid": 1}]}}))
    r = run_cli("run", str(cfg), "-o", str(tmp_path / "out"))
    assert r.returncode != 0
    assert "notify_ready.reopen" in r.stderr
    assert "Traceback" not in r.stderr
