"""Reuse of finished `moehub-sim run` output folders by `moehub-sim e2e` and the table tools
(tools/layer_table.py, dysharp_table.py, ...), only when they were made from the same inputs.

A run's stats depend on its config file, its --set overrides and the project's sources (the
engine, the kernels, the ISA, models and system configs: `moehub_arch.paths.sources_digest`).
After a run, `inputs.sha1` in its folder records a digest of all of them; a later table reuses the folder's stats.json only when the digest
still matches, and re-runs otherwise - a table made after a code change never shows stats of the
code before (--force re-runs regardless).
"""
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

from .paths import sources_digest

STAMP = "inputs.sha1"


def run_inputs_digest(config, sets):
    """Digest of what a run's stats depend on: the sources, the config file (path and contents)
    and the --set overrides in order."""
    config = Path(config).resolve()
    h = hashlib.sha1("\0".join([sources_digest(), str(config), *sets]).encode())
    h.update(config.read_bytes())
    return h.hexdigest()


def run_or_reuse(config, outdir, sets=(), force=False, nice=0):
    """stats.json of `moehub-sim run config -o outdir --set ...`, reused when outdir holds a run of
    the same inputs. Returns (stats or None, how: "reused" | "ran", wall seconds, error line)."""
    outdir = Path(outdir)
    stats_file, stamp = outdir / "stats.json", outdir / STAMP
    digest = run_inputs_digest(config, sets)
    if (not force and stats_file.is_file() and stamp.is_file()
            and stamp.read_text().strip() == digest):
        return json.loads(stats_file.read_text()), "reused", 0.0, None
    cmd = [sys.executable, "-m", "moehub_arch", "run", str(config), "-o", str(outdir), "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    if nice:
        cmd = ["nice", "-n", str(nice)] + cmd
    t0 = time.perf_counter()
    # in the caller's working directory: relative paths in `config` and `sets` are the caller's
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        err = r.stderr.strip()
        return None, "ran", wall, err.splitlines()[-1] if err else f"exit {r.returncode}"
    stamp.write_text(digest + "\n")
    return json.loads(stats_file.read_text()), "ran", wall, None
