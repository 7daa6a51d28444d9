"""Scheme `megatron`: Megatron-LM's all-to-all token dispatcher (MoEAlltoAllTokenDispatcher, as in
Megatron-Core's moe/token_dispatcher.py) with a grouped GEMM - the MoE-Hub paper's first baseline
(arXiv 2605.05888, "Megatron-LM with Transformer Engine").

Stream 0, in order (every step waits for the previous one, as Megatron's single compute stream):
  mg_count       tokens per expert from the routing (red.add per token-expert pair)
  mg_allgather   the counts all-gathered over the expert-parallel group, then a barrier
  (host)         the device-to-host synchronisation: the host reads the counts, computes the
                 all-to-all splits and launches the permutation (megatron.host_sync_latency on
                 the permute launch; the plan writes the splits it computes as tables)
  permute_rows   every pair's row copied into the send buffer in global expert order (rows for
                 peer r are one contiguous range); map[t * k + j] = its row
  a2a_put        the all-to-all with variable splits: one contiguous range per peer (NCCL's
                 send/recv per peer; the own range a local copy), received source-major
  flag_wait      every peer's range is in
  copy_chunks    sort_chunks_by_idxs: the received chunks (source, local expert) reordered to
                 expert-major (skipped with one local expert, as Megatron does)
  grouped GEMM   grouped_tiles, grouped_gate_up, grouped_down (moe_common.s; TE's grouped GEMM)
  copy_chunks    the reverse sort, back to source-major
  a2a_put        the reverse all-to-all into the home GPU's send order; done[gpu] raised on peers
  gather_rows    the unpermute: each pair's output row to its yhome slot
  moe_combine    the weighted sum (common)
Stream 1: the shared experts (common shared_ffn).

Buffers (symmetric: sized for the GPU that needs most): mg_send / mg_ret [T*k][H] in send order,
mg_recv / mg_back [rows received][H] source-major, mg_xe / mg_ye [El][most rows of one local
expert][H] expert-major; control: counts, all-gathered counts, barrier, permute cursors and bases,
map, the all-to-all and sort tables, rows per local expert, the arrival counter.

What it leaves out: the router itself, the probabilities' permutation (a [T*k] vector) and
Megatron's fused unpermute-and-scale (here a gather then moe_combine's weighted sum: one extra
pass over the T*k rows); NCCL's channel and protocol choice (a2a_put puts the ranges directly,
one thread block per peer); the expert capacity option (moe_expert_capacity_factor: scheme tutel
models capacity).
"""
import numpy as np

from ..alltoall import (ENTRY_BYTES, KERNELS as A2A_KERNELS, PhasedLaunches, a2a_launch,
                        copy_launch, entries_preset, flag_wait_launch, gather_launch, i64_preset,
                        pad_tables, permute_launch, split_pieces)
from ..layer_stats import kernels_finished
from ..layer import (ACCT_NAMES, GROUPED_KERNELS, SHARED_KERNELS, SchemePlan, _buf,
                     combine_launch, grouped_gemm_launches, shared_expert_launches)
from ..layer_backward import (KERNELS as BACKWARD_KERNELS, backward_buffers, combine_bwd_launch,
                              dispatch_bwd_launch, expert_bwd_launches, shared_bwd)
from ...config.schema import LaunchConfig

KERNELS = "workloads/kernels/megatron/megatron.s"


def count_exchange(s, tbs, stream=0):
    """Megatron's count exchange (megatron.s), shared with schemes fastermoe and ccfuser: the
    buffers (counts, all-gathered counts, barrier words) and the launches on `stream` - mg_count
    on `tbs` blocks, then mg_allgather."""
    P, E = s.num_gpus, s.experts
    buffers = [_buf("mg_counts", E * 8, region="control", dtype="i64"),
               _buf("mg_allcounts", P * E * 8, region="control", dtype="i64"),
               _buf("mg_bar", P * 8, region="control", dtype="i64")]
    launches = [
        LaunchConfig(kernel="mg_count", grid=tbs, stream=stream, params=(
            ("topk_idx", "@topk_idx"), ("counts", "@mg_counts"), ("tokens", s.tokens),
            ("topk", s.top_k))),
        LaunchConfig(kernel="mg_allgather", grid=1, stream=stream, params=(
            ("counts", "@mg_counts"), ("allcounts", "@mg_allcounts"), ("bar", "@mg_bar"),
            ("experts", E)))]
    return buffers, launches


