"""Shared helpers: small systems, running configs in-process (Numba engine) and through the CLI."""
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"

# The processes the tests start (command-line runs, tools, drivers of both engines: several hundred)
# each import the package's ~200 modules. Where the environment says not to write bytecode
# (PYTHONDONTWRITEBYTECODE, set where this suite's CI runs), every one of them compiled that source to
# bytecode again, about 0.3 CPU s a process. They keep it instead in a folder of this test session
# (PYTHONPYCACHEPREFIX: nothing is written into the checkout), removed when the session ends. Set
# here, at import in the controlling process, so that the xdist workers and every process a test
# starts inherit it; this process itself still writes nothing (Python read the setting at start).
if (os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX")
        and not os.environ.get("PYTEST_XDIST_WORKER")):
    _PYCACHE = tempfile.mkdtemp(prefix="moehub-suite-pycache-")
    atexit.register(shutil.rmtree, _PYCACHE, True)
    os.environ["PYTHONPYCACHEPREFIX"] = _PYCACHE
    del os.environ["PYTHONDONTWRITEBYTECODE"]

# a test compiles in its own process only (dispatch/precompile.py): the engine is compiled before the
# tests start (pytest_sessionstart below); tests/test_precompile.py checks the two-process compile
_USER_COMPILE_JOBS = os.environ.get("MOEHUB_COMPILE_JOBS")
os.environ.setdefault("MOEHUB_COMPILE_JOBS", "1")

# the run that compiles the engine before the tests (tools/golden_stats.py: functional_moehub)
WARM_UP = ("experiments/functional.yaml", "scheme=moehub")


# The files the suite spends most CPU in, heaviest first (a full run with a CPU probe per test:
# docs/performance.md, "Where the suite's CPU goes, by file"). Collected first, every other file
# after them in name order: with --dist loadfile and --no-loadscope-reorder (pyproject.toml) the
# two workers take the heavy files first and end on light ones, so that both finish at about the
# same time (longest first); xdist's own order, by the number of tests in a file, left heavy
# files of one or two tests to the end, one worker running them while the other waited. Only
# the order of the files changes, never a test; a file missing here only runs later.
HEAVY_FIRST = (
    "test_moe_training.py", "test_dysharp_tracker.py", "test_paper.py", "test_shortcuts_exact.py",
    "test_first_experiment.py", "test_internode_nic.py", "test_blackwell_layers.py",
    "test_multinode.py", "test_sweep.py", "test_rpm_sendable.py", "test_dysharp.py",
    "test_multi_expert_store.py", "test_tutel_2dh.py", "test_l2_capacity.py", "test_cli.py",
    "test_robustness_edges.py", "test_robustness.py", "test_block_training.py",
    "test_moe_layer.py", "test_bad_inputs.py", "test_golden_stats.py", "test_hub_pick_channel.py")


def pytest_collection_modifyitems(config, items):
    """The heavy files first (HEAVY_FIRST), in that order; a file's tests keep their order."""
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_sessionstart(session):
    """Compile the engine once, before any test, as a user's first run does (dispatch/precompile.py:
    two processes where two cores are free), into the cache every test then loads from.

    Under xdist this runs in the controlling process before it starts the workers; without it, each
    worker's first test compiled the whole engine itself, both workers at once, into the same
    cache: twice the work, on both cores. In a worker (the cache is warm by then) and under
    NUMBA_DISABLE_JIT it does nothing."""
    if os.environ.get("PYTEST_XDIST_WORKER") or os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0"):
        return
    if _USER_COMPILE_JOBS is None:   # as many processes as a user's run would take
        del os.environ["MOEHUB_COMPILE_JOBS"]
    try:
        report = engine_report(simulate(*WARM_UP))
        if report["cold_start"] != "warm":
            # a cold start: tests/test_precompile.py checks this one rather than making its own;
            # the workers, started after this, inherit the variable naming the file
            fd, path = tempfile.mkstemp(prefix="moehub-suite-cold-start-", suffix=".json")
            with os.fdopen(fd, "w") as f:
                json.dump(report, f)
            atexit.register(os.unlink, path)
            os.environ["MOEHUB_SUITE_COLD_START"] = path
    except Exception as e:   # noqa: BLE001 (the tests that need the engine fail and say why)
        print(f"conftest: compiling the engine before the tests failed: {e}", file=sys.stderr)
    finally:
        os.environ["MOEHUB_COMPILE_JOBS"] = _USER_COMPILE_JOBS or "1"


