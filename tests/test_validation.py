"""Hardware correlation (tools/validate.py): the correlator's arithmetic, reference-file errors,
and the definitions of the benchmark figures on cases small enough to compute by hand."""
import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, mini_system, simulate

from moehub_arch.analysis.correlation import (Reference, correlate, figure_unit, format_report,
                                              load_references)
from moehub_arch.config import ConfigError
from moehub_arch.workloads.bandwidth import (dispatch_row_bytes, mean_rank_bandwidth_GBps,
                                             tokens_received_per_rank)
from moehub_arch.workloads.routing import Routing, write_trace

FIGS = ["h100.p2p_bandwidth_GBps", "h100.p2p_latency_us", "h100.mma_bf16_TFLOPs"]


def ref(figure, value, kind="measured"):
    return Reference(figure=figure, value=value, unit=figure_unit(figure), source="test",
                     kind=kind, file="t.yaml")


# ---------------------------------------------------------------------------- correlator
def test_error_percent_mean_absolute_error_and_missing_references():
    figures = {"h100.p2p_bandwidth_GBps": 90.0, "h100.p2p_latency_us": 2.0,
               "h100.mma_bf16_TFLOPs": 500.0, "h100.hbm_bandwidth_GBps": None}
    refs = [ref("h100.p2p_bandwidth_GBps", 100.0, "datasheet"),
            ref("h100.p2p_bandwidth_GBps", 80.0),
            ref("h100.p2p_latency_us", 2.5),
            ref("h800.p2p_bandwidth_GBps", 10.0)]        # not run: left out
    corr = correlate(figures, refs)
    got = [(r.figure, r.reference.value if r.reference else None, r.error_pct) for r in corr.rows]
    assert got == [("h100.p2p_bandwidth_GBps", 100.0, pytest.approx(-10.0)),
                   ("h100.p2p_bandwidth_GBps", 80.0, pytest.approx(12.5)),
                   ("h100.p2p_latency_us", 2.5, pytest.approx(-20.0)),
                   ("h100.mma_bf16_TFLOPs", None, None),
                   ("h100.hbm_bandwidth_GBps", None, None)]
    assert corr.mean_abs_error_pct() == pytest.approx((10 + 12.5 + 20) / 3)
    assert corr.mean_abs_error_pct("datasheet") == pytest.approx(10.0)
    assert corr.mean_abs_error_pct("measured") == pytest.approx(16.25)
    assert corr.unreferenced == ["h100.mma_bf16_TFLOPs", "h100.hbm_bandwidth_GBps"]
    text = format_report(corr)
    assert "mean absolute error: 14.2% over 3 figure-reference pairs" in text
    assert "no reference: h100.mma_bf16_TFLOPs, h100.hbm_bandwidth_GBps" in text
    # a failed run (no simulated value) has a reference row but no error
    failed = correlate({"h100.p2p_latency_us": None}, [ref("h100.p2p_latency_us", 1.0)])
    assert failed.rows[0].error_pct is None and failed.mean_abs_error_pct() is None
    assert "failed" in format_report(failed)


def test_units_come_from_figure_names():
    assert figure_unit("h100.p2p_bandwidth_GBps") == "GB/s"
    assert figure_unit("h100.mma_bf16_TFLOPs") == "TFLOP/s"
    assert figure_unit("h100.p2p_latency_us") == "us"
    assert figure_unit("h100.p2p_latency") is None


