"""The handlers the engine calls by address, each compiled as an entry point of its own: the SM's
issue handler, the MoE-Hub AAU's receive and retry paths, and every handler of the blocks
compiled on demand (NVLS, DySHARP, CAIS, the switch counters: declare.Block.on_demand) - the
latter only for a run that uses the block.

Why: Numba compiles every function into its own LLVM module and links the modules of all its
callees into it, so the run loop's module held a copy of the SM's whole call tree (`sm_issue`, the
instruction interpreter `sm_interpreter.execute` and everything it calls: about half of the engine's
code), of the AAU's, and of every block's handlers, which LLVM optimised and emitted again as part
of the run loop, for every run whatever its config. Behind a function pointer each is a separate
entry point (a Numba `cfunc` of the handler itself: C-callable, cached on disk like every engine
function): its caller's module no longer contains it, it can be compiled while the run loop is, in
another process (dispatch/precompile.py), and a handler no run of the config reaches is not
compiled at all: a default run (an 8-GPU all-to-all) compiles none of NVLS, DySHARP, CAIS or the
switch counters, a run with a multicast object compiles NVLS's and DySHARP's handlers then, once
(the on-disk cache keeps them for every later run).

The rows (`ROWS`): the declarations' (composition.ENTRY_POINTS: the receives declared
`by_address`, then the on-demand blocks' receives, sends, crossings, semantics and event handlers),
then the run loop's own two (the AAU's retry and the SM's issue). Each is called through the
process's entry table (engine/entries.py) with its declaration's calling convention: the
generated chains (dispatch/chains.py, composition.py) and the run loop call `call_void2(row, st,
a0, tick)` and the like; the handlers are unchanged, so are results. The run loop takes the run's
addresses (`entry_table`) as its last argument and installs them in the table on every call; a
row this run did not compile holds engine/entries.py's NOT_INSTALLED (a programming error if
called: the process stops with a message).

The cost is one indirect call where there was a direct call that LLVM did not inline (the large
handlers) or did (a small one: measured in docs/performance.md).

Under NUMBA_DISABLE_JIT (the pure-Python engine) the table holds the Python functions themselves,
the same rows installed for the same runs.
"""
import importlib

import numpy as np
from numba import cfunc, types

from .. import composition
from ..composition import ENTRY_POINTS, INSTRUCTION_ENTRY_ARGS, EntryPoint, entry_rows_in_use
from ..engine import entries as table
from ..engine import generated
from ..engine.optimise_once import entry_compile
from ..engine.stateref import jit_disabled

ENTRY_AAU_RECEIVE = composition.entry_row("components.moehub.aau.aau_receive")
# the run loop's own rows, after the declarations'
ENTRY_AAU_RETRY, ENTRY_SM_ISSUE = len(ENTRY_POINTS), len(ENTRY_POINTS) + 1
ROWS = ENTRY_POINTS + (
    EntryPoint("components.moehub.aau.aau_retry", "call_void2", False, None, False),
    EntryPoint("components.sm.sm_issue", "call_void2", False, None, False))
ENTRY_ROWS = len(ROWS)
if ENTRY_ROWS > table.ROWS:
    raise composition.DeclarationError(f"{ENTRY_ROWS} entry points: engine/entries.py's table "
                                       f"holds {table.ROWS}")

# the rows a second compile process builds on a cold cache (dispatch/precompile.py): the SM's tree
# (about as much compile work as the run loop's), then the AAU's retry entry point, whose call tree
# the SM's (which calls aau_retry) has just compiled in that process; this process compiles the
# AAU's receive entry point after the run loop, by when most of its callees are in the cache. The
# split that measured closest to even (docs/performance.md). The rows of the blocks compiled on
# demand go to the worker too where they are instructions (their callees - operands, the hub's
# admission - are the SM's), to this process otherwise (the switch's and the hub's, the run loop's)
WORKER_ROWS = (ENTRY_SM_ISSUE, ENTRY_AAU_RETRY)

_ENTRIES = {}   # (StateRef type, row) -> the compiled entry point


