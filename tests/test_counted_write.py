"""Counted writes (components/counted_write.py, isa/counted.yaml): a put that names a counter at
its destination adds its landed payload bytes to it; wait.count sleeps until a counter reaches
an expected byte count. Pinned on a hand-written three-GPU case; bad counters and a wait nobody
satisfies are clear errors; both engines agree."""
import numpy as np
import pytest

from conftest import CONFIGS, cli_stats_per_engine, mini_system_yaml, run_cli

FIRST, SECOND, OTHER = 1000, 4096, 200     # bytes: GPU 0's two puts, GPU 1's put
PACKET = 128                                # dgx_h100 nvlink.store_packet_bytes

KERNEL = """
.kernel counted
.param src
.param dst
.param cnt
.param out
    beq %gpu, 2, receiver
    beq %gpu, 1, other
    put.counted 2, %dst, %src, 1000, %cnt          # GPU 0: 1000 B into counter 0 of GPU 2
    sleep 20000
    st [%out], %tick                               # when the second put is issued
    add r1, %dst, 1000
    add r2, %src, 1000
    put.counted 2, r1, r2, 4096, %cnt
    fence
    exit
other:
    add r1, %dst, 6000
    put.sm.counted 2, r1, %src, 200, %cnt           # GPU 1: a warp copy into the same counter
    put.counted 1, %dst, %src, 64, %cnt             # a local counted put (GPU 1 to itself)
    fence
    exit
receiver:
    beq %tb, 1, late
    wait.count [%cnt], 1200                         # GPU 0's first put and GPU 1's
    st [%out], %tick
    ld r3, [%cnt]
    st [%out+8], r3
    exit
late:
    wait.count [%cnt], 5296                         # every byte
    st [%out+16], %tick
    ld r3, [%cnt]
    st [%out+24], r3
    exit
"""


def _config(tmp_path, kernel=KERNEL):
    (tmp_path / "k.s").write_text(kernel)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(mini_system_yaml(3, 4) + f"""workload:
  mode: functional
  kernel_files: [{tmp_path / 'k.s'}]
  buffers:
    src: {{bytes: 8KB, init: random, dtype: u8}}
    dst: {{bytes: 8KB, dtype: u8}}
    cnt: {{bytes: 64B, region: control, dtype: i64}}
    out: {{bytes: 64B, region: control, dtype: i64}}
  launches:
    - {{kernel: counted, grid: 2, gpus: [2], params: {{src: "@src", dst: "@dst", cnt: "@cnt", out: "@out"}}}}
    - {{kernel: counted, grid: 1, gpus: [0, 1], params: {{src: "@src", dst: "@dst", cnt: "@cnt", out: "@out"}}}}
""")
    return cfg


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    from moehub_arch.config import load_config
    from moehub_arch.simulation import Simulation
    sim = Simulation(load_config(_config(tmp_path_factory.mktemp("cw"))))
    stats = sim.run()
    return sim, {s.name: s.value for s in stats}


