"""Compiled dispatch written from the blocks' declarations: a module's source generated once per
process and imported from a file, so that Numba compiles it like any engine module and caches it.

DESIGN rule 5 dispatches by integer kind in an if/elif chain; rule 10 has each block declare its
own kinds and handlers. The chains are therefore generated: the composition (and, for the run
loop's own chains, dispatch/chains.py) writes the source of small `@inline` functions -
one test per kind range, one direct call per handler - from the declarations. Direct calls, not
calls by address through a table: an indirect call cost 2.5 ns against 1.0 ns for a direct one
Numba and LLVM may inline (docs/floors.md), and the chains sit on every packet's path; only the
handlers of the blocks compiled on demand (declare.Block.on_demand), which a run either never
reaches or needs compiled apart, are called through the entry table (engine/entries.py).

Why a file and not ``exec``: Numba caches a compiled function on disk only when it has a source
file (its cache is indexed by that file's path and time stamp). The source is written to
``$NUMBA_CACHE_DIR/generated/<name>_<hash of the source>.py``, once: a file that exists is never
rewritten (its time stamp keys Numba's index), and a process that finds it written by another
reads it. The cache folder itself is keyed by the compiled sources (moehub_arch/version.py), and
the generated source is a function of them (the declarations live in components/, the
composition that collects them is part of the key), so the functions a cached caller inlined are
the ones it would inline now. Under NUMBA_DISABLE_JIT (the pure-Python engine) the same module
is imported and its functions run as Python.

This module holds no compiled code; it lies on the engine floor beside the decorators the
generated code uses (engine/jit.py).
"""
import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

_LOADED = {}   # path -> module (one import per process)


def kind_test(var, kinds, first=0):
    """A condition true exactly for the integers `kinds` (`var` an int64 expression): contiguous
    runs become one range test; a run starting at `first` (the lowest kind) one comparison."""
    runs, ks = [], sorted(set(int(k) for k in kinds))
    for k in ks:
        if runs and k == runs[-1][1] + 1:
            runs[-1][1] = k
        else:
            runs.append([k, k])
    parts = []
    for a, b in runs:
        if a == b:
            parts.append(f"{var} == {a}")
        elif a == first:
            parts.append(f"{var} <= {b}")
        else:
            parts.append(f"({var} >= {a} and {var} <= {b})")
    return " or ".join(parts)


def import_line(qualified):
    """('from moehub_arch.components.x import f', 'f') for "components.x.f" (a name under the
    package, as Receive, Send and Crossing name their handlers)."""
    module, _, fn = qualified.rpartition(".")
    return f"from moehub_arch.{module} import {fn}", fn


def _folder():
    base = os.environ.get("NUMBA_CACHE_DIR") or os.path.join(tempfile.gettempdir(), "moehub-arch")
    return Path(base) / "generated"


def load(name, source):
    """The module of `source`, written to the generated folder if it is not there, imported."""
    digest = hashlib.sha1(source.encode()).hexdigest()[:16]
    folder = _folder()
    path = folder / f"{name}_{digest}.py"
    module = _LOADED.get(path)
    if module is not None:
        return module
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{name}_{digest}.{os.getpid()}.tmp"
        tmp.write_text(source)
        try:
            os.link(tmp, path)       # never replaces a file another process wrote
        except FileExistsError:
            pass
        except OSError:              # no hard links here: a rename, still whole
            if not path.exists():
                os.replace(tmp, path)
        if tmp.exists():
            tmp.unlink()
    modname = f"moehub_arch_generated.{name}_{digest}"
    spec = importlib.util.spec_from_file_location(modname, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    spec.loader.exec_module(module)
    _LOADED[path] = module
    return module
