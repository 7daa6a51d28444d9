"""Scheme `tutel`: Tutel's fixed-capacity expert parallelism (Tutel, arXiv 2206.03382; its
fast_encode / fast_decode and the all-to-all with overlap) - a baseline of the MoE-Hub paper
(arXiv 2605.05888) and DySHARP (arXiv 2605.05607).

Every expert takes at most C = ceil(capacity_factor x T x k / E) rows from each source GPU
(rounded up to a multiple of `chunks`). The send buffer is [E][C][H]: rows beyond C are dropped
(counted in acct word 6, `system.moe.rows_dropped`; their weight in the combine is zero) and free
slots stay zero padding that is sent and computed like real rows. Because every split is known in
advance (E x C rows for every GPU pair) there is no count exchange, no barrier and no host round
trip: the all-to-all starts as soon as the rows are encoded.

Streams (Tutel's overlap: the capacity is split into `chunks` slices along C; slice c of every
expert moves with its own all-to-all and is computed as soon as it is in, while slice c + 1 moves):
  0  permute_rows (the encode, capacity cap C), then per slice c an a2a_put that lands expert le's
     slice from source s at row s*Cc of [c][le] in tu_recv [chunks][El][P*Cc][H] (the layout
     change of Tutel's all-to-all folded into the puts: El ranges per peer) and counts its
     arrival on the peer (tu_arrive[c])
  2  per slice: flag_wait (tu_arrive[c] = P), the grouped GEMM over the padded [El][P*Cc] rows,
     flag_set tu_done[c]
  3  per slice: flag_wait (tu_done[c]), a2a_put back into the home GPU's tu_ret [E][C][H]; the last
     raises done[gpu] on every peer; then gather_rows (the decode: each kept pair's row, a zero
     row for a dropped one) and moe_combine
  1  the shared experts
The flag_wait launches belong to no phase (a phase spans its kernels' first start to last end).
Thread blocks: the GEMMs take every SM (one job TB each); the all-to-all and the encode/decode
kernels need no shared memory and share the SMs.

What it leaves out: zeroing the padding of the send buffer each call (E x C x H x 2 bytes of HBM
writes; here it starts zero), Tutel's 2-D hierarchical all-to-all (one NVLink domain here), its
dynamic capacity (capacity_factor <= 0) and adaptive parallelism switching; which pairs overflow
an expert follows the order its atomic cursor serves them, not Tutel's slot-priority order (the
number dropped per expert and source is the same).
"""
import math

import numpy as np

from ..alltoall import (ENTRY_BYTES, KERNELS as A2A_KERNELS, PhasedLaunches, a2a_launch,
                        entries_preset, flag_set_launch, flag_wait_launch, gather_launch,
                        i64_preset, permute_launch)
from ..layer import (GROUPED_KERNELS, SHARED_KERNELS, LayerError, SchemePlan, _buf,
                     combine_launch, grouped_gemm_launches, shared_expert_launches)


