"""`moehub-sim e2e`: a whole MoE model's step composed from simulated layers - one forward
(prefill) step (forward.py), or with `--training` one training step under pipeline parallelism
(training.py). Each distinct layer is simulated once and its run reused while its inputs are
unchanged (moehub_arch/run_cache.py); docs/e2e.md and docs/training.md say what is composed and
what is not modelled.

    moehub-sim e2e --model deepseek_v3 --scheme moehub --compare deepep overlap --quick
    moehub-sim e2e --training --model qwen3_30b_a3b --scheme moehub --compare deepep --quick
    moehub-sim e2e --setting configs/e2e/dysharp_s.yaml     (a seed paper's training setting)

`python tools/e2e.py` takes the same arguments (and `python tools/e2e_training.py` those of
`--training`).
"""
import argparse
import sys
from pathlib import Path

from ..config import ConfigError
from .layers import DENSE, QUICK_TOKENS, RunFailed
from .settings import apply_setting, load_setting

# the options of a training step only, with their defaults: given without --training they are an
# error, not silently ignored
TRAINING_DEFAULTS = {"stages": 4, "micro_batches": 8, "moe_backward": "simulated",
                     "overlap": False, "no_overlap_grad_reduce": False, "grad_bytes": 4,
                     "p2p_GBps": 50.0, "hub_design": "published"}


def add_arguments(ap):
    """The arguments of `moehub-sim e2e` (and of tools/e2e.py)."""
    ap.add_argument("--model",
                    help=f"the MoE model (its layer counts and shapes from workloads/models/; "
                         f"{', '.join(sorted(DENSE))}, or another with a setting's dense part)")
    ap.add_argument("--scheme", help="MoE scheme of the step (e.g. moehub)")
    ap.add_argument("--compare", nargs="*", metavar="SCHEME",
                    help="schemes to compare with (default: deepep)")
    ap.add_argument("--system",
                    help="a shipped system with a layer experiment, "
                         "configs/experiments/layer/base_<system>.yaml (default dgx_h100)")
    ap.add_argument("--tokens-per-gpu", type=int,
                    help="tokens per GPU (in one micro-batch with --training; default 1024)")
    ap.add_argument("--setting", type=Path,
                    help="a training setting file (configs/e2e/*.yaml: a seed paper's model, "
                         "system, pipeline and schemes with their sources); implies --training; "
                         "options given here win over the file's")
    ap.add_argument("--quick", action="store_true",
                    help=f"{QUICK_TOKENS} tokens per GPU (a smoke run of a few minutes)")
    ap.add_argument("-o", "--outdir", type=Path, default=Path("out") / "e2e",
                    help="the layers' run folders, kept and reused (default out/e2e)")
    ap.add_argument("--force", action="store_true", help="re-run layers whose stats exist")
    ap.add_argument("--json", type=Path, help="also write the breakdown as JSON")
    t = ap.add_argument_group("training step (with --training)")
    t.add_argument("--training", action="store_true",
                   help="one training step: forward and backward layers, 1F1B pipeline "
                        "parallelism, data-parallel gradient reduction")
    t.add_argument("--stages", type=int, help="pipeline stages (default 4)")
    t.add_argument("--micro-batches", type=int,
                   help="micro-batches per step (default 8; at least --stages)")
    t.add_argument("--moe-backward", choices=("simulated", "estimate"),
                   help="simulated (default): only schemes with a simulated backward; estimate: "
                        "compose the others' backward from their forward's phases")
    t.add_argument("--overlap", action="store_true", default=None,
                   help="overlap steady-state micro-batches' exposed time (DualPipe's idea)")
    t.add_argument("--no-overlap-grad-reduce", action="store_true", default=None,
                   help="the data-parallel gradient all-reduce after the last backward, exposed")
    t.add_argument("--grad-bytes", type=int, choices=(2, 4),
                   help="bytes per reduced gradient (default 4: fp32)")
    t.add_argument("--hub-design",
                   help="MoE-Hub design of configs/hub/designs/ for scheme moehub's layer runs "
                        "(default published: the authors' design; paired: the published design "
                        "with the AAU's paired allocation for the backward)")
    t.add_argument("--p2p-GBps", type=float,
                   help="activation bandwidth between stages per GPU (default 50: one 400 Gb/s "
                        "ConnectX-7 per GPU)")
    return ap


def command(args, prog="moehub-sim e2e"):
    """Run the step the parsed arguments describe; the exit status (2: bad input, 1: a layer's
    run failed)."""
    def fail(message):
        print(f"{prog}: error: {message}", file=sys.stderr)
        return 2

    args.setting_data = None
    if args.setting is not None:
        try:
            args.setting_data = load_setting(args.setting)
        except ConfigError as e:
            return fail(str(e))
        args.training = True
        apply_setting(args, args.setting_data)
    for k, default in (("compare", ["deepep"]), ("system", "dgx_h100"),
                       ("tokens_per_gpu", 1024)):
        if getattr(args, k) is None:
            setattr(args, k, default)
    for k in ("model", "scheme"):
        if getattr(args, k) is None:
            return fail(f"--{k}: required (or a --setting file that names it)")
    dense = (args.setting_data or {}).get("dense")
    if args.model not in DENSE and dense is None:
        return fail(f"--model {args.model}: e2e knows the attention and dense layers of "
                    f"{', '.join(sorted(DENSE))}; another model needs a --setting file with its "
                    f"dense part (setting.dense)")
    given = [k for k in TRAINING_DEFAULTS if getattr(args, k) is not None]
    if not args.training and given:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        return fail(f"{flags}: options of a training step; add --training (without it, e2e "
                    f"composes a forward step)")
    for k, default in TRAINING_DEFAULTS.items():
        if getattr(args, k) is None:
            setattr(args, k, default)
    from .forward import forward_step
    from .training import training_run
    try:
        return (training_run if args.training else forward_step)(args, fail)
    except RunFailed as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1


def add_parser(sub):
    """The `e2e` subcommand (cli.py calls this)."""
    return add_arguments(sub.add_parser(
        "e2e", help="a whole MoE model's forward step, or with --training its training step "
                    "under pipeline parallelism, composed from simulated layers",
        description=__doc__.split("\n\n")[0]))


def main(argv=None, prog="e2e"):
    """tools/e2e.py: the same command outside the `moehub-sim` front end."""
    ap = add_arguments(argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0]))
    return command(ap.parse_args(argv), prog=prog)
