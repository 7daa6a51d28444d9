"""`moehub-sim layer` / `moehub_arch.layer`: an MoE layer named by model, tokens, scheme and
system, composed from the shipped pieces (moehub_arch/experiment.py) - any token count, any top-k,
no file per point."""
import json

from conftest import CONFIGS, REPO, load_script, read_stats_json, run_cli

from moehub_arch.config import load_config
from moehub_arch.experiment import write_layer_config


def _resolved(cfg):
    d = cfg.to_dict()
    for k in ("source_files", "value_sources", "load_warnings"):
        d.pop(k)
    return d


def test_composed_config_equals_the_shipped_point(tmp_path):
    """The composition is what base_<system>.yaml + <model>_<tokens>_<scheme>_<system>.yaml say."""
    for system, shipped in (("hgx_h800", "qwen3_30b_a3b_256_moehub_hgx_h800.yaml"),
                            ("dgx_h100", "qwen3_30b_a3b_1024_deepep.yaml")):
        scheme = "moehub" if "moehub" in shipped else "deepep"
        tokens = int(shipped.split("_")[3])
        path = write_layer_config(tmp_path / system / "layer.yaml", model="qwen3_30b_a3b",
                                  tokens=tokens, scheme=scheme, system=system)
        assert _resolved(load_config(path)) == _resolved(
            load_config(CONFIGS / "experiments" / "layer" / shipped))


def test_dry_run_any_token_count_and_top_k():
    r = run_cli("layer", "--model", "qwen3_30b_a3b", "--tokens", "384", "--scheme", "moehub",
                "--system", "hgx_h800", "--top-k", "4", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "tokens_per_gpu: 384" in r.stdout and "top_k: 4" in r.stdout
    assert "128 experts, top-4) on hgx_h800 (8 GPUs, 16 experts each), 384 tokens per GPU" in r.stdout


def test_bad_names_are_clear_errors():
    for args, expect in ((("--model", "qwen3"), "not a shipped model"),
                         (("--system", "nope"), "--system nope"),
                         (("--top-k", "200"), "--top-k"),
                         (("--top-k", "0"), "--top-k 0: expected a positive number of experts"),
                         (("--top-k", "-2"), "--top-k -2: expected a positive number of experts"),
                         (("--tokens", "0"), "--tokens 0: expected a positive number of tokens"),
                         (("--scheme", "bogus"), "the composed layer config: scheme")):
        base = {"--model": "qwen3_30b_a3b", "--tokens": "64", "--scheme": "moehub"}
        base.update(dict([args]))
        r = run_cli("layer", *[x for kv in base.items() for x in kv], "--dry-run")
        assert r.returncode == 2 and expect in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_layer_runs_with_top_k_and_keeps_its_config(tmp_path):
    """A small layer (2 GPUs of a DGX H100 via --set, 64 tokens) at top-k 2: the pairs routed are
    tokens x 2, not the model's 8, and OUTDIR/layer.yaml repeats the run."""
    out = tmp_path / "k2"
    r = run_cli("layer", "--model", "qwen3_30b_a3b", "--tokens", "64", "--scheme", "deepep",
                "--top-k", "2", "--set", "system.num_gpus=2", "-o", out, "--quiet")
    assert r.returncode == 0, r.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["workload"]["layer"]["top_k"] == 2
    stats = read_stats_json(out)
    assert stats["system.moe.rows_computed"] == 64 * 2 * 2       # tokens x top-k x GPUs
    assert (out / "layer.yaml").is_file()
    again = load_config(out / "layer.yaml", ["system.num_gpus=2"])
    assert again.workload.layer.top_k == 2 and again.workload.layer.tokens_per_gpu == 64


def test_the_issue_command_runs(tmp_path):
    """`moehub-sim layer --model qwen3_30b_a3b --tokens 512 --scheme moehub --system hgx_h800`:
    every token-expert pair of 512 tokens x top-8 x 8 GPUs is computed once."""
    out = tmp_path / "q512"
    r = run_cli("layer", "--model", "qwen3_30b_a3b", "--tokens", "512", "--scheme", "moehub",
                "--system", "hgx_h800", "-o", out)
    assert r.returncode == 0, r.stderr
    assert "layer time" in r.stdout
    assert read_stats_json(out)["system.moe.rows_computed"] == 512 * 8 * 8


def test_python_api_layer():
    import moehub_arch as mh
    r = mh.layer("qwen3_30b_a3b", 32, "moehub", "dgx_h100", top_k=4,
                 overrides=["system.num_gpus=2"])
    assert r["system.moe.rows_computed"] == 32 * 4 * 2
    assert r.config["workload"]["layer"]["top_k"] == 4


def test_layer_table_composes_points_no_file_ships(tmp_path):
    """tools/layer_table.py: a shipped point runs its file, any other the composed config."""
    table = load_script(REPO / "tools" / "layer_table.py")
    shipped = table.point_config("qwen3_30b_a3b", 1024, "moehub", "dgx_h100", tmp_path / "a")
    assert shipped == table.LAYER_DIR / "qwen3_30b_a3b_1024_moehub.yaml"
    composed = table.point_config("qwen3_30b_a3b", 384, "moehub_expert", "hgx_h800", tmp_path / "b")
    assert composed == tmp_path / "b" / "layer.yaml"
    cfg = load_config(composed)
    assert cfg.workload.layer.tokens_per_gpu == 384 and cfg.scheme == "moehub"
    assert cfg.system.name == "hgx_h800"


def test_the_grid_sweep_file_spells_the_per_point_files():
    """configs/sweeps/layer_grid_dgx_h100.yaml: each of its 27 points resolves to the config of
    the shipped per-point file it replaces."""
    from moehub_arch.sweep.spec import load_sweep
    sweep = load_sweep(CONFIGS / "sweeps" / "layer_grid_dgx_h100.yaml")
    assert len(sweep.points) == 27
    for p in sweep.points:
        v = dict(p.values)
        shipped = (CONFIGS / "experiments" / "layer" /
                   f"{v['workload.layer.model']}_{v['workload.layer.tokens_per_gpu']}_{v['scheme']}.yaml")
        assert _resolved(load_config(sweep.config, list(p.overrides))) == _resolved(
            load_config(shipped)), shipped.name
