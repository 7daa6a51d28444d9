"""Warp groups and SM-driven copies (DeepEP's SM-side work, components/scheduler.py and sm.py):
a block of G warp groups is placed whole on one SM and keeps its slots until its last group exits;
put.sm charges the SM's load/store unit 2 bytes of work per byte copied (loaded, then stored),
the thread block waits for its loads, and the hub carries remote stores without reading HBM."""
import pytest

from conftest import cli_stats_per_engine, mini_system_yaml, run_cli

N = 4096                   # bytes per copy
LSU = 128                  # dgx_h100 sm.lsu_bytes_per_cycle
SM_PERIOD_PS = 1e12 / 1.83e9

COPY_KERNEL = """
.kernel copier
.param src
.param dst
.param out
.param bytes
    mul r3, %tb, %bytes
    add r3, r3, %dst             # this group's destination row
    and r5, %tb, 1
    xor r5, r5, 1
    xor r4, %gpu, r5             # even groups: the peer GPU; odd groups: this GPU
    mov r1, %clock
    put.sm r4, r3, %src, %bytes  # a warp copy of `bytes` from src here to row %tb of dst on r4
    mov r2, %clock
    fence
    shl r6, %tb, 5
    add r6, r6, %out
    st [r6], r1                  # the cycle before the copy
    st [r6+8], r2                # the cycle the group issued again (loads in, LSU free)
    st [r6+16], %sm
    st [r6+24], %ntb
    exit
"""


def _config(tmp_path, *, groups=2, grid=1, sms=4, kernel=COPY_KERNEL, smem=""):
    (tmp_path / "k.s").write_text(kernel.replace(".param bytes\n", f".param bytes\n{smem}"))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(mini_system_yaml(2, sms) + f"""workload:
  mode: functional
  kernel_files: [{tmp_path / 'k.s'}]
  buffers:
    src: {{bytes: {N}B, init: random, dtype: u8}}
    dst: {{bytes: {64 * N}B, dtype: u8}}
    out: {{bytes: 2KB, region: control, dtype: i64}}
  launches:
    - kernel: copier
      grid: {grid}
      warp_groups: {groups}
      params: {{src: "@src", dst: "@dst", out: "@out", bytes: {N}}}
""")
    return cfg


def _simulate(cfg):
    from moehub_arch.config import load_config
    from moehub_arch.simulation import Simulation
    sim = Simulation(load_config(cfg))
    sim.run()
    return sim


@pytest.fixture(scope="module")
def two_groups(tmp_path_factory):
    return _simulate(_config(tmp_path_factory.mktemp("copy")))


def _records(sim, g, n):
    return sim.read_buffer(g, "out", "i64")[:4 * n].reshape(n, 4)


def test_warp_copies_move_the_bytes_locally_and_to_the_peer(two_groups):
    sim = two_groups
    for g in (0, 1):
        src = sim.read_buffer(g, "src")
        peer_src = sim.read_buffer(1 - g, "src")
        dst = sim.read_buffer(g, "dst")
        assert (dst[N:2 * N] == src).all()          # group 1 copied locally into row 1
        assert (dst[:N] == peer_src).all()          # the peer's group 0 stored into row 0 here


