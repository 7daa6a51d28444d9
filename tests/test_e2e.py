"""tools/e2e.py: one forward step composed from simulated layers (each distinct layer simulated
once), its arithmetic, and clear errors for bad arguments."""
import json

from conftest import REPO, load_script

E2E = REPO / "tools" / "e2e.py"


def test_e2e_step_is_composed_from_each_layer_once(tmp_path, capsys):
    e2e = load_script(E2E)
    out = tmp_path / "e2e.json"
    rc = e2e.main(["--model", "mixtral_8x7b", "--scheme", "moehub", "--compare", "deepep",
                   "--tokens-per-gpu", "64", "--outdir", str(tmp_path), "--json", str(out)])
    assert rc == 0
    r = json.loads(out.read_text())
    layers, moe = r["layers"], r["moe_layer_us"]
    assert set(moe) == {"moehub", "deepep"} and "dense_layer" not in layers   # Mixtral: all MoE
    for s, step in r["steps"].items():
        assert step["step_us"] == 32 * (layers["attention"] + moe[s])
        assert step["dense_layers_us"] == 0.0
    # one simulation per distinct layer: the attention part and the MoE layer per scheme
    assert sorted(p.name for p in (tmp_path / "mixtral_8x7b_64_dgx_h100").iterdir()
                  if p.is_dir()) == ["attention", "moe_deepep", "moe_moehub"]
    text = capsys.readouterr().out
    assert "not modelled" in text and "speedup" in text
    # a second call reuses every layer's stats
    e2e.main(["--model", "mixtral_8x7b", "--scheme", "moehub", "--compare", "deepep",
              "--tokens-per-gpu", "64", "--outdir", str(tmp_path)])
    assert capsys.readouterr().out.count("[reused]") == 3


def test_e2e_bad_arguments_exit_2(tmp_path, capsys):
    e2e = load_script(E2E)
    assert e2e.main(["--model", "deepseek_v3", "--scheme", "moehub", "--system", "nope",
                     "--outdir", str(tmp_path)]) == 2
    assert "--system nope" in capsys.readouterr().err
    assert e2e.main(["--model", "deepseek_v3", "--scheme", "moehub", "--tokens-per-gpu", "100",
                     "--outdir", str(tmp_path)]) == 2
    assert "multiple of 64" in capsys.readouterr().err


