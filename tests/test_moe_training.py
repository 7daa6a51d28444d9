"""The MoE layer's backward pass (workload.layer.passes: training; moehub_arch/workloads/
layer_backward.py, workloads/kernels/common/moe_backward.s) on a tiny functional layer: every
gradient bit-identical to the NumPy reference (moe_backward.py), gradient rows conserved in both
directions, the forward unchanged by the backward behind it, both engines identical, and a
scheme without a backward rejected. Schemes: megatron, deepep (normal mode, intranode), hiermoe
(gpu level), overlap (the gradient dispatch overlapped with the backward GEMMs tile by tile), tutel
(capacity factor: dropped pairs get no gradient; two slices, the default, and one), nvls and
dysharp (multicast and in-switch reduction in swapped roles; after the token-fused megakernel, the
default, and after the unfused sequence), moehub (the gradient rows through the hub's gradient windows
in a second round of its streams; with the DAM's claimers and with its launched consumers), counted
(the forward's slots as the handle, counted writes both ways), ccfuser (dO rows read into the
tiles from their home GPUs, as its forward reads x), fastermoe (the group-wise steps in reverse;
shadowed experts refused)."""
import json

import numpy as np

import pytest

from conftest import REPO, drive_both_engines, mini_system, run_cli, simulate

ONE_NODE = "configs/experiments/functional.yaml"                          # 4 GPUs
TWO_NODES = "configs/experiments/hiermoe/functional_tiny_2x2.yaml"      # 2 nodes x 2 GPUs
GRADIENTS = ("dx", "dw", "dw_gate", "dw_up", "dw_down", "ds_gate", "ds_up", "ds_down")


@pytest.fixture(scope="module")
def megatron_training():
    return simulate("experiments/functional.yaml", "scheme=megatron",
                    "workload.layer.passes=training").stats


@pytest.fixture(scope="module")
def deepep_training():
    return simulate("experiments/functional.yaml", "scheme=deepep",
                    "workload.layer.passes=training").stats


@pytest.fixture(scope="module")
def hiermoe_training():
    """HierMoE at the gpu level (one node): DeepEP's direct dispatch, and its backward."""
    return simulate("experiments/functional.yaml", "scheme=hiermoe",
                    "workload.layer.passes=training").stats


@pytest.fixture(scope="module")
def overlap_training():
    """Comet-style overlap: dO rows read tile by tile while the backward GEMM blocks wait on each
    tile's counter; dX rows go home while the weight gradients run."""
    return simulate("experiments/functional.yaml", "scheme=overlap",
                    "workload.layer.passes=training").stats


@pytest.fixture(scope="module")
def tutel_training():
    """Tutel with capacity factor 1.0 (41 pairs dropped) and two slices (the config's, Tutel's
    overlap): each slice's all-to-alls in reverse around its expert backward, dropped pairs
    without gradient rows, padding rows computed as zeros."""
    return simulate("experiments/functional.yaml", "scheme=tutel",
                    "workload.layer.passes=training", "workload.layer.tutel.chunks=2",
                    "workload.layer.tutel.capacity_factor=1.0").stats


@pytest.fixture(scope="module")
def tutel_one_slice_training():
    """Tutel with one slice: the whole capacity's all-to-alls in reverse."""
    return simulate("experiments/functional.yaml", "scheme=tutel",
                    "workload.layer.passes=training", "workload.layer.tutel.chunks=1",
                    "workload.layer.tutel.capacity_factor=1.0").stats


@pytest.fixture(scope="module")
def nvls_training():
    """NVLS: the reduce-scatter's backward an all-gather of dy (multimem.st), the all-gather's a
    reduce-scatter of the dX partials in the switch (multimem.ld_reduce)."""
    return simulate("experiments/functional.yaml", "scheme=nvls",
                    "workload.layer.passes=training").stats


@pytest.fixture(scope="module")
def dysharp_training():
    """DySHARP after its token-fused megakernel (the default; its GEMM-2 epilogue keeps the
    unweighted rows too): dy multicast to each token's k experts (dymultimem.st, placed by the
    forward's AL entries), the k dX rows reduced in the switch (dymultimem.ld_reduce)."""
    return simulate("experiments/functional.yaml", "scheme=dysharp",
                    "workload.layer.passes=training").stats


