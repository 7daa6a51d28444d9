"""Simulation state: a few record arrays, one per kind of hardware entity (DESIGN rules 1 and 2).

Every mutable runtime value lives in the arrays of one ``State`` namedtuple; parameters live in the
read-only one-element record array ``State.p``. Entities with many fields are numpy record arrays
(``st.tb[slot].pc``, ``st.ch[c].credits``): that keeps the field names readable and the number of
arrays small, which matters because Numba flattens every array of a tuple argument into separate
machine arguments at every call (about 150 plain arrays took six minutes to compile; these ~30 take
seconds). Index conventions:

- GPU ``g`` in ``[0, G)``; SM ``sm = g * S + s``; thread-block slot ``slot = sm * T + j``.
- Link ``l`` of GPU ``g`` is global link ``g * L + l``; its GPU->switch channel is ``2 * link``
  ("up") and its switch->GPU channel ``2 * link + 1`` ("down").
- Requests of GPU ``g``'s hub are ``g * R .. g * R + R - 1``.
"""
from collections import namedtuple

import numpy as np


_RESERVED = set(dir(np.record))


def _record(*names):
    # In the pure-Python engine `rec.x` resolves numpy's own attributes before fields (a field
    # called `nbytes` would read the record's byte size), so such names are refused here.
    clash = [n for n in names if n in _RESERVED]
    if clash:
        raise ValueError(f"record field names {clash} shadow numpy.record attributes")
    return np.dtype([(n, np.int64) for n in names])


def new_records(dtype, n):
    """A zeroed record array (attribute access to fields in both engines)."""
    return np.zeros(n, dtype).view(np.recarray)


# Scalar parameters, all integers (ticks are ps, *_fs are femtoseconds).
PARAMS = _record(
    "num_gpus", "sms_per_gpu", "slots_per_sm", "issue_width", "functional",
    "sm_period_fs", "tb_launch_cycles", "smem_bytes", "smem_latency_cycles", "kernel_launch_ticks",
    "hbm_channels", "hbm_interleave", "hbm_fs_per_byte_channel", "hbm_latency_cycles",
    "hbm_atomic_cycles", "hbm_capacity", "hbm_min_access",
    "mem_arbitration", "mem_window_ticks",  # components/hbm.py: MEMORY_ARBITRATION index, calendar window
    "hbm_queue_ticks", "l2_queue_ticks",    # drain of a full controller queue (HBM channel, L2 port)
    "l2_fs_per_byte", "l2_latency_cycles",
    "l2_link_writes",
    "links_per_gpu", "num_switches", "max_payload", "store_payload", "write_resp_per_packet",
    "header_bytes", "flit_bytes",
    "response_vc",  # 1: responses travel in their own virtual channel (nvlink.response_path: separate)
    "cut_through",  # 1: switches forward a packet once its header is in (switch.forwarding)
    "link_fs_per_byte", "link_latency_ticks", "rx_buffer_flits", "switch_traversal_ticks",
    "hub_ticks_per_packet", "hub_tx_latency_ticks", "hub_rx_latency_ticks", "reqs_per_gpu",
    # MoE-Hub control plane (components/moehub): experts, windows, RPM / AAU / DAM parameters
    "num_experts", "local_experts", "window_rows", "row_bytes", "tile_rows", "tiles_per_window",
    "win_addr", "rec_addr", "record_bytes", "records_cap",
    "aau_spill", "rat_spill_addr",  # AAU row table: 1 = spill to device memory when full; spill area
    "rpm_merge_bytes", "rpm_packet_bytes", "rpm_flush_ticks", "rpm_ring", "rpm_header_bytes", "rpm_ticks_per_packet",
    "rpm_policy", "rpm_schedule", "aau_alloc_ticks", "aau_staging", "dam_notify_ticks",
    "dam_launch_mode",  # 1: the DAM starts consumer thread blocks (dam.consumers: launch)
    # event records for timelines and debug output (components/trace.py): categories recorded
    # (0: off, set by Python between batches) and the fill level that returns to Python
    "trace_mask", "trace_limit",
    "packet_train",  # link packets simulated as one (run.packet_train; 1 = exact)
    # first timer index of each block kind (engine.events: component timers; SMs start at 0)
    "tm_ch_tx", "tm_ch_arrive", "tm_xbar", "tm_hub", "tm_rpm", "tm_count",
)

