"""The backward pass of scheme `moehub` (workload.layer.passes: training): the gradient rows move
through the MoE-Hub the way the forward's rows did (MoE-Hub, arXiv 2605.05888: a producer names
a logical destination, the hub allocates the address, merges the rows into packets and tells the
consumers when a tile is ready). Kernels: workloads/kernels/moehub/backward.s, the forward's
moe_layer.s (claim_tiles, moehub_expert_train / moehub_tile_train) and the shared grouped backward
kernels
(workloads/kernels/common/moe_backward.s).

What differs from the forward, per step:
- the combine's backward at home (moehub_combine_bwd, moe_combine_bwd's work): dw = <dy, y_j>
  against the expert outputs the
  forward's send_home brought home (yhome), dO = bf16(w dy) one row per pair in slot order -
  the weighting stays at home, as the forward's combine did it there;
- the gradient dispatch, inside the combine's backward (moehub_combine_bwd): every pair's dO
  row is stored, the moment it is written, to a *gradient window* of its expert
  (logical destination E + e on e's GPU: a second allocation per expert, as a second
  rowspMalloc), send_to_expert or st.rowsp as the forward's stores, in a second round of the
  hub's streams: `notify_ready.reopen` (the one hub addition: the streams to and from a GPU, and
  its DAM's end-of-stream count, begin again once the forward's round finished; a GPU sends in
  the new round once every GPU has reopened, a flag each). No mediation, as in the forward;
- the expert side: the hub places dO rows in *arrival* order, but the weight gradients need dO
  beside the forward's X and Hh rows (dWd = Hh^T dO, dWg = X^T dG): the forward's windows still
  hold X with a completion record per row (source, home), so moehub_bwd_positions inverts the
  records (fpos[source][home] = forward position), moehub_bwd_claim queues each ready gradient
  tile (the forward's claimer loop) and moehub_bwd_place (PLACE_TBS blocks, PLACE_ROWS-row
  chunks) copies its rows to their forward positions and counts them in the backward table's
  tile counters, which grouped_bwd_act waits on tile by tile (the hub's readiness, then a
  local copy: one row's bytes read and written in HBM per pair). The forward's expert kernel
  keeps its activations at the rows' positions (moehub_expert_train: he, expert-major);
- the gradient combine: each dX row goes home with send_home through the forward's completion
  record (the forward's combine path), into dret[t * k + j] there; moe_dispatch_bwd sums the
  shared experts' dX and the slots in order (the reference's default order).

With system.gpu.hub.moe.aau.allocation: paired (components/moehub/pairing.py) the hub itself puts
each dO row at its forward row's slot of the gradient window (the AAU's pairing table, written
from the forward's completion records) and the DAM makes each forward tile ready once its rows
landed: no moehub_bwd_positions, no placement copy; moehub_bwd_ready (one TB per local expert)
claims the ready tiles and marks them in the table's counters, and the expert kernels read dO in
the gradient windows (moe_windows past the forward's windows) instead of b_dye.

Hub designs: the stores (send / row_sparse), rpm.schedule, aau.overflow and dam.order work as
in the forward (the backward's stores are one per pair: dO rows differ per pair, so
multi_expert_store and nop_choices shape only the forward's dispatch). dam.consumers: launch: the
DAM starts the forward's consumers (moehub_tile_train); the backward's placers claim the
gradient tiles (the DAM keeps one consumer launch per GPU, which serves the first round:
dam.py dam_reopen). Not built: internode per_node and internode_combine per_node (the
forwarding units keep no rounds) - an error naming the key.
"""
import attrs
import numpy as np

from ..config.schema import LaunchConfig
from .alltoall import KERNELS as A2A_KERNELS, flag_wait_launch, i64_preset
from .layer import _buf
from .layer_backward import (KERNELS as BACKWARD_KERNELS, backward_buffers, combine_bwd_launch,
                             dispatch_bwd_launch, expert_bwd_kernels, expert_bwd_launches,
                             shared_bwd)

KERNELS = "workloads/kernels/moehub/backward.s"
PLACE_ROWS = 8      # rows per placement job (moehub_bwd_place): a 64-row tile in 8 chunks
PLACE_TBS = 128     # placement thread blocks per GPU (no shared memory: they sit beside the
                    # backward GEMM blocks). Assumption, measured on Qwen3-30B-A3B at 256 tokens
                    # per GPU: 32 blocks place too slowly (backward 505 us), 128 and 264 alike (423)
BACKWARD_KERNEL_FILES = (A2A_KERNELS, KERNELS) + BACKWARD_KERNELS


