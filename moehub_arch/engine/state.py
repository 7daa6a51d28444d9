"""Simulation state: a few record arrays, one per kind of hardware entity (DESIGN rules 1 and 2).

Every mutable runtime value lives in the arrays of one ``State`` namedtuple; parameters live in the
read-only one-element record array ``State.p``. The fields of these records are declared by the
blocks that own them (components/*.py ``BLOCK``) and composed in moehub_arch/composition.py.
Entities with many fields are numpy record arrays (``st.tb[slot].pc``, ``st.ch[c].credits``):
that keeps the field names readable and the number of arrays small. Compiled code receives State
as one pointer to the arrays' descriptors (engine/stateref.py ``state_ref``): passed as the tuple,
Numba flattened every array into separate machine arguments at every call (77 arrays: 665), which
made the cold compile about four times longer. Index conventions:

- GPU ``g`` in ``[0, G)``; SM ``sm = g * S + s``; thread-block slot ``slot = sm * T + j``.
- Link ``l`` of GPU ``g`` is global link ``g * L + l``; its GPU->switch channel is ``2 * link``
  ("up") and its switch->GPU channel ``2 * link + 1`` ("down").
- Requests of GPU ``g``'s hub are ``g * R .. g * R + R - 1``.
"""
import numpy as np

from .stateref import jit_disabled as _jit_disabled


def new_records(dtype, n):
    """A zeroed record array (attribute access to fields in both engines)."""
    return record_view(np.zeros(n, dtype))


def record_view(arr):
    """A structured array as the record array both engines read by field name
    (``st.tb[slot].pc``): a numpy recarray, which Numba types as an array of records. Under the
    pure-Python engine (NUMBA_DISABLE_JIT) the view is a ReferenceRecords instead: the same
    fields, elements and values, with fields looked up first (numpy's record looks a field up
    only after an attribute lookup has failed, and its array indexes in Python): an element's
    field read costs about a quarter of a recarray's, most of a MoE-Hub run's time in that
    engine."""
    if not _jit_disabled():
        return arr.view(np.recarray)
    plain = np.dtype((np.void, arr.dtype))
    element = _REFERENCE_RECORD_TYPES.get(plain)
    if element is None:
        element = _REFERENCE_RECORD_TYPES[plain] = _reference_record_type(plain)
    return arr.view(np.ndarray).view(np.dtype((element, plain))).view(ReferenceRecords)


_REFERENCE_RECORD_TYPES = {}    # structured dtype -> its element type under the reference engine


def _reference_record_type(dtype):
    """The element type of a ReferenceRecords of `dtype`: a numpy record whose attributes are
    looked up among its fields first, and read and written by numpy's own field indexing (so
    values and their types are numpy's, as in a recarray)."""
    fields = frozenset(dtype.names)
    get, put, attribute = np.void.__getitem__, np.void.__setitem__, np.void.__getattribute__

    def __getattribute__(self, name):
        return get(self, name) if name in fields else attribute(self, name)

    def __setattr__(self, name, value):
        if name not in fields:
            raise AttributeError(f"record has no field '{name}'")
        put(self, name, value)

    return type("ReferenceRecord", (np.record,), {
        "__getattribute__": __getattribute__, "__setattr__": __setattr__, "__slots__": ()})


class ReferenceRecords(np.recarray):
    """The pure-Python engine's record array (record_view): a recarray indexed by numpy's own
    C indexing (an element is its ReferenceRecord), field arrays by attribute as a recarray's.
    Pickled as a plain structured array, viewed again on loading."""
    __getitem__ = np.ndarray.__getitem__

    def __array_finalize__(self, obj):
        pass    # keep the element type (a recarray would make it numpy's record again)

    def __reduce__(self):
        plain = self.view(np.ndarray)
        if self.dtype.names is None:    # a field's array (records['pc'])
            return plain.__reduce__()
        return record_view, (plain.view(np.dtype((np.void, self.dtype))),)


# The record dtypes (PARAMS, and one per entity: State.gpu, State.sm, State.ch...) and State
# itself are composed from the blocks' declarations in moehub_arch/composition.py (RECORDS, PARAMS,
# State): each block declares its parameters and fields in its own module (components/*.py BLOCK).


# x86-64 and AArch64 server CPUs move memory in 64-byte cache lines (Intel 64 and IA-32
# Architectures Optimization Reference Manual, sec. 2; Arm Neoverse N1 TRM, L1 data cache)
CACHE_LINE_BYTES = 64