# Whole-run bookkeeping: event-queue counters, packet-pool stack top, the first runtime error.
SYSTEM = _record("q_size", "q_next_seq", "q_events", "q_now", "q_peak", "pk_top", "pk_peak",
                 "err_code", "err_slot", "err_pc", "err_value",
                 "trace_n", "trace_full", "trace_lost")  # records in State.trace (components/trace.py)

# Thread-block slots (T per SM).
THREAD_BLOCK = _record(
    "state",        # TB_* below
    "pc",           # absolute program counter
    "ready",        # tick from which the TB may issue again
    "launch",       # launch index of the resident TB, -1 if empty
    "outstanding",  # asynchronous operations not yet completed (fence waits for 0)
    "wait_addr", "wait_cmp", "wait_value",  # flag-wait condition (wait.* instructions)
    "wait_start",   # tick at which the current wait began (wait-time stats)
    "smem_base", "smem_bytes",  # the TB's shared-memory allocation within its SM
    "trace_act",    # activity last recorded for the timeline (components/trace.py ACT_*)
    "progress",     # tick of the TB's start or its last instruction touching memory, the hub or
                    # the links (livelock detection, watchdog.LivelockWatchdog)
)

SM = _record(
    "next_issue",   # tick of the scheduled issue event, -1 while the SM sleeps
    "rr",           # round-robin pointer over TB slots (issue arbitration)
    "resident",     # resident TB count
    "active_since",  # tick at which the SM last went from 0 to >=1 resident TBs
    "insts", "tbs_launched", "active_ticks",  # stats
)

LAUNCH = _record("gpu", "entry_pc", "grid", "next_in_stream", "smem", "max_per_sm",
                 "dispatched", "finished", "status", "start", "end",
                 "host_delay",  # host-side time before the launch is issued (e.g. a host sync)
                 "tx_wire",     # link wire bytes its GPU's hub sent for its requests and rows
                 "dam_tile_tbs",  # TBs the DAM starts per ready tile (0: an ordinary launch)
                 "granted")     # TBs that may be placed (grid, or what the DAM started so far)

# Per-GPU state of the block scheduler, the flag waiters, the hub and the HBM counters.
GPU = _record(
    "rr_sm", "waiters",
    "hub_next_tx", "hub_blocked", "hub_blocked_since", "hub_tb_waiters",
    "hub_req_free",  # tick from which the packetizer may emit the next request packet
    "reqq_head", "reqq_count", "respq_head", "respq_count", "free_top",
    "hub_requests", "hub_tx_packets", "hub_tx_payload", "hub_rx_packets", "hub_rx_payload",
    "hub_stall_ticks", "hub_reqq_peak", "hub_respq_peak", "hub_rx_first", "hub_rx_last", "hub_acks",
    "link_resp_total", "link_resp_rr",  # link-level write responses owed (State.link_resp), RR pointer
    "hbm_read_bytes", "hbm_write_bytes", "hbm_accesses", "hbm_atomics",
    "hbm_paced_accesses", "mem_beyond_calendar",  # paced arbitration (components/hbm.py)
    "l2_free", "l2_busy", "l2_read_bytes", "l2_link_write_bytes",
    # MoE-Hub: RPM packetizer, end-of-stream notes, AAU pending-packet FIFO, DAM source count
    "rpm_next_tx", "rpm_blocked", "rpm_blocked_since", "rpm_rr", "eos_notes", "loop_inflight",
    "aau_staged", "aau_q_count", "aau_stall_since", "records_live", "dam_sources_done",
    "rpm_rows", "rpm_packets", "rpm_payload", "rpm_wire", "rpm_stall_ticks", "rpm_flushes",
    "rpm_accept_stalls", "aau_allocs", "aau_stalls", "aau_stall_ticks", "aau_records_written",
    "aau_records_peak", "aau_window_peak", "dam_tiles_ready", "dam_claims", "dam_zero_claims",
    "dam_notifies", "dam_eos_received", "combine_rows",
    # where MoE-Hub packets wait for memory: RPM source reads, AAU destination writes (sums)
    "rpm_read_wait", "aau_data_packets", "aau_write_wait",
    # AAU row address table with overflow: spill (State.aau_rat: a FIFO ring with holes of released
    # entries): ring head, ring span, entries on chip; spills, refills, time packets waited for refills
    "rat_head", "rat_span", "rat_live", "aau_spills", "aau_refills", "aau_refill_wait",
    # DAM with consumers: launch: the GPU's DAM-started launch (-1: none), every tile started
    "dam_launch", "dam_launch_final",
)