def engine_report(sim):
    """How a run got its compiled engine, as JSON would carry it: how the cold start went
    (dispatch/precompile.py), how many versions of the SM's issue handler this process compiled
    itself, each entry point's cache hits (dispatch/indirect.py), and the model stats. Only
    meaningful for the first run in a process."""
    from moehub_arch.components.sm import sm_issue
    from moehub_arch.dispatch import indirect
    return json.loads(json.dumps({
        "cold_start": sim.cold_start,
        "sm_issue_compiled_here": len(sm_issue.overloads),
        "entry_cache_hits": {row: e.cache_hits for (_, row), e in indirect._ENTRIES.items()},
        "stats": model_stats(sim.stats),
    }, default=lambda v: v.item()))


def load_script(path):
    """A tool script (tools/*.py, not a package module) imported by file path, for its functions."""
    import importlib.util
    path = Path(path)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mini_system(num_gpus=2, num_sms=4, links=2):
    """--set overrides turning DGX H100 into a small system with the same per-component numbers:
    `links` NVLink links per GPU, link i on switch i."""
    return [f"system.num_gpus={num_gpus}", f"system.gpu.num_sms={num_sms}",
            f"system.nvlink.links_per_gpu={links}", f"system.switch.count={links}",
            f"system.switch.gpu_link_switch=[{', '.join(str(i) for i in range(links))}]"]


def mini_system_yaml(num_gpus=2, num_sms=4, links=2):
    """The head of a config file (`extends:` and `system:`) for the small system of mini_system;
    the caller appends its `workload:` section."""
    switches = ", ".join(str(i) for i in range(links))
    return (f"extends: {CONFIGS / 'systems' / 'dgx_h100.yaml'}\nsystem:\n"
            f"  num_gpus: {num_gpus}\n  gpu: {{num_sms: {num_sms}}}\n"
            f"  nvlink: {{links_per_gpu: {links}}}\n"
            f"  switch: {{count: {links}, gpu_link_switch: [{switches}]}}\n")


def load(config, *overrides):
    from moehub_arch.config import load_config
    return load_config(CONFIGS / config, list(overrides))


def simulate(config, *overrides):
    """Run a config in this process (Numba engine); returns the finished Simulation."""
    from moehub_arch.simulation import Simulation
    sim = Simulation(load(config, *overrides))
    sim.run()
    return sim


def model_stats(stats):
    """Every stat except the host-side ones (wall-clock times and rates)."""
    return {s.name: s.value for s in stats if not s.name.startswith("host")}


def model_stats_but_events(stats):
    """model_stats without the event counts: what an exact shortcut may change (sm_fold folds no
    SM cycle past a pause tick, nor while the SMs are traced: docs/engine_order.md)."""
    return {k: v for k, v in model_stats(stats).items()
            if k != "simEvents" and not k.startswith("system.engine.events.")}


# A fresh `python -m moehub_arch` spends about 1 CPU s of a small run's 2.3 importing the package,
# Numba and the engine's modules; the suite starts a few hundred. run_cli starts them instead from
# a process of this test process that has made those imports once (the zygote, below): each run
# is a fork of it, a process of its own (its exit status, its output, its cwd; the compiled engine
# loaded from the cache as any run loads it), that runs the package's main module as `python -m`
# does. Only for a process whose environment is exactly the zygote's and whose engine is the
# compiled one (the pure-Python engine must be chosen before Numba is imported): anything else
# (env_extra, a changed os.environ, `--engine python`) starts a fresh interpreter as before, as
# does every run_cli where MOEHUB_TESTS_FRESH_PROCESSES is set.
_ZYGOTE = r"""
import json, os, sys
# what every run imports (Numba and the engine's modules among it), and Numba's typing and target
# tables, which a fresh process fills on its first compiled call; no compiled function is loaded
import moehub_arch.cli, moehub_arch.simulation, moehub_arch.runner, moehub_arch.checks
import moehub_arch.checkpoint, moehub_arch.cli_layer, moehub_arch.interrupts
import moehub_arch.workloads.layer, moehub_arch.workloads.layer_stats
from numba.core.registry import cpu_target
cpu_target.typing_context.refresh()
cpu_target.target_context.refresh()
import atexit, gc, runpy, traceback
gc.freeze()      # the collector of a fork leaves these objects alone (no copy of their pages)
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:     # the run: a process of its own, exiting as `python -m moehub_arch` would
        os.chdir(req["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, req["out"]), (2, req["err"])):
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(f, fd)
            os.close(f)
        sys.argv = ["-m", *req["args"]]
        try:
            runpy._run_module_as_main("moehub_arch")   # what `python -m` calls
            code = 0
        except SystemExit as e:
            code = e.code
        except BaseException:    # noqa: BLE001 (as the interpreter reports it)
            traceback.print_exc()
            code = 1
        if code is None:
            code = 0
        elif not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        # as the interpreter ends: the exit handlers, the streams flushed; not the teardown of
        # every module the zygote imported (0.2-0.3 CPU s of touching its pages)
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    sys.stdout.write(json.dumps(os.waitstatus_to_exitcode(status)) + "\n")
    sys.stdout.flush()
"""
_zygote = {}     # this process's: {"proc", "env", "dir"}


