"""CAIS merge unit (components/cais/) on the hand-written kernel of
configs/ubench/cais_merge.yaml (workloads/kernels/ubench/cais_merge.s): every GPU red.cais-es its
`data` lines into the home's `acc` and ld.cais-es the home's `data` lines into its `got`.

- functional: acc = the FP32 sum of every GPU's data in rank order, rounded once to bf16
  (reference.nvls_allreduce_reference), bit for bit; got = the home's data, bit for bit;
- exact counts: each line is read from home memory once and written home once; merges = (GPUs - 1)
  x lines x 2; wire bytes of the home's links;
- a table of one entry per port: LRU evictions send partial sums home and the result is the same
  sum (within the bound); every entry is freed (the run's invariants);
- a group member that never sends: the entry's timer writes the partial sum home;
- a GPU that starts late: without throttling the early GPUs evict each other's partial sums,
  with system.switch.cais.throttle they wait and every line is merged by all, bit for bit;
- CAIS's merging-aware thread-block coordination (sync.cais, the switch's group sync table): the
  same late GPU, no throttle: the early GPUs' thread blocks wait at their pre-access sync, the
  requests meet, no eviction, every line merged by all four, bit for bit; a sync flag outside
  every group and a sync table of 0 entries are errors (exit 2);
- bad input: ld.cais outside a registered group (exit 2), a merge table of 0 entries (exit 2);
- the Numba and pure-Python engines give identical stats;
- TP scheme cais with its collectives as kernels (workload.block.cais_dataflow: false; red.cais
  reduce-scatter, ld.cais all-gather): the tiny transformer layer at t = 4 gives the NumPy
  reference bit for bit; an FFN block under it is a config error (the dataflow, cais's default:
  tests/test_cais_dataflow.py);
- workload.block.cais_fusion (the all-gather fused into the QKV projection, the reduce-scatter into
  the output projection: tp/cais.s tp_gemm_cais): the same layer, bit for bit, the same lines merged
  by every GPU, two collective kernels fewer; cais_fusion under another scheme is a config error.
"""
import subprocess
import sys

import numpy as np
import pytest

from conftest import CONFIGS, assert_cais_lines_merged, cli_stats_per_engine, load, mini_system
from moehub_arch.checks import run_invariants
from moehub_arch.simulation import Simulation
from moehub_arch.workloads.reference import nvls_allreduce_reference

CONFIG = "ubench/cais_merge.yaml"
LINE = 128


def tiny(P=4, links=2, tbs=2, nbytes=1024):
    return tuple(mini_system(P, 4, links)) + (
        f"workload.launches.0.grid={tbs}", f"workload.launches.0.params.bytes={nbytes}",
        *(f"workload.buffers.{b}.bytes={tbs * nbytes}B" for b in ("data", "acc", "got")))


def run(*overrides):
    """In this process (the Numba engine)."""
    sim = Simulation(load(CONFIG, *overrides))
    sim.run()
    return sim


def check_result(sim, P, home=0, exact=True):
    """acc at the home = the FP32 rank-order sum rounded once to bf16 (reference.
    nvls_allreduce_reference): bit for bit without evictions; with them each evicted partial sum
    was rounded to bf16 before the home added it, and every bf16 rounding errs by at most 2^-8 of
    what it rounds - a partial sum is at most the sum of its parts' magnitudes, so the error is
    bounded by 2^-7 of sum(|parts|), not of |sum| (under cancellation the sum is small while a
    rounded partial is not); got on every GPU = the home's data, bit for bit."""
    parts = np.stack([sim.read_buffer(g, "data") for g in range(P)])
    want = nvls_allreduce_reference(parts, bf16=True)
    got = sim.read_buffer(home, "acc")
    if exact:
        assert np.array_equal(got, want)
    else:
        magnitude = np.abs(parts.astype(np.float64)).sum(axis=0)
        assert np.all(np.abs(got.astype(np.float64) - want) <= magnitude * 2.0 ** -7 + 1e-30)
    for g in range(P):
        assert np.array_equal(sim.read_buffer(g, "got", "u8"), sim.read_buffer(home, "data", "u8"))


