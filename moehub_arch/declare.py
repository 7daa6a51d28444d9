"""Declarations a hardware block makes about itself (DESIGN rule 9: a block is a room).

Each component module ends its imports with one ``BLOCK = Block(...)`` that says what the block
*is*, next to the code that says what it *does*:

- ``params``: the scalars of the read-only ``State.p`` record it reads, each with the config key it
  comes from, its unit, how the builder computes it from the config, and its source (the config
  key's comment in the system file names the data sheet or paper; derived values say how);
- ``records`` and ``arrays``: State arrays of its own (with a size, the builder allocates them);
- ``fields``: the record fields it owns and in which entity they live (``gpu``: one record per
  GPU; ``sm``, ``tb``, ``launch``, ``channel`` (one per link direction), ``hbm_channel``,
  ``system``, or a record of its own that it declares in ``records``), with a non-zero initial
  value where the builder must set one;
- ``stats``: groups of statistics (name, unit, description, and the counter field or the formula
  computed at dump time), each group with the scope it repeats over (per GPU, per SM, per link...);
- ``events`` and ``timers``: the integer event kinds its handlers are dispatched by and the
  component timers (one per instance) it arms;
- ``checks``: end-of-run invariants, ``findings`` and ``causes``: what the stuck-run report says
  about it;
- ``debug``: its debug flag, trace category, trace record kinds and their debug-output lines;
- ``start``: compiled functions run once before the first event (not after a checkpoint restore),
  e.g. the scheduler's first kernel launches;
- ``receives``: the packet kinds a GPU receives that the block handles, and the compiled
  handler the run loop dispatches them to (``Receive``), so the hub keeps only its base protocol;
- ``sends``: the request kinds of the hub's request FIFO that the block turns into packets, and
  the compiled packetizer the run loop dispatches the FIFO's head to (``Send``): the send side's
  counterpart of ``receives``;
- ``packets`` and ``requests``: the link packet kinds and hub request kinds it owns, with their
  numbers and names (``Packet``, ``Request``); ``crossings``: the packet kinds a switch's crossbar
  hands to one of its handlers (``Crossing``); ``semantics``: the instructions it adds to the
  SM and their handler (``Semantic``); the dispatch chains by kind are generated from
  ``receives``, ``sends``, ``crossings`` and ``semantics`` (engine/generated.py);
- ``errors``: the runtime error codes its compiled code raises, each with its message
  (``RunError``);
- ``build``: Python functions ``fn(cfg, building)`` the builder runs once the fabric's channel
  records exist, in ``BLOCKS`` order: what the block derives from the config and the built
  fabric - capacities, credits, queue sizes - computed in its own module (``Building`` says
  what a hook may read and set); a bad value raises ValueError naming the key;
- ``on_demand``: a function of the built State saying whether a run uses the block (e.g. the
  config declares a multicast object or a merge group). Given, the block's declared handlers
  (``receives``, ``sends``, ``crossings``, ``semantics`` and its events' ``handler``) are called
  through the entry table (engine/entries.py) and compiled as entry points of their own only for
  a run that uses it (dispatch/indirect.py): a run without it never compiles them. Not given, they
  are direct calls, compiled into the run loop (or the SM's entry point) for every run.

This vocabulary sits under both floors that use it: the engine declares itself with it
(engine/events.py: the event queue's fields and run-wide parameters) and so does every block
(components/), and neither may import the other's floor upward. It imports nothing of the
package and holds no compiled code; as it shapes the State the compiled code reads, it is part of
the Numba cache key all the same (moehub_arch/version.py).

``moehub_arch/composition.py`` builds the State record dtypes, the PARAMS values, the event names,
the timer layout, the stats, the checks, the watchdog report and the debug flags from these
declarations. Nothing here runs per event: the compiled code keeps reading plain record fields
(``st.gpu[g].hub_tx_packets``), so a declaration costs nothing at run time.
"""
import attrs

# Entities are the record arrays of State, named by their State field: ``sys`` (one record), ``gpu``
# (one per GPU), ``sm``, ``tb`` (thread-block slots), ``ch`` (link channels: one per link
# direction), ``ln`` (kernel launches)... Each is declared once (``Record``) by the block that
# owns it; any block may add fields to any entity.