def aligned_zeros(shape, dtype=np.int64):
    """A zeroed array whose first element starts a cache line. numpy's allocator returns
    addresses 16 bytes past one (glibc's chunk header), so an array of 32-byte rows (the event
    heap, the timers, the HBM calendar, the link FIFOs) had every other row straddle two lines:
    two misses where one would do. Layout only: no value changes."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    raw = np.zeros(count * dtype.itemsize + CACHE_LINE_BYTES, np.uint8)
    start = -raw.ctypes.data % CACHE_LINE_BYTES
    return raw[start:start + count * dtype.itemsize].view(dtype).reshape(shape)


RPM_HIST_BINS = 8     # merge-buffer fill at packet emission, in eighths of the buffer
DAM_HIST_BINS = 16    # claimer wait time, bin i: [2^(i-1), 2^i) ns (bin 0: < 1 ns)

# route tables: column 0 = number of candidates, column 1 = round-robin pointer, then candidates
ROUTE_N, ROUTE_RR, ROUTE_FIRST = 0, 1, 2
# response FIFO entries: request id, response kind, ready tick
RESP_REQ, RESP_KIND, RESP_READY = 0, 1, 2

# The arrays the builder allocates itself; State (moehub_arch/composition.py) is these followed by
# every record and array a block declares with its size (declare.py Record.count, Array).
STATE_FIELDS = tuple([
    "p",            # [1] PARAMS
    "sys",          # [1] SYSTEM
    "q",            # [capacity, 4] event heap (engine.events Q_*)
    "ev_count",     # [event kinds] events processed per kind (engine.events.EVENT_NAMES)
    "timer",        # [timers + wheel slots, 4] component timers (tick, the links of their
                    # timing wheel's lists; engine.events TM_*), then the lists' head rows
    "timer_level",  # [wheel levels + the current tick's set] the wheel's occupancy masks, then
                    # the bit set of the current tick's timers (engine.events NOW_*)
    "code",         # [instructions, ROW_WIDTH] assembled program
    "code_issued",  # [instructions] times each instruction was issued (tools/profile_issue.py;
                    # not a stat: it stays out of the golden fingerprints)
    "tb", "regs",   # [slots] THREAD_BLOCK, [slots, NUM_REGS] registers
    "sm", "sm_unit_free", "sm_unit_busy", "sm_wait",  # [SMs] SM; [SMs, units] x2; [SMs, reasons]
    "ln", "ln_params", "ln_per_sm",                   # [launches] LAUNCH; params; TBs per SM
    "gpu",          # [G] GPU
    "wait_list",    # [G, 2, TB slots per GPU] sleeping TBs: WAITLIST_FLAG, WAITLIST_HUB
    "hbm_mem", "smem",  # functional storage: [G, backed bytes], [SMs, smem bytes or 0] uint8
    "hbm_chan",     # [G * C] HBM_CHANNEL
    "mem_cal",      # [G * C + G, windows, 4] paced-arbitration calendar of the HBM channels and
                    # the L2 read ports (components/hbm.py CAL_*)
    "ch", "txq", "rxq",  # [channels] LINK_CHANNEL; transmit FIFOs [channels, depth, 4] (packet,
                    # its ready tick and flits, padded: components/nvlink.py FIFO_*); switch
                    # input FIFOs of packet ids
    "rsq", "rsp_rxq",  # the same for the response virtual channel (transmit FIFO, switch input)
    "wire",         # [channels, both buffers' flits, 2] packets in flight on each channel, in
                    # order (packet, arrival tick)
    "credit_ret",   # [channels, both buffers' flits, 4] credit returns in tick order:
                    # (tick, flits, virtual channel: 0 request, 1 response; padded)
    "gpu_routes", "sw_routes", "sw_inputs",  # routing (see ROUTE_*); sw_inputs[s, 0] = count
    "sw_wait",      # [switches * G * 2, 2 + inputs] input ports blocked per (switch, destination,
                    # virtual channel), row (switch * G + destination) * 2 + vc:
                    # column 0 head, 1 count, then a ring of input channel ids
    "reqq", "respq", "free_reqs",  # hub FIFOs [G, depth], [G, cap, 3]; free request stack [G, R]
    "link_resp",    # [G, G] header-only write responses GPU g owes GPU d for MoE-Hub packets
    "req", "pk", "pk_free",        # [G * R] REQUEST; [P] PACKET; packet free stack
    # MoE-Hub (components/moehub): expert placement [E, 2] (gpu, local slot); streams [G * G];
    # row descriptors [G * G * ring]; windows [G * LE]; tiles [G * LE * tiles_per_window];
    # AAU pending packets [G, cap]; histograms [G, RPM_HIST_BINS], [G, DAM_HIST_BINS]
    "moe_place", "stream", "mrow", "win", "tile", "aau_q", "rpm_hist", "dam_hist",
    "aau_rat",      # [G, record_table_entries, 4] AAU row table in FIFO order (overflow: spill):
                    # window, slot index, stream, row index; window -1 = a released entry's hole
    "trace",        # [capacity, TRACE_COLUMNS] event records, drained by Python (components/trace.py)
])

# thread-block states
TB_EMPTY, TB_READY, TB_WAIT_FLAG, TB_WAIT_FENCE, TB_WAIT_REMOTE, TB_WAIT_HUB, TB_WAIT_CLAIM = range(7)
# a warp group that exited while others of its thread block run: its slot stays reserved until the
# whole block exits (an SM frees a block's resources when the block ends; components/scheduler.py)
TB_RETIRED = 7
# the waiting states' names in timelines and debug output
WAIT_NAMES = {TB_WAIT_FLAG: "wait flag", TB_WAIT_FENCE: "wait fence",
              TB_WAIT_REMOTE: "wait remote result", TB_WAIT_HUB: "wait hub room",
              TB_WAIT_CLAIM: "wait claim (hub tile)"}
# per-GPU lists of sleeping TBs (State.wait_list[g, list]): flag waiters, TBs stalled on the hub
WAITLIST_FLAG, WAITLIST_HUB = 0, 1

# wait reasons for stats (column of State.sm_wait)
WAIT_FLAG, WAIT_FENCE, WAIT_REMOTE, WAIT_HUB, WAIT_CLAIM = range(5)
NUM_WAIT_REASONS = 5
WAIT_REASON_NAMES = ("flag", "fence", "remote", "hub", "claim")

# launch status
LN_PENDING, LN_RUNNING, LN_DONE = range(3)

# runtime error codes (State.sys[0].err_code)
ERR_NONE = 0
ERR_UNBACKED_WORD = 1
ERR_ADDR_RANGE = 2
ERR_UNBACKED_COPY = 3
ERR_BAD_GPU = 4
ERR_DIV_ZERO = 5
ERR_MISALIGNED = 6
ERR_BAD_SIZE = 7
ERR_MOE_EXPERT = 8
ERR_MOE_ROW_SIZE = 9
ERR_MOE_AFTER_EOS = 10
ERR_MOE_RELEASE = 11
ERR_REG_RANGE = 12
ERR_RED_REMOTE = 13
ERR_MOE_CLAIM_LAUNCH = 14
ERR_MULTIMEM_ADDR = 20
ERR_DAM_START_QUEUE = 15
ERR_WAIT_COUNT = 16        # wait.all, wait.lanes: flag count outside 1 .. WAIT_ALL_MAX
ERR_MOE_REOPEN = 17        # notify_ready.reopen before this GPU's streams of the last round finished
ERR_ROWSP_ID = 30          # st.rowsp / rowsp.malloc: allocation id not registered / out of the table
ERR_ROWSP_ROW = 31         # st.rowsp: bytes past the registered row size (or a row's stores exceed it)
ERR_ROWSP_REGISTER = 32    # rowsp.malloc: bad expert or row size
ERR_DY_COUNT = 40          # dymultimem: target count 0 or above system.switch.nvls.dysharp.max_targets
ERR_DY_TARGET = 41         # dymultimem: a target outside the object's experts, or named twice
ERR_DY_ROW = 42            # dymultimem: the range crosses an algebraic row of the object
ERR_DY_LAYOUT_FULL = 43    # dymultimem.st: a target's receive layout has no free row
ERR_DY_UNPLACED = 44       # dymultimem.ld_reduce: a target holds no layout row for the token
ERR_MULTI_EMPTY = 45       # send_to_experts / st.rowsp.experts: the mask names no expert
ERR_MULTI_GPUS = 46        # ... experts on different GPUs, or one expert (or id) named twice
ERR_MULTI_MANY = 47        # ... mask bits outside 0-7, registers past r31, more than a row ring holds
ERR_CAIS_ADDR = 50         # ld.cais / red.cais / sync.cais: address outside every registered group of this GPU and the home
ERR_CW_COUNTER = 60        # put.counted / wait.count: counter not an aligned backed word, or a counted put to another node
ERROR_TEXT = {
    ERR_CW_COUNTER: "counted write (put.counted, put.sm.counted, wait.count) whose counter is not an "
                    "aligned 8-byte word of a buffer in the control region (counters must be backed "
                    "memory: declare the counters as a buffer with region: control), or a counted "
                    "put to a GPU of another node (counted writes are an NVLink feature here)",
    ERR_DY_COUNT: "dymultimem target count of 0 or above system.switch.nvls.dysharp.max_targets",
    ERR_DY_TARGET: "dymultimem target list names an expert outside its dynamic object (0 .. "
                   "targets_per_gpu x GPUs - 1, on a member GPU) or names one expert twice",
    ERR_DY_ROW: "dymultimem range crosses an algebraic row of its dynamic object (offset + bytes "
                "above workload.multicast[].row_bytes)",
    ERR_DY_LAYOUT_FULL: "dymultimem.st: a target expert's receive layout is full (more rows than "
                        "the layout rows of workload.multicast[].buffer)",
    ERR_DY_UNPLACED: "dymultimem.ld_reduce of a token whose row was never placed at one of its "
                     "targets (no dymultimem.st of that algebraic row to that expert before)",
    ERR_MULTI_EMPTY: "multi-expert store (send_to_experts, st.rowsp.experts) whose mask names no "
                     "expert (value: the mask)",
    ERR_MULTI_GPUS: "multi-expert store naming experts placed on different GPUs (with "
                    "system.gpu.hub.moe.internode: per_node, on different other nodes, or on "
                    "this node's GPUs and another's), or one expert twice (also through two "
                    "allocation ids of one expert): one store moves a row to one GPU, once per "
                    "expert (value: the expert, or id, that broke the rule)",
    ERR_MULTI_MANY: "multi-expert store naming too many experts: mask bits outside 0-7 (a store "
                    "names at most 8, one register each), registers past r31, or more experts than "
                    "a row ring holds (system.gpu.hub.moe.rpm.row_queue_depth) (value: the mask)",
    ERR_ROWSP_ID: "st.rowsp names an allocation id that this GPU's hub has not registered "
                  "(rowsp.malloc), or an id outside 0 .. system.gpu.hub.moe.rpm.allocation_ids - 1",
    ERR_ROWSP_ROW: "st.rowsp bytes outside the row registered for its allocation id (offset + bytes "
                   "above the registered row size, the row's stores together above it, a negative "
                   "offset or row, or no bytes; st.rowsp.experts: bytes other than a named id's "
                   "registered row size - it stores whole rows - or a named row already stored to)",
    ERR_CAIS_ADDR: "ld.cais / red.cais address outside every registered CAIS group (workload.cais: a "
                   "buffer and its GPUs) that holds both this GPU and the home GPU, or the range runs "
                   "past the group's buffer; or a sync.cais flag outside every group holding this "
                   "GPU",
    ERR_ROWSP_REGISTER: "rowsp.malloc of an expert id out of range (workload.moe.num_experts) or a "
                        "row size of 0 or above the window slot (workload.moe.row_bytes)",
    ERR_MOE_EXPERT: "expert id out of range (workload.moe.num_experts), or claim/release of an expert "
                    "that is not placed on this GPU",
    ERR_MOE_ROW_SIZE: "send_to_expert row larger than the window slot (workload.moe.row_bytes) or empty",
    ERR_MOE_AFTER_EOS: "send_to_expert after this GPU's end of stream (notify_ready.eos)",
    ERR_MOE_REOPEN: "notify_ready.reopen while a stream of this GPU's last round (to or from any "
                    "GPU) has not finished - every round must end (notify_ready.eos on every GPU, "
                    "every EOS received) and, with system.gpu.hub.moe.dam.consumers: launch, the DAM's "
                    "consumer launch must have started its last block - or on a system with "
                    "system.gpu.hub.moe.internode: per_node (its forwarding units keep no rounds)",
    ERR_MOE_RELEASE: "notify_ready.release of an address that is not the base of a claimed, unreleased tile",
    ERR_UNBACKED_WORD: "word or element access to the data region, which timing mode does not back "
                       "with storage (keep flags, counters and tables in buffers with region: control)",
    ERR_ADDR_RANGE: "address out of range (HBM capacity, the TB's shared-memory allocation, or a "
                    "shared-memory address where only HBM is allowed)",
    ERR_UNBACKED_COPY: "copy from the unbacked data region into the control region in timing mode",
    ERR_BAD_GPU: "GPU index out of range",
    ERR_DIV_ZERO: "integer division by zero",
    ERR_MISALIGNED: "misaligned address (words and flags need 8-byte alignment)",
    ERR_BAD_SIZE: "negative or zero size",
    ERR_REG_RANGE: "vector load past r31 (ld.vN dst needs dst + N - 1 <= 31)",
    ERR_RED_REMOTE: "red.add targets another GPU; posted reductions are local (use atom.add for peers)",
    ERR_WAIT_COUNT: "wait.all flag count outside 1 .. 1024 (wait.lanes too: one flag per thread "
                    "of a block; the value shown is the count)",
    ERR_MULTIMEM_ADDR: "multimem address outside every multicast object this GPU is a member of "
                       "(workload.multicast: a buffer and its GPUs), or the range runs past the object",
    ERR_MOE_CLAIM_LAUNCH: "claim_buffer with system.gpu.hub.moe.dam.consumers: launch in the first "
                          "round (the DAM starts the consumers of ready tiles itself; use consumers: "
                          "claim; after notify_ready.reopen the new round's tiles are claimed)",
    ERR_DAM_START_QUEUE: "the DAM started more thread blocks than are placed and held tiles can "
                         "account for: a kernel released a tile (notify_ready.release) before "
                         "every block of its groups was placed",
}
