"""DySHARP's token tracker tile table (system.switch.nvls.dysharp.tracker_tiles, the paper's 1024
entries): the fused layer needs an entry per row tile that rows land in (the most rows an expert
receives, workload.multicast[].layout_rows), not per tile of the layouts' stride (which spans the
algebraic range); a table one entry short is a clear input error; a layout capacity below the
rows that arrive is a run error; the paper's S shape at its sequence length now plans."""
import pytest

import conftest
from conftest import simulate
from moehub_arch.workloads.layer import MoeLayer, expert_load_max

CONFIG = "experiments/functional.yaml"


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


def test_a_table_exactly_as_large_as_needed_runs_exactly(tmp_path):
    n = need(MoeLayer(conftest.load(CONFIG, "scheme=dysharp")))
    sim = simulate(CONFIG, "scheme=dysharp", f"system.switch.nvls.dysharp.tracker_tiles={n}")
    assert sim.stats["system.moe.output_max_abs_error"] == 0.0
    r = conftest.run_cli("run", "configs/experiments/functional.yaml", "--set", "scheme=dysharp",
                         "--set", f"system.switch.nvls.dysharp.tracker_tiles={n - 1}",
                         "-o", tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "system.switch.nvls.dysharp.tracker_tiles" in r.stderr
    assert f"need {n}" in r.stderr


def test_a_layout_capacity_below_the_arriving_rows_is_a_run_error(tmp_path):
    # the micro-benchmark sends 16 rows to each target: a capacity of 8 rows fills up
    r = conftest.run_cli("run", "configs/ubench/dymultimem.yaml", "--set",
                         "workload.multicast.0.layout_rows=8", "-o", tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "receive layout is full" in r.stderr
    r = conftest.run_cli("run", "configs/ubench/dymultimem.yaml", "--set",
                         "workload.multicast.0.layout_rows=100000", "-o", tmp_path / "b")
    assert r.returncode == 2 and "workload.multicast[0].layout_rows" in r.stderr


@pytest.mark.parametrize("model,tokens,fits", [("dysharp_s", 2048, True),
                                               ("dysharp_l", 8192, True),
                                               ("dysharp_l_k32", 8192, False)])
def test_the_papers_shapes_against_its_1024_entry_table(model, tokens, fits):
    cfg = conftest.load("experiments/dysharp/base_gh200_nvl32.yaml", "scheme=dysharp",
                        f"workload.layer.model={model}", f"workload.layer.tokens_per_gpu={tokens}",
                        "system.num_gpus=32")
    assert cfg.system.switch.nvls.dysharp.tracker_tiles == 1024
    if fits:
        layer = MoeLayer(cfg)
        assert need(layer) <= 1024
    else:
        with pytest.raises(Exception, match="tracker_tiles"):
            MoeLayer(cfg)