@pytest.fixture(scope="module")
def dysharp_unfused_training():
    """DySHARP's unfused sequence (fusion: none) and the same backward."""
    return simulate("experiments/functional.yaml", "scheme=dysharp",
                    "workload.layer.dysharp.fusion=none", "workload.layer.passes=training").stats


@pytest.fixture(scope="module")
def ccfuser_training():
    """CCFuser: each expert GPU reads its tiles' dO rows from their home GPUs (get) while the
    backward GEMM blocks wait on each tile's counter; dX rows put home during the wgrad."""
    return simulate("experiments/functional.yaml", "scheme=ccfuser",
                    "workload.layer.passes=training").stats


@pytest.fixture(scope="module")
def fastermoe_training():
    """FasterMoE with groups of 2 (two steps): each step's dO rows out, its act and dgrad, its dX
    rows back, step by step; one wgrad over the expert-major rows."""
    return simulate("experiments/functional.yaml", "scheme=fastermoe",
                    "workload.layer.fastermoe.group_size=2",
                    "workload.layer.passes=training").stats


@pytest.fixture(scope="module")
def moehub_training():
    """MoE-Hub (consumers: claim): dO rows stored to each expert's gradient window (a second
    round of the hub's streams), placed at the forward's row positions by the completion
    records; dX rows home with send_home."""
    return simulate("experiments/functional.yaml", "scheme=moehub",
                    "workload.layer.passes=training").stats


@pytest.fixture(scope="module")
def moehub_launch_training():
    """MoE-Hub with the DAM starting the forward's consumers (consumers: launch, the published
    design); the backward's gradient tiles are claimed."""
    return simulate("experiments/functional.yaml", "scheme=moehub",
                    "workload.layer.passes=training",
                    "system.gpu.hub.moe.dam.consumers=launch").stats


@pytest.fixture(scope="module")
def counted_training():
    """Counted writes (Blackwell's, on this system's NVLink model): the forward's slots and packed
    ranges as the handle, the gradient rows put.counted both ways."""
    return simulate("experiments/functional.yaml", "scheme=counted",
                    "workload.layer.passes=training").stats


@pytest.fixture(params=["megatron", "deepep", "hiermoe", "overlap", "tutel", "tutel_one_slice",
                        "nvls", "dysharp", "dysharp_unfused", "moehub", "moehub_launch", "counted",
                        "ccfuser", "fastermoe"])
def training(request):
    return request.getfixturevalue(f"{request.param}_training")


def test_gradients_equal_the_reference(training):
    """Bit-identical: megatron sums dx per slot, deepep per rank (its combine's partial sums,
    rounded to bf16 on the way home: the reference's combine='per_rank')."""
    st = training
    # the forward still checks (tutel: the pairs it kept)
    assert st.get("system.moe.output_max_abs_error_kept",
                  st["system.moe.output_max_abs_error"]) == 0.0
    for g in GRADIENTS:
        assert st[f"system.moe.backward.{g}_max_abs_error"] == 0.0, g
        assert st[f"system.moe.backward.{g}_max_abs_reference"] > 1.0, g   # not all zero


def test_gradient_rows_conserved_both_directions(training):
    """Every kept pair's gradient row goes out and comes back once (tutel: the dropped pairs
    none; its padding rows are computed in both passes)."""
    st = training
    pairs = 4 * 64 * 2                      # GPUs x tokens x top-k
    kept = pairs - st.get("system.moe.rows_dropped", 0)
    assert st["system.moe.backward.rows_dispatched"] == kept
    assert st["system.moe.backward.rows_combined"] == kept
    assert st["system.moe.backward.rows_computed"] == st["system.moe.rows_computed"]
    assert st["system.moe.rows_combined"] == pairs
    t = st["system.moe.backward.time_us"]
    assert 0 < st["system.moe.backward.expert_us"] <= t
    assert st["system.moe.backward.overhead_us"] == pytest.approx(
        t - st["system.moe.backward.ideal_compute_us"])


def test_forward_stats_unchanged_by_the_backward(megatron_training):
    """The forward's figures leave the backward's launches out. They are not bit-identical: the
    backward's control buffers (always backed) come before every data buffer, so the forward's
    data buffers sit at other addresses, on other HBM channels - under a nanosecond here."""
    fwd = simulate("experiments/functional.yaml", "scheme=megatron").stats
    for name in ("system.moe.layer_time_us", "system.moe.phase.dispatch_us",
                 "system.moe.phase.expert_us", "system.moe.phase.combine_us",
                 "system.moe.kernel.a2a_put_us", "system.moe.dispatch_wire_bytes_max"):
        assert megatron_training[name] == pytest.approx(fwd[name], abs=1e-3), name
    assert "system.moe.backward.time_us" not in fwd


