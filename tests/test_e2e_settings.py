"""The seed papers' end-to-end training settings (configs/e2e/*.yaml, moehub_arch/e2e/settings.py):
each loads with its sources and names a shipped model, system and schemes; each composes a
training step (layer runs stood in by fixed stats, so the test checks the setting's path through
e2e --training, not the simulator); the MoE-Hub paper's extrapolation is the Amdahl formula; one
tiny-scale run of a setting simulates its layers; bad settings are exit-2 errors naming the key."""
import json
import subprocess
import sys

import pytest

from conftest import REPO

SETTINGS = sorted((REPO / "configs" / "e2e").glob("*.yaml"))


def test_every_setting_loads_with_sources():
    from moehub_arch.config.models import load_model
    from moehub_arch.e2e.layers import DENSE, system_files
    from moehub_arch.e2e.training import DUALPIPE, SIMULATED_BACKWARD
    from moehub_arch.e2e.settings import load_setting
    names = {p.stem for p in SETTINGS}
    assert {"dysharp_s", "dysharp_m", "dysharp_l", "moehub_h800_mixtral"} <= names
    for path in SETTINGS:
        s = load_setting(path)
        assert s["name"] == path.stem and s["sources"]
        model = load_model(s["model"])
        system_files(s["system"])                       # a shipped system with a layer experiment
        layers = s.get("layers", model.layers)
        assert s["stages"] <= layers and s["micro_batches"] >= s["stages"]
        assert s["model"] in DENSE or "dense" in s
        for spec in [s["scheme"]] + s.get("compare", []):
            base = spec[:-len(DUALPIPE)] if spec.endswith(DUALPIPE) else spec
            assert base in SIMULATED_BACKWARD, spec      # every row's backward simulated
    dy = {p.stem: load_setting(p) for p in SETTINGS if p.stem.startswith("dysharp_")}
    # DySHARP's: 16 stages of one GH200 NVL32 each, sequence 2048 / 4096 / 8192, DualPipe compared
    assert {s["tokens_per_gpu"] for s in dy.values()} == {2048, 4096, 8192}
    for s in dy.values():
        assert (s["system"], s["stages"], s["scheme"]) == ("gh200_nvl32", 16, "dysharp")
        assert "deepep+dualpipe" in s["compare"]
    mh = load_setting(REPO / "configs" / "e2e" / "moehub_h800_mixtral.yaml")
    assert (mh["system"], mh["extrapolate"]) == ("dgx_h800", "amdahl")


def fake_stats(sets):
    """Fixed layer stats for a run's --set list: forward / backward by scheme (the MoE layer) or
    by block kind (attention, dense layer)."""
    d = dict(kv.split("=", 1) for kv in sets)
    scheme = d.get("scheme", "")
    f = {"dysharp": 100.0, "deepep": 200.0, "overlap": 150.0, "moehub": 90.0,
         "megatron": 180.0, "tutel": 170.0, "fastermoe": 190.0, "ccfuser": 160.0}[scheme] \
        if scheme else 0.0
    return {"system.block.forward_time_us": 40.0, "system.block.backward_time_us": 120.0,
            "system.moe.layer_time_us": f, "system.moe.overhead_us": f / 2,
            "system.moe.phase.mediation_us": 0.0, "system.moe.phase.expert_us": f / 2,
            "system.moe.backward.time_us": 2 * f, "system.moe.backward.overhead_us": f / 2,
            "system.moe.backward.expert_us": f}


