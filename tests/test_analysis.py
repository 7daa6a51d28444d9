"""moehub-sim compare and plot on finished runs."""
import pytest

from conftest import load, run_cli

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from moehub_arch.runner import run_to_outdir
    base = tmp_path_factory.mktemp("runs")
    out = {}
    for scheme in ("deepep", "moehub"):
        out[scheme] = base / scheme
        run_to_outdir(load("experiments/functional.yaml", f"scheme={scheme}", "trace.enabled=true"),
                      out[scheme])
    return out


def test_compare_table_and_speedups(runs, tmp_path):
    from moehub_arch.analysis.compare import compare_table
    from moehub_arch.analysis.rundata import RunData
    header, rows = compare_table([runs["deepep"], runs["moehub"]])
    assert header[:4] == ["stat", "unit", "deepep", "moehub"]
    table = {r[0]: r for r in rows}
    d, m = RunData(runs["deepep"]), RunData(runs["moehub"])
    layer = table["system.moe.layer_time_us"]
    assert layer[2:4] == [d.value("system.moe.layer_time_us"), m.value("system.moe.layer_time_us")]
    first, this = layer[2], layer[3]
    assert layer[4] == (f"{first / this:.3f}x faster" if first >= this else f"{this / first:.3f}x slower")
    stalls = table["system.gpu*.hub.stall_ticks"]   # folded over the 4 GPUs: summed
    assert stalls[2] == sum(d.value(f"system.gpu{g}.hub.stall_ticks") for g in range(4))
    assert "system.moe.phase.dispatch_us" in table
    # one definition of the ideal compute time: the same layer gives the same figure in every scheme
    assert table["system.moe.ideal_compute_us"][2] == table["system.moe.ideal_compute_us"][3] > 0
    assert table["system.moe.ideal_compute_us"][4] == "same"
    header, rows = compare_table([runs["moehub"], runs["moehub"]])
    assert {r[4] for r in rows} == {"same"}
    # a pattern naming one GPU keeps that GPU's rows, not gpu* sums
    header, rows = compare_table([runs["deepep"], runs["moehub"]], ["system.gpu0.hub.tx_packets"])
    assert [r[0] for r in rows] == ["system.gpu0.hub.tx_packets"]
    assert rows[0][2] == d.value("system.gpu0.hub.tx_packets")
    r = run_cli("compare", runs["deepep"], runs["moehub"], "--stats", "system.gpu0.sm*.tensor_busy_ticks")
    assert r.returncode == 0, r.stderr
    shown = [l for l in r.stdout.splitlines() if l.startswith("system.gpu0.sm")]
    busy = [s for s in range(132) if d.value(f"system.gpu0.sm{s}.tensor_busy_ticks")
            or m.value(f"system.gpu0.sm{s}.tensor_busy_ticks")]
    assert len(shown) == len(busy) < 132
    assert f"({132 - len(busy)} more rows are zero in every run; not shown)" in r.stdout

    r = run_cli("compare", runs["deepep"], runs["moehub"], "--stats", "system.gpu*.hub.rx_packets",
                "--per-gpu", "--csv", tmp_path / "c.csv")
    assert r.returncode == 0, r.stderr
    assert "system.gpu3.hub.rx_packets" in r.stdout and "x\n" in r.stdout
    assert (tmp_path / "c.csv").read_text().startswith("stat,unit,deepep,moehub")
    r = run_cli("compare", runs["deepep"], tmp_path / "nothing")
    assert r.returncode == 2 and "no stats.json" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("compare", runs["deepep"], "--stats", "system.nope.*")
    assert r.returncode == 2 and "system.nope.*" in r.stderr


def test_plot_writes_nonempty_pngs(runs, tmp_path):
    from moehub_arch.analysis.plot import plot_runs
    written = plot_runs([runs["deepep"], runs["moehub"]], tmp_path / "figs")
    names = sorted(p.name for p in written)
    assert names == ["deepep_link_utilization.png", "deepep_sm_timeline.png",
                     "moehub_link_utilization.png", "moehub_sm_timeline.png", "time_breakdown.png"]
    for p in written:
        data = p.read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000, p


def test_plot_cli_single_run_and_untraced(runs, tmp_path):
    r = run_cli("plot", runs["moehub"])
    assert r.returncode == 0, r.stderr
    assert (runs["moehub"] / "plots" / "sm_timeline.png").stat().st_size > 10_000
    untraced = tmp_path / "untraced"
    untraced.mkdir()
    (untraced / "stats.json").write_text((runs["deepep"] / "stats.json").read_text())
    r = run_cli("plot", untraced)
    assert r.returncode == 0 and "no trace.json" in r.stderr
    assert (untraced / "plots" / "time_breakdown.png").read_bytes().startswith(PNG)
