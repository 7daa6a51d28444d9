"""Scheme `fastermoe`: FasterMoE (He et al., PPoPP 2022, "FasterMoE: modeling and optimizing
training of large-scale dynamic pre-trained models"; the public fastmoe code,
github.com/laekov/fastmoe: cuda/fastermoe/smart_schedule.h and fmoe/fastermoe/shadow_policy.py) -
a baseline of the MoE-Hub (arXiv 2605.05888) and DySHARP (arXiv 2605.05607) evaluations.

Two techniques, both modelled:

- **Smart scheduling** (the group-wise exchange): the GPUs form n = P / G groups of G consecutive
  ids (G = workload.layer.fastermoe.group_size, fastmoe's FMOE_FASTER_GROUP_SIZE); in step s a GPU
  sends its rows to every member of group (my group + s) % n and receives those of group
  (my group - s) % n. All sends are issued first on the communication stream (S_0 .. S_n-1); the
  compute stream waits for step s's rows (C_s: the local experts over the rows of that group),
  so C_s overlaps S_s+1 ..; the returns R_s (each waiting for C_s) follow the sends on the
  communication stream, as smart_schedule.h orders them.
- **Shadow experts**: after the count exchange, FasterMoE's global policy (shadow_policy.py, the
  paper's formula) sorts the experts by their load over all GPUs and shadows the most loaded ones
  while that lowers its latency estimate 3 c B + 4 f B + m S (B the most loaded unshadowed
  expert's rows, c a row's expert FLOPs at the GPU's peak, f a row's bytes over the GPU's NVLink
  bandwidth, m one expert's weights over that bandwidth, S the experts shadowed so far). A shadowed
  expert's weights are broadcast from its owner to every GPU (on the communication stream, after
  the sends, as smart_schedule.h does), no GPU sends it rows, and every GPU computes its own rows
  for it locally after its last step. The policy's rates are the simulated system's: the peak
  BF16 tensor rate (layer_stats.tensor_peak) and the links' bandwidth per GPU
  (system.nvlink.links_per_gpu x bandwidth), where fastmoe reads them from environment variables.

Launches, in order:
  stream 0  mg_count, mg_allgather (megatron.s: counts per expert, all-gathered), then the host
            round trip (fastermoe.host_sync_latency: the host reads the counts, runs the policy
            and computes the exchange tables), permute_rows (rows in expert order: the unshadowed
            experts' rows in global expert order from row 0, each shadowed expert's own rows in a
            region of `shadow cap` rows from row T*k), fm_put_step x n (the sends), the shadowed
            experts' broadcast (a2a_put of w_gate, w_up, w_down slices), then per step a wait for
            its outputs and fm_put_step (the return; done[g] raised on the home GPU), a wait for
            the shadowed experts' GEMM, gather_rows (the unpermute) and moe_combine.
  stream 1  per step: a wait for its G arrivals, the grouped GEMM (moe_common.s) over the step's
            rows, a flag for the return; then the shadowed experts' grouped GEMM over the GPU's own
            rows with the broadcast copies (after every broadcast arrived).
  stream 2  the shared experts.

Buffers (symmetric, sized for the GPU that needs most): fm_send / fm_ret [T*k + S*shadow cap][H]
in send order; fm_xe / fm_ye [n][El][cap][H] (step, local expert, the group's sources in id
order); fm_swg / fm_swu / fm_swd [S] expert weight copies; control: the exchange and broadcast
tables, rows per step and local expert, rows per shadowed expert, arrival, ready and broadcast
words, plus megatron's count buffers.

What it costs, as modelled: each step's grouped GEMM reads its local experts' weights again (a
step computes a fraction of the rows), so at small batches, where a layer's expert GEMMs are
bound by the weights' HBM reads, the steps multiply that time: Phi-3.5-MoE on 16 H800s (one
157 MB expert per GPU), 64 tokens per GPU, std 0.05 - fastermoe 364.9 us (expert phase 265.7 us,
4 steps) against megatron's 192.9 us (81.9 us).

Training (workload.layer.passes: training, `_backward`): the steps in reverse around per-step
act and dgrad over an expert-major layout, one wgrad (docs/training.md). What it leaves out:
fastmoe's topology-aware gate and, in the backward, the shadowed experts' gradient reduction (a
layer whose policy shadows an expert refuses training); the policy's factors 3 and 4 are its training-step estimate (forward and
backward) as published, kept although only the forward runs here; NCCL's own protocol (each
step's sends are one thread block per peer putting contiguous ranges, as scheme megatron's
all-to-all); fastmoe computes one expert per step call, here each step's local experts are one
grouped GEMM.
"""
import numpy as np

