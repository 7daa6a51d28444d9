"""Hierarchical deduplication of a MoE dispatch: how many token rows cross each level of the
topology with and without sending a row once per group (HierMoE, arXiv 2508.09591).

A token's row goes to every expert it is routed to. At level i of the topology (level 0: GPUs,
then NVLink islands - bridge pairs -, then nodes) the GPUs form groups; the rows that leave the
token's home group are, without deduplication at that level, one per (token, expert) pair whose
expert sits in another group, and with it one per distinct other group (the row is fanned out
inside the group by the receiving side). Level 0 is what DeepEP and the MoE-Hub already do (a row
once per destination GPU); HierMoE applies it at the level its performance model picks. With R
groups and uniform top-K routing a token reaches R (1 - (1 - 1/R)^K) groups on average.

This is an analysis of the layer's routing, reported for every MoE layer on a multi-level system
(`system.moe.dedup.level<i>_*`); scheme `hiermoe` (schemes/hiermoe.py) moves the rows so at the
level its performance model picks.
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


def add_dedup_stats(out, layer, cfg):
    """system.moe.dedup.level<i>_{rows,bytes}_{before,after} and level<i>_bytes_saved, for every
    level above the GPU of a multi-level system (nothing on a one-node NVSwitch system)."""
    levels = topology_levels(cfg)
    if len(levels) < 2:
        return
    s = layer.shape
    expert_gpu = np.arange(s.experts) // s.local_experts
    rb = s.row_bytes
    for i, (name, size) in enumerate(levels):
        before, after = dedup_rows(layer.routing.topk_idx, expert_gpu, size)
        base = f"system.moe.dedup.level{i}"
        out.add(f"{base}_rows_before", before, "rows", f"token rows leaving their home {name} "
                f"(groups of {size} GPUs), one per (token, expert) pair outside it")
        out.add(f"{base}_rows_after", after, "rows", f"token rows leaving their home {name} "
                f"sent once per destination {name}")
        out.add(f"{base}_bytes_saved", (before - after) * rb, "bytes", f"dispatch bytes "
                f"deduplication at the {name} level saves ({rb} B rows)")
