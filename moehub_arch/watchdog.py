"""Stuck runs explain themselves: the diagnosis of a deadlock and the no-progress watchdog.

A run is stuck in one of two ways:

- the event queue empties while kernel launches are unfinished (every thread block sleeps on
  something nobody will provide): `Simulation` notices at the end of the run;
- thread blocks keep issuing instructions, but none that touches memory, the hub or the links,
  and never exit (a livelock: a loop spinning on registers): `LivelockWatchdog`, which reads the
  `progress` tick every issue of such an instruction stamps on the TB (components/
  sm_interpreter.py IDLE_SEMANTICS: one shift, test and store per instruction) at pauses every
  `run.livelock_interval`, and names each spinning TB's kernel, line and loop;
- events keep coming (or lie far in the future) but no instruction issues: `NoProgressWatchdog`,
  a RunObserver that pauses the compiled loop every `run.watchdog_interval` of simulated time and
  compares the instruction count (no per-event cost; the default interval, 1 ms, is far longer
  than any legitimate gap between two instructions of a running kernel, while whole MoE layers
  simulate in well under that).

All three stop with exit status 3 and `diagnose(sim)`: which thread blocks wait on what (flag word
with its buffer, word index, current and awaited value; MoE-Hub claims; hub room), which
buffers and queues are full (hub request tables and FIFOs, link channels out of credits, switch
inputs blocked, MoE-Hub row rings, expert windows, completion-record tables, AAU staging), which
launches are unfinished. Everything is read from the State arrays after the loop stopped.
"""
import hashlib

import numpy as np

from .components.sizing import experts_of_window
from .config.units import fmt_time
from .composition import REQUESTS, EVENT_NAMES, findings, likely_causes, timer_event
from .engine.events import Q_KIND, Q_TICK, TIMER_OFF, TM_TICK
from .engine.state import (LN_DONE, LN_RUNNING, TB_EMPTY, TB_READY, TB_RETIRED, TB_WAIT_CLAIM,
                           TB_WAIT_FENCE, TB_WAIT_FLAG, TB_WAIT_HUB, TB_WAIT_REMOTE)
from .observer import RunObserver, SimulationError
from .isa.encoding import (CMP_NAMES, IMM, OP0, REG_TB, SEM, SEM_BRANCH, SEM_FENCE, SEM_SEND_EXPERT, SEM_SLEEP, SEM_ST_ROWSP, SEM_SEND_EXPERTS, SEM_ST_ROWSP_EXPERTS,
                           SUBOP, SUBOP_NAMES)

CMP_SYMBOLS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
MAX_TB_LINES = 16     # thread blocks listed one by one; the rest are counted per kernel and state
MAX_LINES = 24        # lines per section of blocked resources


# ---------------------------------------------------------------------------------- naming
def describe_address(sim, addr):
    """'buffer 'flag' word 1' for an HBM address (the symmetric buffer holding it)."""
    for b in sim.buffers.values():
        if b.addr <= addr < b.addr + b.nbytes:
            off = addr - b.addr
            word = f"word {off // 8}" if off % 8 == 0 else f"byte {off}"
            return f"buffer '{b.name}' {word}"
    return "no buffer (unallocated address)"


def _word(sim, g, addr):
    mem = sim.state.hbm_mem
    if 0 <= addr and addr + 8 <= mem.shape[1]:
        return int(mem[g, addr:addr + 8].view(np.int64)[0])
    return None


def _operand(st, slot, row, i):
    """Value of source operand i of an encoded instruction, as the TB would read it now."""
    if (int(row[IMM]) >> i) & 1:
        return int(row[OP0 + i])
    return int(st.regs[slot, int(row[OP0 + i])])


# ------------------------------------------------------------------------- thread blocks
def _instruction(sim, pc):
    row = sim.state.code[pc]
    sem = int(row[SEM])
    name = sim.isa.semantic_name(sem)
    subs = SUBOP_NAMES.get(sem)
    if subs:
        name += "." + subs[int(row[SUBOP])]
    return name


