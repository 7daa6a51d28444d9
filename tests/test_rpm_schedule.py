"""RPM schedule (system.gpu.hub.moe.rpm.schedule): full_first (the MoE-Hub RPM's order, arXiv
2605.05888) and uncoalesced (the no-RPM ablation: no coalescing) keep the layer exact; uncoalesced sends each row
in its own packets, never waiting for a flush. (Both engines on the published design:
tests/test_dam_launch.py.)"""
import pytest

from conftest import simulate

FUNCTIONAL = "experiments/functional.yaml"
G = 4


@pytest.mark.parametrize("schedule", ["full_first", "uncoalesced"])
def test_schedules_keep_the_layer_exact(schedule):
    s = simulate(FUNCTIONAL, f"system.gpu.hub.moe.rpm.schedule={schedule}",
                 "workload.layer.routing.kind=skewed").stats
    assert s["system.moe.output_max_abs_error"] == 0.0


def test_rpm_off_sends_every_row_in_its_own_packet():
    off = simulate(FUNCTIONAL, "system.gpu.hub.moe.rpm.schedule=uncoalesced").stats
    on = simulate(FUNCTIONAL).stats
    assert off["system.moe.output_max_abs_error"] == 0.0
    for g in range(G):
        pre = f"system.gpu{g}.hub.rpm"
        # a 128 B row (tiny_functional: H = 64 bf16) + its 16 B header fits one 256 B packet:
        # one data packet per row, plus one end-of-stream packet per destination GPU
        assert off[f"{pre}.packets"] == off[f"{pre}.rows_accepted"] + G
        assert off[f"{pre}.flushes"] == 0
        assert off[f"{pre}.payload_bytes"] == on[f"{pre}.payload_bytes"]    # the same bytes
        # coalescing packs rows into fewer packets, and so fewer header bytes on the wire
        assert on[f"{pre}.packets"] < off[f"{pre}.packets"]
        assert on[f"{pre}.wire_bytes"] < off[f"{pre}.wire_bytes"]
