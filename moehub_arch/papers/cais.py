"""CAIS's evaluation grid (arXiv 2605.05628), as far as the simulator models it.

The paper: one DGX H100 (8 GPUs, 4 NVSwitches), tensor parallelism 8; Mega-GPT-4B, Mega-GPT-8B
and LLaMA-7B with hidden and FFN widths halved and the GPU's SMs halved to 66 (to keep the
compute-to-communication ratio), at their sequence x batch tokens; inference prefill and training;
CAIS against TP-NVLS, SP-NVLS, T3, T3-NVLS, CoCoNet, FuseLib and LADM; merge-table size, merge wait
and link utilisation.

Here: `configs/experiments/tp/mega_gpt_4b_layer_tp_nvls.yaml` (one transformer layer, DGX H100,
t = 8) with the block model and scheme per point; the halved models are
`workloads/blocks/<model>_half.yaml` and `system.gpu.num_sms=66` (with `workload.block.gemm_tbs=66`:
CAIS's dataflow kernel needs every GEMM block resident, one per SM). One layer stands for the
model: every layer is the same, so the layer's speedup is the model's (pipeline and data
parallelism are not simulated). Training runs `workload.block.passes=training`, which tp_nvls,
sp_nvls and cais have (t3 and t3_nvls have no backward here: their training cells are skipped).
`--quick`: Mega-GPT-4B (halved) on one sequence (1024 tokens), prefill.
"""
from .grid import Cell, Compare, PaperGrid, Scheme

NAME = "cais"
MODELS = {"mega_gpt_4b": (1024, 16), "mega_gpt_8b": (1024, 12), "llama_7b": (3072, 3)}
PASSES = ("forward", "training")
HALF_SMS = 66
QUICK = {"models": ("mega_gpt_4b",), "tokens": 1024, "passes": ("forward",)}

NOT_BUILT = "not modelled in the simulator (no scheme)"
SCHEMES = (
    Scheme("cais", "CAIS", "proposed", (("workload.block.scheme", "cais"),),
           note="graph-level dataflow on (cais_dataflow), group sync on"),
    Scheme("tp_nvls", "TP-NVLS", "baseline", (("workload.block.scheme", "tp_nvls"),)),
    Scheme("sp_nvls", "SP-NVLS", "baseline", (("workload.block.scheme", "sp_nvls"),)),
    Scheme("t3", "T3", "baseline", (("workload.block.scheme", "t3"),)),
    Scheme("t3_nvls", "T3-NVLS", "baseline", (("workload.block.scheme", "t3"),
                                               ("workload.block.t3_collectives", "nvls"))),
    Scheme("coconet", "CoCoNet", "baseline", not_modelled=NOT_BUILT),
    Scheme("fuselib", "FuseLib", "baseline", not_modelled=NOT_BUILT),
    Scheme("ladm", "LADM", "baseline", not_modelled=NOT_BUILT),
    Scheme("cais_kernels", "CAIS without the graph-level dataflow", "ablation",
           (("workload.block.scheme", "cais"), ("workload.block.cais_dataflow", False))),
)
NO_BACKWARD = "no backward pass for T3 in the simulator (workload.block.passes)"

COMPARES = (
    Compare("vs_tp_nvls_geomean", "speedup", over=("tp_nvls",)),
    Compare("vs_tp_nvls_max", "speedup", over=("tp_nvls",), agg="max"),
    Compare("vs_sp_nvls_geomean", "speedup", over=("sp_nvls",)),
    Compare("vs_t3_geomean", "speedup", over=("t3",)),
    Compare("vs_t3_nvls_geomean", "speedup", over=("t3_nvls",)),
    Compare("vs_coconet_geomean", "speedup", over=("coconet",)),
    Compare("vs_coconet_max", "speedup", over=("coconet",), agg="max"),
    Compare("merge_table_with_coordination", "stat",
            metric="system.cais.table_peak_bytes_per_port", scale=1 / 1024, agg="max"),
    Compare("merge_table_without_coordination", "not_modelled",
            reason="the grid runs CAIS with its coordination; `workload.block.cais_sync=false` "
                   "runs without (tools/tp_table.py variant cais_nosync)"),
    Compare("merge_wait_with_coordination", "not_modelled",
            reason="the simulator's nearest stat (system.cais.sync_wait_mean, first to last "
                   "arrival at a group sync) is not the paper's merge wait"),
    Compare("link_utilisation", "not_modelled",
            reason="the paper's utilisation is not defined in our notes; ours "
                   "(system.block.link_utilisation_pct, over the whole layer) is in the per-cell "
                   "table"),
    Compare("switch_area", "not_modelled", reason="the simulator has no area model"),
)


def grid(quick=False):
    cells = []
    models = QUICK["models"] if quick else tuple(MODELS)
    passes = QUICK["passes"] if quick else PASSES
    for m in models:
        seq, batch = MODELS[m]
        tokens = QUICK["tokens"] if quick else seq * batch
        for ps in passes:
            skip = ((("t3", NO_BACKWARD), ("t3_nvls", NO_BACKWARD),
                     ("cais_kernels", "a training step runs cais's collective kernels "
                                      "(the dataflow is forward only): the same as cais"))
                    if ps == "training" else ())
            cells.append(Cell((("model", m), ("pass", ps), ("tokens", tokens)),
                              (("workload.block.model", f"{m}_half"),
                               ("workload.block.tokens", tokens),
                               ("workload.block.passes", ps)), skip))
    return PaperGrid(
        NAME, "configs/experiments/tp/mega_gpt_4b_layer_tp_nvls.yaml",
        (("system.gpu.num_sms", HALF_SMS), ("workload.block.gemm_tbs", HALF_SMS)),
        "DGX H100 (configs/systems/dgx_h100.yaml), t = 8, SMs halved to 66 as CAIS does",
        "One transformer layer of CAIS's three models (hidden and FFN halved, 66 SMs) at the "
        "paper's sequence x batch tokens, inference prefill and training; CAIS against the "
        "paper's TP baselines, CAIS without its graph-level dataflow as the ablation.",
        ("model", "pass", "tokens"), SCHEMES, tuple(cells), COMPARES,
        time_stat="system.block.time_us", quick=quick)
