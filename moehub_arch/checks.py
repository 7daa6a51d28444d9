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

A violation is an `InvariantError` (exit status 4) listing every failed check with its numbers;
the stats of the run are written first. Everything is read from the final State with NumPy.
"""
import numpy as np

from .engine.state import LN_DONE, TB_EMPTY
from .watchdog import channel_name

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


def check_links(st, out):
    ch = st.ch
    for field in ("packets", "wire_bytes", "payload_bytes"):
        tx, rx = ch[f"tx_{field}"], ch[f"rx_{field}"]
        out.check(tx == rx, f"link {field.replace('_', ' ')} sent != received",
                  lambda c: f"{channel_name(st, c)} sent {int(tx[c])}, received {int(rx[c])}")
    full = int(st.p[0].rx_buffer_flits)
    out.check(ch.credits == full, f"link credits not returned (each channel holds {full})",
              lambda c: f"{channel_name(st, c)} holds {int(ch.credits[c])}")
    rsp_full = int(st.rsp_rxq.shape[1])
    out.check(ch.rsp_credits == rsp_full,
              f"link response-channel credits not returned (each channel holds {rsp_full})",
              lambda c: f"{channel_name(st, c)} holds {int(ch.rsp_credits[c])}")
    name = lambda c: channel_name(st, c)   # noqa: E731
    out.empty(ch.txq_count, "link transmit queues not empty", name, " packet(s)")
    out.empty(ch.rxq_count, "switch input buffers not empty", name, " packet(s)")
    out.empty(ch.rsq_count, "link response queues not empty", name, " packet(s)")
    out.empty(ch.rsp_rxq_count, "switch response input buffers not empty", name, " packet(s)")


def check_packets(st, out):
    pool = st.pk_free.shape[0]
    out.equal("packets still allocated (pool entries free at the end, of "
              f"{pool})", int(st.sys[0].pk_top), pool)
    gp = st.gpu
    out.equal("packets received by the hubs vs emitted (hub + MoE-Hub RPM)",
              gp.hub_rx_packets.sum(), gp.hub_tx_packets.sum() + gp.rpm_packets.sum())
    out.equal("payload bytes received by the hubs vs emitted (hub + MoE-Hub RPM)",
              gp.hub_rx_payload.sum(), gp.hub_tx_payload.sum() + gp.rpm_payload.sum())


def check_thread_blocks(sim, out):
    st = sim.state
    out.check(st.tb.state == TB_EMPTY, "thread blocks that did not exit",
              lambda s: f"slot {s} of kernel '{sim.launches[int(st.tb.launch[s])].kernel}'")
    out.empty(st.tb.outstanding, "thread-block slots with operations outstanding",
              lambda s: f"slot {s}", " operation(s)")
    out.check(st.ln.status == LN_DONE, "kernel launches that did not finish",
              lambda l: f"'{sim.launches[l].kernel}' on GPU {sim.launches[l].gpu}: "
                        f"{int(st.ln.finished[l])} of {int(st.ln.grid[l])} thread blocks exited")


def check_hub(st, out):
    gp = st.gpu
    R = int(st.p[0].reqs_per_gpu)
    out.check(gp.free_top == R, f"hub request-table entries not freed (of {R})",
              lambda g: f"system.gpu{g}.hub: {R - int(gp.free_top[g])} in use")
    hub = lambda g: f"system.gpu{g}.hub"   # noqa: E731
    out.empty(gp.reqq_count, "hub request FIFOs not empty", hub, " request(s)")
    out.empty(gp.respq_count, "hub response FIFOs not empty", hub, " response(s)")
    out.empty(gp.link_resp_total, "link-level write responses never sent", hub, " response(s)")


def check_moehub(st, out):
    p = st.p[0]
    if not int(p.num_experts):
        return
    G, T = int(p.num_gpus), int(p.tile_rows)
    sr, gp, win = st.stream, st.gpu, st.win

    def stream(s):
        return f"stream GPU {s // G} -> GPU {s % G}"
    out.check(sr.sent == sr.accepted, "MoE-Hub stream bytes accepted but not sent",
              lambda s: f"{stream(s)}: {int(sr.accepted[s])} accepted, {int(sr.sent[s])} sent")
    out.check(sr.recv == sr.accepted, "MoE-Hub stream bytes sent != received",
              lambda s: f"{stream(s)}: {int(sr.accepted[s])} sent, {int(sr.recv[s])} received")
    out.check(sr.head == sr.tail, "MoE-Hub row rings not empty (rows not landed)",
              lambda s: f"{stream(s)}: {int(sr.head[s] - sr.tail[s])} rows")
    out.check(sr.eos_sent == sr.done, "MoE-Hub end-of-stream markers sent but streams unfinished",
              lambda s: f"{stream(s)}")
    out.check((gp.aau_q_count == 0) & (gp.aau_staged == 0) & (gp.loop_inflight == 0),
              "MoE-Hub AAU packets still waiting (or loopback packets in flight)",
              lambda g: f"system.gpu{g}.hub.aau: {int(gp.aau_q_count[g])} waiting, "
                        f"{int(gp.loop_inflight[g])} in loopback")
    out.equal("MoE-Hub rows landed with a completion record vs rows accepted",
              gp.aau_records_written.sum(), gp.rpm_rows.sum())
    claimed = np.minimum(win.next_claim * T, win.alloc)
    out.check(claimed == win.alloc, "MoE-Hub expert windows with landed rows never claimed",
              lambda w: f"window {w} (GPU {w // int(p.local_experts)}): {int(win.alloc[w])} rows "
                        f"allocated, {int(claimed[w])} claimed")
    out.check(gp.records_live == 0, "MoE-Hub completion records never released "
              "(claimed tiles without notify_ready.release)",
              lambda g: f"system.gpu{g}.hub.aau: {int(gp.records_live[g])} live records")
    # overflow: spill: released tiles take their rows' entries out of the table; a refill reads
    # back an entry that an eviction wrote
    out.check(gp.rat_live == 0, "MoE-Hub AAU row-table entries left after every tile was released",
              lambda g: f"system.gpu{g}.hub.aau: {int(gp.rat_live[g])} entries on chip")
    out.check(gp.aau_refills <= gp.aau_spills, "MoE-Hub AAU row-table refills without a spill",
              lambda g: f"system.gpu{g}.hub.aau: {int(gp.aau_refills[g])} refills, "
                        f"{int(gp.aau_spills[g])} spills")


def run_invariants(sim):
    """Every failed invariant of a completed run (empty when all hold)."""
    st = sim.state
    out = InvariantViolations()
    check_links(st, out)
    check_packets(st, out)
    check_thread_blocks(sim, out)
    check_hub(st, out)
    check_moehub(st, out)
    if sim.layer is not None:
        out.extend(sim.layer.invariants(sim))
    return out
