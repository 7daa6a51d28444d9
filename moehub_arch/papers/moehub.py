"""MoE-Hub's evaluation grid (arXiv 2605.05888), as far as the simulator models it.

The paper: per-layer and end-to-end speedups of MoE-Hub over Megatron-LM (with Transformer
Engine), FasterMoE, Tutel, Comet and CCFuser, on Mixtral-8x7B, Qwen2-MoE (Qwen1.5-MoE-A2.7B) and
Phi-3.5-MoE, total tokens (sequence x GPUs) 128-32768 on 2-16 GPUs, per-expert load drawn with a
standard deviation of 0-0.05; simulated DGX-H800-class platform (8 links per GPU, 4 NVSwitches,
128 B packets, 250 ns per hop). Ablations MH-Base / MH-PKT (the RPM) / MH-DEP (the DAM) / MH.

Here: `configs/experiments/layer/base_dgx_h800.yaml` (that platform; 16 GPUs are one NVSwitch
domain of 16 H800s - an assumption: the paper's 16-GPU system is not described in our notes),
routing `normal` with the paper's std (README "The seed papers' baselines"); scheme `moehub` is the
published hub design (configs/hub/designs/published.yaml). Comet is modelled by `overlap` (a
Comet/FlashDMoE-style software overlap, not Comet's fused kernels); DeepEP is not one of the
paper's baselines and runs for context. The ablations switch the RPM off with
`rpm.schedule=uncoalesced` (each row's bytes leave in their own packets) and the DAM off with
`dam.consumers=claim` (claimer blocks publish ready tiles to persistent workers instead of the DAM
launching them). Qwen1.5-MoE-A2.7B has 60 routed experts in its public config (the paper's notes
say 64): 60 are used, so it cannot be placed on 8 or 16 GPUs, and those cells are skipped.
"""
from ..config.models import load_model
from .grid import Cell, Compare, PaperGrid, Scheme

NAME = "moehub"
MODELS = ("mixtral_8x7b", "qwen1_5_moe_a2_7b", "phi3_5_moe")
TOTAL_TOKENS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
GPUS = (2, 4, 8, 16)
STD = (0.0, 0.032, 0.05)
QUICK = {"total_tokens": (128,), "gpus": (4,), "std": (0.032,)}

RPM_OFF = ("system.gpu.hub.moe.rpm.schedule", "uncoalesced")
DAM_OFF = ("system.gpu.hub.moe.dam.consumers", "claim")
SCHEMES = (
    Scheme("moehub", "MoE-Hub (MH)", "proposed", (("scheme", "moehub"),),
           note="the published hub design (configs/hub/designs/published.yaml)"),
    Scheme("megatron", "Megatron-LM + TE", "baseline", (("scheme", "megatron"),)),
    Scheme("tutel", "Tutel", "baseline", (("scheme", "tutel"),),
           note="capacity factor 1.0: rows over capacity are dropped"),
    Scheme("overlap", "Comet", "baseline", (("scheme", "overlap"),),
           note="Comet-like overlap, not Comet's fused kernels"),
    Scheme("fastermoe", "FasterMoE", "baseline", (("scheme", "fastermoe"),),
           note="group-wise exchange (group size 4) and shadow experts by FasterMoE's policy"),
    Scheme("ccfuser", "CCFuser", "baseline", (("scheme", "ccfuser"),),
           note="rows read from the source GPUs into the GEMM tiles; separate pull blocks"),
    Scheme("deepep", "DeepEP (not a baseline of the paper)", "baseline", (("scheme", "deepep"),),
           note="for context"),
    Scheme("moehub_base", "MH-Base", "ablation", (("scheme", "moehub"), RPM_OFF, DAM_OFF),
           note="RPM and DAM off"),
    Scheme("moehub_pkt", "MH-PKT", "ablation", (("scheme", "moehub"), DAM_OFF),
           note="RPM on, DAM off"),
    Scheme("moehub_dep", "MH-DEP", "ablation", (("scheme", "moehub"), RPM_OFF),
           note="DAM on, RPM off"),
)
PAPER_BASELINES = ("megatron", "tutel", "overlap", "fastermoe", "ccfuser")

COMPARES = (
    Compare("layer_speedup_range", "speedup", over=PAPER_BASELINES, agg="range"),
    Compare("e2e_speedup_range", "not_modelled",
            reason="the paper extrapolates end-to-end time from real H800 runtime breakdowns; we "
                   "simulate one MoE layer"),
    Compare("ideal_layer_fraction", "stat", metric="system.moe.ideal_layer_fraction", agg="max"),
    Compare("ablation_rpm", "speedup", of="moehub_pkt", over=("moehub_base",)),
    Compare("ablation_dam", "speedup", of="moehub_dep", over=("moehub_base",)),
    Compare("alltoall_calibration_error", "not_modelled",
            reason="a calibration of the authors' simulator against hardware; ours is "
                   "`python tools/validate.py` (README, Hardware correlation)"),
    Compare("alltoall_share_of_forward", "not_modelled",
            reason="measured on real H800s in the paper's motivation, not a simulated cell"),
    Compare("exposed_share_of_overlapped_layer", "not_modelled",
            reason="measured on real hardware in the paper's motivation, not a simulated cell"),
    Compare("hub_area", "not_modelled", reason="the simulator has no area model (it reports SRAM "
                                               "bytes: hub.moe_sram_bytes)"),
    Compare("moehub_scheduling_lines", "not_modelled",
            reason="a count of source lines, not a simulated quantity"),
)


def grid(quick=False):
    tokens = QUICK["total_tokens"] if quick else TOTAL_TOKENS
    gpus = QUICK["gpus"] if quick else GPUS
    stds = QUICK["std"] if quick else STD
    cells = []
    for m in MODELS:
        experts = load_model(m).experts
        for p in gpus:
            for total in tokens:
                for std in stds:
                    skip = ()
                    if experts % p:
                        skip = (("*", f"{experts} experts do not divide over {p} GPUs"),)
                    elif total % p:
                        skip = (("*", f"{total} tokens do not divide over {p} GPUs"),)
                    cells.append(Cell(
                        (("model", m), ("gpus", p), ("total tokens", total), ("std", std)),
                        (("workload.layer.model", m), ("system.num_gpus", p),
                         ("workload.layer.tokens_per_gpu", total // p),
                         ("workload.layer.routing.std", std)), skip))
    return PaperGrid(
        NAME, "configs/experiments/layer/base_dgx_h800.yaml",
        (("workload.layer.routing.kind", "normal"),),
        "DGX H800 as the MoE-Hub authors simulated it (configs/systems/dgx_h800.yaml)",
        "MoE layer of Mixtral-8x7B, Qwen1.5-MoE-A2.7B and Phi-3.5-MoE x total tokens x GPUs x "
        "per-expert load std (routing `normal`), timing mode; MoE-Hub's published design against "
        "the paper's baselines and its RPM / DAM ablations.",
        ("model", "gpus", "total tokens", "std"), SCHEMES, tuple(cells), COMPARES, quick=quick)
