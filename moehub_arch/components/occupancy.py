"""Occupancy monitor: samples queue occupancies at a fixed period, a probe in the manner of gem5's
CommMonitor (src/mem/comm_monitor.hh), and the worked example of docs/adding_a_block.md.

Every `stats.occupancy.period` of simulated time (0, the default, turns the monitor off: it
schedules no event and the run is exactly the run without it) the monitor reads, on every GPU, the
occupancy of the hub's request FIFO and the link packets queued on the GPU's NVLink transmitters,
and accumulates them; its stats are the means over the samples and the largest link backlog seen.
It only observes: no other block reads its fields. It keeps sampling while a kernel launch is
unfinished, so with the monitor on the run's last event can be a sample up to one period after the
last kernel ended (simTicks, and stats averaged over simTicks, include that time).
"""
from ..engine.jit import compiled

from ..engine.events import push
from ..engine.state import LN_DONE
from .link_room import txq_settle
from ..config.keys import key_param
from ..declare import Block, Event, Stat, StatGroup, fields

EV_OCCUPANCY_SAMPLE = 10   # the monitor takes a sample of every GPU (a0, a1 unused)


@compiled
def occupancy_start(st):
    """The first sample, one period after time zero (nothing when the monitor is off)."""
    if st.p[0].occupancy_period > 0:
        push(st, st.p[0].occupancy_period, EV_OCCUPANCY_SAMPLE, 0, 0)


@compiled
def occupancy_sample(st, tick):
    """EV_OCCUPANCY_SAMPLE: add every GPU's current hub request FIFO and link transmit backlogs."""
    p = st.p[0]
    L = p.links_per_gpu
    for g in range(p.num_gpus):
        gp = st.gpu[g]
        gp.occ_samples += 1
        gp.occ_hub_queue_sum += gp.reqq_count
        backlog = 0
        for l in range(L):
            c = 2 * (g * L + l)     # the GPU's up channel of link l
            txq_settle(st, c)       # (a packet sent ahead that has departed by now)
            backlog += st.ch[c].txq_pkts
        gp.occ_link_queue_sum += backlog
        if backlog > gp.occ_link_queue_peak:
            gp.occ_link_queue_peak = backlog
    for l in range(st.ln.shape[0]):
        if st.ln[l].status != LN_DONE:   # sample again while work is left
            push(st, tick + p.occupancy_period, EV_OCCUPANCY_SAMPLE, 0, 0)
            return


def _mean(field):
    return lambda i: i.rec[field] / i.rec.occ_samples if i.rec.occ_samples else 0.0


def _on(st):
    return st.p[0].occupancy_period > 0


BLOCK = Block(
    "occupancy", __doc__.split("\n\n")[0],
    params=(key_param("occupancy_period", "stats.occupancy.period"),),
    fields=fields("gpu", ("occ_samples", "samples taken"),
                  ("occ_hub_queue_sum", "sum of the hub request-FIFO occupancies sampled"),
                  ("occ_link_queue_sum", "sum of the link transmit backlogs sampled (packets)"),
                  ("occ_link_queue_peak", "largest link transmit backlog sampled (packets)")),
    stats=(StatGroup("gpu", "occupancy", (
        Stat("samples", "count", "samples taken (every stats.occupancy.period)", "occ_samples"),
        Stat("hub_request_queue_mean", "entries", "mean occupancy of the hub request FIFO "
             "over the samples", _mean("occ_hub_queue_sum")),
        Stat("link_tx_queue_mean", "packets", "mean link packets queued on the GPU's NVLink "
             "transmitters (all links) over the samples", _mean("occ_link_queue_sum")),
        Stat("link_tx_queue_peak", "packets", "largest such backlog sampled", "occ_link_queue_peak"),
    ), enabled=_on),),
    events=(Event("occupancy_sample", EV_OCCUPANCY_SAMPLE, "the occupancy monitor samples",
                  enabled=_on),),
    start=(occupancy_start,),
)
