"""Scheme `ccfuser`: CCFuser (Wang, Xia, Yang, Zhou, Cheng, PPoPP 2025, "Harnessing Inter-GPU
Shared Memory for Seamless MoE Communication-Computation Fusion") - a baseline of the MoE-Hub
(arXiv 2605.05888) and DySHARP (arXiv 2605.05607) evaluations.

What the public description gives, and is modelled: the GPUs of an NVLink domain share one
address space, so the expert GEMM reads its tokens' rows straight out of the source GPUs' memory
(GPU-initiated loads; no send buffer, no sender kernel, no all-to-all collective) and writes each
output row straight into its home GPU's memory, with the computation of a tile starting as soon
as its rows are in. Here:

  stream 0  mg_count, mg_allgather (megatron.s: per-expert counts, all-gathered), the host round
            trip (ccfuser.host_sync_latency: the host turns the counts into each GPU's gather
            list and GEMM tile table), flag_set (the table is published), then ccf_pull
            (ccfuser.s, pull_tbs blocks): tile by tile, `get` of every row from its source GPU's
            x into the tile's rows, a fence, the tile's counter raised;
  stream 3  overlap_expert (overlap.s, compute_tbs persistent GEMM blocks, launched with the
            layer, waiting for the published table): a tile's gate/up jobs wait for its counter,
            the down jobs follow, and the tile's last down job stores every output row into
            yhome on its home GPU (`put`), then done[me] on every GPU; then moe_combine;
  stream 1  the shared experts.

Receive layout (symmetric, sized for the GPU that receives most): ccf_x [rows][H], expert-major,
each local expert's region aligned to the GEMM tile; within an expert, rows by source GPU, then
token. ccf_list [rows]: source << 32 | token; ccf_home [rows]: source << 32 | t * k + j (the
slot of yhome the output goes to); ccf_tiles / ccf_info in the layout of DeepEP's tile table
(deepep.s dp_tiles, dp_info).

What it leaves out: CCFuser's own metadata path (its count exchange and index build are not
public in detail; here the counts reach the host as in Megatron's dispatcher, and the host
writes the lists), its profiling-driven choice of how many SMs communicate and compute (fixed
pull_tbs / compute_tbs here), and the fusion of the remote loads into the GEMM's own operand
load: here dedicated pull blocks fill the tiles and the GEMM blocks wait on per-tile counters (the
loads leave the same NVLink traffic; the GEMM blocks' SMs do not issue them).
"""
import numpy as np

from ..alltoall import KERNELS as A2A_KERNELS, i64_preset
from ..layer import (ACCT_NAMES, LayerError, SchemePlan, _buf, combine_launch,
                     shared_expert_launches)
from ...config.schema import LaunchConfig
from .deepep import EPOCH
from .megatron import KERNELS as MEGATRON_KERNELS, count_exchange
from ..deepep_backward import KERNELS as DEEPEP_BACKWARD_KERNELS
from ..layer_backward import KERNELS as BACKWARD_KERNELS
from .overlap import BACKWARD as OVERLAP_BACKWARD, KERNELS as OVERLAP_KERNELS, backward_plan

KERNELS = "workloads/kernels/ccfuser/ccfuser.s"


