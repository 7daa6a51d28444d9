"""Scheme `deepep`: the software-mediated, bulk-synchronous baseline modelled on DeepEP's normal
kernels (github.com/deepseek-ai/DeepEP). Kernels and buffer layouts: workloads/kernels/deepep/deepep.s.

Stream 0 runs, in order: `deepep_layout` (per-rank/channel/expert counts, token metadata),
`deepep_notify` (barrier, count exchange, barrier, per-expert prefix sums and the GEMM tile table),
then - after the host round trip, modelled as the dispatch launch's host_delay - `deepep_dispatch`
(C = comm_sms / 2 channels on comm_sms SMs: C sender blocks with one warp group per destination
and C receiver blocks with one warp group per (channel, source) ring; rows move by warp copies,
put.sm, charged on the SMs' load/store units), `deepep_gate_up` and `deepep_down` (grouped GEMM over the
expert-major receive buffer, in jobs of workload.layer.gemm_n_tile output columns per row tile),
`deepep_combine`
(workload.layer.deepep.home_reduce: receivers, DeepEP's: 2C blocks of P warp groups on 2C SMs -
one thread block per stream where P fp32 rows do not fit an SM's shared memory; C sender blocks:
per received token the fp32 weighted sum of its local expert outputs, copied as a bf16 row into a
per-(channel, rank) ring on the token's home by a warp copy; C receiver blocks at home: a head
updater and P - 1 reducers summing each token's rows in fp32, ranks ascending). With
home_reduce: kernel (the first model), `deepep_combine_partials` copies the rows into a
[token][rank] buffer at home and `deepep_reduce` sums them (shared experts + per-rank partials).
Stream 1 runs the shared experts (the "expert" phase lists them too, so its span starts with the
layer; kernel.deepep_gate_up_us / deepep_down_us are the routed GEMMs alone).

Arithmetic order differs from the per-slot combine of the other schemes (the partial sums are
rounded to bf16 on the way home), so the functional check uses the reference's
combine="per_rank".

`workload.layer.deepep.kernels: communication` is DeepEP's own benchmark setting (dispatch and
combine alone): layout, notify, dispatch, combine and reduce, without the GEMMs and the shared
experts. The experts are the identity: combine reads the received rows as expert outputs, so the
functional check compares with the reference's identity experts, and token accounting checks
every pair but "computed". `dispatch_dtype: fp8` dispatches rows of 1 B per element plus an fp32
scale per 128 elements (DeepEP's FP8 input) - as bytes only, so it is timing mode with
kernels: communication only (the config loader says so); combine stays bf16.

On a multi-node system (`internode: forward`, the default) dispatch and combine are DeepEP's
internode kernels (workloads/kernels/deepep/internode.s: deepep_dispatch_internode,
deepep_combine_internode, deepep_reduce_nodes): RDMA once per (token, node) to the same local
rank, NVLink forwarding there, node partials reduced at the forwarder (reference
combine="per_node"); layout, notify and the GEMMs are unchanged. The combine runs in DeepEP's
block shape (`combine_forwarders: block`, internode_combine_shape: a channel's forwarder warps
are the warp groups of one thread block - one SM place, one queue pair per peer - its NVL
senders packed as many to a block), or with `stream` a thread block per forwarder warp and per
NVL sender; either way a forwarder stages its node rows at their positions in the stream home
and writes a chunk of them (rdma_send_chunk_tokens) as one RDMA write.
`internode: direct` runs the kernels above on the whole system.

Every run adds DeepEP's bandwidth figures (moehub_arch/workloads/bandwidth.py):
system.moe.deepep.{dispatch,combine}_GBps and the byte counts behind them.

Buffers are sized from the layer shape and, where DeepEP's host sizes them from the exchanged
counts (receive tensors, GEMM tiles), from the routing table.
"""
import functools

import numpy as np

from ...config.schema import LaunchConfig
from ..bandwidth import (dispatch_row_bytes, mean_rank_bandwidth_GBps, node_rows_sent_per_rank,
                         tokens_received_per_rank)
from ..layer_stats import forward_launches, kernel_ticks_per_gpu, kernels_finished
from ..layer import (ACCT_NAMES, SHARED_KERNELS, LayerError, SchemePlan, _buf,
                     shared_expert_launches)
from ..deepep_backward import backward_kernel_files, backward_plan, backward_refusal

