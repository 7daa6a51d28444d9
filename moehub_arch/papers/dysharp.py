"""DySHARP's evaluation grid (arXiv 2605.05607), as far as the simulator models it.

The paper: MoE-layer speedups of DySHARP over DeepEP, NVLS, FasterMoE, Tutel, CCFuser and COMET on
a simulated GH200 NVL32 (32 GPUs, 9 NVSwitch trays), experts parallel over the 32 GPUs and
attention data-parallel; shapes S (H 2048, I 512, 64 experts), M (4096, 1024, 128) and L
(DeepSeek-V3's 7168, 2048, 256) at sequence lengths 2048, 4096 and 8192, top-k 8, 16 and 32; a
GPU-count sweep (4-64 GPUs) for S and M at top-8 against DeepEP and COMET; traffic against DeepEP;
end-to-end training against DeepEP, COMET and DualPipe.

Here: `configs/experiments/dysharp/base_gh200_nvl32.yaml` (the NVL32), the shapes as
`workloads/models/dysharp_{s,m,l}[_k16|_k32].yaml`, routing `normal` with a per-expert load std of
0.032 (the paper's Sec. V-B: tokens over experts as a normal distribution of std 0.032, after
ByteDance's observation of training jobs - the setting MoE-Hub's grid uses too), timing mode. Tokens per GPU = the shape's sequence length (assumption: one sequence per
GPU under attention data parallelism; how the paper maps sequences to GPUs is not in our notes).
Scheme `dysharp` is DySHARP with token-centric fusion; `dysharp_unfused` (fusion off) is the
fusion ablation. COMET is modelled by `overlap` (Comet-like, not Comet's fused kernels). The
baselines' layer kernels read a token's expert ids with one 8-wide load, so they run top-k 8 only:
their top-16 and top-32 cells are skipped with that reason. 64 GPUs exceed one NVL32 domain and are
skipped. `--quick`: shape S at top-8 and top-16 on 8 of the NVL32's GPUs with 16 tokens each.
"""
from .grid import Cell, Compare, PaperGrid, Scheme

NAME = "dysharp"
SHAPES = {"S": ("dysharp_s", 2048), "M": ("dysharp_m", 4096), "L": ("dysharp_l", 8192)}
TOP_K = (8, 16, 32)
MAIN_GPUS = 32
SWEEP_GPUS = (4, 8, 16, 32, 64)      # the paper's GPU-count sweep (S-8 and M-8 only)
NVL32_GPUS = 32
QUICK = {"shapes": ("S",), "top_k": (8, 16), "gpus": 8, "tokens": 16}

# the paper's token distribution over experts (Sec. V-B, "Benchmark"): normal, std 0.032
ROUTING = (("workload.layer.routing.kind", "normal"), ("workload.layer.routing.std", 0.032))
TOPK8 = "the baselines' layer kernels read a token's expert ids with one ld.v8 (top-k <= 8)"
SCHEMES = (
    Scheme("dysharp", "DySHARP", "proposed", (("scheme", "dysharp"),),
           note="token-centric fusion on"),
    Scheme("deepep", "DeepEP", "baseline", (("scheme", "deepep"),)),
    Scheme("nvls", "NVLS", "baseline", (("scheme", "nvls"),)),
    Scheme("fastermoe", "FasterMoE", "baseline", (("scheme", "fastermoe"),),
           note="group-wise exchange (group size 4) and shadow experts by FasterMoE's policy"),
    Scheme("tutel", "Tutel", "baseline", (("scheme", "tutel"),)),
    Scheme("ccfuser", "CCFuser", "baseline", (("scheme", "ccfuser"),),
           note="rows read from the source GPUs into the GEMM tiles; separate pull blocks"),
    Scheme("overlap", "COMET", "baseline", (("scheme", "overlap"),),
           note="Comet-like overlap, not Comet's fused kernels"),
    Scheme("dysharp_unfused", "DySHARP without token-centric fusion", "ablation",
           (("scheme", "dysharp"), ("workload.layer.dysharp.fusion", "none"))),
)
BASELINES = ("deepep", "nvls", "fastermoe", "tutel", "ccfuser", "overlap")
E2E = ("end-to-end training (16-way pipeline parallelism over 16 NVL32 domains) is not simulated; "
       "the grid is one MoE layer")