def test_every_line_read_once_written_once_and_merged():
    P, T, N = 4, 2, 1024
    sim = run(*tiny(P, tbs=T, nbytes=N))
    assert run_invariants(sim) == []
    check_result(sim, P)
    st = sim.stats
    lines = T * N // LINE
    assert st["system.cais.memory_reads"] == lines
    assert st["system.cais.home_writes"] == lines
    assert st["system.cais.replies"] == P * lines
    assert st["system.cais.allocations"] == 2 * lines
    assert st["system.cais.merges"] == (P - 1) * lines * 2
    assert st["system.cais.complete_groups"] == 2 * lines
    assert st["system.cais.evictions"] == 0 and st["system.cais.timeouts"] == 0
    assert st["system.gpu0.cais.home_contributions"] == P * lines
    # the home's links: up, the read data once per line (plus the write responses it owes and
    # its own requests); down, the merged sums once per line plus its own replies
    F = sim.cfg.system.nvlink.flit_bytes
    pkt = LINE + F
    rx = sum(st[f"system.gpu0.nvlink{l}.rx_payload_bytes"] for l in range(2))
    assert rx == lines * LINE * 2           # merged writes + the home's own replies
    for g in range(1, P):
        tx = sum(st[f"system.gpu{g}.nvlink{l}.tx_payload_bytes"] for l in range(2))
        assert tx == lines * LINE            # its contributions (ld.cais requests carry none)
        wire = sum(st[f"system.gpu{g}.nvlink{l}.tx_wire_bytes"] for l in range(2))
        assert wire == lines * pkt + lines * F   # + one header flit per ld.cais line
    assert st["system.cais.table_peak"] <= 2 * lines


def test_a_table_of_one_entry_per_port_evicts_and_gives_the_same_sum():
    P = 4
    base = tiny(P, links=1, tbs=2, nbytes=1024)
    sim = run(*base, "system.switch.cais.entries_per_port=1")
    assert run_invariants(sim) == []
    check_result(sim, P, exact=False)
    st = sim.stats
    assert st["system.cais.table_peak"] == 1
    assert st["system.cais.evictions"] + st["system.cais.full_stalls"] > 0
    # every contribution reached home, in merged or evicted partial sums
    assert st["system.gpu0.cais.home_contributions"] == P * 2 * 1024 // LINE
    assert st["system.cais.home_writes"] >= 2 * 1024 // LINE


def test_a_member_that_never_sends_is_timed_out(tmp_path):
    """A group of GPUs {0, 1, 2, 3} where GPU 3 runs no kernel: each line's entry waits for it
    until the timer writes the partial sum home (and drops the served loads)."""
    P = 4
    sim = run(*tiny(P, tbs=1, nbytes=256), "workload.launches.0.gpus=[0, 1, 2]",
              "system.switch.cais.timeout=1us")
    assert run_invariants(sim) == []
    st = sim.stats
    assert st["system.cais.timeouts"] == 2 * 2     # 2 lines: a partial sum and a load each
    assert st["system.cais.complete_groups"] == 0
    assert st["system.gpu0.cais.home_contributions"] == 3 * 2
    # the timed-out partial sum of GPUs 0 .. 2 is still their rank-order sum, rounded once
    want = nvls_allreduce_reference(np.stack([sim.read_buffer(g, "data") for g in range(3)]),
                                    bf16=True)
    assert np.array_equal(sim.read_buffer(0, "acc"), want)


def skewed(throttle, P=4, tbs=2, nbytes=1024, sync=False):
    """GPUs 0 .. P-2 start at once, GPU P-1 1 us later (host_delay), one link, a table of 2
    entries per port: the early GPUs fill the table with lines the late one has yet to reach.
    sync: each thread block first syncs its group (thread block b of every GPU) in the switch's
    group sync table (a registered i64 flag per thread block)."""
    params = ('{data: "@data", acc: "@acc", got: "@got", home: 0, bytes: %d, sync: %s}'
              % (nbytes, '"@sync"' if sync else -1))
    early = ", ".join(str(g) for g in range(P - 1))
    flags = (f"workload.buffers.sync={{bytes: {tbs * 8}B, region: control, dtype: i64}}",
             "workload.cais=[{buffer: data}, {buffer: acc}, {buffer: sync}]") if sync else ()
    return tiny(P, links=1, tbs=tbs, nbytes=nbytes) + (
        "system.switch.cais.entries_per_port=2", f"system.switch.cais.throttle={throttle}",
        f"workload.launches=[{{kernel: cais_merge, grid: {tbs}, gpus: [{early}], params: {params}}}, "
        f"{{kernel: cais_merge, grid: {tbs}, gpus: [{P - 1}], host_delay: 1us, params: {params}}}]"
    ) + flags


