"""Where the user-editable data folders (`isa/`, `configs/`, `workloads/`) live.

In a source checkout they sit at the repository root, next to the `moehub_arch` package; a wheel
(`pip install .`, see pyproject.toml) carries them inside the package as `moehub_arch/_data/`.
"""
from pathlib import Path


def data_root() -> Path:
    """The folder holding `isa/`, `configs/` and `workloads/`."""
    repo = Path(__file__).resolve().parents[1]
    if (repo / "isa").is_dir():
        return repo
    return Path(__file__).resolve().parent / "_data"