def test_counters_add_the_landed_bytes_and_waits_release_on_their_count(counted):
    sim, s = counted
    total = FIRST + SECOND + OTHER
    assert sim.read_buffer(2, "cnt", "i64")[0] == total            # every byte, counted once
    assert sim.read_buffer(1, "cnt", "i64")[0] == 64               # the local put
    out2 = sim.read_buffer(2, "out", "i64")
    second_issued = sim.read_buffer(0, "out", "i64")[0]
    # the early waiter is released by the first 1200 bytes, before GPU 0 even issues the rest;
    # the late one only by the last packet of the second put
    assert out2[0] < second_issued < out2[2]
    assert out2[1] == FIRST + OTHER and out2[3] == total
    # the data had landed when the counter said so
    src0, dst2 = sim.read_buffer(0, "src", "u8"), sim.read_buffer(2, "dst", "u8")
    assert np.array_equal(dst2[:FIRST + SECOND], src0[:FIRST + SECOND])
    assert np.array_equal(dst2[6000:6000 + OTHER], sim.read_buffer(1, "src", "u8")[:OTHER])
    g = "system.gpu{}.counted_write."
    assert s[g.format(0) + "puts"] == 2 and s[g.format(0) + "put_bytes"] == FIRST + SECOND
    assert s[g.format(1) + "puts"] == 2 and s[g.format(1) + "put_bytes"] == OTHER + 64
    packets = -(-FIRST // PACKET) + -(-SECOND // PACKET) + -(-OTHER // PACKET)   # 8 + 32 + 2
    assert s[g.format(2) + "counter_updates"] == packets
    assert s[g.format(2) + "counted_bytes"] == total
    assert s[g.format(1) + "counter_updates"] == 1 and s[g.format(1) + "counted_bytes"] == 64
    assert s[g.format(2) + "waits"] == 2 and s[g.format(2) + "waits_blocked"] == 2
    assert s[g.format(2) + "wait_us"] > 0
    assert g.format(0) + "wait_us" in s and s[g.format(0) + "waits"] == 0


def test_runs_without_counted_writes_have_no_counted_write_stats(tmp_path):
    from moehub_arch.config import load_config
    from moehub_arch.simulation import Simulation
    stats = Simulation(load_config(CONFIGS / "ubench" / "p2p_latency.yaml",
                                   ["system.num_gpus=2"])).run()
    assert not [x.name for x in stats if ".counted_write." in x.name]


def test_a_wait_on_a_counter_nobody_writes_is_a_stuck_run_naming_it(tmp_path):
    kernel = KERNEL.replace("wait.count [%cnt], 5296", "wait.count [%cnt+8], 5296")
    r = run_cli("run", _config(tmp_path, kernel), "-o", tmp_path / "o")
    assert r.returncode == 3, r.stderr
    assert "Traceback" not in r.stderr
    assert "wait.count on the counter at" in r.stderr and "for 5296 bytes; it holds 0" in r.stderr
    assert "a wait on a counter no one writes" in r.stderr


@pytest.mark.parametrize("counter, where", [("%src", "put.counted 2, %dst, %src, 1000"),
                                            ("%cnt+4", "wait.count [%cnt], 1200")])
def test_a_counter_outside_the_control_buffers_is_an_input_error_naming_the_line(tmp_path, counter,
                                                                                 where):
    if where.startswith("put"):
        kernel = KERNEL.replace(where + ", %cnt", where + ", " + counter)
    else:
        kernel = KERNEL.replace(where, f"wait.count [{counter}], 1200")
    cfg = _config(tmp_path, kernel)
    # the data region is unbacked in timing mode: a counter there is outside every control buffer
    r = run_cli("run", cfg, "-o", tmp_path / "o", "--set", "workload.mode=timing")
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    line = next(i for i, text in enumerate(kernel.splitlines(), 1)
                if (counter in text and ("put.counted" in text or "wait.count" in text)))
    assert f"k.s:{line}" in r.stderr and "counter" in r.stderr


def test_numba_and_python_engines_agree_on_counted_writes(tmp_path):
    out = cli_stats_per_engine(_config(tmp_path), tmp_path)
    assert out["numba"] == out["python"]


FUNCTIONAL = "experiments/functional.yaml"
COUNTED = ["scheme=counted", "workload.layer.counted.send_tbs=8"]


def test_the_counted_scheme_computes_the_layer_exactly():
    from conftest import check_layer, simulate
    sim = simulate(FUNCTIONAL, *COUNTED)
    check_layer(sim, 4, 64, 2, 1.0)
    s = {x.name: x.value for x in sim.stats}
    assert s["system.moe.output_max_abs_error"] == 0
    sent = sum(s[f"system.gpu{g}.counted_write.put_bytes"] for g in range(4))
    assert sent == sum(s[f"system.gpu{g}.counted_write.counted_bytes"] for g in range(4))
    # every row goes out twice (dispatch and combine), 2H bf16 bytes each: 4 GPUs x 64 tokens x
    # top-2 pairs; local pairs are counted puts too (to the GPU itself)
    assert sent == 2 * 4 * 64 * 2 * 2 * 64
    # receivers wait once per (local expert, source) pair, reducers once on the home's counter
    waits = sum(s[f"system.gpu{g}.counted_write.waits"] for g in range(4))
    assert waits == 4 * (2 * 4) + 4 * 8         # 4 GPUs x (El x P) + 4 GPUs x combine_tbs
    assert s["system.moe.counted.dispatch_us"] > 0 and s["system.moe.counted.combine_us"] > 0


def test_numba_and_python_engines_agree_on_the_counted_layer(tmp_path):
    out = cli_stats_per_engine(CONFIGS / FUNCTIONAL, tmp_path, *[f"--set={x}" for x in COUNTED],
                               "--set=workload.layer.tokens_per_gpu=16",
                               "--set=workload.layer.counted.kernels=communication")
    assert out["numba"] == out["python"]
    assert out["numba"]["system.moe.output_max_abs_error"] == 0


def test_the_counted_scheme_across_nodes_is_an_input_error():
    r = run_cli("run", CONFIGS / FUNCTIONAL, "--system", CONFIGS / "systems" / "tiny_2x2.yaml",
                "--set", "scheme=counted")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "counted writes are an NVLink feature" in r.stderr
