"""DeepEP's combine with the home reduction in its receiver SMs (workload.layer.deepep.home_reduce,
workloads/kernels/deepep/deepep.s deepep_combine), the LSU loads of vaxpy.f32.bf16.lsu
(components/sm.py) and registers / threads as a residency limit (components/scheduler.py)."""
import numpy as np
import pytest

from conftest import CONFIGS, mini_system_yaml, run_cli, simulate
from moehub_arch.workloads.bandwidth import tokens_received_per_rank

CONFIG = "experiments/functional.yaml"
P, T, K = 4, 64, 2                      # configs/experiments/functional.yaml (tiny_functional)
SM_PERIOD_PS = 1e12 / 1.83e9           # dgx_h100 sm_clock


def run(*overrides):
    return simulate(CONFIG, "scheme=deepep", *overrides)


def _launches(sim, kernel):
    return [li for li in sim.launches if li.kernel == kernel and li.gpu == 0]


@pytest.fixture(scope="module")
def designs():
    return {d: run(f"workload.layer.deepep.home_reduce={d}") for d in ("receivers", "kernel")}


def test_both_designs_sum_in_the_same_order_exactly(designs):
    # the same fp32 order (shared experts, then each rank's bf16 partial, ranks ascending): the
    # outputs are bit-identical to each other and to the reference's combine="per_rank"
    outs = {}
    for d, sim in designs.items():
        s = sim.stats
        for name in ("sent", "received", "computed", "combined"):
            assert s[f"system.moe.rows_{name}"] == P * T * K, (d, name)
        assert s["system.moe.output_max_abs_reference"] > 0
        assert s["system.moe.output_max_abs_error"] == 0.0, d
        outs[d] = np.stack([sim.read_buffer(g, "out", "f32") for g in range(P)])
    assert np.array_equal(outs["receivers"], outs["kernel"])


def test_receivers_run_in_the_combine_kernel(designs):
    rec, ker = designs["receivers"], designs["kernel"]
    # receivers: one kernel of 2C channel blocks (C senders, C receivers) of P warp groups
    (li,) = _launches(rec, "deepep_combine")
    C = rec.cfg.workload.layer.deepep.comm_sms // 2
    assert (int(rec.state.ln[li.index].groups), li.grid) == (P, 2 * C)
    assert not _launches(rec, "deepep_reduce") and not _launches(rec, "deepep_combine_partials")
    # DeepEP's Buffer.combine: cached_notify_combine (one block: barrier, clean, barrier) first,
    # one launch latency before the combine kernel; the combine phase spans both
    (notify,) = _launches(rec, "deepep_cached_notify")
    assert notify.grid == 1 and notify.index < li.index
    lat = rec.cfg.system.gpu.kernel_launch_latency
    assert int(rec.state.ln[li.index].start) == int(rec.state.ln[notify.index].end) + lat
    assert rec.stats["system.moe.phase.combine_us"] == pytest.approx(
        rec.stats["system.moe.kernel.deepep_cached_notify_us"] + lat / 1e6
        + rec.stats["system.moe.kernel.deepep_combine_us"])
    # kernel: the first model's pair
    assert len(_launches(ker, "deepep_combine_partials")) == 1
    assert len(_launches(ker, "deepep_reduce")) == 1
    assert not _launches(ker, "deepep_combine")
    # the reduction's SM-side loads: every partial row (one per (token, rank holding any of its
    # experts)) is loaded once at home through the LSU, on the receiver SMs (shared-expert rows
    # too); their bf16 bytes are part of the LSU busy time of those SMs
    for d, sim in designs.items():
        assert sim.stats["system.moe.deepep.combine_GBps"] > 0
        if d == "receivers":
            # the figure times Buffer.combine (tests/test_intranode.py: CUDA events around it):
            # the cached notify, the launch gap and the combine kernel, per rank
            st, call, alone = sim.state, [], []
            for g in range(P):
                (n,) = [x for x in sim.launches if x.gpu == g and x.kernel == "deepep_cached_notify"]
                (c,) = [x for x in sim.launches if x.gpu == g and x.kernel == "deepep_combine"]
                call.append(int(st.ln[c.index].end) - int(st.ln[n.index].start))
                alone.append(int(st.ln[c.index].end) - int(st.ln[c.index].start))
            back = tokens_received_per_rank(sim.layer.routing.topk_idx,
                                            sim.layer.shape.local_experts) * sim.layer.shape.row_bytes
            assert all(a > b for a, b in zip(call, alone))
            starts = np.array([int(st.ln[x.index].start) for x in sim.launches
                               if x.kernel == "deepep_cached_notify"])
            assert sim.stats["system.moe.deepep.combine_entry_skew_us"] == pytest.approx(
                float(np.mean(starts.max() - starts)) / 1e6, rel=1e-12)
            assert sim.stats["system.moe.deepep.combine_reduce_GBps"] == pytest.approx(
                float(np.mean(back / (np.array(call) * 1e-12))) / 1e9, rel=1e-12)
            assert sim.stats["system.moe.deepep.combine_GBps"] == pytest.approx(
                float(np.mean(back / (np.array(alone) * 1e-12))) / 1e9, rel=1e-12)