HBM_CHANNEL = _record("free", "busy")  # free: tick the queued transfers end; busy: stat

LINK_CHANNEL = _record(
    "to_switch", "gpu", "switch", "port",     # 1 for GPU->switch channels; endpoints of the link
    "busy_until", "credits",
    "cr_head", "cr_count",                    # credit returns in flight (ids in State.credit_ret)
    "txq_head", "txq_count", "txq_cap",       # transmit FIFO (ids in State.txq)
    "txq_pkts",                               # link packets queued (trains count their packets)
    "wire_head", "wire_count",                # packets on the wire, in order (ids in State.wire)
    "rxq_head", "rxq_count",                  # switch input buffer (ids in State.rxq)
    # the response virtual channel (nvlink.response_path: separate): its transmit FIFO (ids in
    # State.rsq), its credits (the receiver's response buffer), its switch input buffer (ids in
    # State.rsp_rxq) and whether that input waits for output room
    "rsq_head", "rsq_count", "rsq_cap", "rsq_pkts", "rsp_credits",
    "rsp_rxq_head", "rsp_rxq_count", "rsp_xbar_blocked", "rsp_xbar_blocked_since",
    "tx_at", "xbar_pending", "xbar_blocked", "xbar_blocked_since",
    "credit_blocked", "credit_blocked_since",
    "tx_packets", "tx_wire_bytes", "tx_payload_bytes", "tx_busy", "credit_stall", "txq_peak",
    "rx_packets", "rx_wire_bytes", "rx_payload_bytes", "rxq_peak", "xbar_blocked_ticks",
    "rsq_peak", "rsp_rxq_peak", "rsp_xbar_blocked_ticks",  # response virtual channel stats
)

# MoE-Hub byte stream from one GPU's RPM to one GPU (index src * G + dst).
STREAM = _record(
    "accepted",     # stream bytes accepted (row headers + data), i.e. the stream's end offset
    "sent",         # stream bytes packetized
    "head", "tail",  # row descriptors: next to accept, oldest not yet landed (monotonic counters)
    "oldest",       # acceptance tick of the oldest unsent byte's row (-1: nothing unsent)
    "eos_pending", "eos_sent",  # end of stream requested / EOS marker sent
    "recv", "total", "eos_seen", "done",  # receiver side: bytes processed, final size, finished
    "allocs",       # receiver side: rows of the stream given a window slot (parked packets' stamp)
)
# Row descriptors in flight, ring of rpm_ring entries per stream (the header travelling with the row).
MOE_ROW = _record("expert", "src_addr", "length", "home", "aux", "start", "alloc", "recv", "done",
                  "slot", "accept_tick", "launch",  # launch: of the TB that sent it (wire-byte stats)
                  "rat")  # its AAU row-table entry: RAT_* (components/moehub/aau.py)