def test_throttling_holds_back_the_gpus_that_run_ahead():
    """Without throttling the early GPUs' misses evict each other's partial sums (every line
    goes home as two partial sums, no group completes); with system.switch.cais.throttle they
    wait at their input ports once every entry holds their request, the late GPU completes the
    entries, and each line is merged by all four and written home once - the reference sum bit
    for bit, sooner."""
    P, lines = 4, 2 * 1024 // LINE
    off = run(*skewed("false"))
    on = run(*skewed("true"))
    for sim in (off, on):
        assert run_invariants(sim) == []
    check_result(off, P, exact=False)
    check_result(on, P, exact=True)
    a, b = off.stats, on.stats
    assert (a["system.cais.evictions"], a["system.cais.timeouts"], a["system.cais.throttles"],
            a["system.cais.complete_groups"], a["system.cais.home_writes"]) == (62, 2, 0, 0, 2 * lines)
    assert (b["system.cais.evictions"], b["system.cais.timeouts"], b["system.cais.throttles"],
            b["system.cais.complete_groups"], b["system.cais.home_writes"]) == (0, 0, 48, 2 * lines, lines)
    assert b["system.cais.merges"] == (P - 1) * 2 * lines
    assert b["simTicks"] < a["simTicks"]


def test_group_sync_turns_evictions_into_complete_merges():
    """The same late GPU without throttling, but each thread block first syncs its group of
    matching thread blocks in the switch's group sync table: the early GPUs' thread blocks wait
    1 us at the sync (the late GPU's delay), their requests then meet the late GPU's in the
    merge table - no eviction or timeout (62 and 2 without the sync), every line of both the
    reduction and the load completed by all four GPUs and written home or read once, the
    reference sum bit for bit, sooner."""
    P, tbs, lines = 4, 2, 2 * 1024 // LINE
    off = run(*skewed("false"))
    on = run(*skewed("false", sync=True))
    assert run_invariants(on) == []
    check_result(on, P, exact=True)
    a, b = off.stats, on.stats
    assert (a["system.cais.evictions"], a["system.cais.complete_groups"],
            a["system.cais.sync_arrivals"]) == (62, 0, 0)
    assert (b["system.cais.evictions"], b["system.cais.timeouts"], b["system.cais.throttles"],
            b["system.cais.complete_groups"], b["system.cais.home_writes"],
            b["system.cais.memory_reads"]) == (0, 0, 0, 2 * lines, lines, lines)
    assert b["system.cais.merges"] == (P - 1) * 2 * lines
    assert b["system.cais.complete_fraction"] == 1.0
    # one arrival per thread block and GPU, one release per group (thread block index)
    assert (b["system.cais.sync_arrivals"], b["system.cais.sync_releases"]) == (P * tbs, tbs)
    assert b["system.cais.sync_wait_max"] == 1_000_000      # the late GPU's 1 us
    assert b["system.cais.sync_full_stalls"] == 0 and b["system.cais.sync_table_peak"] <= tbs
    for g in range(P):
        assert (b[f"system.gpu{g}.cais.sync_arrivals"], b[f"system.gpu{g}.cais.sync_releases"]) \
            == (tbs, tbs)
    assert b["simTicks"] < a["simTicks"]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "moehub_arch", "run", str(CONFIGS / CONFIG),
                           *args], capture_output=True, text=True)


def test_ld_cais_outside_a_registered_group_is_an_error(tmp_path):
    r = _cli(*(f"--set={o}" for o in tiny(2, tbs=1, nbytes=256)), "--set",
             "workload.cais=[{buffer: acc}]", "-o", str(tmp_path))
    assert r.returncode == 2, r.stderr
    assert "ld.cais / red.cais address outside every registered CAIS group" in r.stderr
    assert "Traceback" not in r.stderr


def test_sync_cais_outside_a_registered_group_is_an_error(tmp_path):
    """The sync flag buffer exists but is not registered with workload.cais."""
    args = skewed("false", tbs=1, nbytes=256, sync=True)[:-1]
    r = _cli(*(f"--set={o}" for o in args), "-o", str(tmp_path))
    assert r.returncode == 2, r.stderr
    assert "sync.cais flag outside every group" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_group_sync_table_of_zero_entries_is_a_config_error(tmp_path):
    r = _cli("--set", "system.switch.cais.sync_entries=0", "-o", str(tmp_path))
    assert r.returncode == 2, r.stderr
    assert "system.switch.cais.sync_entries" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_merge_table_of_zero_entries_is_a_config_error(tmp_path):
    r = _cli("--set", "system.switch.cais.entries_per_port=0", "-o", str(tmp_path))
    assert r.returncode == 2, r.stderr
    assert "system.switch.cais.entries_per_port" in r.stderr
    assert "Traceback" not in r.stderr


