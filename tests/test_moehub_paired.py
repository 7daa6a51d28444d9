"""MoE-Hub's paired allocation for the backward (system.gpu.hub.moe.aau.allocation: paired;
moehub_arch/components/moehub/pairing.py): the AAU puts each gradient row at the slot its forward
row got, from a pairing table written at the forward rows' completion, and the DAM makes each
forward tile ready once its gradient rows landed. Exact gradients with each hub design, the table
written and read once per pair, no placement copy, both engines identical, the published
allocator untouched, and the configurations without a forward to pair with refused by name."""
import pytest

from conftest import REPO, drive_both_engines, run_cli
from test_moehub_training import (DRIVER as TRAINING_DRIVER, GRADIENTS, PUBLISHED, ROWSP,
                                  _training)

GPUS, TOKENS, TOPK = 4, 64, 2           # experiments/functional.yaml
PAIRS = GPUS * TOKENS * TOPK
PAIRED = "system.gpu.hub.moe.aau.allocation=paired"


def _sum(st, stat):
    return sum(st[f"system.gpu{g}.hub.{stat}"] for g in range(GPUS))


@pytest.mark.parametrize("sets", [
    (),                                                  # first reading: send, stall, claim
    PUBLISHED,                                                     # the published design + paired
    ("system.gpu.hub.moe.aau.overflow=spill",                      # a row table that spills
     "system.gpu.hub.moe.aau.record_table_entries=16", ROWSP),
    ("workload.layer.routing.kind=skewed", "workload.layer.routing.gini=0.74"),   # idle experts
], ids=["first_reading", "published", "spill_rowsp", "skewed"])
def test_paired_backward_exact_with_each_hub_design(sets):
    st = _training(PAIRED, *sets)
    assert st["system.moe.output_max_abs_error"] == 0.0
    for g in GRADIENTS:
        assert st[f"system.moe.backward.{g}_max_abs_error"] == 0.0, g
    for name in ("dispatched", "computed", "combined"):
        assert st[f"system.moe.backward.rows_{name}"] == PAIRS, name
    assert st["system.moe.rows_received"] == PAIRS
    # one table entry written per forward row, one read per gradient row, each pair_entry_bytes
    assert _sum(st, "aau.pair_writes") == _sum(st, "aau.pair_reads") == PAIRS
    assert _sum(st, "aau.pair_unindexed") == 0
    assert _sum(st, "aau.pair_hbm_bytes") == 2 * PAIRS * 4
    # the table: GPUs x (tokens x top-k) homes of 4 B on every GPU
    assert st["system.gpu0.hub.aau.pair_table_bytes"] == GPUS * TOKENS * TOPK * 4
    # both rounds allocate every pair's row
    assert _sum(st, "aau.allocations") == 2 * PAIRS


def test_paired_backward_copies_nothing():
    """No placement copy: moehub_bwd_ready claims the paired tiles (as many as the forward's,
    each marked once), and the placers and the position pass do not run."""
    st = _training(PAIRED)
    assert st["system.moe.backward.kernel.moehub_bwd_ready_us"] > 0
    for kernel in ("moehub_bwd_place", "moehub_bwd_positions", "moehub_bwd_claim"):
        assert f"system.moe.backward.kernel.{kernel}_us" not in st, kernel
    bump = _training()
    assert bump["system.moe.backward.kernel.moehub_bwd_place_us"] > 0
    # the gradient windows hold as many tiles as the forward's: same claims as the bump design's
    assert _sum(st, "dam.claims") == _sum(bump, "dam.claims")
    # readiness per forward tile: a partial tile needs no end of stream, so every gradient
    # window's claimer is told it ended (zero rows) once all its tiles were claimed
    assert _sum(st, "dam.zero_claims") == _sum(bump, "dam.zero_claims")
    # the published allocator neither writes nor reads a table
    assert _sum(bump, "aau.pair_writes") == _sum(bump, "aau.pair_reads") == 0
    assert bump["system.gpu0.hub.aau.pair_table_bytes"] == 0


