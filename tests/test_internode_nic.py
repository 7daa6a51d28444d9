"""The NIC's IBGDA pull and wait accounting (components/nic.py: nic_dma_start, nic_admit), the
inter-node validation figures and the settings of DeepEP's published measurements
(docs/internode_validation.md), on configs/systems/tiny_2x2.yaml: 2 nodes x 2 HGX H800 GPUs, one
ConnectX-7 per GPU on PCIe 5.0, NDR.

The expected numbers are worked out by hand from the configuration (doorbell 1 us, PCIe 125 ns,
HBM 700 cycles at the H800's SM clock), not from the engine's formulas.
"""
import sys

import numpy as np
import pytest

from conftest import CONFIGS, REPO, cli_stats_per_engine, read_stats_json, run_cli
from internode_setup import (TINY, alltoall_on_tiny, hub_put_sends, puts_on_tiny,
                             simulate_on_tiny, tiny_state)


def test_dma_lead_is_the_doorbell_less_the_completion_path():
    """nic_dma_lead = doorbell_latency - PCIe one-way latency - the HBM read the hub charges:
    1 us - 125 ns - 700 cycles at the H800's SM clock."""
    cfg, st = tiny_state()
    hbm_ps = round(700 * 1e12 / cfg.system.gpu.sm_clock)
    assert cfg.system.nic.doorbell_latency == 1_000_000
    assert cfg.system.pcie.latency == 125_000
    assert st.p[0].nic_dma_lead == 1_000_000 - 125_000 - hbm_ps
    assert 400_000 < st.p[0].nic_dma_lead < 500_000


def test_gpu_pcie_queue_is_the_nics_read_ahead():
    """A GPU's PCIe link queues system.nic.dma_read_ahead of hub packets (384 KB / 128 B = 3072:
    the NIC's outstanding DMA reads), its NVLink ports tx_queue_packets (128), the forwarding
    nodes' outputs output_queue_packets; a fabric without the number is a config error."""
    from moehub_arch.topology import LINK_NVLINK, LINK_PCIE
    cfg, st = tiny_state()
    ch = st.ch
    assert cfg.system.nic.dma_read_ahead == 384 * 1024
    gpu_pcie = (ch.src_switch < 0) & (ch.link_class == LINK_PCIE)
    gpu_nvl = (ch.src_switch < 0) & (ch.link_class == LINK_NVLINK)
    assert gpu_pcie.sum() == 4 and gpu_nvl.sum() > 0
    assert (ch.txq_cap[gpu_pcie] == 3072).all()
    assert (ch.txq_cap[gpu_nvl] == cfg.system.nvlink.tx_queue_packets).all()
    assert (ch.txq_cap[ch.src_switch >= 0] == cfg.system.switch.output_queue_packets).all()


def test_missing_read_ahead_exits_2(tmp_path):
    r = run_cli("run", "configs/ubench/alltoall.yaml", "--system", "configs/systems/tiny_2x2.yaml",
                "-o", tmp_path / "out", "--quiet", "--set", "system.nic.dma_read_ahead=0")
    assert r.returncode == 2, r.stderr
    assert "system.nic.dma_read_ahead" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("work_requests", ["send_queue", "hub_fifo"])
def test_rdma_payload_is_pulled_after_the_doorbell(tmp_path, work_requests):
    """Every GPU puts 8 KB to each peer (alltoall): the two RDMA writes (to the other node's
    GPUs) leave the hub no earlier than nic_dma_lead after the first put was issued, so their
    first packets reach the NIC after the doorbell round trips: no packet waits in the NIC for
    its doorbell, no work request waits for the message rate (2 work requests 3 ns apart at
    330 M/s, the second a whole IB packet later), and the NVLink put is not held. With the
    QPs' send queues (send_queue) the two RDMA writes never enter the hub's FIFO, so the
    NVLink put has nothing to overtake; in the hub's FIFO (hub_fifo) it overtakes them."""
    cfg = alltoall_on_tiny(tmp_path, 8192, 8192)
    r = run_cli("run", cfg, "-o", tmp_path / "out", "--quiet", "--debug-flags", "Hub",
                "--debug-file", tmp_path / "dbg.txt", "--set",
                f"system.nic.work_requests={work_requests}")
    assert r.returncode == 0, r.stderr
    st = read_stats_json(tmp_path / "out")
    _, state = tiny_state()
    lead = int(state.p[0].nic_dma_lead)
    for g in range(4):
        assert st[f"system.nic{g}.work_requests"] == 2
        assert st[f"system.nic{g}.doorbell_wait_ticks"] == 0
        assert st[f"system.nic{g}.wr_wait_ticks"] == 0
        assert st[f"system.nic{g}.ib.tx_payload_bytes"] == 2 * 8192
    sends = hub_put_sends(tmp_path / "dbg.txt", 0)
    assert sends, "no hub debug lines"
    first = sends[0][0]
    assert sends[0][1] == 1                      # the node peer's NVLink put goes at once
    rdma = [t for t, d in sends if d in (2, 3)]
    assert len(rdma) == 2 * 64                   # 8 KB in 128 B hub packets, twice
    assert min(rdma) >= first + lead
    # GPU 1's thread blocks put to GPUs 2, 3 (the other node: RDMA) and 0 (its node peer) in
    # that order; the NVLink put goes ahead of the two RDMA writes held for their doorbells,
    # all its 64 packets before the first RDMA packet
    sends1 = hub_put_sends(tmp_path / "dbg.txt", 1)
    assert [d for _, d in sends1[:64]] == [0] * 64
    if work_requests == "hub_fifo":
        assert st["system.gpu1.rdma_send.nvlink_overtakes"] >= 1
    else:
        assert st["system.gpu1.rdma_send.nvlink_overtakes"] == 0
        for g in range(4):
            assert st[f"system.gpu{g}.rdma_send.work_requests_posted"] == 2
            assert st[f"system.gpu{g}.rdma_send.qp_slots_peak"] == 1   # a QP per peer
            assert st[f"system.gpu{g}.rdma_send.send_queue_full_stalls"] == 0


