"""Robustness, round two: files in other encodings are read by their byte-order mark, damaged
checkpoints and reference files are named errors, outputs that cannot be written are named
errors that never leave a directory looking complete, and Ctrl-C / SIGTERM stop a run with its
stats so far (exit 130 / 143) and, when asked, a checkpoint to continue from.

Each error case asserts the exit status (2), the message fragments and no traceback; the rows of
tests/test_bad_inputs.py cover the files that need no run (configs, kernels, ISA, traces, sweeps).
"""
import codecs
import json
import os
import shutil
import signal
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from conftest import (CONFIGS, P2P_KERNEL_HEAD as KERNEL_HEAD, REPO, load, mini_system, model_stats,
                      p2p_kernel, read_stats_json)

P2P = CONFIGS / "ubench/p2p_latency.yaml"
MINI = [f"--set={s}" for s in mini_system()]


def _main(capsys, *argv):
    """Run the command line in-process: (exit status, stderr); stderr is one error paragraph."""
    from moehub_arch.cli import main
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return rc, err


def _one_paragraph(err):
    assert err.startswith("moehub-sim: error: ") and err.count("moehub-sim: error:") == 1, err


# ---------------------------------------------------------------------------- encodings
@pytest.mark.parametrize("bom,codec", [(codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"),
                                       (codecs.BOM_UTF16_BE, "utf-16-be"),
                                       (codecs.BOM_UTF32_LE, "utf-32-le")])
def test_a_config_with_a_byte_order_mark_is_read_as_its_encoding(tmp_path, bom, codec):
    from moehub_arch.config import load_config
    text = f"extends: {P2P}\n# r\u00e9glages\nrun:\n  seed: 7\n"
    (tmp_path / "plain.yaml").write_text(text, encoding="utf-8")
    (tmp_path / "bom.yaml").write_bytes(bom + text.encode(codec))
    a = load_config(tmp_path / "plain.yaml").to_dict()
    b = load_config(tmp_path / "bom.yaml").to_dict()
    for key in ("system", "workload", "run", "scheme"):   # everything but the file names
        assert a[key] == b[key], key
    assert a["run"]["seed"] == 7


def test_a_kernel_with_a_utf16_byte_order_mark_assembles(tmp_path, capsys):
    k = tmp_path / "k.s"
    k.write_bytes(codecs.BOM_UTF16_LE + (KERNEL_HEAD + "    exit\n").encode("utf-16-le"))
    rc, _ = _main(capsys, "asm", k)
    assert rc == 0


def test_a_reference_file_in_another_encoding_is_a_named_error(tmp_path):
    from moehub_arch.analysis.correlation import load_references
    from moehub_arch.config import ConfigError
    ref = tmp_path / "ref.yaml"
    ref.write_bytes("references:\n  - {figure: x, value: 1, unit: us, source: 'm\u00e9sure'}\n"
                    .encode("latin-1"))
    with pytest.raises(ConfigError) as e:
        load_references([ref], {"x"})
    assert "ref.yaml:2:" in str(e.value) and "byte 0xe9 is not UTF-8" in str(e.value)
    ref.write_text("a: &a [*a]\n")
    with pytest.raises(ConfigError) as e:
        load_references([ref], {"x"})
    assert "ref.yaml:1:" in str(e.value) and "contains itself" in str(e.value)


# ----------------------------------------------------------------------------- outputs
def test_output_directory_that_is_a_file(tmp_path, capsys):
    (tmp_path / "out").write_text("x")
    rc, err = _main(capsys, "run", P2P, *MINI, "-o", tmp_path / "out")
    assert rc == 2
    _one_paragraph(err)
    assert "out: cannot create the output directory (a file of that name exists)" in err


def test_output_directory_that_cannot_be_created(tmp_path, capsys):
    # /sys refuses new directories even to root (a read-only place to write to)
    rc, err = _main(capsys, "run", P2P, *MINI, "-o", "/sys/moehub-out/run1")
    assert rc == 2
    _one_paragraph(err)
    assert "/sys/moehub-out/run1: cannot write the output directory (Operation not permitted)" in err


def test_output_in_a_missing_directory_of_compare_csv(tmp_path, capsys):
    rc, err = _main(capsys, "compare", tmp_path, "--csv", tmp_path / "no" / "such" / "t.csv")
    assert rc == 2
    _one_paragraph(err)


def _redirect_to_dev_full(monkeypatch, name):
    """Disk full, for real: writes of `name` (its .partial file) go to /dev/full (ENOSPC)."""
    import builtins

    from moehub_arch import outputs
    real_open = builtins.open

    def full_open(path, mode="r", *args, **kwargs):
        if str(path).endswith(name + outputs.PARTIAL) and "w" in mode:
            return real_open("/dev/full", mode, *args, **kwargs)
        return real_open(path, mode, *args, **kwargs)
    monkeypatch.setattr(outputs, "open", full_open, raising=False)


def test_disk_full_while_writing_the_stats(tmp_path, capsys, monkeypatch):
    _redirect_to_dev_full(monkeypatch, "stats.csv")
    out = tmp_path / "out"
    out.mkdir()
    (out / "stats.json").write_text("{}")   # left by an earlier run: must not survive
    rc, err = _main(capsys, "run", P2P, *MINI, "-o", out, "--quiet")
    assert rc == 2
    _one_paragraph(err)
    assert f"{out / 'stats.csv'}: cannot write the stats file (No space left on device)" in err
    # never presented as complete: no stats.json (written last), no partial file left
    names = sorted(p.name for p in out.iterdir())
    assert names == ["config.json", "stats.txt"], names


def test_disk_full_while_writing_the_debug_output(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "dbg.txt").symlink_to("/dev/full")
    rc, err = _main(capsys, "run", P2P, *MINI, "-o", out, "--quiet", "--debug-flags", "SM",
                    "--debug-file", "dbg.txt")
    assert rc == 2
    assert err.startswith("moehub-sim: error: ")
    assert "dbg.txt: cannot write the debug output file (No space left on device)" in err
    # a run that got under way still writes its stats (this one ran to its end)
    assert read_stats_json(out)["simInsts"] > 0


def test_whole_files_are_renamed_into_place_and_stats_json_comes_last(tmp_path, monkeypatch):
    from moehub_arch import outputs
    from moehub_arch.runner import run_to_outdir
    renamed = []
    real_replace = os.replace
    monkeypatch.setattr(outputs.os, "replace",
                        lambda a, b: (renamed.append((os.path.basename(a), os.path.basename(b))),
                                      real_replace(a, b))[1])
    run_to_outdir(load("ubench/p2p_latency.yaml", *mini_system(), "trace.enabled=true"),
                  tmp_path / "out")
    assert all(a == b + ".partial" for a, b in renamed), renamed
    names = [b for _, b in renamed]
    assert names[0] == "config.json" and names[-1] == "stats.json"
    assert {"stats.txt", "stats.csv"} <= set(names)
    assert not list((tmp_path / "out").glob("*.partial"))
    assert json.loads((tmp_path / "out" / "trace.json").read_text())["traceEvents"]


# -------------------------------------------------------------------------- checkpoints
@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A checkpoint of the small p2p run at 2 us."""
    from moehub_arch.checkpoint import CheckpointWriter
    from moehub_arch.simulation import Simulation
    d = tmp_path_factory.mktemp("ck")
    sim = Simulation(load("ubench/p2p_latency.yaml", *mini_system()))
    writer = CheckpointWriter([2_000_000], str(d / "ck"))
    sim.run([writer])
    assert writer.written
    return d / "ck"


def _damage_npz(path, change):
    """Rewrite state.npz with `change(arrays)` applied."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    change(arrays)
    np.savez(path, **arrays)


def _set_meta(path, **changes):
    meta = json.loads(path.read_text())
    for k, v in changes.items():
        if v is None:
            meta.pop(k)
        else:
            meta[k] = v
    path.write_text(json.dumps(meta))


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def _cut_inside_an_array(path):
    # keep the zip directory, damage the bytes of the first member (CRC mismatch on reading)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        first = z.infolist()[0]
    start = first.header_offset + 30 + len(first.filename) + 200
    data[start:start + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))


