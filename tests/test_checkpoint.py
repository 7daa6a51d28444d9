"""Checkpoints: checkpoint + restore gives bit-identical final stats to an uninterrupted run, and
checkpoints of another engine version or of a changed build are refused with a clear error."""
import json

import numpy as np
import pytest

from conftest import CONFIGS, load, mini_system, model_stats_but_events, read_stats_json, run_cli


def _run(cfg, observers=()):
    from moehub_arch.simulation import Simulation
    sim = Simulation(cfg)
    sim.run(list(observers))
    return sim


@pytest.mark.parametrize("config,overrides,buffer", [
    ("ubench/alltoall.yaml", mini_system(num_gpus=4), None),
    ("hub/dispatch_combine.yaml", (), "out"),                       # MoE-Hub tables mid-flight
    ("experiments/functional.yaml", ("workload.layer.tokens_per_gpu=16",), "out"),  # an MoE layer
])
def test_checkpoint_and_restore_are_bit_identical(tmp_path, config, overrides, buffer):
    from moehub_arch.checkpoint import CheckpointWriter, restore
    cfg = load(config, *overrides)
    whole = _run(cfg)
    end = whole.stats["simTicks"]
    ticks = [end // 3, end // 2]
    writer = CheckpointWriter(ticks, str(tmp_path / "ck-{tick}"))
    paused = _run(cfg, [writer])
    assert [t for t, _ in writer.written] == ticks and writer.pending == []
    # pausing changes nothing but the event counts: an SM issue event folds no cycle past the
    # pause tick (the sm_fold shortcut, docs/engine_order.md), so a paused run may take a few
    # more events for the same results
    assert model_stats_but_events(paused.stats) == model_stats_but_events(whole.stats)
    for t in ticks:
        back = restore(tmp_path / f"ck-{t}")
        assert back.restored_tick == t
        back.run()
        assert model_stats_but_events(back.stats) == model_stats_but_events(whole.stats)
        if buffer:
            for g in range(whole.cfg.system.num_gpus):
                assert np.array_equal(back.buffer_bytes(g, buffer), whole.buffer_bytes(g, buffer))
    meta = json.loads((tmp_path / f"ck-{ticks[0]}" / "meta.json").read_text())
    assert meta["tick"] == ticks[0] and meta["seed"] == cfg.run.seed
    assert "no random numbers at run time" in meta["rng"]
    assert set(meta["state"]) >= {"q", "sys", "tb", "regs", "hbm_mem", "ch", "pk", "stream"}


def test_checkpoint_and_restore_through_the_command(tmp_path):
    args = ["run", CONFIGS / "ubench/alltoall.yaml", "--quiet",
            *[f"--set={s}" for s in mini_system(num_gpus=4)]]
    # the uninterrupted run asks for a checkpoint it never reaches: a warning, not silence
    r = run_cli(*args, "-o", tmp_path / "whole", "--checkpoint-at", "1s")
    assert r.returncode == 0 and "before --checkpoint-at 1000000000000: no checkpoint written" in r.stderr
    r = run_cli(*args, "-o", tmp_path / "first", "--checkpoint-at", "20us")
    assert r.returncode == 0, r.stderr
    ck = tmp_path / "first" / "checkpoint-20000000"
    assert f"wrote checkpoint {ck} at tick 20000000" in r.stderr
    assert sorted(p.name for p in ck.iterdir()) == ["config.json", "input_config.json",
                                                   "meta.json", "state.npz"]
    r = run_cli("run", "--restore", ck, "-o", tmp_path / "second", "--quiet")
    assert r.returncode == 0, r.stderr
    whole, second = read_stats_json(tmp_path / "whole"), read_stats_json(tmp_path / "second")
    # but for event counts: no shortcut acts past the pause tick (sm_fold folds no cycle, a
    # switch output sends nothing ahead past it: back_to_back, docs/engine_order.md)
    model = lambda d: {k: v for k, v in d.items() if not k.startswith("host")  # noqa: E731
                       and k != "simEvents" and not k.startswith("system.engine.events.")}
    assert model(second) == model(whole)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from moehub_arch.checkpoint import CheckpointWriter
    d = tmp_path_factory.mktemp("ck")
    kernel = d / "k.s"
    kernel.write_text((CONFIGS.parent / "workloads/kernels/ubench/p2p_latency.s").read_text())
    cfg = load("ubench/p2p_latency.yaml", *mini_system(), f"workload.kernel_files=[{kernel}]")
    _run(cfg, [CheckpointWriter([20_000_000], str(d / "ck"))])
    return d / "ck", kernel


def _refused(path, *fragments):
    from moehub_arch.checkpoint import CheckpointError, restore
    with pytest.raises(CheckpointError) as e:
        restore(path)
    for f in fragments:
        assert f in str(e.value), str(e.value)


def test_checkpoint_of_another_engine_version_is_refused(checkpoint, tmp_path):
    import shutil
    ck, _ = checkpoint
    other = tmp_path / "other"
    shutil.copytree(ck, other)
    meta = json.loads((other / "meta.json").read_text())
    meta["engine_version"] = "0.0.1+0123456789abcdef"
    (other / "meta.json").write_text(json.dumps(meta))
    _refused(other, "written by engine version 0.0.1+0123456789abcdef, this is",
             "rerun from the config", "input_config.json")
    meta["format_version"] = 99
    (other / "meta.json").write_text(json.dumps(meta))
    from moehub_arch.checkpoint import FORMAT_VERSION
    _refused(other, f"checkpoint format version 99; this moehub-arch reads version {FORMAT_VERSION}")


def test_checkpoint_with_other_state_fields_is_refused(checkpoint, tmp_path):
    import shutil
    ck, _ = checkpoint
    other = tmp_path / "other"
    shutil.copytree(ck, other)
    with np.load(ck / "state.npz") as z:
        arrays = {k: z[k] for k in z.files if k != "regs"}
    arrays["gpu_v2"] = np.zeros(3)
    np.savez(other / "state.npz", **arrays)
    _refused(other, "State arrays do not match this engine's (missing: regs; unknown: gpu_v2)")


def test_checkpoint_of_a_changed_kernel_is_refused(checkpoint):
    from moehub_arch.checkpoint import restore
    ck, kernel = checkpoint
    restore(ck)   # unchanged: fine
    text = kernel.read_text()
    kernel.write_text(text.replace("add r1, r1, 1", "add r1, r1, 2"))
    try:
        # the kernel file's digest (meta.json inputs) names it before the rebuilt program is compared
        _refused(ck, "the checkpoint's inputs changed since it was written",
                 f"the kernel file {kernel.resolve()} changed since the checkpoint was written")
    finally:
        kernel.write_text(text)