def test_validation_settings_of_the_published_measurements():
    """The low-latency figures run where DeepEP measured them (EP 8: one 8-GPU node, EP 16: two),
    the published figures keep their names, stats and runs, and the new inter-node figures are
    the model's predictions (kind: model)."""
    sys.path.insert(0, str(REPO / "tools"))
    import validate
    from moehub_arch.config import load_config
    figs = {f.name: f for f in validate.load_figures(validate.FIGURES_FILE)}
    for ep, gpus in (("ep8", 8), ("ep16", 16)):
        for what in ("dispatch", "combine"):
            f = figs[f"h800.deepep_ll_{ep}_{what}_us"]
            assert f.stat == f"system.moe.deepep_ll.{what}_us" and f.kind == "measurement"
            cfg = load_config(f.config, list(f.overrides))
            assert cfg.system.num_gpus == gpus and cfg.system.nodes.gpus_per_node == 8
    for ep, nodes in (("ep16", 2), ("ep32", 4)):
        for what in ("dispatch", "combine"):
            for tag, tokens in (("", 4096), ("_t512", 512)):
                f = figs[f"h800.deepep_internode_{ep}{tag}_{what}_GBps"]
                assert f.stat == f"system.moe.deepep.{what}_rdma_GBps"
                assert f.kind == ("model" if tag else "measurement")
                cfg = load_config(f.config, list(f.overrides))
                assert cfg.system.nodes.count == nodes
                assert cfg.workload.layer.tokens_per_gpu == tokens
    for name in ("h800.rdma_write_bandwidth_GBps", "h800.pcie_put_GBps",
                 "h800.rdma_write_latency_us"):
        assert figs[name].kind == "model"
        cfg = load_config(figs[name].config, list(figs[name].overrides))
        assert cfg.system.nodes.count == 2 and cfg.system.num_gpus == 16


@pytest.mark.parametrize("config", ["h800_rdma_write.yaml", "h800_rdma_latency.yaml"])
def test_rdma_ubench_targets_the_other_node_on_one_rail(config):
    """The inter-node microbenchmarks talk from GPU 0 to GPU 8: the other node, the same local
    rank (one rail, no spine)."""
    from moehub_arch.config import load_config
    cfg = load_config(CONFIGS / "validation" / config, [])
    launch = cfg.workload.launches[0]
    assert sorted(launch.gpus) == ([0] if "write" in config else [0, 8])
    peer = dict(launch.params)["peer"]
    assert (peer == 8) if isinstance(peer, int) else (peer == "8 - gpu")


