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
"""
import numpy as np
from ..engine.jit import compiled

from ..engine.events import timer_clear, timer_set
from ..engine.state import ROUTE_FIRST, ROUTE_N
from ..isa.encoding import DT_BF16, DT_NONE
from .elements import load_f32, store_f32
from .hbm import hbm_backed, write_word
from .nvlink import pick_switch_output, txq_push, txq_room
from .nvls import answer_read, queue_read_data
from .packet import (PK_CAIS_DATA, PK_CAIS_GO, PK_CAIS_LD, PK_CAIS_READ, PK_CAIS_REPLY,
                     PK_CAIS_SYNC, PK_CAIS_WRITE, VC_REQUEST, VC_RESPONSE, header_flits,
                     packet_alloc, packet_flits)
from .wakeups import unblock_request_port
from ..declare import Array, Block, Event, Param, Record, Stat, StatGroup, Timer, counters, fields

EV_CAIS_TIMEOUT = 11   # a0 = merge table: its timer (a component timer per table) expired

CAIS_SENT = -1         # cais_switch: the input packet is consumed (as nvls.NVLS_SENT)
CAIS_TABLE_FULL = -2   # cais_switch: no entry can be freed now: the request channel waits

E_FREE, E_RED, E_LD_WAIT, E_LD_READY, E_FLUSH = range(5)   # entry states
GRP_BASE, GRP_BYTES, GRP_MASK, GRP_MEMBERS = range(4)      # columns of State.cais_groups
# columns of State.cais_tab, one row per table (switch x home GPU)
(T_BASE, T_SLOTS, T_CAP, T_USED, T_PEAK, T_ALLOCS, T_MERGES, T_EVICTIONS, T_TIMEOUTS,
 T_CONFLICTS, T_READS, T_WRITES, T_REPLIES, T_DONE, T_SKEW_SUM, T_SKEW_MAX, T_WAITERS,
 T_FULL_STALLS, T_TIMER, T_NLIVE, T_NFREE, T_THROTTLES) = range(22)
TAB_COLUMNS = 22
S_FREE, S_WAIT = range(2)   # group sync table entry states
# columns of State.cais_sync_tab, one row per switch (its group sync table)
(SY_USED, SY_PEAK, SY_ARRIVALS, SY_RELEASES, SY_WAIT_SUM, SY_WAIT_MAX, SY_WAITERS,
 SY_FULL_STALLS) = range(8)
SYNC_COLUMNS = 8


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
        Param("cais_entries_per_port", "system.switch.cais.entries_per_port", "entries",
              "merge-table entries per switch port toward a GPU",
              lambda cfg: cfg.system.switch.cais.entries_per_port,
              "config: system.switch.cais.entries_per_port (CAIS arXiv 2605.05628: 320 per port)"),
        Param("cais_timeout_ticks", "system.switch.cais.timeout", "ps", "merge-table entry timer",
              lambda cfg: cfg.system.switch.cais.timeout,
              "config: system.switch.cais.timeout (assumption: CAIS gives no value)"),
        Param("cais_throttle", "system.switch.cais.throttle", "bool", "1: a GPU ahead of every "
              "entry of a full table waits instead of evicting",
              lambda cfg: int(cfg.system.switch.cais.throttle),
              "config: system.switch.cais.throttle (CAIS arXiv 2605.05628 throttles GPUs that run "
              "ahead; off by default)"),
        Param("cais_sync_entries", "system.switch.cais.sync_entries", "entries",
              "group sync table entries per switch", lambda cfg: cfg.system.switch.cais.sync_entries,
              "config: system.switch.cais.sync_entries (assumption: CAIS gives no size)"),
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
                  "entry timer)", enabled=_stats_on),),
    timers=(Timer("cais", EV_CAIS_TIMEOUT, _tables, "one per merge table: its earliest entry "
                  "timer"),),
    checks=(check_cais,),
    findings=(cais_findings,),
    start=(cais_start,),
)


# ------------------------------------------------------------------------------ the SM side
@compiled
def cais_group(st, g, home, addr, nbytes):
    """The CAIS group holding [addr, addr + nbytes) with both GPU g and the home; -1 if none."""
    for k in range(st.p[0].cais_groups):
        o = st.cais_groups[k]
        if (addr >= o[GRP_BASE] and addr + nbytes <= o[GRP_BASE] + o[GRP_BYTES]
                and (o[GRP_MASK] >> g) & 1 and (o[GRP_MASK] >> home) & 1):
            return k
    return -1


@compiled
def cais_sync_peer(st, g, grp):
    """A GPU of group grp other than g: GPU g's route toward it reaches every switch, so the
    sync's link is picked from it (the flag's address picks the switch, cais_uplink)."""
    mask = st.cais_groups[grp, GRP_MASK]
    for m in range(st.p[0].num_gpus):
        if m != g and (mask >> m) & 1:
            return m
    return g


@compiled
def cais_element_bytes(dtype):
    if dtype == DT_NONE:
        return 1
    return 2 if dtype == DT_BF16 else 4


@compiled
def cais_uplink(st, g, home, addr):
    """GPU g's link for a request line at `addr` of GPU `home`: one on the switch the line hashes
    to (the switch of link (addr / line) mod links: the same switch from every GPU), the first
    with request-queue room; -1 if none has room (the hub waits for a dequeue)."""
    p = st.p[0]
    route = st.gpu_routes[g * p.num_gpus + home]
    n = route[ROUTE_N]
    s = st.ch[route[ROUTE_FIRST + (addr // p.store_payload) % n]].switch
    for k in range(n):
        c = route[ROUTE_FIRST + k]
        if st.ch[c].switch == s and txq_room(st, c, VC_REQUEST):
            return c
    return -1


# ------------------------------------------------------------------------------ the switch
@compiled
def cais_switch(st, c, pkt, tick):
    """The head packet of switch input c is a CAIS request (PK_CAIS_LD, PK_CAIS_RED) or a home's
    data for a merged load (PK_CAIS_DATA). Returns CAIS_SENT when it is consumed, CAIS_TABLE_FULL
    when the request channel must wait for a table entry, g to wait for room in a request-channel
    output toward GPU g, or num_gpus + g for a response-channel output toward g."""
    k = st.pk[pkt].kind
    if k == PK_CAIS_DATA:
        return _data_fanout(st, c, pkt, tick)
    if k == PK_CAIS_SYNC:
        return _sync_request(st, c, pkt, tick)
    if k == PK_CAIS_LD:
        return _ld_request(st, c, pkt, tick)
    return _red_request(st, c, pkt, tick)


@compiled
def _scan(st, t, addr, nbytes, want_red, m):
    """Look GPU m's request up in table t (its live entries): (matching entry, the free slot to
    use, the LRU evictable entry - each -1 if none -, and whether every live entry already holds
    a request of m: m is level with or ahead of the other GPUs on every line the table holds)."""
    hit = -1
    victim = -1
    best = -1
    level = True
    tab = st.cais_tab[t]
    base = tab[T_BASE]
    for i in range(base, base + tab[T_NLIVE]):
        e = st.cais_live[i]
        en = st.cais_entry[e]
        s = en.state
        if en.addr == addr and en.line == nbytes and (s == E_RED) == want_red:
            hit = e
        if (s == E_RED or s == E_LD_READY) and (victim < 0 or en.use < best):
            victim = e
            best = en.use
        if not (en.mask >> m) & 1:
            level = False
    free = st.cais_free[base + tab[T_NFREE] - 1] if tab[T_NFREE] > 0 else -1
    return hit, free, victim, level


@compiled
def _touch(st, en):
    sy = st.sys[0]
    en.use = sy.cais_clock
    sy.cais_clock += 1


@compiled
def _alloc(st, t, e, pk, home, tick, state):
    """Entry e of table t takes the request in packet pk (the first of its address)."""
    p = st.p[0]
    en = st.cais_entry[e]
    tab = st.cais_tab[t]
    tab[T_NFREE] -= 1                       # e is the free stack's top (_scan)
    en.pos = tab[T_BASE] + tab[T_NLIVE]
    st.cais_live[en.pos] = e
    tab[T_NLIVE] += 1
    en.state = state
    en.addr = pk.addr
    en.home = home
    en.tab = t
    en.group = pk.mm_obj
    en.elem = pk.mm_dtype
    en.line = pk.payload if state == E_RED else pk.value
    en.count = 1
    en.mask = 1 << pk.src
    en.served = 0
    en.first = tick
    en.last = tick
    en.timer_at = tick + p.cais_timeout_ticks
    _touch(st, en)
    for m in range(p.num_gpus):
        st.cais_req[e, m] = -1
    st.cais_req[e, pk.src] = pk.req
    tab[T_USED] += 1
    tab[T_ALLOCS] += 1
    if tab[T_USED] > tab[T_PEAK]:
        tab[T_PEAK] = tab[T_USED]
    _arm(st, t, en.timer_at, tick)


@compiled
def _release(st, e, tick):
    """Entry e leaves the table (state set: freed, or a write-back on its way home)."""
    en = st.cais_entry[e]
    t = en.tab
    tab = st.cais_tab[t]
    tab[T_NLIVE] -= 1
    last = st.cais_live[tab[T_BASE] + tab[T_NLIVE]]
    st.cais_live[en.pos] = last
    st.cais_entry[last].pos = en.pos
    if en.state == E_FREE:
        _free_slot(st, e)
    st.cais_tab[t, T_USED] -= 1
    if st.cais_tab[t, T_USED] == 0 and st.cais_tab[t, T_TIMER] != 0:
        # an empty table's timer has nothing to time (it would only prolong the run)
        st.cais_tab[t, T_TIMER] = 0
        timer_clear(st, st.p[0].tm_cais + t)
    _wake_table(st, t, tick)


@compiled
def _free_slot(st, e):
    tab = st.cais_tab[st.cais_entry[e].tab]
    st.cais_free[tab[T_BASE] + tab[T_NFREE]] = e
    tab[T_NFREE] += 1


@compiled
def _complete(st, en):
    """Every GPU of the group reached the entry: its request skew."""
    tab = st.cais_tab[en.tab]
    skew = en.last - en.first
    tab[T_DONE] += 1
    tab[T_SKEW_SUM] += skew
    if skew > tab[T_SKEW_MAX]:
        tab[T_SKEW_MAX] = skew


@compiled
def _wait_table(st, c, t, tick):
    ch = st.ch[c]
    if ch.cais_wait_tab == 0:
        ch.cais_wait_tab = t + 1
        ch.cais_wait_since = tick
        st.cais_tab[t, T_WAITERS] += 1
        st.cais_tab[t, T_FULL_STALLS] += 1
    return CAIS_TABLE_FULL


@compiled
def _full_table_miss(st, c, t, victim, level, tick):
    """A miss in full table t: True if the request waits at its input port - nothing can be
    evicted, or (system.switch.cais.throttle) the requesting GPU is level with or ahead of every
    entry, so an eviction would only send home a partial sum the others have yet to reach and
    the GPU is held back until an entry completes or times out (CAIS's throttling of GPUs that
    run ahead). A GPU behind on some entry evicts the LRU one: holding it could block, behind it
    on the same input port, the very requests that complete the table's entries."""
    if victim >= 0 and not (level and st.p[0].cais_throttle):
        return False
    if level and victim >= 0 and st.ch[c].cais_wait_tab == 0:
        st.cais_tab[t, T_THROTTLES] += 1
    _wait_table(st, c, t, tick)
    return True