DRIVER = r"""
import json, sys
sys.path.insert(0, {tests!r})
from conftest import simulate, mini_system
st = simulate("experiments/functional.yaml", "scheme={scheme}", "workload.layer.passes=training",
              *mini_system(num_gpus=2, num_sms=4), "workload.layer.tokens_per_gpu=16",
              *{sets!r}).stats
print(json.dumps({{s.name: float(s.value) for s in st if not s.name.startswith("host")}}))
"""


@pytest.mark.parametrize("scheme, sets", [
    ("megatron", ()),
    # two slices, pairs dropped at capacity factor 1.0: the sliced backward
    ("tutel", ("workload.layer.tutel.capacity_factor=1.0",)),
    # the token-fused megakernel's blocks all resident on 4 SMs
    ("dysharp", ("workload.layer.dysharp.compute_tbs=4", "workload.layer.dysharp.gate_tbs=2",
                 "workload.layer.dysharp.channels=2")),
], ids=["megatron", "tutel_chunks2", "dysharp_fused"])
def test_engines_identical_on_the_tiniest_training_layer(scheme, sets):
    numba, python = drive_both_engines(DRIVER.format(tests=str(REPO / "tests"), scheme=scheme,
                                                     sets=sets))
    assert numba == python
    for g in GRADIENTS[:5]:
        assert numba[f"system.moe.backward.{g}_max_abs_error"] == 0.0, g
    kept = 2 * 16 * 2 - numba.get("system.moe.rows_dropped", 0)
    assert numba["system.moe.backward.rows_combined"] == kept


@pytest.mark.parametrize("scheme, sets", [
    ("tutel", ("workload.layer.tutel.chunks=2", "workload.layer.tutel.capacity_factor=1.0")),
    ("fastermoe", ("workload.layer.fastermoe.group_size=2",)),
], ids=["tutel_chunks2", "fastermoe_two_steps"])
def test_sliced_backward_leaves_the_forward_alone(request, scheme, sets):
    """The sliced backward's waits (from the forward's end until a slice's rows arrive) belong to
    neither pass: the training run's forward takes about the forward-only run's time (its
    expert-major layout aside), and its rows are the same."""
    st = request.getfixturevalue(f"{scheme}_training")
    fwd = simulate("experiments/functional.yaml", f"scheme={scheme}", *sets).stats
    assert st["system.moe.layer_time_us"] == pytest.approx(fwd["system.moe.layer_time_us"],
                                                           rel=0.1)
    assert st["system.moe.layer_time_us"] < st["system.moe.backward.time_us"]
    for name in ("rows_computed", "rows_combined"):
        assert st[f"system.moe.{name}"] == fwd[f"system.moe.{name}"]


def test_deepep_backward_reuses_the_handle(deepep_training):
    """DeepEP's backward: no layout, no notify, no host round trip - only the forward's
    mediation; the gradient dispatch and combine each open with a cached notify."""
    st = deepep_training
    assert st["system.moe.phase.mediation_us"] > 0
    assert st["system.moe.backward.dispatch_us"] > 0 and st["system.moe.backward.combine_us"] > 0
    # the forward's DeepEP figures count the forward's kernels alone (with the backward's too,
    # the kernel time would double; the buffers' other addresses move it by about 1%)
    fwd = simulate("experiments/functional.yaml", "scheme=deepep").stats
    assert st["system.moe.deepep.dispatch_recv_bytes"] == fwd["system.moe.deepep.dispatch_recv_bytes"]
    for name in ("dispatch_GBps", "combine_GBps", "combine_reduce_GBps"):
        assert st[f"system.moe.deepep.{name}"] == pytest.approx(
            fwd[f"system.moe.deepep.{name}"], rel=0.05), name