def _streams(layer, nodes, L, channels):
    """k[g, c, n]: the tokens of GPU g's channel c with an expert on node n (the length of the
    stream from g to node n on channel c: the dispatch's RDMA sender sends them, node n's
    forwarder (n, g % L) returns one combined row of each)."""
    P = nodes * L
    node_of = np.arange(layer.shape.experts) // (layer.shape.local_experts * L)
    topk = np.asarray(layer.routing.topk_idx).reshape(P, -1, layer.shape.top_k)
    T = topk.shape[1]
    Tc = -(-T // channels)
    k = np.zeros((P, channels, nodes), dtype=int)
    for g in range(P):
        for n in range(nodes):
            has = (node_of[topk[g]] == n).any(axis=1)
            for c in range(channels):
                k[g, c, n] = int(has[c * Tc:(c + 1) * Tc].sum())
    return k


def _chunks(k, K):
    return -(-k // K)


META = 128    # internode.s: a token's metadata row, its second RDMA write in the dispatch


def _row_bytes(sim, g):
    """The RDMA writes' payload at GPU g's NIC: its payload less the 8-byte flags (every work
    request that is not a write)."""
    st = sim.stats
    flags = st[f"system.nic{g}.work_requests"] - st[f"system.nic{g}.rdma_writes"]
    return st[f"system.nic{g}.rdma_payload_bytes"] - 8 * flags


def _chunk_4_saves_writes(tokens, ring, min_k, nodes=2, channels=1):
    """DeepEP's internode layer on `nodes` x 2 with `channels` channels, `tokens` per GPU and an
    RDMA ring of `ring` slots, at chunk 1 and chunk 4. GPU g's dispatch sends the k tokens of
    its stream (c, n) to another node in whole chunks of two writes (a chunk's rows and its
    metadata rows); GPU g's combine forwarder returns the k' tokens of stream (c, n0) of each
    origin (m, g % L) of another node in whole chunks of one write (DeepEP's forwarder: one
    RDMA write per num_max_rdma_chunked_send_tokens). So chunk 4 saves exactly
    2 x (k - ceil(k / 4)) + (k' - ceil(k' / 4)) RDMA writes at g's NIC, summed over the streams;
    nothing else the layer sends depends on the chunk, and the payload bytes are the same (the
    same rows in fewer writes). Both layers are exact."""
    L = 2
    P = nodes * L
    base = ("experiments/functional.yaml", "scheme=deepep", f"system.nodes.count={nodes}",
            f"workload.layer.tokens_per_gpu={tokens}",
            "workload.layer.deepep.kernels=communication",
            f"workload.layer.deepep.comm_sms={2 * channels}",
            f"workload.layer.deepep.rdma_ring_rows={ring}")
    runs = {c: simulate_on_tiny(*base, f"workload.layer.deepep.rdma_send_chunk_tokens={c}")
            for c in (1, 4)}
    k = _streams(runs[1].layer, nodes, L, channels)
    rb = runs[1].layer.shape.row_bytes
    notify = set()
    for g in range(P):
        n0, l0 = divmod(g, L)
        others = [n for n in range(nodes) if n != n0]
        sent = sum(int(k[g, c, n]) for c in range(channels) for n in others)
        assert sent > min_k, (g, sent)
        dispatch = sum(2 * int(k[g, c, n] - _chunks(k[g, c, n], 4))
                       for c in range(channels) for n in others)
        combine = sum(int(k[m * L + l0, c, n0] - _chunks(k[m * L + l0, c, n0], 4))
                      for c in range(channels) for m in others)
        w1 = runs[1].stats[f"system.nic{g}.rdma_writes"]
        w4 = runs[4].stats[f"system.nic{g}.rdma_writes"]
        assert w1 - w4 == dispatch + combine, (g, w1, w4, dispatch, combine)
        rows = sum(int(k[g, c, n]) for c in range(channels) for n in others) * (rb + META) + sum(
            int(k[m * L + l0, c, n0]) for c in range(channels) for m in others) * rb
        assert _row_bytes(runs[1], g) == _row_bytes(runs[4], g), g
        # the rest is the notify's counts, the same size from every GPU
        notify.add(_row_bytes(runs[4], g) - rows)
    assert len(notify) == 1 and 0 < notify.pop() < rb, notify
    for sim in runs.values():
        assert sim.stats["system.moe.output_max_abs_error"] == 0.0
    return runs, k


def test_deepep_internode_sends_one_rdma_write_per_chunk():
    """DeepEP's RDMA sender stages a chunk of token records and its coordinator puts the chunk
    as one RDMA write (internode.cu at 3b1045d: nvshmemi_ibgda_put_nbi_thread of
    num_bytes_per_rdma_token x tokens); ours writes a chunk's rows and its metadata rows as one
    write each (internode.s, rdma_chunk_put). On 2 x 2 with one channel (comm_sms 2) and 16
    tokens per GPU, GPU g sends the k tokens with an expert on the other node in ceil(k / chunk)
    chunks: chunk 1 against chunk 4 saves 2 x (k - ceil(k / 4)) RDMA writes at g's NIC, and
    its combine forwarder (which writes a chunk too: test_deepep_internode_combine_chunk_writes)
    k' - ceil(k' / 4) more. Both layers are exact."""
    _chunk_4_saves_writes(tokens=16, ring=32, min_k=0)


@pytest.mark.parametrize("shape", ["block", "stream"])
def test_deepep_internode_combine_chunk_writes(shape):
    """DeepEP's combine forwarder stages its node rows at their positions in the stream home
    and posts one RDMA write per chunk of num_max_rdma_chunked_send_tokens (internode.cu
    `combine` at 3b1045d: nvshmemi_ibgda_put_nbi_thread of num_chunked_tokens records by the
    last sub-warp after the W warps' barrier); the home reads each row at the position the
    dispatch gave it (combined_rdma_head). On 4 nodes x 2 GPUs with two channels and 24 tokens
    per GPU, in both shapes: chunk 1 against chunk 4 saves exactly the dispatch's and the
    combine's chunk formula at every NIC, the payload bytes are the same, and both layers are
    exact against NumPy. With chunk 4, the combine's writes at GPU g's NIC are counted apart: the
    run's RDMA writes less the dispatch's (2 per chunk of its streams to other nodes) and the
    flags are the combine's ceil(k' / 4) per stream from another node."""
    nodes, L, C = 4, 2, 2
    base = ("experiments/functional.yaml", "scheme=deepep", f"system.nodes.count={nodes}",
            "workload.layer.tokens_per_gpu=24", "workload.layer.deepep.kernels=communication",
            f"workload.layer.deepep.comm_sms={2 * C}", "workload.layer.deepep.rdma_ring_rows=32",
            f"workload.layer.deepep.combine_forwarders={shape}")
    runs = {K: simulate_on_tiny(*base, f"workload.layer.deepep.rdma_send_chunk_tokens={K}")
            for K in (1, 4, 16)}
    k = _streams(runs[1].layer, nodes, L, C)
    for g in range(nodes * L):
        n0, l0 = divmod(g, L)
        others = [n for n in range(nodes) if n != n0]
        combine = {K: sum(int(_chunks(k[m * L + l0, c, n0], K)) for c in range(C) for m in others)
                   for K in runs}
        dispatch = {K: sum(2 * int(_chunks(k[g, c, n], K)) for c in range(C) for n in others)
                    for K in runs}
        w = {K: runs[K].stats[f"system.nic{g}.rdma_writes"] for K in runs}
        # what neither chunk moves (flags, notify) is the same in every run
        assert (w[1] - dispatch[1] - combine[1] == w[4] - dispatch[4] - combine[4]
                == w[16] - dispatch[16] - combine[16]), (g, w, dispatch, combine)
        assert combine[1] > combine[4] > combine[16] > 0, (g, combine)
        assert len({_row_bytes(runs[K], g) for K in runs}) == 1
    for sim in runs.values():
        assert sim.stats["system.moe.output_max_abs_error"] == 0.0


def test_deepep_internode_combine_chunk_engines_identical(tmp_path):
    """The combine's chunk writes (a barrier per chunk, a write posted by the last warp group to
    arrive) on both engines: DeepEP's internode layer on 2 x 2, block shape, chunk 4 - identical
    stats."""
    sets = ["scheme=deepep", "workload.layer.tokens_per_gpu=8"] + [
        f"workload.layer.deepep.{key}" for key in (
            "kernels=communication", "comm_sms=2", "rdma_ring_rows=8", "rdma_send_chunk_tokens=4")]
    out = cli_stats_per_engine(CONFIGS / "experiments/functional.yaml", tmp_path,
                               "--system", CONFIGS / TINY,
                               *[arg for kv in sets for arg in ("--set", kv)])
    assert out["numba"] == out["python"]
    assert out["numba"]["system.moe.output_max_abs_error"] == 0.0
    assert out["numba"]["system.nic0.rdma_writes"] > 0


@pytest.mark.parametrize("value", ["0", "four"])
def test_bad_rdma_chunk_exits_2(tmp_path, value):
    r = run_cli("run", "configs/experiments/functional.yaml", "--system",
                "configs/systems/tiny_2x2.yaml", "-o", tmp_path / "out", "--quiet", "--set",
                "scheme=deepep", "--set", f"workload.layer.deepep.rdma_send_chunk_tokens={value}")
    assert r.returncode == 2, r.stderr
    assert "rdma_send_chunk_tokens" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("queue_pairs, interleaved", [("per_peer", 0), ("per_block", 2)])
def test_queue_pair_per_block(tmp_path, queue_pairs, interleaved):
    """Two thread blocks of GPU 0 each put one 8 KB message (2 IB packets of the 4096 B MTU) to
    GPU 2 on the other node. With one queue pair per destination GPU (per_peer) the two messages
    are one QP's, sent whole in issue order; with a QP per (block, peer) (per_block: DeepEP's
    normal kernels, a QP per channel and peer) the send scheduler takes the two QPs in turn, one
    IB packet each: A1 B1 A2 B2, turning away from an unfinished message twice. The wire bytes
    do not depend on it (two messages: 2 x (8192 + 2 x 42) B, no acknowledgement sent by GPU 0)."""
    cfg = puts_on_tiny(tmp_path, peer=2, blocks=2, chunk=8192)
    r = run_cli("run", cfg, "-o", tmp_path / "out", "--quiet", "--set",
                f"system.nic.queue_pairs={queue_pairs}")
    assert r.returncode == 0, r.stderr
    st = read_stats_json(tmp_path / "out")
    assert st["system.gpu0.rdma_send.interleaved_messages"] == interleaved
    assert st["system.gpu0.rdma_send.messages_peak"] == 2
    assert st["system.nic0.rdma_writes"] == 2
    assert st["system.nic0.ib.tx_wire_bytes"] == 2 * (8192 + 2 * 42)
    assert st["system.gpu2.hub.rx_payload_bytes"] == 2 * 8192


def test_unknown_queue_pairs_exits_2(tmp_path):
    r = run_cli("run", "configs/ubench/alltoall.yaml", "--system", "configs/systems/tiny_2x2.yaml",
                "-o", tmp_path / "out", "--quiet", "--set", "system.nic.queue_pairs=per_channel")
    assert r.returncode == 2, r.stderr
    assert "system.nic.queue_pairs" in r.stderr and "per_block" in r.stderr
    assert "Traceback" not in r.stderr


PUT_THEN_FLAG_S = """.kernel put_then_flag
.param peer
.param dst
.param src
.param bytes
.param flag
.param fenced            # 1: fence between the write and the flag (the round trip), 0: none
    put %peer, %dst, %src, %bytes
    beq %fenced, 0, publish
    fence
publish:
    flag.set %peer, [%flag], 1
    exit

.kernel wait_flag
.param flag
    wait.ge [%flag], 1
    exit
"""

PUT_THEN_FLAG = """extends: [{configs}/ubench/p2p_bandwidth.yaml, {configs}/{tiny}]
workload:
  kernel_files: [{kernels}]
  buffers:
    src: {{bytes: 64KB, region: data}}
    dst: {{bytes: 64KB, region: data}}
    flag: {{bytes: 8B, region: control}}
  launches:
    - kernel: put_then_flag
      grid: 1
      gpus: [0]
      params: {{peer: 2, dst: "@dst", src: "@src", bytes: 65536, flag: "@flag", fenced: {fenced}}}
    - kernel: wait_flag
      grid: 1
      gpus: [2]
      stream: 1
      params: {{flag: "@flag"}}
  report:
    p2p_bandwidth_GBps:
      expr: "stat('system.gpu2.hub.rx_payload_bytes')"
    p2p_kernel_bandwidth_GBps:
      expr: "stat('system.gpu2.hub.rx_payload_bytes')"
"""


def _put_then_flag(tmp_path, fenced):
    kernels = tmp_path / "put_then_flag.s"
    kernels.write_text(PUT_THEN_FLAG_S)
    cfg = tmp_path / f"put_then_flag_{fenced}.yaml"
    cfg.write_text(PUT_THEN_FLAG.format(configs=CONFIGS, tiny=TINY, kernels=kernels,
                                        fenced=fenced))
    out = tmp_path / f"out{fenced}"
    r = run_cli("run", cfg, "-o", out, "--quiet")
    assert r.returncode == 0, r.stderr
    return read_stats_json(out)


def test_flag_behind_a_write_on_its_queue_pair_needs_no_fence(tmp_path):
    """In-order execution on a reliable-connected queue pair (nic.py: nic_in_order): GPU 0 puts
    64 KB to GPU 2 on the other node and then sets a flag there on the same QP, once without a
    fence (as DeepEP posts its tail atomic behind a chunk's write) and once with one. The 64 KB
    arrive as 512 hub packets and the flag as one more, in order, in both runs, at the same ticks
    (the fence only delays the flag). Without the fence the flag reaches GPU 2 right behind the
    last payload packet and would become visible before it (an 8 B write against a 128 B one):
    the in-order execution holds it until the payload is visible - one held operation, held a
    positive time - and GPU 2's waiter still wakes a whole completion round trip earlier than
    with the fence. With the fence the flag is issued after the write's completion came back,
    so nothing is left to order it behind."""
    free, fenced = _put_then_flag(tmp_path, 0), _put_then_flag(tmp_path, 1)
    for st in (free, fenced):
        assert st["system.gpu2.hub.rx_packets"] == 512 + 1
        assert st["system.gpu2.hub.rx_payload_bytes"] == 65536 + 8
        assert st["system.nic0.work_requests"] == 2 and st["system.nic0.rdma_writes"] == 1
        assert st["system.gpu2.rdma_recv.ordered_ops"] == 1
    for k in ("system.gpu2.hub.rx_first_tick", "system.gpu2.hub.rx_last_tick"):
        assert free[k] == fenced[k]
    assert free["system.gpu2.rdma_recv.order_delayed_ops"] == 1
    assert free["system.gpu2.rdma_recv.order_wait_ticks"] > 0
    assert fenced["system.gpu2.rdma_recv.order_delayed_ops"] == 0
    assert fenced["system.gpu2.rdma_recv.order_wait_ticks"] == 0
    # the waiter wakes when the flag is visible: behind the payload's last packet, and before
    # the fenced flag, which left only after the write's acknowledgement came back over IB
    assert free["system.gpu2.launch1.end_tick"] > free["system.gpu2.hub.rx_last_tick"]
    assert free["system.gpu2.launch1.end_tick"] < fenced["system.gpu2.launch1.end_tick"]


def test_deepep_internode_ring_wraps_in_whole_chunks():
    """When the RDMA ring fills (DeepEP's published setting at 4096 tokens: 128 slots per
    channel and source node, 341 tokens per channel), DeepEP's sender still writes whole chunks:
    its forwarder coordinator returns the head only once a chunk's worth is consumed and the
    sender re-reads it (internode.cu at 3b1045d), so room comes back a chunk at a time. Ours now
    does too (internode.s: each forwarder's head back every chunk, the sender taking all the room
    the forwarders freed); before, it freed one slot per wait and sent one-token chunks (GPU 0
    saved 12 writes here, not 76). On 2 x 2 with one channel, 64
    tokens per GPU and an 8-slot ring (it wraps about seven times), chunk 4 against chunk 1
    saves exactly 2 x (k - ceil(k / 4)) RDMA writes at each GPU's NIC - every chunk whole - and
    both layers are exact."""
    _chunk_4_saves_writes(tokens=64, ring=8, min_k=3 * 8)


def test_deepep_internode_tail_follows_the_chunk_without_a_fence():
    """DeepEP's RDMA coordinator adds to the destination's tail right behind the chunk's write on
    the channel's QP (internode.cu at 3b1045d: nvshmemi_ibgda_amo_nonfetch_add after
    nvshmemi_ibgda_put_nbi_thread, no fence bit; a memory fence only for its own node); ours
    sets the tail flag behind the chunk's two writes without a fence (internode.s,
    rdma_chunk_publish). On 2 x 2 with one channel, chunk 4 and 16 tokens per GPU, every tail
    update and the CLOSED flag that crosses to the other node is an ordered RDMA store at its
    destination (one per chunk plus the close, and the head updates the forwarders send back),
    and the layer stays exact: no forwarder read a row before it landed."""
    sim = simulate_on_tiny("experiments/functional.yaml", "scheme=deepep",
                           "workload.layer.tokens_per_gpu=16",
                           "workload.layer.deepep.kernels=communication",
                           "workload.layer.deepep.comm_sms=2",
                           "workload.layer.deepep.rdma_ring_rows=32",
                           "workload.layer.deepep.rdma_send_chunk_tokens=4")
    assert sim.stats["system.moe.output_max_abs_error"] == 0.0
    for g in range(4):
        assert sim.stats[f"system.gpu{g}.rdma_recv.ordered_ops"] > 0


def test_deepep_internode_stages_each_destination_node_apart():
    """With more than two nodes a GPU's RDMA senders to different nodes stage their chunks at
    the same slot numbers (the slots they take in the destination's ring (c, n0)); DeepEP keeps
    a send buffer per destination node (rdma_channel_data.send_buffer(dst_rdma_rank)), and so
    does internode.s (staging bases shifted to node n's part). Shared staging slots let one
    sender overwrite another's rows and metadata while its write was in flight: a forwarder
    read another node's metadata and the layer deadlocked (Qwen3-30B-A3B at EP 32 with the
    fence before the tail, as on main at b565949; this 4 x 2 layer without it). On 4 nodes x 2
    GPUs, one channel, chunk 4: exact."""
    sim = simulate_on_tiny("experiments/functional.yaml", "scheme=deepep",
                           "system.nodes.count=4", "workload.layer.tokens_per_gpu=16",
                           "workload.layer.deepep.kernels=communication",
                           "workload.layer.deepep.comm_sms=2",
                           "workload.layer.deepep.rdma_ring_rows=32",
                           "workload.layer.deepep.rdma_send_chunk_tokens=4")
    assert sim.stats["system.moe.output_max_abs_error"] == 0.0
    assert sum(sim.stats[f"system.nic{g}.rdma_writes"] for g in range(8)) > 0


def test_deepep_internode_combine_forwarder_warps():
    """DeepEP's internode combine gives each (channel, destination node) forwarder
    kNumWarpsPerForwarder = max(16 / nodes, 1) warps (internode.cu at 3b1045d: 16 forwarder warps
    per channel, kNumCombineForwarderWarps, split over the RDMA ranks), sub-warp w combining
    tokens w, w + W, ... of each chunk; ours launches as many forwarder warp groups
    (deepep_combine_internode, combine_forwarders: stream: C*P NVL senders, then
    C*N*W forwarders, a thread block each). On 2 x 2 (W = 8) and 4 x 2 (W = 4) with one channel
    the combine has C*P + C*N*W thread blocks on every GPU and the layer is exact: the W groups
    of a forwarder share out its tokens, none lost."""
    from moehub_arch.workloads.schemes.deepep import combine_forwarder_warps
    assert [combine_forwarder_warps(n) for n in (1, 2, 3, 4, 8, 16, 32)] == [16, 8, 5, 4, 2, 1, 1]
    for nodes, W in ((2, 8), (4, 4)):
        sim = simulate_on_tiny("experiments/functional.yaml", "scheme=deepep",
                               f"system.nodes.count={nodes}", "workload.layer.tokens_per_gpu=16",
                               "workload.layer.deepep.kernels=communication",
                               "workload.layer.deepep.comm_sms=2",
                               "workload.layer.deepep.combine_forwarders=stream")
        assert sim.stats["system.moe.output_max_abs_error"] == 0.0
        P = 2 * nodes
        assert _combine_tbs(sim) == [P + nodes * W] * P, nodes


def _combine_tbs(sim):
    return [sim.stats[f"system.gpu{li.gpu}.launch{li.index}.tbs"] for li in sim.launches
            if li.kernel == "deepep_combine_internode"]


def _rdma_totals(sim, gpus):
    return [sum(sim.stats[f"system.nic{g}.{k}"] for g in range(gpus))
            for k in ("rdma_writes", "work_requests", "rdma_payload_bytes")]


def test_deepep_internode_combine_block_shape(tmp_path):
    """The internode combine in DeepEP's block shape (combine_forwarders: block; deepep.py
    internode_combine_shape): a channel's N*W forwarder warp groups are one thread block - one
    place on one SM and, with queue_pairs per_block, one QP per peer for the channel, as DeepEP's
    forwarder warps post on the channel's QP - and its NVL senders are packed 16 to a block. On
    4 x 2 (P = 8, N = 4, W = 4) with two channels: 2 x (1 + 1) = 4 thread blocks on every GPU,
    where the stream shape has C*P + C*N*W = 16 + 32 = 48, and so has the block shape where 16
    warp groups' 14 KB accumulators do not fit the SM (shared memory 100 KB). All three layers
    are exact and move the same RDMA writes, work requests and payload bytes (the shape moves no
    byte: every node row still goes home in one write). Rows wider than the block shape's 3584
    fp32 elements are summed a slice at a time: at hidden 4096 (3584 + 512) the layer is exact,
    as with whole rows in the stream shape."""
    base = ("experiments/functional.yaml", "scheme=deepep", "system.nodes.count=4",
            "workload.layer.deepep.kernels=communication", "workload.layer.deepep.comm_sms=4")
    block = ("workload.layer.deepep.combine_forwarders=block",)
    stream = ("workload.layer.deepep.combine_forwarders=stream",)
    sims = [simulate_on_tiny(*base, "workload.layer.tokens_per_gpu=16", *extra)
            for extra in (block, stream, block + ("system.gpu.sm.smem_bytes=100KB",))]
    for sim in sims:
        assert sim.stats["system.moe.output_max_abs_error"] == 0.0
    assert [_combine_tbs(sim) for sim in sims] == [[4] * 8, [48] * 8, [48] * 8]
    assert _rdma_totals(sims[0], 8) == _rdma_totals(sims[1], 8) == _rdma_totals(sims[2], 8)
    assert _rdma_totals(sims[0], 8)[2] > 0
    model = tmp_path / "wide.yaml"
    model.write_text((CONFIGS.parent / "workloads/models/tiny_functional.yaml").read_text()
                     .replace("name: tiny_functional", "name: tiny_wide")
                     .replace("hidden: 64", "hidden: 4096"))
    for extra in (block, stream):
        wide = simulate_on_tiny(*base, "workload.layer.tokens_per_gpu=4",
                                f"workload.layer.model={model}", *extra)
        assert wide.stats["system.moe.output_max_abs_error"] == 0.0


def test_deepep_internode_combine_forwarders_unknown_exits_2(tmp_path):
    r = run_cli("run", "configs/experiments/functional.yaml", "--system",
                "configs/systems/tiny_2x2.yaml", "-o", tmp_path / "out", "--quiet", "--set",
                "scheme=deepep", "--set", "workload.layer.deepep.combine_forwarders=channel")
    assert r.returncode == 2, r.stderr
    assert "combine_forwarders" in r.stderr and "block" in r.stderr
    assert "Traceback" not in r.stderr


def test_warp_groups_of_a_block_share_a_queue_pair(tmp_path):
    """With queue_pairs per_block a block's QP to a peer is its first warp group's
    (nic_queue_pair: block_lead), so the warp groups of one block - DeepEP's warps of a channel,
    the combine's forwarder block - post on one QP: two 8 KB messages from one block of 2 warp
    groups to GPU 2 go out whole in issue order (no turn to another QP), where two blocks of one
    group interleave them a packet at a time (test_queue_pair_per_block). The same bytes."""
    cfg = puts_on_tiny(tmp_path, peer=2, blocks=2, chunk=8192)
    cfg.write_text(cfg.read_text().replace("grid: 2", "grid: 1\n      warp_groups: 2"))
    r = run_cli("run", cfg, "-o", tmp_path / "out", "--quiet", "--set",
                "system.nic.queue_pairs=per_block")
    assert r.returncode == 0, r.stderr
    st = read_stats_json(tmp_path / "out")
    assert st["system.gpu0.rdma_send.interleaved_messages"] == 0
    assert st["system.gpu0.rdma_send.messages_peak"] == 2
    assert st["system.nic0.rdma_writes"] == 2
    assert st["system.gpu2.hub.rx_payload_bytes"] == 2 * 8192


def _two_puts(tmp_path, name, *sets):
    """Two thread blocks of GPU 0 each put one 8 KB message to GPU 2 on the other node, one QP
    (queue_pairs per_peer), with `sets` as --set overrides; returns the stats."""
    cfg = puts_on_tiny(tmp_path, peer=2, blocks=2, chunk=8192, name=f"{name}.yaml")
    args = []
    for s in sets:
        args += ["--set", s]
    r = run_cli("run", cfg, "-o", tmp_path / name, "--quiet", *args)
    assert r.returncode == 0, r.stderr
    return read_stats_json(tmp_path / name)


def test_full_send_queue_makes_the_posting_thread_wait(tmp_path):
    """A work request holds a slot of its QP's send queue from its post to its completion
    (nic.py: nic_sq_room; DeepEP's NVSHMEM_QP_DEPTH 1024 by default). With a depth of 1 the
    second block's post finds the QP's queue full and waits for the first write's completion
    (an IB round trip), so the run is longer and the QP never held two; with 1024 both are
    posted at once. Either way both writes are posted, each one work request and one RDMA
    write, and every byte arrives."""
    deep = _two_puts(tmp_path, "deep")
    one = _two_puts(tmp_path, "one", "system.nic.send_queue_depth=1")
    assert deep["system.gpu0.rdma_send.qp_slots_peak"] == 2
    assert deep["system.gpu0.rdma_send.send_queue_full_stalls"] == 0
    assert one["system.gpu0.rdma_send.qp_slots_peak"] == 1
    assert one["system.gpu0.rdma_send.send_queue_full_stalls"] >= 1
    assert one["simTicks"] > deep["simTicks"]
    for st in (deep, one):
        assert st["system.gpu0.rdma_send.work_requests_posted"] == 2
        assert st["system.nic0.work_requests"] == 2
        assert st["system.nic0.rdma_writes"] == 2
        assert st["system.gpu2.hub.rx_payload_bytes"] == 2 * 8192
        assert st["system.gpu0.hub.request_queue_peak"] == 0   # the hub's FIFO never held them


def test_send_queue_engines_identical(tmp_path):
    """The send queues (a full one included: depth 1) give identical stats on both engines."""
    from conftest import cli_stats_per_engine
    cfg = puts_on_tiny(tmp_path, peer=2, blocks=2, chunk=8192)
    out = cli_stats_per_engine(cfg, tmp_path, "--set", "system.nic.send_queue_depth=1")
    assert out["numba"] == out["python"]
    assert out["numba"]["system.gpu0.rdma_send.send_queue_full_stalls"] >= 1


@pytest.mark.parametrize("shape", ["block", "stream"])
def test_deepep_internode_send_queues_conserve_work_requests(shape):
    """DeepEP's internode layer on 4 x 2 (two channels) with the QPs' send queues and with the
    hub's FIFO (work_requests: hub_fifo): both exact, with the same RDMA writes, work requests
    and payload bytes over all NICs, and every work request a GPU posted is one the NICs
    started (send_queue)."""
    base = ("experiments/functional.yaml", "scheme=deepep", "system.nodes.count=4",
            "workload.layer.tokens_per_gpu=16", "workload.layer.deepep.kernels=communication",
            "workload.layer.deepep.comm_sms=4",
            f"workload.layer.deepep.combine_forwarders={shape}")
    sq = simulate_on_tiny(*base)
    fifo = simulate_on_tiny(*base, "system.nic.work_requests=hub_fifo")
    for sim in (sq, fifo):
        assert sim.stats["system.moe.output_max_abs_error"] == 0.0
    assert _rdma_totals(sq, 8) == _rdma_totals(fifo, 8)
    posted = sum(sq.stats[f"system.gpu{g}.rdma_send.work_requests_posted"] for g in range(8))
    assert posted == _rdma_totals(sq, 8)[1] > 0
    assert all(sq.stats[f"system.gpu{g}.rdma_send.nvlink_overtakes"] == 0 for g in range(8))


@pytest.mark.parametrize("key, value, expect", [
    ("system.nic.work_requests", "doorbell", "send_queue"),
    ("system.nic.send_queue_depth", "0", "send_queue_depth")])
def test_bad_send_queue_keys_exit_2(tmp_path, key, value, expect):
    r = run_cli("run", "configs/ubench/alltoall.yaml", "--system", "configs/systems/tiny_2x2.yaml",
                "-o", tmp_path / "out", "--quiet", "--set", f"{key}={value}")
    assert r.returncode == 2, r.stderr
    assert key in r.stderr and expect in r.stderr
    assert "Traceback" not in r.stderr
