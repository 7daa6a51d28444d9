"""Robustness, round three (issue 52): unexpected exceptions are reported as bugs, numbers at
their edges, one writer per output folder, checkpoints that know their inputs, a damaged compile
cache, sweeps that survive a bad point, ISA files, the Python API's arguments, and the watchdog
telling slow from stuck.

Every case asserts the exit status, the message and that no traceback reaches the terminal. Most
need no simulation; the few that run one use the 2-GPU p2p system.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CONFIGS, REPO, load, mini_system, p2p_kernel, read_stats_json, run_cli

P2P = CONFIGS / "ubench/p2p_latency.yaml"
MINI = [f"--set={s}" for s in mini_system()]


def _main(capsys, *argv):
    """The command line in-process: (exit status, stderr), with no traceback on stderr."""
    from moehub_arch.cli import main
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return rc, err


def _error(capsys, *argv, status=2):
    """A user error: `status`, one 'moehub-sim: error:' paragraph; returns the message."""
    rc, err = _main(capsys, *argv)
    assert rc == status, (rc, err)
    assert err.startswith("moehub-sim: error: ") and err.count("moehub-sim: error:") == 1, err
    return err


# ----------------------------------------------------------------- 7. unexpected exceptions
def test_an_unexpected_exception_is_reported_as_a_bug_with_a_traceback_file(tmp_path, capsys,
                                                                          monkeypatch):
    from moehub_arch import __version__, composition
    monkeypatch.setenv("MOEHUB_CRASH_DIR", str(tmp_path / "crash"))

    def broken(name=None):
        return {}[name]
    monkeypatch.setattr(composition, "describe", broken)
    rc, err = _main(capsys, "blocks", "sm")
    assert rc == 70, err
    assert err.count("\n") == 1 and err.startswith("moehub-sim: internal error (a bug in "
                                                   "moehub-sim, not in your input)"), err
    assert "`moehub-sim blocks sm`" in err and f"moehub-arch {__version__}" in err
    assert "KeyError: 'sm'" in err
    (report,) = (tmp_path / "crash").iterdir()
    assert f"the traceback is in {report}" in err
    text = report.read_text()
    assert text.startswith("command: moehub-sim blocks sm\n")
    assert "Traceback (most recent call last)" in text and "in broken" in text


def test_a_bug_report_falls_back_to_the_temporary_folder(tmp_path, capsys, monkeypatch):
    from moehub_arch import composition
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("MOEHUB_CRASH_DIR", str(tmp_path / "file" / "sub"))   # cannot be created
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(composition, "describe", lambda name=None: 1 / 0)
    rc, err = _main(capsys, "blocks")
    assert rc == 70 and "ZeroDivisionError: division by zero" in err
    (report,) = (tmp_path / "tmp").iterdir()
    assert str(report) in err


def test_a_bug_in_a_real_process_is_one_paragraph(tmp_path):
    # a sitecustomize-free way to break the command: a module on the path that shadows nothing
    # but makes `blocks` fail, injected through -c
    code = ("import sys, moehub_arch.composition as c\n"
            "c.describe = lambda name=None: [][1]\n"
            "from moehub_arch.cli import main\nsys.exit(main(['blocks']))\n")
    env = dict(os.environ, MOEHUB_CRASH_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 70, r.stderr
    assert "Traceback" not in r.stderr and "IndexError: list index out of range" in r.stderr
    assert len(list(tmp_path.iterdir())) == 1


# ------------------------------------------------------------------ 1. numbers at their edges
def _run(*sets):
    argv = ["run", str(P2P)]
    for s in sets:
        argv += ["--set", s]
    return argv


TIME_RANGE = "expected a time of at most 4611686018427387ps (about 4611 s, the simulated-time range"
NUMBER_CASES = [
    ("int-above-int64", _run("system.gpu.num_sms=99999999999999999999999"),
     ["system.gpu.num_sms", "expected an integer <= 9223372036854775807 (the largest 64-bit "
      "integer), found 99999999999999999999999"]),
    ("int-below-int64", _run("workload.launches.0.stream=-99999999999999999999999"),
     ["workload.launches[0].stream", "expected an integer >= "]),
    ("seed-above-int64", ["run", str(P2P), "--seed", "99999999999999999999999"],
     ["run.seed", "expected an integer <= 9223372036854775807"]),
    ("kernel-param-above-int64", _run("workload.launches.0.params.iters=99999999999999999999999"),
     ["workload.launches[0].params.iters", "expected an integer that fits a 64-bit register"]),
    ("launch-expression-above-int64", _run("workload.launches.0.grid='2**100'"),
     ["workload.launches[0].grid", "'2**100' evaluates to 1.26765e+30, which does not fit a "
      "64-bit integer"]),
    ("launch-expression-infinite", _run("workload.launches.0.params.iters='1e400'"),
     ["workload.launches[0].params.iters", "'1e400' evaluates to inf, not an integer"]),
    # found by the config fuzz hunt: the fabric built 2**62 switches (loading never ended)
    ("switch-count-beyond-the-links", _run("system.switch.count=4611686018427387904"),
     ["system.switch.count", "expected at most one switch per GPU link (system.num_gpus x "
      "system.nvlink.links_per_gpu = 144), found 4611686018427387904"]),
    # a machine whose simulator state cannot be allocated: NumPy refuses the thread-block records
    ("sms-beyond-any-memory", _run("system.gpu.num_sms=4611686018427387904"),
     ["the configured machine's simulator state cannot be allocated",
      "system.gpu.num_sms = 4611686018427387904 (--set system.gpu.num_sms=4611686018427387904)",
      "reduce them, or run on a computer with more memory"]),
    ("time-exponent-beyond-decimal", _run("system.nvlink.latency=1e9999999ns"),
     ["system.nvlink.latency", "'1e9999999ns' is too large", TIME_RANGE]),
    ("time-beyond-the-engine", _run("system.nvlink.latency=1e30ns"),
     ["system.nvlink.latency", "'1e30ns' is too large", TIME_RANGE]),
    ("size-above-int64", _run("system.gpu.hbm.capacity=1e30GB"),
     ["system.gpu.hbm.capacity", "'1e30GB' is too large", "expected a size of at most "
      "9223372036854775807B"]),
    ("bandwidth-infinite", _run("system.nvlink.bandwidth=1e400GB/s"),
     ["system.nvlink.bandwidth", "'1e400GB/s' is too large"]),
    ("float-nan", _run("system.nic.message_rate=.nan"),
     ["system.nic.message_rate", "expected a finite number, found 'nan'"]),
    ("float-infinity", _run("system.nic.message_rate=.inf"),
     ["system.nic.message_rate", "expected a finite number, found 'inf'"]),
    ("float-min-declared", _run("system.nic.message_rate=-5"),
     ["system.nic.message_rate", "expected a number >= 0, found '-5'"]),
    ("nic-rate-tiny", _run("system.nic.message_rate=1.0e-30"),
     ["system.nic.message_rate", "expected 0 (no limit) or at least 0.000217 work requests per "
      "second", "found 1e-30"]),
    ("routing-gini-nan", _run("workload.layer.routing.gini=.nan"),
     ["workload.layer.routing.gini", "expected a finite number"]),
    ("flag-max-wall-infinite", ["run", str(P2P), "--max-wall", "inf"],
     ["--max-wall inf: too large: expected a time of at most 9223372036854775807ps"]),
    ("flag-max-wall-overflows-float", ["run", str(P2P), "--max-wall", "1e400"],
     ["--max-wall 1e400: too large"]),
    ("flag-max-ticks-infinite", ["run", str(P2P), "--max-ticks", "inf"],
     ["--max-ticks inf: too large", TIME_RANGE]),
    ("flag-max-ticks-beyond-the-engine", ["run", str(P2P), "--max-ticks", "1e30"],
     ["--max-ticks 1e30: too large"]),
    ("flag-checkpoint-at-infinite", ["run", str(P2P), "--checkpoint-at", "inf"],
     ["--checkpoint-at inf: too large"]),
    ("flag-debug-start-beyond-the-engine", ["run", str(P2P), "--debug-start", "9" * 23],
     ["debug.start", "is too large", TIME_RANGE]),
]


@pytest.mark.parametrize("argv,fragments", [c[1:] for c in NUMBER_CASES],
                         ids=[c[0] for c in NUMBER_CASES])
def test_numbers_at_their_edges_are_named_errors(tmp_path, capsys, argv, fragments):
    err = _error(capsys, *argv, "-o", tmp_path / "out")
    for f in fragments:
        assert f in err, (f, err)
    assert not (tmp_path / "out").exists()


def test_a_host_time_is_not_bounded_by_the_simulated_range():
    cfg = load("ubench/p2p_latency.yaml", "run.max_wall=10000s")
    assert cfg.run.max_wall == 10 ** 16


def test_isa_costs_and_expressions_at_their_edges(tmp_path, capsys):
    isa = tmp_path / "my.yaml"
    entry = "  x: {{semantic: nop, unit: alu, operands: [], latency: {}, ii: 1, description: d}}\n"
    for latency, fragment in (("99999999999999999999999", "must be <= 2147483647 (a 32-bit cost"),
                              ("'10**10**10'", "is too large (more than 1024 bits)"),
                              ("'2**40'", "gives 1099511627776; expected a non-negative integer "
                                          "number of cycles/units <= 2147483647"),
                              ("'1e400'", "gives inf"),
                              ("\"'a' * 3\"", "a string ('a') can only be a function argument")):
        isa.write_text("instructions:\n" + entry.format(latency))
        err = _error(capsys, *_run(f"workload.isa_files=[{isa}]"), "-o", tmp_path / "out")
        assert f"{isa}:2" in err and "instructions.x" in err and fragment in err, err


def test_a_sweep_grid_value_beyond_int64_and_a_scheduler_that_is_not_dask(tmp_path, capsys):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"name: s\nconfig: {P2P}\ngrid:\n  run.seed: [1, {2 ** 100}]\n")
    err = _error(capsys, "sweep", sweep, "-o", tmp_path / "out", "--quiet")
    assert f"s.yaml: point {{'run.seed': {2 ** 100}}}" in err
    assert "expected an integer <= 9223372036854775807" in err
    sweep.write_text(f"name: s\nconfig: {P2P}\ngrid:\n  run.seed: [1]\n")
    for address in ("notdask", "http://localhost:1"):
        err = _error(capsys, "sweep", sweep, "-o", tmp_path / "out", "--quiet",
                     "--scheduler", address)
        assert f"--scheduler {address}: not a Dask scheduler address" in err
        assert "expected tcp://HOST:PORT" in err


def test_a_run_that_leaves_the_simulated_time_range_stops_naming_the_key(tmp_path, capsys):
    # a 1 B/s link with the watchdogs off: 100 ping-pongs of 256 s packets would take hours of
    # simulated time; the engine's femtosecond clock overflowed at ~9,223 s (time went negative)
    err = _error(capsys, *_run(*mini_system(), "system.nvlink.bandwidth=1B/s",
                               "run.watchdog_interval=0ps", "run.livelock_interval=0ps"),
                 "-o", tmp_path / "out", "--quiet")
    assert "simulated time reached 4611.69 s (tick 4611686018427387), the end of the range" in err
    assert "The keys that make it so slow: system.nvlink.bandwidth = 1 B/s (a 256 B packet takes " \
           "256 s)" in err
    stats = read_stats_json(tmp_path / "out")
    assert stats["simTicks"] == 4611686018427387
    # the report's latency was never measured: left out (before: a negative latency)
    assert not [k for k in stats if k.startswith("system.report.")]


# ------------------------------------------------------------ 3. one writer per output folder
def _hold_lock(outdir, what="run"):
    """A process holding OUTDIR's lock (as a run does) until it is killed."""
    code = ("import sys, time\nfrom moehub_arch.outputs import OutdirLock\n"
            f"with OutdirLock({str(outdir)!r}, {what!r}):\n"
            "    print('held', flush=True)\n    time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, "run", "other.yaml"], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_run_into_a_busy_output_folder_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "stats.json").write_text("{}")     # the other run's, must stay as it is
    holder = _hold_lock(out)
    try:
        err = _error(capsys, "run", P2P, *MINI, "-o", out, "--quiet")
    finally:
        holder.kill()
        holder.wait()
    assert f"{out}: another run is writing this output directory (process {holder.pid} on " in err
    assert "two runs into one directory would mix their files" in err
    assert (out / "stats.json").read_text() == "{}" and not (out / "config.json").exists()
    # the holder was killed: its lock went with it, and the next run writes the folder
    rc, err = _main(capsys, "run", P2P, *MINI, "-o", out, "--quiet")
    assert rc == 0, err
    assert read_stats_json(out)["simCompleted"] == 1
    assert not (out / ".moehub-lock").exists()


def test_a_second_sweep_into_a_busy_folder_is_refused(tmp_path, capsys):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"name: s\nconfig: {P2P}\ngrid:\n  run.seed: [1]\n")
    (tmp_path / "out").mkdir()
    holder = _hold_lock(tmp_path / "out", "sweep")
    try:
        err = _error(capsys, "sweep", sweep, "-o", tmp_path / "out", "--quiet")
    finally:
        holder.kill()
        holder.wait()
    assert "another sweep is writing this output directory" in err
    assert not (tmp_path / "out" / "results.csv").exists()


