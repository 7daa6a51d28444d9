"""The command line: output files, self-documentation, and clear errors with exit status 2."""
import json

from conftest import CONFIGS, mini_system, run_cli

SMALL = [f"--set={s}" for s in mini_system(num_gpus=2, num_sms=2, links=2)] + [
    "--set=workload.launches.0.params.iters=3"]


def test_run_writes_config_and_three_stats_files(tmp_path):
    r = run_cli("run", "configs/ubench/p2p_latency.yaml", "-o", tmp_path, *SMALL)
    assert r.returncode == 0, r.stderr
    assert "system.report.p2p_latency_us =" in r.stdout
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["system"]["num_gpus"] == 2 and cfg["units"]["time"] == "ps"
    txt = (tmp_path / "stats.txt").read_text()
    assert "---------- Begin Simulation Statistics ----------" in txt
    assert "---------- End Simulation Statistics   ----------" in txt
    line = next(l for l in txt.splitlines() if l.startswith("simTicks "))
    assert line.endswith("# simulated time (tick of the last event) (ps)")
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["system.gpu1.nvlink0.rx_packets"]["unit"] == "packets"
    csv = (tmp_path / "stats.csv").read_text().splitlines()
    assert csv[0] == "name,value,unit,description"
    assert len(csv) == len(stats) + 1


def test_default_config_runs_with_no_argument(tmp_path):
    r = run_cli("run", "-o", tmp_path / "out", "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["system.report.alltoall_busbw_GBps"]["value"] > 0


def test_isa_and_stats_list_document_the_tool():
    r = run_cli("isa")
    assert r.returncode == 0 and "mma.bf16 c, a, b, m, n, k" in r.stdout and "thr 4096" in r.stdout
    r = run_cli("stats", "--list", "configs/ubench/p2p_latency.yaml")
    assert r.returncode == 0
    assert "system.gpu0.nvlink17.tx_utilization  (ratio)" in r.stdout
    assert "system.switch3.port15.tx_queue_peak  (packets)" in r.stdout
    assert "system.report.p2p_latency_us  (us)" in r.stdout
    r = run_cli("asm", "workloads/kernels/ubench/alltoall.s")
    assert r.returncode == 0 and "put r1, r3, r2, %chunk" in r.stdout


def test_isa_names_the_defining_file_of_each_instruction():
    r = run_cli("isa", "--config", "configs/examples/half_rate_mma.yaml")
    assert r.returncode == 0, r.stderr
    mma = next(l for l in r.stdout.splitlines() if l.strip().startswith("mma.bf16 c,"))
    assert "thr 2048" in mma and "[isa/examples/half_rate_mma.yaml:" in mma   # replace: true
    assert "[isa/base.yaml:" in next(l for l in r.stdout.splitlines() if l.strip().startswith("add "))
    r = run_cli("asm", "--help")
    assert "workload.isa_files" in " ".join(r.stdout.split())


def test_stats_list_filters_by_pattern():
    r = run_cli("stats", "--list", "configs/ubench/p2p_latency.yaml", "system.gpu0.nvlink1?.tx_utilization")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"system.gpu0.nvlink{l}.tx_utilization  (ratio)  " + r.stdout.splitlines()[0].split("  ", 2)[2]
                                     for l in range(10, 18)]
    assert "(8 of " in r.stderr
    r = run_cli("stats", "--list", "configs/ubench/p2p_latency.yaml", "report.p2p")
    assert r.stdout.splitlines()[0].startswith("system.report.p2p_latency_us  (us)")
    r = run_cli("stats", "--list", "configs/ubench/p2p_latency.yaml", "nothing.like.this")
    _error(r, "no stat matches")


def test_config_list_prints_keys_with_units_defaults_and_sources():
    r = run_cli("config", "--list", "nvlink")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "system.nvlink.bandwidth  [bandwidth (B/s)]  default: required" in out
    assert "value: 25GB/s   (set in configs/systems/dgx_h100.yaml)" in out
    assert "source: NVLink 4: 25 GB/s per link per direction" in out
    assert "system.nvlink.latency  [time (ps)]" in out
    assert all(l.startswith(("system.nvlink.", "    ")) for l in out.splitlines())
    r = run_cli("config", "--list", "run.watchdog*")
    assert "run.watchdog_interval  [time (ps)]  default: 1ms" in r.stdout and "value: 1ms   (default)" in r.stdout
    r = run_cli("config", "--list", "no_such_key")
    _error(r, "no config key matches")


def _error(r, *fragments):
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    for f in fragments:
        assert f in r.stderr, r.stderr


def test_bad_config_key_unit_and_value_exit_2(tmp_path):
    _error(run_cli("run", "configs/ubench/p2p_latency.yaml", "-o", tmp_path,
                   "--set", "system.nvlink.bandwith=20GB/s"),
           "bandwith", "did you mean 'bandwidth'")
    _error(run_cli("run", "configs/ubench/p2p_latency.yaml", "-o", tmp_path,
                   "--set", "system.nvlink.bandwidth=20GB"),
           "system.nvlink.bandwidth", "20GB")
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"extends: {CONFIGS / 'ubench/p2p_latency.yaml'}\n"
                   "system:\n  switch:\n    traversal_latency: 250 parsecs\n")
    _error(run_cli("run", bad, "-o", tmp_path), "bad.yaml", "system.switch.traversal_latency")
    _error(run_cli("run", tmp_path / "missing.yaml"), "missing.yaml", "not found")


def test_bad_assembly_line_exits_2(tmp_path):
    kernel = tmp_path / "k.s"
    kernel.write_text(".kernel pingpong\n.param peer\n.param flag\n.param iters\n.param times\n"
                      "    add r1, r1\n    exit\n")
    _error(run_cli("asm", kernel), "k.s:6:5:", "'add' takes 3 operand(s)")
    _error(run_cli("run", "configs/ubench/p2p_latency.yaml", "-o", tmp_path / "o",
                   "--set", f"workload.kernel_files=[{kernel}]"),
           "k.s:6:5:", "'add' takes 3 operand(s)")


def test_runtime_error_names_the_kernel_line(tmp_path):
    kernel = tmp_path / "k.s"
    kernel.write_text(".kernel pingpong\n.param peer\n.param flag\n.param iters\n.param times\n"
                      "    ld r1, [%flag+4]      # misaligned word\n    exit\n")
    r = run_cli("run", "configs/ubench/p2p_latency.yaml", "-o", tmp_path / "o", *SMALL,
                "--set", f"workload.kernel_files=[{kernel}]")
    _error(r, "k.s:6: runtime error in kernel 'pingpong'")


def test_compiling_notice_knows_a_stale_cache_folder(tmp_path, monkeypatch):
    """A NUMBA_CACHE_DIR holding compiled code of another engine version is recompiled: the
    'compiling' notice must show then too, not only when the folder is empty."""
    from moehub_arch import engine_version
    from moehub_arch.cli import _CACHE_STAMP, _engine_cached
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert not _engine_cached()                                   # empty
    (tmp_path / "loop.run-1.py311.nbi").write_bytes(b"index")
    assert not _engine_cached()                                   # code of an unknown version
    (tmp_path / _CACHE_STAMP).write_text("0.0.1+stale")
    assert not _engine_cached()
    (tmp_path / _CACHE_STAMP).write_text(engine_version())
    assert _engine_cached()
