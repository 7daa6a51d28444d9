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

One writer per output directory (issue 52): a run (and a sweep) holds an exclusive lock on
`OUTDIR/.moehub-lock` (`OutdirLock`, flock(2): the kernel releases it when the process ends, so a
killed run leaves no stale lock) from before it removes the earlier run's files until its stats
are written. A second run into the same directory is refused at once with an OutputError naming
the run that holds it (process id, host, start time, command), never left to mix its files with
the other's.
"""
import errno
import fcntl
import json
import os
import socket
import sys
import time
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


LOCK_NAME = ".moehub-lock"


class OutdirLock:
    """Context manager: hold the exclusive lock of an output directory, or raise OutputError
    naming the run that holds it. The lock file is removed on release."""

    def __init__(self, outdir, what="run"):
        self.path = Path(outdir) / LOCK_NAME
        self.what = what
        self.fd = None

    def __enter__(self):
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise output_error(self.path, e, "output directory's lock file") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise OutputError(
                    f"{self.path.parent}: another {holder.get('what', 'run')} is writing this "
                    f"output directory ({_holder_text(holder)}); two runs into one directory "
                    f"would mix their files: wait for it to finish, or choose another directory "
                    f"with -o") from None
            except OSError as e:
                os.close(fd)
                raise output_error(self.path, e, "output directory's lock file") from None
            # the holder before us may have removed the file between our open and our lock:
            # then we locked a file nobody else can see; start again on the current one
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        info = {"pid": os.getpid(), "host": socket.gethostname(), "what": self.what,
                "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                "command": " ".join(["moehub-sim"] + sys.argv[1:]) if sys.argv else "?"}
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(info).encode())
        self.fd = fd
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            try:
                self.path.unlink()
            except OSError:
                pass
            os.close(self.fd)   # releases the lock
            self.fd = None
        return False


def _holder(fd):
    try:
        data = os.pread(fd, 4096, 0)
        info = json.loads(data.decode())
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}


def _holder_text(info):
    if not info.get("pid"):
        return "its details are not readable"
    return (f"process {info['pid']} on {info.get('host', '?')}, started {info.get('started', '?')}"
            f": {info.get('command', '?')}")
