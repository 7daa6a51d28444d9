"""Area proxies of the MoE-Hub control plane: the SRAM bytes of each unit (RPM, AAU, DAM) and of
the whole plane, from the run's parameters (State.p).

Each unit reports its own (stats system.gpuN.hub.{rpm,aau,dam}.sram_bytes); the DAM reports the
whole plane's (system.gpuN.hub.moe_sram_bytes). The formulas sit together here, under the three
units, so that the total needs no unit to import its peers (the AAU imports the RPM and the DAM).
"""


def rpm_sram_bytes(p):
    """RPM: merge buffers + row descriptor rings (header + 16 B of state), per destination."""
    return int(p.num_gpus) * (p.rpm_merge_bytes + p.rpm_ring * (p.rpm_header_bytes + 16))


def aau_sram_bytes(p):
    """AAU: completion-record table + per-window base/capacity/bump registers (+ the pairing
    table when it is on chip: aau.allocation paired, pair_table on_chip)."""
    pairing = int(p.num_gpus) * p.pair_homes * p.pair_entry_bytes if int(p.pair_on_chip) else 0
    return p.records_cap * p.record_bytes + p.local_experts * 3 * 8 + pairing


def aau_staging_bytes(p):
    """AAU: the staging store, each packet up to one RPM packet of payload."""
    return p.aau_staging * p.rpm_packet_bytes


def dam_sram_bytes(p):
    """DAM: per-tile allocated/landed counters (4 B each) + per-source end-of-stream state;
    with consumers: launch also a thread-block-group counter per tile (4 B); with order: expert a
    counter per window of the tiles of its group still to hand out (4 B); with aau.allocation:
    paired a ready bit per tile (claim_buffer hands out any ready tile of a paired window; the
    pairing table itself lives in device memory: pairing.py)."""
    counters = 3 if int(p.dam_launch_mode) else 2
    group = p.local_experts * 4 if int(p.dam_expert_order) else 0
    ready_bits = -(-p.local_experts * p.tiles_per_window // 8) if int(p.aau_paired) else 0
    return p.local_experts * p.tiles_per_window * counters * 4 + int(p.num_gpus) * 8 + group \
        + ready_bits


def moe_sram_bytes(p):
    """The whole MoE-Hub control plane: RPM, AAU (table and staging store), DAM."""
    return rpm_sram_bytes(p) + aau_sram_bytes(p) + aau_staging_bytes(p) + dam_sram_bytes(p)