KERNELS = "workloads/kernels/deepep/deepep.s"
INTERNODE_KERNELS = "workloads/kernels/deepep/internode.s"
META_BYTES = 128        # dp_meta row: 8 id words, 4 weight words, 4 rank-mask words
# the rank mask (deepep.s, deepep_layout): 62 ranks per word (bits 0..61: a bit 63 would not
# survive the reference engine's signed words); deepep_layout and deepep_reduce keep one word,
# their _wide variants all four (GB200 NVL72's 72 ranks); internode.s reads one word
MASK_WORD_RANKS = 62
MASK_WORDS = 4
RING_META_BYTES = 96    # the part of it that travels with the row (ids, weights)
RECORD_BYTES = 96       # dp_rec entry: 8 position words, 4 weight words
COMBINE_STAGING = 8     # bf16 rows staged per combine warp group (see deepep_combine)
COMBINE_ACC_BYTES = 28 * 1024   # deepep_combine's .smem: one fp32 row of up to 7168 elements
# DeepEP's intranode kernels (github.com/deepseek-ai/DeepEP csrc/kernels/intranode.cu, launch
# functions `dispatch` and `combine`): blocks of kNumThreads = 768 threads (24 warps), one per SM
# (__launch_bounds__(768, 1)), each warp with kNumTMABytesPerWarp of dynamic shared memory for its
# TMA staging (SM90 build): 8192 B in dispatch, 4096 B in combine. The few hundred bytes of
# static shared memory (per-rank head/tail indices) are left out.
DEEPEP_WARPS_PER_BLOCK = 768 // 32
DISPATCH_SMEM_BYTES = DEEPEP_WARPS_PER_BLOCK * 8192     # 192 KB
COMBINE_SMEM_BYTES = DEEPEP_WARPS_PER_BLOCK * 4096      # 96 KB
# internode.cu `dispatch` (launch function): kNumTMABytesPerWarp = 16384 for each of the
# NUM_MAX_NVL_PEERS = 8 forwarder warps: 128 KB of dynamic shared memory per block (512 threads)
INTERNODE_DISPATCH_SMEM_BYTES = 16384 * 8
# internode.cu `combine` (launch function, commit 3b1045d): kNumCombineForwarderWarps = 16
# forwarder warps per channel, split over the RDMA ranks: kNumWarpsPerForwarder =
# max(16 / num_rdma_ranks, 1) warps combine the tokens of one (channel, node) together, each
# taking every kNumWarpsPerForwarder-th token of a chunk (8 at 2 nodes, 4 at 4)
COMBINE_FORWARDER_WARPS = 16


# internode.s deepep_combine_internode's .smem: the fp32 slice of a row a warp group sums at a
# time (the stand-in for its warps' registers), small enough for a channel's 16 forwarder warp
# groups to share one SM's 228 KB (H100/H800) as DeepEP's forwarder warps share one SM
COMBINE_SLICE_BYTES = 14 * 1024