def write(tmp_path, text, name="ref.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_reference_file_is_parsed(tmp_path):
    p = write(tmp_path, """
kind: datasheet
references:
  - {figure: h100.p2p_bandwidth_GBps, value: 450, unit: GB/s, source: data sheet}
  - {figure: h100.p2p_latency_us, value: 1.5, unit: us, source: my run, kind: measured,
     note: 64 B flag}
""")
    a, b = load_references([p], FIGS)
    assert (a.figure, a.value, a.unit, a.kind) == ("h100.p2p_bandwidth_GBps", 450.0, "GB/s",
                                                   "datasheet")
    assert (b.kind, b.note) == ("measured", "64 B flag")


@pytest.mark.parametrize("body, key, words", [
    ("references:\n  - {figure: h100.p2p_bandwith_GBps, value: 1, unit: GB/s, source: s}",
     "references[0].figure", "did you mean 'h100.p2p_bandwidth_GBps'"),
    ("references:\n  - {figure: h100.p2p_bandwidth_GBps, value: 1, unit: Gbit/s, source: s}",
     "references[0].unit", "expected 'GB/s'"),
    ("references:\n  - {figure: h100.p2p_bandwidth_GBps, value: 1, unit: GB/s}",
     "references[0].source", "missing"),
    ("references:\n  - {figure: h100.p2p_bandwidth_GBps, value: -3, unit: GB/s, source: s}",
     "references[0].value", "positive number"),
    ("references:\n  - {figure: h100.p2p_bandwidth_GBps, value: 1, unit: GB/s, source: s,"
     " sorce: x}", "references[0].sorce", "unknown key"),
    ("references:\n  - {figure: h100.p2p_bandwidth_GBps, value: 1, unit: GB/s, source: s,"
     " kind: guess}", "references[0].kind", "datasheet, measured"),
    ("references: []", "references", "non-empty list"),
    ("refs: []", "refs", "unknown key"),
])
def test_reference_file_errors_name_file_and_key(tmp_path, body, key, words):
    p = write(tmp_path, body)
    with pytest.raises(ConfigError) as e:
        load_references([p], FIGS)
    msg = str(e.value)
    assert "ref.yaml" in msg and f": {key}:" in msg and words in msg, msg
    assert e.value.exit_code == 2


def test_reference_yaml_syntax_error(tmp_path):
    p = write(tmp_path, "references:\n  - {figure: [\n")
    with pytest.raises(ConfigError, match="ref.yaml:.*YAML syntax error"):
        load_references([p], FIGS)
    with pytest.raises(ConfigError, match="nope.yaml: no such reference file"):
        load_references([tmp_path / "nope.yaml"], FIGS)


def validate_cli(*args):
    return subprocess.run([sys.executable, str(REPO / "tools" / "validate.py"), *map(str, args)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)


def test_validate_bad_reference_exits_2_with_one_paragraph(tmp_path):
    p = write(tmp_path, "references:\n  - {figure: h100.nope_GBps, value: 1, unit: GB/s, "
                        "source: s}")
    r = validate_cli("--reference", p, "--only", "h100.p2p_latency_us")
    assert r.returncode == 2
    assert r.stderr.startswith("validate: error: ") and "references[0].figure" in r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def moehub_sim_validate(*args):
    return subprocess.run([sys.executable, "-m", "moehub_arch", "validate", *map(str, args)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)


def test_validate_json_has_the_figure(tmp_path):
    """`moehub-sim validate` is the command; tools/validate.py (above) takes the same arguments."""
    r = moehub_sim_validate("--only", "h100.p2p_latency_us", "--json", "-o", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert list(data) == ["h100.p2p_latency_us"] and data["h100.p2p_latency_us"] > 0
    assert (tmp_path / "out" / "p2p_latency" / "stats.json").is_file()


@pytest.mark.parametrize("args, words", [
    (("--jobs", "0"), "--jobs 0: expected at least 1 parallel run"),
    (("--only", "h100.no_such_*"), "--only h100.no_such_*: no figure matches"),
    (("--set", "system.num_gpus"), "--set system.num_gpus: expected KEY=VALUE"),
])
def test_validate_bad_options_exit_2_naming_the_option(args, words):
    r = moehub_sim_validate(*args)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"moehub-sim validate: error: {words}\n"


# ---------------------------------------------------------------------- metric definitions
def test_dispatch_rows_are_deduplicated_per_rank_and_include_own_tokens():
    # 2 ranks, 2 experts each (rank = expert // 2), 3 tokens per rank, top-2
    idx = np.array([[[0, 1], [0, 2], [3, 2]],      # rank 0: -> {0}, {0, 1}, {1}
                    [[1, 0], [2, 3], [2, 0]]])     # rank 1: -> {0}, {1}, {1, 0}
    got = tokens_received_per_rank(idx, local_experts=2)
    # rank 0 receives rank 0's tokens 0, 1 (own, once each despite 2 experts) and rank 1's 0, 2
    assert got.tolist() == [4, 4]
    assert dispatch_row_bytes(7168, "bf16") == 14336
    assert dispatch_row_bytes(7168, "fp8") == 7168 + 4 * 56       # one fp32 scale per 128
    assert dispatch_row_bytes(100, "fp8") == 100 + 4               # a partial block has a scale
    # mean over ranks of bytes / time: 1000 B in 1 us = 1 GB/s; 4000 B in 1 us = 4 GB/s
    assert mean_rank_bandwidth_GBps([1000, 4000], [1_000_000, 1_000_000]) == pytest.approx(2.5)


def ring_routing(P, T, experts):
    """Token t's two experts are t % 8 and (t + 2) % 8: two different ranks (2 experts per
    rank), so every rank receives T/2 tokens from every rank, its own included."""
    t = np.arange(T)
    ids = np.stack([t % experts, (t + 2) % experts], axis=1)
    idx = np.broadcast_to(ids, (P, T, 2)).astype(np.int64)
    return Routing(topk_idx=idx.copy(), topk_weight=np.full((P, T, 2), 0.5, np.float32))


def deepep_comm(tmp_path, *overrides):
    trace = tmp_path / "ring.npz"
    write_trace(trace, ring_routing(4, 64, 8))
    return simulate("experiments/functional.yaml", "scheme=deepep",
                    "workload.layer.deepep.kernels=communication",
                    "workload.layer.routing.kind=trace", f"workload.layer.routing.trace={trace}",
                    *overrides)


def test_deepep_dispatch_and_combine_bytes_by_hand(tmp_path):
    sim = deepep_comm(tmp_path)
    s = sim.stats
    # 4 ranks x 64 tokens, each token to 2 ranks: every rank receives 4 x 32 = 128 token rows of
    # 2 x 64 B (bf16, hidden 64) - 32 of them its own (96 without self-traffic)
    assert s["system.moe.deepep.dispatch_recv_bytes"] == 128 * 128
    assert s["system.moe.deepep.combine_send_bytes"] == 128 * 128
    ticks = {li.gpu: int(sim.state.ln[li.index].end - sim.state.ln[li.index].start)
             for li in sim.launches if li.kernel == "deepep_dispatch"}
    expect = np.mean([128 * 128 / (ticks[g] * 1e-12) / 1e9 for g in range(4)])
    assert s["system.moe.deepep.dispatch_GBps"] == pytest.approx(expect, rel=1e-12)
    # identity experts: the output is the reference's, bit for bit; "computed" is not checked
    assert s["system.moe.output_max_abs_error"] == 0.0
    assert s["system.moe.rows_combined"] == 4 * 64 * 2 and s["system.moe.rows_computed"] == 0


def test_fp8_dispatch_moves_bytes_and_scales(tmp_path):
    sim = deepep_comm(tmp_path, "workload.mode=timing", "workload.layer.deepep.dispatch_dtype=fp8")
    # hidden 64: 64 B of e4m3 + one 4-byte scale per row; combine stays bf16
    assert sim.stats["system.moe.deepep.dispatch_recv_bytes"] == 128 * 68
    assert sim.stats["system.moe.deepep.combine_send_bytes"] == 128 * 128


@pytest.mark.parametrize("overrides, words", [
    (("workload.layer.deepep.kernels=communication",), "timing-only"),
    (("workload.mode=timing",), "kernels: communication"),
])
def test_fp8_dispatch_limits_are_config_errors(overrides, words):
    from conftest import load
    with pytest.raises(ConfigError) as e:
        load("experiments/functional.yaml", "scheme=deepep",
             "workload.layer.deepep.dispatch_dtype=fp8", *overrides)
    assert "workload.layer.deepep.dispatch_dtype" in str(e.value) and words in str(e.value)


def test_alltoall_busbw_is_algbw_times_n_minus_1_over_n():
    n, bpp = 4, 65536
    sim = simulate("ubench/alltoall.yaml", *mini_system(num_gpus=n, num_sms=4, links=2),
                   f"workload.launches.0.params.bytes_per_peer={bpp}")
    s = sim.stats
    t = s["system.report.alltoall_time_us"] * 1e-6
    algbw = s["system.report.alltoall_algbw_GBps"]
    assert algbw == pytest.approx(n * bpp / t / 1e9, rel=1e-12)     # bytes each rank sends
    assert s["system.report.alltoall_busbw_GBps"] == pytest.approx(algbw * (n - 1) / n, rel=1e-12)


# ------------------------------------------------------------------------- figure kinds
def test_figure_kind_model_is_listed_and_a_bad_kind_is_an_error(tmp_path):
    from conftest import load_script
    validate = load_script(REPO / "tools" / "validate.py")
    figs = {f.name: f for f in validate.load_figures(validate.FIGURES_FILE)}
    assert figs["h100.allreduce_ring_busbw_GBps"].kind == "model"
    assert figs["h100.p2p_bandwidth_GBps"].kind == "measurement"
    p = tmp_path / "figures.yaml"
    cfg = (REPO / "configs" / "ubench" / "p2p_latency.yaml").as_posix()
    p.write_text(f"figures:\n  h100.x_us: {{config: {cfg}, stat: s, kind: guess}}\n")
    with pytest.raises(ConfigError, match=r"figures.h100.x_us.kind: expected one of measurement, model"):
        validate.load_figures(p)