@pytest.mark.parametrize("config, scheme, sets, words", [
    # skewed routing: the shadow policy replicates a hot expert (test_scheme_fastermoe_ccfuser)
    (ONE_NODE, "fastermoe", ("workload.layer.fastermoe.group_size=2",
                             "workload.layer.routing.kind=skewed",
                             "workload.layer.routing.gini=0.5"), "fastermoe.shadow"),
    (ONE_NODE, "deepep_ll", (), "inference"),
    (ONE_NODE, "deepep", ("workload.layer.deepep.home_reduce=kernel",), "home_reduce"),
    (ONE_NODE, "deepep", ("workload.layer.deepep.kernels=communication",),
     "kernels: communication"),
    (ONE_NODE, "counted", ("workload.layer.counted.kernels=communication",), "identity experts"),
    # across two nodes: the multi-node kernels without a backward
    (TWO_NODES, "hiermoe", ("workload.layer.hiermoe.level=node",), "hiermoe.level: gpu"),
    (TWO_NODES, "deepep", (), "internode"),
], ids=["fastermoe_shadowed", "deepep_ll", "deepep_home_reduce_kernel", "deepep_comm_only",
        "counted_comm_only", "hiermoe_node_level", "deepep_internode"])
def test_scheme_without_a_backward_is_an_error(tmp_path, config, scheme, sets, words):
    extra = [a for kv in sets for a in ("--set", kv)]
    r = run_cli("run", config, "--set", f"scheme={scheme}",
                "--set", "workload.layer.passes=training", *extra, "-o", str(tmp_path / "x"))
    assert r.returncode == 2
    assert "workload.layer.passes" in r.stderr and words in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "x" / "stats.json").exists()       # refused before simulating


def test_backward_token_accounting_is_an_invariant():
    """A gradient row counted twice as combined (as a buggy gradient combine would): the
    backward's accounting catches it at the end of the run, beside the forward's (which holds),
    exit status 4 with the numbers (tests/test_checks.py does the same for the forward)."""
    from test_checks import Corrupt
    from moehub_arch.simulation import InvariantError, Simulation
    from conftest import load
    sim = Simulation(load("experiments/functional.yaml", "scheme=megatron",
                          "workload.layer.passes=training", "workload.layer.tokens_per_gpu=16"))
    bacct = sim.buffers["bacct"].addr

    def bug(st):
        st.hbm_mem[1, bacct:bacct + 32].view("i8")[2] += 1     # rows combined, on GPU 1
    with pytest.raises(InvariantError) as e:
        sim.run([Corrupt(1, bug)])
    assert e.value.exit_code == 4
    msg = str(e.value)
    assert msg.startswith("1 end-of-run invariant(s) violated")
    assert ("backward token accounting in scheme 'megatron': each of the 128 token-expert pairs"
            in msg)
    assert "found combined 129 (expected 128)" in msg and "dispatched" not in msg.split("found")[1]
    assert sim.stats["system.moe.backward.rows_combined"] == 129
    assert sim.stats["system.moe.rows_combined"] == 128       # the forward's holds


WIDE_MODEL = """model:
  name: wide_functional
  hidden: 7168
  expert_ffn: 128
  experts: 4
  top_k: 2
  shared_experts: 0
  shared_expert_ffn: 0
  moe_layers: 1
  layers: 1
  dtype: bf16
  router: {kind: topk_softmax, normalize: true, scale: 1.0}
"""


@pytest.mark.parametrize("scheme, sets", [
    ("dysharp", ()),
    ("dysharp", ("workload.layer.dysharp.fusion=none",)),
    ("nvls", ()),
], ids=["dysharp_fused", "dysharp_unfused", "nvls"])
def test_backward_at_deepseek_v3_width(tmp_path, scheme, sets):
    """DeepSeek-V3's hidden size (7168) on a tiny layer: the expert-side weighting kernels keep
    whole rows in shared memory (dysharp_bwd_weight: 14 H + 4 bytes - it once asked for 96 KB
    and ran out of its allocation at H 7168), and the gradients stay exact."""
    model = tmp_path / "wide.yaml"
    model.write_text(WIDE_MODEL)
    st = simulate("experiments/functional.yaml", f"scheme={scheme}",
                  f"workload.layer.model={model}", "system.num_gpus=2",
                  "workload.layer.tokens_per_gpu=16", "workload.layer.passes=training",
                  *sets).stats
    for g in GRADIENTS[:5]:
        assert st[f"system.moe.backward.{g}_max_abs_error"] == 0.0, g
    assert st["system.moe.backward.rows_combined"] == 2 * 16 * 2


