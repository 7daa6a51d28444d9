"""README "Your first experiment": every command of the section runs as written in a fresh
temporary folder (outside the checkout, so the shipped paths resolve through the path rule), after
the files the section shows (blocks starting with `# file: NAME`) are saved there."""
import shlex
import subprocess
import sys

from conftest import REPO, read_stats_json


def _section():
    text = (REPO / "README.md").read_text()
    start = text.index("## Your first experiment")
    return text[start:text.index("\n## ", start + 1)]


def _paragraphs(section):
    """The indented (code) lines, indent removed, split at blank lines: a file (its first line
    `# file: NAME`) or a group of commands each."""
    paras, cur = [], []
    for line in section.splitlines():
        if line.startswith("    ") and line.strip():
            cur.append(line[4:])
        elif cur:
            paras.append(cur)
            cur = []
    if cur:
        paras.append(cur)
    return paras


def test_readme_first_experiment_runs_from_a_temporary_folder(tmp_path):
    commands = []
    for block in _paragraphs(_section()):
        if block[0].startswith("# file: "):
            (tmp_path / block[0][len("# file: "):].strip()).write_text("\n".join(block[1:]) + "\n")
        else:
            commands += block
    assert len(commands) >= 12
    for cmd in commands:
        argv = shlex.split(cmd)
        assert argv[0] in ("moehub-sim", "python"), cmd
        exe = [sys.executable, "-m", "moehub_arch"] if argv[0] == "moehub-sim" else [sys.executable]
        r = subprocess.run(exe + argv[1:], cwd=tmp_path, capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, f"{cmd}\n{r.stdout}\n{r.stderr}"
        assert "Traceback" not in r.stderr, cmd
        if argv[:2] == ["moehub-sim", "run"] and "functional.yaml" in cmd:
            assert "layer time" in r.stdout and "output max abs error" in r.stdout, r.stdout
        if "config --list nvlink" in cmd:
            assert "system.nvlink.bandwidth" in r.stdout and "25GB/s" in r.stdout
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
