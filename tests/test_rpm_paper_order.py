"""The MoE-Hub RPM's whole order (system.gpu.hub.moe.rpm.schedule: paper, arXiv 2605.05888):
toward one GPU, critical rows before `.nop` ones (st.rowsp.nop), then the smallest row id first
(send_to_expert rows: their home index). A hand-written store sequence pins the order in which
rows land (the receiver's window slots are handed out in landing order, and each slot's completion
record names its row), both engines agree, the functional layer stays exact, and the moehub
scheme's nop_choices option marks the stores it says and rejects what it cannot mark."""
import pytest

from conftest import CONFIGS, cli_stats_per_engine, model_stats, run_cli, simulate

FUNCTIONAL = "experiments/functional.yaml"

# GPU 0 stores seven 1000 B rows to expert 2 (on GPU 1) in this order; rows 1 and 0 are .nop.
# With 64 B packets and a 0.25 GHz hub the first row takes 16 packetizer cycles (64 ns), so the
# later six are all accepted while it is being sent: the order decides which of them leaves next.
ORDER = """.kernel order_stores
.param x
    rowsp.malloc 0, 2, 1000
    bne %gpu, 0, end
    {s} 0, 5, 0, %x, 1000
    {s} 0, 3, 0, %x, 1000
    {n} 0, 1, 0, %x, 1000
    {s} 0, 9, 0, %x, 1000
    {s} 0, 2, 0, %x, 1000
    {n} 0, 0, 0, %x, 1000
    {s} 0, 4, 0, %x, 1000
end:
    notify_ready.eos 1
    exit
"""
# the same rows as send_to_expert (expert, src, bytes, home, aux): ordered by home
SEND = """.kernel order_stores
.param x
    bne %gpu, 0, end
    send_to_expert 2, %x, 1000, 5, 0
    send_to_expert 2, %x, 1000, 3, 0
    send_to_expert 2, %x, 1000, 1, 0
    send_to_expert 2, %x, 1000, 9, 0
    send_to_expert 2, %x, 1000, 2, 0
    send_to_expert 2, %x, 1000, 0, 0
    send_to_expert 2, %x, 1000, 4, 0
end:
    notify_ready.eos 1
    exit
"""

CONFIG = """extends: {base}
workload:
  mode: functional
  kernel_files: [{kernel}, {repo}/workloads/kernels/hub/dispatch_combine.s]
  launches:
    - kernel: order_stores
      grid: 1
      stream: 0
      params: {{x: "@x"}}
    - kernel: moe_drain
      grid: 2
      stream: 1
"""
TINY_PACKETS = ["system.gpu.hub.moe.rpm.merge_buffer_bytes=64B", "system.gpu.hub.clock=0.25GHz",
                "system.gpu.hub.moe.dam.tile_rows=1"]


def _config(tmp_path, body):
    kernel = tmp_path / "order.s"
    kernel.write_text(body)
    cfg = tmp_path / "order.yaml"
    cfg.write_text(CONFIG.format(base=CONFIGS / "hub" / "dispatch_combine.yaml", kernel=kernel,
                                 repo=CONFIGS.parent))
    return cfg


def _landing_order(sim):
    """Row ids (record word `home`) of expert 2's window slots on GPU 1, in slot order."""
    rec = sim.read_buffer(1, "moe_records", "i64").reshape(2, -1, 4)   # [local expert][slot]
    n = int(sim.stats["system.gpu1.hub.aau.allocations"])
    return [int(h) for h in rec[0, :n, 1]]


def _run(tmp_path, body, schedule):
    from moehub_arch.config import load_config
    from moehub_arch.simulation import Simulation
    sim = Simulation(load_config(_config(tmp_path, body), [
        f"system.gpu.hub.moe.rpm.schedule={schedule}", *TINY_PACKETS]))
    sim.run()
    return sim


STORES = ORDER.format(s="st.rowsp", n="st.rowsp.nop")


