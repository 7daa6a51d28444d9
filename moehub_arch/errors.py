"""The errors a user can cause: bad input (a config, kernel, ISA file, routing trace, sweep file,
checkpoint, output directory) or a run that cannot complete (a runtime error in a kernel, a stuck
run, a violated end-of-run invariant).

Each is an exception whose message (`str(e)`) is one paragraph naming the file and the key or
line, and whose `exit_code` is the command line's exit status (2 bad input, an output that cannot
be written (outputs.OutputError) or a kernel error, 3 stuck or livelocked, 4 invariant). The command line prints `moehub-sim: error: <message>` and exits with that
status; the Python API (`moehub_arch.api`) and sweep workers raise or report the same exceptions
unchanged, so a script sees exactly what a user of the command would. One list, here, for all.
"""


def user_errors():
    """The exception classes that are user errors (a tuple for `except`). Imported lazily so that
    importing this module loads nothing (the CLI's start-up stays fast)."""
    from .analysis import AnalysisError
    from .builder import BuildError
    from .checkpoint import CheckpointError
    from .config import ConfigError
    from .inputs import InputFileError
    from .isa import AsmError, IsaError
    from .observer import SimulationError
    from .sweep.spec import SweepError
    from .workloads.layer import LayerError
    return (ConfigError, AsmError, IsaError, BuildError, SimulationError, LayerError,
            AnalysisError, SweepError, CheckpointError, InputFileError, FileNotFoundError)


def exit_code(error):
    """The command line's exit status for a user error."""
    return getattr(error, "exit_code", 2)
