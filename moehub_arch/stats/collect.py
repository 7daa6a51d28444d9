"""Stat declarations per component and their collection from the final State.

Each table row is (stat name, State array field, unit, description): the single place where a
component's statistics are documented (``moehub-sim stats --list`` prints them). Formulas
(utilisation, bandwidth) are computed here, at dump time, from the raw counters.
"""
from ..engine.events import EVENT_NAMES
from ..engine.state import (DAM_HIST_BINS, LN_DONE, NUM_WAIT_REASONS, RPM_HIST_BINS,
                            WAIT_REASON_NAMES)
from ..isa.encoding import UNIT_NAMES
from .registry import StatsSet

SM_STATS = (
    ("insts_issued", "insts", "instructions", "instructions issued"),
    ("tbs_launched", "tbs_launched", "count", "thread blocks placed on this SM"),
    ("active_ticks", "active_ticks", "ps", "time with at least one resident thread block"),
)
# fields of the per-GPU record (engine.state.GPU)
HBM_STATS = (
    ("read_bytes", "hbm_read_bytes", "bytes", "bytes read"),
    ("write_bytes", "hbm_write_bytes", "bytes", "bytes written"),
    ("accesses", "hbm_accesses", "count", "accesses (bulk accesses count once)"),
    ("atomics", "hbm_atomics", "count", "atomic read-modify-writes performed at memory"),
    ("paced_accesses", "hbm_paced_accesses", "count",
     "accesses streamed over their instruction's duration (system.gpu.hbm.arbitration: paced)"),
    ("beyond_calendar_ticks", "mem_beyond_calendar", "ps",
     "channel and L2 work past the paced-arbitration calendar's horizon, served at full rate "
     "(an approximation; 0 unless memory is oversubscribed by more than the horizon)"),
)
HUB_STATS = (
    ("requests", "hub_requests", "count", "remote operations accepted from SMs"),
    ("tx_packets", "hub_tx_packets", "packets", "packets emitted by the packetizer"),
    ("tx_payload_bytes", "hub_tx_payload", "bytes", "payload bytes emitted"),
    ("rx_packets", "hub_rx_packets", "packets", "packets received"),
    ("rx_payload_bytes", "hub_rx_payload", "bytes", "payload bytes received"),
    ("stall_ticks", "hub_stall_ticks", "ps", "time the packetizer waited for link transmit-queue room"),
    ("request_queue_peak", "hub_reqq_peak", "entries", "peak occupancy of the request FIFO"),
    ("response_queue_peak", "hub_respq_peak", "entries", "peak occupancy of the response FIFO"),
    ("acks_received", "hub_acks", "count",
     "write responses received (one per write packet with system.nvlink.write_responses: "
     "per_packet, one per put or flag store with per_request)"),
    ("rx_first_tick", "hub_rx_first", "ps", "arrival of the first data packet (-1: none)"),
    ("rx_last_tick", "hub_rx_last", "ps", "arrival of the last data packet (-1: none)"),
)
# MoE-Hub control plane (components/moehub), fields of the per-GPU record
RPM_STATS = (
    ("rows_accepted", "rpm_rows", "rows", "rows taken by send_to_expert"),
    ("packets", "rpm_packets", "packets", "packets emitted (data and end-of-stream)"),
    ("payload_bytes", "rpm_payload", "bytes", "stream bytes sent (row headers + row data)"),
    ("wire_bytes", "rpm_wire", "bytes", "bytes on the wire for those packets (link headers included)"),
    ("flushes", "rpm_flushes", "packets", "partly filled packets sent because the flush timeout expired"),
    ("stall_ticks", "rpm_stall_ticks", "ps", "time the RPM had a packet ready but no link queue room"),
    ("accept_stalls", "rpm_accept_stalls", "count", "send_to_expert attempts refused: row ring full"),
    ("read_wait_ticks", "rpm_read_wait", "ps", "sum over data packets of the time from packetizing "
     "to their payload read from local HBM (a link sends its head packet only once it is read)"),
)
AAU_STATS = (
    ("allocations", "aau_allocs", "rows", "window slots allocated"),
    ("alloc_stalls", "aau_stalls", "packets", "packets that waited for window or record-table space"),
    ("alloc_stall_ticks", "aau_stall_ticks", "ps", "time packets were waiting for space"),
    ("window_peak_rows", "aau_window_peak", "rows", "peak live rows in one expert window"),
    ("records_written", "aau_records_written", "records", "completion records written"),
    ("records_peak", "aau_records_peak", "records", "peak live completion records"),
    ("data_packets", "aau_data_packets", "packets", "data packets written on arrival (not parked)"),
    ("write_wait_ticks", "aau_write_wait", "ps", "sum over those packets of the time from the AAU "
     "taking them to HBM having absorbed their writes (their link buffer space is held meanwhile)"),
    ("spills", "aau_spills", "entries", "row-table entries evicted to device memory (overflow: spill)"),
    ("refills", "aau_refills", "entries", "evicted row-table entries read back for a later packet "
     "of their row (overflow: spill)"),
    ("refill_wait_ticks", "aau_refill_wait", "ps", "sum of the time packets waited for those reads"),
)
DAM_STATS = (
    ("tiles_ready", "dam_tiles_ready", "tiles", "tiles made ready"),
    ("claims", "dam_claims", "tiles", "tiles handed to claim_buffer"),
    ("zero_claims", "dam_zero_claims", "count", "claims answered with zero rows (stream ended)"),
    ("notifications", "dam_notifies", "count", "notify_ready calls (eos and release)"),
    ("eos_received", "dam_eos_received", "count", "end-of-stream packets received"),
)
# (suffix, channel field, unit, description); GPU-side names use the up channel for tx and the down
# channel for rx; switch ports the opposite. tx counters are taken at the sender, rx at the receiver.
TX_STATS = (
    ("packets", "tx_packets", "packets", "packets transmitted"),
    ("wire_bytes", "tx_wire_bytes", "bytes", "bytes on the wire (headers and flit padding included)"),
    ("payload_bytes", "tx_payload_bytes", "bytes", "payload bytes transmitted"),
    ("busy_ticks", "tx_busy", "ps", "time the transmitter was serialising"),
    ("credit_stall_ticks", "credit_stall", "ps", "time the head packet waited for credits"),
    ("queue_peak", "txq_peak", "packets", "peak transmit-queue occupancy"),
    ("response_queue_peak", "rsq_peak", "packets",
     "peak response-channel transmit-queue occupancy (system.nvlink.response_path: separate)"),
)
RX_STATS = (
    ("packets", "rx_packets", "packets", "packets received"),
    ("wire_bytes", "rx_wire_bytes", "bytes", "bytes received on the wire"),
    ("payload_bytes", "rx_payload_bytes", "bytes", "payload bytes received"),
)


