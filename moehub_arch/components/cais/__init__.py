"""CAIS merge unit: the NVSwitch block that merges the same load or reduction request from the GPUs
of a group (CAIS, compute-aware in-switch computing for tensor parallelism, arXiv 2605.05628).

CAIS gives loads and reductions memory semantics in the switch: a GPU's `ld.cais` / `red.cais`
is an ordinary remote request carrying a flag, so a GEMM's thread blocks can load their operand or
reduce their output through the switch with no separate collective kernel. Requests to one address
are hashed to one switch (here: the address's 128 B line picks the link index, the same on every
GPU, whose switch takes it), where the merge unit looks the request up by address and type in a
merging table:

- ld.cais (PK_CAIS_LD, header only): a miss allocates an entry in state Load-Wait and sends one
  read (PK_CAIS_READ) to the home GPU; hits while it waits register as waiters. The home's data
  (PK_CAIS_DATA, response channel) makes the entry Load-Ready: the switch sends a reply
  (PK_CAIS_REPLY) to every waiter, and later hits are answered from the table. The entry frees
  once every GPU of the group has asked (the merge counter reaches the group size).
- red.cais (PK_CAIS_RED, data): a miss allocates an entry in state Reduction holding the
  contribution as an FP32 partial sum; hits add into it. The last of the group's contributions
  sends the sum home once (PK_CAIS_WRITE); the home adds it into its memory (rounded once to the
  element type) and answers every contributor (one write response each: a red.cais completes at
  `fence` when its sum is in home memory).
- A full table evicts its least recently used Reduction or Load-Ready entry (LRU): a partial sum
  goes home as a write (the home adds it: the result is the same sum, reduced in another order),
  a served load is dropped (a later request reads home memory again). Load-Wait entries are never
  evicted; if every entry waits, the input port's request channel waits for one to free
  (back-pressure, nothing dropped).
- Every entry has a timer (system.switch.cais.timeout): a partial sum older than that is written
  home, a Load-Ready entry is dropped, so a group member that never sends cannot hold the table.
- A GPU that sends a second contribution to an address whose entry already holds one of its own
  (its request tag slot is taken) first flushes that entry home (a `conflict`).

Table capacity: system.switch.cais.entries_per_port entries (one request line,
system.nvlink.store_packet_bytes, each: CAIS's 40 KB / 320 entries per port) for every switch port
toward a home GPU; a switch's ports toward one GPU share one table (the same-address requests
of that GPU's lines meet there). A partial sum on its way home keeps its data in a write-back slot
beside the table (a slot per packet the output queues and links toward the home can hold) until
the home has it; it no longer counts against the table.

Modelling choices (assumptions, CAIS publishes no finer detail): the switch's adders keep pace
with the links (no reduction cost beyond the traversal); the home's own request also goes through
the switch (the merge counter counts every member, like NVLS's multimem source); one entry holds
one request line: cais requests are cut into lines of store_packet_bytes and never travel as
packet trains. Functional mode: an entry keeps each contribution's bytes (read when it reaches the
switch, as a put's are when delivered) and the partial sum is FP32 accumulation over the
contributors in rank order, added into the home's memory with one rounding to the element type -
the order of NVLS's reductions (nvls.py, reference.nvls_allreduce_reference), so a run without
evictions or timeouts is bit-identical to that reference. The hardware adds in arrival order; any
order stays within that reference's bound ((t - 1) 2^-24 sum|x_i| plus one rounding), and each
eviction or timeout of a line adds one more rounding at the home. A load's reply copies the
home's bytes when it is delivered.

Throttling of GPUs that run ahead (system.switch.cais.throttle, off by default): a miss in a full
table from a GPU whose request every live entry already holds - the GPU is level with or ahead of
the others on every line the table keeps - waits at its input port instead of evicting, until an
entry completes (or times out); a GPU behind on some entry still evicts the LRU entry (holding it
could block, on the same input port, the requests that complete the table). CAIS throttles GPUs
that run ahead of their group; this rule is the model's reading of it (CAIS publishes no finer
detail).

Merging-aware thread-block coordination (CAIS: the compiler groups the thread blocks whose
request addresses do not depend on the GPU id - the same thread block of the same kernel on every
GPU - and synchronises each group before it accesses, through a group sync table in the switch,
so the group's requests for one line reach the merge table close together): `sync.cais flag,
value` sends a header-only arrival (PK_CAIS_SYNC) to the switch that the flag's address hashes
to (as a request line's address picks its switch: the same switch from every GPU). The switch's
group sync table (system.switch.cais.sync_entries entries per switch, one per group in flight,
keyed by the flag's address) counts the arrivals; when every member GPU of the flag's CAIS group
has arrived it sends each one a release (PK_CAIS_GO, response channel) that writes `value` into
the member's flag, where the thread block waits (`wait.ge`). The arrival leaves the GPU behind
every request issued before it (the hub's one FIFO), so a release also says that every member
has sent its group's previous requests: a GPU runs at most one group ahead of the slowest. A
full sync table makes the arrival wait at its input port until a group is released
(back-pressure). The pre-access sync bounds the skew at its source (before the requests leave
the GPUs); the throttle above acts on whatever skew is left inside the switch, and the two
combine (the throttle is off by default, the sync is used by the TP scheme cais unless
workload.block.cais_sync is false). Not modelled: the thread-block-level dataflow plan across
kernels; the merge unit merges whatever requests meet in its table, and `request_skew` shows
how far apart the GPUs' requests for one address came.

The block is a package along where its hardware sits: gpu.py (the GPU side: a request's group and
uplink), merge_table.py (the switch's merging table and its timer), sync_table.py (the switch's
group sync table), home.py (the home GPU's handlers), layout.py (entry states and table columns),
isa.py (the instructions as the SM issues them); this module declares the block.
"""
from ...engine.jit import compiled

