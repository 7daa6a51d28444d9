"""Property-based tests (hypothesis) over small random systems, routings and kernel parameters.

Property: every run either completes with every end-of-run invariant holding and its functional
results right (data moved, rows combined, layer output equal to the NumPy reference), or fails
with a clean error: a config/build error (exit status 2) or a stuck-run report (exit status 3) for
workloads that can legitimately starve (thread blocks that need each other but do not fit on the
SMs together). Never a crash, an invariant violation or a hang: the watchdog and a simulated-time
limit bound every run.

CI runs the `moehub-ci` profile: derandomized (the same examples every time), no example
database, no deadline, a fixed number of examples per test (FUZZ_EXAMPLES below). Set
MOEHUB_FUZZ_EXAMPLES=N to try N examples per test with fresh randomness (a longer local hunt),
and MOEHUB_FUZZ_LOG=FILE to log every example's outcome as it ends.
"""
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import event as _event
from hypothesis.errors import InvalidArgument
from hypothesis import strategies as st

from conftest import assert_rows_home, load, mini_system
from moehub_arch.engine.state import LN_RUNNING

FUZZ_EXAMPLES = {"systems": 60, "hub": 60, "layers": 40, "timing": 40}
_HUNT = int(os.environ.get("MOEHUB_FUZZ_EXAMPLES", "0"))
# no "explain" phase: re-running a failing layer hundreds of times to annotate it costs minutes
_PHASES = [Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink]
settings.register_profile("moehub-ci", derandomize=True, database=None, deadline=None,
                          print_blob=True, phases=_PHASES,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("moehub-hunt", derandomize=False, database=None, deadline=None,
                          print_blob=True, phases=_PHASES,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("moehub-hunt" if _HUNT else "moehub-ci")

# every fuzzed run is bounded: the watchdog, a simulated-time limit (generous: real model shapes
# on a few SMs legitimately take tens of ms) and a host-time limit
BOUNDS = ("run.watchdog_interval=200us", "run.max_ticks=1s", "run.max_wall=120s")


# MOEHUB_FUZZ_LOG=FILE appends one line per example (test, outcome) as it ends: a long hunt's
# counts survive it being stopped (hypothesis prints its statistics only at the end)
_LOG = os.environ.get("MOEHUB_FUZZ_LOG")


def event(text):
    """hypothesis.event inside a fuzz test (statistics); nothing in the plain regression tests."""
    if _LOG:
        with open(_LOG, "a") as f:
            f.write(f"{os.environ.get('PYTEST_CURRENT_TEST', '?').split(' ')[0]}\t{text}\n")
    try:
        _event(text)
    except InvalidArgument:
        pass


def examples(kind):
    return settings(max_examples=_HUNT or FUZZ_EXAMPLES[kind])


def outcome(config, overrides, may_starve=False):
    """Run in-process; returns the completed Simulation, or None after a clean error.
    Anything else (crash, invariant violation, runtime error, limit hit) fails the test."""
    from moehub_arch.builder import BuildError
    from moehub_arch.config import ConfigError
    from moehub_arch.simulation import InvariantError, Simulation, SimulationError
    from moehub_arch.workloads.layer import LayerError
    try:
        sim = Simulation(load(config, *overrides, *BOUNDS))
    except (ConfigError, BuildError, LayerError) as e:
        msg = str(e)
        assert "\n" not in msg and "Traceback" not in msg and ": " in msg, msg
        # a key the fuzzer itself gets wrong would turn every example into a "clean error"
        assert "unknown key" not in msg, "the fuzz test sets a key that does not exist: " + msg
        event(f"clean error while building: {type(e).__name__}")
        return None
    try:
        sim.run()
    except InvariantError:
        raise
    except SimulationError as e:
        if e.exit_code == 3 and may_starve:
            assert "Thread blocks resident" in str(e) and sim.stats is not None
            # only starvation is legitimate: a running kernel has thread blocks that never got an
            # SM slot because the resident ones wait for them. Every TB resident and still stuck
            # would be a simulator bug.
            ln = sim.state.ln
            starved = (ln.status == LN_RUNNING) & (ln.dispatched < ln.grid)
            assert starved.any(), str(e)
            event("stuck: thread blocks starve each other (exit 3, reported)")
            return None
        raise
    assert sim.stopped is None, f"hit a limit: {sim.stopped}"
    assert sim.completed and sim.violations == []
    event("completed")
    return sim


# ---------------------------------------------------------------------------------- systems
@st.composite
def small_system(draw, max_gpus=4):
    g = draw(st.integers(1, max_gpus))
    links = draw(st.integers(1, 3))
    payload = draw(st.sampled_from([64, 128, 256]))
    # sometimes smaller than one packet: must be a config error, never a wedged link
    rx_flits = draw(st.integers(payload // 16 - 1, 3 * payload // 16))
    txq, outq = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    # packet trains (run.packet_train) where they fit the buffers and queues, else exact packets
    train = min(draw(st.integers(1, 3)), txq, outq, max(1, rx_flits // (payload // 16 + 1)))
    return mini_system(num_gpus=g, num_sms=draw(st.integers(1, 3)), links=links) + [
        f"system.gpu.sm.max_resident_tbs={draw(st.integers(1, 4))}",
        f"system.nvlink.max_payload_bytes={payload}B",
        f"system.nvlink.rx_buffer_flits={rx_flits}",
        f"system.nvlink.tx_queue_packets={txq}",
        f"system.switch.output_queue_packets={outq}",
        f"system.nvlink.bandwidth={draw(st.sampled_from(['5GB/s', '25GB/s', '100GB/s']))}",
        f"system.nvlink.latency={draw(st.sampled_from(['0ns', '10ns', '500ns']))}",
        f"system.switch.traversal_latency={draw(st.sampled_from(['0ns', '250ns']))}",
        f"system.gpu.hub.request_queue_depth={draw(st.integers(1, 6))}",
        f"system.gpu.hub.max_outstanding_requests={draw(st.integers(1, 16))}",
        f"system.gpu.hbm.channels={draw(st.sampled_from([1, 4, 16]))}",
        f"system.gpu.hub.packets_per_cycle={draw(st.integers(1, 4))}",
        f"system.gpu.hub.rx_latency_cycles={draw(st.sampled_from([0, 20, 500]))}",
        f"run.packet_train={train}",
    ]


@examples("systems")
@given(sysov=small_system(), per_peer_chunks=st.integers(1, 6), chunk=st.sampled_from([8, 200, 256, 1024]),
       seed=st.integers(0, 2 ** 16))
def test_fuzz_alltoall_on_random_systems(sysov, per_peer_chunks, chunk, seed):
    """Every GPU puts a chunked block to every GPU (functional): completes, data lands exactly."""
    per_peer = per_peer_chunks * chunk
    G = int(sysov[0].split("=")[1])
    sim = outcome("ubench/alltoall.yaml", sysov + [
        "workload.mode=functional", f"run.seed={seed}",
        f"workload.buffers.send.bytes={G * per_peer}B", f"workload.buffers.recv.bytes={G * per_peer}B",
        "workload.buffers.send.init=random", "workload.buffers.send.dtype=u8",
        f"workload.launches.0.params.bytes_per_peer={per_peer}",
        f"workload.launches.0.params.chunk={chunk}"])
    if sim is None:
        return
    for dst in range(G):
        recv = sim.buffer_bytes(dst, "recv")
        for src in range(G):
            sent = sim.buffer_bytes(src, "send")[dst * per_peer:(dst + 1) * per_peer]
            assert np.array_equal(recv[src * per_peer:(src + 1) * per_peer], sent), (src, dst)


# -------------------------------------------------------------------------------- MoE-Hub
@examples("hub")
@given(sysov=small_system(), data=st.data())
def test_fuzz_moehub_dispatch_expert_combine(sysov, data):
    """dispatch -> expert (y = 2x) -> combine through RPM, AAU and DAM with random table sizes:
    completes with every row home and right, or the TBs starve each other (reported)."""
    G = int(sysov[0].split("=")[1])
    E = G * data.draw(st.sampled_from([1, 2]), "experts per GPU")
    tokens = data.draw(st.integers(1, 24), "tokens")
    topk = data.draw(st.integers(1, min(3, E)), "topk")
    row = 4 * data.draw(st.integers(1, 96), "row floats")
    tile = data.draw(st.sampled_from([1, 2, 4, 8]), "tile_rows")
    # the expert kernel logs at most 64 claims per TB: keep the tiles per expert below that
    assume(-(-tokens * topk * G // tile) < 60)
    window = tile * data.draw(st.integers(1, 6), "window tiles")
    slot = row + 4 * data.draw(st.integers(0, 8), "slot slack")
    ntb = E // G
    sim = outcome("hub/dispatch_combine.yaml", sysov + [
        f"workload.moe.num_experts={E}", f"workload.moe.window_rows={window}",
        f"workload.moe.row_bytes={slot}B",
        f"system.gpu.hub.moe.dam.tile_rows={tile}",
        f"system.gpu.hub.moe.rpm.row_queue_depth={data.draw(st.integers(1, 16), 'ring')}",
        f"system.gpu.hub.moe.rpm.merge_buffer_bytes={data.draw(st.sampled_from([16, 64, 256, 1024]), 'merge')}B",
        f"system.gpu.hub.moe.rpm.flush_timeout={data.draw(st.sampled_from(['0ns', '50ns', '1us']), 'flush')}",
        f"system.gpu.hub.moe.rpm.arbitration={data.draw(st.sampled_from(['round_robin', 'longest_first']))}",
        f"system.gpu.hub.moe.aau.record_table_entries={data.draw(st.integers(1, 40), 'records')}",
        f"system.gpu.hub.moe.rpm.row_header_bytes={data.draw(st.sampled_from([0, 8, 32]), 'header')}B",
        f"system.gpu.hub.moe.rpm.packets_per_cycle={data.draw(st.integers(1, 3), 'rpm rate')}",
        f"system.gpu.hub.moe.aau.alloc_latency_cycles={data.draw(st.sampled_from([0, 4, 100]), 'alloc')}",
        f"system.gpu.hub.moe.dam.notify_latency_cycles={data.draw(st.sampled_from([0, 4, 100]), 'notify')}",
        f"workload.buffers.x.bytes={tokens * row}B", f"workload.buffers.out.bytes={tokens * topk * row}B",
        f"workload.buffers.y.bytes={ntb * tile * slot}B", f"workload.buffers.log.bytes={ntb}KB",
        f"workload.launches.0.grid={data.draw(st.integers(1, 4), 'producers')}",
        f"workload.launches.0.params={{tokens: {tokens}, topk: {topk}, row_bytes: {row}, num_experts: {E}}}",
        f"workload.launches.1.grid={ntb}",
        f"workload.launches.1.params={{row_bytes: {row}, slot_bytes: {slot}, tile_rows: {tile}}}",
    ], may_starve=True)
    if sim is not None:
        assert_rows_home(sim, G, tokens, topk, row)


# ---------------------------------------------------------------------------------- layers
@examples("layers")
@given(data=st.data())
def test_fuzz_moe_layers(data):
    """One functional MoE layer (tiny model: H=64, I=128, 8 experts, top-2) per scheme, random
    routing and sizes: output equal to the NumPy reference and token accounting exact."""
    scheme = data.draw(st.sampled_from(["moehub", "deepep", "overlap", "megatron", "tutel"]),
                       "scheme")
    G = data.draw(st.sampled_from([1, 2, 4]), "gpus")
    kind = data.draw(st.sampled_from(["uniform", "balanced", "skewed"]), "routing")
    over = mini_system(num_gpus=G, num_sms=data.draw(st.integers(2, 8), "sms"), links=2) + [
        f"scheme={scheme}",
        f"workload.layer.tokens_per_gpu={data.draw(st.integers(1, 24), 'tokens')}",
        f"workload.layer.routing.kind={kind}",
        f"workload.layer.routing.gini={data.draw(st.sampled_from([0.0, 0.3, 0.6]), 'gini')}",
        f"run.seed={data.draw(st.integers(0, 2 ** 16), 'seed')}",
        f"system.gpu.hub.moe.dam.tile_rows={data.draw(st.sampled_from([4, 8, 16]), 'tile')}",
        f"workload.layer.gemm_n_tile={data.draw(st.sampled_from([16, 32, 64]), 'n_tile')}",
        f"system.gpu.sm.max_resident_tbs={data.draw(st.integers(2, 8), 'slots')}",
        f"workload.layer.combine_tbs={data.draw(st.integers(1, 8), 'combine_tbs')}",
        f"workload.layer.shared_tbs={data.draw(st.integers(1, 4), 'shared_tbs')}",
        f"workload.layer.moehub.dispatch_tbs={data.draw(st.integers(1, 8), 'dispatch_tbs')}",
        f"workload.layer.moehub.expert_tbs={data.draw(st.integers(1, 8), 'expert_tbs')}",
        f"workload.layer.deepep.comm_sms={data.draw(st.sampled_from([2, 4, 8]), 'comm_sms')}",
        f"workload.layer.deepep.ring_rows={data.draw(st.integers(1, 16), 'ring_rows')}",
        "workload.layer.deepep.host_sync_latency=1us",
        f"workload.layer.overlap.comm_sms={data.draw(st.sampled_from([2, 4, 8]), 'ov_comm_sms')}",
        f"workload.layer.overlap.ring_rows={data.draw(st.integers(1, 16), 'ov_ring_rows')}",
        f"workload.layer.overlap.compute_tbs={data.draw(st.integers(1, 8), 'compute_tbs')}",
        f"workload.layer.megatron.permute_tbs={data.draw(st.integers(1, 8), 'mg_tbs')}",
        "workload.layer.megatron.host_sync_latency=1us",
        f"workload.layer.megatron.a2a_chunk_bytes={data.draw(st.sampled_from([64, 1024, 65536]), 'mg_piece')}B",
        f"workload.layer.tutel.capacity_factor={data.draw(st.sampled_from([0.5, 1.0, 3.0]), 'cf')}",
        f"workload.layer.tutel.chunks={data.draw(st.integers(1, 3), 'chunks')}",
        f"workload.layer.tutel.permute_tbs={data.draw(st.integers(1, 8), 'tu_tbs')}",
    ]
    sim = outcome("experiments/functional.yaml", over, may_starve=True)
    if sim is None:
        return
    s = sim.stats
    # tutel may drop pairs beyond capacity: its output must equal the reference without them
    err = s["system.moe.output_max_abs_error_kept" if scheme == "tutel" else
            "system.moe.output_max_abs_error"]
    assert err <= 1e-6 * max(s["system.moe.output_max_abs_reference"], 1.0)


# ------------------------------------------------------------ what the fuzzer found (regressions)
def test_found_small_merge_buffer_no_longer_wedges_the_links():
    """16-byte merge buffers cut rows into more packets than the AAU staging store was sized for
    (builder.aau_staging_packets used the link payload); packets beyond it kept their link
    credits, the expert's send_home puts could not reach the GPU, and both GPUs deadlocked."""
    row, tokens = 20, 4
    sim = outcome("hub/dispatch_combine.yaml", mini_system(num_gpus=2, num_sms=1, links=1) + [
        "system.nvlink.max_payload_bytes=64B", "system.nvlink.rx_buffer_flits=5",
        "system.nvlink.tx_queue_packets=1", "system.switch.output_queue_packets=1",
        "system.gpu.hub.request_queue_depth=1", "system.gpu.hub.max_outstanding_requests=1",
        "workload.moe.num_experts=2", "workload.moe.window_rows=1", f"workload.moe.row_bytes={row}B",
        "system.gpu.hub.moe.dam.tile_rows=1", "system.gpu.hub.moe.rpm.row_queue_depth=1",
        "system.gpu.hub.moe.rpm.merge_buffer_bytes=16B", "system.gpu.hub.moe.rpm.flush_timeout=0ns",
        "system.gpu.hub.moe.aau.record_table_entries=1",
        f"workload.buffers.x.bytes={tokens * row}B", f"workload.buffers.out.bytes={tokens * row}B",
        f"workload.buffers.y.bytes={row}B", "workload.buffers.log.bytes=1KB",
        "workload.launches.0.grid=1",
        f"workload.launches.0.params={{tokens: {tokens}, topk: 1, row_bytes: {row}, num_experts: 2}}",
        "workload.launches.1.grid=1",
        f"workload.launches.1.params={{row_bytes: {row}, slot_bytes: {row}, tile_rows: 1}}"])
    assert sim is not None
    assert sum(sim.stats[f"system.gpu{g}.hub.aau.alloc_stalls"] for g in range(2)) > 0


def test_found_moehub_layer_with_few_workers_computes_every_tile():
    """moe_layer.s: a worker that drew a gate/up job of the end-of-queue mark left the kernel,
    although the down jobs of the last real tile (same job block) were still to be taken; with
    fewer workers than gate/up jobs per tile the last tile was never finished (rows computed
    1 of 2: a token-accounting violation)."""
    sim = outcome("experiments/functional.yaml", mini_system(num_gpus=1, num_sms=2, links=2) + [
        "workload.layer.tokens_per_gpu=1", "system.gpu.hub.moe.dam.tile_rows=4",
        "workload.layer.gemm_n_tile=16", "system.gpu.sm.max_resident_tbs=2",
        "workload.layer.combine_tbs=1", "workload.layer.shared_tbs=1",
        "workload.layer.moehub.dispatch_tbs=1", "workload.layer.moehub.expert_tbs=1"])
    assert sim is not None and sim.stats["system.moe.rows_computed"] == 2
    assert sim.stats["system.moe.output_max_abs_error"] <= 1e-6 * sim.stats["system.moe.output_max_abs_reference"]


@examples("timing")
@given(data=st.data())
def test_fuzz_real_model_layers_in_timing_mode(data):
    """Real model shapes (timing mode: addresses only) on small systems, few tokens, every routing
    kind the model supports: the token accounting and every other invariant hold."""
    model = data.draw(st.sampled_from(["mixtral_8x7b", "qwen3_30b_a3b", "deepseek_v2",
                                       "deepseek_v3", "gpt_oss_120b", "dbrx"]), "model")
    scheme = data.draw(st.sampled_from(["moehub", "deepep"]), "scheme")
    G = data.draw(st.sampled_from([1, 2, 4, 8]), "gpus")
    kind = data.draw(st.sampled_from(["uniform", "balanced", "skewed", "group_limited"]), "routing")
    n_tile = data.draw(st.sampled_from([128, 256, 512]), "n_tile")
    over = mini_system(num_gpus=G, num_sms=data.draw(st.integers(4, 16), "sms"), links=2) + [
        f"scheme={scheme}", "workload.mode=timing", f"workload.layer.model={model}",
        f"workload.layer.tokens_per_gpu={data.draw(st.integers(1, 16), 'tokens')}",
        f"workload.layer.routing.kind={kind}", f"run.seed={data.draw(st.integers(0, 2 ** 16), 'seed')}",
        f"system.gpu.hub.moe.dam.tile_rows={data.draw(st.sampled_from([8, 16, 64]), 'tile')}",
        f"workload.layer.gemm_n_tile={n_tile}",
        f"workload.layer.moehub.dispatch_tbs={data.draw(st.integers(1, 8), 'dispatch_tbs')}",
        f"workload.layer.moehub.expert_tbs={data.draw(st.integers(1, 16), 'expert_tbs')}",
        f"workload.layer.deepep.comm_sms={data.draw(st.sampled_from([2, 4, 8]), 'comm_sms')}",
        f"workload.layer.deepep.ring_rows={data.draw(st.integers(1, 16), 'ring_rows')}",
        "workload.layer.deepep.host_sync_latency=1us",
    ]
    sim = outcome("experiments/functional.yaml", over, may_starve=True)
    if sim is not None:
        pairs = G * sim.layer.shape.tokens * sim.layer.shape.top_k
        assert [sim.stats[f"system.moe.rows_{n}"] for n in ("sent", "received", "computed",
                                                            "combined")] == [pairs] * 4


def test_found_rows_get_window_slots_in_stream_order():
    """With 1-row windows and a 2-entry record table, a packet parked for a slot was overtaken by
    the next packet of its stream, whose row took the slot and the record the parked row needed,
    while it could never complete itself (its first bytes were in the parked packet): both GPUs
    deadlocked with every thread block resident. The AAU now allocates each stream's rows in
    stream order and retries parked packets when rows get their slots."""
    row, tokens, topk = 36, 3, 3
    sim = outcome("hub/dispatch_combine.yaml", mini_system(num_gpus=2, num_sms=1, links=1) + [
        "system.gpu.sm.max_resident_tbs=3", "system.nvlink.max_payload_bytes=64B",
        "system.nvlink.rx_buffer_flits=5", "system.nvlink.tx_queue_packets=1",
        "system.switch.output_queue_packets=1", "system.gpu.hub.request_queue_depth=1",
        "system.gpu.hub.max_outstanding_requests=1", "system.gpu.hub.rx_latency_cycles=0",
        "workload.moe.num_experts=4", "workload.moe.window_rows=1", f"workload.moe.row_bytes={row}B",
        "system.gpu.hub.moe.dam.tile_rows=1", "system.gpu.hub.moe.rpm.row_queue_depth=4",
        "system.gpu.hub.moe.rpm.merge_buffer_bytes=64B", "system.gpu.hub.moe.rpm.flush_timeout=0ns",
        "system.gpu.hub.moe.rpm.row_header_bytes=0B", "system.gpu.hub.moe.aau.record_table_entries=2",
        "system.gpu.hub.moe.aau.alloc_latency_cycles=0", "system.gpu.hub.moe.dam.notify_latency_cycles=0",
        "system.nvlink.bandwidth=5GB/s", "system.nvlink.latency=0ns", "system.switch.traversal_latency=0ns",
        "system.gpu.hbm.channels=1", "system.gpu.hub.packets_per_cycle=1",
        "system.gpu.hub.moe.rpm.packets_per_cycle=1",
        f"workload.buffers.x.bytes={tokens * row}B", f"workload.buffers.out.bytes={tokens * topk * row}B",
        f"workload.buffers.y.bytes={2 * row}B", "workload.buffers.log.bytes=2KB",
        "workload.launches.0.grid=1",
        f"workload.launches.0.params={{tokens: {tokens}, topk: {topk}, row_bytes: {row}, num_experts: 4}}",
        "workload.launches.1.grid=2",
        f"workload.launches.1.params={{row_bytes: {row}, slot_bytes: {row}, tile_rows: 1}}"])
    assert sim is not None
    assert_rows_home(sim, 2, tokens, topk, row)
