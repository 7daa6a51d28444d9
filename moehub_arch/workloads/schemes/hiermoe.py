"""Scheme `hiermoe`: HierMoE's hierarchy-aware token deduplication and expert swap (HierMoE,
arXiv 2508.09591), on DeepEP-style kernels.

- **Deduplication level.** A token row goes once to each *group* holding any of its experts and
  is fanned out inside the group. The candidate levels are the topology's GPU and node levels
  (moehub_arch/workloads/dedup.py); gpu sends a row once per destination GPU (deepep's direct
  kernels), node once per destination node to the GPU of the sender's own local rank there,
  which forwards it over NVLink (deepep's internode kernels, workloads/kernels/deepep/
  internode.s; combine reduces a node's partial rows at that forwarder, so one row per node
  returns). `workload.layer.hiermoe.level: auto` picks the level with HierMoE's alpha-beta
  performance model, t(level) = sum over the level's hops of alpha + bytes x beta, where the
  bytes of a hop are the busiest GPU's rows on it (from this layer's routing) and alpha / beta
  come from the system's configured link numbers (HierMoE fits them by measurement in minutes;
  a simulator knows them). Levels between the GPU and the node (a6000_x4's bridge pairs) are
  reported by the dedup stats but not offered: the forwarding kernels group whole nodes.
- **Expert swap.** Before the layer, experts are swapped between GPUs so that the busiest GPU's
  token-expert rows drop: greedy pairwise swaps between the busiest and the idlest GPU, each the
  swap that lowers their larger load most, until none lowers it (HierMoE minimises a smooth
  maximum of the GPU loads with incremental updates; a greedy max-load descent is the same
  objective without the smoothing). The load is that of the previous iteration, taken equal to
  this one's (assumption, see `expert_swap` in the config: an upper bound on the benefit). The
  swap relabels the layer's routing (`layer.routing`): expert e's rows go to the slot it was
  moved to; the weights already in that slot stand for e's (the layer's weights are random), and
  moving weights between iterations is not simulated (HierMoE overlaps it with training).

The kernels take workload.layer.deepep's settings. Stats: system.moe.hiermoe.level (0 gpu,
1 node), model_us_<level> (the performance model's dispatch estimate per candidate),
swap_max_gpu_rows_before / _after and swaps.
"""
import attrs
import numpy as np

from ..routing import Routing
from . import deepep

LEVELS = ("gpu", "node")


def plan(layer):
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.hiermoe
    P, El = s.num_gpus, s.local_experts
    L = deepep.node_gpus(cfg)
    before = after = int(gpu_rows(layer.routing.topk_idx, El).max())
    swaps = 0
    if opts.expert_swap:
        new_id, swaps = expert_swap(layer.routing.topk_idx, P, El)
        layer.routing = Routing(topk_idx=new_id[layer.routing.topk_idx],
                                topk_weight=layer.routing.topk_weight)
        after = int(gpu_rows(layer.routing.topk_idx, El).max())
    model = {lv: level_time_ps(cfg, layer.routing.topk_idx, El, L, s.row_bytes, lv)
             for lv in (LEVELS if L < P else LEVELS[:1])}
    level = min(model, key=model.get) if opts.level == "auto" else opts.level
    if level == "node" and L >= P:
        level = "gpu"                              # one node: nothing to deduplicate above GPUs
    base = deepep.plan(layer, internode="forward" if level == "node" else "direct")
    extra = base.extra_stats

    def stats(sim, lay):
        extra(sim, lay)
        out = sim.stats
        out.add("system.moe.hiermoe.level", LEVELS.index(level), "index",
                "deduplication level used: 0 gpu (a row once per destination GPU), 1 node (once "
                "per destination node, fanned out inside)")
        for lv, t in model.items():
            out.add(f"system.moe.hiermoe.model_us_{lv}", t / 1e6, "us",
                    f"HierMoE performance model: dispatch time deduplicating at the {lv} level "
                    f"(alpha-beta per hop, the busiest GPU's rows)")
        out.add("system.moe.hiermoe.swaps", swaps, "count", "expert swaps made before the layer")
        out.add("system.moe.hiermoe.swap_max_gpu_rows_before", before, "rows",
                "token-expert rows of the busiest GPU's experts before the expert swap")
        out.add("system.moe.hiermoe.swap_max_gpu_rows_after", after, "rows",
                "the same after the expert swap")

    # the backward (passes: training): at the gpu level HierMoE's dispatch is DeepEP's direct one
    # (a row once per destination GPU), so is its backward - the cached dispatch of dy, and the
    # fan-out to a GPU's experts summed there before one row per (token, GPU) goes home
    # (deepep_backward.py); the node level's internode kernels have none
    why = base.backward_why
    if level == "node" and why:
        why = ("HierMoE's node level runs DeepEP's internode kernels, which have no backward here "
               "(workload.layer.hiermoe.level: gpu has)")
    return attrs.evolve(base, extra_stats=stats, backward_why=why)


