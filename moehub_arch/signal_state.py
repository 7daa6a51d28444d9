"""The state a Ctrl-C or SIGTERM leaves for a running command (interrupts.py installs the
handlers): the flag the handler sets while the compiled loop runs, the exception that stops the
command at once, and `end_soft`, which the run calls as its loop ends. Kept apart from
interrupts.py (which imports the run's observers and checkpoints) so that the run itself
(simulation.py) can use it without an import circle.
"""
import signal


def signal_name(signum):
    return signal.Signals(signum).name


class Interrupted(BaseException):
    """A signal that stops the command at once (no stats): before the run loop, or a second one."""

    def __init__(self, signum, message=None):
        super().__init__(message or f"interrupted by {signal_name(signum)}")
        self.signum = signum


class _Flag:
    signum = None       # the first signal seen during the run loop
    soft = False        # inside the run loop: a signal sets the flag instead of raising


FLAG = _Flag()


def end_soft():
    """The run loop ended: a signal from here on (stats, report, output) stops at once, and one
    that came during the loop's last batch, too late for InterruptStop to act on, stops now
    (issue 52: it was swallowed, and the command went on to exit 0)."""
    if FLAG.soft:
        FLAG.soft = False
        if FLAG.signum is not None:
            raise Interrupted(FLAG.signum, f"interrupted by {signal_name(FLAG.signum)} as the "
                                           f"run loop ended")
