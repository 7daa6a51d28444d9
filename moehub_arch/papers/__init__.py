"""`moehub-sim paper NAME`: a seed paper's main evaluation, run as far as the simulator models
it, reported beside the paper's published figures.

    moehub-sim paper dysharp --quick -o out/paper_dysharp_quick     # a small subset, seconds
    moehub-sim paper moehub --workers 16 -o out/paper_moehub        # the paper's whole grid
    moehub-sim paper cais --scheduler tcp://HOST:8786 -o out/paper_cais
    moehub-sim paper dysharp --report-only -o out/paper_dysharp   # the finished points' report

One module per paper (moehub, dysharp, cais, hiermoe) describes its grid (grid.py: schemes, cells,
comparisons); the published figures come from `workloads/papers/<paper>.yaml` (data.py, each
value citing where it was published). The grid runs as a `moehub-sim sweep` into OUT/sweep
(resumable: run the same command again and finished points are kept), then report.py writes
OUT/report.md, OUT/report.json and PNG plots. `--report-only` runs nothing: it writes the report of
the points that have finished in OUT/sweep (a grid still running, or run over several sittings),
the others marked `not run`. The published numbers are shown beside ours and never used to set
anything.
"""
import sys

PAPER_NAMES = ("moehub", "dysharp", "cais", "hiermoe")   # the modules of run.PAPERS


def paper_command(args):
    """The CLI's `paper` command."""
    from ..sweep import SweepError
    from .run import run_paper
    if args.workers is not None and args.workers < 1:
        raise SweepError(f"--workers: expected at least 1, found {args.workers}")
    from ..interrupts import Interrupted, exit_status
    outdir = args.outdir or f"paper-out/{args.name}" + ("_quick" if args.quick else "")
    if args.report_only:
        if args.workers is not None or args.scheduler is not None:
            raise SweepError("--report-only runs nothing: --workers and --scheduler do not apply")
        from .run import report_paper
        md, done, total, notes = report_paper(args.name, outdir, quick=args.quick)
        for n in notes:
            print(f"moehub-sim: paper {args.name}: {n}", file=sys.stderr)
        print(f"{done} of {total} points finished; wrote {md} (nothing was run)")
        return 0
    try:
        md, errors = run_paper(args.name, outdir, quick=args.quick, workers=args.workers,
                               scheduler=args.scheduler, progress=not args.quiet)
    except Interrupted as e:
        _, rows = getattr(e, "sweep_results", (None, []))
        print(f"moehub-sim: paper {args.name} {e}: the workers were stopped; {len(rows)} points "
              f"finished and are kept in {outdir}/sweep; run the same command again to run the "
              f"rest and write the report", file=sys.stderr)
        return exit_status(e.signum)
    if not args.quiet:
        print(f"wrote {md}")
    for (cell, label), msg in errors:
        print(f"moehub-sim: paper {args.name}: point {cell.label()} / {label} failed: {msg}",
              file=sys.stderr)
    return 1 if errors else 0


def add_parser(sub):
    """The `paper` subcommand's arguments (cli.py calls this)."""
    p = sub.add_parser("paper", help="run a seed paper's main evaluation (moehub, dysharp, cais, "
                                     "hiermoe) and report ours beside its published figures")
    p.add_argument("name", choices=PAPER_NAMES, metavar="NAME",
                   help=f"the paper: {', '.join(PAPER_NAMES)}")
    p.add_argument("--quick", action="store_true",
                   help="a small subset of the grid (tiny token counts, few GPUs): seconds")
    p.add_argument("-o", "--outdir", help="output directory (default: paper-out/NAME[_quick])")
    p.add_argument("--workers", type=int, help="local worker processes (default: CPU count)")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                   help="run the points on this Dask distributed scheduler")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: write the report of the points finished in OUTDIR/sweep "
                        "(the others: not run)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p
