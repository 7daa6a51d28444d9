"""Where the user-editable data folders (`isa/`, `configs/`, `workloads/`) live, and the one rule
by which every relative path a user gives is found.

In a source checkout the data folders sit at the repository root, next to the `moehub_arch`
package; a wheel (`pip install .`, see pyproject.toml) carries them inside the package as
`moehub_arch/_data/`.

The path rule (docs/concepts/configuration.md): a relative path in a config file (`extends:`, `system:`,
`workload.kernel_files`, `workload.isa_files`, `workload.layer.model`, `workload.layer.routing.trace`)
is looked up first in the folder of the file that names it (the working directory for `--set` and
command-line arguments), then in the shipped data folders: `configs/ubench/p2p_latency.yaml`,
`workloads/kernels/...` and `isa/...` name the shipped copies from any working directory and inside a
non-editable install.
"""
import functools
import hashlib
from pathlib import Path


def data_root() -> Path:
    """The folder holding `isa/`, `configs/` and `workloads/`."""
    repo = Path(__file__).resolve().parents[1]
    if (repo / "isa").is_dir():
        return repo
    return Path(__file__).resolve().parent / "_data"


def tree_digest(root, dirs, exclude=()) -> str:
    """SHA-1 of every file under `root/<dir>` for each of `dirs` (relative names and contents, in
    sorted order; `__pycache__` and the folders `exclude` names relative to `root` skipped; a
    missing dir contributes nothing)."""
    h = hashlib.sha1()
    root = Path(root)
    skipped = [root / e for e in exclude]
    for d in dirs:
        for path in sorted((root / d).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts \
                    and not any(path.is_relative_to(x) for x in skipped):
                h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def sources_digest() -> str:
    """Digest of everything besides a config that a run's stats depend on: the package's code and
    the data folders (ISA, kernels, models, shipped configs). Tools that reuse finished runs (sweep
    resume, tools/run_cache.py) compare it, so results of older code are never shown as current."""
    package = Path(__file__).resolve().parent
    # the paper reports (`moehub-sim paper`: their code and the published figures) read finished
    # runs and never change one: editing them must not make every finished sweep point run again
    code = tree_digest(package.parent, [package.name], exclude=[f"{package.name}/papers"])
    data = tree_digest(data_root(), ["isa", "workloads", "configs"], exclude=["workloads/papers"])
    return hashlib.sha1(f"{code}\0{data}".encode()).hexdigest()


def candidates(name, base_dir, shipped_prefixes=("",)) -> list[Path]:
    """Where a user path `name` is looked for, in order: itself if absolute; else `base_dir/name`,
    then the shipped copy `data_root()/<prefix>/name` for each prefix (e.g. "configs" so that
    `extends: systems/dgx_h100.yaml` also finds the shipped system)."""
    p = Path(name).expanduser()
    if p.is_absolute():
        return [p]
    out = [Path(base_dir) / p]
    for prefix in shipped_prefixes:
        c = data_root() / prefix / p if prefix else data_root() / p
        if c not in out:
            out.append(c)
    return out


def find_user_file(name, base_dir, shipped_prefixes=("",)):
    """(the first existing file among `candidates(...)` resolved, or None; every path tried)."""
    tried = candidates(name, base_dir, shipped_prefixes)
    for c in tried:
        if c.is_file():
            return c.resolve(), tried
    return None, tried
