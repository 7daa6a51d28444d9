"""HierMoE's evaluation grid (arXiv 2508.09591), as far as the simulator models it.

The paper: training on 4 nodes x 8 RTX A6000 (NVLink bridges in pairs, PCIe 4.0, 200 Gb/s
InfiniBand), EP 32, sequence 1024, micro-batch 1; DeepSeek-V3 at half dimensions and Qwen3-30B-A3B;
all-to-all and end-to-end iteration time of HierMoE (token deduplication per topology level, expert
swap) against Megatron-LM, Tutel-2DH and its own deduplication with SmartMoE's expert placement.

Here: one MoE layer (forward: dispatch, experts, combine) in timing mode with skewed routing (Gini
0.3, the EP-32 configs' assumption), tokens per GPU = 1024 (one sequence of micro-batch 1 per GPU).
The all-to-all time is the dispatch plus combine phases (`system.moe.phase.*`). Two systems:
`a6000_x4`, the paper's testbed (configs/systems/a6000_x4.yaml, each point run on it as
`--system` does), whose cells the published figures are compared with - its GEMM jobs are 128 x 64
(`workload.layer.gemm_n_tile: 64`, 80 KB of shared memory: an RTX A6000 SM has 100 KB, the Hopper
128 x 128 job needs 160 KB) - and `hgx_h800_x4` (4 HGX H800 nodes, the project's EP-32 system), for
context. Scheme `tutel` is Tutel's 2-D hierarchical all-to-all across nodes (Tutel-2DH). SmartMoE's
placement is not modelled. `--quick`: Qwen3-30B-A3B on 2 nodes (EP 16) of each system, 16 tokens
per GPU.
"""
from .grid import Cell, Compare, PaperGrid, Scheme

NAME = "hiermoe"
MODELS = ("deepseek_v3_half", "qwen3_30b_a3b")
TOKENS = 1024
SYSTEMS = {"a6000_x4": ("configs/experiments/hiermoe/base_a6000_x4.yaml", 4),
           "hgx_h800_x4": ("configs/experiments/hiermoe/base_hgx_h800_x4.yaml", 4)}
RUN_SYSTEM = "hgx_h800_x4"          # the sweep's config; A6000 points run on its system file
PAPER_SYSTEM = "a6000_x4"           # the paper's testbed: the published figures are its
# what an A6000 point sets over the H800 config: the system (a6000_x4.yaml in place of the H800
# nodes, as --system) and base_a6000_x4.yaml's GEMM job width (80 KB of shared memory)
A6000_SETS = (("system", "systems/a6000_x4.yaml"), ("workload.layer.gemm_n_tile", 64))
QUICK = {"models": ("qwen3_30b_a3b",), "nodes": 2, "tokens": 16}

SCHEMES = (
    Scheme("hiermoe", "HierMoE", "proposed", (("scheme", "hiermoe"),),
           note="level chosen by its alpha-beta models, expert swap on"),
    Scheme("megatron", "Megatron-LM", "baseline", (("scheme", "megatron"),)),
    Scheme("tutel", "Tutel-2DH", "baseline", (("scheme", "tutel"),),
           note="2-D hierarchical all-to-all across nodes"),
    Scheme("smartmoe", "HierMoE dedup + SmartMoE", "baseline",
           not_modelled="SmartMoE's expert placement is not modelled"),
)
ALLTOALL = "alltoall"

ON_TESTBED = (("system", PAPER_SYSTEM),)
COMPARES = (
    Compare("alltoall_speedup_range", "speedup", over=("megatron", "tutel"), agg="range",
            metric=ALLTOALL, where=ON_TESTBED),
    Compare("alltoall_vs_megatron", "speedup", over=("megatron",), agg="range", metric=ALLTOALL,
            where=ON_TESTBED),
    Compare("alltoall_vs_tutel_2dh", "speedup", over=("tutel",), agg="range", metric=ALLTOALL,
            where=ON_TESTBED),
    Compare("alltoall_vs_smartmoe", "speedup", over=("smartmoe",), agg="range", metric=ALLTOALL,
            where=ON_TESTBED),
    Compare("e2e_speedup_range", "not_modelled",
            reason="end-to-end training iterations (attention, backward, optimizer) are not "
                   "simulated; the grid is one MoE layer's forward"),
)


def _sets(system):
    return A6000_SETS if system == "a6000_x4" else ()


def grid(quick=False):
    cells = []
    if quick:
        for system in SYSTEMS:
            for m in QUICK["models"]:
                cells.append(Cell((("system", system), ("model", m), ("nodes", QUICK["nodes"]),
                                   ("tokens/GPU", QUICK["tokens"])),
                                  _sets(system) + (("workload.layer.model", m),
                                                   ("system.nodes.count", QUICK["nodes"]),
                                                   ("workload.layer.tokens_per_gpu",
                                                    QUICK["tokens"]))))
    else:
        for system, (_, nodes) in SYSTEMS.items():
            for m in MODELS:
                cells.append(Cell((("system", system), ("model", m), ("nodes", nodes),
                                   ("tokens/GPU", TOKENS)),
                                  _sets(system) + (("workload.layer.model", m),
                                                   ("system.nodes.count", nodes),
                                                   ("workload.layer.tokens_per_gpu", TOKENS))))
    return PaperGrid(
        NAME, SYSTEMS[RUN_SYSTEM][0], (),
        "4 x 8 RTX A6000 (configs/systems/a6000_x4.yaml: the paper's testbed; NVLink bridges in "
        "pairs, PCIe 4.0, 200 Gb/s InfiniBand; GEMM jobs of 128 x 64) and, for context, 4 x HGX "
        "H800 (configs/systems/hgx_h800_x4.yaml); the published figures are compared with the "
        "A6000 cells",
        "One MoE layer of DeepSeek-V3 (half dimensions) and Qwen3-30B-A3B, EP 32, 1024 tokens per "
        "GPU, skewed routing; HierMoE against Megatron-LM and Tutel-2DH; all-to-all time = "
        "dispatch + combine phases.",
        ("system", "model", "nodes", "tokens/GPU"), SCHEMES, tuple(cells), COMPARES, quick=quick,
        cell_metrics=(ALLTOALL, "time"))