def _zygote_end(proc):
    """End the zygote (its input closed, it exits) and wait for it, so that its CPU counts among
    this process's children's."""
    proc.stdin.close()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
    proc.stdout.close()


def _zygote_run(args, cwd, env):
    """Run `python -m moehub_arch ARGS` as a fork of this process's zygote (started on first use);
    None where the zygote's environment is not `env`."""
    import locale
    import select
    z = _zygote.get("z")
    if z is None:
        proc = subprocess.Popen([sys.executable, "-c", _ZYGOTE], cwd=REPO, env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        z = _zygote["z"] = {"proc": proc, "env": env, "dir": tempfile.mkdtemp(prefix="moehub-zygote-")}
        atexit.register(shutil.rmtree, z["dir"], True)
        atexit.register(_zygote_end, proc)
    if z["env"] != env or z["proc"].poll() is not None:
        return None
    out, err = os.path.join(z["dir"], "out"), os.path.join(z["dir"], "err")
    z["proc"].stdin.write(json.dumps({"args": args, "cwd": str(cwd), "out": out, "err": err}) + "\n")
    z["proc"].stdin.flush()
    if not select.select([z["proc"].stdout], [], [], 1200)[0]:
        os.killpg(z["proc"].pid, 9)
        raise subprocess.TimeoutExpired([sys.executable, "-m", "moehub_arch", *args], 1200)
    rc = json.loads(z["proc"].stdout.readline())
    enc = locale.getpreferredencoding(False)
    with open(out, encoding=enc) as f, open(err, encoding=enc) as g:
        return subprocess.CompletedProcess([sys.executable, "-m", "moehub_arch", *args], rc,
                                           f.read(), g.read())


def run_cli(*args, cwd=None, env_extra=None):
    """`python -m moehub_arch ARGS` in a process of its own; returns CompletedProcess (text). A
    fork of the zygote above where it can be, else a fresh interpreter."""
    env = dict(os.environ)
    env.pop("NUMBA_DISABLE_JIT", None)
    if env_extra:
        env.update(env_extra)
    args = [str(a) for a in args]
    python_engine = any(a == "--engine=python" or (a == "--engine" and b == "python")
                        for a, b in zip(args, args[1:] + [""]))
    if not env_extra and not python_engine and not os.environ.get("MOEHUB_TESTS_FRESH_PROCESSES"):
        r = _zygote_run(args, cwd or REPO, env)
        if r is not None:
            return r
    return subprocess.run([sys.executable, "-m", "moehub_arch", *args],
                          cwd=cwd or REPO, env=env, capture_output=True, text=True, timeout=1200)


def assert_rows_home(sim, gpus, tokens, topk, row_bytes):
    """The MoE-Hub dispatch/combine microkernels (workloads/kernels/hub/dispatch_combine.s):
    out[t * topk + k] == 2 * x[t] on every GPU (every row went to its expert and came back).
    `tokens` may be fewer than the buffers hold (a run dispatching only the first ones)."""
    import numpy as np
    words = row_bytes // 4
    for g in range(gpus):
        x = sim.read_buffer(g, "x", "f32")[:tokens * words].reshape(tokens, words)
        out = sim.read_buffer(g, "out", "f32")[:tokens * topk * words].reshape(tokens * topk, words)
        for t in range(tokens):
            for k in range(topk):
                assert np.array_equal(out[t * topk + k], 2 * x[t]), (g, t, k)


# the parameters of configs/ubench/p2p_latency.yaml's kernel, so a user kernel can stand in for it
P2P_KERNEL_HEAD = ".kernel pingpong\n.param peer\n.param flag\n.param iters\n.param times\n"


def p2p_kernel(tmp_path, body):
    """Write `body` as the p2p_latency kernel (lines 1-5 are its head, `body` starts on line 6)
    into tmp_path/k.s; returns the --set override that runs it."""
    k = tmp_path / "k.s"
    k.write_text(P2P_KERNEL_HEAD + body)
    return f"workload.kernel_files=[{k}]"


def read_stats_json(outdir):
    data = json.loads((Path(outdir) / "stats.json").read_text())
    return {k: v["value"] for k, v in data.items()}


@pytest.fixture
def repo():
    return REPO


def check_layer(sim, gpus, tokens, k, min_reference):
    """An MoE layer run: every token-expert pair sent, received, computed and combined exactly
    once; in functional mode the output's largest magnitude exceeds `min_reference` (real numbers)
    and equals the NumPy reference within 1e-6 of it."""
    s = sim.stats
    # the SM-time fractions partition SM time
    parts = [s[f"system.moe.sm.{p}"] for p in ("computing", "communicating", "waiting", "other", "idle")]
    assert min(parts) >= 0 and abs(sum(parts) - 1) < 1e-9, parts
    for name in ("sent", "received", "computed", "combined"):
        assert s[f"system.moe.rows_{name}"] == gpus * tokens * k, name
    if sim.cfg.workload.mode == "functional":
        scale = s["system.moe.output_max_abs_reference"]
        assert scale > min_reference
        assert s["system.moe.output_max_abs_error"] <= 1e-6 * scale


def drive_both_engines(code):
    """Run a driver script (it prints one JSON line last) in a fresh interpreter per engine
    (NUMBA_DISABLE_JIT decides the engine when the package is imported); returns (numba, python)."""
    out = []
    for engine in ("numba", "python"):
        env = dict(os.environ)
        env.pop("NUMBA_DISABLE_JIT", None)
        if engine == "python":
            env["NUMBA_DISABLE_JIT"] = "1"
        r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=1200)
        assert r.returncode == 0, r.stderr
        out.append(json.loads(r.stdout.strip().splitlines()[-1]))
    return tuple(out)


