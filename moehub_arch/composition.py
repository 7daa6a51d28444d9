"""Composition: the simulator's hardware blocks, and what is built from their declarations.

Every block declares what it is in its own module (``BLOCK``, declare.py: parameters,
record fields, stats, event kinds, timers, checks, watchdog findings, debug flags). This module
lists the blocks and composes, once at import:

- the record dtypes of ``State`` (``RECORDS``: entity -> dtype, fields in block order) and the
  ``PARAMS`` record (every block's parameters, then one ``tm_<timer>`` per declared timer);
- the event names (``EVENT_NAMES``: kinds must be unique and dense) and the timer layout (each
  block's timers get consecutive index ranges, in block order);

and offers, for the builder and the reports, the parameter values and initial field values of a
config (``param_values``, ``init_records``), the stats of a State (``emit_stats``), the end-of-run
checks, the stuck-run findings and the debug-flag tables.

Adding a block: write its module under components/ with a ``BLOCK`` and add its config section;
the composition finds it (``discover``) and appends it to ``BLOCKS`` (the order is the order of
stats in each scope, of timers and of checks: the blocks listed in ``_ORDER`` first, every other
block after them by module name, so a new block keeps every existing stat's place). A block with
an event kind of its own adds its branch to the run loop (dispatch/loop.py), unless it is compiled
on demand (``Block.on_demand``: its events name their handler); its packets, requests, crossings,
instructions and timers need none (the chains are generated from their declarations; a block
compiled on demand has its handlers called through the entry table, ``ENTRY_POINTS``).
docs/adding_a_block.md walks through two examples.
"""
import importlib
import pkgutil
from collections import namedtuple

import attrs
import numpy as np

from .components import hbm, hub, nvlink, occupancy, packet, scheduler, sm, switch, trace, waiters
from .components import fabric, infiniband, nic, nvls, pcie
from .components import l2
from .components import dysharp, dysharp_ready, dysharp_tracker
from .components import cais
from .components import counted_write
from .components import read_data
from . import components as _components
from .declare import (GPU_SCOPES, SCOPES, Block, Crossing, Event, Instance, Receive, Semantic, Send,
                      Stat)
from .components.moehub import aau, dam, forward, rpm
from .config.schema import DEBUG_FLAGS
from .engine.stateref import state_ref
from .isa.encoding import SEM
from .engine import entries as engine_entries
from .engine import events, extension, generated
from .engine.state import (CACHE_LINE_BYTES, ERROR_TEXT as ENGINE_ERROR_TEXT, STATE_FIELDS,
                           aligned_zeros, record_view)


def _with_event_counts(engine):
    """The engine's declaration with its per-kind event counters (system.engine.events.<name>)
    appended to its own stat group: the engine floor (engine/events.py) counts events by integer
    kind and knows no block, so the names, and which blocks are on in a run, come from here."""
    counts = Stat("events.{v}", "count", "events of kind '{v}' processed (engine.events)",
                  lambda i, k: i.st.ev_count[k], each=lambda i: enabled_events(i.st))
    group, = engine.stats
    return attrs.evolve(engine, stats=(attrs.evolve(group, stats=group.stats + (counts,)),))


ENGINE = _with_event_counts(events.BLOCK)

# the blocks in the order their stats, timers and checks have always had
_ORDER = (packet.BLOCK, ENGINE, trace.BLOCK, scheduler.BLOCK, sm.BLOCK, waiters.BLOCK,
          hbm.BLOCK, l2.BLOCK, nvlink.BLOCK, switch.BLOCK, hub.BLOCK, rpm.BLOCK, aau.BLOCK,
          dam.BLOCK, occupancy.BLOCK, nvls.BLOCK, read_data.BLOCK, pcie.BLOCK, infiniband.BLOCK,
          nic.BLOCK, fabric.BLOCK,
          dysharp.BLOCK, dysharp_tracker.BLOCK, cais.BLOCK, forward.BLOCK, counted_write.BLOCK,
          dysharp_ready.BLOCK)


