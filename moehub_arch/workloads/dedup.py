"""Hierarchical deduplication of a MoE dispatch: how many token rows cross each level of the
topology with and without sending a row once per group (HierMoE, arXiv 2508.09591).

A token's row goes to every expert it is routed to. At level i of the topology (level 0: GPUs,
then NVLink islands - bridge pairs -, then nodes) the GPUs form groups; the rows that leave the
token's home group are, without deduplication at that level, one per (token, expert) pair whose
expert sits in another group, and with it one per distinct other group (the row is fanned out
inside the group by the receiving side). Level 0 is what DeepEP and the MoE-Hub already do (a row
once per destination GPU); HierMoE applies it at the level its performance model picks. With R
groups and uniform top-K routing a token reaches R (1 - (1 - 1/R)^K) groups on average.

Nested deduplication (HierMoE's d-level form) deduplicates at every level at once: a row goes
once to each other top-level group (node) holding any of its experts, there once to each other
next-level group (bridge pair) holding any, and so on down to the GPUs. Inside a group the row
enters at the GPU with the sender's own position in its group (DeepEP's and HierMoE's
same-local-rank rule: every transfer stays on one rail), so a group whose entry subgroup holds
none of the token's experts still takes the row through it. `nested_hop_rows` counts the
transfers of each hop (hop h joins groups of level h-1 inside a group of level h; the last hop
joins the top-level groups); the rows leaving level-i groups are those of every hop above i.

This is an analysis of the layer's routing, reported for every MoE layer on a multi-level system
(`system.moe.dedup.level<i>_*`); scheme `hiermoe` (schemes/hiermoe.py) moves the rows so at the
level its performance model picks (its kernels forward at one level: gpu or node).
"""
import numpy as np


def topology_levels(cfg):
    """[(name, GPUs per group)] from the GPU up: level 0 is the GPU itself."""
    s = cfg.system
    gpn = s.nodes.gpus_per_node or s.num_gpus
    levels = [("gpu", 1)]
    if s.switch.topology == "bridge_pairs" and gpn > 2:
        levels.append(("nvlink_pair", 2))
    if s.nodes.count > 1:
        levels.append(("node", gpn))
    return levels


def dedup_rows(topk_idx, expert_gpu, group_size):
    """(rows leaving their home group without deduplication, rows with it) for routing
    `topk_idx` [P, tokens, k] (token t of GPU g at [g, t]) and `expert_gpu` [E]."""
    idx = np.asarray(topk_idx)
    P = idx.shape[0]
    home = (np.arange(P) // group_size)[:, None, None]
    dst = np.asarray(expert_gpu)[idx] // group_size
    leaving = dst != home
    before = int(leaving.sum())
    groups = np.where(leaving, dst, -1).reshape(-1, idx.shape[2])
    groups = np.sort(groups, axis=1)
    distinct = (groups[:, 1:] != groups[:, :-1]) & (groups[:, 1:] >= 0)
    after = int(distinct.sum() + (groups[:, 0] >= 0).sum())
    return before, after


def nested_hop_rows(topk_idx, expert_gpu, sizes):
    """Transfers per hop when deduplicating at every level at once, for routing `topk_idx`
    [P, tokens, k] and `expert_gpu` [E]; `sizes` are the group sizes of the levels from the GPU
    up (sizes[0] == 1, each dividing the next; the whole system is the group above the last).
    Returns a list: entry h - 1 counts the transfers of hop h (between groups of size
    sizes[h - 1] inside one group of the next size up)."""
    idx = np.asarray(topk_idx)
    P, T, _ = idx.shape
    sizes = list(sizes) + [P]
    hops = [0] * (len(sizes) - 1)
    dst_of = np.asarray(expert_gpu)[idx]                     # [P, T, k]

    def deliver(entry, h, targets):
        # the row is at GPU `entry`, inside its group of level h; `targets` are the GPUs of that
        # group that need it: one transfer per other subgroup (of level h - 1) holding any
        if h == 0:
            return
        sub = sizes[h - 1]
        for first in sorted({int(d) // sub * sub for d in targets}):
            inside = [d for d in targets if first <= d < first + sub]
            if first == entry // sub * sub:
                deliver(entry, h - 1, inside)
            else:
                hops[h - 1] += 1
                deliver(first + entry % sub, h - 1, inside)

    for g in range(P):
        for t in range(T):
            deliver(g, len(sizes) - 1, set(int(d) for d in dst_of[g, t]))
    return hops


def add_dedup_stats(out, layer, cfg):
    """system.moe.dedup.level<i>_rows_{before,after}, level<i>_bytes_saved and their nested
    counterparts level<i>_rows_nested, level<i>_bytes_saved_nested, for every level of a
    multi-level system (nothing on a one-node NVSwitch system)."""
    levels = topology_levels(cfg)
    if len(levels) < 2:
        return
    s = layer.shape
    expert_gpu = np.arange(s.experts) // s.local_experts
    rb = s.row_bytes
    hops = nested_hop_rows(layer.routing.topk_idx, expert_gpu, [size for _, size in levels])
    for i, (name, size) in enumerate(levels):
        before, after = dedup_rows(layer.routing.topk_idx, expert_gpu, size)
        base = f"system.moe.dedup.level{i}"
        out.add(f"{base}_rows_before", before, "rows", f"token rows leaving their home {name} "
                f"(groups of {size} GPUs), one per (token, expert) pair outside it")
        out.add(f"{base}_rows_after", after, "rows", f"token rows leaving their home {name} "
                f"sent once per destination {name}")
        out.add(f"{base}_bytes_saved", (before - after) * rb, "bytes", f"dispatch bytes "
                f"deduplication at the {name} level saves ({rb} B rows)")
        # nested: deduplicating at every level at once, the rows leaving a group of this level
        # are the transfers of every hop above it
        nested = sum(hops[i:])
        out.add(f"{base}_rows_nested", nested, "rows", f"token rows leaving a {name} when "
                f"deduplicating at every level at once (nested, entering each group at the "
                f"sender's own position in it)")
        out.add(f"{base}_bytes_saved_nested", (before - nested) * rb, "bytes", f"dispatch "
                f"bytes nested deduplication saves at the {name} level against a row per "
                f"(token, expert) pair ({rb} B rows)")
