"""The decorators of every compiled engine function (engine/ and components/).

`compiled` is Numba's ``njit`` with the on-disk cache and *without the reference-counting runtime*
(NRT). Why: every handler takes the whole State (~80 arrays; compiled code gets it as one pointer,
engine/stateref.py), and with NRT Numba increments and decrements the reference count of every
array it touches (an atomic operation each) on entry to and exit from every non-inlined call. Profiling (tools/profile_engine.py) showed that
bookkeeping taking about half of the run loop's time. The engine never allocates memory while it
runs (State is built in Python and every buffer is preallocated), so it needs no reference counts.

Rules that follow from running without NRT (Numba enforces the first two when it compiles):
- no allocation in compiled code (``np.empty``, ``.copy()``, ``np.array([...])``); use State
  arrays or scalar arithmetic (``np.uint32(bits).view(np.float32)`` reinterprets a scalar);
- a compiled function may not return an array view; helpers that hand out views are `inline`
  (inlined into their caller at the Numba IR level, where the view is just a local);
- views must not outlive the State arrays they point into (they never leave the run loop).

Both decorators are plain functions when NUMBA_DISABLE_JIT=1 (the pure-Python reference engine).

Importing this module (every block does) also installs engine/optimise_once.py: LLVM's full module
optimisation runs once per call tree, on the module that runs it, not again for every caller.
"""
from numba import njit, types

from . import optimise_once

optimise_once.install()

_compiled = njit(cache=True, _nrt=False)


def compiled(fn):
    """@compiled: a compiled engine function (see the module docstring)."""
    dispatcher = _compiled(fn)
    if hasattr(dispatcher, "get_call_template"):   # not under NUMBA_DISABLE_JIT
        _one_version_per_type(dispatcher)
    return dispatcher


def _one_version_per_type(dispatcher):
    """Compile one version per argument *type*, not per constant value.

    Numba types a constant argument (`push(st, t, EV_CH_TX, c, 0)`, `hbm_access(..., True)`) as a
    literal and compiles a separate version of the callee for every literal value it meets: `push`
    had 12 versions, `raise_error` 16, about 60 redundant compilations in all (compile time grows
    with them; run time does not improve: the constants are still known after LLVM inlines small
    callees). Calls from compiled code therefore see the argument types with the literal dropped.
    """
    resolve = dispatcher.get_call_template

    def get_call_template(args, kws):
        return resolve(tuple(types.unliteral(a) for a in args),
                       {k: types.unliteral(v) for k, v in kws.items()})
    dispatcher.get_call_template = get_call_template


inline = njit(cache=True, _nrt=False, inline="always")
"""@inline: copied into its caller at the Numba IR level (``inline="always"``).

For what a compiled call cannot do or would waste: a helper that returns an array view (the SM's
`tb_bytes`), the trace hooks (one flag test each, so tracing off costs nothing, not even a call), and
the run loop's per-packet handlers (`channel_transmit`, `switch_receive` and its crossbar step
`_cross`, `hub_packetize`, `hub_receive`, `rpm_packetize`: most of the events), which run in the
loop's own frame. Everything else is `compiled`, the SM's `sm_issue` and its 550-line instruction
interpreter `execute` included: Numba copies an inlined function's IR into every call site and
types it again there, and the nesting multiplies it (the run loop inlined `sm_issue`, which
inlined the interpreter, which inlined the SM's byte-view helper 12 times); that was most of Numba's IR inlining pass,
once the largest single stage of a cold compile (tools/profile_compile.py). Inlining the small
per-packet handlers costs little compile time (README, Performance: the cold start is the same
with them inlined or compiled). LLVM's own inliner, which works on the optimised module Numba
links every callee into, still inlines small compiled callees where that pays; a handler call
that stays a call costs one pointer argument (State is one pointer, engine/stateref.py). The run
loop calls `sm_issue` through its own compiled entry point by address (dispatch/indirect.py), so
the SM's call tree is neither linked into the run loop's module nor compiled after it."""
