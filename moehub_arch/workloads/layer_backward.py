"""The backward pass of one MoE layer (workload.layer.passes: training): the buffers and launches
every scheme's backward shares, its stats, its token accounting and its functional check.

What it models: after the forward, given dy (the gradient of the layer output, a random bf16
[T][H] per GPU standing in for the next layer's), the kernels of
workloads/kernels/common/moe_backward.s - the combine's backward on the home GPU (router-weight
gradients dw and output-gradient rows dO = bf16(w dy), one per token-expert pair), the experts'
dgrad and wgrad over an expert-major buffer (grouped_tiles' table, as the forward's grouped
GEMM), and the dispatch's backward on the home GPU (dx = the pairs' input gradients summed in
slot order) - with the scheme moving the rows between them through its own mechanism (a scheme's
plan calls `backward_launches` with its send / receive steps). The scheme keeps the forward's
routing state (DeepEP's handle, Megatron's splits): the backward repeats no mediation.

Stats (`system.moe.backward.*`): time_us (first start to last end of the backward's launches,
all GPUs), phase times, ideal_compute_us (the busiest GPU's backward GEMM FLOPs - 16 m H I for
m routed rows: the forward's 6 m H I twice plus the gate/up recomputation - at the tensor peak),
overhead_us (time minus that: the exposed part), rows_{dispatched,computed,combined} (each must
equal the pairs; an end-of-run invariant), and in functional mode dx / dw / weight-gradient
errors against moehub_arch/workloads/moe_backward.py (0 when bit-identical).
"""
import numpy as np

from ..config.schema import LaunchConfig
from .alltoall import i64_preset

KERNELS = ("workloads/kernels/common/moe_backward.s", "workloads/kernels/tp/ffn_backward.s")
BACKWARD_PHASES = ("backward_dispatch", "backward_expert", "backward_combine")
BACKWARD_ROWS = ("dispatched", "computed", "combined")      # bacct words 0, 1, 2