def _damage_an_array_header(path):
    # the first member's .npy header (a Python dict literal NumPy tokenizes) made unparseable
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        first = z.infolist()[0]
    extra = int.from_bytes(data[first.header_offset + 28:first.header_offset + 30], "little")
    start = first.header_offset + 30 + len(first.filename) + extra + 12   # past the npy magic
    data[start:start + 8] = b"{[(\"'{[("
    path.write_bytes(bytes(data))


CHECKPOINT_CASES = [
    ("npz-truncated", lambda d: _truncate(d / "state.npz"),
     ["state.npz: cannot read the saved state", "damaged or was cut short"]),
    ("npz-bytes-damaged", lambda d: _cut_inside_an_array(d / "state.npz"),
     ["state.npz: cannot read the saved array State.", "damaged"]),
    ("npz-header-damaged", lambda d: _damage_an_array_header(d / "state.npz"),
     ["state.npz: cannot read the saved", "damaged"]),
    ("npz-not-a-zip", lambda d: (d / "state.npz").write_text("hello"),
     ["state.npz: cannot read the saved state"]),
    ("npz-missing", lambda d: (d / "state.npz").unlink(),
     ["state.npz: cannot read the saved state", "No such file"]),
    ("array-missing", lambda d: _damage_npz(d / "state.npz", lambda a: a.pop("regs")),
     ["state.npz: the checkpoint's State arrays do not match", "missing: regs", "unknown: none"]),
    ("array-extra", lambda d: _damage_npz(d / "state.npz", lambda a: a.update(extra=np.zeros(3))),
     ["do not match this engine's", "missing: none", "unknown: extra"]),
    ("array-dtype", lambda d: _damage_npz(d / "state.npz",
                                          lambda a: a.update(regs=a["regs"].astype(np.float32))),
     ["State.regs has element type", "float32", "in the checkpoint"]),
    ("array-shape", lambda d: _damage_npz(d / "state.npz",
                                          lambda a: a.update(regs=a["regs"][:, :3])),
     ["State.regs has shape", "in the checkpoint", "in the rebuilt system"]),
    ("meta-not-json", lambda d: (d / "meta.json").write_text('{"format": '),
     ["meta.json: cannot read the checkpoint metadata (not valid JSON"]),
    ("meta-binary", lambda d: (d / "meta.json").write_bytes(b"\x00\x01"),
     ["meta.json:1:1: cannot read the checkpoint metadata", "NUL bytes"]),
    ("meta-tick-missing", lambda d: _set_meta(d / "meta.json", tick=None),
     ["meta.json: tick: expected an integer, found nothing"]),
    ("meta-tick-text", lambda d: _set_meta(d / "meta.json", tick="soon"),
     ["meta.json: tick: expected an integer, found str 'soon'"]),
    ("meta-tick-negative", lambda d: _set_meta(d / "meta.json", tick=-4),
     ["meta.json: tick and events cannot be negative"]),
    ("meta-events-tampered", lambda d: _set_meta(d / "meta.json", events=1),
     ["meta.json: says tick 2000000 after 1 events, but the saved state is at tick"]),
    ("meta-kernels-tampered", lambda d: _set_meta(d / "meta.json", kernels=[]),
     ["meta.json: kernels: expected a mapping, found list"]),
    ("meta-format", lambda d: _set_meta(d / "meta.json", format="zip"),
     ["meta.json: not a moehub-arch checkpoint"]),
    ("config-not-json", lambda d: (d / "input_config.json").write_text("{"),
     ["input_config.json: cannot read the saved config (not valid JSON"]),
    ("config-not-object", lambda d: (d / "input_config.json").write_text("[1]"),
     ["input_config.json: expected the saved config (a JSON object), found a list"]),
]