@compiled
def _wake_table(st, t, tick):
    """An entry of table t freed (or changed state): input ports waiting on it try again."""
    if st.cais_tab[t, T_WAITERS] == 0:
        return
    st.cais_tab[t, T_WAITERS] = 0
    for c in range(st.ch.shape[0]):
        ch = st.ch[c]
        if ch.cais_wait_tab == t + 1:
            ch.cais_wait_tab = 0
            unblock_request_port(st, c, tick)


@compiled
def _accumulate(st, e, pk):
    """Functional mode: the entry keeps the contribution's bytes (the sum is formed in rank order
    when it reaches home: see the module docstring)."""
    n = pk.payload
    if st.cais_acc.shape[1] <= 1 or not hbm_backed(st, pk.src_addr, n):
        return
    line = st.p[0].store_payload
    held = st.cais_acc[e].view(np.uint8)
    src = st.hbm_mem[pk.src, pk.src_addr:pk.src_addr + n]
    for i in range(n):
        held[pk.src * line + i] = src[i]


@compiled
def _send_write(st, e, out, tick):
    """Entry e's partial sum goes home on output `out` (it keeps its data, in a write-back slot,
    until the home has it)."""
    p = st.p[0]
    en = st.cais_entry[e]
    q = packet_alloc(st)
    qk = st.pk[q]
    qk.kind = PK_CAIS_WRITE
    qk.req = -1
    qk.src = en.home
    qk.dst = en.home
    qk.addr = en.addr
    qk.src_addr = 0
    qk.payload = en.line
    qk.value = en.count
    qk.flits, qk.npk = packet_flits(st, en.line, p.store_payload)
    qk.mm_entry = e
    qk.mm_dtype = en.elem
    qk.mm_obj = en.group
    qk.ready = tick
    st.cais_tab[en.tab, T_WRITES] += 1
    en.state = E_FLUSH
    txq_push(st, out, q, tick)
    _release(st, e, tick)


