"""`moehub-sim layer`: one MoE layer named by model, token count, scheme and system (see
moehub_arch/experiment.py for how the config is composed).

    moehub-sim layer --model qwen3_30b_a3b --tokens 512 --scheme moehub --system hgx_h800
    moehub-sim layer --model deepseek_v3 --tokens 384 --scheme deepep --top-k 4 --dry-run

The composed config is written to OUTDIR/layer.yaml and run as `moehub-sim run` runs a file (the
same options: --set, --seed, --engine, --quiet, --trace ...); `--dry-run` prints it and the
layer's shape without running.
"""
import copy
import sys
import tempfile
from pathlib import Path

from .config import ConfigError
from .config.files import display_path

LAYER_FILE = "layer.yaml"
_RUN_FLAGS = ("quiet", "trace", "no_check")
_RUN_VALUES = ("seed", "engine", "max_ticks", "max_wall")


def add_parser(sub, run_parser):
    """The `layer` subcommand, with `run`'s options (those that make sense for a composed config)."""
    p = sub.add_parser("layer", help="run one MoE layer named by model, tokens per GPU, scheme "
                                     "and system (the config is composed, no file needed)")
    p.add_argument("--model", required=True,
                   help="a model of workloads/models/ (qwen3_30b_a3b, deepseek_v3, mixtral_8x7b, "
                        "...) or a model YAML file")
    p.add_argument("--tokens", type=int, required=True, metavar="N",
                   help="tokens routed on each GPU (workload.layer.tokens_per_gpu): any count")
    p.add_argument("--scheme", required=True,
                   help="moehub, deepep, deepep_ll, overlap, megatron, tutel, nvls, dysharp, hiermoe, "
                   "counted, fastermoe, ccfuser")
    p.add_argument("--system", default="dgx_h100",
                   help="a system of configs/systems/ (dgx_h100, hgx_h800, dgx_h800, gh200_nvl32, "
                        "...) or a system file (default dgx_h100)")
    p.add_argument("--top-k", type=int, metavar="K",
                   help="experts per token in place of the model's (workload.layer.top_k)")
    p.add_argument("--routing", metavar="KIND",
                   help="routing generator (workload.layer.routing.kind; default uniform, as "
                        "public benchmarks use): uniform, balanced, normal, zipf, ...")
    p.add_argument("--hub-design", default="published",
                   help="MoE-Hub design of configs/hub/designs/ (default published: the "
                        "authors' design)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the composed config and the layer's shape; run nothing")
    for action in run_parser._actions:        # run's options, as run documents them
        if action.dest in ("help", "config", "system", "restore") or not action.option_strings:
            continue
        p._add_action(copy.copy(action))
    p.set_defaults(outdir=None)
    return p


def _composition(args):
    return dict(model=args.model, tokens=args.tokens, scheme=args.scheme, system=args.system,
                top_k=args.top_k, routing=args.routing, hub_design=args.hub_design)


def dry_run(args, load):
    """Print the composed config and what it resolves to; `load(path, overrides)` is the CLI's
    config loader (it prints the load warnings)."""
    from .experiment import layer_config_text
    from .workloads.layer import layer_shape
    text = layer_config_text(**_composition(args))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / LAYER_FILE
        path.write_text(text)
        try:
            cfg = load(str(path), list(args.overrides))
        except ConfigError as e:     # name the composed config, not a temporary file
            message = str(e)
            for spelling in (str(path), display_path(path)):   # as the message spelled it
                message = message.replace(spelling, "the composed layer config")
            e.args = (message,)
            raise
    shape, model = layer_shape(cfg)
    print(text, end="")
    print(f"# resolves to: {model.name} (hidden {shape.hidden}, expert FFN {shape.ffn}, "
          f"{shape.experts} experts, top-{shape.top_k}) on {cfg.system.name} "
          f"({shape.num_gpus} GPUs, {shape.local_experts} experts each), {shape.tokens} tokens "
          f"per GPU, scheme {cfg.scheme}, {cfg.workload.mode} mode")
    return 0


def command(args, run_argv, load):
    """Run the composed layer as `moehub-sim run` would (`run_argv(argv)`: the CLI's dispatch of
    a `run` command line)."""
    from .experiment import write_layer_config
    if args.dry_run:
        return dry_run(args, load)
    outdir = Path(args.outdir or f"layer-out/{args.model}_{args.tokens}_{args.scheme}_"
                                 f"{Path(args.system).stem}" + (f"_k{args.top_k}" if args.top_k else ""))
    path = write_layer_config(outdir / LAYER_FILE, **_composition(args))
    argv = ["run", str(path), "-o", str(outdir)]
    for flag in _RUN_FLAGS:
        if getattr(args, flag, False):
            argv.append("--" + flag.replace("_", "-"))
    for name in _RUN_VALUES:
        if getattr(args, name, None) is not None:
            argv += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    for o in args.overrides:
        argv += ["--set", o]
    for name in ("debug_flags", "debug_start", "debug_file", "checkpoint_dir"):
        if getattr(args, name, None) is not None:
            argv += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    for t in getattr(args, "checkpoint_at", []) or []:
        argv += ["--checkpoint-at", t]
    if getattr(args, "checkpoint_on_interrupt", False):
        argv.append("--checkpoint-on-interrupt")
    if not args.quiet:
        print(f"composed {path}", file=sys.stderr)
    return run_argv(argv)
