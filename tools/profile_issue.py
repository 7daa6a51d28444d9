#!/usr/bin/env python3
"""Where the SM issue events go: instructions issued by kernel, functional unit and source line.

    python tools/profile_issue.py configs/experiments/layer/deepseek_v3_4096_moehub_gh200_nvl32.yaml \
        --set system.num_gpus=64 --set workload.layer.tokens_per_gpu=8

An SM issue event (`system.engine.events.sm_issue`) is one issue cycle of one SM; with
issue_width 1 it issues at most one instruction, so the events are the instructions issued plus
the events that issued none (a wake-up with nothing ready, or a retry: `exit` waiting for its
puts, a store stalled on a full hub). The run loop counts the issues of every instruction
(State.code_issued, one increment per issue, simInsts in all: not a stat, so it stays out of the golden
fingerprints); this tool runs a config once in-process and prints them by kernel (with the
functional unit and the share that touches only registers - ALU, branch, nop), then the
instructions issued most often with their source lines. "register-only" is the upper bound of
what issuing a straight-line run of such instructions in one event could remove: each of them
could ride in the event of the instruction before it. --json writes the same figures.
"""
import argparse
import json
import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INJECTED_PACKETS = re.compile(r"system\.gpu\d+\.nvlink\d+\.tx_packets")


def issue_profile(sim, stats, top=20):
    """{totals, kernels: {name: {...}}, top: [...]} of a finished Simulation and its stats
    ({name: value})."""
    import numpy as np
    from moehub_arch.isa.encoding import SEM, SEM_ALU, SEM_BRANCH, SEM_NOP, UNIT, UNIT_NAMES
    issued = np.asarray(sim.state.code_issued)
    code = np.asarray(sim.state.code)
    register_only = np.isin(code[:, SEM], (SEM_ALU, SEM_BRANCH, SEM_NOP))
    events = int(stats["system.engine.events.sm_issue"])
    packets = int(sum(v for k, v in stats.items() if INJECTED_PACKETS.fullmatch(k)))
    total = int(issued.sum())
    kernels = {}
    for k in sim.program.kernels.values():
        span = slice(k.entry_pc, k.entry_pc + k.n_instructions)
        n = int(issued[span].sum())
        if n == 0:
            continue
        units = np.bincount(code[span, UNIT], weights=issued[span], minlength=len(UNIT_NAMES))
        kernels[k.name] = {
            "issued": n, "share": round(n / total, 4),
            "register_only": int(issued[span][register_only[span]].sum()),
            "by_unit": {UNIT_NAMES[u]: int(units[u]) for u in np.argsort(-units) if units[u] > 0},
        }
    kernels = dict(sorted(kernels.items(), key=lambda kv: -kv[1]["issued"]))
    rows = []
    for pc in np.argsort(-issued, kind="stable")[:top]:
        if issued[pc] == 0:
            break
        kernel = sim.program.kernel_at(int(pc))
        file, line = sim.program.source_line(int(pc))
        rows.append({"pc": int(pc), "kernel": kernel.name if kernel else "?",
                     "source": f"{Path(file).name}:{line}", "mnemonic": sim.program.mnemonics[pc],
                     "issued": int(issued[pc]), "share": round(int(issued[pc]) / total, 4)})
    return {
        # with the sm_fold shortcut (run.shortcuts) an issue event may issue several cycles'
        # instructions, so only without it do events minus instructions count the events that
        # issued none
        "totals": {"sm_issue_events": events, "instructions": total,
                   "events_without_issue": (None if "sm_fold" in sim.cfg.run.shortcuts
                                            else events - total),
                   "instructions_per_event": round(total / events, 3) if events else None,
                   "register_only": int(issued[register_only].sum()),
                   "packets": packets,
                   "sm_issue_per_packet": round(events / packets, 3) if packets else None,
                   "events": int(stats["simEvents"])},
        "kernels": kernels, "top": rows}


def _print(prof):
    t = prof["totals"]
    print(f"{t['sm_issue_events']:,} SM issue events of {t['events']:,} "
          f"({t['sm_issue_per_packet']} per injected packet, {t['packets']:,} packets): "
          f"{t['instructions']:,} instructions issued ({t['instructions_per_event']} per event), "
          + ("" if t["events_without_issue"] is None else
             f"{t['events_without_issue']:,} events that issued none (wake-ups, retries); ")
          + f"register-only (ALU, branch, nop) {t['register_only']:,} "
          f"({100 * t['register_only'] / max(1, t['instructions']):.1f}%)")
    print("\nkernel                          issued   share  register-only  by unit")
    for name, k in prof["kernels"].items():
        units = ", ".join(f"{u} {n:,}" for u, n in k["by_unit"].items())
        print(f"  {name:<28} {k['issued']:>10,} {100 * k['share']:6.1f}%  {k['register_only']:>12,}  "
              f"{units}")
    print("\npc      kernel                       source                    instruction      issued   share")
    for r in prof["top"]:
        print(f"  {r['pc']:<5} {r['kernel']:<28} {r['source']:<25} {r['mnemonic']:<14} "
              f"{r['issued']:>9,} {100 * r['share']:6.1f}%")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", type=Path, help="config to build and run once")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--engine", choices=("numba", "python"), default="numba")
    ap.add_argument("--top", type=int, default=20, help="instructions to list (default 20)")
    ap.add_argument("--json", type=Path, help="write the figures as JSON here")
    args = ap.parse_args(argv)
    if args.engine == "python":
        os.environ["NUMBA_DISABLE_JIT"] = "1"      # before moehub_arch is imported
    sys.path.insert(0, str(REPO))
    from moehub_arch.config import load_config
    from moehub_arch.errors import exit_code, user_errors
    from moehub_arch.simulation import Simulation
    try:
        sim = Simulation(load_config(args.config, args.overrides))
        stats = {s.name: s.value for s in sim.run()}
    except user_errors() as e:      # bad config or a failing run: one paragraph, no traceback
        print(f"profile_issue: error: {e}", file=sys.stderr)
        sys.exit(exit_code(e))
    prof = issue_profile(sim, stats, args.top)
    _print(prof)
    if args.json:
        args.json.write_text(json.dumps({"config": str(args.config), "overrides": args.overrides,
                                         **prof}, indent=1) + "\n")


if __name__ == "__main__":
    main()
