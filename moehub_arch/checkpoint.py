"""Checkpoints: save a run at a simulated tick, restore it later and continue bit-identically.

Because every mutable runtime value lives in the arrays of one `State` namedtuple (DESIGN rule
2), a checkpoint is those arrays plus what is needed to rebuild the Python side around them.
A checkpoint directory holds:

    meta.json          format name and version, engine version (package version + hash of the
                       compiled sources), tick, events so far, seed, the dtype and shape of every
                       State array, and the build metadata (buffers, launches, kernels, a hash of
                       the assembled program) the restored run is compared with
    state.npz          every State array by field name, whatever fields State has: the event
                       queue (`q`, with its sequence counter in `sys`), thread blocks, registers,
                       memory, link channels, packets, MoE-Hub tables, counters...
    input_config.json  the config as given (before an MoE layer expanded it), base units:
                       restore rebuilds the Simulation from it
    config.json        the fully resolved config (as in a run's output), for people

Random numbers: the engine draws none at run time. Buffer contents and MoE routing are generated
at build time from `run.seed` (saved in the config and in meta.json), so rebuilding from the
config regenerates exactly the same system, and the saved arrays carry everything the run has
changed since. The event queue is ordered by (tick, sequence number), both saved, so the restored
run processes the same events in the same order: its final stats equal an uninterrupted run's.

Restore refuses (CheckpointError, exit status 2) a checkpoint whose recorded inputs changed since
it was written (issue 52: meta.json keeps a digest of the resolved config, the seed and a digest
of every file the build read - kernels, ISA files, model file, routing trace), naming each config
key, seed or file that changed; a checkpoint of another format version or engine version, one whose State fields differ from this engine's, and one whose rebuilt system differs
(a kernel or config file changed since): State arrays are only meaningful for the code and the
build they came from. It also refuses, naming the file, a damaged checkpoint: a `state.npz` cut
short or corrupt, an array missing, extra, of another type or shape, a `meta.json` or
`input_config.json` that is not valid JSON or lacks a field, and a `meta.json` whose tick and event
count disagree with the saved state. Every file is written as NAME.partial and renamed when whole;
`meta.json` last (an earlier checkpoint's is removed first), so a directory with `meta.json` is a
complete checkpoint.
"""
import hashlib
import json
import os
import tokenize
import zipfile
import zlib
from pathlib import Path

import attrs
import numpy as np

from .version import __version__, engine_version
from .composition import State
from .engine.state import record_view
from .errors import CheckpointError  # noqa: F401 (raised here; re-exported)
from .inputs import InputFileError, read_text
from .observer import RunObserver
from .outputs import OutputError, partial_path, reason, write_text_atomic

FORMAT = "moehub-arch checkpoint"

# what reading a damaged .npz raises: the archive's and zlib's errors, and from an array's header
# (a Python literal NumPy tokenizes and parses) a TokenError or SyntaxError, or a MemoryError for
# a shape the damage made absurd
_DAMAGED = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, tokenize.TokenError,
            SyntaxError, MemoryError)

# 2: meta.json records the inputs (a digest of the resolved config, the files the build read)
FORMAT_VERSION = 2
# what restore needs from meta.json, and its JSON type
META_FIELDS = {"tick": int, "events": int, "seed": int, "buffers": list, "launches": list,
               "kernels": dict, "program_sha1": str, "state": dict, "inputs": dict}
# what config.json holds beside the values: where each came from, derived unit tables
_NOT_VALUES = ("units", "key_units", "source_files", "value_sources", "load_warnings")
META_KINDS = {int: "an integer", list: "a list", dict: "a mapping", str: "a string"}
RNG_NOTE = ("the engine draws no random numbers at run time; buffer contents and routing are "
            "generated at build time from the seed")