@pytest.mark.parametrize("sets", [
    ("system.num_gpus=8",),              # one expert per GPU: no sort, rows straight into place
    ("workload.layer.routing.kind=skewed", "workload.layer.routing.gini=0.74"),  # idle experts
], ids=["one_local_expert", "skewed"])
@pytest.mark.parametrize("scheme", ["megatron", "deepep", "overlap", "nvls", "counted", "tutel",
                                    "dysharp", "ccfuser"])
def test_backward_other_layouts(sets, scheme):
    from moehub_arch.workloads.layer import MoeLayer
    from conftest import load
    cfg = load("experiments/functional.yaml", f"scheme={scheme}",
               "workload.layer.passes=training", *sets)
    st = simulate("experiments/functional.yaml", f"scheme={scheme}",
                  "workload.layer.passes=training", *sets).stats
    for g in GRADIENTS:
        assert st[f"system.moe.backward.{g}_max_abs_error"] == 0.0, g
    idx = MoeLayer(cfg).routing.topk_idx
    if "skewed" in sets[0]:       # some expert gets no row: its weight gradients stay zero
        assert (np.bincount(idx.reshape(-1), minlength=8) == 0).any()


def test_overlap_backward_overlaps_dispatch_with_the_expert_gemms(overlap_training):
    """The gradient dispatch (overlap_bwd_pull) runs while the backward GEMM blocks wait on its
    tiles, and the gradient combine (overlap_bwd_home) while the wgrad runs: the three phases
    overlap, so their spans sum to more than the backward's (in sequence they would not)."""
    st = overlap_training
    assert st["system.moe.backward.kernel.overlap_bwd_pull_us"] > 0
    assert st["system.moe.backward.kernel.overlap_bwd_home_us"] > 0
    phases = sum(st[f"system.moe.backward.{p}_us"] for p in ("dispatch", "expert", "combine"))
    assert phases > st["system.moe.backward.time_us"]
    assert "system.moe.kernel.overlap_bwd_pull_us" not in st     # not a forward kernel


def test_tutel_backward_drops_what_the_forward_dropped(tutel_training):
    """The reference leaves the dropped pairs out (no dw, no dx, no weight-gradient rows): the
    simulated gradients equal it while the forward's output differs from the drop-free layer."""
    st = tutel_training
    assert st["system.moe.rows_dropped"] > 0
    assert st["system.moe.output_max_abs_error"] > 0
    assert st["system.moe.output_max_abs_error_kept"] == 0
    assert st["system.moe.backward.dx_max_abs_error"] == 0


def test_nvls_backward_swaps_multicast_and_reduction(nvls_training):
    """The backward multicasts dy (the bytes of the forward's all-gather of x) and reduces the
    input gradients in the switch (the forward's reduce-scatter), with the forward's map."""
    st = nvls_training
    assert st["system.moe.backward.kernel.nvls_bwd_allgather_us"] > 0
    assert st["system.moe.backward.kernel.nvls_reduce_scatter_us"] > 0
    assert "system.moe.kernel.nvls_bwd_allgather_us" not in st


def test_dysharp_backward_forward_unchanged_by_keeping_the_outputs(dysharp_training):
    """Training keeps the unweighted expert outputs (the GEMM writes them apart, the gate
    weighting writes the combine's object): the forward's output stays exact and its row counts
    unchanged; the gradient multicast and reduction run in the backward."""
    st = dysharp_training
    assert st["system.moe.output_max_abs_error"] == 0.0
    assert st["system.moe.rows_combined"] == 4 * 64 * 2
    assert st["system.moe.backward.kernel.dysharp_bwd_dispatch_us"] > 0
    assert st["system.moe.backward.kernel.dysharp_combine_us"] > 0


def test_counted_backward_reuses_the_slots(counted_training):
    """The gradient rows take the forward's slots (no count sent, no slot counter touched again)
    and come home counted: the backward's dispatch and combine kernels run, its rows conserved."""
    st = counted_training
    assert st["system.moe.backward.kernel.counted_bwd_dispatch_us"] > 0
    assert st["system.moe.backward.kernel.counted_combine_us"] > 0
    assert "system.moe.kernel.counted_bwd_dispatch_us" not in st
    assert st["system.moe.backward.rows_combined"] == 4 * 64 * 2