# Stat scopes, in the order the stats are dumped: per GPU (totals named system.gpuN.<stat>), per
# kernel launch of that GPU, per SM, per GPU-level block (system.gpuN.<path>), per link of that
# GPU; then, after every GPU, per switch port and whole-system stats.
GPU_SCOPES = ("gpu_total", "launch", "sm", "gpu", "link")
SYSTEM_SCOPES = ("switch_port", "system", "fabric_link", "nic")
SCOPES = GPU_SCOPES + SYSTEM_SCOPES


def _tuple(x):
    return tuple(x)


@attrs.frozen
class Param:
    """One scalar of the PARAMS record (``State.p[0].<field>``), an int64.

    `key`: the config key it comes from ('' for values the builder computes from the layout);
    `value`: cfg -> int (None: set by the composition or the builder, see `doc`); `source`: the
    public source, or 'config: <key>' when the value is the config's (whose system file names the
    data sheet), or 'derived: ...', or 'assumption: ...'."""
    field: str
    key: str
    unit: str
    doc: str
    value: object = None
    source: str = ""


@attrs.frozen
class Field:
    """A record field (int64) the block owns in `entity`; `init`: the value the builder sets in
    every record (an int, or a function of the config)."""
    entity: str
    name: str
    doc: str
    init: int = 0


@attrs.frozen
class Record:
    """A record array of the block's own (one State array), e.g. the MoE-Hub streams. `count`: a
    function of the config giving the number of records (at least one is allocated); the builder
    then allocates it and State gets the field. None: the builder allocates it itself (the
    records whose number depends on the build, in engine/state.py STATE_FIELDS). `cache_lines`:
    each record starts a CPU cache line (its size rounded up to CACHE_LINE_BYTES, the array
    aligned to one), so the fields declared first - the ones a hot path reads - share one line
    (composition.py). `first`: fields (declared by any block) placed first, in this order, ahead
    of the others' declaration order: a hot path's fields in as few cache lines as possible."""
    name: str
    doc: str
    count: object = None
    cache_lines: bool = False
    first: tuple = ()


@attrs.frozen
class Array:
    """A plain int64 array of the block's own in State (a ring, a table, a histogram): `shape`, a
    function of the config; every element starts at `fill`."""
    name: str
    doc: str
    shape: object
    fill: int = 0


@attrs.frozen
class Stat:
    """One statistic. `value`: a field name of the instance's record, or a function of the
    instance (``Instance``) - formulas (ratios, bandwidths) are computed at dump time. With
    `each` (items, or a function of the instance returning a list or a {k: item} dict), the stat
    repeats for every item: `name` and `desc` are formatted with ``k`` (index or key) and ``v``
    (item), and `value` is called as value(instance, k). `desc` may be a function
    (instance, k) -> text (k None without `each`)."""
    name: str
    unit: str
    desc: object
    value: object
    each: object = attrs.field(default=(), converter=lambda x: x if callable(x) else tuple(x))


@attrs.frozen
class StatGroup:
    """Stats repeated over a scope (SCOPES); `path`: the name below the scope's prefix
    ('hub' -> system.gpu3.hub.<stat>); '' for stats named directly under the prefix."""
    scope: str
    path: str
    stats: tuple = attrs.field(converter=_tuple)
    enabled: object = None   # function of the State: False leaves the group out (e.g. no experts)


@attrs.frozen
class Event:
    """An event kind: `kind` is its integer (unique over all blocks, dense from 0). `enabled`: a
    function of the State, False when the block is off in this run: its event counter
    (system.engine.events.<name>) is then left out, so a block that is off changes no stat."""
    name: str
    kind: int
    doc: str
    enabled: object = None
    # the handler the run loop calls with (st, instance, tick), named like Receive's ("components.
    # cais.merge_table.cais_timeout"): declared by a block compiled on demand (Block.on_demand),
    # whose events the run loop calls through the entry table
    handler: str = None


@attrs.frozen
class Timer:
    """A component timer per instance: `count`: a function (State dims) -> instances; the
    composition places the timers of all blocks one range after another and stores the first
    index of the range in ``State.p.tm_<name>`` (the run loop maps a timer back to its event by
    these bounds). `event`: the event kind its expiry dispatches."""
    name: str
    event: int
    count: object
    doc: str


@attrs.frozen
class Debug:
    """The debug flag (``--debug-flags``), its trace category bit and its trace record kinds."""
    flag: str
    category: int
    records: tuple = attrs.field(default=(), converter=_tuple)
    groups: tuple = attrs.field(default=(), converter=_tuple)   # flags that include it ('MoEHub')
    # record kind -> fn(names, ident, v0, v1) -> (component name, message): the debug-output line
    # (moehub_arch/trace/debug.py; `names` is trace.records.Names of the built system)
    describe: dict = attrs.field(factory=dict)