@compiled
def _reply(st, e, m, req, dst_addr, out, tick):
    """A merged load's reply to GPU m (its request req, written at its dst_addr)."""
    p = st.p[0]
    en = st.cais_entry[e]
    q = packet_alloc(st)
    qk = st.pk[q]
    qk.kind = PK_CAIS_REPLY
    qk.req = req
    qk.src = en.home
    qk.dst = m
    qk.addr = dst_addr
    qk.src_addr = en.addr
    qk.payload = en.line
    qk.value = 0
    qk.flits, qk.npk = packet_flits(st, en.line, p.store_payload)
    qk.mm_entry = -1
    qk.ready = tick
    st.cais_tab[en.tab, T_REPLIES] += 1
    txq_push(st, out, q, tick)


@compiled
def _make_room(st, t, s, h, free, victim, tick):
    """A miss in a full table t: evict the LRU entry (a partial sum goes home on an output toward
    h). Returns the free slot to use, or a wait code (< -2 never; see cais_switch) as -(code+10)."""
    en = st.cais_entry[victim]
    if en.state == E_RED:
        out = pick_switch_output(st, s, h, VC_REQUEST)
        if out < 0:
            return -(h + 10)
        _send_write(st, victim, out, tick)
    else:
        en.state = E_FREE
        _release(st, victim, tick)
        free = victim
    st.cais_tab[t, T_EVICTIONS] += 1
    return free