def _dir_stats(out, prefix, direction, ch, sim_ticks):
    """Stats of one link direction; `ch` is the channel's record."""
    for suffix, field, unit, desc in (TX_STATS if direction == "tx" else RX_STATS):
        out.add(f"{prefix}.{direction}_{suffix}", ch[field], unit, desc)
    if direction == "tx":
        out.add(f"{prefix}.tx_utilization", ch.tx_busy / sim_ticks if sim_ticks else 0.0, "ratio",
                "fraction of time the transmitter was serialising")
        out.add(f"{prefix}.tx_payload_GBps", ch.tx_payload_bytes / (sim_ticks * 1e-12) / 1e9
                if sim_ticks else 0.0, "GB/s", "payload bandwidth averaged over the run")


def collect_stats(st, launches, program, host_seconds, compile_seconds, sim_ticks=None):
    """All stats of a finished run, in dump order (root stats first); `sim_ticks`: the time of a
    periodic dump during the run (default: the tick of the last event)."""
    out = StatsSet()
    p = st.p[0]
    G, S, L = int(p.num_gpus), int(p.sms_per_gpu), int(p.links_per_gpu)
    sim_ticks = int(st.sys[0].q_now) if sim_ticks is None else int(sim_ticks)
    events = int(st.sys[0].q_events)
    insts = int(st.sm.insts.sum())
    out.add("simTicks", sim_ticks, "ps", "simulated time (tick of the last event)")
    out.add("simSeconds", sim_ticks * 1e-12, "s", "simulated time")
    out.add("simFreq", 10 ** 12, "ticks/s", "ticks per simulated second")
    out.add("simInsts", insts, "instructions", "instructions issued by all SMs")
    out.add("simEvents", events, "count", "events processed by the run loop")
    out.add("simCompleted", int((st.ln.status == LN_DONE).all()), "",
            "1 if every kernel launch finished; 0 if the run stopped before (a limit, a deadlock, "
            "the watchdog, a runtime error)")
    out.add("hostSeconds", host_seconds, "s", "wall-clock time of the run loop (compile excluded)")
    out.add("hostCompileSeconds", compile_seconds, "s", "wall-clock time to load or compile the engine")
    out.add("hostInstRate", insts / host_seconds if host_seconds > 0 else 0.0, "instructions/s",
            "simulated instructions per host second")
    out.add("hostEventRate", events / host_seconds if host_seconds > 0 else 0.0, "events/s",
            "events per host second")
    out.add("system.packets.pool_peak", st.sys[0].pk_peak, "packets", "peak packets in flight")
    out.add("system.engine.queue_peak", st.sys[0].q_peak, "events",
            "peak number of pending events in the event queue")
    for k, name in enumerate(EVENT_NAMES):
        out.add(f"system.engine.events.{name}", st.ev_count[k], "count",
                f"events of kind '{name}' processed (engine.events)")

    for g in range(G):
        gp = f"system.gpu{g}"
        gsl = slice(g * S, (g + 1) * S)
        out.add(f"{gp}.insts_issued", st.sm.insts[gsl].sum(), "instructions",
                "instructions issued by this GPU's SMs")
        for l in launches:
            if l.gpu != g:
                continue
            pre = f"{gp}.launch{l.index}"
            start, end = int(st.ln[l.index].start), int(st.ln[l.index].end)
            out.add(f"{pre}.start_tick", start, "ps", f"start of kernel '{l.kernel}' (stream {l.stream})")
            out.add(f"{pre}.end_tick", end, "ps", f"end of kernel '{l.kernel}' (last TB exit)")
            out.add(f"{pre}.ticks", end - start if end >= 0 else -1, "ps",
                    f"duration of kernel '{l.kernel}'")
            out.add(f"{pre}.tbs", l.grid, "count", f"thread blocks of kernel '{l.kernel}'")
        for s in range(S):
            sm = g * S + s
            pre = f"{gp}.sm{s}"
            for name, field, unit, desc in SM_STATS:
                out.add(f"{pre}.{name}", st.sm[sm][field], unit, desc)
            for u, uname in enumerate(UNIT_NAMES):
                out.add(f"{pre}.{uname}_busy_ticks", st.sm_unit_busy[sm, u], "ps",
                        f"time the {uname} unit was occupied")
            for w in range(NUM_WAIT_REASONS):
                out.add(f"{pre}.wait_{WAIT_REASON_NAMES[w]}_ticks", st.sm_wait[sm, w], "ps",
                        f"thread-block time spent waiting ({WAIT_REASON_NAMES[w]}), summed over TBs")
        gr = st.gpu[g]
        pre = f"{gp}.hbm"
        for name, field, unit, desc in HBM_STATS:
            out.add(f"{pre}.{name}", gr[field], unit, desc)
        C = int(p.hbm_channels)
        busy = st.hbm_chan.busy[g * C:(g + 1) * C].sum()
        out.add(f"{pre}.utilization", busy / (C * sim_ticks) if sim_ticks else 0.0, "ratio",
                "mean fraction of time the channels were transferring")
        total = gr.hbm_read_bytes + gr.hbm_write_bytes
        out.add(f"{pre}.bandwidth_GBps", total / (sim_ticks * 1e-12) / 1e9 if sim_ticks else 0.0,
                "GB/s", "bytes read and written per second, averaged over the run")
        out.add(f"{gp}.l2.shared_read_bytes", gr.l2_read_bytes, "bytes",
                "reads served by the L2 (mma operands marked L2-resident: weights, shared row tiles)")
        out.add(f"{gp}.l2.link_write_bytes", gr.l2_link_write_bytes, "bytes",
                "writes from the links absorbed by the L2 (system.gpu.l2.link_writes: write_back)")
        out.add(f"{gp}.l2.utilization", gr.l2_busy / sim_ticks if sim_ticks else 0.0, "ratio",
                "fraction of time the L2 read port was transferring")
        pre = f"{gp}.hub"
        for name, field, unit, desc in HUB_STATS:
            out.add(f"{pre}.{name}", gr[field], unit, desc)
        _moe_stats(out, st, g, f"{gp}.hub")
        for l in range(L):
            link = g * L + l
            pre = f"{gp}.nvlink{l}"
            _dir_stats(out, pre, "tx", st.ch[2 * link], sim_ticks)
            _dir_stats(out, pre, "rx", st.ch[2 * link + 1], sim_ticks)

    up = [c for c in range(st.ch.shape[0]) if st.ch[c].to_switch]
    for s in range(int(p.num_switches)):
        for c in sorted((c for c in up if st.ch[c].switch == s), key=lambda c: st.ch[c].port):
            pre = f"system.switch{s}.port{st.ch[c].port}"
            _dir_stats(out, pre, "rx", st.ch[c], sim_ticks)
            _dir_stats(out, pre, "tx", st.ch[c + 1], sim_ticks)
            out.add(f"{pre}.input_queue_peak", st.ch[c].rxq_peak, "packets",
                    "peak packets waiting at the input after their traversal (head-of-line "
                    "queueing behind a blocked head; packets still traversing hold credits only)")
            out.add(f"{pre}.input_blocked_ticks", st.ch[c].xbar_blocked_ticks, "ps",
                    "time the input's head packet waited for output-queue room")
            out.add(f"{pre}.response_input_queue_peak", st.ch[c].rsp_rxq_peak, "packets",
                    "peak responses waiting at the input's response channel after their "
                    "traversal (system.nvlink.response_path: separate)")
            out.add(f"{pre}.response_input_blocked_ticks", st.ch[c].rsp_xbar_blocked_ticks, "ps",
                    "time the input's head response waited for response-queue room")
    return out


