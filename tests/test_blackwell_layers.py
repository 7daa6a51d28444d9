"""Every MoE scheme computes a tiny functional layer exactly on both Blackwell systems: HGX B200 (8
GPUs) and all 72 GPUs of a GB200 NVL72 (docs/blackwell.md; 36 SMs per GPU there). The 72-GPU layer
is the case that a 62-rank mask word used to refuse (deepep, overlap and hiermoe keep a token's
destination ranks in rank-mask words, nvls and dysharp a multicast object's members in a per-GPU
table): it checks that wide expert parallelism runs every scheme, exactly against the NumPy
reference, with every token-expert pair sent, computed and combined once (and received once where
the scheme counts it).

The layer: workloads/models/tiny_functional_72e.yaml (H 64, I 128, 72 routed experts - 9 per GPU
on HGX B200, one per GPU on NVL72 - top-4, one shared expert), uniform routing, a few tokens per
GPU, the thread-block counts of configs/experiments/functional.yaml."""
import pytest

from conftest import CONFIGS

SCHEMES = ("moehub", "deepep", "overlap", "megatron", "tutel", "deepep_ll", "hiermoe", "nvls",
           "dysharp", "counted", "fastermoe", "ccfuser")
# (system file, GPUs, tokens per GPU, --set overrides): the NVL72's GPUs with 36 of their 148 SMs
# each - what this checks is the GPU count (the rank-mask words, the multicast tables); all 148
# SMs only add per-SM state and stats (196,000 stats against 80,000) and CPU time. 36 SMs hold
# deepep_ll's 132 dispatch blocks at once (4 a SM), which wait for each other (33 is the least)
SYSTEMS = {"hgx_b200": (8, 16, ()), "gb200_nvl72": (72, 4, ("system.gpu.num_sms=36",))}
TOP_K = 4


def run_layer(system, scheme):
    from moehub_arch.config import load_config
    from moehub_arch.simulation import Simulation
    gpus, tokens, sets = SYSTEMS[system]
    cfg = load_config(CONFIGS / "experiments" / "functional.yaml", [
        f"scheme={scheme}", f"system.num_gpus={gpus}",
        "workload.layer.model=tiny_functional_72e", f"workload.layer.tokens_per_gpu={tokens}",
        "workload.layer.counted.send_tbs=8",
        # capacity C = ceil(18 x T x 4 / 72) = T rows per (source, expert): tutel drops nothing,
        # so its output is the whole layer's
        "workload.layer.tutel.capacity_factor=18", *sets],
        system_file=CONFIGS / "systems" / f"{system}.yaml")
    sim = Simulation(cfg)
    sim.run()
    return sim, gpus, tokens


@pytest.mark.parametrize("system", sorted(SYSTEMS))
@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_computes_the_layer_exactly_on_blackwell(system, scheme):
    sim, gpus, tokens = run_layer(system, scheme)
    # the end-of-run invariants, the token accounting each scheme checks among them, hold
    assert sim.stopped is None and sim.violations == []
    s = {x.name: x.value for x in sim.stats}
    # every step the scheme counts row by row (ccfuser's expert GPU pulls its rows: no sender
    # counts them; tutel computes its capacity-padded rows) moved each token-expert pair once
    rows = [x for x in sim.stats if x.name.startswith("system.moe.rows_")
            and "must equal tokens x top-k x GPUs" in x.desc]
    assert s["system.moe.rows_combined"] == gpus * tokens * TOP_K       # nothing dropped
    for x in rows:
        assert x.value == gpus * tokens * TOP_K, x.name
    assert s["system.moe.output_max_abs_reference"] > 1.0          # real numbers, not zeros
    assert s["system.moe.output_max_abs_error"] == 0
