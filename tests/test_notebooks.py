"""The example notebooks (tools/notebooks/*.ipynb) run, in their quick version, in a fresh kernel:
every cell executes (their own asserts check that every point computed the layer correctly) and
they produce their table and figure."""
import pytest

from conftest import REPO, load_script

NOTEBOOKS = REPO / "tools" / "notebooks"


def _runner():
    return load_script(NOTEBOOKS / "run_notebook.py")


@pytest.mark.parametrize("name, figure, columns", [
    ("hub_design_space", "hub_design_space.png", ("rpm_efficiency", "tile_rows")),
    ("model_search", "model_search.png", ("ns_per_token", "E16_k2_I128")),
])
def test_notebook_quick_version_executes(tmp_path, name, figure, columns):
    pytest.importorskip("nbclient")
    nb = _runner().execute(NOTEBOOKS / f"{name}.ipynb", quick=True, timeout=300, outdir=tmp_path)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    tables = "\n".join(o["data"].get("text/plain", "") for o in outputs if "data" in o)
    assert all(c in tables for c in columns), tables
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert (tmp_path / figure).stat().st_size > 10_000
    assert not [p for p in (tmp_path / "sweep" / "points").iterdir() if (p / "error.txt").exists()]