def worker_rows(rows):
    """Of the rows a run needs (`rows`), those the worker compiles (WORKER_ROWS above), in the
    order it compiles them."""
    semantic = [r for r in rows if ROWS[r].instruction]
    return tuple(r for r in WORKER_ROWS if r in rows) + tuple(semantic)


def rows_in_use(st):
    """The rows a run of the built State `st` needs: every row not of a block compiled on demand,
    and the rows of the blocks it uses (composition.block_in_use)."""
    return entry_rows_in_use(st) + (ENTRY_AAU_RETRY, ENTRY_SM_ISSUE)


def _instruction_entries():
    """The entry points of the instructions' handlers (composition.INSTRUCTION_ENTRY_ARGS): each
    reads the instruction's row at its thread block's pc, as the interpreter did before its
    call (the pc moves only after it), and calls the handler. Generated (engine/generated.py), so
    that Numba caches them like the handlers."""
    lines, body = [], []
    for e in ROWS:
        if e.instruction:
            imp, fn = generated.import_line(e.handler)
            lines.append(imp)
            body += [f"\n\ndef {fn}_entry({INSTRUCTION_ENTRY_ARGS}):",
                     f"    return {fn}(st, g, sm, slot, st.code[st.tb[slot].pc], tick, cyc)"]
    source = ("# generated by moehub_arch/dispatch/indirect.py from the blocks' declarations "
              "(declare.Semantic of a block compiled on demand)\n" + "\n".join(lines + body) + "\n")
    return generated.load("entries", source)


_INSTRUCTIONS = _instruction_entries()


def handler(row):
    """The function of table row `row` (under NUMBA_DISABLE_JIT, the Python function); an
    instruction's, the generated entry that reads its row."""
    module, _, name = ROWS[row].handler.rpartition(".")
    if ROWS[row].instruction:
        return getattr(_INSTRUCTIONS, f"{name}_entry")
    return getattr(importlib.import_module(f"moehub_arch.{module}"), name)


def _py_func(row):
    fn = handler(row)
    return getattr(fn, "py_func", fn)   # a generated instruction entry is a plain function


def _signature(state_type, row):
    returns, arity = table.CONVENTIONS[ROWS[row].caller]
    return (types.int64 if returns else types.void)(state_type, *(types.int64,) * arity)


def entry_point(state_type, row):
    """The entry point of table row `row` compiled for `state_type` (a StateRef type): compiled
    now, or loaded from the on-disk cache if this or another process compiled it."""
    entry = _ENTRIES.get((state_type, row))
    if entry is None:
        with entry_compile():   # the outermost module: its callees are compiled for it
            entry = _ENTRIES[state_type, row] = cfunc(
                _signature(state_type, row), cache=True, _nrt=False)(_py_func(row))
    return entry


def entry_cached(state_type, row):
    """Whether row `row`'s entry point for `state_type` is loaded in this process or in the
    on-disk cache (the lookup a cfunc makes before it compiles, without loading the code)."""
    if (state_type, row) in _ENTRIES:
        return True
    try:
        from numba.core.caching import FunctionCache
        from numba.core.registry import cpu_target
        cache = FunctionCache(_py_func(row))
        key = cache._index_key(_signature(state_type, row), cpu_target.target_context.codegen())
        return key in cache._cache_file._load_index()
    except Exception:   # noqa: BLE001 (a cache we cannot read, a Numba without these internals)
        return False


def compiled_rows():
    """{row: handler} of the entry points this process has compiled or loaded (any State type)."""
    return {row: ROWS[row].handler for _, row in sorted(_ENTRIES, key=lambda k: k[1])}


def entry_table(state_type, rows):
    """What the run loop takes as its `entries` argument: the address of every row of `rows`
    (compiled or loaded now), NOT_INSTALLED in the others (int64 array); or under NUMBA_DISABLE_JIT
    (or for state_type None) the handlers themselves, `table.not_installed` in the others."""
    if jit_disabled() or state_type is None:
        return tuple(handler(r) if r in rows else table.not_installed for r in range(ENTRY_ROWS))
    out = np.full(ENTRY_ROWS, table.NOT_INSTALLED, np.int64)
    for r in rows:
        out[r] = entry_point(state_type, r).address
    return out