def test_lsu_charged_two_bytes_of_work_per_byte_and_groups_share_it(two_groups):
    sim = two_groups
    s = sim.stats
    occupancy = -(-2 * N // LSU)                   # cycles the LSU is busy per copy
    for g in (0, 1):
        rec = _records(sim, g, 2)
        assert list(rec[:, 2]) == [rec[0, 2]] * 2   # both warp groups on one SM
        assert list(rec[:, 3]) == [2, 2]            # %ntb counts warp groups
        sm = int(rec[0, 2])
        lsu = s[f"system.gpu{g}.sm{sm}.lsu_busy_ticks"]
        # two copies of occupancy cycles, plus the 4 one-cycle st of each group
        cycles = 2 * occupancy + 8
        assert lsu == pytest.approx(cycles * SM_PERIOD_PS, abs=cycles)
        # the first group copies 5 cycles after its mov (1 issue + 4 latency); its loads stream
        # over its LSU occupancy and arrive one HBM latency (700 cycles) later; the other group
        # (one issue cycle behind) waits for the LSU to be free, then the same
        first, second = sorted(rec.tolist(), key=lambda r: r[0])
        assert first[1] - first[0] == 5 + occupancy + 700
        assert second[1] - first[1] == occupancy


def test_remote_warp_copy_is_carried_as_stores_without_an_hbm_read(two_groups):
    s = two_groups.stats
    for g in (0, 1):
        # reads: the two copies' loads (N each) only - the hub read nothing for the remote one
        assert s[f"system.gpu{g}.hbm.read_bytes"] == 2 * N
        assert s[f"system.gpu{g}.hub.tx_payload_bytes"] == N
        assert s[f"system.gpu{g}.hub.rx_payload_bytes"] == N


def test_blocks_of_warp_groups_are_placed_whole_and_keep_their_slots(tmp_path):
    # 3 blocks of 6 warp groups on 2 SMs of 4 thread-block places: 6 stream slots per SM, so
    # one block per SM at a time; the third block waits for a whole block to exit
    sim = _simulate(_config(tmp_path, groups=6, grid=3, sms=2))
    assert int(sim.state.p[0].slots_per_sm) == 6
    for g in (0, 1):
        rec = _records(sim, g, 18)
        sms = rec[:, 2].reshape(3, 6)
        assert (sms == sms[:, :1]).all()            # every block on one SM
        assert sms[0, 0] != sms[1, 0]               # the first two blocks on distinct SMs
        # the third block started after one of the first two had all its groups past their copy
        assert rec[12:, 0].min() > min(rec[:6, 1].max(), rec[6:12, 1].max())
        assert list(rec[:, 3]) == [18] * 18
    s = sim.stats
    assert s["system.gpu0.launch0.tbs"] == 3


def test_numba_and_python_engines_agree_on_warp_copies(tmp_path):
    cfg = _config(tmp_path, groups=4, grid=3, sms=2)
    out = cli_stats_per_engine(cfg, tmp_path)
    assert out["numba"] == out["python"]


def test_a_block_too_large_for_shared_memory_is_an_input_error(tmp_path):
    cfg = _config(tmp_path, groups=8, smem=".smem 32KB\n")
    r = run_cli("run", cfg, "-o", tmp_path / "o")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "workload.launches[0].warp_groups" in r.stderr and "smem" in r.stderr


def test_zero_warp_groups_is_an_input_error(tmp_path):
    r = run_cli("run", _config(tmp_path, groups=0), "-o", tmp_path / "o")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "warp_groups" in r.stderr


HOLDER_KERNEL = """
.kernel holder
.param out
.smem 160KB
    mov r1, %clock
    shl r6, %tb, 4
    add r6, r6, %out
    st [r6], r1                  # the cycle it started
    st [r6+8], %sm
    exit
"""


def _footprint_config(tmp_path, dynamic_smem):
    # a DeepEP-like block (2 warp groups copying) with `dynamic_smem` of shared memory, and two
    # 160 KB GEMM-like blocks on a second stream, on 2 SMs of 228 KB
    cfg = _config(tmp_path, groups=2, grid=1, sms=2, kernel=COPY_KERNEL + HOLDER_KERNEL)
    cfg.write_text(cfg.read_text().replace(
        "      warp_groups: 2\n", f"      warp_groups: 2\n      dynamic_smem: {dynamic_smem}\n")
        + """    - kernel: holder
      grid: 2
      stream: 1
      params: {out: "@held"}
""")
    cfg.write_text(cfg.read_text().replace(
        "    out: {bytes: 2KB, region: control, dtype: i64}\n",
        "    out: {bytes: 2KB, region: control, dtype: i64}\n"
        "    held: {bytes: 1KB, region: control, dtype: i64}\n"))
    return cfg


@pytest.mark.parametrize("dynamic_smem", ["0B", "192KB"])
def test_dynamic_shared_memory_keeps_other_blocks_off_the_sm(tmp_path, dynamic_smem):
    sim = _simulate(_footprint_config(tmp_path, dynamic_smem))
    for g in (0, 1):
        copier = _records(sim, g, 2)
        held = sim.read_buffer(g, "held", "i64")[:4].reshape(2, 2)
        assert list(copier[:, 2]) == [0, 0]          # the copier block on SM 0 (placed first)
        if dynamic_smem == "0B":
            # 160 KB fit beside the copier block: the holders on SM 1 and SM 0 at once, both
            # started before the copies are done
            assert list(held[:, 1]) == [1, 0]
            assert held[:, 0].max() < copier[:, 1].min()
        else:
            # 192 KB + 160 KB exceed the SM's 228 KB: SM 0 is the copier block's alone, the
            # second holder waits for the first to leave SM 1
            assert list(held[:, 1]) == [1, 1]
            assert held[1, 0] > held[0, 0]
    s = sim.stats
    index = {li.kernel: li.index for li in sim.launches if li.gpu == 0}
    assert s[f"system.gpu0.launch{index['copier']}.tbs"] == 1
    assert s[f"system.gpu0.launch{index['holder']}.tbs"] == 2


def test_a_block_whose_dynamic_shared_memory_exceeds_an_sm_is_an_input_error(tmp_path):
    cfg = _footprint_config(tmp_path, "200KB")
    (tmp_path / "k.s").write_text((tmp_path / "k.s").read_text().replace(
        ".param bytes\n", ".param bytes\n.smem 16KB\n", 1))
    r = run_cli("run", cfg, "-o", tmp_path / "o")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "workload.launches[0].dynamic_smem" in r.stderr
    assert "2 warp groups x 16384 bytes of .smem + 204800 bytes of dynamic_smem" in r.stderr


def test_numba_and_python_engines_agree_on_a_dynamic_shared_memory_footprint(tmp_path):
    out = cli_stats_per_engine(_footprint_config(tmp_path, "192KB"), tmp_path)
    assert out["numba"] == out["python"]
