"""Every command block of README.md and of the documentation's getting-started page runs as written
in a fresh temporary folder (outside the checkout, so the shipped paths resolve through the path
rule), after the files the page shows (blocks starting with `# file: NAME`) are saved there.

Not run: the set-up commands (`pip install ...`: what .ci/run itself runs, verbatim) and `mkdocs`
(tests/test_docs_site.py builds the site)."""
import shlex
import subprocess
import sys

import pytest

from conftest import REPO, read_stats_json

SKIPPED = ("pip", "mkdocs")


def _paragraphs(text):
    """The indented (code) lines, indent removed, split at blank lines: a file (its first line
    `# file: NAME`) or a group of commands each."""
    paras, cur = [], []
    for line in text.splitlines():
        if line.startswith("    ") and line.strip():
            cur.append(line[4:])
        elif cur:
            paras.append(cur)
            cur = []
    if cur:
        paras.append(cur)
    return paras


def run_page(page, folder):
    """Save the page's files in `folder`, run its commands there; returns {command: stdout}."""
    commands = []
    for block in _paragraphs(page.read_text()):
        if block[0].startswith("# file: "):
            (folder / block[0][len("# file: "):].strip()).write_text("\n".join(block[1:]) + "\n")
        elif block[0].split()[0] in ("moehub-sim", "python", "pip", "mkdocs"):
            commands += block
    out = {}
    for cmd in commands:
        argv = shlex.split(cmd, comments=True)
        if argv[0] in SKIPPED:
            continue
        assert argv[0] in ("moehub-sim", "python"), cmd
        exe = [sys.executable, "-m", "moehub_arch"] if argv[0] == "moehub-sim" else [sys.executable]
        r = subprocess.run(exe + argv[1:], cwd=folder, capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, f"{page.name}: {cmd}\n{r.stdout}\n{r.stderr}"
        assert "Traceback" not in r.stderr, cmd
        out[cmd] = r.stdout
    return out


def test_readme_commands_run_from_a_temporary_folder(tmp_path):
    out = run_page(REPO / "README.md", tmp_path)
    assert len(out) >= 6
    assert any("layer time" in o for c, o in out.items() if "functional.yaml" in c)
    assert (tmp_path / "out" / "figures" / "speedup.png").is_file()
    layer = next(o for c, o in out.items() if c.startswith("moehub-sim layer"))
    assert "top-4" in layer and "384 tokens per GPU" in layer


@pytest.mark.parametrize("page", ["getting_started.md"])
def test_getting_started_runs_from_a_temporary_folder(tmp_path, page):
    out_text = run_page(REPO / "docs" / page, tmp_path)
    assert len(out_text) >= 20
    for cmd, stdout in out_text.items():
        if cmd.startswith("moehub-sim run") and "functional.yaml" in cmd:
            assert "layer time" in stdout and "output max abs error" in stdout, stdout
        if "config --list nvlink" in cmd:
            assert "system.nvlink.bandwidth" in stdout and "25GB/s" in stdout
    out = tmp_path / "out"
    # task 2: half the tensor rate, half the TFLOP/s of the unchanged peak (8 SMs x 4096 x 1.83 GHz)
    half = read_stats_json(out / "mma_half")["system.report.mma_bf16_TFLOPs"]
    assert abs(half - 8 * 2048 * 1.83e9 / 1e12) < 0.02 * half
    # task 3: the new instruction's 40-cycle latency: 100 dependent adds per TB take >= 4000 cycles
    assert read_stats_json(out / "slow_adds")["system.report.kernel_us"] >= 100 * 40 / 1.83e3
    # task 6: the user's 4 links, not the benchmark's 18
    bw = read_stats_json(out / "p2p_mysys")["system.report.p2p_bandwidth_GBps"]
    assert abs(bw - 4 * 25 * 128 / 144) < 0.01 * bw     # 128 B store packets + a 16 B header
    assert (out / "tile_sweep" / "results.csv").is_file()