def test_numba_and_python_engines_agree(tmp_path):
    args = tiny(2, tbs=1, nbytes=512) + ("system.switch.cais.entries_per_port=1",)
    out = cli_stats_per_engine(CONFIGS / CONFIG, tmp_path, *(f"--set={a}" for a in args))
    assert out["numba"]["system.cais.merges"] > 0
    assert out["numba"] == out["python"]
    out = cli_stats_per_engine(CONFIGS / CONFIG, tmp_path / "throttle",
                               *(f"--set={a}" for a in skewed("true", tbs=1, nbytes=512)))
    assert out["numba"]["system.cais.throttles"] > 0
    assert out["numba"] == out["python"]
    out = cli_stats_per_engine(CONFIGS / CONFIG, tmp_path / "sync",
                               *(f"--set={a}" for a in skewed("false", tbs=1, nbytes=512,
                                                               sync=True)))
    assert out["numba"]["system.cais.sync_releases"] == 1
    assert out["numba"] == out["python"]


def test_tp_block_scheme_cais_is_the_reference_bit_for_bit():
    """The tiny transformer layer at t = 4 with red.cais reduce-scatters and ld.cais all-gathers:
    every GPU's output equals the NumPy reference (the merge unit's rank order, no evictions);
    each line is merged by the other t - 1 GPUs, read or written home once."""
    from conftest import simulate
    sim = simulate("experiments/tp/functional_transformer.yaml", "workload.block.scheme=cais",
                   "workload.block.cais_dataflow=false")
    st = sim.stats
    assert not sim.violations
    assert st["system.block.output_max_abs_error"] == 0.0
    assert st["system.cais.evictions"] == 0 and st["system.cais.timeouts"] == 0
    assert st["system.cais.merges"] == 3 * st["system.cais.allocations"]
    assert st["system.cais.complete_groups"] == st["system.cais.allocations"]
    assert st["system.cais.memory_reads"] + st["system.cais.home_writes"] == \
        st["system.cais.allocations"]
    # the group sync (workload.block.cais_sync, on by default): one release per slice of each
    # channel (4 collectives x 2 channels x 4 slices of 64 elements), every GPU arriving once
    assert (st["system.cais.sync_releases"], st["system.cais.sync_arrivals"]) == (32, 4 * 32)
    off = simulate("experiments/tp/functional_transformer.yaml", "workload.block.scheme=cais",
                   "workload.block.cais_dataflow=false", "workload.block.cais_sync=false")
    assert off.stats["system.block.output_max_abs_error"] == 0.0
    assert off.stats["system.cais.sync_arrivals"] == 0
    assert off.stats["system.cais.complete_groups"] == st["system.cais.complete_groups"]


def test_tp_block_cais_fusion_is_the_reference_bit_for_bit():
    """The QKV projection's thread blocks pull their row tiles with ld.cais and the output
    projection's push their tiles home with red.cais: the output is the reference bit for bit (the
    merge unit's order does not depend on when the contributions come); the switch merges the same
    lines as the collective kernels do (4 collectives of T x H bf16: 32 tokens x 64 x 2 B = 32
    lines each), each completed by all four GPUs; only the FFN's all-gather and reduce-scatter are
    still kernels."""
    from conftest import simulate
    sim = simulate("experiments/tp/functional_transformer.yaml", "workload.block.scheme=cais",
                   "workload.block.cais_fusion=true", "workload.block.cais_dataflow=false")
    st = sim.stats
    assert_cais_lines_merged(sim, 4 * 32 * 64 * 2 // LINE, 4)
    kernels = [l.kernel for l in sim.cfg.workload.launches]
    assert kernels.count("cais_tp_collective") == 2 and kernels.count("tp_gemm_cais") == 2
    # group syncs: the FFN's two collectives 2 channels x 4 slices each, the QKV GEMM one per row
    # tile (2 of 16 rows, before its job 0 pulls the rows), the output projection one per job (2)
    assert (st["system.cais.sync_releases"], st["system.cais.sync_arrivals"]) == (20, 4 * 20)


def test_cais_fusion_needs_scheme_cais(tmp_path):
    from conftest import run_cli
    r = run_cli("run", CONFIGS / "experiments/tp/functional_transformer.yaml", "--set",
                "workload.block.cais_fusion=true", "-o", tmp_path)
    assert r.returncode == 2, r.stderr
    assert "workload.block.cais_fusion" in r.stderr and "Traceback" not in r.stderr


def test_scheme_cais_needs_sequence_parallel_kinds(tmp_path):
    from conftest import run_cli
    r = run_cli("run", CONFIGS / "experiments/tp/functional.yaml", "--set",
                "workload.block.scheme=cais", "-o", tmp_path)
    assert r.returncode == 2, r.stderr
    assert "workload.block.scheme" in r.stderr and "Traceback" not in r.stderr
