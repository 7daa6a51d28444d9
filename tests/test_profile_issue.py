"""tools/profile_issue.py and State.code_issued (the issues of every instruction): the counts add up
to the instructions the SMs issued, the engines agree on them, the combine's wait for every GPU's
done flag issues its loop once per GPU per combine thread block (what makes SM issue half the
events on 64 GPUs: docs/performance.md), and bad input is one clear error with exit status 2."""
import subprocess
import sys

import numpy as np

from conftest import REPO, assert_tool_rejects_bad_runs, load, load_script, mini_system, model_stats

PROFILE = load_script(REPO / "tools" / "profile_issue.py")
FUNCTIONAL = ("experiments/functional.yaml", "scheme=moehub", "workload.mode=timing")


def _run(config, *overrides):
    from moehub_arch.simulation import Simulation
    sim = Simulation(load(config, *overrides))
    stats = model_stats(sim.run())
    return sim, stats


def test_the_issue_counts_add_up_to_the_instructions_issued():
    # without the sm_fold shortcut every issue event issues one cycle's instructions or none
    sim, stats = _run(*FUNCTIONAL, "run.shortcuts=[tx_wake, idle_output]")
    prof = PROFILE.issue_profile(sim, stats, top=5)
    t = prof["totals"]
    assert t["instructions"] == stats["simInsts"] == int(sim.state.code_issued.sum()) > 0
    assert t["instructions"] + t["events_without_issue"] == stats["system.engine.events.sm_issue"]
    # with it, the same instructions in fewer events
    folded_sim, folded = _run(*FUNCTIONAL)
    f = PROFILE.issue_profile(folded_sim, folded, top=5)["totals"]
    assert f["events_without_issue"] is None and f["instructions"] == t["instructions"]
    assert f["sm_issue_events"] < t["sm_issue_events"]
    assert sum(k["issued"] for k in prof["kernels"].values()) == t["instructions"]
    for k in prof["kernels"].values():
        assert sum(k["by_unit"].values()) == k["issued"] >= k["register_only"]
    assert [r["issued"] for r in prof["top"]] == sorted((r["issued"] for r in prof["top"]),
                                                        reverse=True)


def test_the_combine_checks_every_gpus_done_flag_in_every_thread_block():
    """wait_layer_inputs (workloads/kernels/lib/combine.s) checks the G done flags of each
    combine thread block as a warp does, with one wait.all.eq over the G flags: one issue per
    combine block on every GPU (it was G issues of a wait.eq, one flag each)."""
    sim, stats = _run(*FUNCTIONAL)
    gpus = sim.cfg.system.num_gpus
    blocks = sum(l.grid for l in sim.launches if l.kernel == "moe_combine")
    kernel = sim.program.kernels["moe_combine"]
    waits = [pc for pc in range(kernel.entry_pc, kernel.entry_pc + kernel.n_instructions)
             if sim.program.mnemonics[pc] == "wait.all.eq"
             and sim.program.source_line(pc)[0].endswith("combine.s")]
    assert len(waits) == 1 and blocks == gpus * sim.cfg.workload.layer.combine_tbs
    assert int(sim.state.code_issued[waits[0]]) == blocks


def test_the_engines_count_the_same_issues():
    overrides = mini_system(2, 2, 2) + ["workload.launches.0.params.bytes_per_peer=4096",
                                        "workload.launches.0.params.chunk=1024"]
    script = (
        "import sys, json\nsys.path.insert(0, {tests!r})\nfrom conftest import load\n"
        "from moehub_arch.simulation import Simulation\n"
        "sim = Simulation(load('ubench/alltoall.yaml', *{ov!r}))\nsim.run()\n"
        "print(json.dumps(sim.state.code_issued.tolist()))\n").format(
            tests=str(REPO / "tests"), ov=overrides)
    import json
    import os
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    r = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=1200)
    assert r.returncode == 0, r.stderr
    python = np.array(json.loads(r.stdout.strip().splitlines()[-1]))
    sim, _ = _run("ubench/alltoall.yaml", *overrides)
    assert python.sum() > 0 and np.array_equal(python, sim.state.code_issued)


def test_bad_config_is_a_clear_error():
    assert_tool_rejects_bad_runs("profile_issue.py")
