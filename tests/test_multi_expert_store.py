"""Multi-expert stores (an ISA experiment beyond MoE-Hub, arXiv 2605.05888): send_to_experts and
st.rowsp.experts name several experts on one GPU; the row crosses the links once and the
destination AAU writes it into each named expert's window (a slot, a completion record and a
row-table entry each). Exact stream bytes on a hand-written routing (k experts on m distinct GPUs
-> m rows in the stream), every row home, the layer exact with either routing, both engines
agree, and bad stores are runtime errors naming the kernel line (exit 2)."""
import pytest

from conftest import assert_rows_home, cli_stats_per_engine, model_stats, run_cli, simulate

MICRO = "hub/dispatch_combine_multi.yaml"
ROWSP = "workload.launches.0.params.rowsp=1"
FUNCTIONAL = "experiments/functional.yaml"
MULTI = "workload.layer.moehub.multi_expert_store=true"
G, TOKENS, ROW, HEADER = 4, 32, 1000, 16


def _check_micro(s, rowsp):
    """moe_dispatch_multi: 16 even tokens (both experts on one GPU: one store, one row in the
    stream) and 16 odd ones (one store per GPU): 48 rows in the stream for 64 token-expert pairs."""
    per_row = ROW if rowsp else ROW + HEADER      # st.rowsp carries no row header
    for g in range(G):
        pre = f"system.gpu{g}.hub.rpm"
        assert s[f"{pre}.rows_accepted"] == 64
        assert s[f"{pre}.multi_expert_stores"] == 48
        assert s[f"{pre}.multi_expert_copies"] == 16
        assert s[f"{pre}.payload_bytes"] == 48 * per_row
        assert s[f"{pre}.multi_expert_bytes_saved"] == 16 * per_row
        assert s[f"{pre}.rowsp_stores"] == (64 if rowsp else 0)
        assert s[f"system.gpu{g}.hub.aau.records_written"] == 64 // 2 * 2   # 2 experts per GPU
    assert s["system.moe.multi_expert_bytes_saved"] == G * 16 * per_row
    # every slot allocated and every record written, once per token-expert pair
    assert sum(s[f"system.gpu{g}.hub.aau.allocations"] for g in range(G)) == G * 64
    assert sum(s[f"system.gpu{g}.hub.aau.records_written"] for g in range(G)) == G * 64


@pytest.mark.parametrize("rowsp", [False, True])
def test_hand_routing_moves_a_row_once_per_gpu(rowsp):
    sim = simulate(MICRO, *([ROWSP] if rowsp else []))
    assert_rows_home(sim, G, TOKENS, 2, ROW)
    _check_micro(model_stats(sim.stats), rowsp)


TINY = ["system.gpu.hub.moe.rpm.row_queue_depth=3", "system.gpu.hub.moe.rpm.merge_buffer_bytes=64B",
        "system.gpu.hub.moe.dam.tile_rows=2", "workload.moe.window_rows=4",
        "system.gpu.hub.moe.aau.overflow=spill", "system.gpu.hub.moe.aau.record_table_entries=2"]


def test_tiny_tables_spill_and_engines_agree(tmp_path):
    """Rings of 3 descriptors (a two-expert store needs 2 at once), 64 B packets, windows of 4
    rows and a row table of 2 entries that spills: a multi-expert row's copies get their own
    entries, evicted and read back like any row's; every row comes home and the reference engine
    gives the same stats."""
    sim = simulate(MICRO, ROWSP, *TINY)
    assert_rows_home(sim, G, TOKENS, 2, ROW)
    s = model_stats(sim.stats)
    _check_micro(s, True)
    assert sum(s[f"system.gpu{g}.hub.aau.spills"] for g in range(G)) > 0
    assert sum(s[f"system.gpu{g}.hub.aau.refills"] for g in range(G)) > 0
    assert sum(s[f"system.gpu{g}.hub.rpm.accept_stalls"] for g in range(G)) > 0
    # the engines compared on 8 of the 32 tokens: a quarter of the events, every row still home,
    # still spilling, reading entries back and refusing stores at full rings
    small = [ROWSP] + TINY + ["workload.launches.0.params.tokens=8"]
    sim = simulate(MICRO, *small)
    assert_rows_home(sim, G, 8, 2, ROW)
    s = model_stats(sim.stats)
    for n in ("aau.spills", "aau.refills", "rpm.accept_stalls"):
        assert sum(s[f"system.gpu{g}.hub.{n}"] for g in range(G)) > 0, n
    stats = cli_stats_per_engine(f"configs/{MICRO}", tmp_path,
                                 *[a for o in small for a in ("--set", o)])
    assert stats["python"] == stats["numba"] == s