@compiled
def _red_request(st, c, pkt, tick):
    p = st.p[0]
    pk = st.pk[pkt]
    s = st.ch[c].switch
    h = pk.dst
    t = s * p.num_gpus + h
    members = st.cais_groups[pk.mm_obj, GRP_MEMBERS]
    hit, free, victim, level = _scan(st, t, pk.addr, pk.payload, True, pk.src)
    if hit >= 0:
        en = st.cais_entry[hit]
        if (en.mask >> pk.src) & 1:
            # a second contribution of this GPU: its tag slot is taken: the entry goes home first
            out = pick_switch_output(st, s, h, VC_REQUEST)
            if out < 0:
                return h
            _send_write(st, hit, out, tick)
            st.cais_tab[t, T_CONFLICTS] += 1
            hit, free, victim, level = _scan(st, t, pk.addr, pk.payload, True, pk.src)
        else:
            last = en.count + 1 == members
            out = -1
            if last:
                out = pick_switch_output(st, s, h, VC_REQUEST)
                if out < 0:
                    return h
            _accumulate(st, hit, pk)
            en.count += 1
            en.mask |= 1 << pk.src
            st.cais_req[hit, pk.src] = pk.req
            en.last = tick
            _touch(st, en)
            st.cais_tab[t, T_MERGES] += 1
            if last:
                _complete(st, en)
                _send_write(st, hit, out, tick)
            return CAIS_SENT
    if st.cais_tab[t, T_USED] >= st.cais_tab[t, T_CAP]:
        if _full_table_miss(st, c, t, victim, level, tick):
            return CAIS_TABLE_FULL
        free = _make_room(st, t, s, h, free, victim, tick)
        if free <= -10:
            return -free - 10
    if free < 0:
        return h    # every write-back slot holds a sum on its way home: wait for one to drain
    _alloc(st, t, free, pk, h, tick, E_RED)
    _accumulate(st, free, pk)
    return CAIS_SENT


