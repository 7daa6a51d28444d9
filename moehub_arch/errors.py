"""The errors a user can cause: bad input (a config, kernel, ISA file, routing trace, sweep file,
checkpoint, output directory) or a run that cannot complete (a runtime error in a kernel, a stuck
run, a violated end-of-run invariant).

Each is an exception whose message (`str(e)`) is one paragraph naming the file and the key or
line, and whose `exit_code` is the command line's exit status (2 bad input, an output that cannot
be written (outputs.OutputError) or a kernel error, 3 stuck or livelocked, 4 invariant). The command line prints `moehub-sim: error: <message>` and exits with that
status; the Python API (`moehub_arch.api`) and sweep workers raise or report the same exceptions
unchanged, so a script sees exactly what a user of the command would. One list, here, for all.

Every such class derives from `UserError`, defined here, at the floor below everything that raises
one: this module imports nothing, so catching a user error never imports the module that raises
it (a bad config is reported without importing the engine or Numba).
"""


class UserError(Exception):
    """The base of every user error: ConfigError, AsmError, IsaError, BuildError, SimulationError
    (and its InvariantError, OutputError), LayerError, AnalysisError, SweepError, CheckpointError,
    InputFileError. Exit status 2 unless the class or instance says otherwise."""

    exit_code = 2


class BuildError(UserError):
    """A config that is well-formed but cannot be built (message names the key); raised by
    builder.py, defined here so that a caller can catch it without importing the builder."""


class CheckpointError(UserError):
    """A checkpoint that cannot be written or restored (exit status 2); raised by checkpoint.py,
    defined here for the same reason as BuildError."""


def user_errors():
    """The exception classes that are user errors (a tuple for `except`): every UserError, and a
    file a user named that does not exist."""
    return (UserError, FileNotFoundError)


def exit_code(error):
    """The command line's exit status for a user error."""
    return getattr(error, "exit_code", 2)
