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
pipeline runs once, on the outermost module: the run loop, an entry point of dispatch/indirect.py
(`entry_compile`), or a function first compiled because Python called it. That module still gets
every callee's code and optimises it whole, inliner included, so the code that runs is optimised
as before (the run loop's events per second are unchanged within run-to-run spread; README,
Performance), and LLVM never changes what the code computes (no fast-math flags: results are
bit-identical, tests/test_golden_stats.py). What is left unoptimised is B's own module, which
only a Python call of B would run (the set-up's start hooks and State packer are compiled from
Python, so they are outermost and fully optimised).

The same module's machine code is emitted by LLVM's -O0 code generator (`_emit_quickly`), not by
the JIT engine's -O3 one: only a Python call of B runs it, and the optimising code generator on
every linked-only module was 23% of a cold compile (README, Performance).

Only the engine's functions (modules under `moehub_arch`) are treated so; any other Numba code in
the process (a user's own functions in the same notebook) compiles as Numba does. This relies on
internals of Numba's CPU code generator (`CPUCodeLibrary._optimize_final_module` and
`_finalize_final_module`, its object-cache hooks, `CPUCodegen._module_pass_manager` and
`_customize_tm_options`, the "numba:compile" event); with a Numba that lacks them, `install` does
nothing (or emits as Numba does) and compiles are as slow as before, with the same code.
"""
from contextlib import contextmanager

# modules whose compiled functions follow the policy (tests add their own)
ENGINE_MODULES = ("moehub_arch.",)

# the compiles in progress in this process, innermost last: whether each is an engine function's.
# Numba compiles under one global lock, so one stack per process is exact.
_compiling = []

# how each engine library's module was optimised, counted (tests read it): "full" or "linked"
optimised = {"full": 0, "linked": 0}

# linked-only modules whose machine code was emitted at -O0 (tests read it)
emitted = {"quick": 0}

_installed = False   # install() has patched Numba in this process
_quick_tm = None     # the -O0 target machine (_quick_target_machine), made on first use


def _is_engine(module_name):
    return module_name is not None and module_name.startswith(ENGINE_MODULES)


@contextmanager
def entry_compile():
    """Around the compile of an entry point that is not a dispatcher (a `cfunc`, dispatch/indirect.py):
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


def _quick_target_machine(gen):
    """A target machine like the JIT engine's (same CPU, features, relocation and code model) whose
    code generator runs at -O0: fast instruction selection and register allocation."""
    global _quick_tm
    if _quick_tm is None:
        import llvmlite.binding as ll
        options = dict(opt=0)
        gen._customize_tm_options(options)
        _quick_tm = ll.Target.from_triple(ll.get_process_triple()).create_target_machine(**options)
    return _quick_tm


def _emit_quickly(library):
    """Emit a linked-only module's machine code with the -O0 code generator and hand it to the JIT
    engine as a ready object (Numba's object-cache hook), instead of letting the engine emit it at
    -O3 (the engine's own target machine, the same for every module).

    That machine code runs only when Python calls the function itself (a call from compiled code
    runs the caller's copy), and the module has had only the cheap pass anyway. Machine-code
    emission was 23% of a cold compile's CPU time, 16.5 of its 23.2 s the linked-only modules'
    (tools/profile_compile.py on the all-to-all, 2026-12-02); at -O0 they take 4.4 s. The object
    is emitted from a copy, so the module a caller links in is the IR as optimised, untouched by
    the code generator's own IR passes. Only for a library that keeps its object code (the
    on-disk cache: every engine function); otherwise the engine emits it as usual."""
    if not getattr(library, "_object_caching_enabled", False):
        return
    try:
        tm = _quick_target_machine(library._codegen)
    except AttributeError:   # a Numba whose code generator differs: as Numba does
        return
    quick = tm.emit_object(library._final_module.clone())
    library._compiled_object = library._moehub_quick_object = quick
    emitted["quick"] += 1


def install():
    """Patch Numba's CPU code generator (once per process); without the internals, do nothing."""
    try:
        from numba.core import codegen, event
        library = codegen.CPUCodeLibrary
        full_pipeline = library._optimize_final_module
        codegen.CPUCodegen._module_pass_manager   # noqa: B018 (present, or AttributeError)
    except (ImportError, AttributeError):
        return
    global _installed
    if _installed:
        # once per process, by a flag of this module: a tool that wraps the patched method
        # (tools/profile_compile.py times it) must not make a second install patch it again,
        # which would register a second compile listener (every compile counted twice deep,
        # so even a function Python calls looked linked-only) and nest the patch in itself
        return
    _installed = True

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
        _emit_quickly(self)

    finalize_final_module = library._finalize_final_module

    def finalize_quick_object(self):
        finalize_final_module(self)
        quick = self.__dict__.pop("_moehub_quick_object", None)
        if quick is not None:
            # the engine's object-cache hook took the object (and forgot it): the library keeps
            # it, as it keeps an object the engine emitted, for the on-disk cache
            self._compiled_object = quick
            self._compiled = True

    optimise_final_module._moehub_once = True
    event.register("numba:compile", CompileNesting())
    library._optimize_final_module = optimise_final_module
    library._finalize_final_module = finalize_quick_object