def backward_refusal(cfg):
    """Why this configuration of scheme moehub has no backward ("" when it has one)."""
    moe = cfg.system.gpu.hub.moe
    if moe.internode == "per_node" or moe.internode_combine == "per_node":
        return ("system.gpu.hub.moe.internode / internode_combine: per_node forward rows through "
                "a forwarding hub, which keeps no rounds of streams for a backward (use "
                "per_expert)")
    return ""


def placement(s):
    """workload.moe.placement of a training run: experts 0 .. E - 1 as the forward's (E / P
    consecutive per GPU), then their gradient windows E + e on the same GPUs."""
    gpus = tuple(e // s.local_experts for e in range(s.experts))
    return gpus + gpus


def forward_counts(layer):
    """[P][El] rows each local expert receives (the routing's)."""
    s = layer.shape
    return np.bincount(layer.routing.topk_idx.reshape(-1), minlength=s.experts) \
        .reshape(s.num_gpus, s.local_experts).astype(np.int64)


def backward_plan(layer, window_rows):
    """(buffers, [(launch, phase)], presets, row_order, received_rows) of the backward; the
    forward's windows hold window_rows rows per expert (their X rows are the backward's)."""
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.moehub
    P, T, k, El, H = s.num_gpus, s.tokens, s.top_k, s.local_experts, s.hidden
    cap, tile, pairs = window_rows, s.tile_rows, s.pairs
    record_bytes = cfg.system.gpu.hub.moe.aau.record_bytes
    counts = forward_counts(layer)
    tiles = -(-counts // tile)
    tfirst = np.concatenate([np.zeros((P, 1), np.int64), np.cumsum(tiles, axis=1)[:, :-1]],
                            axis=1)
    max_tiles = El * (-(-cap // tile))
    buffers = backward_buffers(s, cap, _buf) + [
        _buf("mh_he", El * cap * s.ffn * 2, dtype="bf16"),
        _buf("mh_counts", El * 8, region="control", dtype="i64"),
        _buf("mh_bases", El * 8, region="control", dtype="i64"),
        _buf("mh_tfirst", El * 8, region="control", dtype="i64"),
        _buf("mh_ntiles", 8, region="control", dtype="i64"),
        # the gradient tiles' queue (moehub_bwd_claim): 2 words, then 64 B per tile
        _buf("mh_btq", 64 * (max_tiles + 1), region="control", dtype="i64"),
        _buf("mh_map", pairs * 8, region="control", dtype="i64"),
        _buf("mh_fpos", P * pairs * 8, region="control", dtype="i64"),
        _buf("mh_tilecnt", max_tiles * 8, region="control", dtype="i64"),
        _buf("mh_reopened", P * 8, region="control", dtype="i64"),
        _buf("mh_start", 8, region="control", dtype="i64"),
        _buf("mh_gate", 8, region="control", dtype="i64"),
        _buf("mh_jobs", 8, region="control", dtype="i64"),
        _buf("mh_dsend", pairs * s.row_bytes, dtype="bf16"),
        _buf("mh_dret", pairs * s.row_bytes, dtype="bf16"),
    ]
    presets = {"mh_counts": i64_preset(counts),
               "mh_bases": i64_preset(np.tile(np.arange(El, dtype=np.int64) * cap, (P, 1))),
               "mh_tfirst": i64_preset(tfirst),
               "mh_ntiles": i64_preset(tiles.sum(axis=1, keepdims=True)),
               "mh_map": i64_preset(np.tile(np.arange(pairs, dtype=np.int64), (P, 1)))}
    sbufs, shared = shared_bwd(s, cfg, 3, _buf)
    buffers += sbufs
    rowsp = opts.stores == "row_sparse"
    # the combine's backward with the gradient dispatch in it (moehub_combine_bwd)
    combine = combine_bwd_launch(s, cfg, 3, "@mh_map", "@mh_dsend")
    combine = attrs.evolve(combine, kernel="moehub_combine_bwd_rowsp" if rowsp
                           else "moehub_combine_bwd", params=combine.params + (
                               ("topk_idx", "@topk_idx"), ("experts", s.experts),
                               ("reopened", "@mh_reopened")))
    # placers: row chunks of PLACE_ROWS rows, on PLACE_TBS thread blocks (no shared memory:
    # they share SMs with the backward GEMM blocks)
    chunks = max(1, tile // PLACE_ROWS)
    window = (("window_rows", cap), ("local_experts", El), ("record_bytes", record_bytes),
              ("pairs", pairs))
    nsm = cfg.system.gpu.num_sms
    paired = cfg.system.gpu.hub.moe.aau.allocation == "paired"
    # paired: the dO rows stay in the gradient windows (window El + e), at their forward rows'
    # positions; bump: the placers copy them there in b_dye
    dye = f"@moe_windows + {El * cap * s.row_bytes}" if paired else "@b_dye"
    # the tile table over the forward's windows (X), he and the gradient buffers
    table = expert_bwd_launches(s, 3, nsm, "mh_counts", "moe_windows", "mh_he", cap,
                                "mh_bases", dye=dye)[0]
    # grouped_bwd_act waits for each tile's dO rows (the placers' or moehub_bwd_ready's
    # counters); the dX rows go home once the dgrad is done, while the wgrad runs
    act_etc = expert_bwd_kernels(s, 3, nsm, "mh_counts", "mh_bases", "moe_windows", "mh_he",
                                 tilecnt="@mh_tilecnt", gate="@mh_gate", dye=dye)
    if paired:
        receive = [
            (LaunchConfig(kernel="moehub_bwd_ready", grid=El, stream=2, params=(
                ("tilecnt", "@mh_tilecnt"), ("tfirst", "@mh_tfirst"), ("xwin", "@moe_windows"),
                ("experts", s.experts), ("local_experts", El), ("window_rows", cap),
                ("tile_rows", tile), ("hidden", H))), "backward_dispatch"),
            (flag_wait_launch(1, "@mh_start", 1), "backward_wait")]
    else:
        receive = [
            (LaunchConfig(kernel="moehub_bwd_positions", grid=cfg.workload.layer.combine_tbs,
                          stream=2, params=(
                              ("records", "@moe_records"), ("counts", "@mh_counts"),
                              ("fpos", "@mh_fpos")) + window), "backward_dispatch"),
            (LaunchConfig(kernel="moehub_bwd_claim", grid=El, stream=2, params=(
                ("tq", "@mh_btq"), ("experts", s.experts), ("local_experts", El))),
             "backward_dispatch"),
            # stream 1: idle until this GPU's backward begins
            (flag_wait_launch(1, "@mh_start", 1), "backward_wait"),
            (LaunchConfig(kernel="moehub_bwd_place", grid=PLACE_TBS, stream=1,
                          params=(("tq", "@mh_btq"), ("ntiles", "@mh_ntiles"),
                                  ("fpos", "@mh_fpos"), ("dye", "@b_dye"),
                                  ("tilecnt", "@mh_tilecnt"), ("tfirst", "@mh_tfirst"),
                                  ("experts", s.experts))
                          + window + (("hidden", H), ("tile_rows", tile), ("chunks", chunks))),
             "backward_dispatch")]
    out = [
        (LaunchConfig(kernel="moehub_bwd_reopen", grid=1, stream=3, params=(
            ("reopened", "@mh_reopened"), ("start", "@mh_start"), ("rowsp", int(rowsp)),
            ("experts", s.experts), ("hidden", H))), "backward_dispatch"),
        (combine, "backward_dispatch"),
        # stream 2: idle until this GPU's backward begins
        (flag_wait_launch(2, "@mh_start", 1), "backward_wait"),
    ] + receive + [
        (LaunchConfig(kernel="moehub_bwd_home", grid=cfg.workload.layer.combine_tbs, stream=1,
                      params=(("table", "@b_table"), ("xwin", "@moe_windows"),
                              ("records", "@moe_records"), ("dxe", "@b_dxe"),
                              ("dret", "@mh_dret"), ("gate", "@mh_gate"), ("jobs", "@mh_jobs"),
                              ("done", "@bdone"), ("hidden", H),
                              ("record_bytes", record_bytes))), "backward_combine"),
    ] + list(shared) + [(table, "backward_expert")] + [
        (launch, "backward_expert") for launch in act_etc] + [
        (dispatch_bwd_launch(s, cfg, 3, "@mh_dret", "@mh_map"), "backward_combine")]

    def row_order(sim):
        """{expert: (flat tokens, slots)} in the forward windows' order (arrival order, from
        the completion records), which the backward's buffers keep."""
        order = {}
        for g in range(P):
            rec = sim.read_buffer(g, "moe_records", "i64").reshape(-1, record_bytes // 8)
            for le in range(El):
                t_, s_ = order.setdefault(g * El + le, ([], []))
                for i in range(int(counts[g, le])):
                    src, home = int(rec[le * cap + i, 0]), int(rec[le * cap + i, 1])
                    t_.append(src * T + home // k)
                    s_.append(home % k)
        return order

    def received_rows(sim):
        """Rows the forward's windows received (the gradient windows' are the backward's)."""
        alloc = sim.state.win.alloc.reshape(P, 2 * El)
        return int(alloc[:, :El].sum())

    return buffers, out, presets, row_order, received_rows