def _tb_wait(sim, slot, now):
    """What thread block `slot` waits on, in words."""
    st = sim.state
    p = st.p[0]
    tb = st.tb[slot]
    g = slot // (int(p.slots_per_sm) * int(p.sms_per_gpu))
    s = int(tb.state)
    if s == TB_READY:
        if int(tb.ready) > now:
            return f"ready, next instruction at tick {int(tb.ready)} (sleeping or waiting for memory)"
        return "ready to issue"
    if s == TB_WAIT_FLAG:
        addr = int(tb.wait_addr)
        cur = _word(sim, g, addr)
        cmp = CMP_SYMBOLS.get(CMP_NAMES[int(tb.wait_cmp)], "?")
        return (f"waiting on a flag: {describe_address(sim, addr)} (address 0x{addr:x}) on GPU {g} "
                f"holds {cur}, waiting for {cmp} {int(tb.wait_value)}")
    if s in (TB_WAIT_FENCE, TB_WAIT_REMOTE):
        return f"{'waiting in fence' if s == TB_WAIT_FENCE else 'waiting for an atomic result'}: " \
               + _outstanding(sim, slot)
    if s == TB_WAIT_HUB:
        row = st.code[int(tb.pc)]
        if int(row[SEM]) == SEM_SEND_EXPERT:
            e = _operand(st, slot, row, 0)
            if 0 <= e < int(p.num_experts):
                d = int(st.moe_place[e, 0])
                sr = st.stream[g * int(p.num_gpus) + d]
                return (f"send_to_expert {e} blocked: the RPM row ring toward GPU {d} is full "
                        f"({int(sr.head - sr.tail)} of {int(p.rpm_ring)} rows accepted but not yet "
                        f"landed; system.gpu.hub.moe.rpm.row_queue_depth)")
        if int(row[SEM]) == SEM_ST_ROWSP:
            rid = _operand(st, slot, row, 0)
            if 0 <= rid < st.rowsp_table.shape[1] and int(st.rowsp_table[g, rid, 0]) >= 0:
                d = int(st.moe_place[int(st.rowsp_table[g, rid, 0]), 0])
                sr = st.stream[g * int(p.num_gpus) + d]
                return (f"st.rowsp to allocation {rid} blocked: the RPM row ring toward GPU {d} is "
                        f"full ({int(sr.head - sr.tail)} of {int(p.rpm_ring)} stores accepted but "
                        f"not yet landed; system.gpu.hub.moe.rpm.row_queue_depth)")
        if int(row[SEM]) in (SEM_SEND_EXPERTS, SEM_ST_ROWSP_EXPERTS):
            mask = _operand(st, slot, row, 1)
            n = bin(mask & 255).count("1")
            v = int(st.regs[slot, int(row[OP0]) + (mask & -mask).bit_length() - 1]) if mask & 255 else -1
            e = v
            if int(row[SEM]) == SEM_ST_ROWSP_EXPERTS:
                e = int(st.rowsp_table[g, v, 0]) if 0 <= v < st.rowsp_table.shape[1] else -1
            if 0 <= e < int(p.num_experts):
                d = int(st.moe_place[e, 0])
                sr = st.stream[g * int(p.num_gpus) + d]
                return (f"multi-expert store of {n} experts blocked: the RPM row ring toward GPU "
                        f"{d} has {int(p.rpm_ring) - int(sr.head - sr.tail)} free entries of "
                        f"{int(p.rpm_ring)}, the store needs one per expert "
                        f"(system.gpu.hub.moe.rpm.row_queue_depth)")
        gp = st.gpu[g]
        R, depth = int(p.req_table), st.reqq.shape[1]
        return (f"'{_instruction(sim, int(tb.pc))}' waiting for room in the hub: request table "
                f"{int(gp.req_table_used)} of {R} in use, request FIFO {int(gp.reqq_count)} of "
                f"{depth}" + (f", {int(gp.sq_count)} RDMA work request(s) waiting in the queue "
                              f"pairs' send queues (a QP holds at most "
                              f"system.nic.send_queue_depth = {int(p.nic_sq_depth)} until their "
                              f"completions)" if p.nic_send_queue else "")
                + (f", every posted-store tag held ({int(gp.posted_stores)} multimem "
                   f"stores; system.gpu.hub.posted_store_tags)"
                   if p.posted_tags and int(gp.posted_stores) == int(p.posted_tags) else ""))
    if s == TB_WAIT_CLAIM:
        return "waiting in claim_buffer: " + _window_state(sim, int(tb.wait_addr))
    return f"state {s}"