def plan(layer):
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.megatron
    P, T, k, E, El, H = s.num_gpus, s.tokens, s.top_k, s.experts, s.local_experts, s.hidden
    rb = s.row_bytes
    nsm = cfg.system.gpu.num_sms
    tbs = opts.permute_tbs
    piece = opts.a2a_chunk_bytes

    # what the host knows after the synchronisation: counts[g][e] rows of GPU g for expert e
    counts = np.stack([np.bincount(layer.routing.topk_idx[g].reshape(-1), minlength=E)
                       for g in range(P)]).astype(np.int64)
    send_base = np.concatenate([np.zeros((P, 1), np.int64), np.cumsum(counts, axis=1)[:, :-1]],
                               axis=1)                                  # [g][e]
    to_rank = counts.reshape(P, P, El)                                   # [src][dst rank][le]
    per_pair = to_rank.sum(axis=2)                                       # rows src -> dst
    recv_base = np.concatenate([np.zeros((1, P), np.int64), np.cumsum(per_pair, axis=0)[:-1]],
                               axis=0)                                   # [src][dst]: offset on dst
    recv_rows = max(1, int(per_pair.sum(axis=0).max()))
    rows_le = to_rank.sum(axis=0)                                        # [dst][le]
    cap = max(1, int(rows_le.max()))
    exp_base = np.concatenate([np.zeros((1, P, El), np.int64), np.cumsum(to_rank, axis=0)[:-1]],
                              axis=0)                                    # [src][dst][le]
    sort = El > 1

    fwd, bwd = [], []
    for g in range(P):
        fwd.append([(int(send_base[g, r * El]) * rb, int(recv_base[g, r]) * rb,
                     int(per_pair[g, r]) * rb) for r in range(P)])
        bwd.append([(int(recv_base[r, g]) * rb, int(send_base[r, g * El]) * rb,
                     int(per_pair[r, g]) * rb) for r in range(P)])
    sort_t, unsort_t = [], []
    for r in range(P):
        ents = []
        for src in range(P):
            off = int(recv_base[src, r])
            for le in range(El):
                n = int(to_rank[src, r, le])
                ents.append((off * rb, (le * cap + int(exp_base[src, r, le])) * rb, n * rb))
                off += n
        sort_t.append(split_pieces(ents, piece))
        unsort_t.append([(d, src, n) for src, d, n in sort_t[-1]])
    sort_t, n_sort = pad_tables(sort_t)
    unsort_t, _ = pad_tables(unsort_t)

    pairs = s.pairs
    count_bufs, count_launches = count_exchange(s, tbs)
    buffers = count_bufs + [
        _buf("mg_cnt", E * 8, region="control", dtype="i64"),
        _buf("mg_base", E * 8, region="control", dtype="i64"),
        _buf("mg_map", pairs * 8, region="control", dtype="i64"),
        _buf("mg_fwd", P * ENTRY_BYTES + 64, region="control", dtype="i64"),  # + 64: ld.v8
        _buf("mg_bwd", P * ENTRY_BYTES + 64, region="control", dtype="i64"),
        _buf("mg_rows", El * 8, region="control", dtype="i64"),
        _buf("mg_arrive", 8, region="control", dtype="i64"),
        _buf("mg_send", pairs * rb, dtype="bf16"),
        _buf("mg_ret", pairs * rb, dtype="bf16"),
        _buf("mg_xe", El * cap * rb, dtype="bf16"),
        _buf("mg_ye", El * cap * rb, dtype="bf16"),
    ]
    presets = {"mg_base": i64_preset(send_base), "mg_fwd": entries_preset(fwd),
               "mg_bwd": entries_preset(bwd), "mg_rows": i64_preset(rows_le)}
    # with one local expert the source-major receive layout is the expert-major one
    recv, back = ("@mg_recv", "@mg_back") if sort else ("@mg_xe", "@mg_ye")
    if sort:
        buffers += [_buf("mg_recv", recv_rows * rb, dtype="bf16"),
                    _buf("mg_back", recv_rows * rb, dtype="bf16"),
                    _buf("mg_sort", n_sort * ENTRY_BYTES + 64, region="control", dtype="i64"),
                    _buf("mg_unsort", n_sort * ENTRY_BYTES + 64, region="control", dtype="i64")]
        presets["mg_sort"] = entries_preset(sort_t)
        presets["mg_unsort"] = entries_preset(unsort_t)
    gbufs, gemm = grouped_gemm_launches(s, 0, nsm, "mg_rows", "mg_xe", "mg_ye", cap)
    plan_launches = PhasedLaunches()
    add = plan_launches.add
    sbufs, shared = shared_expert_launches(s, cfg, stream=1)
    for launch in shared:
        add(launch, "expert")
    for launch in count_launches:
        add(launch, "mediation")
    add(permute_launch(s, 0, tbs, cnt="@mg_cnt", base="@mg_base", out="@mg_send",
                       map_="@mg_map", cap=pairs, host_delay=opts.host_sync_latency), "dispatch")
    add(a2a_launch(0, "@mg_fwd", 1, "@mg_send", recv, piece, arrive="@mg_arrive"), "dispatch")
    add(flag_wait_launch(0, "@mg_arrive", P), "dispatch")
    if sort:
        add(copy_launch(0, min(nsm, n_sort), "@mg_sort", n_sort, "@mg_recv", "@mg_xe"),
            "dispatch")
    for launch in gemm:
        add(launch, "expert")
    if sort:
        add(copy_launch(0, min(nsm, n_sort), "@mg_unsort", n_sort, "@mg_ye", "@mg_back"),
            "combine")
    add(a2a_launch(0, "@mg_bwd", 1, back, "@mg_ret", piece, done="@done"), "combine")
    add(gather_launch(s, 0, tbs, map_="@mg_map", src="@mg_ret"), "combine")
    add(combine_launch(s, cfg, stream=0), "combine")
    training = cfg.workload.layer.passes == "training"
    bbufs = []
    if training:
        # the backward, on the same stream: the forward's splits and tables in reverse roles
        # (Megatron's token dispatcher keeps them for the backward: no count exchange, no host
        # round trip); the combine's backward writes each pair's dO into its send row
        # (map), the forward all-to-all table carries them to the experts, the sort makes them
        # expert-major; the experts' dX rows go back by the reverse sort and all-to-all
        bbufs = backward_buffers(s, cap, _buf) + [
            _buf("mg_dsend", pairs * rb, dtype="bf16"),
            _buf("mg_dret", pairs * rb, dtype="bf16"),
            _buf("mg_darrive", 8, region="control", dtype="i64"),
            _buf("mg_bases", El * 8, region="control", dtype="i64")]
        presets["mg_bases"] = i64_preset(np.tile(np.arange(El, dtype=np.int64) * cap, (P, 1)))
        drecv, dback = ("@mg_drecv", "@mg_dback") if sort else ("@b_dye", "@b_dxe")
        if sort:
            bbufs += [_buf("mg_drecv", recv_rows * rb, dtype="bf16"),
                      _buf("mg_dback", recv_rows * rb, dtype="bf16")]
        # the shared experts' backward first, on the main stream (Megatron-Core computes shared
        # experts in line unless moe_shared_expert_overlap is set, which is off by default)
        sbb, slaunches = shared_bwd(s, cfg, 0, _buf)
        bbufs += sbb
        for launch, phase in slaunches:
            add(launch, phase)
        add(combine_bwd_launch(s, cfg, 0, "@mg_map", "@mg_dsend"), "backward_dispatch")
        add(a2a_launch(0, "@mg_fwd", 1, "@mg_dsend", drecv, piece, arrive="@mg_darrive"),
            "backward_dispatch")
        add(flag_wait_launch(0, "@mg_darrive", P), "backward_dispatch")
        if sort:
            add(copy_launch(0, min(nsm, n_sort), "@mg_sort", n_sort, "@mg_drecv", "@b_dye"),
                "backward_dispatch")
        for launch in expert_bwd_launches(s, 0, nsm, "mg_rows", "mg_xe", "he", cap,
                                              "mg_bases"):
            add(launch, "backward_expert")
        if sort:
            add(copy_launch(0, min(nsm, n_sort), "@mg_unsort", n_sort, "@b_dxe", "@mg_dback"),
                "backward_combine")
        add(a2a_launch(0, "@mg_bwd", 1, dback, "@mg_dret", piece, done="@bdone"),
            "backward_combine")
        add(dispatch_bwd_launch(s, cfg, 0, "@mg_dret", "@mg_map"), "backward_combine")

    def row_order(sim):
        """{expert: (flat tokens, slots)} in mg_xe's order: source GPU ascending, then the
        source's send order (its map)."""
        order = {}
        for src in range(P):
            mp = sim.read_buffer(src, "mg_map", "i64")[:pairs]
            idx = layer.routing.topk_idx[src].reshape(-1)
            for e in np.unique(idx):
                sel = np.nonzero(idx == e)[0]
                sel = sel[np.argsort(mp[sel], kind="stable")]
                tok, slot = order.setdefault(int(e), ([], []))
                tok.extend((src * T + sel // k).tolist())
                slot.extend((sel % k).tolist())
        return order

    def extra_stats(sim, layer):
        # the device's all-gathered counts must be what the host used for the splits (a run
        # stopped before the all-gather ended has no counts to compare yet)
        if not kernels_finished(sim, ("mg_allgather",)):
            return
        bad = sum(int(np.count_nonzero(sim.read_buffer(g, "mg_allcounts", "i64")[:P * E]
                                       != counts.reshape(-1))) for g in range(P))
        sim.stats.add("system.moe.megatron.count_mismatches", bad, "count",
                      "all-gathered per-expert counts (every GPU's copy) that differ from the "
                      "routing's: 0 when the count exchange delivered every row")

    return SchemePlan(
        buffers=tuple(buffers + gbufs + sbufs + bbufs), launches=tuple(plan_launches.launches),
        kernel_files=(A2A_KERNELS, KERNELS) + (BACKWARD_KERNELS if training else ()),
        presets=presets, n_tile=s.n_tile, backward=True, backward_row_order=row_order,
        phases={"mediation": ("mg_count", "mg_allgather"),
                "dispatch": ("permute_rows", "a2a_put", "flag_wait")
                + (("copy_chunks",) if sort else ()),
                "expert": GROUPED_KERNELS + SHARED_KERNELS,
                "combine": (("copy_chunks",) if sort else ()) + ("a2a_put", "gather_rows",
                                                                 "moe_combine")},
        launch_phases=tuple(plan_launches.phases),
        mediation_extra_ps=opts.host_sync_latency + cfg.system.gpu.kernel_launch_latency,
        checked_accounting=tuple(a for a in ACCT_NAMES if a != "received"),
        unchecked_why="the all-to-all moves byte ranges, not counted rows",
        extra_acct=(("dropped", 6, "token-expert pairs dropped (no capacity: none)"),),
        expected_rows={"dropped": 0},
        extra_stats=extra_stats)