from ..alltoall import (ENTRY_BYTES, KERNELS as A2A_KERNELS, PhasedLaunches, a2a_launch,
                        entries_preset, flag_set_launch, flag_wait_launch, gather_launch,
                        i64_preset, permute_launch, split_pieces)
from ..layer import (ACCT_NAMES, LayerError, SchemePlan, _buf, combine_launch,
                     grouped_gemm_launches, shared_expert_launches)
from ..layer_backward import (KERNELS as BACKWARD_KERNELS, combine_bwd_launch,
                              dispatch_bwd_launch, shared_bwd, sliced_bwd_buffers,
                              sliced_expert_bwd, sorted_row_order)
from ..layer_stats import tensor_peak
from ...config.schema import LaunchConfig
from .megatron import KERNELS as MEGATRON_KERNELS, count_exchange

KERNELS = "workloads/kernels/fastermoe/fastermoe.s"


def shadow_policy(loads, s, cfg):
    """FasterMoE's global shadow policy (fmoe/fastermoe/shadow_policy.py, the PPoPP'22 formula)
    on the per-expert loads (rows over all GPUs): the global expert ids to shadow, most loaded
    first. Rates from the simulated system (see the module docstring); bf16 rows and weights."""
    nv = cfg.system.nvlink
    bw_net = nv.links_per_gpu * nv.bandwidth            # bytes/s out of one GPU
    bw_mm = tensor_peak(cfg)                             # FLOP/s
    send_feature = s.row_bytes / bw_net                  # one row over the network
    send_model = 3 * s.hidden * s.ffn * 2 / bw_net       # one expert's three matrices
    comp = 6.0 * s.hidden * s.ffn / bw_mm                # one row through the expert (fwd)
    order = np.argsort(-loads, kind="stable")
    lat = 3 * comp * loads[order[0]] + 4 * send_feature * loads[order[0]]
    chosen, shadow_time = [], 0.0
    for i in range(len(order) - 1):
        b = loads[order[i + 1]]
        shadow_time += send_model
        new = 3 * comp * b + 4 * send_feature * b + shadow_time
        if new >= lat:
            break
        lat = new
        chosen.append(int(order[i]))
    return chosen


