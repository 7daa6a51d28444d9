"""What the two front ends share: the command line (cli.py) and the Python API (api.py), and the
sweep package they both drive. Each helper is public here so that neither front end reaches into
the other's private names.

- DEFAULT_CONFIG and `config_path`: the config a run uses when none is named;
- `user_path`: the rule for a path given on the command line or to the API (a relative path that
  does not exist here falls back to the shipped data folders, moehub_arch/paths.py);
- `jit_disabled`: which engine this process runs, without importing Numba;
- `require_pandas`: pandas, or an error naming the optional extra that installs it.
"""
import os
import sys
from pathlib import Path

from .paths import data_root

DEFAULT_CONFIG = "configs/default.yaml"


def jit_disabled():
    """True when the engine code runs interpreted (the reference engine)."""
    if "numba" in sys.modules:
        import numba
        return bool(numba.config.DISABLE_JIT)
    return os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0")


def config_path(path):
    """The config file a run reads: `path` (see user_path), or the shipped default config."""
    if path is None:
        return data_root() / DEFAULT_CONFIG
    return user_path(path)


def user_path(path):
    """A path as given; a relative one that does not exist here (`configs/ubench/x.yaml`,
    `workloads/kernels/...`) falls back to the shipped data folders, so it works from anywhere."""
    path = Path(path)
    if not path.exists() and not path.is_absolute() and (data_root() / path).is_file():
        return data_root() / path
    return path


def require_pandas():
    """The pandas module (an optional extra: the API's DataFrames and sweep tables need it)."""
    try:
        import pandas
    except ImportError:
        raise ImportError("DataFrames need pandas: pip install 'moehub-arch[analysis]' "
                          "(or pip install pandas)") from None
    return pandas