from ...engine.state import ROUTE_FIRST, ROUTE_N
from ...config.keys import key_param
from ...declare import (Array, Block, Crossing, Event, Param, Receive, Record, Semantic, Send,
                        Stat, StatGroup, Timer, counters, fields)
from ...isa.encoding import SEM_CAIS
from ..packet import (PK_CAIS_DATA, PK_CAIS_GO, PK_CAIS_LD, PK_CAIS_READ, PK_CAIS_RED, PK_CAIS_REPLY,
                      PK_CAIS_SYNC, PK_CAIS_WRITE, REQ_CAIS_LD, REQ_CAIS_RED, REQ_CAIS_SYNC)

from .layout import (E_FREE, EV_CAIS_TIMEOUT, S_FREE, S_WAIT, SY_ARRIVALS, SY_FULL_STALLS, SY_PEAK,
                     SY_RELEASES, SY_USED, SY_WAIT_MAX, SY_WAIT_SUM, SYNC_COLUMNS, T_ALLOCS,
                     T_BASE, T_CAP, T_CONFLICTS, T_DONE, T_EVICTIONS, T_FULL_STALLS, T_MERGES,
                     T_NFREE, T_PEAK, T_READS, T_REPLIES, T_SKEW_MAX, T_SKEW_SUM, T_SLOTS,
                     T_THROTTLES, T_TIMEOUTS, T_USED, T_WRITES, TAB_COLUMNS)


def _on(cfg):
    return len(cfg.workload.cais) > 0


def _tables(cfg):
    return cfg.system.switch.count * cfg.system.nodes.count * cfg.system.num_gpus if _on(cfg) else 1


def _switches(cfg):
    return cfg.system.switch.count * cfg.system.nodes.count


def _sync_entries(cfg):
    """Entries of every switch's group sync table."""
    return _switches(cfg) * cfg.system.switch.cais.sync_entries if _on(cfg) else 1


def _writeback_slots(cfg):
    """Write-back slots per switch port: the writes its output queue, link and the home's receive
    buffer can hold at once (each at least one flit)."""
    nv = cfg.system.nvlink
    return cfg.system.switch.output_queue_packets + nv.rx_buffer_flits + 1


def _entries(cfg):
    """Entries of all tables: every GPU link ends at one switch port toward that GPU."""
    if not _on(cfg):
        return 1
    ports = cfg.system.num_gpus * cfg.system.nvlink.links_per_gpu
    return ports * (cfg.system.switch.cais.entries_per_port + _writeback_slots(cfg))


def _line(cfg):
    return min(cfg.system.nvlink.store_packet_bytes, cfg.system.nvlink.max_payload_bytes)