# ------------------------------------------------------------ 4. checkpoints know their inputs
@pytest.fixture
def checkpoint(tmp_path):
    """A checkpoint of the small p2p run at 2 us, its kernel a copy in the temporary folder."""
    from moehub_arch.checkpoint import CheckpointWriter
    from moehub_arch.simulation import Simulation
    kernel = tmp_path / "p2p.s"
    kernel.write_text((REPO / "workloads/kernels/ubench/p2p_latency.s").read_text())
    sim = Simulation(load("ubench/p2p_latency.yaml", *mini_system(),
                          f"workload.kernel_files=[{kernel}]"))
    writer = CheckpointWriter([2_000_000], str(tmp_path / "ck"))
    sim.run([writer])
    assert writer.written
    return tmp_path / "ck"


def _edit_json(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _set_latency(data):
    data["system"]["nvlink"]["latency"] = 2 * data["system"]["nvlink"]["latency"]


EDITED_CHECKPOINTS = [
    ("config-value", lambda d: _edit_json(d / "input_config.json", _set_latency),
     ["config values changed since the checkpoint was written: system.nvlink.latency: 100000 "
      "when written, 200000 now"]),
    ("seed", lambda d: _edit_json(d / "input_config.json",
                                  lambda c: c["run"].update(seed=c["run"]["seed"] + 1)),
     ["run.seed is ", "in input_config.json", "in meta.json",
      "config values changed since the checkpoint was written: run.seed: "]),
    ("both-config-files", lambda d: [_edit_json(d / n, _set_latency)
                                     for n in ("input_config.json", "config.json")],
     ["the saved config differs from the one the checkpoint was written with"]),
    ("kernel-file", lambda d: (d.parent / "p2p.s").write_text(
        (d.parent / "p2p.s").read_text() + "\n# edited\n"),
     ["the kernel file ", "p2p.s changed since the checkpoint was written"]),
]


@pytest.mark.parametrize("damage,fragments", [c[1:] for c in EDITED_CHECKPOINTS],
                         ids=[c[0] for c in EDITED_CHECKPOINTS])
def test_a_checkpoint_whose_inputs_changed_is_refused_naming_them(tmp_path, capsys, checkpoint,
                                                                  damage, fragments):
    d = checkpoint
    rc, err = _main(capsys, "run", "--restore", d, "-o", tmp_path / "ok", "--quiet")
    assert rc == 0, err    # the undamaged copy restores
    damage(d)
    err = _error(capsys, "run", "--restore", d, "-o", tmp_path / "out")
    assert f"{d}: the checkpoint's inputs changed since it was written" in err
    for f in fragments:
        assert f in err, (f, err)
    assert not (tmp_path / "out" / "stats.json").exists()


# ------------------------------------------------------------ 5. a damaged compile cache
def test_a_damaged_compile_cache_is_rebuilt_with_one_line(tmp_path):
    """A copy of the suite's warm cache (hard links: no 200 MB copy) with three functions damaged:
    a small start hook's file cut short (found before loading), an entry point's file cut short
    but ending in a pickle's STOP byte (found while loading: removed, loaded again), and the end-of-run credit
    settling's index cut short. Only those small functions are compiled again (seconds)."""
    import shutil
    source = Path(os.environ["NUMBA_CACHE_DIR"])
    cache = tmp_path / "cache"
    shutil.copytree(source, cache, copy_function=os.link)

    def damage(pattern, change):
        files = sorted(cache.glob(pattern))
        assert files, pattern
        for f in files:
            data = f.read_bytes()
            f.unlink()                        # a file of its own: the suite's copy stays whole
            f.write_bytes(change(data))
    damage("*/occupancy.occupancy_start-*.nbc", lambda d: d[: len(d) // 2])
    damage("*/nvlink.settle_credits-*.nbi", lambda d: d[:100])
    # cut short, but ending as a pickle does: the check before loading cannot see it
    damage("*/aau.aau_retry-*.nbc", lambda d: d[: len(d) // 2] + b".")
    out = tmp_path / "out"
    r = run_cli("run", P2P, *MINI, "-o", out, "--quiet",
                env_extra={"NUMBA_CACHE_DIR": str(cache)})
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2, r.stderr
    assert lines[0].startswith(f"moehub-sim: the compiled-engine cache in {cache} had ")
    assert "occupancy.occupancy_start-" in lines[0] and "nvlink.settle_credits-" in lines[0]
    assert "cut short); removed them, and the engine parts they held are compiled again" in lines[0]
    assert "aau.aau_retry-" in lines[1] and "UnpicklingError" in lines[1]
    assert read_stats_json(out)["simCompleted"] == 1
    # rebuilt: the next run loads everything without a word
    r = run_cli("run", P2P, *MINI, "-o", out, "--quiet", env_extra={"NUMBA_CACHE_DIR": str(cache)})
    assert r.returncode == 0 and r.stderr == "", r.stderr


# ------------------------------------------------------------ 6. sweeps survive a bad point
# loaded by every process started with this folder on PYTHONPATH (the sweep's spawned workers):
# a point run with seed 13 meets an unexpected exception, one with seed 14 kills its own worker
FAULTS = """
import os, signal
import moehub_arch.runner as runner
_real = runner.run_to_outdir
def run_to_outdir(cfg, outdir, *args, **kwargs):
    if cfg.run.seed == 13:
        raise RuntimeError("injected fault")
    if cfg.run.seed == 14:
        os.kill(os.getpid(), signal.SIGKILL)
    return _real(cfg, outdir, *args, **kwargs)
runner.run_to_outdir = run_to_outdir
"""


def test_a_sweep_survives_a_point_with_a_bug_and_a_killed_worker(tmp_path):
    import csv
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(FAULTS)
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"name: s\nconfig: {P2P}\nset: {{{', '.join(s.replace('=', ': ', 1) for s in mini_system())}}}\n"
                     "grid:\n  run.seed: [1, 13, 14, 2]\nstats: [simTicks]\n")
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", str(REPO))])}
    r = run_cli("sweep", sweep, "-o", tmp_path / "out", "--workers", "2", "--quiet",
                env_extra=env)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    with open(tmp_path / "out" / "results.csv") as f:
        rows = {row["run.seed"]: row for row in csv.DictReader(f)}
    assert {k: v["status"] for k, v in rows.items()} == {"1": "ok", "13": "error", "14": "error",
                                                         "2": "ok"}
    assert int(rows["1"]["simTicks"]) > 0 and int(rows["2"]["simTicks"]) > 0
    assert rows["13"]["error"] == "internal error (a bug in moehub-sim): RuntimeError: injected fault"
    assert rows["14"]["error"].startswith("the worker process running this point died (killed by "
                                          "SIGKILL) twice")
    bug = tmp_path / "out" / "points" / rows["13"]["point"] / "error.txt"
    assert "injected fault" in r.stderr and f"(traceback in {bug})" in r.stderr
    assert "Traceback (most recent call last)" in bug.read_text()
    assert (f"moehub-sim: sweep s: 2 of 4 point(s) failed ({rows['13']['point']}, "
            f"{rows['14']['point']}); the others ran") in r.stderr


# ------------------------------------------------------------ 7. ISA files
def test_a_mnemonic_defined_twice_in_one_isa_file_names_both_lines(tmp_path, capsys):
    isa = tmp_path / "my.yaml"
    entry = "  x: {semantic: nop, unit: alu, operands: [], latency: %d, ii: 1, description: d}\n"
    isa.write_text("instructions:\n" + entry % 1 + "  y: {semantic: nop, unit: alu, operands: [], "
                   "latency: 1, ii: 1, description: d}\n" + entry % 2)
    err = _error(capsys, *_run(f"workload.isa_files=[{isa}]"), "-o", tmp_path / "out")
    assert f"{isa}:4: instructions.x: 'x' is defined twice in this file (lines 2 and 4)" in err
    (tmp_path / "c.yaml").write_text(f"extends: {P2P}\nworkload:\n  isa_files: [{isa}]\n")
    err = _error(capsys, "asm", REPO / "workloads/kernels/ubench/p2p_latency.s", "--config",
                 tmp_path / "c.yaml")
    assert "'x' is defined twice in this file (lines 2 and 4)" in err


# ------------------------------------------------------------ 8. the Python API's arguments
def _api_cases():
    import moehub_arch as mh
    spec = {"config": str(P2P), "grid": {"run.seed": [1]}}
    return [
        ("load_results-None", lambda: mh.load_results(None), TypeError,
         "outdir: expected a path (str or os.PathLike), found None"),
        ("load_results-int", lambda: mh.load_results(3), TypeError,
         "outdir: expected a path (str or os.PathLike), found int 3"),
        ("sweep-workers-str", lambda: mh.sweep(spec, workers="2", progress=False), TypeError,
         "workers: expected an integer, found str '2'"),
        ("sweep-workers-zero", lambda: mh.sweep(spec, workers=0, progress=False), ValueError,
         "workers: expected an integer >= 1, found 0"),
        ("sweep-scheduler-int", lambda: mh.sweep(spec, scheduler=8786, progress=False), TypeError,
         "scheduler: expected an address string"),
        ("run-seed-float", lambda: mh.run(P2P, seed=1.5), TypeError,
         "seed: expected an integer, found float 1.5"),
        ("run-seed-negative", lambda: mh.run(P2P, seed=-1), ValueError,
         "seed: expected an integer in [0, 9223372036854775807], found -1"),
        ("run-seed-bool", lambda: mh.run(P2P, seed=True), TypeError,
         "seed: expected an integer, found bool"),
        ("run-override-object", lambda: mh.run(P2P, {"run.seed": object()}), TypeError,
         "overrides['run.seed']: expected a value a config holds"),
        ("run-override-nested-object", lambda: mh.run(P2P, {"workload.report": [{1}]}), TypeError,
         "overrides['workload.report'][0]: expected a value a config holds"),
        ("run-outdir-int", lambda: mh.run(P2P, outdir=3), TypeError, "outdir: expected a path"),
        ("run-progress-str", lambda: mh.run(P2P, progress="yes"), TypeError,
         "progress: expected True or False, found str 'yes'"),
        ("load_config-int", lambda: mh.load_config(3), TypeError, "path: expected a path"),
        ("compare-None", lambda: mh.compare(None), TypeError,
         "runs: expected a list of Results and/or run directories, found NoneType"),
        ("compare-a-path", lambda: mh.compare("moehub-out"), TypeError, "runs: expected a list"),
        ("compare-item", lambda: mh.compare([3]), TypeError, "runs[0]: expected a path"),
    ]


@pytest.mark.parametrize("index", range(16))
def test_the_python_api_checks_its_arguments(tmp_path, monkeypatch, index):
    monkeypatch.chdir(tmp_path)   # nothing may be written; if it were, here
    name, call, kind, fragment = _api_cases()[index]
    with pytest.raises(kind) as e:
        call()
    assert fragment in str(e.value), (name, str(e.value))
    assert list(tmp_path.iterdir()) == [], name


# ------------------------------------------------------------ 9. the watchdog: slow vs stuck
def _p2p(tmp_path, body, *sets):
    """The 2-GPU p2p system running `body` as its kernel (lines 6 on), stopped at 20 ms at the
    latest; returns the Simulation, run."""
    from moehub_arch.simulation import Simulation
    sim = Simulation(load("ubench/p2p_latency.yaml", *mini_system(), p2p_kernel(tmp_path, body),
                          "run.max_ticks=20ms", *sets))
    return sim


def _stuck(sim):
    from moehub_arch.simulation import SimulationError
    with pytest.raises(SimulationError) as e:
        sim.run()
    assert e.value.exit_code == 3
    return str(e.value)


FLAG_OVER_A_SLOW_LINK = ("    mov r1, 1\n    beq %gpu, 1, pong\n    flag.set %peer, [%flag], r1\n"
                         "    exit\npong:\n    wait.ge [%flag], r1\n    exit\n")


def test_a_slow_link_is_not_a_flag_nobody_sets(tmp_path):
    # the flag's packet takes ~5 ms on a 10 KB/s link: past the 1 ms watchdog, while it is in
    # flight (before: "a flag nobody sets", exit 3)
    sim = _p2p(tmp_path, FLAG_OVER_A_SLOW_LINK, "system.nvlink.bandwidth=10KB/s")
    sim.run()
    assert sim.completed and sim.stats["simTicks"] > 4 * 10 ** 9


def test_a_slow_hbm_copy_is_not_a_livelock(tmp_path):
    # a 64 B copy on a 1 KB/s HBM: the block waits seconds for its copy (before: a livelock)
    sim = _p2p(tmp_path, "    beq %gpu, 1, out\n    copy %times, %flag, 64\n    add r2, r2, 1\n"
                         "out:\n    exit\n", "system.gpu.hbm.bandwidth=1KB/s",
               "system.gpu.l2.bandwidth=1KB/s")
    sim.run()
    assert sim.stopped.startswith("stopped at the simulated-time limit 20 ms")


def test_a_flag_nobody_sets_polled_in_a_loop_is_a_livelock(tmp_path):
    msg = _stuck(_p2p(tmp_path, "    beq %gpu, 1, out\ntop:\n    ld r1, [%flag+8]\n"
                                "    beq r1, 0, top\nout:\n    exit\n"))
    assert msg.startswith("livelock: thread blocks issued ")
    assert ("but changed nothing - no memory word, register, thread block or launch - and "
            "nothing is in flight: a loop that cannot end") in msg
    assert "kernel 'pingpong' (GPU 0, SM 0, TB 0) at " in msg and "k.s:9, in the loop of lines 8-9" in msg


def test_a_loop_storing_the_same_value_forever_is_a_livelock(tmp_path):
    sim = _p2p(tmp_path, "    beq %gpu, 1, out\ntop:\n    st [%flag+8], 0\n    bra top\nout:\n"
                         "    exit\n")
    msg = _stuck(sim)
    assert msg.startswith("livelock: thread blocks issued ") and "changed nothing" in msg
    assert "k.s:9, in the loop of lines 8-9" in msg
    assert sim.stats["simTicks"] <= 3 * 10 ** 9     # within three intervals of its start


def test_a_run_that_did_not_finish_writes_no_report_figure(tmp_path, capsys):
    # the p2p report (latency from two timestamps the kernel writes) of a run stuck on a flag
    # nobody sets: the end stamp was never written (before: a negative latency in stats.json)
    rc, err = _main(capsys, "run", P2P, *MINI, "--set",
                    p2p_kernel(tmp_path, "    st [%times], %tick\n    beq %gpu, 1, out\n"
                                         "    wait.ge [%flag+8], 1\nout:\n    exit\n"),
                    "-o", tmp_path / "out", "--quiet")
    assert rc == 3, err
    stats = read_stats_json(tmp_path / "out")
    assert stats["simCompleted"] == 0
    assert not [k for k in stats if k.startswith(("system.report.", "system.ubench."))]


def test_a_report_expression_is_bounded_in_cost(tmp_path, capsys):
    err = _error(capsys, "run", P2P, *MINI, "--set",
                 "workload.report={big: {expr: '10**10**10', unit: x, desc: d}}",
                 "-o", tmp_path / "out", "--quiet")
    assert "workload.report.big.expr: cannot evaluate '10**10**10'" in err
    assert "is too large (more than 1024 bits)" in err


@pytest.mark.parametrize("stage", ["evaluate_report", "write_stats"])
def test_sigterm_in_the_report_and_output_stages_is_honoured(tmp_path, capsys, monkeypatch,
                                                             stage):
    # the signal arrives after the compiled loop ended, while the report figures are evaluated
    # or the stats written: the command stops there (143), without a traceback
    import signal

    from moehub_arch import runner, simulation
    module = simulation if stage == "evaluate_report" else runner
    real = getattr(module, stage)

    def signalled(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)
    monkeypatch.setattr(module, stage, signalled)
    rc, err = _main(capsys, "run", P2P, *MINI, "-o", tmp_path / "out", "--quiet")
    assert rc == 143, err
    assert err.startswith("moehub-sim: interrupted by SIGTERM")
    assert not (tmp_path / "out" / "stats.json").exists()


def test_a_memory_offset_beyond_64_bits_is_a_named_error(tmp_path, capsys):
    # found by the assembly fuzz hunt (tests/test_fuzz_inputs.py): an OverflowError before
    k = tmp_path / "k.s"
    k.write_text(".kernel k\n    st [r1+99999999999999999999], r2\n    exit\n")
    err = _error(capsys, "asm", k)
    assert f"{k}:2:9: memory operand offset +99999999999999999999 does not fit in 64 bits" in err
