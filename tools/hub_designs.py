"""The hub design files (configs/hub/designs/<design>.yaml) as --set overrides: one reading of a
design file, shared by tools/layer_table.py and tools/layer_grid.py."""
from pathlib import Path

import yaml

DESIGNS_DIR = Path(__file__).resolve().parents[1] / "configs" / "hub" / "designs"


def flat_items(tree, prefix=""):
    """(dotted key, value) of every leaf of a nested mapping (a config fragment's overrides)."""
    for k, v in tree.items():
        if isinstance(v, dict):
            yield from flat_items(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def design_overrides(design):
    """{dotted key: value} of a hub design file (configs/hub/designs/<design>.yaml)."""
    return dict(flat_items(yaml.safe_load((DESIGNS_DIR / f"{design}.yaml").read_text()) or {}))