@compiled
def _ld_request(st, c, pkt, tick):
    p = st.p[0]
    G = p.num_gpus
    pk = st.pk[pkt]
    s = st.ch[c].switch
    h = pk.dst
    m = pk.src
    t = s * G + h
    members = st.cais_groups[pk.mm_obj, GRP_MEMBERS]
    hit, free, victim, level = _scan(st, t, pk.addr, pk.value, False, m)
    if hit >= 0:
        en = st.cais_entry[hit]
        if en.state == E_LD_READY:
            out = pick_switch_output(st, s, m, VC_RESPONSE)
            if out < 0:
                return G + m
            _reply(st, hit, m, pk.req, pk.src_addr, out, tick)
            st.cais_tab[t, T_MERGES] += 1
            _touch(st, en)
            if not (en.mask >> m) & 1:
                en.mask |= 1 << m
                en.count += 1
                en.last = tick
            en.served |= 1 << m
            if en.count == members:
                _complete(st, en)
                en.state = E_FREE
                _release(st, hit, tick)
            return CAIS_SENT
        if (en.mask >> m) & 1:
            return _wait_table(st, c, t, tick)   # this GPU already waits on the line: after it
        en.mask |= 1 << m
        en.count += 1
        en.last = tick
        st.cais_req[hit, m] = pk.req
        st.cais_dst[hit, m] = pk.src_addr
        st.cais_tab[t, T_MERGES] += 1
        return CAIS_SENT
    out = pick_switch_output(st, s, h, VC_REQUEST)
    if out < 0:
        return h
    if st.cais_tab[t, T_USED] >= st.cais_tab[t, T_CAP]:
        if _full_table_miss(st, c, t, victim, level, tick):
            return CAIS_TABLE_FULL
        free = _make_room(st, t, s, h, free, victim, tick)
        if free <= -10:
            return -free - 10
        out = pick_switch_output(st, s, h, VC_REQUEST)
        if out < 0:
            return h
    if free < 0:
        return h
    _alloc(st, t, free, pk, h, tick, E_LD_WAIT)
    st.cais_dst[free, m] = pk.src_addr
    q = packet_alloc(st)
    qk = st.pk[q]
    qk.kind = PK_CAIS_READ
    qk.req = -1
    qk.src = m
    qk.dst = h
    qk.addr = pk.addr
    qk.src_addr = 0
    qk.payload = 0
    qk.value = pk.value
    qk.npk = 1
    qk.flits = header_flits(st)
    qk.mm_entry = free
    qk.ready = tick
    st.cais_tab[t, T_READS] += 1
    txq_push(st, out, q, tick)
    return CAIS_SENT


@compiled
def _data_fanout(st, c, pkt, tick):
    """The home's data for a Load-Wait entry: reply to every GPU waiting on it (in GPU order, from
    where the last attempt stopped), then the entry is Load-Ready."""
    p = st.p[0]
    G = p.num_gpus
    pk = st.pk[pkt]
    e = pk.mm_entry
    en = st.cais_entry[e]
    s = st.ch[c].switch
    for m in range(G):
        if (en.mask >> m) & 1 and not (en.served >> m) & 1:
            out = pick_switch_output(st, s, m, VC_RESPONSE)
            if out < 0:
                return G + m
            _reply(st, e, m, st.cais_req[e, m], st.cais_dst[e, m], out, tick)
            en.served |= 1 << m
    en.state = E_LD_READY
    _touch(st, en)
    en.timer_at = tick + p.cais_timeout_ticks
    _arm(st, en.tab, en.timer_at, tick)
    if en.count == st.cais_groups[en.group, GRP_MEMBERS]:
        _complete(st, en)
        en.state = E_FREE
        _release(st, e, tick)
    else:
        _wake_table(st, en.tab, tick)   # a GPU's second load of the line may go on
    return CAIS_SENT


