"""Unexpected exceptions: reported as a bug in moehub-sim, never as a raw traceback.

A user error (bad input, an output that cannot be written, a stuck run) is a message naming the
file and key (errors.py). Anything else the command line meets is a bug in the simulator: the CLI
writes the full traceback, with the command, the versions and the platform, to a file and prints
one paragraph naming the command, the version and that file, with exit status 70 (EX_SOFTWARE of
sysexits.h: an internal software error, distinct from 2, bad input).

Where the file goes: `$MOEHUB_CRASH_DIR` if set, else `$XDG_CACHE_HOME/moehub-arch/crash-reports`
(default `~/.cache/...`), else the system's temporary folder when that cannot be written.
"""
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

from . import __version__, engine_version

#: exit status of an internal error (sysexits.h EX_SOFTWARE)
EXIT_BUG = 70


def crash_dir() -> Path:
    if os.environ.get("MOEHUB_CRASH_DIR"):
        return Path(os.environ["MOEHUB_CRASH_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "moehub-arch" / "crash-reports"


def _write(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    fd, name = tempfile.mkstemp(prefix=f"crash-{stamp}-{os.getpid()}-", suffix=".txt",
                                dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return Path(name)


def write_report(error: BaseException, argv) -> Path | None:
    """Write the traceback of `error` with the command and versions; returns the file (None if
    no folder could be written)."""
    command = "moehub-sim " + " ".join(argv)
    text = (f"command: {command}\nworking directory: {os.getcwd()}\n"
            f"moehub-arch {__version__} (engine {engine_version()})\n"
            f"Python {sys.version.split()[0]} on {platform.platform()}\n\n"
            + "".join(traceback.format_exception(type(error), error, error.__traceback__)))
    for folder in (crash_dir(), Path(tempfile.gettempdir())):
        try:
            return _write(folder, text)
        except OSError:
            continue
    return None


def bug_paragraph(error: BaseException, argv, path) -> str:
    """The one paragraph the user sees."""
    where = (f"the traceback is in {path}" if path is not None else
             "the traceback could not be written to a file (no writable folder)")
    what = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    if len(what) > 300:
        what = what[:300] + "..."
    return (f"moehub-sim: internal error (a bug in moehub-sim, not in your input) while running "
            f"`moehub-sim {' '.join(argv)}` with moehub-arch {__version__} (engine "
            f"{engine_version()}): {what}; {where}. Please report it with that file.")


def report_bug(error: BaseException, argv) -> int:
    """Write the report, print the paragraph on stderr; returns the exit status (70)."""
    path = write_report(error, argv)
    print(bug_paragraph(error, argv, path), file=sys.stderr)
    return EXIT_BUG
