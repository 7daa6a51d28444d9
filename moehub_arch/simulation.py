"""Simulation driver: build the system, run the compiled loop to completion, collect the stats.

Python is only involved between batches of events (progress, growing the event queue, draining
trace records, the watchdog, limits and checkpoints: RunObservers) and at the end (stats, report figures, end-of-run
invariants); it is never called per event.

How a run ends (the CLI's exit status in brackets):
- completed: every launch finished; the invariants (checks.py) hold [0] or not [4];
- stopped by a limit (run.max_ticks, run.max_wall, run.max_events): clean, stats of the run so
  far, no invariants checked [0];
- stuck: the event queue emptied with launches unfinished, the watchdog saw no instruction
  for run.watchdog_interval, or thread blocks spun without touching memory, the hub or the links
  for run.livelock_interval (watchdog.py) [3];
- a runtime error in a kernel [2].
In every case the stats collected so far are in `sim.stats` (the CLI writes them).
"""
import time

import numpy as np

from .builder import BuildError, build_state, event_headroom
from .cache_repair import (CACHE_LOAD_ERRORS, damaged_cache_file, remove_function, repair_cache,
                           say_rebuilt)
from .components.nvlink import settle_credits
from .config import ConfigError, flat_params, locate
from .dispatch import loop as dispatch_loop
from .engine.events import grow_event_queue
from .dispatch.precompile import EngineCompile
from .engine.stateref import state_ref
from .components.trace import TRACE_COLUMNS
from .composition import ERROR_TEXT, SEMANTICS
from .engine.state import LN_DONE
from .isa import assemble_files, default_isa_paths, load_isa
from .isa.loader import IsaError
from .isa.encoding import REG_TB, SEM, SUBOP, SUBOP_NAMES
from .signal_state import end_soft
from .limits import RunLimits, StopRun, TimeHorizon
from .observer import RunObserver, SimulationError  # noqa: F401 (re-exported for users)
from .stats.collect import collect_stats
from .stats.report import evaluate_report
from .watchdog import LivelockWatchdog, NoProgressWatchdog, diagnose, unfinished


# the config keys whose product sizes the simulator's state (records per GPU, SM, thread block)
_STATE_SIZE_KEYS = ("system.num_gpus", "system.gpu.num_sms", "system.gpu.sm.smem_bytes",
                    "system.gpu.hbm.channels", "system.nvlink.links_per_gpu")


def _allocation_failure(error):
    """Whether `error` is NumPy refusing an array too large to allocate (not a bug elsewhere)."""
    if isinstance(error, MemoryError):
        return True
    text = str(error)
    return "Maximum allowed dimension exceeded" in text or "array is too big" in text


def _machine_too_large(cfg, error):
    """The one-paragraph error for a configured machine whose state cannot be allocated."""
    import os
    try:
        have = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
        have = f"this computer has {have:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        have = "this computer's memory is unknown"
    shape, dtype = getattr(error, "shape", None), getattr(error, "dtype", None)
    if shape is not None and dtype is not None:
        n = int(np.prod(shape))
        error = (f"an array of {n:,} x {dtype.itemsize} bytes = "
                 f"{n * dtype.itemsize / 2**30:,.0f} GiB")
    sizes = []
    for key in _STATE_SIZE_KEYS:
        node = cfg
        for part in key.split("."):
            node = getattr(node, part)
        sizes.append(f"{key} = {node} ({cfg.where(key) or 'default'})")
    return (f"system: the configured machine's simulator state cannot be allocated ({error}; "
            f"{have}). Its size follows from " + ", ".join(sizes) + "; reduce them, or run on "
            f"a computer with more memory")



def _check_semantics(isa):
    """Every semantic an ISA file adds is executed by a block (declare.Semantic, with the same
    number): an instruction of one that no block executes would do nothing."""
    missing = [(s, isa.semantics.names[s], where)
               for s, where in sorted(isa.semantics.files.items()) if s not in SEMANTICS]
    if missing:
        s, name, where = missing[0]
        raise IsaError(f"{where}: semantics.{name}: no block executes semantic {s} (a block's "
                       f"module declares Semantic(({s},), handler); the blocks execute "
                       f"{sorted(SEMANTICS)})")

class InvariantError(SimulationError):
    """End-of-run invariants violated (checks.py): exit status 4."""

    def __init__(self, message):
        super().__init__(message, exit_code=4)


