"""The DAM's expert order (system.gpu.hub.moe.dam.order: expert, components/moehub/dam.py): an
expert's ready tiles are held until expert_tiles of them are ready (or its stream ended) and then
handed out together, column job outer, so the blocks running at one time share the expert's weight
column tiles through the L2.

A tiny layer without shared experts (so every mma operand is a routed expert's) on an L2 smaller
than one expert's weights: with balanced routing every expert gets exactly 4 tiles, and with
expert_tiles 4 the DAM-launched consumers read each expert's weights and each row tile from HBM
exactly once, while the ready order re-reads weights. The output is bit-identical to the NumPy
reference in both orders, with both consumer paths, on uniform and skewed routing; the engines
agree; order: ready is the DAM as before.
"""
import pytest

from conftest import REPO, drive_both_engines, load, simulate

FUNCTIONAL = "experiments/functional.yaml"
H, I, E, K, GPUS, TOKENS, TILE, NT = 64, 128, 8, 2, 4, 64, 16, 32
LOCAL = E // GPUS
MODEL = f"""model:
  name: tiny_routed
  hidden: {H}
  expert_ffn: {I}
  experts: {E}
  top_k: {K}
  shared_experts: 0
  shared_expert_ffn: 0
  moe_layers: 1
  layers: 1
  dtype: bf16
  router: {{kind: topk_softmax, normalize: true, scale: 1.0}}
"""
# an expert's weights: gate and up [H][I] and down [I][H], bf16 = 48 KiB; the L2 holds 40 KiB (a
# group's working set - 4 row tiles and a weight column tile - fits; an expert's weights do not)
WEIGHT_BYTES = 3 * H * I * 2
L2 = "system.gpu.l2.capacity=40KiB"


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "tiny_routed.yaml"
    path.write_text(MODEL)
    return path


def _overrides(model, order, consumers, routing="balanced", tiles=4, mode="functional"):
    return (f"workload.layer.model={model}", f"workload.layer.routing.kind={routing}",
            f"system.gpu.hub.moe.dam.consumers={consumers}", f"workload.mode={mode}",
            f"system.gpu.hub.moe.dam.order={order}", f"system.gpu.hub.moe.dam.expert_tiles={tiles}",
            L2)


def _operand_hbm_bytes(s, g):
    """GPU g's mma operand bytes that came from HBM: every operand read either hit the L2 or was
    read from HBM (cold or missed); the total is the jobs' operand bytes, the same in every order."""
    jobs_gate_up, jobs_down = I // NT, H // NT
    rows = s[f"system.gpu{g}.hub.aau.allocations"]
    tiles = rows // TILE          # balanced routing: whole tiles
    # a gate/up job reads its A tile once and its gate and up weight tiles; a down job reads the
    # tile's activations and one weight tile
    total = tiles * (jobs_gate_up * (TILE * H * 2 + 2 * H * NT * 2)
                     + jobs_down * (TILE * I * 2 + I * NT * 2))
    return total - s[f"system.gpu{g}.l2.hit_bytes"]


@pytest.mark.parametrize("consumers", ["launch", "claim"])
@pytest.mark.parametrize("routing", ["uniform", "skewed"])
def test_expert_order_is_exact(model_file, consumers, routing):
    for order in ("ready", "expert"):
        sim = simulate(FUNCTIONAL, *_overrides(model_file, order, consumers, routing, tiles=2))
        assert sim.stats["system.moe.output_max_abs_error"] == 0.0   # invariants ran too


@pytest.fixture(scope="module")
def balanced(model_file):
    out = {}
    for order in ("ready", "expert"):
        out[order] = simulate(FUNCTIONAL, *_overrides(model_file, order, "launch")).stats
    return out


def test_expert_order_reads_each_weight_once(balanced):
    for order, s in balanced.items():
        assert s["system.moe.output_max_abs_error"] == 0.0
        for g in range(GPUS):
            # balanced: every expert gets TOKENS * GPUS * K / E rows, 4 tiles of 16
            assert s[f"system.gpu{g}.hub.aau.allocations"] == LOCAL * 4 * TILE
    minimum = LOCAL * WEIGHT_BYTES + LOCAL * 4 * (TILE * H * 2 + TILE * I * 2)
    for g in range(GPUS):
        s = balanced["expert"]
        # each expert's 4 tiles start as one group: 4 tiles handed out, one group counter
        assert s[f"system.gpu{g}.hub.dam.groups_started"] == LOCAL * 4
        # every weight column tile, row tile and activation tile read from HBM exactly once
        assert _operand_hbm_bytes(s, g) == minimum
        # tile by tile the experts' weights cycle through the 40 KiB L2 and are read again
        assert _operand_hbm_bytes(balanced["ready"], g) == 393216 == minimum * 8 // 3
    assert sum(balanced["ready"][f"system.gpu{g}.l2.miss_bytes"] for g in range(GPUS)) \
        > sum(balanced["expert"][f"system.gpu{g}.l2.miss_bytes"] for g in range(GPUS))


DRIVER = r"""
import json, sys
sys.path.insert(0, {tests!r})
from conftest import model_stats, simulate
from test_dam_expert_order import FUNCTIONAL, _overrides
out = {{}}
for consumers in ("launch", "claim"):
    s = simulate(FUNCTIONAL, *_overrides({model!r}, "expert", consumers, "skewed", 2,
                                         "timing")).stats
    out[consumers] = model_stats(s)
print(json.dumps(out, default=float))
"""


def test_engines_agree_on_the_expert_order(model_file):
    numba, python = drive_both_engines(DRIVER.format(tests=str(REPO / "tests"),
                                                     model=str(model_file)))
    assert numba == python


def test_expert_order_needs_room_for_the_held_tiles(model_file):
    """With a stalling row table, an expert holds up to expert_tiles - 1 ready tiles while it
    waits for its group: the loader asks for that much more table."""
    from moehub_arch.config import ConfigError
    with pytest.raises(ConfigError, match="expert_tiles = 4"):
        load(FUNCTIONAL, *_overrides(model_file, "expert", "launch"),
             "system.gpu.hub.moe.aau.record_table_entries=100")
    load(FUNCTIONAL, *_overrides(model_file, "expert", "launch"),
         f"system.gpu.hub.moe.aau.record_table_entries={LOCAL * (4 * TILE - 1) + 1}")