# ------------------------------------------------------------------------------ group sync table
@compiled
def _sync_request(st, c, pkt, tick):
    """A thread block's sync.cais arrival (PK_CAIS_SYNC) at switch input c: count it in the
    switch's group sync table under its flag's address; the last member's arrival releases the
    group - a PK_CAIS_GO to every member, in GPU order from where an attempt stopped for want of
    output room - and frees the entry."""
    p = st.p[0]
    G = p.num_gpus
    pk = st.pk[pkt]
    s = st.ch[c].switch
    m = pk.src
    E = p.cais_sync_entries
    hit = -1
    free = -1
    for e in range(s * E, (s + 1) * E):
        y = st.cais_sync[e]
        if y.state == S_WAIT and y.addr == pk.addr:
            hit = e
            break
        if y.state == S_FREE and free < 0:
            free = e
    tab = st.cais_sync_tab[s]
    if hit < 0:
        if free < 0:
            return _wait_sync(st, c, s, tick)
        hit = free
        y = st.cais_sync[hit]
        y.state = S_WAIT
        y.addr = pk.addr
        y.group = pk.mm_obj
        y.value = pk.value
        y.count = 0
        y.mask = 0
        y.served = 0
        y.first = tick
        tab[SY_USED] += 1
        if tab[SY_USED] > tab[SY_PEAK]:
            tab[SY_PEAK] = tab[SY_USED]
    y = st.cais_sync[hit]
    members = st.cais_groups[y.group, GRP_MEMBERS]
    if not (y.mask >> m) & 1:
        y.mask |= 1 << m
        y.count += 1
        y.last = tick
        st.cais_sync_req[hit, m] = pk.req
        tab[SY_ARRIVALS] += 1
        if y.count == members:
            wait = y.last - y.first
            tab[SY_RELEASES] += 1
            tab[SY_WAIT_SUM] += wait
            if wait > tab[SY_WAIT_MAX]:
                tab[SY_WAIT_MAX] = wait
    elif y.count < members:
        # this GPU's next sync on the flag before the group's release: after the release
        return _wait_sync(st, c, s, tick)
    if y.count < members:
        return CAIS_SENT
    for mm in range(G):
        if (y.mask >> mm) & 1 and not (y.served >> mm) & 1:
            out = pick_switch_output(st, s, mm, VC_RESPONSE)
            if out < 0:
                return G + mm
            _release_member(st, hit, mm, out, tick)
            y.served |= 1 << mm
    y.state = S_FREE
    tab[SY_USED] -= 1
    _wake_sync(st, s, tick)
    return CAIS_SENT


@compiled
def _release_member(st, e, m, out, tick):
    """The group's release to member m: a header-only packet that writes the value into m's flag
    and completes m's sync.cais."""
    y = st.cais_sync[e]
    q = packet_alloc(st)
    qk = st.pk[q]
    qk.kind = PK_CAIS_GO
    qk.req = st.cais_sync_req[e, m]
    qk.src = m
    qk.dst = m
    qk.addr = y.addr
    qk.src_addr = 0
    qk.payload = 0
    qk.value = y.value
    qk.npk = 1
    qk.flits = header_flits(st)
    qk.mm_entry = -1
    qk.ready = tick
    txq_push(st, out, q, tick)


@compiled
def _wait_sync(st, c, s, tick):
    ch = st.ch[c]
    if ch.cais_wait_sync == 0:
        ch.cais_wait_sync = s + 1
        ch.cais_wait_since = tick
        st.cais_sync_tab[s, SY_WAITERS] += 1
        st.cais_sync_tab[s, SY_FULL_STALLS] += 1
    return CAIS_TABLE_FULL


@compiled
def _wake_sync(st, s, tick):
    """A group of switch s was released: input ports waiting on its sync table try again."""
    if st.cais_sync_tab[s, SY_WAITERS] == 0:
        return
    st.cais_sync_tab[s, SY_WAITERS] = 0
    for c in range(st.ch.shape[0]):
        ch = st.ch[c]
        if ch.cais_wait_sync == s + 1:
            ch.cais_wait_sync = 0
            unblock_request_port(st, c, tick)