COMPARES = (
    Compare("layer_vs_deepep_geomean", "speedup", over=("deepep",), where=(("set", "main"),)),
    Compare("layer_vs_deepep_max", "speedup", over=("deepep",), agg="max", where=(("set", "main"),)),
    Compare("layer_vs_nvls_geomean", "speedup", over=("nvls",), where=(("set", "main"),)),
    Compare("layer_vs_nvls_max", "speedup", over=("nvls",), agg="max", where=(("set", "main"),)),
    Compare("layer_vs_fastermoe_geomean", "speedup", over=("fastermoe",),
            where=(("set", "main"),)),
    Compare("layer_vs_tutel_geomean", "speedup", over=("tutel",), where=(("set", "main"),)),
    Compare("layer_vs_ccfuser_geomean", "speedup", over=("ccfuser",), where=(("set", "main"),)),
    Compare("layer_vs_comet_geomean", "speedup", over=("overlap",), where=(("set", "main"),)),
    Compare("layer_vs_comet_max", "speedup", over=("overlap",), agg="max",
            where=(("set", "main"),)),
    Compare("traffic_saving_vs_deepep_top8", "traffic_saving", over=("deepep",), agg="mean",
            where=(("top-k", 8),)),
    Compare("e2e_vs_deepep_geomean", "not_modelled", reason=E2E),
    Compare("e2e_vs_comet_geomean", "not_modelled", reason=E2E),
    Compare("e2e_vs_comet_max", "not_modelled", reason=E2E),
    Compare("e2e_vs_dualpipe_geomean", "not_modelled",
            reason="DualPipe overlaps micro-batches of a pipeline; " + E2E),
    Compare("switch_logic_area", "not_modelled", reason="the simulator has no area model"),
)


def _cell(grid_set, shape, k, gpus, tokens):
    model = SHAPES[shape][0] + ("" if k == 8 else f"_k{k}")
    skip = []
    if gpus > NVL32_GPUS:
        skip.append(("*", f"{gpus} GPUs exceed one NVL32 domain ({NVL32_GPUS} GPUs)"))
    if k > 8:
        skip += [(b, TOPK8) for b in BASELINES]
    if grid_set == "gpu sweep":
        skip += [(b, "the paper's GPU-count sweep compares with DeepEP and COMET only")
                 for b in ("nvls", "fastermoe", "tutel", "ccfuser", "dysharp_unfused")]
    return Cell((("set", grid_set), ("shape", shape), ("top-k", k), ("gpus", gpus),
                 ("tokens/GPU", tokens)),
                (("workload.layer.model", model), ("system.num_gpus", gpus),
                 ("workload.layer.tokens_per_gpu", tokens)), tuple(skip))


def grid(quick=False):
    cells = []
    if quick:
        for shape in QUICK["shapes"]:
            for k in QUICK["top_k"]:
                cells.append(_cell("main", shape, k, QUICK["gpus"], QUICK["tokens"]))
    else:
        for shape, (_, seq) in SHAPES.items():
            for k in TOP_K:
                cells.append(_cell("main", shape, k, MAIN_GPUS, seq))
        for shape in ("S", "M"):
            for p in SWEEP_GPUS:
                if p != MAIN_GPUS:
                    cells.append(_cell("gpu sweep", shape, 8, p, SHAPES[shape][1]))
    return PaperGrid(
        NAME, "configs/experiments/dysharp/base_gh200_nvl32.yaml", ROUTING,
        "GH200 NVL32 (configs/systems/gh200_nvl32.yaml: 32 GPUs, one switch level)",
        "One MoE layer of DySHARP's shapes S / M / L at top-k 8 / 16 / 32 on the NVL32, plus the "
        "GPU-count sweep of S-8 and M-8; DySHARP (token-centric fusion) against the paper's "
        "baselines, its unfused form as the fusion ablation, and the wire bytes per GPU.",
        ("set", "shape", "top-k", "gpus", "tokens/GPU"), SCHEMES, tuple(cells), COMPARES,
        traffic=True, quick=quick)
