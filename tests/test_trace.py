"""Timeline (trace.json), debug flags, periodic stat dumps and progress: structure, bounds, and
that observing a run never changes its results."""
import csv
import io
import json

import pytest

from conftest import load, model_stats_but_events, run_cli

FUNCTIONAL = "experiments/functional.yaml"


def _run(tmp_path, *overrides):
    from moehub_arch.runner import run_to_outdir
    return run_to_outdir(load(FUNCTIONAL, *overrides), tmp_path)


def _events(outdir):
    data = json.loads((outdir / "trace.json").read_text())
    return data["traceEvents"], data["otherData"]


@pytest.mark.parametrize("scheme", ["moehub", "deepep"])
def test_trace_structure(tmp_path, scheme):
    sim = _run(tmp_path, f"scheme={scheme}", "trace.enabled=true")
    events, other = _events(tmp_path)
    end = sim.stats["simTicks"] / 1e6   # us
    procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert [procs[p] for p in sorted(procs)] == ["GPU 0", "GPU 1", "GPU 2", "GPU 3", "NVSwitch 0",
                                                 "NVSwitch 1", "NVSwitch 2", "NVSwitch 3"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    for pid in (1, 2, 3, 4):
        names = {n for (p, _), n in threads.items() if p == pid}
        assert "stream 0 kernels" in names and "phase dispatch" in names
        assert any(n.startswith("SM ") for n in names)
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["cat"] for e in spans} == {"tb", "residency", "launch", "phase"}
    for e in spans:   # every span lies inside simulated time and on a named track
        assert 0 <= e["ts"] and e["dur"] > 0 and e["ts"] + e["dur"] <= end + 1e-6
        assert (e["pid"], e["tid"]) in threads
    # what each TB does nests inside its residency on the same track
    residency = {}
    for e in spans:
        if e["cat"] == "residency":
            residency.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for e in spans:
        if e["cat"] == "tb":
            assert any(a - 1e-6 <= e["ts"] and e["ts"] + e["dur"] <= b + 1e-6
                       for a, b in residency[(e["pid"], e["tid"])]), e
    acts = {e["name"] for e in spans if e["cat"] == "tb"}
    assert {"compute", "communicate"} <= acts
    # kernel spans are the launch table's start and end
    for li in sim.launches:
        start = sim.stats[f"system.gpu{li.gpu}.launch{li.index}.start_tick"] / 1e6
        assert any(e["cat"] == "launch" and e["pid"] == li.gpu + 1 and e["name"] == li.kernel
                   and abs(e["ts"] - start) < 1e-6 for e in spans)
    counters = {(e["pid"], e["name"]) for e in events if e["ph"] == "C"}
    assert (1, "nvlink0 tx util %") in counters and (1, "TBs resident") in counters
    assert (1, "hub requests in flight") in counters
    assert any(p > 1000 and n.endswith("input queue") for p, n in counters)
    assert all(e["args"]["value"] <= 100.0 + 1e-9 for e in events
               if e["ph"] == "C" and "util" in e["name"])
    assert other["dropped_events"] == 0 and other["window_ps"] == [0, sim.stats["simTicks"]]


def test_trace_window_filter_and_size_bound(tmp_path):
    sim = _run(tmp_path, "trace.enabled=true", "trace.start=20us", "trace.stop=40us",
               "trace.gpus=[1]", "trace.components=[sm, nvlink]")
    events, other = _events(tmp_path)
    assert other["window_ps"] == [20_000_000, 40_000_000] and other["dropped_events"] == 0
    timed = [e for e in events if e["ph"] != "M"]
    assert timed and {e["pid"] for e in events} == {2}
    for e in timed:
        assert 20.0 - 1e-6 <= e["ts"] and e["ts"] + e.get("dur", 0) <= 40.0 + 1e-6
    assert not any(e["ph"] == "C" and e["name"].startswith(("hub", "rpm", "aau")) for e in timed)
    assert not any(e["ph"] == "X" and e["cat"] in ("launch", "phase") for e in timed)
    assert any(e["ph"] == "X" and e["cat"] == "tb" for e in timed)
    assert sim.stats["simTicks"] > 40_000_000

    small = tmp_path / "small"
    _run(small, "trace.enabled=true", "trace.max_events=500")
    events, other = _events(small)
    assert other["dropped_events"] > 0
    bounded = [e for e in events if e["ph"] != "M" and e.get("cat") not in ("launch", "phase")]
    assert len(bounded) == 500   # the few launch and phase spans are always written
    assert any(e.get("cat") == "launch" for e in events)