def discover(package=_components, listed=_ORDER):
    """The ``BLOCK`` of every module of `package` (its subpackages included) that `listed` does
    not hold, by module name: a block is added by writing its module."""
    found = []
    for info in sorted(pkgutil.walk_packages(package.__path__, package.__name__ + "."),
                       key=lambda i: i.name):
        block = getattr(importlib.import_module(info.name), "BLOCK", None)
        if isinstance(block, Block) and all(block is not b for b in listed + tuple(found)):
            found.append(block)
    return tuple(found)


BLOCKS = _ORDER + discover()

_RESERVED = set(dir(np.record))


class DeclarationError(Exception):
    """Two blocks declare the same name, or a block refers to something nobody declares (a
    programming error in a component module, found at import)."""


def _dtype(names, what, blocks=BLOCKS):
    # In the pure-Python engine `rec.x` resolves numpy's own attributes before fields (a field
    # called `nbytes` would read the record's byte size), so such names are refused here.
    clash = [n for n in names if n in _RESERVED]
    if clash:
        raise DeclarationError(f"{what}: field names {clash} shadow numpy.record attributes")
    seen = set()
    for n in names:
        if n in seen:
            owners = [b.name for b in blocks for f in b.fields if f.name == n] or \
                     [b.name for b in blocks for p in b.params if p.field == n]
            raise DeclarationError(f"{what}: field '{n}' declared twice (blocks {owners})")
        seen.add(n)
    return np.dtype([(n, np.int64) for n in names])