def _build_metadata(sim):
    """What a rebuilt Simulation must reproduce for the saved arrays to fit it."""
    code = np.ascontiguousarray(sim.program.code)
    return {
        "buffers": [[b.name, b.addr, b.nbytes, b.region, b.dtype] for b in sim.buffers.values()],
        "launches": [[l.index, l.gpu, l.kernel, l.stream, l.grid, list(l.params), l.host_delay]
                     for l in sim.launches],
        "kernels": {k.name: [k.entry_pc, k.n_instructions, k.file, k.line]
                    for k in sim.program.kernels.values()},
        "program_sha1": hashlib.sha1(code.tobytes()).hexdigest(),
    }


def _config_values(cfg_dict):
    """The values of a resolved config (Config.to_dict() or a config.json), without provenance."""
    return {k: v for k, v in cfg_dict.items() if k not in _NOT_VALUES}


def _digest(values):
    text = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _input_files(sim):
    """Every file the build read besides the config files: kernels, ISA files, the model file and
    the routing trace, as {path: what}."""
    from .isa import default_isa_paths
    from .paths import data_root
    w = sim.cfg.workload
    out = {}
    for p in w.kernel_files:
        out[str(Path(p).resolve())] = "kernel file"
    for p in list(default_isa_paths()) + list(w.isa_files):
        out[str(Path(p).resolve())] = "ISA file"
    for model, folder, what in ((w.layer.model, "workloads/models", "model file"),
                                (w.block.model, "workloads/blocks", "block model file")):
        if model:
            path = Path(model) if ("/" in model or model.endswith((".yaml", ".yml"))) else \
                data_root() / folder / f"{model}.yaml"
            out[str(path.resolve())] = what
    if w.layer.routing.trace:
        out[str(Path(w.layer.routing.trace).resolve())] = "routing trace"
    return out


def _file_digest(path):
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _inputs(sim):
    """What meta.json records of the run's inputs, for restore to compare."""
    return {"config_sha256": _digest(_config_values(json.loads(json.dumps(sim.cfg.to_dict())))),
            "files": {p: [what, _file_digest(p)] for p, what in _input_files(sim).items()}}


def _changed_inputs(d, meta, sim):
    """Why the rebuilt run's inputs differ from those the checkpoint recorded (a list of texts)."""
    changes = []
    if sim.cfg.run.seed != meta["seed"]:
        changes.append(f"run.seed is {sim.cfg.run.seed} in input_config.json, {meta['seed']} in "
                       f"meta.json")
    recorded = meta["inputs"]
    now = _config_values(json.loads(json.dumps(sim.cfg.to_dict())))
    if _digest(now) != recorded.get("config_sha256"):
        try:
            then = _config_values(json.loads(read_text(d / "config.json", "saved config")))
        except (InputFileError, ValueError):
            then = None
        if then is None or _digest(then) != recorded.get("config_sha256"):
            changes.append("the saved config differs from the one the checkpoint was written "
                           "with (input_config.json and config.json were changed)")
        else:
            keys = [f"{k}: {a!r:.60} when written, {b!r:.60} now" for k, a, b in
                    _differences(then, now)]
            changes.append("config values changed since the checkpoint was written: "
                           + "; ".join(keys[:6]) + (f" (and {len(keys) - 6} more)"
                                                    if len(keys) > 6 else ""))
    files = recorded.get("files")
    if not isinstance(files, dict):
        changes.append("meta.json: inputs.files: expected a mapping of file -> digest")
        files = {}
    for path, entry in files.items():
        what, digest = entry if isinstance(entry, list) and len(entry) == 2 else ("file", None)
        current = _file_digest(path)
        if current is None:
            changes.append(f"the {what} {path} is gone")
        elif current != digest:
            changes.append(f"the {what} {path} changed since the checkpoint was written")
    return changes