def _acc_shape(cfg):
    """The contributions an entry holds, one request line per GPU (functional mode only)."""
    if not _on(cfg) or cfg.workload.mode != "functional":
        return (1, 1)
    return (_entries(cfg), cfg.system.num_gpus * (_line(cfg) // 8) + 1)


def cais_group_rows(cfg, buffers):
    """Rows of State.cais_groups (base, bytes, member mask, members) from workload.cais; raises
    ValueError naming the key for a bad group."""
    G = cfg.system.num_gpus
    rows = []
    for i, o in enumerate(cfg.workload.cais):
        where = f"workload.cais[{i}]"
        if o.buffer not in buffers:
            raise ValueError(f"{where}.buffer: no buffer '{o.buffer}' (workload.buffers: "
                             f"{', '.join(sorted(buffers)) or 'none'})")
        gpus = sorted(set(o.gpus)) if o.gpus else list(range(G))
        bad = [g for g in gpus if g >= G]
        if bad:
            raise ValueError(f"{where}.gpus: GPU(s) {bad} out of range (system.num_gpus = {G})")
        if len(gpus) < 2:
            raise ValueError(f"{where}.gpus: a CAIS group needs at least two GPUs, found {gpus}")
        if G > 62:
            raise ValueError(f"{where}: member masks hold at most 62 GPUs (system.num_gpus = {G})")
        b = buffers[o.buffer]
        rows.append((b.addr, b.nbytes, sum(1 << g for g in gpus), len(gpus)))
    return rows


def _tab(st, col):
    return st.cais_tab[:, col]


def check_cais(sim, out):
    """Every entry freed, every partial sum home, every load answered."""
    st = sim.state
    if int(st.p[0].cais_groups) == 0:
        return
    gp, tab = st.gpu, st.cais_tab
    out.check(st.cais_entry.state == E_FREE, "CAIS merge-table entries still held",
              lambda e: f"entry {e} (state {int(st.cais_entry[e].state)}, address "
                        f"{int(st.cais_entry[e].addr)}, home GPU {int(st.cais_entry[e].home)})")
    out.equal("red.cais contributions written home vs sent by the GPUs",
              gp.cais_contribs_rx.sum(), gp.cais_red_tx.sum())
    out.equal("ld.cais replies received vs requests sent", gp.cais_replies_rx.sum(),
              gp.cais_ld_tx.sum())
    out.equal("merge-unit reads served by the homes vs sent by the switches",
              gp.cais_reads_rx.sum(), tab[:, T_READS].sum())
    out.equal("merge-unit read data sent by the homes vs reads served", gp.cais_data_tx.sum(),
              gp.cais_reads_rx.sum())
    out.equal("merged writes received by the homes vs sent by the switches",
              gp.cais_writes_rx.sum(), tab[:, T_WRITES].sum())
    out.check(st.cais_sync.state == S_FREE, "CAIS group sync table entries still held (a member "
              "never arrived)",
              lambda e: f"entry {e} (flag address {int(st.cais_sync[e].addr)}, arrived GPU mask "
                        f"{int(st.cais_sync[e].mask):#x}, group {int(st.cais_sync[e].group)})")
    out.equal("sync.cais releases received vs arrivals sent", gp.cais_go_rx.sum(),
              gp.cais_sync_tx.sum())
    out.equal("sync.cais arrivals taken by the switches vs sent by the GPUs",
              st.cais_sync_tab[:, SY_ARRIVALS].sum(), gp.cais_sync_tx.sum())


def cais_findings(sim):
    """Input ports waiting for a merge-table entry (the stuck-run report)."""
    st = sim.state
    res = []
    if int(st.p[0].cais_groups) == 0:
        return res
    for c in range(st.ch.shape[0]):
        t = int(st.ch[c].cais_wait_tab) - 1
        if t >= 0:
            res.append(f"system.switch{int(st.ch[c].switch)}.port{int(st.ch[c].port)}: ld.cais / "
                       f"red.cais waits for a merge-table entry toward GPU "
                       f"{t % int(st.p[0].num_gpus)} ({int(st.cais_tab[t, T_USED])} of "
                       f"{int(st.cais_tab[t, T_CAP])} in use, none evictable; "
                       f"system.switch.cais.entries_per_port)")
        s = int(st.ch[c].cais_wait_sync) - 1
        if s >= 0:
            res.append(f"system.switch{int(st.ch[c].switch)}.port{int(st.ch[c].port)}: sync.cais "
                       f"waits for a group sync table entry of switch {s} ("
                       f"{int(st.cais_sync_tab[s, SY_USED])} groups in flight; "
                       f"system.switch.cais.sync_entries)")
    waiting = [e for e in range(st.cais_sync.shape[0]) if int(st.cais_sync[e].state) == S_WAIT]
    for e in waiting[:8]:
        y = st.cais_sync[e]
        res.append(f"CAIS group sync table: flag address {int(y.addr)} waits for GPUs outside mask "
                   f"{int(y.mask):#x} (group {int(y.group)}: a member's matching thread block has "
                   f"not arrived)")
    return res


@compiled
def cais_start(st):
    """Lay out one table per (switch, home GPU) the switch reaches directly: entries_per_port
    entries (plus write-back slots) per port toward that GPU."""
    p = st.p[0]
    if p.cais_groups == 0:
        return
    G = p.num_gpus
    base = 0
    for s in range(p.num_switches):
        for h in range(G):
            t = s * G + h
            route = st.sw_routes[t]
            n = route[ROUTE_N]
            direct = 0
            for k in range(n):
                o = st.ch[route[ROUTE_FIRST + k]]
                if o.to_switch == 0 and o.gpu == h:
                    direct += 1
            st.cais_tab[t, T_BASE] = base
            st.cais_tab[t, T_CAP] = direct * p.cais_entries_per_port
            slots = direct * (p.cais_entries_per_port + p.cais_writeback_slots)
            if base + slots > st.cais_entry.shape[0]:
                slots = st.cais_entry.shape[0] - base   # (every GPU link is one port: cannot happen)
            st.cais_tab[t, T_SLOTS] = slots
            for i in range(slots):
                st.cais_free[base + i] = base + slots - 1 - i
            st.cais_tab[t, T_NFREE] = slots
            base += slots


def _stats_on(st):
    return int(st.p[0].cais_groups) > 0


def _home_sum(col):
    """A table counter of the tables toward GPU i.g (all switches), summed."""
    return lambda i: int(i.st.cais_tab[i.g::int(i.p.num_gpus), col].sum())


def _skew_mean(tab):
    done = int(tab[:, T_DONE].sum())
    return int(tab[:, T_SKEW_SUM].sum()) / done if done else 0.0


BLOCK = Block(
    "cais_merge", __doc__.split("\n\n")[0],
    params=(
        Param("cais_groups", "workload.cais", "groups", "registered CAIS groups",
              lambda cfg: len(cfg.workload.cais), "config: workload.cais"),
        key_param("cais_entries_per_port", "system.switch.cais.entries_per_port"),
        key_param("cais_timeout_ticks", "system.switch.cais.timeout"),
        key_param("cais_throttle", "system.switch.cais.throttle"),
        key_param("cais_sync_entries", "system.switch.cais.sync_entries"),
        Param("cais_writeback_slots", "", "slots", "write-back slots per port",
              _writeback_slots, "derived: output_queue_packets + rx_buffer_flits + 1 (the writes "
              "a port's queue, link and the home's buffer hold)"),
    ),
    records=(Record("cais_entry", "merge-table entries of every switch (tables: State.cais_tab)",
                    count=_entries),
             Record("cais_sync", "group sync table entries, sync_entries per switch (counters: "
                    "State.cais_sync_tab)", count=_sync_entries)),
    arrays=(Array("cais_groups", "CAIS groups: base, bytes, member mask, members (builder)",
                  lambda cfg: (max(1, len(cfg.workload.cais)), 4)),
            Array("cais_tab", "one row per merge table (switch x home GPU): layout and counters "
                  "(T_* columns)", lambda cfg: (_tables(cfg), TAB_COLUMNS)),
            Array("cais_req", "per entry and member: its request (red: to answer; ld: to reply)",
                  lambda cfg: (_entries(cfg), cfg.system.num_gpus if _on(cfg) else 1), fill=-1),
            Array("cais_dst", "per entry and member: where a waiting load's reply is written",
                  lambda cfg: (_entries(cfg), cfg.system.num_gpus if _on(cfg) else 1)),
            Array("cais_acc", "FP32 partial sums of the entries (functional mode)", _acc_shape),
            Array("cais_live", "per table (from its base): the entries in use (a list; T_NLIVE)",
                  lambda cfg: (_entries(cfg),)),
            Array("cais_free", "per table (from its base): its free slots (a stack; T_NFREE)",
                  lambda cfg: (_entries(cfg),)),
            Array("cais_sync_tab", "one row per switch: its group sync table's counters (SY_*)",
                  lambda cfg: (_switches(cfg) if _on(cfg) else 1, SYNC_COLUMNS)),
            Array("cais_sync_req", "per sync entry and member: its sync.cais request (answered "
                  "on release)", lambda cfg: (_sync_entries(cfg),
                                              cfg.system.num_gpus if _on(cfg) else 1), fill=-1)),
    fields=fields("cais_entry", ("state", "E_* above"), ("addr", "address at the home"),
                  ("home", "home GPU"), ("tab", "its table"), ("group", "CAIS group"),
                  ("elem", "element type (red)"), ("line", "request line bytes"),
                  ("count", "merge counter: requests merged"), ("mask", "GPUs merged"),
                  ("served", "ld: GPUs answered"), ("timer_at", "when its timer expires"),
                  ("first", "tick of the first request"), ("last", "tick of the latest"),
                  ("use", "LRU stamp"), ("pos", "its place in the table's live list"))
    + fields("cais_sync", ("state", "S_* above"), ("addr", "the group's flag address"),
             ("group", "CAIS group"), ("value", "value the release writes"),
             ("count", "members arrived"), ("mask", "GPUs arrived"), ("served", "GPUs released"),
             ("first", "tick of the first arrival"), ("last", "tick of the latest"))
    + fields("ch", ("cais_wait_tab", "1 + the table this input's request channel waits on (0: none)"),
             ("cais_wait_since", ""),
             ("cais_wait_sync", "1 + the switch whose full group sync table this input waits on"))
    + fields("gpu", ("cais_ld_tx", ""), ("cais_red_tx", ""), ("cais_replies_rx", ""),
             ("cais_reads_rx", ""), ("cais_data_tx", ""), ("cais_writes_rx", ""),
             ("cais_contribs_rx", ""), ("cais_sync_tx", ""), ("cais_go_rx", ""))
    + fields("sys", ("cais_clock", "LRU stamps handed out")),
    stats=(
        StatGroup("gpu", "cais", counters((
            ("ld_requests", "cais_ld_tx", "packets", "ld.cais request lines sent"),
            ("red_requests", "cais_red_tx", "packets", "red.cais contribution lines sent"),
            ("replies_received", "cais_replies_rx", "packets", "ld.cais replies written here"),
            ("home_reads", "cais_reads_rx", "packets", "merge-unit reads of this GPU's memory"),
            ("home_writes", "cais_writes_rx", "packets", "merged partial sums added into this "
             "GPU's memory"),
            ("home_contributions", "cais_contribs_rx", "count", "red.cais contributions those "
             "writes carried"),
            ("sync_arrivals", "cais_sync_tx", "packets", "sync.cais arrivals sent to the group "
             "sync tables"),
            ("sync_releases", "cais_go_rx", "packets", "group sync releases received"),
        )) + (
            Stat("table_peak", "entries", "peak entries in use of the switches' tables toward this "
                 "GPU (largest over switches)",
                 lambda i: int(i.st.cais_tab[i.g::int(i.p.num_gpus), T_PEAK].max())),
            Stat("merges", "count", "requests toward this GPU merged into an existing entry",
                 _home_sum(T_MERGES)),
            Stat("evictions", "count", "LRU evictions in the tables toward this GPU",
                 _home_sum(T_EVICTIONS)),
            Stat("timeouts", "count", "entries toward this GPU flushed by their timer",
                 _home_sum(T_TIMEOUTS)),
        ), enabled=_stats_on),
        StatGroup("system", "cais", (
            Stat("table_peak", "entries", "largest peak of any merge table (switch x home GPU)",
                 lambda i: int(i.st.cais_tab[:, T_PEAK].max())),
            Stat("table_peak_per_port", "entries", "that peak per port of its table "
                 "(system.switch.cais.entries_per_port)",
                 lambda i: max((int(r[T_PEAK]) * int(i.p.cais_entries_per_port) // int(r[T_CAP])
                                for r in i.st.cais_tab if int(r[T_CAP]) > 0), default=0)),
            Stat("table_peak_bytes_per_port", "bytes", "that peak in bytes (entries x request line)",
                 lambda i: max((int(r[T_PEAK]) * int(i.p.cais_entries_per_port) // int(r[T_CAP])
                                for r in i.st.cais_tab if int(r[T_CAP]) > 0), default=0)
                 * int(i.p.store_payload)),
            Stat("allocations", "count", "entries allocated", lambda i: int(_tab(i.st, T_ALLOCS).sum())),
            Stat("merges", "count", "requests merged into an existing entry",
                 lambda i: int(_tab(i.st, T_MERGES).sum())),
            Stat("evictions", "count", "LRU evictions (partial sums sent home, served loads dropped)",
                 lambda i: int(_tab(i.st, T_EVICTIONS).sum())),
            Stat("timeouts", "count", "entries flushed by their timer",
                 lambda i: int(_tab(i.st, T_TIMEOUTS).sum())),
            Stat("conflicts", "count", "entries flushed because a GPU sent a second contribution",
                 lambda i: int(_tab(i.st, T_CONFLICTS).sum())),
            Stat("memory_reads", "packets", "reads of home memory for ld.cais",
                 lambda i: int(_tab(i.st, T_READS).sum())),
            Stat("home_writes", "packets", "partial sums written home (merged, evicted, timed out)",
                 lambda i: int(_tab(i.st, T_WRITES).sum())),
            Stat("replies", "packets", "ld.cais replies sent", lambda i: int(_tab(i.st, T_REPLIES).sum())),
            Stat("full_stalls", "count", "times a request waited for a merge-table entry",
                 lambda i: int(_tab(i.st, T_FULL_STALLS).sum())),
            Stat("throttles", "count", "of those, a GPU held back because every entry of the full "
                 "table already held its request (system.switch.cais.throttle)",
                 lambda i: int(_tab(i.st, T_THROTTLES).sum())),
            Stat("complete_groups", "count", "entries every GPU of the group reached",
                 lambda i: int(_tab(i.st, T_DONE).sum())),
            Stat("request_skew_mean", "ps", "mean time from the first to the last GPU's request "
                 "of a complete entry", lambda i: _skew_mean(i.st.cais_tab)),
            Stat("request_skew_max", "ps", "largest such time",
                 lambda i: int(_tab(i.st, T_SKEW_MAX).max())),
            Stat("complete_fraction", "ratio", "complete_groups / allocations: the share of entries "
                 "every GPU of the group reached", lambda i: (
                     int(_tab(i.st, T_DONE).sum()) / max(1, int(_tab(i.st, T_ALLOCS).sum())))),
            Stat("sync_arrivals", "count", "sync.cais arrivals taken by the group sync tables",
                 lambda i: int(i.st.cais_sync_tab[:, SY_ARRIVALS].sum())),
            Stat("sync_releases", "count", "groups released (every member arrived)",
                 lambda i: int(i.st.cais_sync_tab[:, SY_RELEASES].sum())),
            Stat("sync_table_peak", "entries", "largest number of groups in flight in one switch's "
                 "group sync table (system.switch.cais.sync_entries)",
                 lambda i: int(i.st.cais_sync_tab[:, SY_PEAK].max())),
            Stat("sync_wait_mean", "ps", "mean time from a group's first arrival to its last (what "
                 "the first thread block waited)", lambda i: (
                     int(i.st.cais_sync_tab[:, SY_WAIT_SUM].sum())
                     / max(1, int(i.st.cais_sync_tab[:, SY_RELEASES].sum())))),
            Stat("sync_wait_max", "ps", "largest such time",
                 lambda i: int(i.st.cais_sync_tab[:, SY_WAIT_MAX].max())),
            Stat("sync_full_stalls", "count", "times an arrival waited for a group sync table entry",
                 lambda i: int(i.st.cais_sync_tab[:, SY_FULL_STALLS].sum())),
        ), enabled=_stats_on),
    ),
    events=(Event("cais_timeout", EV_CAIS_TIMEOUT, "a merge table's timer expired (its earliest "
                  "entry timer)", enabled=_stats_on,
                  handler="components.cais.merge_table.cais_timeout"),),
    timers=(Timer("cais", EV_CAIS_TIMEOUT, _tables, "one per merge table: its earliest entry "
                  "timer"),),
    checks=(check_cais,),
    findings=(cais_findings,),
    start=(cais_start,),
    # its handlers are compiled only for a run with merge groups (dispatch/indirect.py)
    on_demand=_stats_on,
    receives=(Receive((PK_CAIS_READ, PK_CAIS_REPLY, PK_CAIS_WRITE, PK_CAIS_GO),
                      "components.cais.home.receive_cais", "the merge unit's read, reply, merged "
                      "write or group release reaches a GPU"),),
    sends=(Send((REQ_CAIS_LD, REQ_CAIS_RED, REQ_CAIS_SYNC), "components.cais.send.cais_send",
                "ld.cais and red.cais request lines and sync.cais arrivals, GPU -> switch"),),
    crossings=(Crossing((PK_CAIS_LD, PK_CAIS_RED, PK_CAIS_DATA, PK_CAIS_SYNC),
                        "components.cais.merge_table.cais_switch", "the merge unit takes a load, "
                        "a reduction's contribution, a home's data or a sync arrival"),),
    semantics=(Semantic((SEM_CAIS,), "components.cais.isa.cais_execute",
                        "ld.cais, red.cais and sync.cais"),),
)
