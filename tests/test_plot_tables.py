"""`moehub-sim plot TABLE`: the figures of result tables (moehub_arch/analysis/tables.py), drawn
from the tables the table tools print, without running anything."""
from conftest import REPO, run_cli

from moehub_arch.analysis.tables import read_tables, table_figures

PNG = b"\x89PNG\r\n\x1a\n"
GRID = REPO / "tools" / "figures" / "moehub_paper_grid.md"


def test_grid_table_gives_speedup_figures(tmp_path):
    figs = table_figures(GRID)
    assert set(figs) == {"speedup.png"} | {f"speedup_vs_{b}.png"
                                           for b in ("megatron", "tutel", "overlap", "deepep")}
    assert all(png.startswith(PNG) for png in figs.values())
    # the same table as CSV (the skipped cells' text is not a number: left out)
    header, rows = next(t for t in read_tables(GRID) if "vs deepep" in t[0])
    csv = tmp_path / "grid.csv"
    csv.write_text("\n".join(",".join(c.replace(",", ";") for c in r) for r in [header] + rows))
    r = run_cli("plot", csv, "-o", tmp_path / "figs", "--grid-gpus", "8", "--std", "0")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "figs" / "speedup_vs_tutel.png").read_bytes().startswith(PNG)


def test_scheme_table_gives_breakdown_and_wire_bytes(tmp_path):
    r = run_cli("plot", REPO / "docs" / "systems" / "dysharp.md", "-o", tmp_path)
    assert r.returncode == 0, r.stderr
    for name in ("time_breakdown.png", "wire_bytes.png"):
        assert (tmp_path / name).read_bytes().startswith(PNG)


def test_a_file_without_a_table_is_a_clear_error(tmp_path):
    page = tmp_path / "notes.md"
    page.write_text("# no table here\n")
    r = run_cli("plot", page, "-o", tmp_path / "figs")
    assert r.returncode == 2 and "no table with columns to draw" in r.stderr
    assert "Traceback" not in r.stderr
    r = run_cli("plot", GRID, "--grid-gpus", "3", "-o", tmp_path / "figs")
    assert r.returncode == 2 and "no cell with 3 GPUs" in r.stderr