# One expert's receive window (index gpu * local_experts + local slot) and its tiles.
WINDOW = _record("alloc", "released_tiles", "next_claim", "ended", "waiters")
TILE = _record("index", "rows_alloc", "rows_landed", "landed_visible", "closed", "ready", "claimed",
               "released")
RPM_HIST_BINS = 8     # merge-buffer fill at packet emission, in eighths of the buffer
DAM_HIST_BINS = 16    # claimer wait time, bin i: [2^(i-1), 2^i) ns (bin 0: < 1 ns)

REQUEST = _record("kind", "slot", "src_gpu", "dst_gpu", "dst_addr", "src_addr", "length", "sent",
                  "resp_sent", "pkts_total", "pkts_arrived", "acks_total", "acks_due",
                  "acks_arrived", "acks_ready", "value", "ret_reg",
                  "launch")  # launch of the issuing TB (wire-byte stats)
# acks_*: write responses (components/hub.py): link packets to acknowledge in all (requester),
# owed but not yet sent (serving hub), received (requester), tick the owed ones may leave

PACKET = _record("kind", "req", "src", "dst", "addr", "src_addr", "payload", "flits", "ready",
                 "value", "npk")  # npk: link packets it stands for (1, or a train: run.packet_train)

# route tables: column 0 = number of candidates, column 1 = round-robin pointer, then candidates
ROUTE_N, ROUTE_RR, ROUTE_FIRST = 0, 1, 2
# response FIFO entries: request id, response kind, ready tick
RESP_REQ, RESP_KIND, RESP_READY = 0, 1, 2

State = namedtuple("State", [
    "p",            # [1] PARAMS
    "sys",          # [1] SYSTEM
    "q",            # [capacity, 5] event heap (engine.events)
    "ev_count",     # [event kinds] events processed per kind (engine.events.EVENT_NAMES)
    "timer", "timer_tree",  # [leaves, 2] component timers (tick, seq); [2 * leaves] their tree
    "code",         # [instructions, ROW_WIDTH] assembled program
    "tb", "regs",   # [slots] THREAD_BLOCK, [slots, NUM_REGS] registers
    "sm", "sm_unit_free", "sm_unit_busy", "sm_wait",  # [SMs] SM; [SMs, units] x2; [SMs, reasons]
    "ln", "ln_params", "ln_per_sm",                   # [launches] LAUNCH; params; TBs per SM
    "gpu",          # [G] GPU
    "wait_list",    # [G, 2, TB slots per GPU] sleeping TBs: WAITLIST_FLAG, WAITLIST_HUB
    "hbm_mem", "smem",  # functional storage: [G, backed bytes], [SMs, smem bytes or 0] uint8
    "hbm_chan",     # [G * C] HBM_CHANNEL
    "mem_cal",      # [G * C + G, windows, 5] paced-arbitration calendar of the HBM channels and
                    # the L2 read ports (components/hbm.py CAL_*)
    "ch", "txq", "rxq",  # [channels] LINK_CHANNEL; FIFOs of packet ids
    "rsq", "rsp_rxq",  # the same for the response virtual channel (transmit FIFO, switch input)
    "wire",         # [channels, both buffers' flits] packets in flight on each channel, in order
    "credit_ret",   # [channels, both buffers' flits, 3] credit returns in tick order:
                    # (tick, flits, virtual channel: 0 request, 1 response)
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
ERROR_TEXT = {
    ERR_MOE_EXPERT: "expert id out of range (workload.moe.num_experts), or claim/release of an expert "
                    "that is not placed on this GPU",
    ERR_MOE_ROW_SIZE: "send_to_expert row larger than the window slot (workload.moe.row_bytes) or empty",
    ERR_MOE_AFTER_EOS: "send_to_expert after this GPU's end of stream (notify_ready.eos)",
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
    ERR_MOE_CLAIM_LAUNCH: "claim_buffer with system.gpu.hub.moe.dam.consumers: launch (the DAM starts "
                          "the consumers of ready tiles itself; use consumers: claim)",
}