def gpu_rows(topk_idx, local_experts):
    """Token-expert rows each GPU's experts receive (block placement)."""
    idx = np.asarray(topk_idx).reshape(-1) // local_experts
    return np.bincount(idx, minlength=np.asarray(topk_idx).shape[0])


def expert_swap(topk_idx, num_gpus, local_experts):
    """Greedy max-load descent by pairwise swaps between the busiest and the idlest GPU.
    Returns (new_id [E]: the expert id each original expert takes - its new slot -, swaps)."""
    E = num_gpus * local_experts
    load = np.bincount(np.asarray(topk_idx).reshape(-1), minlength=E).astype(np.int64)
    slot_expert = np.arange(E)                     # slot -> original expert
    swaps = 0
    for _ in range(E * E):
        per_slot = load[slot_expert].reshape(num_gpus, local_experts)
        gl = per_slot.sum(axis=1)
        a, b = int(np.argmax(gl)), int(np.argmin(gl))
        if a == b:
            break
        # moving x (on a) and y (on b): new loads gl[a] - x + y and gl[b] - x... (d = x - y)
        d = per_slot[a][:, None] - per_slot[b][None, :]
        worst = np.maximum(gl[a] - d, gl[b] + d)
        i, j = np.unravel_index(int(np.argmin(worst)), worst.shape)
        if worst[i, j] >= gl[a]:
            break
        sa, sb = a * local_experts + i, b * local_experts + j
        slot_expert[sa], slot_expert[sb] = slot_expert[sb], slot_expert[sa]
        swaps += 1
    new_id = np.empty(E, dtype=np.int64)
    new_id[slot_expert] = np.arange(E)
    return new_id, swaps


def level_rows(topk_idx, local_experts, node_gpus, level):
    """Per GPU (rows over the NIC it sends, rows over NVLink it sends) when dispatch
    deduplicates at `level`: gpu - one row per (token, other GPU), NVLink inside the node, NIC
    to other nodes; node - one row per (token, other node) over the NIC to the GPU of the same
    local rank there, and the forwarders' (and the home node's) fan-out over NVLink."""
    idx = np.asarray(topk_idx, dtype=np.int64)
    P, T, k = idx.shape
    dst = idx // local_experts                                    # [P, T, k] GPU
    hit = np.zeros((P, T, P), dtype=bool)
    np.put_along_axis(hit, dst, True, axis=2)                    # token reaches GPU d
    node_of = np.arange(P) // node_gpus
    same_node = node_of[:, None] == node_of[None, :]             # [g, d]
    nic = np.zeros(P, np.int64)
    nvl = np.zeros(P, np.int64)
    if level == "gpu":
        nic = (hit & ~same_node[:, None, :]).sum(axis=(1, 2))
        nvl = (hit & same_node[:, None, :] & ~np.eye(P, dtype=bool)[:, None, :]).sum(axis=(1, 2))
        return nic, nvl
    N = P // node_gpus
    node_hit = hit.reshape(P, T, N, node_gpus)                   # [g, t, node, local]
    reached = node_hit.any(axis=3)                               # [g, t, node]
    own = node_of[:, None, None] == np.arange(N)[None, None, :]
    nic = (reached & ~own).sum(axis=(1, 2))
    local = np.arange(P) % node_gpus
    for g in range(P):
        for n in range(N):
            f = n * node_gpus + local[g]                         # the forwarder on node n
            fan = node_hit[g, :, n, :].sum(axis=1) - node_hit[g, :, n, local[g]]
            nvl[f] += int(fan.sum())
    return nic, nvl


def level_time_ps(cfg, topk_idx, local_experts, node_gpus, row_bytes, level):
    """HierMoE's alpha-beta model of the dispatch at `level`, in ps: per hop alpha + the busiest
    GPU's bytes x beta. NIC hop: alpha = doorbell + 2 PCIe + 2 InfiniBand link latencies + one
    switch, beta = 1 / (the NIC's InfiniBand bandwidth shared by its GPUs); NVLink hop: alpha =
    2 NVLink link latencies, beta = 1 / (the GPU's links x link bandwidth)."""
    sysc = cfg.system
    nic, nvl = level_rows(topk_idx, local_experts, node_gpus, level)
    hops = 0.0
    if nic.max() > 0:
        ib = sysc.infiniband
        alpha = (sysc.nic.doorbell_latency + 2 * sysc.pcie.latency + 2 * ib.latency
                 + ib.switch_latency)
        beta = 1e12 / (ib.bandwidth / max(1, sysc.nic.gpus_per_nic))   # ps per byte
        hops += alpha + nic.max() * row_bytes * beta
    if nvl.max() > 0:
        nv = sysc.nvlink
        hops += 2 * nv.latency + nvl.max() * row_bytes * 1e12 / (nv.links_per_gpu * nv.bandwidth)
    return hops
