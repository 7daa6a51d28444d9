#!/usr/bin/env python3
"""Execute an example notebook headless (no Jupyter server), as the test suite does.

    python tools/notebooks/run_notebook.py tools/notebooks/hub_design_space.ipynb
    python tools/notebooks/run_notebook.py tools/notebooks/model_search.ipynb --quick -o out.ipynb

Runs every cell in a fresh IPython kernel with the working directory set to the repository root,
and writes the executed notebook (tables and figures filled in) to `-o` (default:
`<name>.executed.ipynb` in the current directory). `--quick` sets MOEHUB_NOTEBOOK_QUICK=1, which the
notebooks read to run their short version (small shapes, few points: what CI runs); without it
they run the full study. A cell that raises stops the run with its error and exit status 1.
Needs `pip install -e '.[notebooks]'` (nbclient, nbformat, ipykernel, pandas).
"""
import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def execute(path, quick=False, timeout=None, outdir=None):
    """Execute the notebook at `path`; returns the executed nbformat notebook. `outdir` (optional)
    is passed as MOEHUB_NOTEBOOK_OUTDIR: where the notebook writes its runs and figures."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(str(path), as_version=4)
    env = dict(os.environ, MOEHUB_NOTEBOOK_QUICK="1" if quick else "0")
    env.pop("MOEHUB_NOTEBOOK_OUTDIR", None)
    if outdir is not None:
        env["MOEHUB_NOTEBOOK_OUTDIR"] = str(outdir)
    # the kernel process gets this environment; its working directory is the repository root
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(REPO)}}).execute(env=env)
    return nb


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebook")
    ap.add_argument("-o", "--output", help="executed notebook (default: NAME.executed.ipynb here)")
    ap.add_argument("--quick", action="store_true", help="the short version the tests run")
    ap.add_argument("--timeout", type=int, default=None, help="seconds per cell (default: none)")
    args = ap.parse_args(argv)
    try:
        import nbformat
        from nbclient.exceptions import CellExecutionError
    except ImportError:
        print("run_notebook.py: error: needs nbclient, nbformat and ipykernel: "
              "pip install -e '.[notebooks]'", file=sys.stderr)
        return 2
    path = Path(args.notebook)
    if not path.is_file():
        print(f"run_notebook.py: error: {path}: notebook not found", file=sys.stderr)
        return 2
    out = Path(args.output or f"{path.stem}.executed.ipynb")
    try:
        nb = execute(path, quick=args.quick, timeout=args.timeout)
    except CellExecutionError as e:
        print(f"run_notebook.py: error: {path}: a cell failed:\n{e}", file=sys.stderr)
        return 1
    nbformat.write(nb, str(out))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