@compiled
def _arm(st, t, at, tick):
    """Table t's timer fires at `at` at the latest."""
    tab = st.cais_tab[t]
    if tab[T_TIMER] == 0 or at < tab[T_TIMER]:
        tab[T_TIMER] = at
        timer_set(st, st.p[0].tm_cais + t, at)


@compiled
def cais_timeout(st, t, tick):
    """EV_CAIS_TIMEOUT: table t's timer. Every entry whose timer expired: a partial sum goes home,
    a Load-Ready entry is dropped (a Load-Wait entry's data is on the way: its timer counts from
    its data's arrival). A partial sum whose output toward home has no room tries again one
    timeout later. The timer is set again for the earliest entry left."""
    p = st.p[0]
    tab = st.cais_tab[t]
    tab[T_TIMER] = 0
    nxt = 0
    base = tab[T_BASE]
    # backwards over the live list: an entry that leaves it is replaced by one already seen
    for i in range(base + tab[T_NLIVE] - 1, base - 1, -1):
        e = st.cais_live[i]
        en = st.cais_entry[e]
        if en.state != E_RED and en.state != E_LD_READY:
            continue
        if en.timer_at <= tick:
            if en.state == E_LD_READY:
                en.state = E_FREE
                _release(st, e, tick)
                tab[T_TIMEOUTS] += 1
                continue
            out = pick_switch_output(st, t // p.num_gpus, en.home, VC_REQUEST)
            if out >= 0:
                _send_write(st, e, out, tick)
                tab[T_TIMEOUTS] += 1
                continue
            en.timer_at = tick + p.cais_timeout_ticks
        if nxt == 0 or en.timer_at < nxt:
            nxt = en.timer_at
    if nxt > 0:
        _arm(st, t, nxt, tick)


# ------------------------------------------------------------------------------ the home
@compiled
def cais_read_arrived(st, g, c, pkt, tick):
    """A merge unit's read (PK_CAIS_READ) reached home g on down-channel c at `tick`: read the
    line from HBM and queue it to go back up the same link (response channel). The read keeps
    its receive-buffer space until then (as an NVLS reduction read, nvls.py)."""
    gp = st.gpu[g]
    gp.cais_reads_rx += 1
    answer_read(st, g, c, pkt, PK_CAIS_DATA, tick)
    queue_read_data(st, g, pkt)   # the hub's one read-data FIFO (nvls.nvls_send_data sends it)


@compiled
def cais_write_arrived(st, g, pkt):
    """A partial sum (PK_CAIS_WRITE) reached home g: add it into memory (FP32, rounded once to
    the element type) and free its write-back slot. Returns the entry (its mask and cais_req name
    the contributors the home answers)."""
    pk = st.pk[pkt]
    e = pk.mm_entry
    en = st.cais_entry[e]
    gp = st.gpu[g]
    gp.cais_writes_rx += 1
    gp.cais_contribs_rx += en.count
    n = en.line
    if st.cais_acc.shape[1] > 1 and hbm_backed(st, en.addr, n):
        line = st.p[0].store_payload
        held = st.cais_acc[e].view(np.uint8)
        dst = st.hbm_mem[g, en.addr:en.addr + n]
        dt = en.elem
        for i in range(n // cais_element_bytes(dt)):
            acc = np.float32(0.0)
            first = True
            for m in range(st.p[0].num_gpus):
                if (en.mask >> m) & 1:
                    v = load_f32(held[m * line:(m + 1) * line], i, dt)
                    if first:
                        acc = v
                        first = False
                    else:
                        acc = np.float32(acc + v)
            store_f32(dst, i, dt, np.float32(load_f32(dst, i, dt) + acc))
    en.state = E_FREE
    _free_slot(st, e)
    return e


@compiled
def cais_go_arrived(st, g, pkt):
    """A group sync release (PK_CAIS_GO) reached member g: its flag takes the group's value."""
    pk = st.pk[pkt]
    st.gpu[g].cais_go_rx += 1
    if hbm_backed(st, pk.addr, 8):
        write_word(st, g, pk.addr, pk.value)


@compiled
def cais_request_line(st, rq, sent):
    """Bytes of a cais request's next line (one store packet at most: an entry holds one line)."""
    return min(rq.length - sent, st.p[0].store_payload)