@pytest.mark.parametrize("path", SETTINGS, ids=[p.stem for p in SETTINGS])
def test_every_setting_composes_a_step(path, tmp_path, monkeypatch, capsys):
    from moehub_arch import e2e
    from moehub_arch.e2e import layers, training
    from moehub_arch.workloads.training_step import LayerCost, training_step
    runs = []
    monkeypatch.setattr(layers, "run", lambda config, outdir, sets, force:
                        (runs.append(sets) or fake_stats(sets), "fake"))
    # the layers' plans at the papers' full scale take minutes to build (test_e2e.py checks
    # that a layer refusing training is found by planning it)
    monkeypatch.setattr(training, "MoeLayer", lambda cfg: None)
    out = tmp_path / "step.json"
    assert e2e.main(["--setting", str(path), "-o", str(tmp_path), "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    text = capsys.readouterr().out
    assert "sources:" in text and "never a target" in text
    assert r["setting"] == path.stem and r["scheme"] in r["steps"]
    # every MoE layer ran as a training run of its scheme (once, +dualpipe sharing deepep's)
    moe_runs = [dict(kv.split("=", 1) for kv in s) for s in runs
                if any(kv.startswith("scheme=") for kv in s)]
    assert all(m["workload.layer.passes"] == "training" for m in moe_runs)
    assert len({m["scheme"] for m in moe_runs}) == len(moe_runs) == len(r["moe_layer"])
    for spec, step in r["steps"].items():
        assert step["step_us"] > 0 and 0 < step["moe_share"] < 1
    if "deepep+dualpipe" in r["steps"]:
        # the same layers, the micro-batch overlap in the step: never slower
        assert r["steps"]["deepep+dualpipe"]["step_us"] <= r["steps"]["deepep"]["step_us"]
        assert r["steps"]["deepep+dualpipe"]["overlap_saved_us"] > 0
    for b, x in r["extrapolated"].items():
        f, s = r["steps"][b]["moe_share"], x["layer_speedup"]
        assert x["extrapolated_speedup"] == pytest.approx(1 / ((1 - f) + f / s))
        assert x["simulated_speedup"] == pytest.approx(
            r["steps"][b]["step_us"] / r["steps"][r["scheme"]]["step_us"])
    # by hand for one row: every layer attention + MoE, the settings' pipeline
    s0 = r["scheme"]
    m = r["moe_layer"][s0]
    assert m["backward_source"] == "simulated"
    if r["dense_layer"] is None:
        at = r["attention"]
        H = {"dysharp_s": 2048, "dysharp_m": 4096, "moehub_h800_mixtral": 4096}[path.stem]
        experts = {"dysharp_s": 64, "dysharp_m": 128, "moehub_h800_mixtral": 8}[path.stem]
        n = {"dysharp_s": 48, "dysharp_m": 48, "moehub_h800_mixtral": 32}[path.stem]
        gpus = {"dgx_h800": 8, "gh200_nvl32": 32}[r["system"]]
        bw = {"dgx_h800": 8 * 25e9, "gh200_nvl32": 18 * 25e9}[r["system"]]
        layer = LayerCost("moe", at["forward_us"] + m["forward_us"],
                          at["backward_us"] + m["backward_us"], m["forward_exposed_us"],
                          m["backward_exposed_us"], moe_us=m["forward_us"] + m["backward_us"],
                          replicated_params=4 * H * H + 2 * H + H * experts)
        want = training_step([layer] * n, r["stages"], r["micro_batches"], gpus, bw, 4,
                             r["p2p_us"], r["overlap"])
        assert r["steps"][s0]["step_us"] == pytest.approx(want["step_us"])


def test_a_tiny_scale_run_of_a_setting_simulates_its_layers(tmp_path):
    """MoE-Hub's setting at 64 tokens per GPU against Megatron: the layers simulated (training
    runs), the step composed, the extrapolation printed beside the simulated speedup."""
    out = tmp_path / "step.json"
    r = subprocess.run([sys.executable, "-m", "moehub_arch", "e2e", "--setting",
                        "configs/e2e/moehub_h800_mixtral.yaml", "--tokens-per-gpu", "64",
                        "--compare", "megatron", "-o", str(tmp_path), "--json", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr
    j = json.loads(out.read_text())
    assert (j["system"], j["tokens_per_gpu"], j["stages"]) == ("dgx_h800", 64, 1)
    assert set(j["moe_layer"]) == {"moehub", "megatron"}
    assert all(m["backward_source"] == "simulated" for m in j["moe_layer"].values())
    x = j["extrapolated"]["megatron"]
    assert x["extrapolated_speedup"] > 0 and x["simulated_speedup"] > 0
    assert "extrapolation" in r.stdout and "published e2e_speedup" in r.stdout


@pytest.mark.parametrize("text, words", [
    ("setting: {name: x, model: qwen3_30b_a3b, system: dgx_h100, scheme: deepep,\n"
     "  tokens_per_gpu: 256, stages: 2, micro_batches: 4, sources: [a], bogus: 1}\n",
     "setting.bogus: unknown key"),
    ("setting: {name: x, model: qwen3_30b_a3b, system: dgx_h100, scheme: deepep,\n"
     "  tokens_per_gpu: 256, stages: 2, micro_batches: -4, sources: [a]}\n",
     "setting.micro_batches: expected a positive integer"),
    ("setting: {name: x, model: qwen3_30b_a3b, system: dgx_h100, scheme: deepep,\n"
     "  tokens_per_gpu: 256, stages: 2, micro_batches: 4}\n", "missing sources"),
    ("setting: {name: x, model: dysharp_s, system: dgx_h100, scheme: deepep,\n"
     "  tokens_per_gpu: 256, stages: 2, micro_batches: 4, sources: [a], dense: {heads: 16}}\n",
     "setting.dense.dense_ffn: missing"),
    ("setting: {name: x, model: qwen3_30b_a3b, system: dgx_h100, scheme: deepep,\n"
     "  tokens_per_gpu: 256, stages: 4, micro_batches: 2, sources: [a]}\n",
     "--micro-batches 2 < --stages 4"),
    ("setting: {name: x, model: qwen3_30b_a3b, system: dgx_h100, scheme: deepep_ll,\n"
     "  tokens_per_gpu: 256, stages: 2, micro_batches: 4, sources: [a]}\n",
     "scheme deepep_ll: no simulated backward pass"),
    ("nope: 1\n", "one top-level key 'setting'"),
], ids=["unknown_key", "bad_value", "no_sources", "dense_incomplete", "micro_batches_lt_stages",
        "scheme_without_backward", "no_setting"])
def test_bad_settings_exit_2(tmp_path, text, words):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    r = subprocess.run([sys.executable, "-m", "moehub_arch", "e2e", "--setting", str(f), "-o",
                        str(tmp_path / "out")], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert words in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()                        # nothing was simulated