def _outstanding(sim, slot):
    """The asynchronous operations a TB waits for: hub requests and MoE-Hub rows in flight."""
    st = sim.state
    p = st.p[0]
    G, R = int(p.num_gpus), int(p.reqs_per_gpu)
    parts = [f"{int(st.tb[slot].outstanding)} operation(s) outstanding"]
    g = slot // (int(p.slots_per_sm) * int(p.sms_per_gpu))
    free = set(int(r) for r in st.free_reqs[g, :int(st.gpu[g].free_top)])
    reqs = [r for r in range(g * R, (g + 1) * R) if r not in free and int(st.req[r].slot) == slot]
    for r in reqs[:4]:
        rq = st.req[r]
        kind = REQUESTS[int(rq.kind)]
        to = "through a switch" if kind.switched else f"to GPU {int(rq.dst_gpu)}"
        parts.append(f"{kind.name} {to} "
                     f"({describe_address(sim, int(rq.dst_addr))}): {int(rq.pkts_arrived)} of "
                     f"{int(rq.pkts_total)} packets arrived")
    rows = 0
    for s in range(g * G, (g + 1) * G):
        sr = st.stream[s]
        for i in range(int(sr.tail), int(sr.head)):
            row = st.mrow[s * int(p.rpm_ring) + i % int(p.rpm_ring)]
            if int(row.slot) == slot and not row.done:
                rows += 1
    if rows:
        parts.append(f"{rows} send_to_expert row(s) not yet landed")
    return "; ".join(parts)


def _window_state(sim, w):
    st = sim.state
    p = st.p[0]
    G, T = int(p.num_gpus), int(p.tile_rows)
    g = w // int(p.local_experts)
    win = st.win[w]
    k = int(win.next_claim)
    tl = st.tile[w * int(p.tiles_per_window) + k % int(p.tiles_per_window)]
    if int(tl.index) == k:
        tile = (f"tile {k}: {int(tl.rows_landed)} of {int(tl.rows_alloc)} allocated rows landed"
                f"{', closed' if tl.closed else ', still filling'}"
                f"{', ready' if tl.ready >= 0 else ''}")
    else:
        tile = f"tile {k} has no rows yet"
    experts = ", ".join(map(str, experts_of_window(st, w)))
    return (f"expert {experts} on GPU {g}: {int(win.alloc)} rows allocated, {k} tiles claimed; "
            f"{tile}; {int(st.gpu[g].dam_sources_done)} of {G} source GPUs ended their streams "
            f"(notify_ready.eos)")


def _waiting_pc(st, slot):
    """The instruction a TB waits in: wait.*, fence and atomics have already advanced the pc;
    send_to_expert, claim_buffer, a full hub and exit re-execute theirs (pc unchanged)."""
    pc = int(st.tb[slot].pc)
    s = int(st.tb[slot].state)
    if s in (TB_WAIT_FLAG, TB_WAIT_REMOTE) or (
            s == TB_WAIT_FENCE and pc > 0 and int(st.code[pc - 1, SEM]) == SEM_FENCE):
        return pc - 1
    return pc


def _tb_lines(sim, now):
    st = sim.state
    p = st.p[0]
    T, S = int(p.slots_per_sm), int(p.sms_per_gpu)
    slots = np.nonzero((st.tb.state != TB_EMPTY) & (st.tb.state != TB_RETIRED))[0]
    lines, rest = [], {}
    for slot in slots:
        slot = int(slot)
        l = int(st.tb[slot].launch)
        kernel = sim.launches[l].kernel if l >= 0 else "?"
        sm = slot // T
        what = _tb_wait(sim, slot, now)
        if len(lines) < MAX_TB_LINES:
            file, line = sim.program.source_line(_waiting_pc(st, slot))
            lines.append(f"  kernel '{kernel}' (GPU {sm // S}, SM {sm % S}, TB "
                         f"{int(st.regs[slot, REG_TB])}) at {file}:{line}: {what}")
        else:
            key = (kernel, what.split(":")[0])
            rest[key] = rest.get(key, 0) + 1
    for (kernel, what), n in sorted(rest.items()):
        lines.append(f"  ... and {n} more thread block(s) of kernel '{kernel}': {what}")
    return len(slots), lines