def backward_buffers(s, cap, buf, rows=None, tiles=None):
    """The shared backward buffers: dy, dx, dw, accounting, done flags, the expert-major gradient
    rows dO / dX ([El][cap][H], or `rows` packed rows), dG / dU ([El][cap][I], or `rows`), the
    tile table (for `tiles` tiles; by default El ceil(cap / tile_rows)) and the weight gradients
    (fp32, the weights' column-tile layouts). `buf` is layer._buf."""
    El, H, I = s.local_experts, s.hidden, s.ffn
    rows = El * cap if rows is None else rows
    tiles = El * (-(-cap // s.tile_rows)) if tiles is None else tiles
    return [
        buf("dy", s.tokens * s.row_bytes, init="random", dtype="bf16"),
        buf("dx", s.tokens * s.row_bytes, dtype="bf16"),
        buf("dw", s.pairs * 4, dtype="f32"),
        buf("bacct", 4 * 8, region="control", dtype="i64"),
        buf("bdone", s.num_gpus * 8, region="control", dtype="i64"),
        buf("b_dye", rows * s.row_bytes, dtype="bf16"),
        buf("b_dxe", rows * s.row_bytes, dtype="bf16"),
        buf("b_dg", rows * I * 2, dtype="bf16"),
        buf("b_du", rows * I * 2, dtype="bf16"),
        buf("b_table", 64 * (tiles + 1), region="control", dtype="i64"),
        buf("dw_gate", El * H * I * 4, dtype="f32"),
        buf("dw_up", El * H * I * 4, dtype="f32"),
        buf("dw_down", El * H * I * 4, dtype="f32"),
    ]


def combine_bwd_launch(s, cfg, stream, map_, dsend):
    """The combine's backward: dw and the dO rows into `dsend` at the rows `map_` names."""
    return LaunchConfig(kernel="moe_combine_bwd", grid=cfg.workload.layer.combine_tbs,
                        stream=stream, params=(
                            ("dy", "@dy"), ("yhome", "@yhome"), ("topk_w", "@topk_w"),
                            ("map", map_), ("dsend", dsend), ("dw", "@dw"), ("bacct", "@bacct"),
                            ("tokens", s.tokens), ("topk", s.top_k), ("hidden", s.hidden)))


def expert_bwd_launches(s, stream, tbs, counts, xe, he, cap, bases, dye="@b_dye"):
    """The experts' backward over the expert-major dO rows in b_dye ([El][cap] rows; `dye`: an
    expression of another buffer's address holding them so): the tile table (grouped_tiles),
    then `expert_bwd_kernels`. `xe` / `he` name the forward's
    expert-major input rows and activations, `counts` the rows per local expert ([El] i64),
    `bases` each local expert's first row ([El] i64: e * cap)."""
    return [bwd_tiles_launch(s, stream, counts, f"@{xe}", cap, dye=dye)] \
        + expert_bwd_kernels(s, stream, tbs, counts, bases, xe, he, dye=dye)


def bwd_tiles_launch(s, stream, counts, xe, cap, table="@b_table", rows=0, dye="@b_dye"):
    """grouped_tiles for the backward: the tile table at `table` over `counts` rows per local
    expert of the forward's input rows at `xe` (an address expression), each expert `cap` rows
    apart, with dG and dO at the same rows of b_dg and `dye` (b_dye, or an expression of another
    buffer's address holding the dO rows so); `rows` starts every expert's rows that many rows
    in (a slice of a wider layout)."""
    off = (lambda b, w: f"{b} + {rows * w}" if rows else b)
    return LaunchConfig(kernel="grouped_tiles", grid=1, stream=stream, params=(
        ("counts", f"@{counts}"), ("table", table), ("xe", xe), ("he", off("@b_dg", 2 * s.ffn)),
        ("ye", off(dye, s.row_bytes)), ("cap", cap), ("local_experts", s.local_experts),
        ("tile_rows", s.tile_rows), ("hidden", s.hidden), ("ffn", s.ffn)))


def expert_bwd_kernels(s, stream, tbs, counts, bases, xe, he, tilecnt=0, gate=None,
                       table="@b_table", wgrad=True, dye="@b_dye"):
    """grouped_bwd_act, grouped_dgrad (dX into b_dxe) and grouped_wgrad on `tbs` thread blocks
    over the table in b_table (built by the scheme: grouped_tiles or its own); the rows of b_dye
    (or `dye`), b_dxe, b_dg, b_du sit at the same row index as the forward's `xe` / `he` rows.
    `tilecnt`
    (a buffer reference, or 0): grouped_bwd_act waits for each tile's rows there (dO rows still
    arriving); `gate` (a buffer reference): set to 1 between the dgrad and the wgrad (the dX rows
    can go home while the wgrad runs); `table`: the tile table's address; without `wgrad` no
    grouped_wgrad (wgrad_launch after the last slice of a sliced backward)."""
    common = (("hidden", s.hidden), ("ffn", s.ffn))
    tile = (("tile_rows", s.tile_rows), ("n_tile", s.n_tile))
    return [
        LaunchConfig(kernel="grouped_bwd_act", grid=tbs, stream=stream, params=(
            ("table", table), ("tilecnt", tilecnt), ("dg", "@b_dg"), ("du", "@b_du"),
            ("wg", "@w_gate"), ("wu", "@w_up"), ("wd", "@w_down"), ("bacct", "@bacct"))
            + common + tile),
        LaunchConfig(kernel="grouped_dgrad", grid=tbs, stream=stream, params=(
            ("table", table), ("dg", "@b_dg"), ("du", "@b_du"), ("wg", "@w_gate"),
            ("wu", "@w_up"), ("dye", dye), ("dxe", "@b_dxe")) + common + tile),
    ] + ([LaunchConfig(kernel="flag_set", grid=1, stream=stream,
                       params=(("addr", gate), ("value", 1)))] if gate else []) \
        + ([wgrad_launch(s, stream, tbs, counts, bases, xe, he, dye)] if wgrad else [])


def wgrad_launch(s, stream, tbs, counts, bases, xe, he, dye="@b_dye"):
    """grouped_wgrad: the routed experts' fp32 weight gradients over `counts` rows per local
    expert from `bases` ([El] i64 first rows) of the forward's `xe` / `he` rows and the backward's
    dG, dU and dO (`dye`) rows."""
    return LaunchConfig(kernel="grouped_wgrad", grid=tbs, stream=stream, params=(
        ("counts", f"@{counts}"), ("bases", f"@{bases}"), ("xe", f"@{xe}"),
        ("he", f"@{he}"), ("dg", "@b_dg"), ("du", "@b_du"), ("dye", dye),
        ("dwg", "@dw_gate"), ("dwu", "@dw_up"), ("dwd", "@dw_down"),
        ("local_experts", s.local_experts), ("hidden", s.hidden), ("ffn", s.ffn),
        ("n_tile", s.n_tile)))


def sliced_bwd_buffers(s, buf, presets, prefix, n, slice_rows, send_rows):
    """The buffers of a backward run slice by slice over an expert-major layout (each local
    expert's rows of every slice together: n slices of `slice_rows` rows, expert le from row
    le n slice_rows): the shared backward buffers with n tile tables, and `prefix`_dsend /
    _dret (`send_rows` rows: the dO and dX rows at home), _darrive / _bdone (a word per slice:
    its rows arrived, its act and dgrad done), _bbases / _brows (each expert's first row and its
    rows of every slice, preset). Returns (buffers, tiles of one slice's table)."""
    P, El, rb = s.num_gpus, s.local_experts, s.row_bytes
    rows = n * slice_rows
    tt = El * -(-slice_rows // s.tile_rows)
    presets[f"{prefix}_bbases"] = i64_preset(np.tile(np.arange(El, dtype=np.int64) * rows,
                                                     (P, 1)))
    presets[f"{prefix}_brows"] = i64_preset(np.full((P, El), rows, np.int64))
    return backward_buffers(s, rows, buf, tiles=n * (tt + 1) - 1) + [
        buf(f"{prefix}_dsend", send_rows * rb, dtype="bf16"),
        buf(f"{prefix}_dret", send_rows * rb, dtype="bf16"),
        buf(f"{prefix}_darrive", n * 8, region="control", dtype="i64"),
        buf(f"{prefix}_bdone", n * 8, region="control", dtype="i64"),
        buf(f"{prefix}_bbases", El * 8, region="control", dtype="i64"),
        buf(f"{prefix}_brows", El * 8, region="control", dtype="i64")], tt


def sliced_expert_bwd(s, stream, tbs, prefix, n, slice_rows, tt, counts, xe, he, sources):
    """[(launch, phase)] of the experts' backward slice by slice on `stream` (buffers of
    sliced_bwd_buffers): per slice c, a wait for its `sources` arrivals (`prefix`_darrive[c]),
    its tile table (`counts(c)`: the [El] row counts' buffer expression; its rows c slice_rows
    into each expert's, of the forward's `xe`), grouped_bwd_act and grouped_dgrad, then
    _bdone[c] = 1; after the last slice one grouped_wgrad over every slice's rows (the slices'
    sums, which autograd accumulates slice by slice, in one pass; rows a slice leaves unused
    hold zeros and add nothing)."""
    rows, rb = n * slice_rows, s.row_bytes
    out = []
    for c in range(n):
        table = f"@b_table + {c * 64 * (tt + 1)}"
        # a wait sits on its SM from the forward's end on (in no pass: not the backward's time,
        # and not the forward's)
        out.append((LaunchConfig(kernel="flag_wait", grid=1, stream=stream, params=(
            ("addr", f"@{prefix}_darrive + {8 * c}"), ("value", sources))), "backward_wait"))
        out.append((bwd_tiles_launch(s, stream, counts(c), f"@{xe} + {c * slice_rows * rb}",
                                     rows, table=table, rows=c * slice_rows), "backward_expert"))
        out += [(launch, "backward_expert") for launch in expert_bwd_kernels(
            s, stream, tbs, f"{prefix}_brows", f"{prefix}_bbases", xe, he, table=table,
            wgrad=False)]
        out.append((LaunchConfig(kernel="flag_set", grid=1, stream=stream, params=(
            ("addr", f"@{prefix}_bdone + {8 * c}"), ("value", 1))), "backward_expert"))
    out.append((wgrad_launch(s, stream, tbs, f"{prefix}_brows", f"{prefix}_bbases", xe, he),
                "backward_expert"))
    return out


def sorted_row_order(rows):
    """{expert: [(sort keys..., flat token, slot)]} -> {expert: (flat tokens, slots)} with each
    expert's rows in the order of their keys (a SchemePlan.backward_row_order answer)."""
    order = {}
    for e, r in rows.items():
        r = sorted(r)
        order[e] = ([int(x[-2]) for x in r], [int(x[-1]) for x in r])
    return order


def dispatch_bwd_launch(s, cfg, stream, dret, map_):
    """The dispatch's backward: dx from the shared experts' input gradients and the pairs' rows
    in `dret` (row map_[t k + j]) once every GPU has set bdone (and the shared experts'
    backward bsdone)."""
    return LaunchConfig(kernel="moe_dispatch_bwd", grid=cfg.workload.layer.combine_tbs,
                        stream=stream, params=(
                            ("dret", dret), ("map", map_), ("dx", "@dx"), ("dxs", "@b_dxs"),
                            ("one", "@one"), ("done", "@bdone"), ("sdone", "@b_sdone"),
                            ("bacct", "@bacct"), ("shared", s.shared), ("tokens", s.tokens),
                            ("topk", s.top_k), ("hidden", s.hidden)))


def shared_bwd(s, cfg, stream, buf, done_flag=True):
    """The shared experts' backward (no communication): per shared expert the dense FFN backward
    kernels of workloads/kernels/tp/ffn_backward.s (ffn_bwd_act, ffn_dgrad into b_dxs[s],
    ffn_wgrad into ds_gate / ds_up / ds_down[s]) over the GPU's tokens, then b_sdone = 1, on
    `stream` in the backward's order. (On a stream of their own they would have to wait for the
    backward's start - dy exists once the forward is done - and a waiting thread block would sit
    on an SM during the forward: the engine has no cross-stream event that waits off the SMs.)
    Returns (buffers, [(launch, phase)]); no launches without shared experts. Without
    `done_flag` no b_sdone (a scheme whose gradient combine follows on the same stream). `buf`
    is layer._buf."""
    T, H, Is, S = s.tokens, s.hidden, s.shared_ffn, s.shared
    _buf = buf
    bufs = [_buf("b_sdone", 8, region="control", dtype="i64"),
            _buf("b_dxs", max(S, 1) * T * s.row_bytes, dtype="bf16")]
    if not S:
        return bufs, []
    bufs += [_buf("b_sdg", T * Is * 2, dtype="bf16"), _buf("b_sdu", T * Is * 2, dtype="bf16"),
             _buf("ds_gate", S * H * Is * 4, dtype="f32"),
             _buf("ds_up", S * H * Is * 4, dtype="f32"),
             _buf("ds_down", S * H * Is * 4, dtype="f32")]
    tbs = cfg.workload.layer.shared_tbs
    dims = (("tokens", T), ("hidden", H), ("ffn", Is))
    out = []
    for e in range(S):
        w, g = e * H * Is * 2, e * H * Is * 4
        wts = (("wg", f"@ws_gate + {w}"), ("wu", f"@ws_up + {w}"))
        out += [(launch, "backward_expert") for launch in (
            LaunchConfig(kernel="ffn_bwd_act", grid=tbs, stream=stream, params=(
                ("x", "@x"), ("dy", "@dy")) + wts + (("wd", f"@ws_down + {w}"),
                ("dg", "@b_sdg"), ("du", "@b_sdu")) + dims
                + (("tile_rows", s.tile_rows), ("n_tile", s.n_tile))),
            LaunchConfig(kernel="ffn_dgrad", grid=tbs, stream=stream, params=(
                ("dg", "@b_sdg"), ("du", "@b_sdu")) + wts
                + (("dxr", f"@b_dxs + {e * T * s.row_bytes}"),) + dims
                + (("tile_rows", s.tile_rows), ("n_tile", s.n_tile))),
            LaunchConfig(kernel="ffn_wgrad", grid=tbs, stream=stream, params=(
                ("x", "@x"), ("dy", "@dy"), ("hs", f"@hs + {e * T * Is * 2}"), ("dg", "@b_sdg"),
                ("du", "@b_sdu"), ("dwg", f"@ds_gate + {g}"), ("dwu", f"@ds_up + {g}"),
                ("dwd", f"@ds_down + {g}")) + dims + (("n_tile", s.n_tile),)))]
    if done_flag:
        out.append((LaunchConfig(kernel="flag_set", grid=1, stream=stream,
                                 params=(("addr", "@b_sdone"), ("value", 1))), "backward_expert"))
    return bufs, out


def backward_flops(layer):
    """Backward GEMM FLOPs per GPU [P]: 16 H I per routed row its experts receive."""
    s = layer.shape
    rows = np.bincount(layer.routing.topk_idx.reshape(-1), minlength=s.experts)
    return rows.reshape(s.num_gpus, s.local_experts).sum(axis=1).astype(np.float64) \
        * 16.0 * s.hidden * s.ffn


def add_backward_stats(sim, layer, starts, ends, tensor_peak):
    """system.moe.backward.*: times of the backward's launches and its row counts."""
    out, plan = sim.stats, layer.plan
    by = plan.launch_phases
    idx = [i for i, l in enumerate(sim.launches) if by[l.config_index] in BACKWARD_PHASES]
    if not idx:
        return
    span = int(max(ends[i] for i in idx) - min(starts[i] for i in idx))
    out.add("system.moe.backward.time_us", span * 1e-6, "us",
            "the layer's backward: first start to last end of its launches over all GPUs")
    for phase in BACKWARD_PHASES:
        per_gpu = []
        for g in range(layer.shape.num_gpus):
            j = [i for i in idx if sim.launches[i].gpu == g
                 and by[sim.launches[i].config_index] == phase]
            if j:
                per_gpu.append(max(ends[i] for i in j) - min(starts[i] for i in j))
        out.add(f"system.moe.backward.{phase[9:]}_us",
                float(np.mean(per_gpu)) * 1e-6 if per_gpu else 0.0, "us",
                f"backward phase {phase[9:]}: first start to last end of its launches, mean over "
                f"GPUs")
    names = sorted({sim.launches[i].kernel for i in idx})
    for name in names:
        per_gpu = np.zeros(layer.shape.num_gpus)
        for i in idx:
            if sim.launches[i].kernel == name:
                per_gpu[sim.launches[i].gpu] += ends[i] - starts[i]
        out.add(f"system.moe.backward.kernel.{name}_us", float(per_gpu.mean()) * 1e-6, "us",
                f"backward: the summed durations of kernel '{name}''s launches, mean over GPUs")
    ideal = float((backward_flops(layer) / tensor_peak).max()) * 1e12
    out.add("system.moe.backward.ideal_compute_us", ideal * 1e-6, "us",
            "the busiest GPU's backward expert GEMM FLOPs (16 H I per routed row: dgrad, wgrad "
            "and the gate/up recomputation) at the peak BF16 tensor rate")
    out.add("system.moe.backward.overhead_us", (span - ideal) * 1e-6, "us",
            "backward time minus its ideal compute: communication and imbalance not hidden")
    counts = np.zeros(4, np.int64)
    for g in range(layer.shape.num_gpus):
        counts += sim.read_buffer(g, "bacct", "i64")[:4]
        for name, word, into in plan.backward_acct:
            counts[into] += sim.read_buffer(g, name, "i64")[word]
    for i, name in enumerate(BACKWARD_ROWS):
        out.add(f"system.moe.backward.rows_{name}", int(counts[i]), "count",
                f"token-expert gradient rows {name} in the backward over all GPUs (must equal "
                f"tokens x top-k x GPUs, or the kept pairs and padding the scheme names)")


def backward_invariants(sim, layer):
    """Every pair's output gradient dispatched, computed and its input gradient combined once."""
    s = layer.shape
    want = dict.fromkeys(BACKWARD_ROWS, s.num_gpus * s.pairs)
    want.update(layer.plan.backward_expected_rows)
    bad = [f"{n} {int(sim.stats[f'system.moe.backward.rows_{n}'])} (expected {want[n]})"
           for n in BACKWARD_ROWS if f"system.moe.backward.rows_{n}" in sim.stats
           and int(sim.stats[f"system.moe.backward.rows_{n}"]) != want[n]]
    if not bad:
        return []
    return [f"backward token accounting in scheme '{sim.cfg.scheme}': each of the "
            f"{s.num_gpus * s.pairs} token-expert pairs the forward kept must have its output "
            f"gradient dispatched, computed and its input gradient combined exactly once (a "
            f"scheme's padding rows computed as well); found {', '.join(bad)}"]


def check_backward(sim, layer, x, wg, wu, wd, unslice):
    """Functional mode: dx, dw and the routed experts' weight gradients against the NumPy
    reference (moe_backward.py), with each expert's rows in the order the scheme's buffer holds
    them (plan.backward_row_order), and the shared experts' (each GPU's own copy). Stats:
    system.moe.backward.{dx,dw,dw_gate,dw_up,dw_down,ds_gate,ds_up,ds_down}_max_abs_error and the
    references' scales."""
    from .moe_backward import moe_layer_backward_reference
    from .reference import max_abs_error, to_bf16
    s = layer.shape
    P, T, H, I, El, k = s.num_gpus, s.tokens, s.hidden, s.ffn, s.local_experts, s.top_k
    dy = np.stack([sim.read_buffer(g, "dy").reshape(T, H) for g in range(P)])
    order = layer.plan.backward_row_order(sim) if layer.plan.backward_row_order else None
    shared = {}
    if s.shared:
        S, Is, n = s.shared, s.shared_ffn, s.n_tile
        for name, key, cols in (("ws_gate", "shared_gate", Is), ("ws_up", "shared_up", Is),
                                ("ws_down", "shared_down", H)):
            shared[key] = np.stack([unslice(sim.read_buffer(g, name).reshape(S, -1), n, cols)
                                    for g in range(P)])
    kept = layer.plan.kept_pairs(sim) if layer.plan.kept_pairs is not None else None
    ref = moe_layer_backward_reference(x, layer.routing.topk_idx, layer.routing.topk_weight,
                                       wg, wu, wd, dy, expert_rows=order, kept=kept, **shared,
                                       **layer.plan.backward_reference)
    if layer.plan.backward_dx_f32:
        # the scheme's gradient combine writes fp32 (as its forward's): dx is its bf16 rounding
        dx = np.stack([to_bf16(sim.read_buffer(g, layer.plan.backward_dx_f32, "f32")
                               [:T * H].reshape(T, H)) for g in range(P)])
    else:
        dx = np.stack([sim.read_buffer(g, "dx").reshape(T, H) for g in range(P)])
    got = {"dx": dx,
           "dw": np.stack([sim.read_buffer(g, "dw").reshape(T, k) for g in range(P)])}
    n = s.n_tile
    for name, cols in (("dw_gate", I), ("dw_up", I), ("dw_down", H)):
        w = np.concatenate([sim.read_buffer(g, name).reshape(El, -1) for g in range(P)])
        got[name] = unslice(w, n, cols)
    for name, cols in (("ds_gate", s.shared_ffn), ("ds_up", s.shared_ffn), ("ds_down", H)):
        if s.shared:
            got[name] = np.stack([unslice(sim.read_buffer(g, name).reshape(s.shared, -1), n, cols)
                                  for g in range(P)])
    for name, v in got.items():
        sim.stats.add(f"system.moe.backward.{name}_max_abs_error",
                      float(max_abs_error(v, ref[name])), "",
                      f"largest |simulated - NumPy reference| of {name} (moe_backward.py)")
        sim.stats.add(f"system.moe.backward.{name}_max_abs_reference",
                      float(np.abs(ref[name]).max()), "", f"largest |reference {name}| (scale)")
