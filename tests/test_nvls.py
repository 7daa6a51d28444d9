"""NVLink SHARP: the switch's multicast and reduction engine (components/nvls.py) and the NVLS
all-reduce (workloads/kernels/lib/nvls_allreduce.s, configs/ubench/allreduce_nvls.yaml).

- functional: every GPU's result is bit-identical to the NumPy sum in the switch's order (FP32
  accumulation in rank order, one rounding to the element type), in bf16 and fp32;
- conservation: each GPU's uplink carries its own slice once (the multicast store) plus its
  values for every rank's reduction; its downlink every rank's slice once plus its own reduced
  slice - exactly, in payload bytes; the fan-out equals the group size; savings as defined;
- back-pressure: a reduction buffer of one entry per port stalls the ports and changes nothing
  else that the result depends on; every entry is freed (the run's invariants);
- a multicast object over part of the GPUs; bad input (an address outside every object, a
  reduction buffer that cannot hold an entry, an unknown buffer) -> one paragraph, exit 2;
- the Numba and pure-Python engines give identical stats.
"""
import numpy as np
import pytest

from conftest import CONFIGS, check_allreduce_output, load, mini_system, simulate
from moehub_arch.checks import run_invariants
from moehub_arch.workloads.reference import nvls_allreduce_reference

CONFIG = "ubench/allreduce_nvls.yaml"


def tiny(P=4, channels=2, slice_elems=256, slices=2, bf16=1, mode="functional"):
    elems = P * channels * slice_elems * slices
    nbytes = elems * (2 if bf16 else 4)
    return (f"system.num_gpus={P}", f"workload.mode={mode}", f"workload.launches.0.grid={channels}",
            f"workload.launches.0.params.elems={elems}",
            f"workload.launches.0.params.slice={slice_elems}",
            f"workload.launches.0.params.bf16={bf16}",
            f"workload.buffers.send.dtype={'bf16' if bf16 else 'f32'}",
            f"workload.buffers.send.bytes={nbytes}B", f"workload.buffers.recv.bytes={nbytes}B")


def _payload(sim, g, direction):
    links = sim.cfg.system.nvlink.links_per_gpu
    return sum(sim.stats[f"system.gpu{g}.nvlink{l}.{direction}_payload_bytes"] for l in range(links))


@pytest.mark.parametrize("bf16", [1, 0])
def test_nvls_allreduce_equals_numpy_in_switch_order(bf16):
    P = 4
    sim = simulate(CONFIG, *tiny(P=P, bf16=bf16))
    assert run_invariants(sim) == []
    # FP32 accumulation with one rounding differs from rounding every add to bf16 (the ring's
    # order): the check pins the switch's arithmetic
    check_allreduce_output(sim, P, P * 2 * 256 * 2, bf16, nvls_allreduce_reference)


