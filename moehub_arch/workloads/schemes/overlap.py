"""Scheme `overlap`: the best software overlap we know of (Comet, MLSys 2025 / FlashDMoE, NeurIPS 2025 style).

Still address-centric: the count exchange (DeepEP's layout and notify kernels, on the device)
must finish before rows move, because a sender needs the receive offsets. What it removes is the
host round trip and the bulk-synchronous phases: rows move through DeepEP's channelised rings
(its sender TBs), a receiver TB per ring unpacks them into tile-aligned expert regions and counts
every landed row in its GEMM tile's counter; persistent GEMM blocks take tiles in the order the
rings fill them, start each tile's SwiGLU jobs as soon as its counter is full, and send each output
row home as soon as its tile is done; the common moe_combine then sums at home.
Kernels: workloads/kernels/overlap/overlap.s (receivers, GEMM blocks) and
workloads/kernels/deepep/deepep.s (layout, notify, dispatch senders).

Streams: 0 layout -> notify -> dispatch senders (no host delay); 2 receivers, and 3 GEMM blocks
then moe_combine, both launched with the layer and waiting for notify's "tile table complete"
flag; 1 shared experts. Thread blocks: workload.layer.overlap.comm_sms / 2 channels as in DeepEP
(a sender and a receiver block per channel, each of one warp group per peer and each on an SM of
its own) and workload.layer.overlap.compute_tbs GEMM blocks on the other SMs.

Receive buffers are provisioned for the worst case, since no host sizes them after the count
exchange: every source may send every token to min(top-k, local experts) experts here, plus a
tile of alignment per local expert.
"""
import numpy as np

from ...config.schema import LaunchConfig
from ..alltoall import KERNELS as A2A_KERNELS, flag_wait_launch, i64_preset
from ..deepep_backward import KERNELS as DEEPEP_BACKWARD_KERNELS
from ..layer import (SHARED_KERNELS, LayerError, SchemePlan, _buf, combine_launch,
                     shared_expert_launches)
from ..layer_backward import (KERNELS as BACKWARD_KERNELS, backward_buffers, combine_bwd_launch,
                              dispatch_bwd_launch, expert_bwd_kernels, shared_bwd)
from .deepep import (DISPATCH_SMEM_BYTES, EPOCH, KERNELS as DEEPEP_KERNELS,
                     layout_kernel, mediation_and_dispatch, tma_staging_bytes)

KERNELS = "workloads/kernels/overlap/overlap.s"
BACKWARD = "workloads/kernels/overlap/backward.s"