@pytest.mark.parametrize("head_poll", ["remote", "pushed"])
@pytest.mark.parametrize("rows", [1, 2])
def test_combine_rings_with_back_pressure(rows, head_poll):
    # one channel, one- or two-row rings: every combine row waits for the home's head updater
    # to free its slot (the dispatch rings too); the output stays exact whether the sender reads
    # the head on the home (polling again while the ring is full) or waits for it to be pushed
    sim = run(f"workload.layer.deepep.ring_rows={rows}", "workload.layer.deepep.comm_sms=2",
              "workload.layer.deepep.send_chunk_tokens=1",
              f"workload.layer.deepep.head_poll={head_poll}")
    assert sim.stats["system.moe.rows_combined"] == P * T * K
    assert sim.stats["system.moe.output_max_abs_error"] == 0.0


@pytest.mark.parametrize("combine_chunk", [0, 3])
def test_remote_head_poll_reads_the_head_once_per_chunk(combine_chunk):
    # head_poll remote (DeepEP's): before each chunk a combine sender reads the ring's head on the
    # home rank (one remote read through the hub); pushed: the home's head updater sends the head
    # to each remote sender every chunk of positions (flag.set). With rings larger than any
    # channel's stream no ring is ever full, so a sender of n rows polls exactly ceil(n / chunk)
    # times: the hubs' request counts differ by exactly polls - pushes, per GPU
    # to each remote sender every chunk of positions (flag.set). The combine's chunk is
    # combine_send_chunk_tokens (DeepEP's combine config), the dispatch's send_chunk_tokens at 0
    sims = {hp: run(f"workload.layer.deepep.head_poll={hp}", "workload.layer.deepep.ring_rows=64",
                    f"workload.layer.deepep.combine_send_chunk_tokens={combine_chunk}")
            for hp in ("remote", "pushed")}
    cfg = sims["remote"].cfg.workload.layer.deepep
    C = cfg.comm_sms // 2
    chunk = min(combine_chunk or cfg.send_chunk_tokens, 64 // 2)
    assert chunk == (3 if combine_chunk else cfg.send_chunk_tokens)
    Tc = -(-T // C)
    # n[c, home, g]: tokens of `home` on channel c that went to GPU g (dispatch's send_head)
    n = np.zeros((C, P, P), dtype=np.int64)
    for home in range(P):
        head = sims["remote"].read_buffer(home, "dp_send_head", "i64")[:T * P].reshape(T, P)
        for t, g in zip(*np.nonzero(head >= 0)):
            n[t // Tc, home, g] += 1
    assert n.sum() > 0
    reads = 0
    for g in range(P):
        polls = sum(-(-n[c, s, g] // chunk) for c in range(C) for s in range(P) if s != g)
        pushes = sum(n[c, g, r] // chunk for c in range(C) for r in range(P) if r != g)
        requests = {hp: sim.stats[f"system.gpu{g}.hub.requests"] for hp, sim in sims.items()}
        assert requests["remote"] - requests["pushed"] == polls - pushes, g
        reads += polls
    # conservation on the wire: what the GPUs' uplinks carry is the kernels' requests and rows,
    # one ACK flit per write, and per head read one answer of a header and a data flit (8 B)
    sim = sims["remote"]
    st, p = sim.state, sim.state.p[0]
    G, L = int(p.num_gpus), int(p.links_per_gpu)
    uplinks = sum(int(st.ch[2 * (g * L + l)].tx_wire_bytes) for g in range(G) for l in range(L))
    acks = sum(sim.stats[f"system.gpu{g}.hub.acks_received"] for g in range(G))
    assert uplinks == int(st.ln.tx_wire.sum()) + (acks + 2 * reads) * int(p.flit_bytes)
    for sim in sims.values():
        assert sim.stats["system.moe.rows_combined"] == P * T * K
        assert sim.stats["system.moe.output_max_abs_error"] == 0.0
    # the read is a round trip before every chunk: the combine takes longer than with the head
    # pushed to the sender
    assert (sims["remote"].stats["system.moe.kernel.deepep_combine_us"]
            > sims["pushed"].stats["system.moe.kernel.deepep_combine_us"])


def test_receivers_need_two_gpus():
    r = run_cli("run", CONFIGS / CONFIG, "--set", "scheme=deepep", "--set", "system.num_gpus=1",
                "--engine", "python", "--quiet", "-o", "/dev/null/x")
    assert r.returncode == 2, r.stderr
    assert "workload.layer.deepep.home_reduce" in r.stderr
    assert "Traceback" not in r.stderr


# ---- vaxpy.f32.bf16.lsu: loads through the LSU beside the vector unit -------------------------

N = 4096                     # elements of one row
LSU_KERNEL = """
.kernel summer
.param src
.param w
.param out
.smem 16KB
    vzero.f32 %smem, {n}
    vaxpy.f32.bf16.lsu %smem, %src, %w, {n}
    copy %out, %smem, {nb}
    exit
"""


def _lsu_config(tmp_path, instruction):
    (tmp_path / "k.s").write_text(LSU_KERNEL.format(n=N, nb=4 * N).replace(
        "vaxpy.f32.bf16.lsu", instruction))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(mini_system_yaml(2, 2) + f"""workload:
  mode: functional
  kernel_files: [{tmp_path / 'k.s'}]
  buffers:
    src: {{bytes: {2 * N}B, init: random, dtype: bf16}}
    w: {{bytes: 8B, init: fill, value: 1.0, dtype: f32}}
    out: {{bytes: {4 * N}B, dtype: f32}}
  launches:
    - kernel: summer
      grid: 1
      params: {{src: "@src", w: "@w", out: "@out"}}
""")
    from moehub_arch.config import load_config
    from moehub_arch.simulation import Simulation
    sim = Simulation(load_config(cfg))
    sim.run()
    return sim


@pytest.mark.parametrize("instruction", ["vaxpy.f32.bf16.lsu", "vaxpy.f32.bf16"])
def test_lsu_loads_charge_the_load_store_unit(tmp_path, instruction):
    sim = _lsu_config(tmp_path, instruction)
    s = sim.stats
    sm = next(i for i in range(2) if s[f"system.gpu0.sm{i}.vector_busy_ticks"] > 0)
    vec_cycles = 2 * (N // 128)                  # vzero and the sum: n / 128 lanes each
    lsu_cycles = 4 * N // 128                    # the copy out: 4n bytes at 128 B per cycle
    if instruction.endswith(".lsu"):
        lsu_cycles += 2 * N // 128               # the bf16 row's loads: 2n bytes
    assert s[f"system.gpu0.sm{sm}.vector_busy_ticks"] == pytest.approx(
        vec_cycles * SM_PERIOD_PS, abs=2)
    assert s[f"system.gpu0.sm{sm}.lsu_busy_ticks"] == pytest.approx(
        lsu_cycles * SM_PERIOD_PS, abs=2)
    src = sim.read_buffer(0, "src", "bf16").astype(np.float32)
    assert np.array_equal(sim.read_buffer(0, "out", "f32"), src)   # 0 + 1.0 * x, exact


# ---- registers and threads as a residency limit ----------------------------------------------

REG_KERNELS = """
.kernel big
.param out
.threads {threads}
.regs {regs}
    shl r1, %tb, 4
    add r1, r1, %out
    st [r1], %sm
    sleep 2000
    exit

.kernel small
.param out
.threads 256
.regs 32
    shl r1, %tb, 4
    add r1, r1, %out
    st [r1+8], %sm
    exit
"""


def _reg_config(tmp_path, threads=768, regs=80):
    (tmp_path / "k.s").write_text(REG_KERNELS.format(threads=threads, regs=regs))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(mini_system_yaml(2, 2) + f"""workload:
  mode: functional
  kernel_files: [{tmp_path / 'k.s'}]
  buffers:
    out: {{bytes: 1KB, region: control, dtype: i64}}
  launches:
    - {{kernel: big, grid: 2, stream: 0, params: {{out: "@out"}}}}
    - {{kernel: small, grid: 2, stream: 1, params: {{out: "@out"}}}}
""")
    return cfg


def test_registers_keep_other_blocks_off_a_full_sm(tmp_path):
    from moehub_arch.config import load_config
    from moehub_arch.simulation import Simulation
    # big: 768 threads x 80 registers = 24 warps x 2560 = 61440 of 65536: a small block
    # (8 warps x 32 x 32 = 8192) does not fit beside it, so it waits for a big block to exit
    sim = Simulation(load_config(_reg_config(tmp_path)))
    sim.run()
    st = sim.state

    def pair(sim, g):
        return tuple(next(li.index for li in sim.launches if li.kernel == k and li.gpu == g)
                     for k in ("big", "small"))
    for g in (0, 1):
        big, small = pair(sim, g)
        assert int(st.ln[big].block_regs) == 61440
        assert (int(st.ln[small].block_regs), int(st.ln[small].block_threads)) == (8192, 256)
        assert int(st.ln[small].start) < int(st.ln[big].end)        # launched meanwhile
        # its blocks were placed only when the big blocks (one per SM) had exited
        assert int(st.ln[small].end) > int(st.ln[big].end)
    # 40 registers per thread (30720 a block): a big and a small block share an SM
    sim = Simulation(load_config(_reg_config(tmp_path, regs=40)))
    sim.run()
    for g in (0, 1):
        big, small = pair(sim, g)
        assert int(sim.state.ln[big].block_regs) == 30720
        assert int(sim.state.ln[small].end) < int(sim.state.ln[big].end)


@pytest.mark.parametrize("threads, regs", [(1024, 128), (4096, 8)])
def test_a_block_over_the_sm_limits_is_an_input_error(tmp_path, threads, regs):
    r = run_cli("run", _reg_config(tmp_path, threads, regs), "--quiet", "-o", tmp_path / "o")
    assert r.returncode == 2, r.stderr
    assert "k.s:" in r.stderr and ".regs" in r.stderr and "system.gpu.sm.registers" in r.stderr
    assert "Traceback" not in r.stderr


def test_lsu_loads_and_register_directives_are_checked(tmp_path):
    from moehub_arch.config import flat_params
    from moehub_arch.isa import AsmError, IsaError, assemble_text, default_isa_paths, load_isa
    from moehub_arch.isa.encoding import DTYPE, DTYPE_LSU_LOADS
    from conftest import load
    bad = tmp_path / "bad.yaml"
    bad.write_text("instructions:\n  myld: {semantic: ld, unit: lsu, operands: [dst, addr], "
                   "latency: 0, ii: 1, lsu_loads: true, description: x}\n")
    with pytest.raises(IsaError, match="lsu_loads"):
        load_isa([*default_isa_paths(), bad])
    isa = load_isa(default_isa_paths()).resolve(flat_params(load("ubench/alltoall.yaml")))
    p = assemble_text(".kernel k\n.param a\n.threads 256\n.regs 32\n"
                      "    vaxpy.f32.bf16.lsu %a, %a, %a, 8\n    exit\n", isa, file="k.s")
    assert p.code[0, DTYPE] & DTYPE_LSU_LOADS
    assert (p.kernels["k"].threads, p.kernels["k"].regs_per_thread) == (256, 32)
    with pytest.raises(AsmError, match="only one of .threads and .regs"):
        assemble_text(".kernel k\n.threads 256\n    exit\n", isa, file="k.s")
    with pytest.raises(AsmError, match=".regs takes one integer"):
        assemble_text(".kernel k\n.regs 0\n    exit\n", isa, file="k.s")