@pytest.mark.parametrize("case_id,damage,fragments", CHECKPOINT_CASES,
                         ids=[c[0] for c in CHECKPOINT_CASES])
def test_a_damaged_checkpoint_is_a_named_error(tmp_path, capsys, checkpoint, case_id, damage,
                                               fragments):
    d = tmp_path / "ck"
    shutil.copytree(checkpoint, d)
    damage(d)
    rc, err = _main(capsys, "run", "--restore", d, "-o", tmp_path / "out")
    assert rc == 2, err
    _one_paragraph(err)
    for f in fragments:
        assert f in err, (f, err)
    assert not (tmp_path / "out" / "stats.json").exists()


def test_the_undamaged_checkpoint_restores(tmp_path, capsys, checkpoint):
    rc, err = _main(capsys, "run", "--restore", checkpoint, "-o", tmp_path / "out", "--quiet")
    assert rc == 0, err
    assert read_stats_json(tmp_path / "out")["simCompleted"] == 1


def test_a_checkpoint_that_cannot_be_written_is_a_named_error(tmp_path, capsys):
    (tmp_path / "ck").write_text("a file")
    rc, err = _main(capsys, "run", P2P, *MINI, "-o", tmp_path / "out", "--quiet",
                    "--checkpoint-at", "1us", "--checkpoint-dir", tmp_path / "ck")
    assert rc == 2
    assert err.startswith("moehub-sim: error: ") and "ck: cannot write the checkpoint" in err