def plan(layer):
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.overlap
    P, T, k, El, H, I = s.num_gpus, s.tokens, s.top_k, s.local_experts, s.hidden, s.ffn
    tile = s.tile_rows
    C = max(1, opts.comm_sms // 2)
    rows_cap = P * T * min(k, El) + El * tile
    tiles_cap = -(-rows_cap // tile)
    buffers, launches = mediation_and_dispatch(
        layer, comm_sms=opts.comm_sms, ring_rows=opts.ring_rows, rows_cap=rows_cap,
        tiles_cap=tiles_cap, align=tile, host_delay=0, receivers=False)
    # the sender and receiver channel blocks hold DeepEP's 192 KB of shared memory (and every
    # stream slot of their SMs): no persistent GEMM block fits beside either, so the
    # GEMM blocks must leave comm_sms SMs to them (Comet and FlashDMoE also give communication
    # whole thread blocks of their own), or the senders would never be placed
    nsm = cfg.system.gpu.num_sms
    if opts.compute_tbs > nsm - 2 * C:
        raise LayerError(
            f"workload.layer.overlap.compute_tbs: {opts.compute_tbs} persistent GEMM blocks (one "
            f"per SM: their shared memory fills most of an SM) and {2 * C} communication blocks "
            f"(comm_sms {opts.comm_sms}: {C} sender and {C} receiver channel blocks, each on an SM "
            f"of its own) do not fit system.gpu.num_sms ({nsm}): at most {nsm - 2 * C} GEMM blocks")
    buffers += [
        _buf("ov_tilecnt", tiles_cap * 8, region="control", dtype="i64"),
        _buf("ov_home", rows_cap * 8 + 64, region="control", dtype="i64"),  # + 64: ld.v8 past the end
        _buf("ov_jobs", (2 + 2 * tiles_cap) * 8, region="control", dtype="i64"),
        _buf("ov_hh", rows_cap * I * 2, dtype="bf16"),
        _buf("ov_y", rows_cap * s.row_bytes, dtype="bf16"),
    ]
    launches += [
        # one block per channel with one warp group per source ring, as DeepEP's receiver SMs; its
        # row copies are TMA-like bulk copies (`copy`) as DeepEP's SM90 receivers' are
        # (intranode.cu: tma_load_1d / tma_store_1d through each warp's staging buffer), so it
        # holds the same 192 KB of staging
        LaunchConfig(kernel="overlap_receive", grid=C, warp_groups=P, stream=2,
                     dynamic_smem=tma_staging_bytes(cfg, DISPATCH_SMEM_BYTES), params=(
            ("ring_x", "@dp_ring_x"), ("ring_ctl", "@dp_ring_ctl"), ("ntf", "@dp_ntf"),
            ("info", "@dp_info"), ("cursor", "@dp_cursor"), ("recv_x", "@dp_recv_x"),
            ("tilecnt", "@ov_tilecnt"), ("home", "@ov_home"), ("acct", "@acct"),
            ("tokens", T), ("topk", k), ("hidden", H), ("channels", C),
            ("ring_rows", opts.ring_rows), ("local_experts", El), ("tile_rows", tile),
            ("epoch", EPOCH))),
        LaunchConfig(kernel="overlap_expert", grid=opts.compute_tbs, stream=3, params=(
            ("tiles", "@dp_tiles"), ("info", "@dp_info"), ("tilecnt", "@ov_tilecnt"),
            ("home", "@ov_home"), ("jobs", "@ov_jobs"), ("recv_x", "@dp_recv_x"),
            ("hh", "@ov_hh"), ("y", "@ov_y"), ("yhome", "@yhome"), ("wg", "@w_gate"),
            ("wu", "@w_up"), ("wd", "@w_down"), ("acct", "@acct"), ("done", "@done"),
            ("hidden", H), ("ffn", I), ("tile_rows", tile), ("n_tile", s.n_tile),
            ("epoch", EPOCH), ("swizzle", s.stream_swizzle))),
    ]
    # the shared experts are launched (placed) before the persistent GEMM blocks, which would
    # otherwise hold every SM until the end: they run while the counts are exchanged and rows move
    sbufs, shared = shared_expert_launches(s, cfg, stream=1)
    launches = shared + launches + [combine_launch(s, cfg, stream=3)]
    phases = {"mediation": (layout_kernel(s.num_gpus), "deepep_notify"),
              "dispatch": ("deepep_dispatch", "overlap_receive"),
              "expert": ("overlap_expert",) + SHARED_KERNELS,
              "combine": ("moe_combine",)}
    by_kernel = {k: p for p, names in phases.items() for k in names}
    launch_phases = [by_kernel.get(l.kernel, "") for l in launches]
    training = cfg.workload.layer.passes == "training"
    bbufs, presets, row_order = [], {}, None
    if training:
        bbufs, blaunches, presets, row_order = backward_plan(layer, rows_cap, tiles_cap)
        launches += [launch for launch, _ in blaunches]
        launch_phases += [phase for _, phase in blaunches]
    return SchemePlan(
        buffers=tuple(buffers + sbufs + bbufs), launches=tuple(launches),
        kernel_files=(DEEPEP_KERNELS, KERNELS) + ((A2A_KERNELS, DEEPEP_BACKWARD_KERNELS, BACKWARD)
                                                  + BACKWARD_KERNELS if training else ()),
        presets=presets, n_tile=s.n_tile, phases=phases, launch_phases=tuple(launch_phases),
        backward=True, backward_row_order=row_order)


def backward_plan(layer, rows_cap, tiles_cap, handle=("dp_tiles", "dp_info", "ov_home"),
                  xe="dp_recv_x", hh="ov_hh", comm_tbs=None, gemm_tbs=None):
    """The backward (workloads/kernels/overlap/backward.s): (buffers, [(launch, phase)], presets,
    row_order). The forward's row positions (`handle`'s home buffer: source << 32 | slot per
    receive row) and tile table (its tiles and info buffers, DeepEP's tile-table layout) are its
    handle: the gradient dispatch reads each position's dO row from its home GPU tile by tile
    (`comm_tbs` blocks; default the forward's 2 x comm_sms / 2 channel blocks) while the
    persistent backward GEMM blocks (grouped_bwd_act, `gemm_tbs`; default the SMs those leave)
    wait on each tile's counter; the dX rows go home while the weight gradients are computed.
    `xe` / `hh` name the forward's received rows and activations. Scheme ccfuser's backward is
    this one over its own handle (its forward pulls rows into tiles as this backward does)."""
    s, cfg = layer.shape, layer.cfg
    P, T, k, El, H = s.num_gpus, s.tokens, s.top_k, s.local_experts, s.hidden
    tile, pairs = s.tile_rows, s.pairs
    nsm = cfg.system.gpu.num_sms
    if comm_tbs is None:
        comm_tbs = 2 * max(1, cfg.workload.layer.overlap.comm_sms // 2)
    if gemm_tbs is None:
        gemm_tbs = nsm - comm_tbs
    # rows per local expert and each region's first row: the forward's layout, regions aligned
    # to tiles (deepep.s deepep_notify with align = tile rows)
    counts = np.stack([np.bincount(layer.routing.topk_idx.reshape(-1), minlength=s.experts)
                       .reshape(P, El)[g] for g in range(P)]).astype(np.int64)
    aligned = -(-counts // tile) * tile
    bases = np.concatenate([np.zeros((P, 1), np.int64), np.cumsum(aligned, axis=1)[:, :-1]],
                           axis=1)
    buffers = backward_buffers(s, 1, _buf, rows=rows_cap, tiles=tiles_cap) + [
        _buf("ov_bcounts", El * 8, region="control", dtype="i64"),
        _buf("ov_bbases", El * 8, region="control", dtype="i64"),
        _buf("ov_bmap", pairs * 8, region="control", dtype="i64"),
        _buf("ov_bready", P * 8, region="control", dtype="i64"),
        _buf("ov_bstart", 8, region="control", dtype="i64"),
        _buf("ov_btilecnt", tiles_cap * 8, region="control", dtype="i64"),
        _buf("ov_bdgrad", 8, region="control", dtype="i64"),
        _buf("ov_bjobs", 8, region="control", dtype="i64"),
        _buf("ov_dsend", pairs * s.row_bytes, dtype="bf16"),
        _buf("ov_dret", pairs * s.row_bytes, dtype="bf16"),
    ]
    presets = {"ov_bcounts": i64_preset(counts), "ov_bbases": i64_preset(bases),
               "ov_bmap": i64_preset(np.tile(np.arange(pairs, dtype=np.int64), (P, 1)))}
    sbufs, shared = shared_bwd(s, cfg, 3, _buf)
    buffers += sbufs
    home_buf = handle[2]
    handle = tuple((name, f"@{b}") for name, b in zip(("tiles", "info", "home"), handle))
    out = [
        # the combine's backward at home: dw, and dO rows in slot order (the forward's yhome order)
        (combine_bwd_launch(s, cfg, 3, "@ov_bmap", "@ov_dsend"), "backward_dispatch"),
        (LaunchConfig(kernel="overlap_bwd_ready", grid=1, stream=3, params=(
            ("ready", "@ov_bready"), ("start", "@ov_bstart"))), "backward_dispatch"),
        # stream 2: idle until this GPU's backward begins (not part of the backward's time)
        (flag_wait_launch(2, "@ov_bstart", 1), "backward_wait"),
        (LaunchConfig(kernel="overlap_bwd_pull", grid=comm_tbs, stream=2, params=handle[:2] + (
            ("ready", "@ov_bready"), handle[2], ("dsend", "@ov_dsend"),
            ("dye", "@b_dye"), ("tilecnt", "@ov_btilecnt"), ("hidden", H))),
         "backward_dispatch"),
        (LaunchConfig(kernel="overlap_bwd_home", grid=comm_tbs, stream=2, params=handle + (
            ("dxe", "@b_dxe"), ("dret", "@ov_dret"), ("gate", "@ov_bdgrad"),
            ("jobs", "@ov_bjobs"), ("done", "@bdone"), ("hidden", H))), "backward_combine"),
    ] + list(shared) + [
        (LaunchConfig(kernel="deepep_bwd_tiles", grid=1, stream=3, params=handle[:2] + (
            ("table", "@b_table"), ("xe", f"@{xe}"), ("dg", "@b_dg"), ("dye", "@b_dye"),
            ("hidden", H), ("ffn", s.ffn))), "backward_expert"),
    ] + [(launch, "backward_expert") for launch in expert_bwd_kernels(
        s, 3, gemm_tbs, "ov_bcounts", "ov_bbases", xe, hh, tilecnt="@ov_btilecnt",
        gate="@ov_bdgrad")] + [
        (dispatch_bwd_launch(s, cfg, 3, "@ov_dret", "@ov_bmap"), "backward_combine")]

    def row_order(sim):
        """{expert: (flat tokens, slots)} in the receive buffer's order: the forward's row
        positions (the home buffer), region by region."""
        order = {}
        for g in range(P):
            home = sim.read_buffer(g, home_buf, "i64")
            for le in range(El):
                e = g * El + le
                for p in range(int(bases[g, le]), int(bases[g, le] + counts[g, le])):
                    word = int(home[p])
                    t_, s_ = order.setdefault(e, ([], []))
                    t_.append((word >> 32) * T + (word & 0xffffffff) // k)
                    s_.append((word & 0xffffffff) % k)
        return order

    return buffers, out, presets, row_order
