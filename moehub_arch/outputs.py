"""Writing output files so that a run directory is never half-written yet looks complete.

The rule (docs/robustness.md): every whole file (config.json, stats.txt, stats.csv, stats.json,
checkpoint files) is written under `NAME.partial` and renamed to NAME once it is complete (a
rename within a directory is atomic on POSIX file systems), so a file that exists under its own
name is whole. A run directory is complete when `stats.json` exists: it is written last, after
the other stats files; `moehub-sim compare`, `plot` and sweeps read only directories that have it.
Files streamed while the run goes (trace.json, stats_dumps.*) are written under `NAME.partial`
and renamed when the run closes them (also when it stops with an error or an interrupt: only a
process killed outright leaves a `.partial` file). A run removes what an earlier run left in its output
directory (the files it is about to write) before it starts, so two runs never mix there.

A file that cannot be written (directory missing or not writable, disk full) is an `OutputError`:
one paragraph naming the file and the reason, exit status 2.
"""
import errno
import os
from contextlib import contextmanager
from pathlib import Path

from .observer import SimulationError

PARTIAL = ".partial"


class OutputError(SimulationError):
    """An output file or directory that cannot be written (exit status 2). A SimulationError, so
    a run that hits it while going still collects its stats."""

    def __init__(self, message):
        super().__init__(message, exit_code=2)


def reason(e):
    """The reason of an OSError in words ('No space left on device')."""
    if isinstance(e, OSError) and e.errno is not None:
        return e.strerror or os.strerror(e.errno)
    return str(e)


def output_error(path, e, what="output file"):
    hint = {errno.ENOSPC: "; free some space or write elsewhere with -o",
            errno.EACCES: "; choose a writable directory with -o",
            errno.EROFS: "; choose a writable directory with -o"}.get(getattr(e, "errno", None), "")
    return OutputError(f"{path}: cannot write the {what} ({reason(e)}){hint}")


def partial_path(path):
    path = Path(path)
    return path.with_name(path.name + PARTIAL)


def write_atomic(path, write, what="output file"):
    """Write `path` whole or not at all: `write(f)` fills the open text file `NAME.partial`, which
    is then renamed to `path`. OutputError (the partial file removed) if anything fails."""
    path = Path(path)
    tmp = partial_path(path)
    try:
        with open(tmp, "w", newline="") as f:
            write(f)
        os.replace(tmp, path)
    except OSError as e:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise output_error(path, e, what) from None


def write_text_atomic(path, text, what="output file"):
    write_atomic(path, lambda f: f.write(text), what)


@contextmanager
def writing(path, what="output file"):
    """Turn an OSError raised inside the block into an OutputError naming `path`."""
    try:
        yield
    except OSError as e:
        raise output_error(path, e, what) from None


def make_outdir(path, what="output directory"):
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        if isinstance(e, FileExistsError):
            raise OutputError(f"{path}: cannot create the {what} (a file of that name "
                              f"exists)") from None
        raise output_error(path, e, what) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: cannot write the {what} (permission denied); choose a "
                          f"writable directory with -o")
    return path


def remove_stale(outdir, names):
    """Remove the files (and their partial copies) an earlier run left under these names."""
    for name in names:
        for p in (Path(outdir) / name, partial_path(Path(outdir) / name)):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
            except OSError as e:
                raise output_error(p, e, "earlier output file (removing it)") from None
