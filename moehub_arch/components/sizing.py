"""Sizes several blocks derive from the config: where the experts sit, how many instruction
streams an SM has, how many started blocks the DAM may have pending.

Each is a function of the config alone (experts_of_window: of the State the placement built). They live here, under the blocks that size their records
and arrays by them (scheduler, SM, RPM, AAU, DAM, and the builder), rather than in one of those
blocks: the scheduler's start queue is sized by the DAM's bound, the DAM's bound by the AAU's
placement and the RPM's rings by the scheduler's streams, so no one block can hold them without
importing the others.
"""
import numpy as np


def expert_placement(cfg):
    """[E, 2] int64: GPU and local slot (window) of every expert (workload.moe.placement, or
    E / G consecutive experts per GPU)."""
    moe, G = cfg.workload.moe, cfg.system.num_gpus
    E = moe.num_experts
    gpus = list(moe.placement) if moe.placement is not None else [e // (E // G) for e in range(E)]
    place = np.zeros((max(E, 1), 2), np.int64)
    count = [0] * G
    for e, g in enumerate(gpus):
        place[e] = (g, count[g])
        count[g] += 1
    return place


def local_experts(cfg):
    """Most experts placed on one GPU (every GPU gets that many windows)."""
    place = expert_placement(cfg)
    return int(place[:cfg.workload.moe.num_experts, 1].max()) + 1 if cfg.workload.moe.num_experts else 0


def experts_of_window(st, w):
    """Expert ids whose window is w (GPU g, local slot le: w = g * local_experts + le), in a built
    State (State.moe_place: expert_placement's table)."""
    p = st.p[0]
    g, le = divmod(w, int(p.local_experts))
    E = int(p.num_experts)
    return [e for e in range(E) if st.moe_place[e, 0] == g and st.moe_place[e, 1] == le]


def stream_slots_per_sm(cfg):
    """Instruction-stream slots per SM: one per resident thread block, or more where a launch's
    blocks are made of more warp groups."""
    groups = [lc.warp_groups for lc in cfg.workload.launches]
    return max([cfg.system.gpu.sm.max_resident_tbs] + groups)


def start_queue_capacity(cfg):
    """Blocks the DAM may have started and the scheduler not yet placed, per GPU: every tile it
    holds (a tile is released only by a block of its last group, once placed) times the blocks of
    a tile, plus the launch's last block."""
    tbs = max([lc.dam_tile_tbs for lc in cfg.workload.launches] + [0])
    if not tbs or not cfg.workload.moe.num_experts:
        return 1
    dam = cfg.system.gpu.hub.moe.dam
    tiles_per_window = max(cfg.workload.moe.window_rows, dam.tile_rows) // dam.tile_rows
    return local_experts(cfg) * tiles_per_window * tbs + 1
