"""The package's version and the compiled engine's identity (the Numba cache key).

Importing it (the package's __init__.py does, before anything can import Numba) sets
NUMBA_CACHE_DIR, unless the user set it, to a folder keyed by a hash of the compiled code's
sources: everything under engine/, components/ and dispatch/ plus isa/encoding.py (the only places
allowed to hold @njit functions or constants they read), declare.py (the block declarations
the State's layout is composed from) and composition.py (which composes them and generates the
dispatch chains by kind, engine/generated.py). Numba's own cache only checks the file that defines a
function, not the modules it calls into or the constants it froze; keying the cache on all of them
makes a stale compiled engine impossible after an edit or an upgrade, and works for read-only
(site-packages) installs. Editing the CLI, config or stats code keeps the cache.

It lies on the ground floor (it imports nothing of the package), so that the checkpoints
(checkpoint.py) and the CLI's cache notice can name the engine without importing the package's
face.
"""
import hashlib
import os
from pathlib import Path

__version__ = "0.1.0"
_COMPILED_DIRS = ("engine", "components", "dispatch")
# composition.py: it generates the dispatch chains the compiled code inlines (engine/generated.py)
_COMPILED_FILES = ("isa/encoding.py", "declare.py", "composition.py")


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
