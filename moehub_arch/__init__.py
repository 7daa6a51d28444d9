"""moehub-arch: a modular multi-GPU architecture simulator for Mixture-of-Experts communication.

Importing the package sets NUMBA_CACHE_DIR (unless the user set it) to a folder keyed by a hash of
the compiled code's sources: everything under engine/, components/ and dispatch/ plus
isa/encoding.py (the only places allowed to hold @njit functions or constants they read) and
declare.py (the block declarations the State's layout is composed from). Numba's own cache only
checks the file that defines a function, not the modules it calls into or the constants it froze; keying
the cache on all of them makes a stale compiled engine impossible after an edit or an upgrade, and
works for read-only (site-packages) installs. Editing the CLI, config or stats code keeps the cache.

The Python API (moehub_arch/api.py) is available from the package, loaded on first use:
`moehub_arch.run`, `load_config`, `sweep`, `load_results`, `compare`, `Results`.
"""
import hashlib
import os
from pathlib import Path

__version__ = "0.1.0"
_COMPILED_DIRS = ("engine", "components", "dispatch")
_COMPILED_FILES = ("isa/encoding.py", "declare.py")


def _source_hash():
    h = hashlib.sha1(__version__.encode())
    root = Path(__file__).resolve().parent
    compiled = [p for d in _COMPILED_DIRS for p in (root / d).rglob("*.py")]
    for path in sorted(compiled + [root / f for f in _COMPILED_FILES]):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def engine_version():
    """Identity of the compiled engine's sources (the Numba cache key): checkpoints written by one
    engine version are refused by another, whose State layout or semantics may differ."""
    global _ENGINE_VERSION
    if _ENGINE_VERSION is None:
        _ENGINE_VERSION = f"{__version__}+{_source_hash()}"
    return _ENGINE_VERSION


_ENGINE_VERSION = None

if "NUMBA_CACHE_DIR" not in os.environ:
    _base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    os.environ["NUMBA_CACHE_DIR"] = str(_base / "moehub-arch" / f"numba-{_source_hash()}")


_API = ("run", "load_config", "load_results", "compare", "Results")


def __getattr__(name):
    # the API is imported on first use, so `import moehub_arch` (and the CLI) stays light;
    # `moehub_arch.sweep` is the sweep package, callable as the API's sweep() (sweep/__init__.py)
    if name in _API:
        from . import api
        return getattr(api, name)
    if name == "sweep":
        import importlib
        return importlib.import_module(".sweep", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