# ----------------------------------------------------------------------- blocked resources
def _resource_lines(sim):
    """Every block's findings (components/*.py BLOCK findings): full buffers, blocked units."""
    out = findings(sim)
    if len(out) > MAX_LINES:
        out = out[:MAX_LINES] + [f"... and {len(out) - MAX_LINES} more"]
    return ["  " + line for line in out]


def _launch_lines(sim):
    st = sim.state
    out = []
    for l in sim.launches:
        ln = st.ln[l.index]
        if int(ln.status) == LN_DONE:
            continue
        if int(ln.status) == LN_RUNNING:
            state = (f"running, {int(ln.finished)} of {l.grid} thread blocks exited "
                     f"({int(ln.dispatched)} placed)")
        else:
            before = [m for m in sim.launches if int(st.ln[m.index].next_in_stream) == l.index]
            state = (f"not started (stream {l.stream}: waits for '{before[0].kernel}')" if before
                     else "not started")
        out.append(f"  kernel '{l.kernel}' on GPU {l.gpu}: {state}")
    if len(out) > MAX_LINES:
        out = out[:MAX_LINES] + [f"  ... and {len(out) - MAX_LINES} more"]
    return out


def _likely_causes(sim):
    """Patterns that explain most stuck runs, one line each, strongest evidence first: what the
    blocks report (components/*.py BLOCK causes: a full AAU record table with packets waiting on
    it, full windows nobody claims from), then flags nobody sets (often a consequence of the
    above: the thread block that would set the flag waits on the full table)."""
    st = sim.state
    p = st.p[0]
    per_gpu = int(p.slots_per_sm) * int(p.sms_per_gpu)
    idle = int(st.sys[0].q_size) == 0
    upstream = likely_causes(sim)
    flag_lines = []
    flags = {}
    for slot in np.nonzero(st.tb.state == TB_WAIT_FLAG)[0]:
        tb = st.tb[int(slot)]
        key = (int(slot) // per_gpu, int(tb.wait_addr), int(tb.wait_cmp), int(tb.wait_value))
        flags[key] = flags.get(key, 0) + 1
    for (g, addr, cmp, value), n in sorted(flags.items())[:MAX_TB_LINES]:
        why = ("nothing still in flight writes it: a flag nobody sets" if idle
               else "it has not changed")
        if upstream:
            why += " (likely a consequence of the above: its writer waits on the hub)"
        flag_lines.append(f"{n} thread block(s) wait for {describe_address(sim, addr)} on GPU {g} "
                          f"to become {CMP_SYMBOLS.get(CMP_NAMES[cmp], '?')} {value} (it holds "
                          f"{_word(sim, g, addr)}); {why}")
    return upstream + flag_lines


def diagnose(sim, now):
    """Who waits on what, what is full, what did not finish: the body of a stuck-run report."""
    st = sim.state
    n_tbs, tbs = _tb_lines(sim, now)
    causes = _likely_causes(sim)
    parts = (["Likely cause:"] + [f"  {c}" for c in causes]) if causes else []
    parts += [f"Thread blocks resident: {n_tbs}"] + tbs
    res = _resource_lines(sim)
    parts += ["Full buffers and blocked units:"] + (res or ["  none"])
    parts += ["Unfinished kernel launches:"] + (_launch_lines(sim) or ["  none"])
    pending, tick, kind = next_event(st)
    parts.append(f"Event queue: {pending} event(s), the next at tick {tick} ({kind})" if pending
                 else "Event queue: empty")
    return "\n".join(parts)


def next_event(st):
    """(events pending, tick of the next, its kind): the heap's one-off events plus the armed
    component timers (engine/events.py)."""
    q = int(st.sys[0].q_size)
    armed = np.nonzero(st.timer[:, TM_TICK] != TIMER_OFF)[0]
    best, kind = None, ""
    if q:
        i = int(np.argmin(st.q[:q, Q_TICK]))
        best, kind = int(st.q[i, Q_TICK]), EVENT_NAMES[int(st.q[i, Q_KIND])]
    if len(armed):
        i = int(armed[np.argmin(st.timer[armed, TM_TICK])])
        if best is None or int(st.timer[i, TM_TICK]) < best:
            best = int(st.timer[i, TM_TICK])
            kind = EVENT_NAMES[timer_event(st, i)]
    return q + len(armed), best, kind


def unfinished(sim):
    """Launches that did not finish, as "'kernel' on GPU g"."""
    st = sim.state
    return [f"'{l.kernel}' on GPU {l.gpu}" for l in sim.launches if st.ln.status[l.index] != LN_DONE]


# ------------------------------------------------------------------------ slow, not stuck
# events that do not move data: the SM's own issue wake-ups (a sleeping or polling block) and
# the periodic occupancy sampling; every other pending event is work in flight (a packet on a
# link, a crossbar traversal, a hub or RPM transmission, a launch after its host delay...)
_NOT_TRANSFERS = ("sm_issue", "occupancy_sample")


def in_flight(sim, tick, memory_waits=True):
    """What is still moving at `tick`, in words (empty: nothing): pending events that carry data
    (by kind, with the next one's tick) and, with `memory_waits`, thread blocks waiting for a
    memory operation they issued (a copy, load or store on a slow HBM: their next instruction is
    due when it ends). A run with anything in flight is slow, not stuck (issue 52)."""
    st = sim.state
    kinds = {}
    q = int(st.sys[0].q_size)
    for i in range(q):
        name = EVENT_NAMES[int(st.q[i, Q_KIND])]
        if name not in _NOT_TRANSFERS:
            n, first = kinds.get(name, (0, None))
            t = int(st.q[i, Q_TICK])
            kinds[name] = (n + 1, t if first is None else min(first, t))
    for i in np.nonzero(st.timer[:, TM_TICK] != TIMER_OFF)[0]:
        name = EVENT_NAMES[timer_event(st, int(i))]
        if name not in _NOT_TRANSFERS:
            n, first = kinds.get(name, (0, None))
            t = int(st.timer[i, TM_TICK])
            kinds[name] = (n + 1, t if first is None else min(first, t))
    out = [f"{n} {name} event(s), the next at tick {first}" for name, (n, first) in
           sorted(kinds.items())]
    if memory_waits:
        waiting = _memory_waits(sim, tick, 0)
        if waiting:
            out.append(f"{len(waiting)} thread block(s) waiting for a memory operation, the first "
                       f"done at tick {min(int(sim.state.tb[s].ready) for s in waiting)}")
    return out


def _memory_waits(sim, tick, longer_than):
    """Slots of ready thread blocks whose next instruction waits more than `longer_than` ticks
    for a memory operation they issued (not a `sleep`): the instruction before their pc."""
    st = sim.state
    tb = st.tb
    out = []
    for slot in np.nonzero((tb.state == TB_READY) & (tb.ready - tick > longer_than))[0]:
        pc = int(tb[slot].pc) - 1
        k = sim.program.kernel_at(pc) if pc >= 0 else None
        if k is not None and k is sim.program.kernel_at(pc + 1) and \
                int(st.code[pc, SEM]) != SEM_SLEEP:
            out.append(int(slot))
    return out


# ------------------------------------------------------------------------- the watchdog
class NoProgressWatchdog(RunObserver):
    """RunObserver: stop with exit status 3 when no instruction issues for `interval` ticks
    while thread blocks are resident.

    It asks the loop to pause `interval` after the last tick at which it saw the instruction count
    change; if the count is still the same there, the run is stuck. Time with no resident thread
    block (waiting for a kernel launch after a host delay) does not count."""

    def __init__(self, interval):
        self.interval = int(interval)
        self.last_insts = -1
        self.last_tick = 0

    def on_start(self, sim):
        self.last_insts = int(sim.state.sm.insts.sum())
        self.last_tick = int(sim.state.sys[0].q_now)

    def next_stop(self, sim):
        return self.last_tick + self.interval

    def on_pause(self, sim, tick, events, wall_seconds):
        st = sim.state
        insts = int(st.sm.insts.sum())
        if insts != self.last_insts or not (st.tb.state != TB_EMPTY).any():
            # something issued at or before `tick` (counting from `tick` can only fire late), or
            # no thread block is resident: the GPUs wait for a launch (e.g. a long host delay)
            self.last_insts, self.last_tick = insts, tick
        elif tick - self.last_tick >= self.interval and in_flight(sim, tick):
            # slow, not stuck: a packet still on a slow link, a copy on a slow HBM (issue 52);
            # watch on from here (a wait that nothing in flight can end fires one interval later)
            self.last_tick = tick
        elif tick - self.last_tick >= self.interval:
            raise SimulationError(
                f"watchdog: no instruction issued for {fmt_time(tick - self.last_tick)} of "
                f"simulated time (ticks {self.last_tick} to {tick}; run.watchdog_interval = "
                f"{fmt_time(self.interval)}), {len(unfinished(sim))} kernel launch(es) unfinished. "
                f"The run is stuck:\n" + diagnose(sim, tick), exit_code=3)


# ------------------------------------------------------------------------ livelocks
def enclosing_loop(program, pc):
    """(first pc, branch pc) of the innermost loop around `pc`: the shortest backward branch of
    the same kernel at or after `pc` whose target is at or before it; None if there is none."""
    k = program.kernel_at(pc)
    if k is None:
        return None
    best = None
    code = program.code
    for b in range(pc, k.entry_pc + k.n_instructions):
        if int(code[b, SEM]) == SEM_BRANCH:
            target = int(code[b, OP0 + 2])
            if target <= pc and (best is None or b - target < best[1] - best[0]):
                best = (target, b)
    return best


def livelock_report(sim, slots, now, interval):
    """One line per spinning thread block (kernel, GPU/SM/TB, line, loop), the rest counted."""
    st = sim.state
    p = st.p[0]
    T, S = int(p.slots_per_sm), int(p.sms_per_gpu)
    lines, rest = [], {}
    for slot in slots:
        slot = int(slot)
        l = int(st.tb[slot].launch)
        kernel = sim.launches[l].kernel if l >= 0 else "?"
        pc = int(st.tb[slot].pc)
        file, line = sim.program.source_line(pc)
        loop = enclosing_loop(sim.program, pc)
        if loop is None:
            where = f"{file}:{line} (no backward branch around it)"
        else:
            first = sim.program.source_line(loop[0])[1]
            last = sim.program.source_line(loop[1])[1]
            where = (f"{file}:{line}, in the loop of lines {first}-{last} (branch at line {last} "
                     f"back to line {first})")
        if len(lines) < MAX_TB_LINES:
            sm = slot // T
            since = int(st.tb[slot].progress)
            lines.append(f"  kernel '{kernel}' (GPU {sm // S}, SM {sm % S}, TB "
                         f"{int(st.regs[slot, REG_TB])}) at {where}: no memory, hub or link "
                         f"access since tick {since} ({fmt_time(now - since)})")
        else:
            rest[(kernel, where)] = rest.get((kernel, where), 0) + 1
    for (kernel, where), n in sorted(rest.items()):
        lines.append(f"  ... and {n} more thread block(s) of kernel '{kernel}' at {where}")
    return "\n".join(lines)


def loop_report(sim, slots):
    """One line per looping thread block: kernel, GPU/SM/TB, line and the loop around it."""
    st = sim.state
    p = st.p[0]
    T, S = int(p.slots_per_sm), int(p.sms_per_gpu)
    lines = []
    for slot in list(slots)[:MAX_TB_LINES]:
        slot = int(slot)
        l = int(st.tb[slot].launch)
        kernel = sim.launches[l].kernel if l >= 0 else "?"
        pc = int(st.tb[slot].pc)
        file, line = sim.program.source_line(pc)
        loop = enclosing_loop(sim.program, pc)
        where = f"{file}:{line}"
        if loop is not None:
            first, last = (sim.program.source_line(x)[1] for x in loop)
            where += f", in the loop of lines {first}-{last}"
        sm = slot // T
        lines.append(f"  kernel '{kernel}' (GPU {sm // S}, SM {sm % S}, TB "
                     f"{int(st.regs[slot, REG_TB])}) at {where}")
    if len(slots) > MAX_TB_LINES:
        lines.append(f"  ... and {len(slots) - MAX_TB_LINES} more thread block(s)")
    return "\n".join(lines)


class LivelockWatchdog(RunObserver):
    """RunObserver: stop with exit status 3 when a resident, ready thread block has issued no
    instruction touching memory, the hub or the links (and not exited) for `interval` ticks.

    The engine stamps `tb.progress` at the TB's start, when it wakes from a wait and at every
    issue of a non-idle instruction (components/sm_interpreter.py IDLE_SEMANTICS); this observer pauses the
    loop when the oldest stamp of a ready TB comes due and compares. Blocked TBs (flags, fences,
    the hub) issue nothing and are the NoProgressWatchdog's concern."""

    def __init__(self, interval):
        self.interval = int(interval)
        self.next_check = 0
        self.waited = None      # per slot: the end of the last long memory wait seen (progress)
        self.unchanged = None   # (tick, instructions, digest of the functional state) then

    def on_start(self, sim):
        self.next_check = int(sim.state.sys[0].q_now) + self.interval
        self.waited = np.zeros(len(sim.state.tb), dtype=np.int64)

    def next_stop(self, sim):
        return self.next_check

    def on_pause(self, sim, tick, events, wall_seconds):
        if tick < self.next_check:
            return
        tb = sim.state.tb
        # a block waiting for a long memory operation (a copy on a slow HBM) is not spinning:
        # the end of its wait counts as progress (issue 52)
        for slot in _memory_waits(sim, tick, self.interval // 2):
            self.waited[slot] = max(int(self.waited[slot]), int(tb[slot].ready))
        stamp = np.maximum(tb.progress, self.waited)
        ready = (tb.state == TB_READY) & (stamp <= tick)
        spinning = np.nonzero(ready & (tick - stamp >= self.interval))[0]
        self._no_effect(sim, tick)
        if len(spinning):
            raise SimulationError(
                f"livelock: {len(spinning)} thread block(s) kept issuing instructions for "
                f"{fmt_time(self.interval)} of simulated time (run.livelock_interval) without "
                f"touching memory, the hub or the links and without exiting, at tick {tick}; "
                f"{len(unfinished(sim))} kernel launch(es) unfinished. Spinning:\n"
                + livelock_report(sim, spinning, tick, self.interval)
                + "\n" + diagnose(sim, tick), exit_code=3)
        # the next time a ready TB can come due (a TB made ready later has a later stamp), and
        # at most one interval away (the no-effect check compares states an interval apart)
        oldest = int(stamp[ready].min()) if ready.any() else tick
        self.next_check = min(max(oldest + self.interval, tick + 1), tick + self.interval)

    def _no_effect(self, sim, tick):
        """Stop when thread blocks kept issuing instructions for a whole interval but nothing
        changed: no memory word, register, thread-block or launch state, and nothing in flight -
        a loop that can never end (a flag nobody sets polled in a loop, the same values stored
        over and over), which touches memory and so escapes the check above (issue 52)."""
        st = sim.state
        insts = int(st.sm.insts.sum())
        h = hashlib.blake2b(digest_size=16)
        for a in (st.hbm_mem, st.smem, st.regs, st.tb.state, st.ln.status):
            h.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
        digest = h.digest()
        before = self.unchanged
        if before is None or before[2] != digest or before[1] == insts \
                or in_flight(sim, tick, memory_waits=False):
            if before is None or before[2] != digest or before[1] == insts:
                self.unchanged = (tick, insts, digest)
            return
        # the blocks issuing now (a block in one long sleep or memory wait is not looping)
        looping = np.nonzero((st.tb.state == TB_READY)
                             & (st.tb.ready - tick <= self.interval // 2))[0]
        if tick - before[0] < self.interval or not len(looping):
            return
        raise SimulationError(
            f"livelock: thread blocks issued {insts - before[1]} instructions in "
            f"{fmt_time(tick - before[0])} of simulated time (run.livelock_interval = "
            f"{fmt_time(self.interval)}; ticks {before[0]} to {tick}) but changed nothing - no "
            f"memory word, register, thread block or launch - and nothing is in flight: a loop "
            f"that cannot end (a flag nobody sets polled in a loop, the same values stored "
            f"over and over, a sleep loop that checks nothing); {len(unfinished(sim))} kernel launch(es) unfinished. Looping:\n"
            + loop_report(sim, looping) + "\n" + diagnose(sim, tick), exit_code=3)