@pytest.mark.parametrize("routing", ["uniform", "skewed"])
def test_grouped_layer_is_exact(routing):
    """The layer's grouped dispatch (one store per token and GPU) with both store kinds: the
    output is the NumPy reference's exactly, and the stream holds one row per (token, GPU)."""
    kind = f"workload.layer.routing.kind={routing}"
    for stores in ("send_to_expert", "row_sparse"):
        sim = simulate(FUNCTIONAL, "scheme=moehub", MULTI, kind,
                       f"workload.layer.moehub.stores={stores}")
        s = model_stats(sim.stats)
        assert s["system.moe.output_max_abs_error"] == 0.0
        idx = sim.layer.routing.topk_idx.reshape(G, -1, 2)         # tiny_functional: top-2 of 8
        per_row = 128 + (0 if stores == "row_sparse" else HEADER)    # 64 bf16 + row header
        for g in range(G):
            pairs = {(t, int(e) // 2) for t, row in enumerate(idx[g]) for e in row}
            pre = f"system.gpu{g}.hub.rpm"
            assert s[f"{pre}.rows_accepted"] == idx.shape[1] * 2
            assert s[f"{pre}.multi_expert_stores"] == len(pairs)
            assert s[f"{pre}.payload_bytes"] == len(pairs) * per_row


HUB = "configs/hub/dispatch_combine.yaml"


def _kernel(tmp_path, body):
    kernel = tmp_path / "k.s"
    kernel.write_text(".kernel moe_dispatch\n.param x\n.param tokens\n.param topk\n.param row_bytes\n"
                      f".param num_experts\n{body}    exit\n"
                      ".kernel moe_expert\n.param log\n.param y\n.param out\n.param row_bytes\n"
                      ".param slot_bytes\n.param record_bytes\n.param tile_rows\n    exit\n")
    return kernel


# experts 2d and 2d + 1 sit on GPU d (dispatch_combine.yaml); line 7 is the first instruction
SET = "    mov r16, 2\n    mov r17, 3\n    mov r18, 4\n"     # lines 7-9


@pytest.mark.parametrize("body, line, message", [
    (SET + "    send_to_experts r16, 0, %x, 64, 0, 0\n", 10, "whose mask names no expert"),
    (SET + "    send_to_experts r16, 5, %x, 64, 0, 0\n", 10, "experts placed on different GPUs"),
    (SET + "    mov r17, 2\n    send_to_experts r16, 3, %x, 64, 0, 0\n", 11, "or one expert"),
    (SET + "    send_to_experts r16, 256, %x, 64, 0, 0\n", 10, "naming too many experts"),
    (SET + "    send_to_experts r30, 4, %x, 64, 0, 0\n", 10, "registers past r31"),
    (SET + "    send_to_experts r16, 3, %x, 2048, 0, 0\n", 10, "larger than the window slot"),
    (SET + "    rowsp.malloc 2, 2, 64\n    rowsp.malloc 3, 3, 64\n"
           "    st.rowsp.experts r16, 3, 0, %x, 32\n", 12, "above the registered row size"),
    (SET + "    rowsp.malloc 2, 2, 64\n    st.rowsp.experts r16, 3, 0, %x, 64\n", 11,
     "has not registered"),
    (SET + "    rowsp.malloc 2, 2, 64\n    rowsp.malloc 3, 2, 64\n"
           "    st.rowsp.experts r16, 3, 0, %x, 64\n", 12, "or one expert"),
])
def test_bad_multi_expert_stores_name_the_kernel_line(tmp_path, body, line, message):
    kernel = _kernel(tmp_path, body)
    r = run_cli("run", HUB, "-o", tmp_path / "out", "--set", f"workload.kernel_files=[{kernel}]")
    assert r.returncode == 2, r.stderr
    assert f"k.s:{line}: runtime error in kernel 'moe_dispatch'" in r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr


def test_more_experts_than_a_ring_holds_is_an_error(tmp_path):
    kernel = _kernel(tmp_path, SET + "    send_to_experts r16, 3, %x, 64, 0, 0\n")
    r = run_cli("run", HUB, "-o", tmp_path / "out", "--set", f"workload.kernel_files=[{kernel}]",
                "--set", "system.gpu.hub.moe.rpm.row_queue_depth=1")
    assert r.returncode == 2, r.stderr
    assert "k.s:10: runtime error" in r.stderr and "row_queue_depth" in r.stderr


MIXED = """.kernel moe_dispatch_mixed
.param x
.param tokens
.param row_bytes
.param num_experts
.param rowsp
.param sync
    mov r1, %tb
register:
    bge r1, %num_experts, registered
    rowsp.malloc r1, r1, %row_bytes
    add r1, r1, %ntb
    bra register
registered:
    atom.add r7, %gpu, [%sync], 1
    wait.ge [%sync], %ntb
    mov r1, %tb
token:
    bge r1, %tokens, end
    mul r2, r1, %row_bytes
    add r2, r2, %x
    mul r16, r1, 7
    add r16, r16, %gpu
    rem r16, r16, %num_experts
    xor r17, r16, 1
    shl r5, r1, 1
    add r6, r5, 1
    send_to_expert r16, r2, %row_bytes, r5, 0
    st.rowsp r17, r6, 0, r2, %row_bytes
    add r1, r1, %ntb
    bra token
end:
    notify_ready.eos %ntb
    exit
"""


def test_rows_and_row_sparse_stores_toward_one_gpu_never_share_a_packet(tmp_path):
    """A kernel mixing both store kinds toward one GPU (a send_to_expert row, then an st.rowsp
    store of the same token to the other expert there): the send_to_expert rows coalesce up to
    the next store and never into it. With dgx_h100's 256 B packets a 1016 B row (with its
    header) is 4 packets and a 1000 B store 4: 8 per token, plus one end-of-stream packet per
    destination; nothing waits for a flush, and every row comes home."""
    kernel = tmp_path / "mixed.s"
    kernel.write_text(MIXED)
    sim = simulate(MICRO, "workload.launches.0.kernel=moe_dispatch_mixed",
                   f"workload.kernel_files=[workloads/kernels/hub/dispatch_combine.s, {kernel}]")
    assert_rows_home(sim, G, TOKENS, 2, ROW)
    s = model_stats(sim.stats)
    for g in range(G):
        pre = f"system.gpu{g}.hub.rpm"
        assert s[f"{pre}.packets"] == 8 * TOKENS + G
        assert s[f"{pre}.flushes"] == 0
        assert s[f"{pre}.payload_bytes"] == TOKENS * (ROW + HEADER + ROW)