@attrs.frozen
class Block:
    """Everything a hardware block declares about itself (see the module docstring)."""
    name: str
    doc: str
    params: tuple = attrs.field(default=(), converter=_tuple)
    records: tuple = attrs.field(default=(), converter=_tuple)
    arrays: tuple = attrs.field(default=(), converter=_tuple)
    fields: tuple = attrs.field(default=(), converter=_tuple)
    stats: tuple = attrs.field(default=(), converter=_tuple)
    events: tuple = attrs.field(default=(), converter=_tuple)
    timers: tuple = attrs.field(default=(), converter=_tuple)
    checks: tuple = attrs.field(default=(), converter=_tuple)     # fn(sim, violations)
    findings: tuple = attrs.field(default=(), converter=_tuple)   # fn(sim) -> [lines]
    causes: tuple = attrs.field(default=(), converter=_tuple)     # fn(sim) -> [likely causes]
    debug: tuple = attrs.field(default=(), converter=_tuple)      # Debug, one per flag
    start: tuple = attrs.field(default=(), converter=_tuple)      # compiled fn(st) at run start
    build: tuple = attrs.field(default=(), converter=_tuple)      # fn(cfg, Building) at build
    receives: tuple = attrs.field(default=(), converter=_tuple)   # Receive, one per handler
    sends: tuple = attrs.field(default=(), converter=_tuple)      # Send, one per packetizer
    errors: tuple = attrs.field(default=(), converter=_tuple)     # RunError, its own codes
    packets: tuple = attrs.field(default=(), converter=_tuple)    # Packet, the link packet kinds it owns
    requests: tuple = attrs.field(default=(), converter=_tuple)   # Request, the hub request kinds it owns
    crossings: tuple = attrs.field(default=(), converter=_tuple)  # Crossing, one per switch handler
    semantics: tuple = attrs.field(default=(), converter=_tuple)  # Semantic, one per instruction handler
    on_demand: object = None   # fn(State) -> bool: handlers compiled only for runs that use it


@attrs.frozen
class RunError:
    """A runtime error code the block's compiled code raises (engine ``raise_error``: the run
    stops with status 5 and this text), declared by the block with its number: the composition
    checks it against the engine's codes (engine/state.py ``ERROR_TEXT``) and every other block's,
    so a block adds an error without editing the engine."""
    code: int
    text: str


@attrs.frozen
class Receive:
    """Packet kinds reaching a GPU that one handler of the block takes: ``handler(st, g, c, pkt,
    tick)`` (compiled; g the GPU, c the down-channel), named by its module and function
    ("components.nvls_gpu.receive_multimem") because it may live above the declaring module
    (it completes requests in the hub, which the block's own module sits under). The run loop
    (dispatch/loop.py) dispatches each kind to its handler; tests/test_blocks.py checks that every
    kind a GPU receives has one declared handler and that the loop calls each."""
    kinds: tuple = attrs.field(converter=_tuple)
    handler: str
    doc: str
    # called by address (a row of dispatch/indirect.py's entry table, which keeps a large call
    # tree out of the run loop's compiled module) rather than directly
    by_address: bool = False


@attrs.frozen
class Send:
    """Request kinds of the hub's request FIFO (packet.py ``REQ_*``) that one packetizer of the
    block turns into link packets: ``handler(st, g, r, tick)`` (compiled; g the GPU, r the request
    at the FIFO's head, when the hub's packetizer may emit its next packet). It picks the link,
    builds the packet and hands it to the hub (hub.hub_emit), or waits for link room
    (hub.hub_wait_for_room). Named by module and function like ``Receive`` (it lives above the hub
    it sends through). The run loop (dispatch/loop.py) dispatches each kind to its handler;
    tests/test_blocks.py checks that every request kind has one and that the loop calls each."""
    kinds: tuple = attrs.field(converter=_tuple)
    handler: str
    doc: str


@attrs.frozen
class Packet:
    """A link packet kind the block owns: `kind` is its integer (``State.pk.kind``; unique over all
    blocks and dense from 0, checked by the composition, which composes the names), `name` what
    the debug output and the stuck-run report call it. `response`: it travels in the response
    virtual channel when system.nvlink.response_path is separate (write responses, read data,
    answers: what completes a request), else in the request channel (packet.packet_vc)."""
    name: str
    kind: int
    doc: str
    response: bool = False