def test_paired_costs_a_table_read_per_gradient_row():
    """Each gradient row waits for its table entry (an HBM read): at least the HBM latency."""
    st = _training(PAIRED)
    reads, wait = _sum(st, "aau.pair_reads"), _sum(st, "aau.pair_read_wait_ticks")
    assert reads == PAIRS and wait > 0
    assert st["system.gpu0.hub.dam.sram_bytes"] > _training()["system.gpu0.hub.dam.sram_bytes"]


def test_on_chip_table_costs_sram_not_hbm():
    """pair_table: on_chip - the same placement (exact, every pair looked up), no HBM access and
    no wait; the AAU's SRAM grows by the table (GPUs x pairs per GPU x 4 B)."""
    st = _training(PAIRED, "system.gpu.hub.moe.aau.pair_table=on_chip")
    for g in GRADIENTS:
        assert st[f"system.moe.backward.{g}_max_abs_error"] == 0.0, g
    assert _sum(st, "aau.pair_reads") == PAIRS
    assert _sum(st, "aau.pair_read_wait_ticks") == _sum(st, "aau.pair_hbm_bytes") == 0
    assert st["system.gpu0.hub.aau.sram_bytes"] == \
        _training()["system.gpu0.hub.aau.sram_bytes"] + GPUS * TOKENS * TOPK * 4


# test_moehub_training's two-engine driver, with the paired allocation
DRIVER = TRAINING_DRIVER.replace('"workload.layer.passes=training",',
                                 '"workload.layer.passes=training", "' + PAIRED + '",')


def test_paired_engines_identical():
    assert PAIRED in DRIVER
    numba, python = drive_both_engines(DRIVER.format(tests=str(REPO / "tests")))
    assert numba == python
    assert numba["system.moe.backward.dx_max_abs_error"] == 0.0
    assert numba["system.moe.backward.dw_down_max_abs_error"] == 0.0
    assert numba["system.moe.backward.rows_combined"] == 2 * 16 * 2
    assert numba["system.gpu0.hub.aau.pair_reads"] + numba["system.gpu1.hub.aau.pair_reads"] \
        == 2 * 16 * 2


@pytest.mark.parametrize("sets, said", [
    ((), "passes"),                                             # a forward alone
    (("scheme=deepep", "workload.layer.passes=training"), "deepep"),   # no hub layer
    (("workload.layer.passes=training", "system.gpu.hub.moe.internode=per_node"), "per_node"),
], ids=["forward_only", "other_scheme", "per_node"])
def test_paired_without_a_forward_to_pair_with_is_an_error(tmp_path, sets, said):
    config = "configs/experiments/hiermoe/functional_tiny_2x2.yaml" if "per_node" in said \
        else "configs/experiments/functional.yaml"
    args = ["run", config, "--set", "scheme=moehub", "--set", PAIRED]
    for s in sets:
        args += ["--set", s]
    r = run_cli(*args, "-o", str(tmp_path / "x"))
    assert r.returncode == 2, r.stderr
    assert "system.gpu.hub.moe.aau.allocation" in r.stderr and said in r.stderr
    assert "Traceback" not in r.stderr


def test_e2e_hub_design_is_checked(tmp_path):
    """e2e --hub-design names a design of configs/hub/designs/ and belongs to --training."""
    r = run_cli("e2e", "--model", "qwen3_30b_a3b", "--scheme", "moehub", "--quick",
                "--training", "--hub-design", "no_such", "-o", str(tmp_path))
    assert r.returncode == 2 and "no_such" in r.stderr and "paired" in r.stderr
    r = run_cli("e2e", "--model", "qwen3_30b_a3b", "--scheme", "moehub", "--quick",
                "--hub-design", "paired", "-o", str(tmp_path))
    assert r.returncode == 2 and "--hub-design" in r.stderr and "--training" in r.stderr
