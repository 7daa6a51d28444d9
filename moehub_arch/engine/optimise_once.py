"""LLVM's full module optimisation runs once per call tree: in the module that runs it.

Numba compiles every function into its own LLVM module. When function A calls function B, B is
compiled first (its own module, optimised and emitted as machine code so B can be called from
Python), then B's optimised module is linked into A's, and LLVM's full module pipeline (-O3: the
inliner, then every function's simplification again) runs over A with all its callees - and over
A's caller with A and B, and so on to the top. A handler d calls deep is optimised d + 1 times,
and the whole module each time (README, Performance: "llvm module optimisation (with callees)" was
the largest stage of a cold compile, `tools/profile_compile.py`). Yet a call between compiled
functions always runs the callee's copy linked into the caller's module: the machine code of B's
own module runs only when Python calls B.

So an engine function compiled *for a caller* (while another engine function is being compiled)
gets only Numba's cheap module pass (the -O0 pipeline with the always-inliner that Numba runs
first anyway; each function's own -O3 function passes have run on its IR already), and the full
pipeline runs once, on the outermost module: the run loop, an entry point of engine/indirect.py
(`entry_compile`), or a function first compiled because Python called it. That module still gets
every callee's code and optimises it whole, inliner included, so the code that runs is optimised
as before (the run loop's events per second are unchanged within run-to-run spread; README,
Performance), and LLVM never changes what the code computes (no fast-math flags: results are
bit-identical, tests/test_golden_stats.py). What is left unoptimised is B's own module, which
only a Python call of B would run (the set-up's start hooks and State packer are compiled from
Python, so they are outermost and fully optimised).

Only the engine's functions (modules under `moehub_arch`) are treated so; any other Numba code in
the process (a user's own functions in the same notebook) compiles as Numba does. This relies on
three internals of Numba's CPU code generator (`CPUCodeLibrary._optimize_final_module`,
`CPUCodegen._module_pass_manager`, the "numba:compile" event); with a Numba that lacks them,
`install` does nothing and compiles are as slow as before, with the same code.
"""
from contextlib import contextmanager

# modules whose compiled functions follow the policy (tests add their own)
ENGINE_MODULES = ("moehub_arch.",)

# the compiles in progress in this process, innermost last: whether each is an engine function's.
# Numba compiles under one global lock, so one stack per process is exact.
_compiling = []

# how each engine library's module was optimised, counted (tests read it): "full" or "linked"
optimised = {"full": 0, "linked": 0}


def _is_engine(module_name):
    return module_name is not None and module_name.startswith(ENGINE_MODULES)


@contextmanager
def entry_compile():
    """Around the compile of an entry point that is not a dispatcher (a `cfunc`, engine/indirect.py):
    the functions it compiles in turn are compiled for it, and its own module is the outermost."""
    _compiling.append(True)
    try:
        yield
    finally:
        _compiling.pop()


def _linked_only():
    """Whether the module being optimised now is an engine function's compiled for a caller: the
    innermost compile in progress is an engine function's and another compile encloses it."""
    return len(_compiling) >= 2 and _compiling[-1]


def _keep_callees_local(module):
    """Give the callees linked into an outermost module internal linkage, so that its calls run
    its own, fully optimised copies.

    Numba links a callee's module in with `linkonce_odr` linkage (a weak symbol in the object
    code), and LLVM's run-time linker resolves a weak symbol to the first definition loaded in the
    process: a call the inliner left in the run loop then jumped to the copy in whichever library
    was loaded first - often a module compiled for a caller, which had only the cheap pass above,
    so its own small helpers (the timers' wheel, `bytes_ticks`, a scalar view) stayed calls.
    Internal linkage keeps every call inside the module (and lets LLVM drop the copies nothing
    calls). Only definitions are changed; the library's own entry points (external) stay."""
    import llvmlite.binding as ll
    for fn in module.functions:
        if not fn.is_declaration and fn.linkage == ll.Linkage.linkonce_odr:
            fn.linkage = ll.Linkage.internal


def install():
    """Patch Numba's CPU code generator (once per process); without the internals, do nothing."""
    try:
        from numba.core import codegen, event
        library = codegen.CPUCodeLibrary
        full_pipeline = library._optimize_final_module
        codegen.CPUCodegen._module_pass_manager   # noqa: B018 (present, or AttributeError)
    except (ImportError, AttributeError):
        return
    if getattr(full_pipeline, "_moehub_once", False):
        return

    class CompileNesting(event.Listener):
        def on_start(self, ev):
            dispatcher = ev.data.get("dispatcher")
            py_func = getattr(dispatcher, "py_func", None)
            _compiling.append(_is_engine(getattr(py_func, "__module__", None)))

        def on_end(self, ev):
            _compiling.pop()

    def optimise_final_module(self):
        if not _linked_only():
            if _compiling and _compiling[-1]:
                optimised["full"] += 1
                _keep_callees_local(self._final_module)
            return full_pipeline(self)
        # Numba's own first step of the full pipeline, alone: the cheap pass (the -O0 pipeline
        # with the always-inliner, plus the loop rotation / instcombine / jump threading Numba adds)
        gen = self._codegen
        try:
            manager, builder = gen._module_pass_manager(loop_vectorize=gen._loopvect,
                                                        slp_vectorize=False, opt=gen._opt_level,
                                                        cost="cheap")
        except AttributeError:   # a Numba whose code generator differs: as Numba does
            return full_pipeline(self)
        manager.run(self._final_module, builder)
        optimised["linked"] += 1

    optimise_final_module._moehub_once = True
    event.register("numba:compile", CompileNesting())
    library._optimize_final_module = optimise_final_module