@attrs.frozen
class Request:
    """A request kind of the hub's request table and FIFO (``State.req.kind``) the block owns: its
    integer (unique and dense from 0, as ``Packet``) and name; `switched`: it goes to a switch (a
    multicast object, a merge group, a counter), not to one GPU (the stuck-run report says so).
    Its packetizer is declared with ``Send``."""
    name: str
    kind: int
    doc: str
    switched: bool = False


@attrs.frozen
class Crossing:
    """Packet kinds a switch's crossbar hands to one handler of the block when such a packet is at
    the head of an input port's buffer (after its traversal): ``handler(st, c, pkt, tick)``
    (compiled; c the switch's input channel) serves it - a multicast, a reduction, a merge, a
    counter - and returns what the crossbar does next: ``SENT`` (-1: consumed), a GPU g to wait for
    request-channel room toward (num_gpus + g: response-channel room), or another negative value
    to wait for the block's own room. The composition generates the crossbar's dispatch from these
    (engine/extension.py ``switch_serve``); a kind no block declares is routed to its destination
    GPU. `arrival`: the handler runs instead when such a packet reaches the input port, before it
    is buffered, and returns True when it absorbed the packet (a reduction's contribution added
    in place), False to let it be buffered and cross (``switch_absorb``)."""
    kinds: tuple = attrs.field(converter=_tuple)
    handler: str
    doc: str
    arrival: bool = False


@attrs.frozen
class Semantic:
    """Instruction semantics (isa/encoding.py ``SEM_*``) the block adds to the SM: one compiled
    handler ``handler(st, g, sm, slot, row, tick, cyc)`` executes them (g the GPU, sm the SM, slot
    the thread block, row its instruction's row of ``State.code``) and returns True when the
    instruction completed its issue, False when it raised an error or blocked the thread block
    (which then executes it again). The interpreter keeps the base ISA; the dispatch of these is
    generated (engine/extension.py ``execute``)."""
    kinds: tuple = attrs.field(converter=_tuple)
    handler: str
    doc: str


@attrs.define
class Building:
    """What a block's build hook (``Block.build``) reads and sets while the builder makes the State.

    `ch`: the channel records (``ch``), their fabric fields (link class, ends, latency,
    fs_per_byte, rx_credits) set from the topology; a hook sets the fields its block owns.
    `sizes`: named sizes a hook derives and the builder allocates State arrays by (e.g. NVLink's
    ``rxq_cap``: the deepest receive buffer in packets); each name is set by one block."""
    ch: object
    sizes: dict = attrs.Factory(dict)


def fields(entity, *names_docs, init=None):
    """Fields of one entity from (name, doc) pairs or bare names: ``fields('gpu', ('hub_acks',
    'write responses received'), ...)``; `init`: {name: initial value}."""
    init = init or {}
    unknown = set(init) - {nd if isinstance(nd, str) else nd[0] for nd in names_docs}
    if unknown:
        raise ValueError(f"initial values for fields not declared: {sorted(unknown)}")
    out = []
    for nd in names_docs:
        name, doc = (nd, "") if isinstance(nd, str) else nd
        out.append(Field(entity, name, doc, init.get(name, 0)))
    return tuple(out)


def counters(table):
    """Stats from a (name, field, unit, description) table of plain counters."""
    return tuple(Stat(name, unit, desc, field) for name, field, unit, desc in table)


class Instance:
    """What a stat's formula sees: the State, its parameters, the simulated time, the GPU, the
    instance's index in its entity (SM, link, launch, port) and its record(s)."""
    __slots__ = ("st", "p", "sim_ticks", "g", "index", "rec", "tx", "rx", "launch")

    def __init__(self, st, sim_ticks, g=-1, index=-1, rec=None, tx=None, rx=None, launch=None):
        self.st, self.p, self.sim_ticks = st, st.p[0], sim_ticks
        self.g, self.index, self.rec, self.tx, self.rx, self.launch = g, index, rec, tx, rx, launch

    def per_second(self, count):
        """count / simulated seconds (0 for an empty run)."""
        return count / (self.sim_ticks * 1e-12) if self.sim_ticks else 0.0

    def fraction(self, ticks):
        """ticks / simulated ticks (0 for an empty run)."""
        return ticks / self.sim_ticks if self.sim_ticks else 0.0