def combine_forwarder_warps(nodes):
    """Warp groups per (channel, node) forwarder of the internode combine: DeepEP's
    kNumWarpsPerForwarder = max(kNumCombineForwarderWarps / num_rdma_ranks, 1)."""
    return max(COMBINE_FORWARDER_WARPS // nodes, 1)


def internode_combine_shape(cfg, P, N, H):
    """(G, S, slice, dynamic_smem) of deepep_combine_internode: warp groups per thread block, its
    sender streams per channel, the elements of a row it sums at a time and the shared memory
    each block asks for beyond its groups' .smem. With combine_forwarders: block, DeepEP's shape
    (internode.cu `combine`: a channel's N*W forwarder warps in one block on one SM): G = N*W -
    one block place and, with queue_pairs per_block, the channel's one QP to each peer - the
    channel's P NVL senders packed G to a block (S = ceil(P / G) * G streams, the last S - P
    idle), rows summed in slices of COMBINE_SLICE_BYTES. With stream (or where G slices do not
    fit the SM's shared memory), a thread block per stream holding a whole fp32 row of up to
    7168 elements (COMBINE_ACC_BYTES: its .smem and the rest as dynamic shared memory)."""
    G = N * combine_forwarder_warps(N)
    if (cfg.workload.layer.deepep.combine_forwarders == "stream"
            or G * COMBINE_SLICE_BYTES > cfg.system.gpu.sm.smem_bytes):
        return 1, P, H, COMBINE_ACC_BYTES - COMBINE_SLICE_BYTES
    return G, -(-P // G) * G, min(H, COMBINE_SLICE_BYTES // 4), 0


def rdma_pos_offset(C, N, P, Rr):
    """Where dp_rdma_ctl's pos table starts (internode.s: behind the tails, heads, metadata
    slots and staged metadata rows)."""
    return C * N * 8 + C * P * 8 + 2 * C * N * Rr * META_BYTES


def combine_chunk_rdma_tokens(opts):
    """Tokens per RDMA write of the internode combine's forwarder: DeepEP's
    num_max_rdma_chunked_send_tokens (the dispatch's rdma_send_chunk_tokens: DeepEP's Config has
    one value for both kernels), at most half the RDMA ring as the dispatch's chunk (csrc/config.hpp at
    3b1045d: num_max_rdma_chunked_send_tokens <= num_max_rdma_chunked_recv_tokens / 2)."""
    return min(opts.rdma_send_chunk_tokens, max(1, opts.rdma_ring_rows // 2))


def tma_staging_bytes(cfg, nbytes):
    """DeepEP's TMA staging shared memory (`nbytes` per block) on this GPU: DeepEP builds it for
    SM90 only (launch.cuh SET_SHARED_MEMORY_FOR_TMA; DISABLE_SM90_FEATURES elsewhere). The config
    names no architecture, so a GPU whose SM cannot hold the dispatch's 192 KB (Ampere: 100 KB
    or less; Hopper: 228 KB) is taken for a pre-Hopper build, without it."""
    return nbytes if cfg.system.gpu.sm.smem_bytes >= DISPATCH_SMEM_BYTES else 0
EPOCH = 1               # one layer call: barrier values 1 and 2


def plan(layer, internode=None):
    """The launch plan; `internode` (forward / direct) overrides workload.layer.deepep.internode
    (scheme hiermoe picks it with its performance model)."""
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.deepep
    P, T, k, El, H, E = (s.num_gpus, s.tokens, s.top_k, s.local_experts, s.hidden, s.experts)
    comm_only = opts.kernels == "communication"
    C = max(1, opts.comm_sms // 2)                 # channels
    rb = s.row_bytes                               # bf16 rows (expert outputs, combine)
    db = dispatch_row_bytes(H, opts.dispatch_dtype)   # dispatched rows
    nsm = cfg.system.gpu.num_sms

    # what the host learns from the count exchange: rows each GPU receives, tiles of its experts
    counts = np.bincount(layer.routing.topk_idx.reshape(-1), minlength=E).reshape(P, El)
    rows_cap = max(1, int(counts.sum(axis=1).max()))
    tiles_cap = max(1, int((-(-counts // s.tile_rows)).sum(axis=1).max()))

    n = s.n_tile
    csb = COMBINE_STAGING * rb
    if 4 * H > COMBINE_ACC_BYTES:
        raise LayerError(f"workload.layer.model: scheme deepep keeps a token's fp32 combine sum in "
                         f"{COMBINE_ACC_BYTES // 1024} KB of shared memory per warp group (hidden "
                         f"<= {COMBINE_ACC_BYTES // 4}), found hidden {H}")
    # combine: one block of P warp groups per channel (DeepEP) when their accumulators fit the SM's
    # shared memory, else one thread block per (channel, rank) spread over the SMs
    groups = P if P * COMBINE_ACC_BYTES <= cfg.system.gpu.sm.smem_bytes else 1
    # combine's expert outputs: the layer's GEMM output; the received rows themselves when the
    # experts are the identity (communication only); with fp8 rows, a bf16 buffer of their size
    if not comm_only:
        expert_out = "@dp_recv_y"
    else:
        expert_out = "@dp_recv_x" if opts.dispatch_dtype == "bf16" else "@dp_recv_y"

    buffers, launches = mediation_and_dispatch(
        layer, comm_sms=opts.comm_sms, ring_rows=opts.ring_rows, rows_cap=rows_cap,
        tiles_cap=tiles_cap, align=1, host_delay=opts.host_sync_latency, receivers=True,
        dispatch_dtype=opts.dispatch_dtype, send_chunk=opts.send_chunk_tokens)
    L = node_gpus(cfg)
    forward = L < P and (internode or opts.internode) == "forward"
    if forward:
        buffers, launches = internode_dispatch(layer, buffers, launches, L=L, db=db)
    elif opts.home_reduce == "receivers":
        if P < 2:
            raise LayerError("workload.layer.deepep.home_reduce: receivers needs at least 2 GPUs "
                             "(a channel's receiver SM runs a head updater and P - 1 reducers); "
                             "use home_reduce: kernel on one GPU")
        R = opts.ring_rows
        buffers += [
            # ring (c, r) on the home rank: rows rank r's senders push; tail, head and the
            # reducers' progress words; with head_poll remote also the senders' copies of the
            # heads they read
            _buf("dp_cring_x", C * P * R * rb, dtype="bf16"),
            _buf("dp_cring_ctl", combine_ctl_bytes(opts, C, P), region="control",
                 dtype="i64"),
            _buf("dp_combine_scratch", C * P * csb),
        ]
    else:
        buffers += [
            _buf("dp_comb", T * P * rb, dtype="bf16"),
            _buf("dp_combine_scratch", C * P * csb),
        ]
    if expert_out == "@dp_recv_y":
        buffers.append(_buf("dp_recv_y", rows_cap * rb, dtype="bf16"))
    if not comm_only:
        # GEMM jobs: one per SM at a time (their accumulators fill most of an SM's shared memory)
        expert_tbs = max(1, min(nsm, tiles_cap * max(s.ffn, H) // n))
        buffers.append(_buf("dp_hh", rows_cap * s.ffn * 2, dtype="bf16"))
        launches += [
            LaunchConfig(kernel="deepep_gate_up", grid=expert_tbs, stream=0, params=(
                ("recv_x", "@dp_recv_x"), ("hh", "@dp_hh"), ("tiles", "@dp_tiles"),
                ("info", "@dp_info"), ("wg", "@w_gate"), ("wu", "@w_up"), ("hidden", H),
                ("ffn", s.ffn), ("tile_rows", s.tile_rows), ("n_tile", n),
                ("swizzle", s.swizzle))),
            LaunchConfig(kernel="deepep_down", grid=expert_tbs, stream=0, params=(
                ("hh", "@dp_hh"), ("recv_y", "@dp_recv_y"), ("tiles", "@dp_tiles"),
                ("info", "@dp_info"), ("wd", "@w_down"), ("acct", "@acct"), ("hidden", H),
                ("ffn", s.ffn), ("tile_rows", s.tile_rows), ("n_tile", n),
                ("swizzle", s.swizzle))),
        ]
    shared = 0 if comm_only else s.shared
    if forward:
        launches += internode_combine(layer, expert_out=expert_out, shared=shared, L=L)
    else:
        launches += intranode_combine(layer, expert_out=expert_out, shared=shared, groups=groups)
    reference = {"combine": "per_rank", "local_experts": El}
    if forward:
        reference.update(combine="per_node", node_gpus=L)
    elif comm_only and opts.home_reduce == "receivers":
        # DeepEP's benchmark combines the rows each rank received, unweighted
        reference.update(combine="rank_rows")
    sbufs, slaunch = shared_experts_or_identity(layer, comm_only, reference)
    phases = {"mediation": (layout_kernel(P), "deepep_notify"),
              "dispatch": (("deepep_dispatch_internode",) if forward else ("deepep_dispatch",)),
              "expert": () if comm_only else ("deepep_gate_up", "deepep_down") + SHARED_KERNELS,
              "combine": (("deepep_combine_internode", "deepep_reduce_nodes") if forward else
                          combine_kernels(opts, P))}
    files = (KERNELS, INTERNODE_KERNELS) if forward else (KERNELS,)
    why = backward_refusal(cfg, comm_only=comm_only, forward_internode=forward)
    back = {}
    launches = launches + slaunch
    if cfg.workload.layer.passes == "training" and not why:
        # the backward (deepep_backward.py) on stream 0 after the forward; phases go by launch,
        # since the cached notify and the combine kernel serve both passes
        bbufs, blaunches, bpresets, row_order = backward_plan(
            layer, counts=counts, rows_cap=rows_cap, tiles_cap=tiles_cap, C=C, groups=groups,
            dispatch_smem=tma_staging_bytes(cfg, DISPATCH_SMEM_BYTES),
            combine_smem=(max(0, tma_staging_bytes(cfg, COMBINE_SMEM_BYTES)
                              - P * COMBINE_ACC_BYTES) if groups == P else 0),
            combine_ctl_bytes=combine_ctl_bytes(opts, C, P),
            combine_chunk=combine_chunk_tokens(opts), epoch=EPOCH + 1)
        by_kernel = {kname: phase for phase, names in phases.items() for kname in names}
        back = dict(
            launch_phases=tuple(by_kernel.get(l.kernel, "") for l in launches)
            + tuple(phase for _, phase in blaunches),
            presets=bpresets, backward=True, backward_row_order=row_order,
            backward_reference={"combine": "per_rank", "local_experts": El},
            backward_dx_f32="dp_bdx", backward_acct=(("dp_bacct", 3, 2),))
        buffers = buffers + bbufs
        launches = launches + [launch for launch, _ in blaunches]
        files = files + backward_kernel_files()
    return SchemePlan(
        buffers=tuple(buffers + sbufs), launches=tuple(launches),
        kernel_files=files, n_tile=n, phases=phases,
        mediation_extra_ps=opts.host_sync_latency + cfg.system.gpu.kernel_launch_latency,
        reference_kwargs=reference,
        checked_accounting=tuple(a for a in ACCT_NAMES if not (comm_only and a == "computed")),
        extra_stats=functools.partial(add_bandwidth_stats, dispatch_bytes=db,
                                      node_gpus=L if forward else 0,
                                      combine=combine_kernels(opts, P)),
        backward_why=why, **back)


def shared_experts_or_identity(layer, comm_only, reference):
    """The shared experts' buffers and launches on stream 1; with `comm_only` (DeepEP's
    benchmark setting) none, and `reference` (moe_layer_reference's arguments, updated in place)
    switches to identity experts without shared ones."""
    if comm_only:
        reference.update(identity_experts=True, shared_gate=None, shared_up=None,
                         shared_down=None)
        return [], []
    return shared_expert_launches(layer.shape, layer.cfg, stream=1)


def combine_kernels(opts, P):
    """The intranode combine's kernels for workload.layer.deepep.home_reduce (DeepEP's
    Buffer.combine: cached_notify_combine, then the combine kernel) on P ranks."""
    if opts.home_reduce == "receivers":
        return ("deepep_cached_notify", "deepep_combine")
    return ("deepep_combine_partials", "deepep_reduce_wide" if wide(P) else "deepep_reduce")


def combine_ctl_bytes(opts, C, P):
    """Bytes of the intranode combine rings' control words (dp_cring_ctl): tail, head and
    progress per (channel, rank), and with head_poll remote the senders' copies of the heads."""
    return (4 if opts.head_poll == "remote" else 3) * C * P * 8


def combine_chunk_tokens(opts):
    """Tokens per published tail (and per head check) of the intranode combine's senders:
    workload.layer.deepep.combine_send_chunk_tokens, or the dispatch's send_chunk_tokens where it
    is 0 (the kernel caps it at half the ring)."""
    return opts.combine_send_chunk_tokens or opts.send_chunk_tokens


def intranode_combine(layer, *, expert_out, shared, groups):
    """The intranode combine: with home_reduce receivers, deepep_combine (2C blocks of `groups`
    warp groups: senders push the partial rows into rings at home, the receiver SMs sum them
    there); with home_reduce kernel, deepep_combine_partials (C blocks: partial rows straight
    home) and deepep_reduce (per-rank partials summed at home by a second kernel)."""
    s, cfg = layer.shape, layer.cfg
    P, T, k, El, H = s.num_gpus, s.tokens, s.top_k, s.local_experts, s.hidden
    opts = cfg.workload.layer.deepep
    C = max(1, opts.comm_sms // 2)
    # a channel block's shared memory is DeepEP's (96 KB), of which our fp32 accumulators are a
    # part; where they need more (P x 28 KB above 96 KB), they are the footprint. The
    # per-(channel, rank) fallback is not DeepEP's shape: its blocks hold their accumulator only
    dynamic_smem = (max(0, tma_staging_bytes(cfg, COMBINE_SMEM_BYTES) - P * COMBINE_ACC_BYTES)
                    if groups == P else 0)
    if opts.home_reduce == "receivers":
        return [LaunchConfig(
            kernel="deepep_cached_notify", grid=1, stream=0, params=(
                ("bar", "@dp_bar"), ("ctl", "@dp_cring_ctl"),
                ("ctl_bytes", combine_ctl_bytes(opts, C, P)),
                ("epoch", EPOCH + 1))), LaunchConfig(
            kernel="deepep_combine", grid=2 * C * P // groups, warp_groups=groups, stream=0,
            dynamic_smem=dynamic_smem, kernel_threads="declared" if groups == P else "none",
            params=(
                ("rec", "@dp_rec"), ("ntf", "@dp_ntf"), ("recv_y", expert_out),
                ("scratch", "@dp_combine_scratch"), ("cring_x", "@dp_cring_x"),
                ("cring_ctl", "@dp_cring_ctl"), ("send_head", "@dp_send_head"), ("out", "@out"),
                ("ys", "@ys"), ("one", "@one"), ("acct", "@acct"), ("tokens", T), ("topk", k),
                ("hidden", H), ("channels", C), ("local_experts", El),
                ("ring_rows", opts.ring_rows), ("send_chunk", combine_chunk_tokens(opts)),
                ("shared", shared), ("shared_tbs", cfg.workload.layer.shared_tbs),
                ("head_poll", int(opts.head_poll == "remote")),
                ("bench_rows", int(opts.kernels == "communication"))))]
    return [
        LaunchConfig(kernel="deepep_combine_partials", grid=C * P // groups, warp_groups=groups,
                     stream=0, dynamic_smem=dynamic_smem, params=(
            ("rec", "@dp_rec"), ("ntf", "@dp_ntf"), ("recv_y", expert_out),
            ("comb", "@dp_comb"), ("scratch", "@dp_combine_scratch"), ("acct", "@acct"),
            ("done", "@done"), ("tokens", T), ("topk", k), ("hidden", H), ("channels", C),
            ("local_experts", El))),
        LaunchConfig(kernel=combine_kernels(opts, P)[1], grid=cfg.workload.layer.combine_tbs,
                     stream=0, params=(
            ("out", "@out"), ("ys", "@ys"), ("comb", "@dp_comb"), ("meta", "@dp_meta"),
            ("one", "@one"), ("done", "@done"), ("acct", "@acct"), ("tokens", T), ("hidden", H),
            ("shared", shared), ("shared_tbs", cfg.workload.layer.shared_tbs))),
    ]


def node_gpus(cfg):
    """GPUs per node (the whole system on a one-node system)."""
    sysc = cfg.system
    return sysc.nodes.gpus_per_node if sysc.nodes.count > 1 else sysc.num_gpus


def internode_dispatch(layer, buffers, launches, *, L, db):
    """DeepEP's internode dispatch (workloads/kernels/deepep/internode.s): the mediation kernels
    of `launches` (layout, notify) stay, the intranode dispatch launch is replaced by
    deepep_dispatch_internode (2C blocks of N + P warp groups: forwarder and sender SMs per
    channel). Adds the RDMA rings, forwarder records and combine buffers."""
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.deepep
    P, T, k, El, H, rb = s.num_gpus, s.tokens, s.top_k, s.local_experts, s.hidden, s.row_bytes
    if L > 8:
        raise LayerError(f"system.nodes.gpus_per_node: DeepEP's internode kernels forward to at "
                         f"most 8 GPUs of a node (NUM_MAX_NVL_PEERS), found {L}")
    if wide(P):
        raise LayerError(f"system.num_gpus: DeepEP's internode kernels (internode.s) read a "
                         f"token's destination ranks from one mask word of {MASK_WORD_RANKS} "
                         f"ranks, found {P} GPUs")
    N = P // L
    C = max(1, opts.comm_sms // 2)
    Tc = -(-T // C)
    Rr = opts.rdma_ring_rows
    buffers = buffers + [
        # tails, heads, the ring's metadata slots, the send buffer's staged metadata rows and the
        # tokens' positions in the streams to each node (internode.s: pos, DeepEP's send_rdma_head)
        # (and 8 words of slack: the home reads a token's positions 8 nodes at a time, ld.v8)
        _buf("dp_rdma_ctl", rdma_pos_offset(C, N, P, Rr) + T * N * 8 + 64,
             region="control", dtype="i64"),
        _buf("dp_rdma_x", C * N * Rr * db, dtype="bf16"),
        # the send buffer: a chunk of tokens is staged at the slots it takes in the destination's
        # ring and sent as one RDMA write of rows and one of metadata (DeepEP: one write of
        # num_bytes_per_rdma_token records; internode.s, rdma_chunk_put)
        _buf("dp_rdma_send", C * N * Rr * db, dtype="bf16"),
        _buf("dp_fwd_rec", C * N * Tc * 128, region="control", dtype="i64"),
        _buf("dp_fwd_cnt", C * N * 8, region="control", dtype="i64"),
        _buf("dp_fwd_comb", N * T * L * rb, dtype="bf16"),
        _buf("dp_comb_ctl", C * P * 8, region="control", dtype="i64"),
        # the combine's node rows travel in streams, one per (channel, node pair), in the order of
        # the dispatch's RDMA ring; a token's position in each is noted by the dispatch
        # (pos in dp_rdma_ctl, DeepEP's send_rdma_head), the forwarder stages the rows at their positions
        # (dp_fwd_send) and writes a chunk of them at once into the same rows at home (dp_comb).
        # Assumption: both hold a channel's whole stream (Tc rows) where DeepEP's are rings of
        # num_max_rdma_chunked_recv_tokens rows whose head the home's RDMA receivers return: ours
        # sums at home after the kernel (deepep_reduce_nodes), so there is no head to return.
        _buf("dp_fwd_send", C * N * Tc * rb, dtype="bf16"),
        _buf("dp_fwd_chunks", C * N * -(-Tc // combine_chunk_rdma_tokens(opts)) * 8,
             region="control", dtype="i64"),
        _buf("dp_comb", C * N * Tc * rb, dtype="bf16"),
        _buf("dp_combine_scratch",
             C * internode_combine_shape(cfg, P, N, H)[1] * COMBINE_STAGING * rb),
    ]
    old = launches[2]
    params = dict(old.params)
    launches = launches[:2] + [LaunchConfig(
        kernel="deepep_dispatch_internode", grid=2 * C, warp_groups=N + P, stream=0,
        host_delay=old.host_delay,
        dynamic_smem=tma_staging_bytes(cfg, INTERNODE_DISPATCH_SMEM_BYTES), params=(
            ("x", params["x"]), ("meta", "@dp_meta"), ("ring_x", "@dp_ring_x"),
            ("ring_ctl", "@dp_ring_ctl"), ("rdma_x", "@dp_rdma_x"), ("rdma_send", "@dp_rdma_send"),
            ("rdma_ctl", "@dp_rdma_ctl"),
            ("fwd_rec", "@dp_fwd_rec"), ("fwd_cnt", "@dp_fwd_cnt"), ("ntf", "@dp_ntf"),
            ("rec", "@dp_rec"), ("recv_x", "@dp_recv_x"), ("cursor", "@dp_cursor"),
            ("acct", "@acct"), ("tokens", T), ("topk", k), ("row_bytes", db), ("channels", C),
            ("ring_rows", opts.ring_rows), ("send_chunk", min(opts.send_chunk_tokens,
                                                              max(1, opts.ring_rows // 2))),
            ("rdma_ring_rows", Rr), ("rdma_chunk", opts.rdma_send_chunk_tokens),
            ("local_experts", El), ("node_gpus", L)))]
    return buffers, launches


def internode_combine(layer, *, expert_out, shared, L):
    """DeepEP's internode combine (NVL senders and forwarders) and the home reduction over
    node rows (workloads/kernels/deepep/internode.s)."""
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.deepep
    P, T, k, El, H = s.num_gpus, s.tokens, s.top_k, s.local_experts, s.hidden
    C = max(1, opts.comm_sms // 2)
    N = P // L
    W = combine_forwarder_warps(N)
    G, S, n, dynamic_smem = internode_combine_shape(cfg, P, N, H)
    return [
        LaunchConfig(kernel="deepep_combine_internode", grid=C * (S + N * W) // G,
                     warp_groups=G, dynamic_smem=dynamic_smem, stream=0, params=(
            ("rec", "@dp_rec"), ("ntf", "@dp_ntf"), ("recv_y", expert_out),
            ("fwd_rec", "@dp_fwd_rec"), ("fwd_cnt", "@dp_fwd_cnt"), ("fwd_comb", "@dp_fwd_comb"),
            ("comb_ctl", "@dp_comb_ctl"), ("comb", "@dp_comb"), ("fwd_send", "@dp_fwd_send"),
            ("fwd_chunks", "@dp_fwd_chunks"),
            ("scratch", "@dp_combine_scratch"), ("one", "@one"), ("acct", "@acct"),
            ("done", "@done"), ("tokens", T), ("topk", k), ("hidden", H), ("channels", C),
            ("local_experts", El), ("node_gpus", L), ("fwd_warps", W),
            ("rdma_chunk", combine_chunk_rdma_tokens(opts)), ("groups", G), ("slice", n))),
        LaunchConfig(kernel="deepep_reduce_nodes", grid=cfg.workload.layer.combine_tbs, stream=0,
                     params=(
            ("out", "@out"), ("ys", "@ys"), ("comb", "@dp_comb"), ("meta", "@dp_meta"),
            ("pos", f"@dp_rdma_ctl + {rdma_pos_offset(C, N, P, opts.rdma_ring_rows)}"),
            ("one", "@one"), ("done", "@done"), ("acct", "@acct"),
            ("tokens", T), ("hidden", H), ("shared", shared),
            ("shared_tbs", cfg.workload.layer.shared_tbs), ("node_gpus", L), ("channels", C))),
    ]


def wide(P):
    """The rank mask of P ranks needs more than one word: the _wide kernels."""
    return P > MASK_WORD_RANKS


def layout_kernel(P):
    return "deepep_layout_wide" if wide(P) else "deepep_layout"


def mediation_and_dispatch(layer, *, comm_sms, ring_rows, rows_cap, tiles_cap, align, host_delay,
                           receivers, dispatch_dtype="bf16", send_chunk=8):
    """The DeepEP mediation and dispatch kernels on stream 0: deepep_layout, deepep_notify (expert
    regions aligned to `align` rows), then deepep_dispatch after `host_delay` (its receiver TBs
    too if `receivers`, otherwise only its C sender blocks: scheme overlap drains the rings itself),
    publishing the ring tail every `send_chunk` tokens. Rows travel in `dispatch_dtype` (fp8: the
    bytes of e4m3 elements and their scales, read from dp_x_fp8). Returns (buffers, launches); the
    receive buffer dp_recv_x holds `rows_cap` rows. One thread block per channel side with a warp
    group per peer rank and DeepEP's dynamic shared memory (192 KB): it has an SM of its own, as
    DeepEP's have - no 160 KB GEMM block fits beside it."""
    s, cfg = layer.shape, layer.cfg
    P, T, k, El, H = s.num_gpus, s.tokens, s.top_k, s.local_experts, s.hidden
    if P > MASK_WORD_RANKS * MASK_WORDS:
        raise LayerError(f"system.num_gpus: schemes deepep, overlap and hiermoe keep a token's "
                         f"destination ranks in {MASK_WORDS} mask words of {MASK_WORD_RANKS} "
                         f"ranks (dp_meta words 12..15: at most "
                         f"{MASK_WORD_RANKS * MASK_WORDS} GPUs), found {P}")
    C = max(1, comm_sms // 2)                      # channels
    groups = P                                     # warp groups per dispatch thread block
    R = ring_rows
    W = C + El                                     # count row: C channel counts, El expert counts
    G = -(-El // 8)                                # notify TBs: 8 local experts each
    db = dispatch_row_bytes(H, dispatch_dtype)     # bytes of a dispatched row
    layout_tbs = max(1, min(T, 4 * cfg.system.gpu.num_sms))
    buffers = [
        _buf("dp_meta", T * META_BYTES, region="control", dtype="i64"),
        _buf("dp_lay", P * W * 8, region="control", dtype="i64"),
        _buf("dp_ntf", P * W * 8 + 64, region="control", dtype="i64"),   # + 64: ld.v8 past a row
        _buf("dp_bar", P * 8, region="control", dtype="i64"),
        _buf("dp_info", 32, region="control", dtype="i64"),
        _buf("dp_grp", G * 32, region="control", dtype="i64"),
        _buf("dp_cursor", El * 8, region="control", dtype="i64"),
        _buf("dp_tiles", tiles_cap * 32 + 64, region="control", dtype="i64"),
        _buf("dp_rank_slots", P * -(-T // 16) * 8, region="control", dtype="i64"),
        # + 64: ld.v8 of the last token's row reads past it
        _buf("dp_send_head", T * P * 8 + 64, region="control", dtype="i64"),
        # tail and head tables, then the metadata ring slots
        _buf("dp_ring_ctl", 2 * C * P * 8 + C * P * R * RING_META_BYTES, region="control",
             dtype="i64"),
        _buf("dp_ring_x", C * P * R * db, dtype="bf16"),
        _buf("dp_recv_x", rows_cap * db, dtype="bf16"),
    ]
    if dispatch_dtype == "fp8":
        buffers.append(_buf("dp_x_fp8", T * db, dtype="bf16"))   # bytes only (timing mode)
    if receivers:
        Tc = -(-T // C)
        buffers.append(_buf("dp_rec", C * P * Tc * RECORD_BYTES, region="control", dtype="i64"))
    launches = [
        LaunchConfig(kernel=layout_kernel(P), grid=layout_tbs, stream=0, params=(
            ("topk_idx", "@topk_idx"), ("topk_w", "@topk_w"), ("meta", "@dp_meta"),
            ("lay", "@dp_lay"), ("rank_slots", "@dp_rank_slots"), ("tokens", T), ("topk", k),
            ("channels", C), ("local_experts", El))),
        LaunchConfig(kernel="deepep_notify", grid=G, stream=0, params=(
            ("lay", "@dp_lay"), ("ntf", "@dp_ntf"), ("bar", "@dp_bar"), ("info", "@dp_info"),
            ("grp", "@dp_grp"), ("cursor", "@dp_cursor"), ("tiles", "@dp_tiles"),
            ("epoch", EPOCH), ("channels", C), ("local_experts", El),
            ("tile_rows", s.tile_rows), ("align", align))),
        # one block per channel side, one warp group per peer rank (DeepEP intranode.cu: sender
        # and receiver SMs of 768 threads, their warps split evenly over the ranks)
        LaunchConfig(kernel="deepep_dispatch", grid=(2 if receivers else 1) * C * P // groups,
                     warp_groups=groups, dynamic_smem=tma_staging_bytes(cfg, DISPATCH_SMEM_BYTES),
                     stream=0, host_delay=host_delay, params=(
            ("x", "@dp_x_fp8" if dispatch_dtype == "fp8" else "@x"), ("meta", "@dp_meta"),
            ("rank_slots", "@dp_rank_slots"),
            ("ring_x", "@dp_ring_x"), ("ring_ctl", "@dp_ring_ctl"), ("ntf", "@dp_ntf"),
            ("rec", "@dp_rec" if receivers else 0), ("recv_x", "@dp_recv_x"),
            ("cursor", "@dp_cursor"), ("acct", "@acct"), ("send_head", "@dp_send_head"),
            ("tokens", T), ("topk", k),
            ("row_bytes", db), ("channels", C), ("ring_rows", R), ("send_chunk", send_chunk),
            ("local_experts", El))),
    ]
    return buffers, launches


def add_bandwidth_stats(sim, layer, dispatch_bytes, node_gpus=0,
                        combine=("deepep_combine_partials", "deepep_reduce")):
    """DeepEP's bandwidth figures (moehub_arch/workloads/bandwidth.py): bytes each rank receives
    in dispatch (deduplicated token rows, its own included, `dispatch_bytes` each) and sends back
    in combine (the same rows in bf16), over each rank's kernel time, averaged over ranks."""
    s = layer.shape
    rows = tokens_received_per_rank(layer.routing.topk_idx, s.local_experts)
    st, out = sim.state, sim.stats

    forward = forward_launches(sim, layer)

    def ticks(kernel):
        return kernel_ticks_per_gpu(sim, (kernel,), forward)

    def span(kernels):
        # per GPU, from the start of the first of `kernels` to the end of the last: the launch
        # gaps between them included, as CUDA events around one DeepEP Buffer call time them
        first = np.full(s.num_gpus, np.iinfo(np.int64).max, dtype=np.int64)
        last = np.zeros(s.num_gpus, dtype=np.int64)
        for li in forward:
            if li.kernel in kernels:
                first[li.gpu] = min(first[li.gpu], int(st.ln[li.index].start))
                last[li.gpu] = max(last[li.gpu], int(st.ln[li.index].end))
        return np.where(last > 0, last - first, 0)

    cached = not node_gpus and combine[0] == "deepep_cached_notify"
    if node_gpus:
        names = ("deepep_dispatch_internode", "deepep_combine_internode", "deepep_reduce_nodes")
    elif cached:
        # DeepEP's combine reduces at home itself; Buffer.combine launches cached_notify_combine
        # before it (timed with it by tests/test_intranode.py)
        names = ("deepep_dispatch", "deepep_combine", "")
    else:   # the first model: its second kernel reduces at home
        names = ("deepep_dispatch",) + tuple(combine)
    # a run stopped by a limit reports the figures whose kernels finished on every rank
    dispatch_done = kernels_finished(sim, names[:1])
    combine_done = kernels_finished(sim, tuple(combine) + names[1:])
    t_dispatch, t_combine, t_reduce = (ticks(n) for n in names)
    t_combine_call = span(combine) if cached else t_combine + t_reduce
    recv, back = rows * dispatch_bytes, rows * s.row_bytes
    if dispatch_done:
        out.add("system.moe.deepep.dispatch_recv_bytes", float(recv.mean()), "B",
                "bytes of token rows a rank receives in dispatch (one row per token and rank "
                "holding any of its experts, own tokens included; dispatch dtype), mean over ranks")
        out.add("system.moe.deepep.dispatch_GBps", mean_rank_bandwidth_GBps(recv, t_dispatch),
                "GB/s", "DeepEP dispatch bandwidth: bytes received / deepep_dispatch kernel time, "
                "mean over ranks")
    if combine_done:
        out.add("system.moe.deepep.combine_send_bytes", float(back.mean()), "B",
                "bytes of bf16 rows a rank sends back in combine (the rows it received), mean over "
                "ranks")
        out.add("system.moe.deepep.combine_GBps", mean_rank_bandwidth_GBps(back, t_combine),
                "GB/s", "DeepEP combine bandwidth: bytes sent back / combine kernel time "
                "(deepep_combine, which also reduces at home; with home_reduce: kernel the sends "
                "alone, deepep_combine_partials), mean over ranks")
    if node_gpus:
        # DeepEP tests/test_internode.py: num_rdma_token_sent = a rank's (token, node) pairs, the
        # token's own node included; bytes = pairs x hidden x 2 (x (1 + 4/128) / 2 for fp8),
        # the same bytes for combine; over the dispatch / combine kernel time
        nodes = node_rows_sent_per_rank(layer.routing.topk_idx, s.local_experts, node_gpus)
        sent, back = nodes * dispatch_bytes, nodes * s.row_bytes
        if dispatch_done:
            out.add("system.moe.deepep.rdma_send_bytes", float(sent.mean()), "B",
                    "bytes of token rows a rank sends over RDMA in dispatch as DeepEP's internode "
                    "test counts them: one row per (token, node holding any of its experts), its "
                    "own node included; dispatch dtype; mean over ranks")
            out.add("system.moe.deepep.dispatch_rdma_GBps",
                    mean_rank_bandwidth_GBps(sent, t_dispatch), "GB/s",
                    "DeepEP internode dispatch RDMA bandwidth: rdma_send_bytes / "
                    "deepep_dispatch_internode kernel time, mean over ranks")
        if combine_done:
            out.add("system.moe.deepep.combine_rdma_GBps",
                    mean_rank_bandwidth_GBps(back, t_combine + t_reduce), "GB/s",
                    "DeepEP internode combine RDMA bandwidth: the same rows in bf16 / (combine + "
                    "home reduction kernel time: DeepEP's combine kernel does both), mean over "
                    "ranks")
    if not combine_done:
        return
    if cached:
        starts = np.array([int(st.ln[li.index].start) for li in forward
                           if li.kernel == "deepep_cached_notify"], dtype=np.int64)
        if starts.size:
            out.add("system.moe.deepep.combine_entry_skew_us",
                    float(np.mean(starts.max() - starts)) / 1e6, "us",
                    "mean over ranks of how much later the last rank started Buffer.combine "
                    "(deepep_cached_notify): time its barrier spends on the ranks that finished "
                    "the work before it later (here the dispatch; in DeepEP's benchmark loop the "
                    "previous combine), part of combine_reduce_GBps's time")
    out.add("system.moe.deepep.combine_reduce_GBps",
            mean_rank_bandwidth_GBps(back, t_combine_call), "GB/s",
            "the same over the time of DeepEP's Buffer.combine including the home reduction "
            "(deepep_cached_notify's start to deepep_combine's end: DeepEP's combine kernel "
            "does both, after its cached notify; with home_reduce: kernel "
            "deepep_combine_partials + deepep_reduce)")