def plan(layer):
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.fastermoe
    P, E, El = s.num_gpus, s.experts, s.local_experts
    rb, pairs, mat = s.row_bytes, s.pairs, s.hidden * s.ffn * 2
    nsm = cfg.system.gpu.num_sms
    tbs, piece = opts.permute_tbs, opts.a2a_chunk_bytes
    G = min(opts.group_size, P)          # fastmoe: a group larger than the world is the world
    if P % G:
        raise LayerError(f"workload.layer.fastermoe.group_size: {opts.group_size} does not divide "
                         f"system.num_gpus ({P}); the group-wise exchange splits the GPUs into "
                         f"equal groups of consecutive ids")
    n = P // G

    # what the host knows after the synchronisation
    counts = np.stack([np.bincount(layer.routing.topk_idx[g].reshape(-1), minlength=E)
                       for g in range(P)]).astype(np.int64)             # [g][e]
    shadow = shadow_policy(counts.sum(axis=0), s, cfg) if opts.shadow == "policy" else []
    S = len(shadow)
    si = {e: i for i, e in enumerate(shadow)}
    sh_cap = max(1, max((int(counts[:, e].max()) for e in shadow), default=1))
    base = np.zeros((P, E), np.int64)
    for g in range(P):
        nb = 0
        for e in range(E):
            if e in si:
                base[g, e] = pairs + si[e] * sh_cap
            else:
                base[g, e] = nb
                nb += counts[g, e]
    sent = counts.copy()
    sent[:, shadow] = 0                                                  # rows that move
    to = sent.reshape(P, P, El)                                          # [src][dst][le]
    # receive regions: dst r, step st (sources of group (r/G - st) % n), local expert le
    region = np.zeros((P, n, El), np.int64)
    prefix = np.zeros((P, P, El), np.int64)                              # [src][dst][le]
    for r in range(P):
        for st in range(n):
            grp = ((r // G - st) % n) * G
            for j in range(G):
                prefix[grp + j, r] = region[r, st]
                region[r, st] += to[grp + j, r]
    cap = max(1, int(region.max()))
    training = cfg.workload.layer.passes == "training"
    why = (f"workload.layer.fastermoe.shadow: the shadow policy replicated {S} expert(s) on this "
           f"routing, and the shadowed experts' weight gradients (computed on every GPU from its "
           f"own rows) would have to be reduced to their owner - that reduction is not built "
           f"(shadow: none trains)") if S else ""
    # where step st's rows of local expert le land in fm_xe / fm_ye: row st * slice_rows +
    # le * expert_rows + (the source's prefix). Forward only: step-major [n][El][cap] (each
    # step's GEMM its own block; the steps share one activation buffer). Training: expert-major
    # [El][n][cap] (each step's GEMM over rows n cap apart, its activations beside the
    # others'), so an expert's rows of every step lie together for the weight gradients
    expert_major = training and not why
    slice_rows, expert_rows = (cap, n * cap) if expert_major else (El * cap, cap)
    fwd, bwd, bcast = [], [], []
    for g in range(P):
        rows_f, rows_b, rows_c = [], [], []
        for r in range(P):
            st = (r // G - g // G) % n              # the step at which g sends to r
            ents_f, ents_b, ents_c = [], [], []
            for le in range(El):
                # g's rows for expert r*El+le into r's region of that step
                ents_f.append((int(base[g, r * El + le]) * rb,
                               int(st * slice_rows + le * expert_rows + prefix[g, r, le]) * rb,
                               int(to[g, r, le]) * rb))
                # g's outputs (as an expert GPU) for r's rows back to r: g received them at the
                # step r sent them, (g / G - r / G) % n
                sb = (g // G - r // G) % n
                ents_b.append((int(sb * slice_rows + le * expert_rows + prefix[r, g, le]) * rb,
                               int(base[r, g * El + le]) * rb, int(to[r, g, le]) * rb))
                if g * El + le in si:
                    ents_c.append((le * mat, si[g * El + le] * mat, mat))
            rows_f.append(split_pieces(ents_f, piece))
            rows_b.append(split_pieces(ents_b, piece))
            rows_c.append(ents_c)
        fwd.append(rows_f)
        bwd.append(rows_b)
        bcast.append(rows_c)

    def per_peer(tables):
        """[g][peer][entries] -> [g][peer * n + i] padded to the longest row (n entries)."""
        width = max(1, max(len(row) for t in tables for row in t))
        flat = [[e for row in t for e in list(row) + [(0, 0, 0)] * (width - len(row))]
                for t in tables]
        return flat, width

    fwd_t, n_fwd = per_peer(fwd)
    bwd_t, n_bwd = per_peer(bwd)
    rows_step = region.reshape(P, n * El)                                # [r][st * El + le]
    step_bytes = El * cap * rb
    count_bufs, count_launches = count_exchange(s, tbs)
    buffers = count_bufs + [
        _buf("fm_cnt", E * 8, region="control", dtype="i64"),
        _buf("fm_base", E * 8, region="control", dtype="i64"),
        _buf("fm_map", pairs * 8, region="control", dtype="i64"),
        _buf("fm_fwd", P * n_fwd * ENTRY_BYTES + 64, region="control", dtype="i64"),
        _buf("fm_bwd", P * n_bwd * ENTRY_BYTES + 64, region="control", dtype="i64"),
        _buf("fm_rows", n * El * 8, region="control", dtype="i64"),
        _buf("fm_arrive", n * 8, region="control", dtype="i64"),
        _buf("fm_ready", n * 8, region="control", dtype="i64"),
        _buf("fm_send", (pairs + S * sh_cap) * rb, dtype="bf16"),
        _buf("fm_ret", (pairs + S * sh_cap) * rb, dtype="bf16"),
        _buf("fm_xe", n * step_bytes, dtype="bf16"),
        _buf("fm_ye", n * step_bytes, dtype="bf16"),
    ]
    presets = {"fm_base": i64_preset(base), "fm_fwd": entries_preset(fwd_t),
               "fm_bwd": entries_preset(bwd_t), "fm_rows": i64_preset(rows_step)}
    gbufs, _ = grouped_gemm_launches(s, 1, nsm, "fm_rows", "fm_xe", "fm_ye", expert_rows)
    buffers += gbufs
    pl = PhasedLaunches()
    add = pl.add
    sbufs, shared = shared_expert_launches(s, cfg, stream=2)
    for launch in shared:
        add(launch, "expert")
    for launch in count_launches:
        add(launch, "mediation")
    add(permute_launch(s, 0, tbs, cnt="@fm_cnt", base="@fm_base", out="@fm_send",
                       map_="@fm_map", cap=pairs, host_delay=opts.host_sync_latency), "dispatch")

    def step_launch(st, ret, src=None, dst=None, arrive="fm_arrive", done="@done"):
        """Step st's sends (ret False: the forward table, `arrive` counted per step) or returns
        (ret True: the backward table, `done` raised on the peers); `src` / `dst` default to the
        forward's buffers."""
        table, entries = ("@fm_bwd", n_bwd) if ret else ("@fm_fwd", n_fwd)
        src = src or ("@fm_ye" if ret else "@fm_send")
        dst = dst or ("@fm_ret" if ret else "@fm_xe")
        return LaunchConfig(kernel="fm_put_step", grid=G, stream=0, params=(
            ("table", table), ("entries", entries), ("src", src), ("dst", dst),
            ("chunk", piece), ("group", G), ("shift", (n - st) % n if ret else st),
            ("arrive", 0 if ret else f"@{arrive} + {8 * st}"),
            ("done", done if ret else 0)))

    for st in range(n):
        add(step_launch(st, False), "dispatch")
    if S:
        bc_t, n_bc = per_peer(bcast)
        buffers += [_buf("fm_bcast_t", P * n_bc * ENTRY_BYTES + 64, region="control", dtype="i64"),
                    _buf("fm_bcast", 8, region="control", dtype="i64"),
                    _buf("fm_shdone", 8, region="control", dtype="i64"),
                    _buf("fm_shrows", S * 8, region="control", dtype="i64"),
                    _buf("fm_swg", S * mat, dtype="bf16"), _buf("fm_swu", S * mat, dtype="bf16"),
                    _buf("fm_swd", S * mat, dtype="bf16")]
        presets["fm_bcast_t"] = entries_preset(bc_t)
        presets["fm_shrows"] = i64_preset(counts[:, shadow])
        # the owner broadcasts its shadowed experts' weights (ncclBcast per expert in fastmoe;
        # here one a2a_put per matrix, the owner's table rows naming every GPU, itself included:
        # it computes its own rows with the copy too); every GPU's last launch adds 1 on every
        # GPU's fm_bcast, so P of them mean every copy is in
        for i, (w, copy) in enumerate((("w_gate", "fm_swg"), ("w_up", "fm_swu"),
                                       ("w_down", "fm_swd"))):
            add(a2a_launch(0, "@fm_bcast_t", n_bc, f"@{w}", f"@{copy}", piece,
                           arrive="@fm_bcast" if i == 2 else 0), "dispatch")
    for st in range(n):
        add(flag_wait_launch(0, f"@fm_ready + {8 * st}", 1), "")
        add(step_launch(st, True), "combine")
    # compute stream: C_0 .. C_n-1, then the shadowed experts
    for st in range(n):
        add(flag_wait_launch(1, f"@fm_arrive + {8 * st}", G), "")
        off = st * slice_rows * rb
        _, gemm = grouped_gemm_launches(s, 1, nsm, f"fm_rows + {st * El * 8}",
                                        f"fm_xe + {off}", f"fm_ye + {off}", expert_rows,
                                        he_rows=st * slice_rows if expert_major else 0)
        for launch in gemm:
            add(launch, "expert")
        add(flag_set_launch(1, f"@fm_ready + {8 * st}", 1), "")
    if S:
        add(flag_wait_launch(1, "@fm_bcast", P), "")
        sb, gemm = grouped_gemm_launches(
            s, 1, nsm, "fm_shrows", f"fm_send + {pairs * rb}", f"fm_ret + {pairs * rb}", sh_cap,
            experts=S, weights=("fm_swg", "fm_swu", "fm_swd"), table="fm_sh_table",
            he="fm_sh_he")
        buffers += sb
        for launch in gemm:
            add(launch, "expert")
        add(flag_set_launch(1, "@fm_shdone", 1), "")
        add(flag_wait_launch(0, "@fm_shdone", 1), "")
    add(gather_launch(s, 0, tbs, map_="@fm_map", src="@fm_ret"), "combine")
    add(combine_launch(s, cfg, stream=0), "combine")
    bbufs, row_order = [], None
    if training and not why:
        bbufs = _backward(s, cfg, add, presets, step_launch, n, G, cap)
        row_order = _row_order(layer, n, G, cap)

    def extra_stats(sim, layer):
        sim.stats.add("system.moe.fastermoe.steps", n, "count",
                      "steps of the group-wise exchange (system.num_gpus / group size)")
        sim.stats.add("system.moe.fastermoe.shadowed_experts", S, "count",
                      "experts the shadow policy replicated on every GPU")
        sim.stats.add("system.moe.fastermoe.shadow_weight_bytes", S * 3 * mat * P, "B",
                      "bytes of the shadowed experts' weight broadcast (every GPU's copy, the "
                      "owner's local one included)")
        sim.stats.add("system.moe.fastermoe.shadowed_rows", int(counts[:, shadow].sum()), "count",
                      "token-expert rows computed where they are, on a shadowed expert's copy")

    return SchemePlan(
        buffers=tuple(buffers + sbufs + bbufs), launches=tuple(pl.launches),
        kernel_files=(A2A_KERNELS, MEGATRON_KERNELS, KERNELS)
        + (BACKWARD_KERNELS if training and not why else ()), presets=presets, n_tile=s.n_tile,
        phases={"mediation": ("mg_count", "mg_allgather"),
                "dispatch": ("permute_rows", "fm_put_step", "a2a_put"),
                "expert": ("grouped_tiles", "grouped_gate_up", "grouped_down", "shared_ffn"),
                "combine": ("fm_put_step", "gather_rows", "moe_combine")},
        launch_phases=tuple(pl.phases),
        mediation_extra_ps=opts.host_sync_latency + cfg.system.gpu.kernel_launch_latency,
        checked_accounting=tuple(a for a in ACCT_NAMES if a != "received"),
        unchecked_why="the exchange moves byte ranges, not counted rows",
        extra_acct=(("dropped", 6, "token-expert pairs dropped (no capacity: none)"),),
        expected_rows={"dropped": 0}, extra_stats=extra_stats,
        backward=not why, backward_why=why, backward_row_order=row_order)


def _backward(s, cfg, add, presets, step_launch, n, G, cap):
    """The backward after the forward, step by step as the smart schedule's forward (its
    autograd runs each step's exchange while another step's expert backward computes), over the
    expert-major layout; returns its buffers. No shadowed expert (plan refuses them).
      stream 0  the shared experts' backward; the combine's backward (dO rows into fm_dsend at
                the forward's send rows, fm_map); per step st the forward's send table carries
                the dO rows of group st to the experts' rows (fm_darrive[st] counts its G
                sources); then per step, once fm_bdone[st] is set, the return table brings its
                dX rows home (each raising bdone on its peers), and moe_dispatch_bwd sums them
      stream 1  per step: wait for its G sources, its tile table, grouped_bwd_act and
                grouped_dgrad over its rows, fm_bdone[st] = 1; after the last step the weight
                gradients over every step's rows of each expert at once (n cap rows from
                le n cap: a step's unused rows are zero and add nothing; the sum autograd
                accumulates step by step, in one pass)"""
    El = s.local_experts
    bufs, tt = sliced_bwd_buffers(s, _buf, presets, "fm", n, cap, s.pairs)
    sbb, slaunches = shared_bwd(s, cfg, 0, _buf)
    for launch, phase in slaunches:
        add(launch, phase)
    add(combine_bwd_launch(s, cfg, 0, "@fm_map", "@fm_dsend"), "backward_dispatch")
    for st in range(n):
        add(step_launch(st, False, src="@fm_dsend", dst="@b_dye", arrive="fm_darrive"),
            "backward_dispatch")
    for launch, phase in sliced_expert_bwd(s, 1, cfg.system.gpu.num_sms, "fm", n, cap, tt,
                                           lambda st: f"fm_rows + {st * El * 8}", "fm_xe", "he",
                                           G):
        add(launch, phase)
    for st in range(n):
        add(flag_wait_launch(0, f"@fm_bdone + {8 * st}", 1), "backward_wait")
        add(step_launch(st, True, src="@b_dxe", dst="@fm_dret", done="@bdone"),
            "backward_combine")
    add(dispatch_bwd_launch(s, cfg, 0, "@fm_dret", "@fm_map"), "backward_combine")
    return bufs + sbb


def _row_order(layer, n, G, cap):
    """{expert: (flat tokens, slots)} in fm_xe's expert-major order: step (the source's group's
    step), then the sources of that group in id order, then each source's rows in its send
    order (fm_map)."""
    s = layer.shape
    P, T, k, El = s.num_gpus, s.tokens, s.top_k, s.local_experts

    def row_order(sim):
        rows = {}
        for src in range(P):
            mp = sim.read_buffer(src, "fm_map", "i64")[:s.pairs]
            idx = layer.routing.topk_idx[src].reshape(-1)
            for e in np.unique(idx):
                r = int(e) // El
                st = (r // G - src // G) % n
                sel = np.nonzero(idx == e)[0]
                rows.setdefault(int(e), []).extend(zip([st] * len(sel), [src] * len(sel), mp[sel],
                                                       src * T + sel // k, sel % k))
        return sorted_row_order(rows)
    return row_order
