"""The import contract (DESIGN rule 9: floors point down): who may import whom in moehub_arch/, read
from the source, function-level imports included, without importing anything.

Floors, from the ground up (a module may import its own floor and the floors below it, never a
floor above, neither straight nor through modules the contract does not name):

    floor       config/, engine/ (event queue, State, JIT, clock...), declare.py (what a block
                declares: Block, Param, Stat...), isa/, version.py (the engine's identity),
                observer.py (a run's hooks), errors.py (the user errors' base class), and the plain
                helpers (paths, inputs, outputs)
    blocks      components/ (the hardware blocks)
    dispatch    dispatch/ (the run loop, its entry points, the cold-start compile)
    run         simulation.py, runner.py, builder.py
    front       api.py, cli.py, validation.py, e2e/, run_cache.py, sweep/ (the Python API and the command line)

and no import circle anywhere in moehub_arch/ or tools/. The package's face,
moehub_arch/__init__.py, hands the API out on first use from its module __getattr__ (PEP 562);
no module of the package imports it (version.py holds the version and the engine's identity), so
those imports point down like any other. A failure names every offending import with its file and
line.

Beside the floors, one promise about what a command loads: bad input is reported before the
engine or Numba is imported (the command line's argument handling, config loading and error
reporting sit below the engine), so that a mistyped path or key costs a fraction of a second.
"""
import ast
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "moehub_arch"

# floor name -> module prefixes, from the ground up
FLOORS = (
    ("floor", ("moehub_arch.config", "moehub_arch.engine", "moehub_arch.declare",
               "moehub_arch.isa", "moehub_arch.paths", "moehub_arch.inputs", "moehub_arch.outputs",
               "moehub_arch.version", "moehub_arch.observer", "moehub_arch.errors")),
    ("blocks", ("moehub_arch.components",)),
    ("dispatch", ("moehub_arch.dispatch",)),
    ("run", ("moehub_arch.simulation", "moehub_arch.runner", "moehub_arch.builder")),
    ("front", ("moehub_arch.api", "moehub_arch.cli", "moehub_arch.cli_layer", "moehub_arch.experiment",
               "moehub_arch.validation", "moehub_arch.e2e", "moehub_arch.run_cache",
               "moehub_arch.sweep", "moehub_arch.__main__")),
)


def _modules(root, package):
    """{dotted module name: (path, is a package)} of every .py file under root/package."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _resolve(name, modules):
    """The module of `modules` that an import of `name` loads (its longest known prefix)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_edges(root=None, package=PACKAGE):
    """[(importer, imported, path, line, in a function)] of every import between two modules of the
    package: `import a.b`, `from a import b` (b a module, else a), relative ones resolved."""
    modules = _modules(root or REPO, package)
    edges = []
    for module, (path, is_pkg) in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        nested = set()
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                nested.update(n for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom)))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".") if is_pkg else module.split(".")[:-1]
                    base = base[:len(base) - node.level + 1]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                names = [f"{prefix}.{a.name}" for a in node.names]
            else:
                continue
            for target in dict.fromkeys(_resolve(name, modules) for name in names):
                if target and target != module:
                    edges.append((module, target, path, node.lineno, node in nested))
    return modules, edges


def _tool_edges():
    """The same for tools/*.py, which import each other by bare name (tools/ on sys.path)."""
    tools = {p.stem: p for p in (REPO / "tools").glob("*.py")}
    edges = []
    for name, path in tools.items():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                targets = [node.module or ""]
            else:
                continue
            edges += [(f"tools.{name}", f"tools.{t}", path, node.lineno, False)
                      for t in targets if t in tools and t != name]
    return {f"tools.{n}" for n in tools}, edges


