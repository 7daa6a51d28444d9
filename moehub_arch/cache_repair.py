"""A damaged compile cache is rebuilt, never a traceback (issue 52).

Numba keeps each compiled function in its cache folder (NUMBA_CACHE_DIR, moehub_arch/__init__.py)
as an index file `NAME.pyXY.nbi` (pickles: Numba's version, then the source stamp and the
overloads) and one data file per overload `NAME.pyXY.N.nbc` (a pickle of the compiled library).
Numba writes them atomically, but a disk that filled up, a copy cut short or a user's edit can
leave one damaged, and Numba then fails with an unpickling error on every later run until the
folder is deleted by hand.

Two guards, both on the Python side (no compiled code changes):

- before a run loads the engine, `repair_cache()` checks every index and data file of the cache
  folder for the end every complete pickle has (the STOP opcode '.'): a file cut short, or an
  empty one, is removed with the index and data files of its function, so Numba compiles that
  function again and caches it anew; one line on stderr says so. Reading the last byte of the
  ~2,400 files costs milliseconds, once per process.
- damage the first check cannot see (bytes changed inside a file) still fails while loading:
  `damaged_cache_file(error)` finds the file from the unpickling error's traceback, the caller
  removes that function's files the same way and loads the engine once more (Simulation.run, for
  the entry points and the run loop); a damaged file read elsewhere (a start hook, the State
  packer) is removed by the command line, which asks to run the command again (exit status
  EXIT_RETRY, 75: EX_TEMPFAIL of sysexits.h).
"""
import os
import pickle
import sys
from pathlib import Path

_CHECKED = set()

#: exit status of a command stopped by a damaged cache file it removed: run it again
EXIT_RETRY = 75

#: what loading a damaged cache file raises inside Numba's cache reader
CACHE_LOAD_ERRORS = (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
                     IndexError, KeyError, ImportError, OSError)


def _stem(path: Path) -> str:
    """'loop.run_loop-37.py311' of 'loop.run_loop-37.py311.1.nbc' or '....py311.nbi'."""
    name = path.name
    if name.endswith(".nbi"):
        return name[:-4]
    return name[:-4].rsplit(".", 1)[0]   # drop '.nbc', then the overload number


def remove_function(path: Path) -> list:
    """Remove the index and every data file of the function `path` belongs to; returns them."""
    stem = _stem(path)
    removed = []
    for p in [path.parent / f"{stem}.nbi"] + sorted(path.parent.glob(f"{stem}.*.nbc")):
        try:
            p.unlink()
            removed.append(p)
        except FileNotFoundError:
            pass
    return removed


def _cut_short(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return True
            f.seek(-1, os.SEEK_END)
            return f.read(1) != pickle.STOP
    except OSError:
        return False


def repair_cache(folder=None, say=True) -> list:
    """Remove the functions whose cache files are cut short in `folder` (default NUMBA_CACHE_DIR;
    checked once per process); returns the damaged files found."""
    folder = Path(folder or os.environ.get("NUMBA_CACHE_DIR") or "")
    if not str(folder) or folder in _CHECKED or not folder.is_dir():
        return []
    _CHECKED.add(folder)
    damaged = [p for pattern in ("*/*.nbi", "*/*.nbc") for p in folder.glob(pattern)
               if _cut_short(p)]
    for p in damaged:
        remove_function(p)
    if damaged and say:
        say_rebuilt(folder, damaged, "cut short")
    return damaged


def say_rebuilt(folder, damaged, how):
    shown = list(dict.fromkeys(p.name for p in damaged))   # one name per function and overload
    names = ", ".join(shown[:3]) + (f" and {len(shown) - 3} more" if len(shown) > 3 else "")
    print(f"moehub-sim: the compiled-engine cache in {folder} had {len(damaged)} damaged "
          f"file(s) ({names}: {how}); removed them, and the engine parts they held are compiled "
          f"again and cached anew (seconds to minutes, once)", file=sys.stderr, flush=True)


def damaged_cache_file(error):
    """The cache file whose loading raised `error` (from Numba's cache reader frames in its
    traceback), or None when the error did not come from reading the cache."""
    tb = error.__traceback__
    found = None
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name in ("_load_data", "_load_index"):
            owner = frame.f_locals.get("self")
            if frame.f_code.co_name == "_load_index":
                found = getattr(owner, "_index_path", None)
            else:
                name = frame.f_locals.get("name")
                base = getattr(owner, "_cache_path", None)
                if name and base:
                    found = os.path.join(base, name)
        tb = tb.tb_next
    return Path(found) if found else None
