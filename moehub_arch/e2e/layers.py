"""What the forward step (forward.py) and the training step (training.py) of `moehub-sim e2e`
share: the dense part of each MoE model, the simulated runs (reused when made from the same
inputs) and the block model files of the attention and dense layers."""
from ..config import ConfigError
from ..paths import data_root
from ..run_cache import run_or_reuse

# The dense part of each MoE model, from its public config.json (Hugging Face): attention heads,
# the dense FFN width of its first layers, the norm and its epsilon.
DENSE = {
    "deepseek_v3": dict(heads=128, dense_ffn=18432, norm="rmsnorm", norm_eps=1e-6,
                        source="deepseek-ai/DeepSeek-V3 config.json: num_attention_heads, "
                               "intermediate_size, rms_norm_eps"),
    "mixtral_8x7b": dict(heads=32, dense_ffn=0, norm="rmsnorm", norm_eps=1e-5,
                         source="mistralai/Mixtral-8x7B-v0.1 config.json: num_attention_heads, "
                                "rms_norm_eps (every layer is MoE)"),
    "qwen3_30b_a3b": dict(heads=32, dense_ffn=0, norm="rmsnorm", norm_eps=1e-6,
                          source="Qwen/Qwen3-30B-A3B config.json: num_attention_heads, "
                                 "rms_norm_eps (every layer is MoE; its head_dim 128 is not "
                                 "hidden / heads: see Not modelled)"),
}
QUICK_TOKENS = 256


class RunFailed(Exception):
    """A layer's `moehub-sim run` failed (its last error line is the message)."""


def system_files(system):
    """(the layer experiment's base config, the system file) of a shipped system name:
    configs/experiments/layer/base_<system>.yaml and configs/systems/<system>.yaml; a ConfigError
    naming --system and the names that have both otherwise."""
    base = data_root() / "configs" / "experiments" / "layer" / f"base_{system}.yaml"
    sys_file = data_root() / "configs" / "systems" / f"{system}.yaml"
    if base.is_file() and sys_file.is_file():
        return base, sys_file
    known = sorted(p.stem[5:] for p in base.parent.glob("base_*.yaml")
                   if (sys_file.parent / f"{p.stem[5:]}.yaml").is_file())
    raise ConfigError(f"--system {system}: no shipped layer experiment for it "
                      f"(configs/experiments/layer/base_{system}.yaml and "
                      f"configs/systems/{system}.yaml; known: {', '.join(known)})", key="--system")


def run(config, outdir, sets, force):
    """stats.json of `moehub-sim run config --set ...` (reused when made from the same inputs:
    moehub_arch/run_cache.py); RunFailed when the run fails."""
    stats, how, wall, error = run_or_reuse(config, outdir, sets, force)
    if error:
        raise RunFailed(f"`moehub-sim run {config} -o {outdir}` with {' '.join(sets)} "
                        f"failed: {error}")
    return stats, how if how == "reused" else f"{wall:.0f} s"


def value(stats, name):
    v = stats[name]
    return v["value"] if isinstance(v, dict) else v


def block_model_file(outdir, model, dense, tokens):
    """The model's dense part as a block model (workloads/blocks schema) in the output folder."""
    outdir.mkdir(parents=True, exist_ok=True)
    path = outdir / f"{model.name}_dense.yaml"
    ffn = dense["dense_ffn"] or model.expert_ffn     # unused by kind attention
    path.write_text(
        f"# {model.name}'s attention and dense layers for moehub-sim e2e ({dense['source']})\n"
        f"block_model:\n  name: {model.name}_dense\n  hidden: {model.hidden}\n  ffn: {ffn}\n"
        f"  heads: {dense['heads']}\n  layers: {model.layers}\n  seq: {tokens}\n  batch: 1\n"
        f"  norm: {dense['norm']}\n  norm_eps: {dense['norm_eps']:.1e}\n")
    return path