class Simulation:
    """One configured system, ready to run once."""

    def __init__(self, cfg):
        self.layer = None
        self.input_cfg = cfg        # as given (a checkpoint rebuilds the run from it)
        self.restored_tick = None   # set by checkpoint.restore: continue instead of starting
        self.stopped = None         # why a limit ended the run early (None: it ran to its end)
        self.completed = False      # every launch finished
        self.violations = []        # failed end-of-run invariants (checks.py)
        presets = None
        try:
            if cfg.workload.block.model:
                # a transformer block (workloads/block.py): same interface as the MoE layer
                from .workloads.block import TransformerBlock
                self.layer = TransformerBlock(cfg)
                cfg = self.layer.expanded_config()
                presets = self.layer.presets()
            elif cfg.scheme != "none":
                from .workloads.layer import MoeLayer
                self.layer = MoeLayer(cfg)
                cfg = self.layer.expanded_config()   # the generated buffers and launches
                presets = self.layer.presets()
            self.cfg = cfg
            isa_paths = default_isa_paths() + list(cfg.workload.isa_files)
            self.isa = load_isa(isa_paths).resolve(flat_params(cfg))
            _check_semantics(self.isa)
            self.program = assemble_files(cfg.workload.kernel_files, self.isa)
            try:
                self.state, self.buffers, self.launches = build_state(cfg, self.program,
                                                                      presets=presets)
            except (MemoryError, ValueError) as e:
                if not _allocation_failure(e):
                    raise
                raise BuildError(_machine_too_large(cfg, e)) from None
        except (BuildError, ConfigError, _layer_error()) as e:
            # errors found after loading name the file that set the key, as loading errors do
            e.args = (locate(self.input_cfg, str(e)),)
            raise
        self.stats = None
        self.cold_start = None   # how run() got the compiled engine (dispatch/precompile.py)
        self._entries = None     # the handlers' entry points (dispatch/indirect.py), set by run()
        self.exact_tick = None
        self._trace_masks = {}   # observer -> trace categories it wants now

    # ---- running --------------------------------------------------------------------------
    def default_observers(self):
        """The observers every run gets from its config: the watchdog and the limits."""
        r = self.cfg.run
        out = []
        if r.watchdog_interval > 0:
            out.append(NoProgressWatchdog(r.watchdog_interval))
        if r.livelock_interval > 0:
            out.append(LivelockWatchdog(r.livelock_interval))
        if r.max_ticks > 0 or r.max_wall > 0:
            out.append(RunLimits(r.max_ticks, r.max_wall * 1e-12))
        out.append(TimeHorizon())
        return out

    def run(self, observers=()):
        """Run to completion (or a limit); returns the StatsSet.

        `observers` (RunObserver) are called between batches of events, never per event: each may
        ask the compiled loop to pause at a simulated tick (periodic dumps, checkpoints, watchdogs,
        trace windows), may stop the run with an error by raising SimulationError, or end it
        cleanly by raising limits.StopRun. The config's watchdog and limits are added here.
        On an error the stats collected so far are still in `self.stats`.
        """
        from .composition import start_blocks

        t0 = time.perf_counter()
        repair_cache()   # a cache file cut short is removed (and compiled again) before loading
        # compile (or load from cache) the run loop and the handlers' entry points it calls (on a
        # cold cache in two processes, dispatch/precompile.py); timed separately from the run
        engine = EngineCompile(self.state, (0, 0, -1))
        try:
            if self.restored_tick is None:
                start_blocks(self.state)   # e.g. the scheduler's first launches
            ref = state_ref(self.state)
            self._load_engine(engine, ref)
        finally:
            engine.close()
        t1 = time.perf_counter()
        cpu1 = time.process_time()
        observers = list(observers) + self.default_observers()
        error = None
        status = None
        self._reached = 0
        try:
            status = self._loop(observers, t1)
        except StopRun as e:
            self.stopped = str(e)
        except SimulationError as e:
            error = e
        end_soft()   # Ctrl-C / SIGTERM from here on stop at once (interrupts.py)
        self.exact_tick = None
        host_seconds = time.perf_counter() - t1
        host_cpu_seconds = time.process_time() - cpu1
        st = self.state
        if (error is not None or self.stopped) and self._reached > int(st.sys[0].q_now):
            # stopped at a requested pause: simulated time got there even if no event did
            st.sys[0].q_now = self._reached
        if status == dispatch_loop.STATUS_EMPTY:
            settle_credits(state_ref(st))   # credit returns are not events: let the last ones arrive
        try:
            self._drain_trace(observers)
        except SimulationError as e:   # e.g. the debug output cannot be written
            error = error or e
        max_events = self.cfg.run.max_events
        if error is None and self.stopped is None and max_events and int(st.sys[0].q_events) >= max_events:
            self.stopped = f"stopped after run.max_events = {max_events} events"
        self.completed = bool((st.ln.status == LN_DONE).all())
        if error is None and self.stopped is None and not self.completed:
            error = SimulationError(
                f"deadlock at tick {int(st.sys[0].q_now)}: no event left but "
                f"{len(unfinished(self))} kernel launch(es) unfinished "
                f"({', '.join(unfinished(self)[:8])}):\n" + diagnose(self, int(st.sys[0].q_now)),
                exit_code=3)
        self.stats = collect_stats(st, self.launches, self.program, host_seconds, t1 - t0,
                                   host_cpu_seconds=host_cpu_seconds)
        if self.stopped and error is None:
            # only in a stopped run (a complete run's stats stay as they were): what is partial
            # and why, in the stat's description, for whoever reads stats.txt / stats.json later
            self.stats.add("simStopped", 1, "",
                           f"the run is partial: {self.stopped}; the stats cover the run up to "
                           f"there, a MoE layer's only the kernels and phases finished on every "
                           f"GPU (system.moe.launches_finished)")
        if error is not None:
            evaluate_report(self, strict=False)
            self._finish_observers(observers, error)
            raise error
        if self.layer is not None:
            self.layer.finish(self)
        evaluate_report(self, strict=self.stopped is None)
        if self.stopped is None and self.cfg.run.check_invariants:
            from .checks import run_invariants
            self.violations = run_invariants(self)
            if self.violations:
                error = InvariantError(
                    f"{len(self.violations)} end-of-run invariant(s) violated (--no-check skips "
                    f"the checks):\n"
                    + "\n".join(f"  {v}" for v in self.violations))
        self._finish_observers(observers, error)
        if error is not None:
            raise error
        return self.stats

    def _load_engine(self, engine, ref):
        """The entry points and the run loop, loaded (or compiled); a cache file damaged inside
        (found only when Numba reads it) is removed with its function's other files, and the
        engine is loaded once more (cache_repair.py)."""
        for attempt in (0, 1):
            try:
                self._entries, self.cold_start = engine.finish()
                dispatch_loop.run_loop(ref, 0, 0, -1, self._entries)
                return
            except CACHE_LOAD_ERRORS as e:
                path = damaged_cache_file(e)
                if attempt or path is None:
                    raise
                engine.close()
                say_rebuilt(path.parent.parent, remove_function(path), f"{type(e).__name__}: {e}")
                engine = EngineCompile(self.state, (0, 0, -1))

    def _finish_observers(self, observers, error):
        """on_finish of every observer, also after an error (a stuck run's timeline and dumps are
        closed and complete up to where it stopped). With an error already raised, a failing
        observer does not hide it: its own error is added to the message."""
        for ob in observers:
            if error is None:
                ob.on_finish(self)
                continue
            try:
                ob.on_finish(self)
            except Exception as e:   # noqa: BLE001 (the run's own error comes first)
                error.args = (f"{error}\n(and while closing the outputs: {type(e).__name__}: {e})",)

    def _loop(self, observers, t1):
        """Batches of the compiled loop until the queue empties; returns the last status."""
        st = self.state
        batch = self.cfg.run.batch_events
        max_events = self.cfg.run.max_events
        headroom = event_headroom(st)
        for ob in observers:
            ob.on_start(self)
        st = self.state   # observers may have sized the trace buffer
        status = None
        ref, packed = None, None   # compiled code's handle on st (engine/stateref.py), packed
        while True:                # again when an array of st is replaced (the grown queue)
            n = batch
            if max_events:
                n = min(n, max_events - int(st.sys[0].q_events))
                if n <= 0:
                    break
            stops = [t for t in (ob.next_stop(self) for ob in observers) if t is not None and t >= 0]
            stop = min(stops) if stops else -1
            if packed is not st:
                ref, packed = state_ref(st), st
            status = dispatch_loop.run_loop(ref, n, headroom, stop, self._entries)
            self._drain_trace(observers)
            if status == dispatch_loop.STATUS_GROW:
                st = st._replace(q=grow_event_queue(st.q, 2 * st.q.shape[0]))
                self.state = st
            elif status == dispatch_loop.STATUS_ERROR:
                raise SimulationError(self._runtime_error_text())
            elif status == dispatch_loop.STATUS_EMPTY:
                break
            wall = time.perf_counter() - t1
            # at a requested stop the state is exactly that of tick `stop` (every event at or
            # before it processed, none after)
            self.exact_tick = stop if status == dispatch_loop.STATUS_TICK_LIMIT else None
            now = stop if status == dispatch_loop.STATUS_TICK_LIMIT else int(st.sys[0].q_now)
            self._reached = now
            for ob in observers:
                ob.on_pause(self, now, int(st.sys[0].q_events), wall)
            self.exact_tick = None
        return status

    # ---- trace records (components/trace.py) ----------------------------------------------
    def enable_trace(self, capacity=1 << 16):
        """Give the engine a record buffer of at least `capacity` rows (call from on_start). The
        loop returns to Python to drain it while it still has room for one event's records."""
        from .builder import event_headroom
        st = self.state
        if st.trace.shape[0] >= capacity:
            return
        room = max(capacity, 4 * event_headroom(st))
        self.state = st._replace(trace=np.zeros((room, TRACE_COLUMNS), np.int64))
        self.state.p[0].trace_limit = room - event_headroom(self.state)

    def set_trace_categories(self, owner, mask):
        """Record the categories (components/trace.py CAT_* bits) `owner` wants from now on; the
        engine records the union over owners. Takes effect at the next batch."""
        self._trace_masks[owner] = int(mask)
        union = 0
        for m in self._trace_masks.values():
            union |= m
        if union and self.state.trace.shape[0] <= 1:
            raise RuntimeError("enable_trace() must be called (in on_start) before recording")
        self.state.p[0].trace_mask = union

    def _drain_trace(self, observers):
        sy = self.state.sys[0]
        n = int(sy.trace_n)
        if n:
            records = self.state.trace[:n]
            for ob in observers:
                ob.on_records(self, records)
        sy.trace_n = 0
        sy.trace_full = 0

    # ---- results --------------------------------------------------------------------------
    def buffer_bytes(self, gpu, name):
        """Raw bytes of a buffer on one GPU (functional contents; control buffers in timing mode)."""
        b = self.buffers[name]
        mem = self.state.hbm_mem
        if b.addr + b.nbytes > mem.shape[1]:
            raise ValueError(f"buffer '{name}' is not backed in timing mode")
        return mem[gpu, b.addr:b.addr + b.nbytes]

    def read_buffer(self, gpu, name, dtype=None):
        """A buffer as a numpy array of its declared (or the given) element type."""
        dtype = dtype or self.buffers[name].dtype
        raw = self.buffer_bytes(gpu, name)
        if dtype == "bf16":
            return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        return raw.view({"f32": np.float32, "i64": np.int64, "u8": np.uint8}[dtype])

    # ---- diagnostics ----------------------------------------------------------------------
    def _where(self, slot):
        st = self.state
        T, S = int(st.p[0].slots_per_sm), int(st.p[0].sms_per_gpu)
        sm = slot // T
        l = int(st.tb[slot].launch)
        kernel = self.launches[l].kernel if l >= 0 else "?"
        tb = int(st.regs[slot, REG_TB])
        pc = int(st.tb[slot].pc)
        file, line = self.program.source_line(pc)
        return f"{file}:{line}", f"kernel '{kernel}' (GPU {sm // S}, SM {sm % S}, TB {tb})"

    def _runtime_error_text(self):
        st = self.state
        sy = st.sys[0]
        code, slot, pc, value = int(sy.err_code), int(sy.err_slot), int(sy.err_pc), int(sy.err_value)
        loc, who = self._where(slot)
        row = st.code[pc]
        sem = int(row[SEM])
        name = self.isa.semantic_name(sem)
        subs = SUBOP_NAMES.get(sem)
        if subs:
            name += "." + subs[int(row[SUBOP])]
        return (f"{loc}: runtime error in {who} at tick {int(sy.q_now)}, instruction "
                f"'{name}': {ERROR_TEXT.get(code, 'error')} (value {value}, 0x{value & (2**64 - 1):x}).")


def _layer_error():
    from .workloads.layer import LayerError
    return LayerError