# --------------------------------------------------------------------------- interrupts
# GPU 0 polls a flag nobody sets and counts its polls in r2 (memory every iteration and a
# register that changes: neither stuck nor a livelock - without the count, a loop that changes
# nothing is one, tests/test_robustness_edges.py), so the run goes on until it is interrupted;
# --max-wall bounds it if the signal were lost
FOREVER = ("    beq %gpu, 1, out\ntop:\n    ld r1, [%flag+8]\n    add r2, r2, 1\n"
           "    beq r1, 0, top\nout:\n    exit\n")


def _start(tmp_path, *extra):
    """`moehub-sim run` of FOREVER in a subprocess; returns once the run loop reports progress."""
    kernel = p2p_kernel(tmp_path, FOREVER)
    env = dict(os.environ)
    env.pop("NUMBA_DISABLE_JIT", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "moehub_arch", "run", str(P2P), *MINI, f"--set={kernel}",
         "--max-wall", "600",
         "-o", str(tmp_path / "out"), *map(str, extra)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stderr:   # progress lines come every 5 s of the run loop (progress.py)
        lines.append(line)
        if line.startswith("[moehub-sim] simulated"):
            return proc, lines
    proc.wait()
    raise AssertionError("the run ended before it was interrupted:\n" + "".join(lines))


def _finish(proc, lines, signum):
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=600)
    return proc.returncode, "".join(lines) + err


def test_ctrl_c_writes_the_stats_so_far_and_a_checkpoint_to_continue(tmp_path):
    proc, lines = _start(tmp_path, "--checkpoint-on-interrupt")
    rc, err = _finish(proc, lines, signal.SIGINT)
    assert rc == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    stats = read_stats_json(tmp_path / "out")
    tick = stats["simTicks"]
    assert stats["simCompleted"] == 0 and tick > 0
    assert (tmp_path / "out" / "stats.txt").is_file()
    ck = tmp_path / "out" / f"checkpoint-{tick}"
    assert (f"moehub-sim: interrupted by SIGINT at tick {tick} (" in err
            and f"a checkpoint of that state is in {ck}; continue with: moehub-sim run "
                f"--restore {ck}" in err), err
    assert json.loads((ck / "meta.json").read_text())["tick"] == tick
    # continuing from the checkpoint to a later tick gives the stats of an uninterrupted run
    from moehub_arch.checkpoint import restore
    from moehub_arch.simulation import Simulation
    import attrs
    end = tick + 3_000_000
    back = restore(ck)
    back.cfg = attrs.evolve(back.cfg, run=attrs.evolve(back.cfg.run, max_ticks=end, max_wall=0))
    back.run()
    whole = Simulation(load("ubench/p2p_latency.yaml", *mini_system(), p2p_kernel(tmp_path, FOREVER),
                            f"run.max_ticks={end}ps"))
    whole.run()
    assert back.stopped and whole.stopped
    assert model_stats(back.stats) == model_stats(whole.stats)