# the end of a run_patched driver: run the config, print what the test compares
_PATCHED_RUN = """
from moehub_arch.config import load_config
from moehub_arch.simulation import Simulation
stats = Simulation(load_config(sys.argv[1], sys.argv[2:])).run()
model = {s.name: s.value for s in stats if not s.name.startswith("host")}
print(json.dumps({
    "calls": [int(c) for c in calls],
    "reordered": sum(int(s.value) for s in stats.match("system.gpu*.hub.rpm.reordered_rows")),
    "ticks": int(stats["simTicks"]),
    "stats": json.dumps(model, sort_keys=True, default=lambda v: v.item())}))
"""


def run_patched(driver, config, *sets):
    """Run configs/`config` with the pure-Python engine (whose functions a test can replace) in a
    fresh interpreter, after `driver`: Python source that imports json and sys, replaces engine
    functions with checked ones and counts in a list `calls`. Returns {calls, reordered (the RPM's
    reordered rows), ticks (simTicks), stats (model stats as stats_json writes them)}."""
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    r = subprocess.run([sys.executable, "-c", driver + _PATCHED_RUN, f"configs/{config}", *sets],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def stats_json(stats):
    """A run's model stats as one JSON string in name order (NaN compares equal as text)."""
    return json.dumps(model_stats(stats), sort_keys=True, default=lambda v: v.item())


def cli_stats_per_engine(config, outdir, *args):
    """Run `config` through the CLI once with each engine (extra CLI args after it); returns
    {"numba": stats, "python": stats} without the host.* stats (wall time, memory)."""
    out = {}
    for engine in ("numba", "python"):
        r = run_cli("run", config, "-o", outdir / engine, "--engine", engine, "--quiet", *args)
        assert r.returncode == 0, r.stderr
        out[engine] = {k: v for k, v in read_stats_json(outdir / engine).items()
                       if not k.startswith("host")}
    return out


def check_allreduce_output(sim, gpus, elems, bf16, reference):
    """Every GPU's `recv` buffer equals reference(the `send` buffers) bit for bit; in bf16 that
    result must also differ from a plain GPU-order sum rounded to bf16 after every add, so the
    check pins the collective's own reduction order."""
    from moehub_arch.workloads.reference import to_bf16
    dt = "bf16" if bf16 else "f32"
    x = np.stack([sim.read_buffer(g, "send", dt)[:elems] for g in range(gpus)])
    ref = reference(x, bf16=bool(bf16))
    for g in range(gpus):
        got = sim.read_buffer(g, "recv", dt)[:elems]
        assert np.array_equal(got, ref), f"GPU {g}: max |err| {np.abs(got - ref).max()}"
    if bf16:
        seq = x[0]
        for g in range(1, gpus):
            seq = to_bf16(seq + x[g])
        assert not np.array_equal(seq, ref)


def assert_cais_lines_merged(sim, lines, gpus):
    """A transformer block under TP scheme cais (tests/test_cais_merge.py, test_cais_dataflow.py):
    the output is the NumPy reference bit for bit, and the merge unit allocated each of `lines`
    request lines once and completed it with every GPU's request (gpus - 1 merges each), without
    eviction or timeout; half the lines are gathers (one read of the home each), half reductions
    (one write home each)."""
    st = sim.stats
    assert not sim.violations
    assert st["system.block.output_max_abs_error"] == 0.0
    assert st["system.cais.allocations"] == st["system.cais.complete_groups"] == lines
    assert st["system.cais.merges"] == (gpus - 1) * lines
    assert st["system.cais.evictions"] == 0 and st["system.cais.timeouts"] == 0
    assert st["system.cais.memory_reads"] == st["system.cais.home_writes"] == lines // 2


def check_timer_wheel(st):
    """The component timers' wheel (engine/events.py) is consistent: every armed timer either in
    the current tick's set (its tick is sys tw_now, its bit set at every level of the set) or in
    exactly one list, the list of the slot its tick belongs to relative to the base (sys tw_base);
    no unarmed timer in any; every list circular and doubly linked; a level's occupancy bit set
    exactly for its non-empty lists; the set's words exactly the union of the bits below them.
    Works on State and on test namespaces."""
    from moehub_arch.engine import events as ev
    t = st.timer
    lvl = st.timer_level
    n = t.shape[0] - ev.WHEEL_LISTS
    base = int(st.sys[0].tw_base)
    now = int(st.sys[0].tw_now)
    seen = []
    for lv in range(ev.WHEEL_LEVELS):
        for s in range(ev.WHEEL_SLOTS):
            head = n + lv * ev.WHEEL_SLOTS + s
            members, i = [], int(t[head, ev.TM_NEXT])
            while i != head:
                assert 0 <= i < n and int(t[int(t[i, ev.TM_NEXT]), ev.TM_PREV]) == i, (lv, s, i)
                members.append(i)
                i = int(t[i, ev.TM_NEXT])
            assert int(t[int(t[head, ev.TM_NEXT]), ev.TM_PREV]) == head, (lv, s)
            assert bool(members) == bool(int(lvl[lv]) >> s & 1), (lv, s)
            for i in members:
                tick = int(t[i, ev.TM_TICK])
                assert tick != now, i
                x = tick ^ base
                want = 0 if x == 0 else (x.bit_length() - 1) // ev.WHEEL_BITS
                assert (want, (tick >> (ev.WHEEL_BITS * want)) & (ev.WHEEL_SLOTS - 1)) == (lv, s), i
            seen += members
    # the current tick's set: bit i of the last level for each timer in it, each word above the
    # union of the nonzero words below it
    in_now = [i for i in range(n) if t[i, ev.TM_TICK] != ev.TIMER_OFF and t[i, ev.TM_NEXT] == ev.IN_NOW]
    words = [int(w) for w in lvl[ev.NOW_L0:]]
    assert [i for i in range(len(words) * 32) if words[i >> 5] >> (i & 31) & 1] == in_now
    for below, above, count in ((ev.NOW_L0, ev.NOW_L1, len(words)), (ev.NOW_L1, ev.NOW_L2, 1024),
                                (ev.NOW_L2, ev.NOW_ROOT, 32)):
        for w in range(count):
            assert bool(int(lvl[below + w])) == bool(int(lvl[above + (w >> 5)]) >> (w & 31) & 1), \
                (below, w)
    assert all(int(t[i, ev.TM_TICK]) == now for i in in_now)
    assert sorted(seen + in_now) == [i for i in range(n) if t[i, ev.TM_TICK] != ev.TIMER_OFF]
    assert np.all(t[n:, ev.TM_TICK] == ev.TIMER_OFF)


# the two configs every tool that builds a run must reject with one paragraph and exit status 2
BAD_RUN_INPUTS = ((["missing.yaml"], "not found"),
                  (["configs/ubench/alltoall.yaml", "--set", "nope.key=1"], "nope"))


def assert_tool_rejects_bad_runs(tool):
    """tools/<tool> given a missing config or an unknown --set key: a clear error, status 2."""
    for args, words in BAD_RUN_INPUTS:
        r = subprocess.run([sys.executable, str(REPO / "tools" / tool), *args], cwd=REPO,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