def test_moehub_sim_e2e_refuses_training_options_without_training(tmp_path):
    """`moehub-sim e2e` is the command (tools/e2e.py the same); a training step's option given
    for a forward step is an error naming it, not silently ignored; so is an infinite bandwidth."""
    import subprocess
    import sys
    common = [sys.executable, "-m", "moehub_arch", "e2e", "--model", "mixtral_8x7b", "--scheme",
              "moehub", "-o", str(tmp_path)]
    r = subprocess.run(common + ["--stages", "2", "--overlap"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == ("moehub-sim e2e: error: --stages, --overlap: options of a training step; "
                        "add --training (without it, e2e composes a forward step)\n")
    r = subprocess.run(common + ["--training", "--p2p-GBps", "inf"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "--p2p-GBps inf: expected a positive, finite" in r.stderr
    assert not any(tmp_path.iterdir())                       # nothing was simulated


def test_e2e_models_give_valid_block_models(tmp_path):
    """Every model tools/e2e.py knows writes a block model (workloads/blocks schema) that loads,
    with the heads, norm and tokens it names; Qwen3-30B-A3B and Mixtral have no dense layer."""
    from moehub_arch.workloads.tp.shape import load_block_model
    from moehub_arch.config.models import load_model
    e2e = load_script(E2E)
    assert {"deepseek_v3", "mixtral_8x7b", "qwen3_30b_a3b"} <= set(e2e.DENSE)
    for name, dense in e2e.DENSE.items():
        model = load_model(name)
        m = load_block_model(e2e.block_model_file(tmp_path / name, model, dense, 256))
        assert (m.hidden, m.heads, m.norm, m.seq, m.batch) == \
            (model.hidden, dense["heads"], dense["norm"], 256, 1)
        assert m.norm_eps == dense["norm_eps"] and m.hidden % m.heads == 0
        if name != "deepseek_v3":
            assert model.layers == model.moe_layers and dense["dense_ffn"] == 0


E2E_TRAINING = REPO / "tools" / "e2e_training.py"


def test_e2e_training_bad_arguments_exit_2(tmp_path, capsys):
    """Errors before any simulation: micro-batches < stages, a scheme without a simulated
    backward (unless --moe-backward estimate; deepep_ll, the inference kernels, has none), more stages than layers, a bad
    system, a model e2e does not know the dense part of."""
    e2e = load_script(E2E)
    common = ["--training", "--model", "mixtral_8x7b", "--tokens-per-gpu", "64", "--outdir",
              str(tmp_path)]
    assert e2e.main(common + ["--scheme", "deepep_ll", "--stages", "4", "--micro-batches", "3",
                              "--moe-backward", "estimate"]) == 2
    assert "--micro-batches 3 < --stages 4" in capsys.readouterr().err
    assert e2e.main(common + ["--scheme", "deepep_ll", "--compare", "deepep"]) == 2
    err = capsys.readouterr().err
    assert "no simulated backward" in err and "--moe-backward estimate" in err
    assert e2e.main(common + ["--scheme", "deepep_ll", "--stages", "64", "--micro-batches", "64",
                              "--moe-backward", "estimate"]) == 2
    assert "has 32 layers" in capsys.readouterr().err
    assert e2e.main(common + ["--scheme", "deepep_ll", "--system", "nope",
                              "--moe-backward", "estimate"]) == 2
    assert "--system nope" in capsys.readouterr().err
    assert e2e.main(common[:2] + ["dysharp_s", "--scheme", "dysharp"]
                    + common[3:]) == 2
    assert "--model dysharp_s: e2e knows the attention and dense layers" in \
        capsys.readouterr().err
    assert not any(p.is_dir() for p in tmp_path.iterdir())      # nothing was simulated


def test_e2e_training_step_is_composed_from_simulated_layers(tmp_path, capsys):
    """The step is training_step() over the simulated layers' forward and backward times: every
    Mixtral layer is attention + MoE layer, the MoE backward estimate is the forward run's layer -
    mediation - expert phase + the backward expert phase of megatron's training run (deepep_ll
    has no simulated backward)."""
    from moehub_arch.workloads.training_step import LayerCost, training_step
    e2e = load_script(E2E)
    out = tmp_path / "train.json"
    assert e2e.main(["--training", "--model", "mixtral_8x7b", "--scheme", "deepep_ll", "--compare",
                     "--tokens-per-gpu", "64", "--stages", "2", "--micro-batches", "4",
                     "--moe-backward", "estimate", "--outdir", str(tmp_path),
                     "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    m, at = r["moe_layer"]["deepep_ll"], r["attention"]
    assert m["backward_source"] == "estimate"
    mg = json.loads((tmp_path / "mixtral_8x7b_64_dgx_h100" / "moe_megatron_training"
                     / "stats.json").read_text())
    bex = mg["system.moe.backward.expert_us"]
    bex = bex["value"] if isinstance(bex, dict) else bex
    assert m["backward_us"] == m["forward_us"] - m["mediation_us"] - m["expert_us"] + bex
    assert at["backward_us"] > at["forward_us"] > 0
    H = 4096
    layer = LayerCost("moe", at["forward_us"] + m["forward_us"], at["backward_us"]
                      + m["backward_us"], m["forward_exposed_us"], m["backward_exposed_us"],
                      moe_us=m["forward_us"] + m["backward_us"],
                      replicated_params=4 * H * H + 2 * H + H * 8)
    want = training_step([layer] * 32, 2, 4, 8, 18 * 25e9, 4, r["p2p_us"])
    assert r["steps"]["deepep_ll"]["step_us"] == want["step_us"]
    assert r["steps"]["deepep_ll"]["bubble_us"] == want["bubble_us"]
    assert "speedup" in capsys.readouterr().out


def test_e2e_training_refuses_a_layer_without_a_backward_before_simulating(tmp_path, capsys,
                                                                          monkeypatch):
    """A layer whose configuration has no backward on this routing (FasterMoE's policy shadowing
    an expert; here the policy is made to shadow expert 0) is an exit-2 error naming the key,
    found by planning the layers before any run."""
    from moehub_arch.workloads.schemes import fastermoe
    monkeypatch.setattr(fastermoe, "shadow_policy", lambda loads, s, cfg: [0])
    e2e = load_script(E2E)
    assert e2e.main(["--training", "--model", "mixtral_8x7b", "--scheme", "megatron",
                     "--compare", "fastermoe", "--tokens-per-gpu", "64", "--outdir",
                     str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "scheme fastermoe:" in err and "workload.layer.fastermoe.shadow" in err
    assert not any(p.is_dir() for p in tmp_path.iterdir())      # nothing was simulated