def _moe_stats(out, st, g, prefix):
    """MoE-Hub stats of GPU g: RPM, AAU, DAM counters, histograms and SRAM area proxies."""
    p, gr = st.p[0], st.gpu[g]
    G = int(p.num_gpus)
    out.add(f"{prefix}.combine_rows", gr.combine_rows, "rows", "rows sent home by send_home")
    pre = f"{prefix}.rpm"
    for name, field, unit, desc in RPM_STATS:
        out.add(f"{pre}.{name}", gr[field], unit, desc)
    out.add(f"{pre}.payload_efficiency", gr.rpm_payload / gr.rpm_wire if gr.rpm_wire else 0.0,
            "ratio", "stream bytes / wire bytes")
    data = gr.rpm_payload - gr.rpm_rows * p.rpm_header_bytes
    out.add(f"{pre}.data_efficiency", data / gr.rpm_wire if gr.rpm_wire else 0.0, "ratio",
            "row data bytes / wire bytes (row and link headers are overhead)")
    out.add(f"{pre}.read_wait_mean_ns", gr.rpm_read_wait / 1000 / (gr.rpm_packets - G)
            if gr.rpm_packets > G else 0.0, "ns", "mean time a data packet waited for its payload "
            "to be read from HBM (end-of-stream packets excluded)")
    for b in range(RPM_HIST_BINS):
        out.add(f"{pre}.merge_fill_bin{b}", st.rpm_hist[g, b], "packets",
                f"packets emitted with the merge buffer {b}/{RPM_HIST_BINS} to "
                f"{b + 1}/{RPM_HIST_BINS} full (last bin: full)")
    rpm_sram = G * (p.rpm_merge_bytes + p.rpm_ring * (p.rpm_header_bytes + 16))
    out.add(f"{pre}.sram_bytes", rpm_sram,
            "bytes", "area proxy: merge buffers + row descriptor rings (header + 16 B of state)")
    pre = f"{prefix}.aau"
    for name, field, unit, desc in AAU_STATS:
        out.add(f"{pre}.{name}", gr[field], unit, desc)
    out.add(f"{pre}.write_wait_mean_ns", gr.aau_write_wait / 1000 / gr.aau_data_packets
            if gr.aau_data_packets else 0.0, "ns", "mean time from the AAU taking a data packet to "
            "HBM having absorbed its writes (link credits return only then)")
    out.add(f"{pre}.spill_bytes", gr.aau_spills * p.record_bytes, "bytes",
            "HBM bytes written by row-table evictions")
    out.add(f"{pre}.refill_bytes", gr.aau_refills * p.record_bytes, "bytes",
            "HBM bytes read back by row-table refills")
    aau_sram = p.records_cap * p.record_bytes + p.local_experts * 3 * 8
    out.add(f"{pre}.sram_bytes", aau_sram, "bytes",
            "area proxy: completion-record table + per-window base/capacity/bump registers")
    staging = p.aau_staging * p.rpm_packet_bytes
    out.add(f"{pre}.staging_sram_bytes", staging, "bytes", "area proxy: the staging store's "
            "packets (parked for window space), each up to one RPM packet of payload")
    out.add(f"{pre}.spill_area_bytes", p.aau_spill * p.local_experts * p.window_rows * p.record_bytes
            if p.num_experts else 0, "bytes", "device memory reserved for evicted row-table entries "
            "(one per window slot; overflow: spill)")
    pre = f"{prefix}.dam"
    for name, field, unit, desc in DAM_STATS:
        out.add(f"{pre}.{name}", gr[field], unit, desc)
    for b in range(DAM_HIST_BINS):
        lo = 0 if b == 0 else 2 ** (b - 1)
        out.add(f"{pre}.claim_wait_bin{b}", st.dam_hist[g, b], "claims",
                f"claimers woken after waiting [{lo}, {2 ** b}) ns" + (" or more" if b == DAM_HIST_BINS - 1 else ""))
    dam_sram = p.local_experts * p.tiles_per_window * 2 * 4 + G * 8
    out.add(f"{pre}.sram_bytes", dam_sram, "bytes",
            "area proxy: per-tile allocated/landed counters (4 B each) + per-source end-of-stream state")
    out.add(f"{prefix}.moe_sram_bytes", rpm_sram + aau_sram + staging + dam_sram, "bytes",
            "area proxy of the whole MoE-Hub control plane: RPM, AAU (table and staging store), DAM")