def test_observing_a_run_changes_nothing(tmp_path):
    plain = _run(tmp_path / "plain")
    observed = _run(tmp_path / "observed", "trace.enabled=true", "trace.counter_period=37ns",
                    "debug.flags=All", "debug.file=debug.txt", "stats.dump_period=5us")
    # everything but the event counts: sm_fold is off while the SMs are traced (each issue
    # cycle is then its own event, as the trace records it)
    assert model_stats_but_events(observed.stats) == model_stats_but_events(plain.stats)
    assert (tmp_path / "observed" / "debug.txt").stat().st_size > 0


def test_debug_flags_lines_and_start(tmp_path):
    _run(tmp_path, "debug.flags=[Hub, NVLink, DAM]", "debug.start=20us", "debug.file=dbg.txt",
         "scheme=deepep")
    lines = (tmp_path / "dbg.txt").read_text().splitlines()
    assert lines
    who = set()
    for line in lines:
        tick, comp, what = line.split(": ", 2)
        assert int(tick) >= 20_000_000
        who.add(comp.split(".")[2].rstrip("0123456789") if comp.count(".") >= 2 else comp)
    assert any(".hub" in l for l in lines) and any(".nvlink" in l for l in lines)
    assert any("system.switch" in l and "sends" in l for l in lines)   # switch -> GPU direction
    assert not any(".sm" in l or ".rpm" in l for l in lines)


def test_periodic_dumps(tmp_path):
    sim = _run(tmp_path, "stats.dump_period=10us")
    with (tmp_path / "stats_dumps.csv").open() as f:
        rows = list(csv.DictReader(f))
    ticks = sorted({int(r["tick"]) for r in rows})
    assert ticks == list(range(10_000_000, sim.stats["simTicks"] + 1, 10_000_000))
    sim_ticks = {int(r["tick"]): float(r["value"]) for r in rows if r["name"] == "simTicks"}
    assert all(sim_ticks[t] == t for t in ticks)
    insts = [float(r["value"]) for r in rows if r["name"] == "simInsts"]
    assert insts == sorted(insts) and insts[-1] <= sim.stats["simInsts"]
    txt = (tmp_path / "stats_dumps.txt").read_text()
    assert txt.count("Begin Simulation Statistics") == len(ticks)


def test_progress_line():
    from moehub_arch.progress import Progress
    from moehub_arch.simulation import Simulation
    out = io.StringIO()
    sim = Simulation(load(FUNCTIONAL, "run.batch_events=2000"))
    sim.run([Progress(stream=out, interval=0.0)])
    assert "simulated" in out.getvalue() and "M events/s" in out.getvalue()


def test_cli_trace_debug_errors_and_quiet(tmp_path):
    r = run_cli("run", "configs/experiments/functional.yaml", "-o", tmp_path, "--quiet",
                "--trace", "--debug-flags", "Launch", "--debug-start", "1000",
                "--debug-file", "d.txt")
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r.stderr
    assert (tmp_path / "trace.json").is_file() and "kernel '" in (tmp_path / "d.txt").read_text()
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["trace"]["enabled"] is True and cfg["debug"]["flags"] == ["Launch"]
    assert cfg["debug"]["start"] == 1000 and cfg["stats"]["dump_period"] == 0
    for bad, frag in ((["--debug-flags", "Hub,NVLinc"], "did you mean 'NVLink'"),
                      (["--set", "trace.gpus=[9]"], "trace.gpus[0]: GPU 9 out of range"),
                      (["--set", "trace.stop=1us", "--set", "trace.start=2us"], "trace.stop"),
                      (["--set", "trace.components=[sm, lnks]"], "trace.components[1]")):
        r = run_cli("run", "configs/experiments/functional.yaml", "-o", tmp_path / "x", *bad)
        assert r.returncode == 2 and frag in r.stderr and "Traceback" not in r.stderr, r.stderr