def test_nvls_allreduce_moves_each_slice_once_up_and_down():
    P, C, S, J = 4, 2, 1024, 2
    sim = simulate(CONFIG, *tiny(P=P, channels=C, slice_elems=S, slices=J, mode="timing"))
    assert run_invariants(sim) == []
    N = P * C * S * J * 2          # bytes per GPU
    for g in range(P):
        # up: its reduced slice once (multimem.st), its values for every rank's ld_reduce;
        # down: every rank's slice once (multicast copies), its own reduced slice
        assert _payload(sim, g, "tx") == N // P + N
        assert _payload(sim, g, "rx") == N + N // P
    st = sim.stats
    assert st["system.nvls.multicast_fanout"] == P
    assert st["system.nvls.multicast_copies"] == P * st["system.nvls.multicast_packets"]
    chunk = sim.cfg.system.nvlink.store_packet_bytes * sim.cfg.run.packet_train
    assert st["system.nvls.reductions"] == P * (N // P) // chunk
    # against unicast: P - 1 fewer packets up for every multicast packet, P - 1 fewer data
    # packets down for every reduction (wire bytes: payload plus one header flit per packet)
    F = sim.cfg.system.nvlink.flit_bytes
    pkt = sim.cfg.system.nvlink.store_packet_bytes + F
    data_packets = P * (N // P) // sim.cfg.system.nvlink.store_packet_bytes
    assert st["system.nvls.down_saved_bytes"] == (P - 1) * data_packets * pkt
    assert st["system.nvls.up_saved_bytes"] == (P - 1) * data_packets * (pkt + F)
    assert st["system.report.allreduce_busbw_GBps"] == pytest.approx(
        st["system.report.allreduce_algbw_GBps"] * 2 * (P - 1) / P)


def test_a_full_reduction_buffer_stalls_the_port_and_changes_no_result():
    P = 4
    base = tiny(P=P, slices=4) + tuple(mini_system(P, 4, 1))   # one link: one port per GPU
    cfg = load(CONFIG, *base)
    chunk = cfg.system.nvlink.store_packet_bytes * cfg.run.packet_train   # one entry per port
    small = simulate(CONFIG, *base, f"system.switch.nvls.reduction_buffer_bytes={chunk}B")
    big = simulate(CONFIG, *base)
    assert run_invariants(small) == []
    assert small.stats["system.nvls.buffer_peak_bytes"] == chunk
    assert big.stats["system.nvls.buffer_peak_bytes"] > chunk
    stalled = sum(small.stats[s.name] for s in small.stats
                  if s.name.endswith("nvls.buffer_stall_ticks"))
    assert stalled > 0
    assert small.stats["simTicks"] > big.stats["simTicks"]
    for g in range(P):
        assert np.array_equal(small.read_buffer(g, "recv", "bf16"), big.read_buffer(g, "recv", "bf16"))


def test_a_multicast_object_over_part_of_the_gpus(tmp_path):
    """GPU 0 multicasts to an object of GPUs {0, 2} of 4: only they receive the copies."""
    kernel = tmp_path / "k.s"
    kernel.write_text(".kernel mc\n.param send\n.param recv\n.param elems\n.param slice\n"
                      ".param bf16\n    bne %gpu, 0, done\n    multimem.st %send, %recv, 1024\n"
                      "done:\n    exit\n")
    sim = simulate(CONFIG, *tiny(P=4), f"workload.kernel_files=[{kernel}]",
                   "workload.launches.0.kernel=mc", "workload.launches.0.grid=1",
                   "workload.multicast=[{buffer: send, gpus: [0, 2]}]")
    assert run_invariants(sim) == []
    want = sim.read_buffer(0, "recv", "u8")[:1024]
    for g in range(4):
        got = sim.read_buffer(g, "send", "u8")[:1024]
        assert np.array_equal(got, want) == (g in (0, 2)), g
        assert sim.stats[f"system.gpu{g}.nvls.copies_received"] == (8 if g in (0, 2) else 0)
    assert sim.stats["system.nvls.multicast_fanout"] == 2


def test_numba_and_python_engines_agree():
    from moehub_arch.simulation import Simulation
    args = tiny(P=2, channels=1, slices=1)
    a = simulate(CONFIG, *args)
    sim = Simulation(load(CONFIG, *args, "run.engine=python"))
    sim.run()
    for s in a.stats:
        if not s.name.startswith("host"):
            assert sim.stats[s.name] == s.value, s.name


@pytest.mark.parametrize("sets,fragments", [
    (["workload.multicast=[{buffer: send}]"],
     ["runtime error in kernel 'allreduce_nvls'", "multimem address outside every multicast object"]),
    (["system.switch.nvls.reduction_buffer_bytes=0B"],
     ["system.switch.nvls.reduction_buffer_bytes", "cannot hold one multimem.ld_reduce entry"]),
    (["workload.multicast=[{buffer: nope}]"],
     ["workload.multicast[0].buffer", "no buffer 'nope'"]),
    (["workload.multicast=[{buffer: send, gpus: [1]}]"],
     ["workload.multicast[0].gpus", "at least two member GPUs"]),
], ids=["outside-every-object", "zero-buffer", "unknown-buffer", "one-member"])
def test_bad_input_gives_one_paragraph_and_exit_2(tmp_path, capsys, sets, fragments):
    from moehub_arch.cli import main
    argv = ["run", str(CONFIGS / CONFIG), "-o", str(tmp_path / "out")]
    for s in tiny(P=2, channels=1, slices=1) + tuple(sets):
        argv += ["--set", s]
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, (rc, err)
    assert err.startswith("moehub-sim: error: ") and "Traceback" not in err, err
    for f in fragments:
        assert f in err, (f, err)


@pytest.mark.parametrize("extra", [
    ["system.nvlink.response_path=shared"], ["system.nvlink.write_responses=per_request"],
    ["run.packet_train=4"], ["system.switch.forwarding=store_and_forward"],
    # tight buffers everywhere: credits, output and transmit queues of a couple of packets
    [*mini_system(4, 4, 2), "system.nvlink.rx_buffer_flits=17",
     "system.switch.output_queue_packets=2", "system.nvlink.tx_queue_packets=2"],
], ids=["shared-responses", "per-request", "trains", "store-and-forward", "tight-buffers"])
def test_nvls_allreduce_under_every_link_protocol(extra):
    P = 4
    sim = simulate(CONFIG, *tiny(P=P, slices=4), *extra)
    assert run_invariants(sim) == []
    elems = P * 2 * 256 * 4
    x = np.stack([sim.read_buffer(g, "send", "bf16")[:elems] for g in range(P)])
    ref = nvls_allreduce_reference(x)
    for g in range(P):
        assert np.array_equal(sim.read_buffer(g, "recv", "bf16")[:elems], ref), g


def test_multimem_red_adds_into_every_member(tmp_path):
    """multimem.red.add.f32 from both GPUs of two: each member's recv (zero) gets both inputs
    added - with two addends on zero the arrival order cannot change the fp32 sum."""
    kernel = tmp_path / "k.s"
    kernel.write_text(".kernel red\n.param send\n.param recv\n.param elems\n.param slice\n"
                      ".param bf16\n    mul r1, %elems, 4\n    multimem.red.add.f32 %recv, %send, r1\n"
                      "    exit\n")
    sim = simulate(CONFIG, *tiny(P=2, channels=1, slices=1, bf16=0),
                   f"workload.kernel_files=[{kernel}]", "workload.launches.0.kernel=red",
                   "workload.launches.0.grid=1")
    assert run_invariants(sim) == []
    elems = 2 * 256
    x = [sim.read_buffer(g, "send", "f32")[:elems] for g in range(2)]
    for g in range(2):
        assert np.array_equal(sim.read_buffer(g, "recv", "f32")[:elems], (x[0] + x[1]).astype(np.float32))
        assert sim.stats[f"system.gpu{g}.nvls.copies_received"] == 2 * elems * 4 // 128


def test_a_multicast_object_spanning_nodes_is_an_error(tmp_path, capsys):
    from moehub_arch.cli import main
    rc = main(["run", str(CONFIGS / CONFIG), "--system", str(CONFIGS / "systems/tiny_2x2.yaml"),
               "-o", str(tmp_path / "out"), "--set", "workload.launches.0.params.elems=4096",
               "--set", "workload.launches.0.params.slice=256", "--set", "workload.launches.0.grid=2"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "workload.multicast[0].gpus" in err and "span nodes [0, 1]" in err, err