def capacity(T, k, E, factor, chunks):
    """Rows each expert takes from one source GPU (a multiple of `chunks`)."""
    c = max(1, math.ceil(factor * T * k / E))
    return -(-c // chunks) * chunks


def expected_drops(topk_idx, E, C):
    """Pairs beyond an expert's capacity, per source GPU: sum over (g, e) of max(0, n - C)."""
    P = topk_idx.shape[0]
    n = np.stack([np.bincount(topk_idx[g].reshape(-1), minlength=E) for g in range(P)])
    return int(np.maximum(n - C, 0).sum())


def plan(layer):
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.tutel
    P, T, k, E, El, H = s.num_gpus, s.tokens, s.top_k, s.experts, s.local_experts, s.hidden
    rb = s.row_bytes
    f = opts.capacity_factor
    if not (isinstance(f, (int, float)) and math.isfinite(f) and f > 0):
        raise LayerError(f"workload.layer.tutel.capacity_factor: expected a positive number "
                         f"(Tutel's default is 1.0; rows beyond capacity_factor x tokens x top-k "
                         f"/ experts per expert are dropped), found {f!r}")
    n = opts.chunks
    C = capacity(T, k, E, f, n)
    Cc = C // n
    nsm = cfg.system.gpu.num_sms
    tbs, piece = opts.permute_tbs, opts.a2a_chunk_bytes
    slice_bytes = El * P * Cc * rb                     # one slice of tu_recv / tu_ye

    fwd = np.zeros((P, n, P, El, 3), np.int64)         # [gpu][slice][peer][le]
    bwd = np.zeros((P, n, P, El, 3), np.int64)
    for g in range(P):
        for c in range(n):
            for r in range(P):
                for le in range(El):
                    fwd[g, c, r, le] = (((r * El + le) * C + c * Cc) * rb,
                                        c * slice_bytes + (le * P + g) * Cc * rb, Cc * rb)
                    bwd[g, c, r, le] = (c * slice_bytes + (le * P + r) * Cc * rb,
                                        ((g * El + le) * C + c * Cc) * rb, Cc * rb)
    table_bytes = P * El * ENTRY_BYTES                 # one slice's table
    buffers = [
        _buf("tu_cnt", E * 8, region="control", dtype="i64"),
        _buf("tu_base", E * 8, region="control", dtype="i64"),
        _buf("tu_map", s.pairs * 8, region="control", dtype="i64"),
        _buf("tu_fwd", n * table_bytes + 64, region="control", dtype="i64"),   # + 64: ld.v8
        _buf("tu_bwd", n * table_bytes + 64, region="control", dtype="i64"),
        _buf("tu_rows", El * 8, region="control", dtype="i64"),
        _buf("tu_arrive", n * 8, region="control", dtype="i64"),
        _buf("tu_done", n * 8, region="control", dtype="i64"),
        _buf("tu_send", E * C * rb, dtype="bf16"),
        _buf("tu_ret", E * C * rb, dtype="bf16"),
        _buf("tu_recv", n * slice_bytes, dtype="bf16"),
        _buf("tu_ye", n * slice_bytes, dtype="bf16"),
    ]
    presets = {"tu_base": i64_preset(np.tile(np.arange(E, dtype=np.int64) * C, (P, 1))),
               "tu_fwd": entries_preset(fwd.reshape(P, -1, 3)),
               "tu_bwd": entries_preset(bwd.reshape(P, -1, 3)),
               "tu_rows": i64_preset(np.full((P, El), P * Cc, np.int64))}

    plan_launches = PhasedLaunches()
    add = plan_launches.add
    sbufs, shared = shared_expert_launches(s, cfg, stream=1)
    for launch in shared:
        add(launch, "expert")
    add(permute_launch(s, 0, tbs, cnt="@tu_cnt", base="@tu_base", out="@tu_send",
                       map_="@tu_map", cap=C), "dispatch")
    for c in range(n):
        add(a2a_launch(0, f"@tu_fwd + {c * table_bytes}", El, "@tu_send", "@tu_recv", piece,
                       arrive=f"@tu_arrive + {8 * c}"), "dispatch")
    gbufs = []
    for c in range(n):
        add(flag_wait_launch(2, f"@tu_arrive + {8 * c}", P), "")   # waits: in no phase
        gbufs, gemm = grouped_gemm_launches(s, 2, nsm, "tu_rows", f"tu_recv + {c * slice_bytes}",
                                            f"tu_ye + {c * slice_bytes}", P * Cc)
        for launch in gemm:
            add(launch, "expert")
        add(flag_set_launch(2, f"@tu_done + {8 * c}", 1), "expert")
    for c in range(n):
        add(flag_wait_launch(3, f"@tu_done + {8 * c}", 1), "")
        add(a2a_launch(3, f"@tu_bwd + {c * table_bytes}", El, "@tu_ye", "@tu_ret", piece,
                       done="@done" if c == n - 1 else 0), "combine")
    add(gather_launch(s, 3, tbs, map_="@tu_map", src="@tu_ret"), "combine")
    add(combine_launch(s, cfg, stream=3), "combine")

    dropped = expected_drops(layer.routing.topk_idx, E, C)
    kept = P * s.pairs - dropped

    def kept_pairs(sim):
        return np.stack([sim.read_buffer(g, "tu_map", "i64")[:s.pairs].reshape(T, k) >= 0
                         for g in range(P)])

    def extra_stats(sim, layer):
        sim.stats.add("system.moe.tutel.capacity", C, "count",
                      "rows each expert takes from one source GPU (capacity_factor x tokens x "
                      "top-k / experts, rounded up to a multiple of chunks)")
        sim.stats.add("system.moe.tutel.padding_rows", P * E * C - kept, "count",
                      "zero rows sent and computed as padding (capacity slots no token took)")

    return SchemePlan(
        buffers=tuple(buffers + gbufs + sbufs), launches=tuple(plan_launches.launches),
        kernel_files=(A2A_KERNELS,), presets=presets, n_tile=s.n_tile,
        phases={"mediation": (),
                "dispatch": ("permute_rows", "a2a_put"),
                "expert": GROUPED_KERNELS + ("flag_set",) + SHARED_KERNELS,
                "combine": ("a2a_put", "gather_rows", "moe_combine")},
        launch_phases=tuple(plan_launches.phases),
        checked_accounting=("sent", "computed", "combined"),
        unchecked_why="the all-to-all moves fixed-capacity blocks, padding included",
        expected_rows={"sent": kept, "computed": P * El * P * C, "combined": P * s.pairs,
                       "dropped": dropped},
        extra_acct=(("dropped", 6, "token-expert pairs dropped: beyond their expert's capacity "
                     "for their source GPU"),),
        kept_pairs=kept_pairs, extra_stats=extra_stats)