def _floor(module):
    for i, (_, prefixes) in enumerate(FLOORS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    return None


def _circles(nodes, edges):
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    out_edges = {n: [] for n in nodes}
    for a, b, *_ in edges:
        out_edges[a].append(b)
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(out_edges[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(out_edges[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def _describe(edge):
    a, b, path, line, in_function = edge
    where = " (inside a function)" if in_function else ""
    return f"{path.relative_to(REPO)}:{line}: {a} imports {b}{where}"


def _circle_report(nodes, edges):
    lines = []
    for comp in _circles(nodes, edges):
        members = set(comp)
        lines.append(f"circle of {len(comp)} modules: {', '.join(comp)}; tied by")
        lines += ["    " + _describe(e) for e in edges if e[0] in members and e[1] in members]
    return "\n".join(lines)


def test_no_import_circle_in_the_package():
    modules, edges = import_edges()
    report = _circle_report(modules, edges)
    assert not report, "import circles in moehub_arch (DESIGN rule 9: floors point down):\n" + report


def test_no_import_circle_among_the_tools():
    nodes, edges = _tool_edges()
    report = _circle_report(nodes, edges)
    assert not report, "import circles in tools/:\n" + report


def test_floors_point_down():
    # a module of a floor reaches no module of a higher floor, straight or through any other
    # module; the first such path from each module is shown
    modules, edges = import_edges()
    succ = {}
    for e in edges:
        succ.setdefault(e[0], []).append(e)
    bad = []
    for start in modules:
        fl = _floor(start)
        if fl is None:
            continue
        # breadth-first, keeping the edge each module was reached by
        via = {start: None}
        queue = [start]
        while queue:
            v = queue.pop(0)
            for e in succ.get(v, ()):
                w = e[1]
                if w in via:
                    continue
                via[w] = e
                wf = _floor(w)
                if wf is not None and wf > fl:
                    path, x = [], w
                    while via[x] is not None:
                        path.append(via[x])
                        x = via[x][0]
                    bad.append(f"{start} ({FLOORS[fl][0]}) reaches {w} ({FLOORS[wf][0]}):\n"
                               + "\n".join("    " + _describe(p) for p in reversed(path)))
                    queue = []
                    break
                queue.append(w)
    assert not bad, "imports that point up a floor (DESIGN rule 9):\n" + "\n".join(bad)


def test_the_contract_sees_function_level_imports_and_circles(tmp_path):
    # the checker itself: a function-level import that closes a circle is found and named
    pkg = tmp_path / PACKAGE
    (pkg / "engine").mkdir(parents=True)
    (pkg / "__init__.py").write_text("def __getattr__(name):\n    from . import api\n")
    (pkg / "api.py").write_text("from .engine import events\n")
    (pkg / "engine" / "__init__.py").write_text("")
    (pkg / "engine" / "events.py").write_text("def names():\n    from ..composition import x\n")
    (pkg / "composition.py").write_text("from .engine.events import names\n")
    modules, edges = import_edges(tmp_path, PACKAGE)
    assert _circles(modules, edges) == [[f"{PACKAGE}.composition", f"{PACKAGE}.engine.events"]]
    up = [e for e in edges if e[0] == f"{PACKAGE}.engine.events"]
    assert [(e[1], e[3], e[4]) for e in up] == [(f"{PACKAGE}.composition", 2, True)]
    # a module that imports the package's face closes a circle with the face's lazy import
    (pkg / "composition.py").write_text("from . import __version__\n")
    (pkg / "api.py").write_text("from .composition import __version__\n")
    modules, edges = import_edges(tmp_path, PACKAGE)
    assert _circles(modules, edges) == [[PACKAGE, f"{PACKAGE}.api", f"{PACKAGE}.composition"]]


# what the command line's bad-input path must not load (compiled engine, Numba, the run loop)
_ENGINE_MODULES = ("numba", "moehub_arch.engine", "moehub_arch.components", "moehub_arch.dispatch",
                   "moehub_arch.simulation", "moehub_arch.builder")
_PROBE = ("import sys\n"
          "from moehub_arch.cli import main\n"
          "loaded = lambda: sorted(m for m in {engine!r} if m in sys.modules)\n"
          "print('import', loaded())\n"
          "for argv in {commands!r}:\n"
          "    status = main(argv)\n"
          "    print(' '.join(argv[:2]), status, loaded())\n")


def test_bad_input_is_reported_without_importing_the_engine(tmp_path):
    # each command stops at bad input (exit 2, one paragraph) in a process that has not imported
    # Numba or the engine: the config loader, the argument checks and the error reporting sit
    # below the engine's floor; a good config's run imports it only once the input is checked
    config = REPO / "configs" / "experiments" / "functional.yaml"
    commands = [["run", "missing.yaml"],
                ["run", str(config), "--set", "run.no_such_key=1"],
                ["run", str(config), "--set", "system.nvlink.bandwidth=fast"],
                ["run", str(config), "--max-ticks", "soon"],
                ["stats", "--list", "missing.yaml"],
                ["config", "--list", "no_such_key_anywhere"],
                ["sweep", "missing.yaml"],
                ["layer", "--model", "no_such_model", "--tokens", "8", "--scheme", "moehub"],
                ["validate", "--only", "no_such_figure"],
                ["asm", "missing.s"]]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO)] + [p for p in os.environ.get(
        "PYTHONPATH", "").split(os.pathsep) if p]))
    r = subprocess.run([sys.executable, "-c", _PROBE.format(engine=_ENGINE_MODULES,
                                                            commands=commands)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines == ["import []"] + [f"{' '.join(a[:2])} 2 []" for a in commands], (
        r.stdout + r.stderr)
    # every one was a one-paragraph error, no traceback
    assert "Traceback" not in r.stderr and r.stderr.count("error:") == len(commands), r.stderr