def test_sigterm_writes_the_stats_so_far_and_says_how_to_continue(tmp_path):
    proc, lines = _start(tmp_path)
    rc, err = _finish(proc, lines, signal.SIGTERM)
    assert rc == 143, err
    assert "Traceback" not in err
    assert "moehub-sim: interrupted by SIGTERM at tick" in err
    assert "run it with --checkpoint-on-interrupt" in err
    stats = read_stats_json(tmp_path / "out")
    assert stats["simCompleted"] == 0
    assert not list((tmp_path / "out").glob("checkpoint-*"))


def test_interrupt_before_the_run_starts_exits_130_without_a_traceback(tmp_path):
    from moehub_arch.interrupts import Interrupted, handle_signals
    # the handler the process had (Python's default_int_handler, or SIG_IGN when the test runner
    # was started in the background by a non-interactive shell, which ignores SIGINT there)
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(Interrupted) as e:
        with handle_signals():
            os.kill(os.getpid(), signal.SIGINT)
    assert e.value.signum == signal.SIGINT and str(e.value) == "interrupted by SIGINT"
    # the handlers are back
    assert signal.getsignal(signal.SIGINT) is before


def test_interrupt_stop_ends_the_run_at_the_tick_it_was_seen(tmp_path):
    # in-process: the flag set as a signal would, the run stops cleanly at the end of that tick
    from moehub_arch.interrupts import FLAG, InterruptStop, handle_signals
    from moehub_arch.observer import RunObserver
    from moehub_arch.simulation import Simulation
    kernel = p2p_kernel(tmp_path, FOREVER)

    class SignalAt(RunObserver):
        def on_pause(self, sim, tick, events, wall):
            if tick >= 5_000_000 and FLAG.signum is None:
                FLAG.signum = signal.SIGTERM

        def next_stop(self, sim):
            return 5_000_000 if FLAG.signum is None else None

    sim = Simulation(load("ubench/p2p_latency.yaml", *mini_system(), kernel))
    stop = InterruptStop()
    with handle_signals():
        sim.run([SignalAt(), stop])
    assert stop.tick == 5_000_000 and stop.signum == signal.SIGTERM
    assert sim.stopped.startswith("interrupted by SIGTERM at tick 5000000")
    assert sim.stats["simCompleted"] == 0 and sim.stats["simTicks"] == 5_000_000


def test_ctrl_c_stops_a_sweep_and_keeps_its_finished_points(tmp_path):
    # point 'quick' ends at once; point 'forever' polls a flag nobody sets until interrupted
    p2p_kernel(tmp_path, FOREVER)
    sweep = tmp_path / "s.yaml"
    sweep.write_text(
        f"name: s\nconfig: {P2P}\nset: {{{', '.join(s.replace('=', ': ', 1) for s in mini_system())}, "
        f"workload.kernel_files: ['{tmp_path / 'k.s'}'], run.max_wall: 600s}}\n"
        f"points:\n  - {{run.max_ticks: 1us}}\n  - {{run.max_events: 0}}\n"
        f"stats: [simTicks]\n")
    env = dict(os.environ)
    env.pop("NUMBA_DISABLE_JIT", None)
    proc = subprocess.Popen([sys.executable, "-m", "moehub_arch", "sweep", str(sweep), "--workers",
                             "2", "--quiet", "-o", str(tmp_path / "out")],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    points = tmp_path / "out" / "points"
    import time
    deadline = time.monotonic() + 900
    while not list(points.glob("*/done.json")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.5)
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert "moehub-sim: sweep interrupted by SIGINT: the workers were stopped; 1 of 2 points " \
           "finished and are kept" in err
    rows = (tmp_path / "out" / "results.csv").read_text().splitlines()
    assert len(rows) == 2 and ",ok," in rows[1]
    assert len(list(points.glob("*/done.json"))) == 1