def plan(layer):
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.ccfuser
    P, k, El, H, I = s.num_gpus, s.top_k, s.local_experts, s.hidden, s.ffn
    tile = s.tile_rows
    nsm = cfg.system.gpu.num_sms
    if opts.compute_tbs > nsm:
        raise LayerError(f"workload.layer.ccfuser.compute_tbs: {opts.compute_tbs} persistent GEMM "
                         f"blocks (one per SM: their shared memory fills most of an SM) do not "
                         f"fit system.gpu.num_sms ({nsm})")
    idx = layer.routing.topk_idx                                         # [P][T][k]
    # per expert GPU r: its rows (source, token, slot) per local expert, sources in id order
    lists, homes, tiles, info = [], [], [], []
    for r in range(P):
        lst, home, tab = [], [], []
        pos = 0
        for le in range(El):
            e = r * El + le
            src, tok, slot = [], [], []
            for g in range(P):
                t, j = np.nonzero(idx[g] == e)
                src += [g] * len(t)
                tok += t.tolist()
                slot += j.tolist()
            n = len(src)
            for q in range(-(-n // tile)):
                rows = min(tile, n - q * tile)
                tab.append((pos + q * tile, rows, le, 1 if q == 0 else 0))
            lst += [(g << 32) | t for g, t in zip(src, tok)]
            home += [(g << 32) | (t * k + j) for g, t, j in zip(src, tok, slot)]
            pad = -(-n // tile) * tile - n
            lst += [0] * pad
            home += [0] * pad
            pos += n + pad
        lists.append(lst)
        homes.append(home)
        tiles.append(tab)
        info.append([0, len(tab), EPOCH, 0])
    rows_cap = max(1, max(len(x) for x in lists))
    tiles_cap = max(1, max(len(t) for t in tiles))
    lists = [x + [0] * (rows_cap - len(x)) for x in lists]
    homes = [x + [0] * (rows_cap - len(x)) for x in homes]
    tiles = [[w for ent in t for w in ent] + [0] * (4 * (tiles_cap - len(t))) for t in tiles]
    info_published = [[0, row[1], 0, 0] for row in info]      # the epoch arrives by flag_set
    count_bufs, count_launches = count_exchange(s, opts.pull_tbs)
    buffers = count_bufs + [
        _buf("ccf_info", 32, region="control", dtype="i64"),
        _buf("ccf_tiles", tiles_cap * 32 + 64, region="control", dtype="i64"),  # + 64: ld.v8
        _buf("ccf_list", rows_cap * 8, region="control", dtype="i64"),
        _buf("ccf_home", rows_cap * 8 + 64, region="control", dtype="i64"),
        _buf("ccf_tilecnt", tiles_cap * 8, region="control", dtype="i64"),
        _buf("ccf_jobs", (2 + 2 * tiles_cap) * 8, region="control", dtype="i64"),
        _buf("ccf_x", rows_cap * s.row_bytes, dtype="bf16"),
        _buf("ccf_hh", rows_cap * I * 2, dtype="bf16"),
        _buf("ccf_y", rows_cap * s.row_bytes, dtype="bf16"),
    ]
    presets = {"ccf_info": i64_preset(info_published), "ccf_tiles": i64_preset(tiles),
               "ccf_list": i64_preset(lists), "ccf_home": i64_preset(homes)}
    sbufs, shared = shared_expert_launches(s, cfg, stream=1)
    fwd_launches = count_launches + [
        LaunchConfig(kernel="flag_set", grid=1, stream=0, host_delay=opts.host_sync_latency,
                     params=(("addr", "@ccf_info + 16"), ("value", EPOCH))),
        LaunchConfig(kernel="ccf_pull", grid=opts.pull_tbs, stream=0, params=(
            ("tiles", "@ccf_tiles"), ("info", "@ccf_info"), ("list", "@ccf_list"), ("x", "@x"),
            ("recv_x", "@ccf_x"), ("tilecnt", "@ccf_tilecnt"), ("acct", "@acct"),
            ("hidden", H))),
        LaunchConfig(kernel="overlap_expert", grid=opts.compute_tbs, stream=3, params=(
            ("tiles", "@ccf_tiles"), ("info", "@ccf_info"), ("tilecnt", "@ccf_tilecnt"),
            ("home", "@ccf_home"), ("jobs", "@ccf_jobs"), ("recv_x", "@ccf_x"),
            ("hh", "@ccf_hh"), ("y", "@ccf_y"), ("yhome", "@yhome"), ("wg", "@w_gate"),
            ("wu", "@w_up"), ("wd", "@w_down"), ("acct", "@acct"), ("done", "@done"),
            ("hidden", H), ("ffn", I), ("tile_rows", tile), ("n_tile", s.n_tile),
            ("epoch", EPOCH), ("swizzle", s.stream_swizzle))),
    ]
    phases = {"mediation": ("mg_count", "mg_allgather", "flag_set"),
              "dispatch": ("ccf_pull",),
              "expert": ("overlap_expert", "shared_ffn"),
              "combine": ("moe_combine",)}
    by_kernel = {name: phase for phase, names in phases.items() for name in names}
    # the shared experts are placed before the persistent GEMM blocks take every SM
    launches = shared + fwd_launches + [combine_launch(s, cfg, stream=3)]
    launch_phases = [by_kernel.get(launch.kernel, "") for launch in launches]
    training = cfg.workload.layer.passes == "training"
    bbufs, row_order = [], None
    if training:
        # the backward is the forward's pull in the other direction: each expert GPU reads the
        # dO rows of its tiles from their home GPUs (get, pull_tbs blocks, as ccf_pull reads x)
        # while the backward GEMM blocks wait on each tile's counter, and writes the dX rows
        # straight home (put) during the weight gradients - Comet-style overlap's backward
        # (overlap.py) over CCFuser's handle: its tile table and row positions
        bbufs, blaunches, bpresets, row_order = backward_plan(
            layer, rows_cap, tiles_cap, handle=("ccf_tiles", "ccf_info", "ccf_home"),
            xe="ccf_x", hh="ccf_hh", comm_tbs=opts.pull_tbs, gemm_tbs=opts.compute_tbs)
        presets.update(bpresets)
        launches += [launch for launch, _ in blaunches]
        launch_phases += [phase for _, phase in blaunches]
    return SchemePlan(
        buffers=tuple(buffers + sbufs + bbufs), launches=tuple(launches),
        kernel_files=(A2A_KERNELS, MEGATRON_KERNELS, OVERLAP_KERNELS, KERNELS)
        + ((DEEPEP_BACKWARD_KERNELS, OVERLAP_BACKWARD) + BACKWARD_KERNELS if training else ()),
        presets=presets, n_tile=s.n_tile, phases=phases, launch_phases=tuple(launch_phases),
        backward=True, backward_row_order=row_order,
        mediation_extra_ps=opts.host_sync_latency + cfg.system.gpu.kernel_launch_latency,
        checked_accounting=tuple(a for a in ACCT_NAMES if a != "sent"),
        unchecked_why="the expert GPU pulls the rows: no sender counts them")
