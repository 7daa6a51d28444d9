"""Bad MoE-Hub input is a clear error with exit status 2: a store naming a destination (expert) id
that is not registered (workload.moe.num_experts), a row larger than the registered row size
(workload.moe.row_bytes), and a row table of 0 entries (either overflow design)."""
import pytest

from conftest import run_cli

HUB = "configs/hub/dispatch_combine.yaml"
EXPERT_PARAMS = (".kernel moe_expert\n.param log\n.param y\n.param out\n.param row_bytes\n"
                 ".param slot_bytes\n.param record_bytes\n.param tile_rows\n    exit\n")


def _dispatch_kernel(tmp_path, store):
    kernel = tmp_path / "k.s"
    kernel.write_text(".kernel moe_dispatch\n.param x\n.param tokens\n.param topk\n.param row_bytes\n"
                      f".param num_experts\n    {store}\n    exit\n" + EXPERT_PARAMS)
    return kernel


@pytest.mark.parametrize("store, message", [
    ("send_to_expert 8, %x, 64, 0, 0", "expert id out of range"),          # experts 0..7 registered
    ("send_to_expert -1, %x, 64, 0, 0", "expert id out of range"),
    ("send_to_expert 0, %x, 1025, 0, 0", "row larger than the window slot"),  # row_bytes: 1 KB
])
def test_store_to_unregistered_id_or_oversized_row_names_the_kernel_line(tmp_path, store, message):
    kernel = _dispatch_kernel(tmp_path, store)
    r = run_cli("run", HUB, "-o", tmp_path / "out", "--set", f"workload.kernel_files=[{kernel}]")
    assert r.returncode == 2, r.stderr
    assert "k.s:7: runtime error in kernel 'moe_dispatch'" in r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("overflow", ["stall", "spill"])
def test_row_table_of_zero_entries_is_a_config_error(tmp_path, overflow):
    r = run_cli("run", HUB, "-o", tmp_path, "--set", "system.gpu.hub.moe.aau.record_table_entries=0",
                "--set", f"system.gpu.hub.moe.aau.overflow={overflow}")
    assert r.returncode == 2
    assert "system.gpu.hub.moe.aau.record_table_entries: expected an integer >= 1, found 0" in r.stderr
    assert "Traceback" not in r.stderr