def _line_aligned(dtype):
    """`dtype` padded to whole cache lines (the padding holds no field)."""
    size = -(-dtype.itemsize // CACHE_LINE_BYTES) * CACHE_LINE_BYTES
    return np.dtype({"names": list(dtype.names), "formats": [dtype.fields[n][0] for n in dtype.names],
                     "offsets": [dtype.fields[n][1] for n in dtype.names], "itemsize": size})


def _compose_records(blocks):
    owners = {}
    for b in blocks:
        for r in b.records:
            if r.name in owners:
                raise DeclarationError(f"record '{r.name}' declared by blocks {owners[r.name]} and "
                                       f"{b.name}")
            owners[r.name] = b.name
    names = {e: [] for e in owners}
    for b in blocks:
        for f in b.fields:
            if f.entity not in names:
                raise DeclarationError(f"block {b.name}: field '{f.name}' of entity '{f.entity}', "
                                       f"which no block declares (records: {', '.join(owners)})")
            names[f.entity].append(f.name)
    for b in blocks:
        for r in b.records:
            missing = [n for n in r.first if n not in names[r.name]]
            if missing:
                raise DeclarationError(f"block {b.name}: record '{r.name}' puts first fields "
                                       f"{missing}, which no block declares")
            names[r.name] = list(r.first) + [n for n in names[r.name] if n not in r.first]
    aligned = {r.name for b in blocks for r in b.records if r.cache_lines}
    dtypes = {e: _dtype(n, f"record '{e}'", blocks) for e, n in names.items()}
    return {e: _line_aligned(d) if e in aligned else d for e, d in dtypes.items()}, owners


def _compose_timers(blocks):
    timers = [(b, t) for b in blocks for t in b.timers]
    kinds = {e.kind for b in blocks for e in b.events}
    for b, t in timers:
        if t.event not in kinds:
            raise DeclarationError(f"block {b.name}: timer '{t.name}' dispatches event kind "
                                   f"{t.event}, which no block declares")
    return tuple(t for _, t in timers)


def _compose_events(blocks):
    """The event names by kind (checked unique and dense)."""
    by_kind = _events_by_kind(blocks)
    return tuple(by_kind[k].name for k in range(len(by_kind)))


def _compose_kinds(blocks, attr, what):
    """{kind: declaration} of the blocks' Event, Packet or Request declarations (`attr`): each
    kind unique over all blocks, the kinds dense from 0."""
    by_kind = {}
    for b in blocks:
        for d in getattr(b, attr):
            if d.kind in by_kind:
                raise DeclarationError(f"{what} {d.kind} declared twice: '{by_kind[d.kind].name}' "
                                       f"and '{d.name}' (block {b.name})")
            by_kind[d.kind] = d
    if sorted(by_kind) != list(range(len(by_kind))):
        raise DeclarationError(f"{what}s must be 0..{len(by_kind) - 1}, found {sorted(by_kind)}")
    return by_kind


def _events_by_kind(blocks):
    return _compose_kinds(blocks, "events", "event kind")


RECORDS, RECORD_OWNERS = _compose_records(BLOCKS)
TIMERS = _compose_timers(BLOCKS)
EVENT_NAMES = _compose_events(BLOCKS)
NUM_EVENT_KINDS = len(EVENT_NAMES)
EVENTS = _events_by_kind(BLOCKS)


def enabled_events(st):
    """{kind: name} of the event kinds whose block is on in this State (Event.enabled)."""
    return {k: e.name for k, e in sorted(EVENTS.items()) if e.enabled is None or e.enabled(st)}


PACKETS = _compose_kinds(BLOCKS, "packets", "packet kind")
REQUESTS = _compose_kinds(BLOCKS, "requests", "request kind")
PACKET_KIND_NAMES = tuple(PACKETS[k].name for k in range(len(PACKETS)))
REQUEST_KIND_NAMES = tuple(REQUESTS[k].name for k in range(len(REQUESTS)))
if len(PACKETS) > 62:
    raise DeclarationError(f"{len(PACKETS)} packet kinds: packet.packet_vc's mask holds 62")
# the kinds that travel in the response channel, one bit each (packet.packet_vc)
RESPONSE_KINDS = sum(1 << k for k, d in PACKETS.items() if d.response)
# PARAMS: every block's parameters, the composed ones, then the first index of each timer range
COMPOSED_PARAMS = {"response_kinds": RESPONSE_KINDS}
PARAMS = _dtype([p.field for b in BLOCKS for p in b.params] + list(COMPOSED_PARAMS)
                + [f"tm_{t.name}" for t in TIMERS], "PARAMS")

def _compose_state(blocks):
    """State's fields: the arrays the builder allocates itself (engine/state.py STATE_FIELDS),
    then every record and array a block declares with its size (Record.count, Array.shape), which
    the builder allocates from the declaration: a new block's arrays need no edit elsewhere."""
    names = list(STATE_FIELDS)
    # block by block (its records, then its arrays), so a block appended to BLOCKS appends its
    # arrays and every existing one keeps its place
    sized = [(b, x) for b in blocks
             for x in [r for r in b.records if r.count is not None] + list(b.arrays)]
    for b, x in sized:
        if x.name in names:
            raise DeclarationError(f"block {b.name}: State array '{x.name}' exists already")
        names.append(x.name)
    for b in blocks:
        for r in b.records:
            if r.count is None and r.name not in STATE_FIELDS:
                raise DeclarationError(f"block {b.name}: record '{r.name}' needs a count (it is not "
                                       f"among the arrays the builder allocates)")
    return namedtuple("State", names), sized


State, _SIZED = _compose_state(BLOCKS)


def declared_arrays(cfg):
    """{State field: array} of the records and arrays blocks declare with a size."""
    out = {}
    for _, x in _SIZED:
        if hasattr(x, "shape"):
            shape = x.shape(cfg)
            out[x.name] = np.full(shape, x.fill, np.int64)
        else:
            out[x.name] = new_record_array(x.name, max(int(x.count(cfg)), 1), cfg)
    return out


# the timer of flat index i dispatches TIMER_EVENTS[k] where k is the last range starting <= i
TIMER_EVENTS = tuple(t.event for t in TIMERS)


# ------------------------------------------------------------------------------ building
def param_values(cfg):
    """{PARAMS field: value} of every parameter a block computes from the config, and of the
    composed ones (COMPOSED_PARAMS: the same for every config)."""
    out = {p.field: int(p.value(cfg)) for b in BLOCKS for p in b.params if p.value is not None}
    out.update(COMPOSED_PARAMS)
    return out


def timer_layout(cfg):
    """{tm_<timer>: first index} and the number of timers, from the declared timer counts."""
    out, base = {}, 0
    for t in TIMERS:
        out[f"tm_{t.name}"] = base
        base += int(t.count(cfg))
    return out, base


def init_records(entity, rec, cfg):
    """Set the declared non-zero initial values of `entity`'s fields in the record array `rec`."""
    for b in BLOCKS:
        for f in b.fields:
            if f.entity == entity and (callable(f.init) or f.init != 0):
                rec[f.name][:] = f.init(cfg) if callable(f.init) else f.init


def new_record_array(entity, n, cfg):
    """A record array of `n` `entity` records with their declared initial values."""
    dtype = RECORDS[entity]
    if dtype.itemsize % CACHE_LINE_BYTES == 0:
        # line-aligned records (Record.cache_lines): the array starts a cache line too
        rec = record_view(aligned_zeros(n, dtype))
    else:
        rec = record_view(np.zeros(n, dtype))
    init_records(entity, rec, cfg)
    return rec


def timer_event(st, i):
    """The event kind timer i dispatches (for reports; the run loop has its own branches)."""
    p = st.p[0]
    kind = TIMER_EVENTS[0]
    for t in TIMERS:
        if i >= int(p[f"tm_{t.name}"]):
            kind = t.event
    return kind


# ---------------------------------------------------------------------------------- stats
def _groups(scope):
    return [g for b in BLOCKS for g in b.stats if g.scope == scope]


GROUPS = {scope: _groups(scope) for scope in SCOPES}
_unknown = [g.scope for b in BLOCKS for g in b.stats if g.scope not in SCOPES]
if _unknown:
    raise DeclarationError(f"stat scopes {_unknown} are not among {SCOPES}")


def _emit(out, groups, inst, prefix):
    for grp in groups:
        if grp.enabled is not None and not grp.enabled(inst.st):
            continue
        base = f"{prefix}.{grp.path}" if grp.path else prefix
        for s in grp.stats:
            if not s.each:
                value = inst.rec[s.value] if isinstance(s.value, str) else s.value(inst)
                desc = s.desc(inst, None) if callable(s.desc) else s.desc
                out.add(f"{base}.{s.name}", value, s.unit, desc)
                continue
            items = s.each(inst) if callable(s.each) else s.each
            for k, v in (items.items() if isinstance(items, dict) else enumerate(items)):
                desc = s.desc(inst, k) if callable(s.desc) else s.desc.format(k=k, v=v)
                out.add(f"{base}.{s.name.format(k=k, v=v)}", s.value(inst, k), s.unit, desc)


def scope_instances(st, scope, sim_ticks, launches=(), g=-1):
    """(name prefix, Instance) of every instance of a stat scope (of GPU g for GPU scopes)."""
    p = st.p[0]
    S, L = int(p.sms_per_gpu), int(p.links_per_gpu)
    gp = f"system.gpu{g}"
    if scope in ("gpu_total", "gpu"):
        return [(gp, Instance(st, sim_ticks, g, g, st.gpu[g]))]
    if scope == "launch":
        return [(f"{gp}.launch{l.index}", Instance(st, sim_ticks, g, l.index, st.ln[l.index],
                                                    launch=l)) for l in launches if l.gpu == g]
    if scope == "sm":
        return [(f"{gp}.sm{s}", Instance(st, sim_ticks, g, g * S + s, st.sm[g * S + s]))
                for s in range(S)]
    if scope == "link":
        return [(f"{gp}.nvlink{l}", Instance(st, sim_ticks, g, g * L + l, tx=st.ch[2 * (g * L + l)],
                                              rx=st.ch[2 * (g * L + l) + 1])) for l in range(L)]
    if scope == "switch_port":
        up = [c for c in range(2 * int(p.num_gpus) * L) if st.ch[c].to_switch]
        out = []
        for s in range(int(p.num_switches)):
            for c in sorted((c for c in up if st.ch[c].switch == s), key=lambda c: st.ch[c].port):
                out.append((f"system.switch{s}.port{st.ch[c].port}",
                            Instance(st, sim_ticks, index=c, rx=st.ch[c], tx=st.ch[c + 1])))
        return out
    if scope == "fabric_link":
        return fabric.fabric_link_instances(st, sim_ticks)
    if scope == "nic":
        return [(f"system.nic{i}", Instance(st, sim_ticks, index=i, rec=st.nic[i]))
                for i in range(int(p.num_nics))]
    return [("system", Instance(st, sim_ticks, rec=st.sys[0]))]


def emit_stats(out, st, launches, sim_ticks, scopes):
    """Add the declared stats of the given scopes to the StatsSet `out` (GPU scopes for every
    GPU in turn, in the order of GPU_SCOPES; then the system-wide ones)."""
    G = int(st.p[0].num_gpus)
    gpu_scopes = [s for s in GPU_SCOPES if s in scopes]
    if gpu_scopes:
        for g in range(G):
            for scope in gpu_scopes:
                for prefix, inst in scope_instances(st, scope, sim_ticks, launches, g):
                    _emit(out, GROUPS[scope], inst, prefix)
    for scope in scopes:
        if scope not in GPU_SCOPES:
            for prefix, inst in scope_instances(st, scope, sim_ticks):
                _emit(out, GROUPS[scope], inst, prefix)


# ------------------------------------------------------------------ checks and diagnosis
def run_checks(sim, out):
    """Every block's end-of-run invariants, in block order."""
    for b in BLOCKS:
        for check in b.checks:
            check(sim, out)


def findings(sim):
    """What every block reports about itself in a stuck run (full buffers, blocked units)."""
    return [line for b in BLOCKS for fn in b.findings for line in fn(sim)]


def likely_causes(sim):
    """The blocks' explanations of a stuck run (strongest evidence first: block order)."""
    return [line for b in BLOCKS for fn in b.causes for line in fn(sim)]


# ------------------------------------------------------------------------- debug flags
def _flag_categories():
    flags = {}
    for b in BLOCKS:
        for d in b.debug:
            if d.flag in flags:
                raise DeclarationError(f"debug flag '{d.flag}' declared twice")
            flags[d.flag] = d.category
    for b in BLOCKS:
        for d in b.debug:
            for grp in d.groups:
                flags[grp] = flags.get(grp, 0) | d.category
    flags["All"] = int(np.bitwise_or.reduce(list(flags.values())))
    return flags


FLAG_CATEGORIES = _flag_categories()
if set(FLAG_CATEGORIES) != set(DEBUG_FLAGS):
    raise DeclarationError(f"debug flags declared by the blocks {sorted(FLAG_CATEGORIES)} differ from "
                           f"config.schema.DEBUG_FLAGS {sorted(DEBUG_FLAGS)} (the config accepts those)")
# trace record kind -> its category
KIND_CATEGORY = np.zeros(1 + max(k for b in BLOCKS for d in b.debug for k in d.records), np.int64)
for _b in BLOCKS:
    for _d in _b.debug:
        KIND_CATEGORY[list(_d.records)] = _d.category


# record kind -> fn(names, ident, v0, v1) -> (component, message), for the debug output
DESCRIBE = {k: fn for b in BLOCKS for d in b.debug for k, fn in d.describe.items()}
_undescribed = [k for k in range(len(KIND_CATEGORY)) if KIND_CATEGORY[k] and k not in DESCRIBE]
if _undescribed:
    raise DeclarationError(f"trace record kinds {_undescribed} have no debug description")


def _compose_handlers(blocks, attr, what, keep=None):
    """{kind: (block name, declaration)} of the kinds the blocks' `attr` declarations (Receive,
    Send, Crossing, Semantic; those `keep` keeps) hand to a handler: each kind taken by one
    handler."""
    out = {}
    for b in blocks:
        for d in getattr(b, attr):
            if keep is not None and not keep(d):
                continue
            for k in d.kinds:
                if k in out:
                    raise DeclarationError(f"{what.format(k)} by blocks '{out[k][0]}' "
                                           f"({out[k][1].handler}) and '{b.name}' ({d.handler})")
                out[k] = (b.name, d)
    return out


def _compose_errors(blocks, engine_errors):
    """{error code: message} of the engine's codes and those the blocks declare (Block.errors):
    each code once."""
    out = dict(engine_errors)
    for b in blocks:
        for e in b.errors:
            if e.code in out:
                raise DeclarationError(f"block {b.name}: runtime error code {e.code} is taken "
                                       f"('{out[e.code]}')")
            out[e.code] = e.text
    return out


def _compose_receives(blocks):
    """{packet kind: (block name, Receive)} of the packet kinds a GPU receives (Block.receives)."""
    return _compose_handlers(blocks, "receives", "packet kind {} is received")


def _compose_sends(blocks):
    """{request kind: (block name, Send)} of the hub's request kinds (Block.sends)."""
    return _compose_handlers(blocks, "sends", "request kind {} is sent")


RECEIVES = _compose_receives(BLOCKS)
SENDS = _compose_sends(BLOCKS)
# {packet kind: (block name, Crossing)}: the kinds a block serves in a switch's crossbar
CROSSINGS = _compose_handlers(BLOCKS, "crossings", "packet kind {} is served in the switch",
                              lambda d: not d.arrival)
# {packet kind: (block name, Crossing)}: the kinds a block may absorb as they reach a switch
ARRIVALS = _compose_handlers(BLOCKS, "crossings", "packet kind {} is absorbed at a switch's input",
                             lambda d: d.arrival)
# {semantic: (block name, Semantic)}: the instructions blocks add to the SM's interpreter
SEMANTICS = _compose_handlers(BLOCKS, "semantics", "semantic {} is executed")
if any(k >= 63 for k in SEMANTICS):
    raise DeclarationError("a block's semantic above 62: extension.SEMANTICS holds 63 bits")


def _undeclared(table, kinds, what):
    for k, (name, d) in table.items():
        if k not in kinds:
            raise DeclarationError(f"block {name}: {d.handler} takes {what} {k}, which no block "
                                   f"declares")


_undeclared(RECEIVES, PACKETS, "packet kind")
_undeclared(CROSSINGS, PACKETS, "packet kind")
_undeclared(ARRIVALS, PACKETS, "packet kind")
_undeclared(SENDS, REQUESTS, "request kind")


# ------------------------------------------------------------- handlers called by address
# How a declaration's handler is called through the entry table (engine/entries.py): the
# caller (its calling convention) and whether its result is a truth value (compiled as an int64).
# An instruction's handler takes the instruction's row of State.code, an array, which an entry
# point (a C function) cannot take: its entry point takes the same arguments less the row and
# reads it at the thread block's pc (dispatch/indirect.py), where the interpreter read it
_CONVENTION = {Receive: ("call_void4", False), Send: ("call_void3", False),
               Semantic: ("call_int5", True), Event: ("call_void2", False)}
# the arguments of an instruction's entry point (Semantic's, without the row)
INSTRUCTION_ENTRY_ARGS = "st, g, sm, slot, tick, cyc"


def _convention(d):
    if isinstance(d, Crossing):
        return "call_int3", d.arrival
    return _CONVENTION[type(d)]


EntryPoint = namedtuple("EntryPoint", "handler caller truth block instruction")
EntryPoint.__doc__ = """A row of the entry table: the handler (module and function, as declared),
its caller (engine/entries.py), whether its result is a truth value, the block that uses it
(compiled only for a run that uses that block: Block.on_demand) or None (every run), and whether
it is an instruction's handler (Semantic: its entry point reads the instruction's row itself)."""


def _compose_entry_points(blocks):
    """The rows of the entry table the declarations make: every Receive declared ``by_address``
    (compiled for every run), then the handlers of every block compiled on demand, block by
    block (receives, sends, crossings, semantics, its events' handlers)."""
    rows = [EntryPoint(r.handler, *_convention(r), None, False)
            for b in blocks for r in b.receives if r.by_address and b.on_demand is None]
    for b in blocks:
        if b.on_demand is None:
            continue
        for d in b.receives + b.sends + b.crossings + b.semantics + tuple(
                e for e in b.events if e.handler is not None):
            if all(row.handler != d.handler for row in rows):
                rows.append(EntryPoint(d.handler, *_convention(d), b, isinstance(d, Semantic)))
    if len(rows) > engine_entries.ROWS:
        raise DeclarationError(f"{len(rows)} handlers called by address: engine/entries.py's "
                               f"table holds {engine_entries.ROWS}")
    return tuple(rows)


ENTRY_POINTS = _compose_entry_points(BLOCKS)
_ROW_OF = {e.handler: row for row, e in enumerate(ENTRY_POINTS)}


def entry_row(handler):
    """The entry-table row of a handler named as declarations name it ("components.moehub.aau.
    aau_receive")."""
    if handler not in _ROW_OF:
        raise KeyError(f"{handler} is no row of the entry table (composition.ENTRY_POINTS)")
    return _ROW_OF[handler]


def block_in_use(b, st):
    """Whether the run of State `st` uses block `b` compiled on demand: its own test
    (Block.on_demand), or the program holds an instruction of one of its semantics (whose
    handler must then run, if only to raise the error its operands deserve)."""
    if b.on_demand(st):
        return True
    kinds = [k for d in b.semantics for k in d.kinds]
    return bool(kinds) and bool(np.isin(np.asarray(st.code)[:, SEM], kinds).any())


def entry_rows_in_use(st):
    """The rows of ENTRY_POINTS a run of `st` needs (every row of a block it does not use left
    out)."""
    used = {}
    rows = []
    for row, e in enumerate(ENTRY_POINTS):
        if e.block is not None and e.block.name not in used:
            used[e.block.name] = block_in_use(e.block, st)
        if e.block is None or used[e.block.name]:
            rows.append(row)
    return tuple(rows)


def direct_call(args):
    """handler_chain's default call: the declaration's handler, imported, called with `args`; a
    handler that is a row of the entry table (ENTRY_POINTS) is called through it, `args` after
    its row."""
    def call(d):
        if d.handler in _ROW_OF:
            caller, truth = _convention(d)
            row_args = INSTRUCTION_ENTRY_ARGS if isinstance(d, Semantic) else args
            expr = f"{caller}({_ROW_OF[d.handler]}, {row_args})"
            return [f"from moehub_arch.engine.entries import {caller}"], \
                f"{expr} != 0" if truth else expr
        imp, fn = generated.import_line(d.handler)
        return [imp], f"{fn}({args})"
    return call


def handler_chain(name, params, var, table, default, call, below=False):
    """The source of an `@inline` function `name(params)` that calls, for each kind of `table`
    ({kind: (block, declaration)}), its declaration's handler (`call(declaration)`: (import
    lines, call expression)) and returns its result: one test per handler (engine/generated.py
    kind_test), in the order of their lowest kind; `default`: the expression returned for any
    other kind (None: the last handler takes every kind no other handler does). `below`: kinds
    below the table's lowest reach it too (so no test may take them as the lowest's)."""
    by_handler = {}
    for k, (_, d) in sorted(table.items()):
        by_handler.setdefault(d.handler, (d, []))[1].append(k)
    lines, calls = ["from moehub_arch.engine.jit import inline"], []
    for d, kinds in by_handler.values():
        imports, expr = call(d)
        lines += [i for i in imports if i not in lines]
        calls.append((kinds, expr))
    body = [f"\n\n@inline\ndef {name}({params}):"]
    if _KIND_OF[var] is not None:
        body.append(f"    {var} = {_KIND_OF[var]}")
    first = -1 if below or not table else min(table)
    for i, (kinds, expr) in enumerate(calls):
        if default is None and i == len(calls) - 1:
            body.append(f"    return {expr}")
            break
        body.append(f"    if {generated.kind_test(var, kinds, first)}:")
        body.append(f"        return {expr}")
    if default is not None:
        body.append(f"    return {default}")
    return "\n".join(lines + body) + "\n"


_KIND_OF = {"k": "st.pk[pkt].kind", "rk": "st.req[r].kind", "sem": None, "kind": None}


def _install_extensions():
    """Generate the dispatch functions blocks' compiled code calls (engine/extension.py) from the
    declarations and put them in their slots."""
    source = ("# generated by moehub_arch/composition.py from the blocks' declarations "
              "(declare.Crossing, Semantic)\n"
              "from moehub_arch.engine.extension import ROUTE\n"
              + handler_chain("switch_serve", "st, c, pkt, tick", "k", CROSSINGS, "ROUTE",
                             direct_call("st, c, pkt, tick"))
              + handler_chain("switch_absorb", "st, c, pkt, tick", "k", ARRIVALS, "False",
                              direct_call("st, c, pkt, tick"))
              + handler_chain("execute", "st, sem, g, sm, slot, row, tick, cyc", "sem", SEMANTICS,
                              None, direct_call("st, g, sm, slot, row, tick, cyc")))
    module = generated.load("extension", source)
    extension.switch_serve = module.switch_serve
    extension.switch_absorb = module.switch_absorb
    extension.execute = module.execute
    extension.SEMANTICS = sum(1 << k for k in SEMANTICS)
    return source


EXTENSION_SOURCE = _install_extensions()
# the runtime errors' messages: the engine's and the blocks' own (Block.errors)
ERROR_TEXT = _compose_errors(BLOCKS, ENGINE_ERROR_TEXT)


def build_blocks(cfg, building):
    """Run every block's build hook (declare.Block.build), in BLOCKS order; a hook's ValueError
    (a bad configuration value, named) goes to the caller."""
    for b in BLOCKS:
        for fn in b.build:
            fn(cfg, building)


def start_blocks(st):
    """Run every block's start hook (compiled; before the first event of a fresh run)."""
    ref = state_ref(st)
    for b in BLOCKS:
        for fn in b.start:
            fn(ref)


def block(name):
    """The declaration of the block called `name`."""
    for b in BLOCKS:
        if b.name == name:
            return b
    raise KeyError(name)


def describe(name=None):
    """A block's declaration as text (every block without `name`): what ``moehub-sim blocks``
    prints, SST-style self-documentation."""
    out = []
    for b in BLOCKS:
        if name is not None and b.name != name:
            continue
        out.append(f"{b.name}: {b.doc.strip()}")
        for r in b.records:
            out.append(f"  record {r.name}: {r.doc}")
        if b.params:
            out.append("  parameters (State.p):")
            for p in b.params:
                key = f" <- {p.key}" if p.key else ""
                out.append(f"    {p.field} ({p.unit}){key}: {p.doc}; source: {p.source}")
        by_entity = {}
        for f in b.fields:
            by_entity.setdefault(f.entity, []).append(f.name)
        for entity, names in by_entity.items():
            out.append(f"  fields of {entity}: {', '.join(names)}")
        for grp in b.stats:
            path = f".{grp.path}" if grp.path else ""
            for st in grp.stats:
                desc = st.desc if isinstance(st.desc, str) else "(per item)"
                out.append(f"  stat [{grp.scope}]{path}.{st.name} ({st.unit}): {desc}")
        for e in b.events:
            out.append(f"  event {e.kind} {e.name}: {e.doc}")
        for t in b.timers:
            out.append(f"  timer tm_{t.name} -> {EVENT_NAMES[t.event]}: {t.doc}")
        for fn in b.checks:
            out.append(f"  check {fn.__name__}")
        for fn in b.findings + b.causes:
            out.append(f"  stuck-run report {fn.__name__}")
        for d in b.debug:
            groups = f" (also in {', '.join(d.groups)})" if d.groups else ""
            out.append(f"  debug flag {d.flag}{groups}")
    return "\n".join(out)

