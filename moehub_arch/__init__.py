"""moehub-arch: a modular multi-GPU architecture simulator for Mixture-of-Experts communication.

Importing the package sets NUMBA_CACHE_DIR (unless the user set it) to a folder keyed by a hash of
the compiled engine's sources (moehub_arch/version.py: _COMPILED_DIRS, the Numba cache key), so a
stale compiled engine is impossible after an edit or an upgrade.

The Python API (moehub_arch/api.py) is available from the package, loaded on first use:
`moehub_arch.run`, `layer`, `load_config`, `sweep`, `load_results`, `compare`, `Results`. This module is
the package's face: it only hands names on, and no module of the package imports it
(tests/test_import_contract.py), so its imports on first use point down.
"""
from .version import __version__, engine_version  # noqa: F401  (sets NUMBA_CACHE_DIR)

_API = ("run", "layer", "load_config", "load_results", "compare", "Results")


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
