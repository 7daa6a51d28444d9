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
