"""End-of-run invariants: conservation laws every completed run must satisfy (DESIGN rule 6).

Checked after every run that completed (on by default; `run.check_invariants: false` or
`--no-check` skips them; runs stopped by a limit are incomplete and are not checked):

- links: per link and direction, packets, wire bytes and payload bytes transmitted equal those
  received; every credit returned; transmit queues and switch input buffers empty;
- packets: the packet pool is full again (every packet delivered and freed), and the hubs
  received every packet and payload byte they (and their MoE-Hub RPMs) emitted;
- thread blocks and launches: every TB exited with nothing outstanding, every launch finished;
- hub queues: request table, request and response FIFOs empty;
- MoE-Hub: every stream sent and fully received, row rings empty, no packet waiting in the AAU,
  every row accepted landed with a completion record, every landed row claimed and every
  claimed tile released (records back to zero);
- MoE layers (`scheme`): token accounting, every token-expert pair sent, received, computed and
  combined exactly once (contributed by the layer, workloads/layer.py).

Each block declares its own checks in its module (components/*.py ``BLOCK``: ``checks``); this
module holds the container they report into and runs them (composition.run_checks).

A violation is an `InvariantError` (exit status 4) listing every failed check with its numbers;
the stats of the run are written first. Everything is read from the final State with NumPy.
"""
import numpy as np

from .composition import run_checks

MAX_SHOWN = 6   # offending entities listed per check


class InvariantViolations(list):
    """Failed checks, each one line with the numbers."""

    def check(self, ok_mask, what, describe):
        """Record a violation for each False entry of `ok_mask` (index -> describe(i))."""
        bad = np.nonzero(~np.asarray(ok_mask, dtype=bool))[0]
        if len(bad):
            shown = "; ".join(describe(int(i)) for i in bad[:MAX_SHOWN])
            more = f"; and {len(bad) - MAX_SHOWN} more" if len(bad) > MAX_SHOWN else ""
            self.append(f"{what} ({len(bad)}): {shown}{more}")

    def empty(self, counts, what, name, unit=""):
        """Record a violation for each nonzero entry of `counts` (index -> name(i))."""
        self.check(counts == 0, what, lambda i: f"{name(i)} holds {int(counts[i])}{unit}")

    def equal(self, what, got, want):
        if int(got) != int(want):
            self.append(f"{what}: {int(got)}, expected {int(want)}")


def run_invariants(sim):
    """Every failed invariant of a completed run (empty when all hold)."""
    out = InvariantViolations()
    run_checks(sim, out)   # every block's checks (components/*.py BLOCK checks)
    if sim.layer is not None:
        out.extend(sim.layer.invariants(sim))
    return out