def _differences(a, b, prefix=""):
    """[(dotted key, value in a, value in b)] where two JSON values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in list(a) + [k for k in b if k not in a]:
            out += _differences(a.get(k), b.get(k), f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out += _differences(x, y, f"{prefix}[{i}]")
        return out
    return [] if a == b else [(prefix, a, b)]


def write_checkpoint(sim, directory, tick):
    """Save `sim` (paused at `tick`) into `directory`; returns its Path."""
    d = Path(directory)
    try:
        d.mkdir(parents=True, exist_ok=True)
        # an earlier checkpoint here stops being one before any of its files is replaced
        for old in (d / "meta.json", partial_path(d / "meta.json")):
            if old.exists():
                old.unlink()
        st = sim.state
        with open(partial_path(d / "state.npz"), "wb") as f:
            np.savez(f, **{name: np.asarray(getattr(st, name)) for name in st._fields})
        os.replace(partial_path(d / "state.npz"), d / "state.npz")
        write_text_atomic(d / "input_config.json", json.dumps(sim.input_cfg.to_dict(), indent=1))
        write_text_atomic(d / "config.json", json.dumps(sim.cfg.to_dict(), indent=1))
        meta = {
            "format": FORMAT, "format_version": FORMAT_VERSION,
            "engine_version": engine_version(), "package_version": __version__,
            "tick": int(tick), "events": int(st.sys[0].q_events),
            "seed": int(sim.cfg.run.seed), "rng": RNG_NOTE,
            "state": {name: {"dtype": np.asarray(getattr(st, name)).dtype.descr,
                             "shape": list(getattr(st, name).shape)} for name in st._fields},
            **_build_metadata(sim),
            "inputs": _inputs(sim),
        }
        # written last: a directory with meta.json is a complete checkpoint
        write_text_atomic(d / "meta.json", json.dumps(meta, indent=1))
    except OutputError as e:
        raise CheckpointError(f"{d}: cannot write the checkpoint: {e}") from None
    except OSError as e:
        raise CheckpointError(f"{d}: cannot write the checkpoint ({reason(e)})") from None
    return d


def _read_meta(d):
    path = d / "meta.json"
    if not path.is_file():
        raise CheckpointError(f"{d}: not a checkpoint directory (no meta.json; --checkpoint-at "
                              f"writes one)")
    try:
        meta = json.loads(read_text(path, "checkpoint metadata"))
    except InputFileError as e:
        raise CheckpointError(str(e)) from None
    except ValueError as e:
        raise CheckpointError(f"{path}: cannot read the checkpoint metadata (not valid JSON: "
                              f"{e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a moehub-arch checkpoint")
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: checkpoint format version {meta.get('format_version')}; "
                              f"this moehub-arch reads version {FORMAT_VERSION}")
    if meta.get("engine_version") != engine_version():
        raise CheckpointError(
            f"{path}: written by engine version {meta.get('engine_version')}, this is "
            f"{engine_version()}. A checkpoint holds the engine's State arrays, whose layout and "
            f"meaning belong to the engine that wrote them: rerun from the config (saved in "
            f"{d / 'input_config.json'}) with this version")
    for key, kind in META_FIELDS.items():
        if not isinstance(meta.get(key), kind) or isinstance(meta.get(key), bool):
            found = "nothing" if key not in meta else f"{type(meta[key]).__name__} {meta[key]!r:.60}"
            raise CheckpointError(f"{path}: {key}: expected {META_KINDS[kind]}, found {found} "
                                  f"(the file was changed or damaged)")
    if meta["tick"] < 0 or meta["events"] < 0:
        raise CheckpointError(f"{path}: tick and events cannot be negative (tick {meta['tick']}, "
                              f"events {meta['events']}; the file was changed or damaged)")
    return meta


def restore(directory):
    """A Simulation rebuilt from a checkpoint, paused where it was saved: `run()` continues it."""
    from .config import config_from_dict
    from .simulation import Simulation

    d = Path(directory)
    meta = _read_meta(d)
    label = str(d / "input_config.json")
    try:
        data = json.loads(read_text(d / "input_config.json", "saved config", label))
    except InputFileError as e:
        raise CheckpointError(str(e)) from None
    except ValueError as e:
        raise CheckpointError(f"{label}: cannot read the saved config (not valid JSON: {e})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{label}: expected the saved config (a JSON object), found a "
                              f"{type(data).__name__}")
    sim = Simulation(config_from_dict(data, label))
    changes = _changed_inputs(d, meta, sim)
    if changes:
        raise CheckpointError(
            f"{d}: the checkpoint's inputs changed since it was written, so its saved state no "
            f"longer belongs to them: " + "; ".join(changes) + ". Rerun from the config, or "
            f"restore the inputs as they were")
    rebuilt = _build_metadata(sim)
    for key in ("buffers", "launches", "kernels", "program_sha1"):
        if json.loads(json.dumps(rebuilt[key])) != meta[key]:
            raise CheckpointError(
                f"{d}: the system rebuilt from the saved config differs from the checkpoint's "
                f"({key}): a kernel, model or config file it uses changed since it was written")
    npz = d / "state.npz"
    try:
        with np.load(npz, allow_pickle=False) as z:
            saved, fields = set(z.files), set(State._fields)
            if saved != fields:
                raise CheckpointError(
                    f"{npz}: the checkpoint's State arrays do not match this engine's (missing: "
                    f"{', '.join(sorted(fields - saved)) or 'none'}; unknown: "
                    f"{', '.join(sorted(saved - fields)) or 'none'})")
            arrays = {}
            for name in State._fields:
                try:
                    saved_array = z[name]
                except _DAMAGED as e:
                    raise CheckpointError(f"{npz}: cannot read the saved array State.{name} "
                                          f"({e or type(e).__name__}): the file is damaged or was "
                                          f"cut short") from None
                arrays[name] = _restore_array(npz, name, getattr(sim.state, name), saved_array)
    except _DAMAGED as e:
        raise CheckpointError(f"{npz}: cannot read the saved state ({e or type(e).__name__}): "
                              f"the file is damaged or was cut short (a NumPy .npz archive "
                              f"expected)") from None
    state = State(**arrays)
    sy = state.sys[0]
    if int(sy.q_events) != meta["events"] or int(sy.q_now) > meta["tick"]:
        raise CheckpointError(
            f"{d / 'meta.json'}: says tick {meta['tick']} after {meta['events']} events, but the "
            f"saved state is at tick {int(sy.q_now)} after {int(sy.q_events)} events (one of the "
            f"files was changed or belongs to another checkpoint)")
    sim.state = state
    sim.restored_tick = int(meta["tick"])
    return sim


def _restore_array(d, name, built, saved):
    """The saved contents in an array of the built one's exact type and layout (so the compiled
    engine is reused, not recompiled for a different array type)."""
    if saved.dtype != built.dtype:
        def text(dt):
            return str(dt) if dt.names is None else str(dt.descr)
        raise CheckpointError(f"{d}: State.{name} has element type {text(saved.dtype)} in the "
                              f"checkpoint, {text(built.dtype)} in this engine")
    if saved.shape == built.shape:
        built[...] = saved
        return built
    # arrays that grow while a run goes (the event queue, the trace record buffer) are taken as
    # saved; fixed arrays have the rebuilt system's shape (the build metadata was compared)
    if saved.ndim != built.ndim or saved.shape[1:] != built.shape[1:]:
        raise CheckpointError(f"{d}: State.{name} has shape {saved.shape} in the checkpoint, "
                              f"{built.shape} in the rebuilt system")
    arr = np.ascontiguousarray(saved).copy()
    return record_view(arr) if isinstance(built, np.recarray) else arr


@attrs.define
class CheckpointWriter(RunObserver):
    """RunObserver writing a checkpoint at each of `ticks` into `directory` (a path; '{tick}' in
    it is replaced by the tick). `written` lists (tick, path); ticks the run never reached stay
    in `pending`."""
    ticks: list
    directory: str
    written: list = attrs.field(factory=list)

    def __attrs_post_init__(self):
        self.ticks = sorted(set(int(t) for t in self.ticks))

    @property
    def pending(self):
        return list(self.ticks)

    def next_stop(self, sim):
        return self.ticks[0] if self.ticks else None

    def on_pause(self, sim, tick, events, wall_seconds):
        while self.ticks and tick >= self.ticks[0]:
            t = self.ticks.pop(0)
            path = write_checkpoint(sim, str(self.directory).replace("{tick}", str(t)), t)
            self.written.append((t, path))