@pytest.mark.parametrize("schedule, order", [
    ("arrival", [5, 3, 1, 9, 2, 0, 4]),
    ("full_first", [5, 3, 1, 9, 2, 0, 4]),
    # row 5 is being sent when the others arrive; then critical rows by id, then the .nop ones
    ("paper", [5, 2, 3, 4, 9, 0, 1]),
])
def test_rows_land_in_the_schedule_order(tmp_path, schedule, order):
    sim = _run(tmp_path, STORES, schedule)
    assert _landing_order(sim) == order
    s = sim.stats
    assert s["system.gpu0.hub.rpm.rowsp_stores"] == 7
    if schedule == "paper":
        # 3 stays behind 5 (being sent), .nop 1 behind 3; 9 passes 1; 2 passes 9 and 3 (then
        # 1); .nop 0 passes .nop 1; 4 passes 9 (then 0 and 1): four rows moved
        assert s["system.gpu0.hub.rpm.reordered_rows"] == 4
        assert s["system.gpu0.hub.rpm.nop_stores"] == 2
    else:
        # the order's stats appear with schedule paper or once a .nop store was used
        assert s["system.gpu0.hub.rpm.reordered_rows"] == 0
        assert s["system.gpu0.hub.rpm.nop_stores"] == 2


def test_send_to_expert_rows_are_ordered_by_home(tmp_path):
    """send_to_expert carries no row id: schedule paper orders its rows by home (and has no
    .nop variant, so every row is critical)."""
    sim = _run(tmp_path, SEND, "paper")
    assert _landing_order(sim) == [5, 0, 1, 2, 3, 4, 9]


def test_the_order_is_the_same_in_both_engines(tmp_path):
    stats = cli_stats_per_engine(_config(tmp_path, STORES), tmp_path,
                                 "--set", "system.gpu.hub.moe.rpm.schedule=paper",
                                 *[a for o in TINY_PACKETS for a in ("--set", o)])
    assert stats["python"] == stats["numba"]
    assert stats["numba"]["system.gpu0.hub.rpm.reordered_rows"] == 4


@pytest.mark.parametrize("stores", ["send_to_expert", "row_sparse"])
@pytest.mark.parametrize("routing", ["uniform", "skewed"])
def test_paper_order_keeps_the_layer_exact(stores, routing):
    s = simulate(FUNCTIONAL, "scheme=moehub", "system.gpu.hub.moe.rpm.schedule=paper",
                 f"workload.layer.moehub.stores={stores}",
                 f"workload.layer.routing.kind={routing}").stats
    assert s["system.moe.output_max_abs_error"] == 0.0


def test_nop_choices_mark_each_tokens_last_choices():
    """tiny_functional: top-2, so nop_choices=1 marks every token's second choice: half the
    stores are .nop; the layer stays exact under the paper's order, with spill tables too."""
    s = simulate(FUNCTIONAL, "scheme=moehub", "workload.layer.moehub.stores=row_sparse",
                 "workload.layer.moehub.nop_choices=1", "system.gpu.hub.moe.rpm.schedule=paper",
                 "system.gpu.hub.moe.aau.overflow=spill",
                 "system.gpu.hub.moe.aau.record_table_entries=4").stats
    assert s["system.moe.output_max_abs_error"] == 0.0
    G = int(s["system.num_gpus"]) if "system.num_gpus" in s else 4
    for g in range(G):
        pre = f"system.gpu{g}.hub.rpm"
        assert 2 * s[f"{pre}.nop_stores"] == s[f"{pre}.rowsp_stores"]
    assert sum(s[f"system.gpu{g}.hub.aau.spills"] for g in range(G)) > 0


@pytest.mark.parametrize("sets, message", [
    (["workload.layer.moehub.nop_choices=1"], "set workload.layer.moehub.stores: row_sparse"),
    (["workload.layer.moehub.stores=row_sparse", "workload.layer.moehub.nop_choices=3"],
     "above the model's top-k (2)"),
    (["workload.layer.moehub.stores=row_sparse", "workload.layer.moehub.multi_expert_store=true",
      "workload.layer.moehub.nop_choices=1"], "has no .nop variant"),
])
def test_bad_nop_choices_are_config_errors(tmp_path, sets, message):
    r = run_cli("run", CONFIGS / FUNCTIONAL, "-o", tmp_path / "out", "--set", "scheme=moehub",
                *[a for o in sets for a in ("--set", o)])
    assert r.returncode == 2, r.stderr
    assert "workload.layer.moehub.nop_choices" in r.stderr and message in r.stderr
    assert "Traceback" not in r.stderr


def test_st_rowsp_nop_is_st_rowsp_with_the_nop_subop():
    from moehub_arch.isa import default_isa_paths, load_isa
    from moehub_arch.isa.encoding import ROWSP_CRITICAL, ROWSP_NOP
    isa = load_isa(default_isa_paths())
    nop, plain = isa.instructions["st.rowsp.nop"], isa.instructions["st.rowsp"]
    assert nop.semantic == plain.semantic
    assert (plain.subop, nop.subop) == (ROWSP_CRITICAL, ROWSP_NOP)
