"""The configuration schema: frozen attrs classes, one per config section.

Each field carries metadata that the loader (loader.py) uses to convert and check the YAML value:
`kind` (int, int_or_expr, float, bool, str, choice, choice_tuple, time, frequency, size, bandwidth,
node, list, named, params, int_tuple, str_tuple, opt_int, opt_int_tuple), an optional lower bound `min`
and upper bound `max` (every integer is also bounded by the 64-bit range, every float must be
finite, every quantity must fit the engine: units.py), the `choices` of a
choice field, the nested class `cls` of node/list/named fields, and a one-line `doc`.

System fields have no defaults on purpose: every hardware number must come from a config file,
where it carries a comment naming its source. Workload and run fields have defaults.
Values are stored in base units: time in ps, frequency in Hz, size in bytes, bandwidth in B/s.
"""
import attrs

UNIT_KINDS = ("time", "frequency", "size", "bandwidth")
BASE_UNITS = {"time": "ps", "frequency": "Hz", "size": "B", "bandwidth": "B/s"}
_NO_DEFAULT = attrs.NOTHING


def _f(kind, doc, default=_NO_DEFAULT, *, min=None, max=None, choices=None, cls=None):
    meta = {"kind": kind, "doc": doc, "min": min, "max": max, "choices": choices, "cls": cls}
    return attrs.field(default=default, metadata=meta)


# ---------------------------------------------------------------------------------- system
@attrs.frozen
class SmConfig:
    max_resident_tbs: int = _f("int", "thread blocks resident on one SM at a time", min=1)
    issue_width: int = _f("int", "instructions issued per SM cycle", min=1)
    smem_bytes: int = _f("size", "shared memory per SM", min=0)
    tb_launch_cycles: int = _f("int", "SM cycles to launch a thread block", min=0)
    tensor_bf16_flops_per_cycle: int = _f("int", "dense BF16 tensor FLOP per SM cycle", min=1)
    tensor_tf32_flops_per_cycle: int = _f("int", "dense TF32 tensor FLOP per SM cycle", min=1)
    tensor_fp8_flops_per_cycle: int = _f("int", "dense FP8 tensor FLOP per SM cycle (0: no FP8 "
                                         "tensor cores); an ISA throughput expression names it "
                                         "as sm.tensor_fp8_flops_per_cycle", min=0)
    vector_lanes: int = _f("int", "FP32 lanes per SM", min=1)
    lsu_bytes_per_cycle: int = _f("int", "load/store bytes per SM cycle", min=1)
    smem_latency_cycles: int = _f("int", "shared memory load latency in SM cycles", min=0)
    registers: int = _f("int", "32-bit registers per SM: the resident blocks' registers (a "
                        "kernel's .threads x .regs, allocated per warp in units of "
                        "register_alloc_unit) must fit", min=1)
    max_threads: int = _f("int", "threads resident on one SM (the resident blocks' .threads)",
                          min=1)
    register_alloc_unit: int = _f("int", "registers are allocated to a warp in multiples of this "
                                  "many (CUDA occupancy: 256 on compute capability 5.0-9.0)",
                                  min=1)


MEMORY_ARBITRATION = ("paced", "fifo")


@attrs.frozen
class HbmConfig:
    bandwidth: float = _f("bandwidth", "peak HBM bandwidth per GPU", min=1)
    channels: int = _f("int", "independent HBM channels per GPU", min=1)
    interleave_bytes: int = _f("size", "address interleave granule across channels", min=1)
    latency_cycles: int = _f("int", "load latency in SM cycles", min=0)
    atomic_latency_cycles: int = _f("int", "extra latency of an atomic at memory, SM cycles", min=0)
    capacity: int = _f("size", "HBM capacity per GPU", min=1)
    arbitration: str = _f("choice", "how the channels (and the L2 read port) share their bandwidth: "
                          "paced (an SM instruction's operand traffic streams over the "
                          "instruction's own duration and leaves the rest of each arbitration "
                          "window to other requests) or fifo (every access served whole, first in "
                          "first out: the first model, kept for comparison)",
                          choices=MEMORY_ARBITRATION)
    arbitration_window: int = _f("time", "granularity of the paced-arbitration calendar (the "
                                 "bandwidth left to other requests is tracked per window)", min=1)
    queue_depth: int = _f("int", "requests (32 B) a channel controller queues: under paced "
                          "arbitration a request waits at most for a full queue to drain", min=1)


L2_LINK_WRITES = ("hbm", "write_back")


@attrs.frozen
class L2Config:
    bandwidth: float = _f("bandwidth", "aggregate L2 read bandwidth per GPU (reads marked shared)",
                          min=1)
    latency_cycles: int = _f("int", "L2 hit latency in SM cycles", min=0)
    link_writes: str = _f("choice", "where writes arriving from NVLink land: hbm (the link buffer "
                          "is held until the HBM channels took the data) or write_back (the L2 "
                          "absorbs them at its bandwidth; the HBM write-back costs channel bandwidth "
                          "but holds no link buffer)", choices=L2_LINK_WRITES)
    capacity: int = _f("size", "bytes of mma operand regions (weight tiles, shared row tiles) the "
                       "L2 holds: marked reads beyond it miss and are read from HBM "
                       "(components/l2.py)", min=1)
    tracked_regions: int = _f("int", "entries of the L2 residency table per GPU: one per resident "
                              "operand region, least recently used evicted when full", min=1)


RPM_SCHEDULES = ("arrival", "full_first", "uncoalesced", "paper")


@attrs.frozen
class RpmConfig:
    merge_buffer_bytes: int = _f("size", "RPM merge buffer per destination GPU: a packet carries at "
                                 "most this many bytes", min=1)
    packet_bytes: int = _f("size", "largest payload of an RPM packet (a packet also never exceeds "
                           "system.nvlink.max_payload_bytes or merge_buffer_bytes)", min=1)
    flush_timeout: int = _f("time", "a partly filled merge buffer is sent once its oldest byte waited "
                            "this long", min=0)
    row_queue_depth: int = _f("int", "rows accepted but not yet landed, per destination GPU (row "
                              "descriptor ring); send_to_expert blocks when it is full", min=1)
    row_header_bytes: int = _f("size", "metadata carried with each row in the byte stream (expert, "
                               "size, home slot, aux)", min=0)
    packets_per_cycle: int = _f("int", "packets the RPM emits per hub cycle", min=1)
    arbitration: str = _f("choice", "which destination's merge buffer is sent next",
                          choices=("round_robin", "longest_first"))
    schedule: str = _f("choice", "arrival (this project's first reading: any destination with a "
                       "sendable packet, full or flushed, in arbitration order), full_first (the "
                       "MoE-Hub RPM's order, arXiv 2605.05888: destinations with a full packet before "
                       "flushed partial ones) or uncoalesced (the ablation without the RPM: no coalescing, "
                       "each row's bytes leave in their own packets as soon as it is accepted) or "
                       "paper (the MoE-Hub RPM's whole order, arXiv 2605.05888: full_first across "
                       "destinations and, toward each destination, critical rows before .nop ones, "
                       "then the smallest row id first - st.rowsp's row, send_to_expert's home)",
                       choices=RPM_SCHEDULES)
    allocation_ids: int = _f("int", "row-sparse allocations one GPU's hub can register "
                             "(rowsp.malloc ids 0 .. allocation_ids - 1; the MoE-Hub TLB entries "
                             "mapping an id to its logical destination and row size, arXiv "
                             "2605.05888). Default 256, assumption: one per routed expert of the "
                             "largest shipped model (DeepSeek-V3); the paper does not size it",
                             256, min=1)


AAU_OVERFLOW = ("stall", "spill")


@attrs.frozen
class AauConfig:
    alloc_latency_cycles: int = _f("int", "hub cycles to allocate a window slot for a row", min=0)
    record_table_entries: int = _f("int", "on-chip row address table entries per GPU (one per row "
                                   "allocated whose tile is not yet released); what happens when it "
                                   "is full is `overflow`", min=1)
    overflow: str = _f("choice", "a full row table: stall (allocation waits until a tile is released: "
                       "this project's first reading) or spill (the oldest entry is evicted FIFO to "
                       "device memory, an HBM write; a later packet of that row reads it back: MoE-Hub "
                       "arXiv 2605.05888)", choices=AAU_OVERFLOW)
    record_bytes: int = _f("size", "completion record entry size (at least 32 B: source GPU, home "
                           "slot, aux, bytes)", min=32)


@attrs.frozen
class DamConfig:
    tile_rows: int = _f("int", "rows of one tile: the unit made ready and claimed", min=1)
    notify_latency_cycles: int = _f("int", "hub cycles from a tile's last row landing to the tile "
                                    "being claimable", min=0)
    consumers: str = _f("choice", "who starts the work on a ready tile: claim (claimer thread "
                        "blocks sleep in claim_buffer: this project's first reading) or launch (the "
                        "DAM starts the consumer thread blocks of each ready tile: a launch with "
                        "dam_tile_tbs; MoE-Hub arXiv 2605.05888)", choices=("claim", "launch"))
    order: str = _f("choice", "which ready tiles the DAM hands to the consumers, and when: ready "
                    "(each tile as soon as it is ready, experts interleaved: the paper's per-tile "
                    "DAM) or expert (a policy beyond the paper: an expert's tiles are held until "
                    "expert_tiles of them are ready, or its stream ended and all are, then handed "
                    "out together, column job outer, so the blocks running at once share the "
                    "expert's weight column tiles through the L2)",
                    choices=("ready", "expert"))
    expert_tiles: int = _f("int", "with order: expert, the ready tiles of one expert handed out "
                           "together (at most the expert window's tiles)", min=1)


HUB_INTERNODE = ("per_expert", "per_node")
HUB_INTERNODE_COMBINE = ("per_expert", "per_node")


@attrs.frozen
class MoeHubConfig:
    rpm: RpmConfig = _f("node", "runtime packet manager (sender side)", cls=RpmConfig)
    aau: AauConfig = _f("node", "address allocation unit (receiver side)", cls=AauConfig)
    dam: DamConfig = _f("node", "data availability manager (receiver side)", cls=DamConfig)
    internode: str = _f("choice", "how the hub reaches an expert on another node (a design the "
                        "MoE-Hub paper, arXiv 2605.05888, leaves open): per_expert (the RPM hands "
                        "each row's stream toward the expert's GPU to the NIC: one row per (token, "
                        "expert GPU) on InfiniBand) or per_node (one row per (token, remote node) "
                        "to the hub of the GPU with the sender's local rank there - one rail, as "
                        "DeepEP's and HierMoE's internode kernels - whose forwarding unit fans it "
                        "out over NVLink to the experts' GPUs: components/moehub/forward.py; the "
                        "moehub dispatch then names a token's experts on one node in one store). "
                        "per_node needs more than one node", "per_expert", choices=HUB_INTERNODE)
    forward_buffer_rows: int = _f("int", "internode: per_node - rows the forwarding unit holds in "
                                  "HBM from their arrival until every copy it sent on has landed "
                                  "(a full buffer parks arriving rows in the AAU's staging store, "
                                  "so the senders' rings fill). 0 (default): (nodes - 1) x "
                                  "rpm.row_queue_depth, every row the other nodes' senders can "
                                  "have in flight toward one forwarder, so the buffer never binds "
                                  "(assumption: HBM is cheap next to the hub's SRAM; 768 rows = "
                                  "5.5 MB of DeepSeek-V3 bf16 rows at 4 nodes and 256-row rings)",
                                  0, min=0)
    forward_latency_cycles: int = _f("int", "internode: per_node - hub cycles from a row's last "
                                     "byte written in the forwarding buffer to its copies entering "
                                     "the RPM's streams (read the row's expert list, one "
                                     "descriptor per destination). Default 4, assumption: as the "
                                     "AAU's allocation (a table lookup and a descriptor write)",
                                     4, min=0)
    internode_combine: str = _f("choice", "how the moehub combine brings expert outputs home "
                                "across nodes: per_expert (each output row goes home over its own "
                                "put) or per_node (needs internode: per_node; DeepEP's internode "
                                "combine: an expert's output for a token of another node goes "
                                "over NVLink to the forwarding GPU of that token - the origin's "
                                "local rank on the expert's node - whose combine kernel sums the "
                                "node's weighted outputs in fp32 and puts one bf16 row per "
                                "(token, node) home over RDMA; workloads/kernels/moehub/"
                                "moe_layer.s, moehub_forward_combine)", "per_expert",
                                choices=HUB_INTERNODE_COMBINE)


@attrs.frozen
class HubConfig:
    clock: int = _f("frequency", "hub clock", min=1)
    packets_per_cycle: int = _f("int", "packets the hub moves per hub cycle", min=1)
    request_queue_depth: int = _f("int", "SM-to-hub request queue entries", min=1)
    max_outstanding_requests: int = _f("int", "remote requests in flight per GPU", min=1)
    posted_store_tags: int = _f("int", "multimem.st / multimem.red / dymultimem.st operations "
                                "whose last packet is out (their request-table entry is free) and "
                                "whose write responses are still due: the fence counts them (0: a "
                                "multimem store holds its table entry until its responses are in)",
                                min=0)
    tx_latency_cycles: int = _f("int", "hub cycles from request to NVLink port", min=0)
    rx_latency_cycles: int = _f("int", "hub cycles from NVLink port to memory/SM", min=0)
    moe: MoeHubConfig = _f("node", "MoE-Hub control plane: RPM, AAU, DAM", cls=MoeHubConfig)


@attrs.frozen
class GpuConfig:
    name: str = _f("str", "GPU model name")
    num_sms: int = _f("int", "streaming multiprocessors per GPU", min=1)
    sm_clock: int = _f("frequency", "SM clock", min=1)
    kernel_launch_latency: int = _f("time", "host-side kernel launch overhead", min=0)
    sm: SmConfig = _f("node", "streaming multiprocessor", cls=SmConfig)
    hbm: HbmConfig = _f("node", "HBM memory", cls=HbmConfig)
    l2: L2Config = _f("node", "L2 cache, for reads of data shared by many tiles", cls=L2Config)
    hub: HubConfig = _f("node", "communication hub between SMs and NVLink", cls=HubConfig)


@attrs.frozen
class NvlinkConfig:
    links_per_gpu: int = _f("int", "NVLink links per GPU", min=1)
    bandwidth: float = _f("bandwidth", "per link, per direction", min=1)
    latency: int = _f("time", "one-way wire/PHY latency per link", min=0)
    max_payload_bytes: int = _f("size", "largest payload of one packet", min=1)
    header_bytes: int = _f("size", "header (and flow-control) bytes per packet", min=0)
    flit_bytes: int = _f("size", "flit size: packets occupy whole flits", min=1)
    store_packet_bytes: int = _f("size", "largest payload of a packet the hub makes from SM "
                                 "stores (puts, flag stores) and remote-read data: 32 B sectors "
                                 "coalesced up to this size (used capped at max_payload_bytes)",
                                 min=1)
    write_responses: str = _f("choice", "completions of remote writes: per_packet (non-posted: "
                              "one header-only response per write packet on the reverse path) or "
                              "per_request (one response per put: the responses nearly free)",
                              choices=("per_packet", "per_request"))
    rx_buffer_flits: int = _f("int", "receive buffer (credits) per link direction", min=1)
    tx_queue_packets: int = _f("int", "transmit queue per link", min=1)
    response_path: str = _f("choice", "separate: responses (write responses, read data, atomic "
                            "results) travel in their own virtual channel, made beside the hub's "
                            "request packetizer, with their own transmit queues, receive buffers "
                            "and credits; shared: they take the request packetizer's slots and "
                            "queue behind requests in one channel per link",
                            choices=("separate", "shared"))
    response_queue_packets: int = _f("int", "response-channel transmit queue per link direction "
                                     "(GPU and switch output ports; response_path: separate)",
                                     min=1)
    response_buffer_flits: int = _f("int", "response-channel receive buffer (credits) per link "
                                    "direction (switch input ports and GPUs; response_path: "
                                    "separate)", min=1)
    vc_arbitration: str = _f("choice", "which virtual channel a link direction sends when both "
                             "have a packet ready with credits (response_path: separate): "
                             "round_robin (alternate, packet by packet: starvation-free, as "
                             "NVIDIA's VC arbitration patents US 11,824,791 / US 12,137,055 "
                             "describe) or response_first (strict priority for responses: "
                             "requests wait while responses stream, this project's earlier model)",
                             "round_robin", choices=("round_robin", "response_first"))


@attrs.frozen
class DysharpConfig:
    max_targets: int = _f("int", "most targets (expert ids) one dymultimem operation may name "
                          "(components/dysharp.py)", min=1)
    multimemq_entries: int = _f("int", "a GPU's MultimemQ: dymultimem operations whose target "
                                "lists are being fetched and whose packets the hub has not all "
                                "sent; a full queue stalls the issuing thread block", min=1)
    al_tlb_entries: int = _f("int", "a GPU hub's AL-TLB: cached entries of the algebraic-to-layout "
                             "table (the table itself lives in HBM)", min=1)
    al_tlb_ways: int = _f("int", "AL-TLB associativity: entries per set, LRU within a set "
                          "(0: fully associative; 1: direct-mapped); al_tlb_entries must be a "
                          "multiple of it", min=0)
    tracker_tiles: int = _f("int", "token-centric fusion: entries of a GPU's token-tracker tile "
                            "table (an arrival counter per row tile in use: taken by the tile's "
                            "first bytes, freed when its jobs are done, where the objects name "
                            "workload.multicast[].done_counters; without them every tile needs "
                            "one at once)", min=1)
    tracker_tokens: int = _f("int", "token-centric fusion: entries of a GPU's token-tracker token "
                             "table (one ready-output counter per token it sends); a layer with "
                             "more tokens per GPU is refused", min=1)
    tracker_full: str = _f("choice", "token-centric fusion: a tile whose first bytes find the tile "
                           "table full - defer: the bytes are written and counted aside (the "
                           "paper's per-tile DRAM table), the tile takes the next entry freed and "
                           "is raised then if complete; stall: the copy waits at the destination "
                           "hub holding its link buffer space until an entry frees (back-pressure "
                           "on the link). A table near the local experts' count can deadlock "
                           "either way, stall sooner (components/dysharp.py)", "defer",
                           choices=("defer", "stall"))


@attrs.frozen
class NvlsConfig:
    reduction_buffer_bytes: int = _f("size", "NVLink SHARP reduction buffer per switch input port: "
                                     "multimem.ld_reduce entries in flight from that port "
                                     "(components/nvls.py)", min=0)
    dysharp: DysharpConfig = _f("node", "DySHARP's dynamic multimem addressing (dymultimem.st / "
                                "dymultimem.ld_reduce): the source GPU's MultimemQ, the switch's "
                                "target lists, the destination hub's AL-TLB", cls=DysharpConfig)


@attrs.frozen
class CaisSwitchConfig:
    entries_per_port: int = _f("int", "CAIS merge-table entries per switch port toward a GPU, one "
                               "request line (system.nvlink.store_packet_bytes) each (CAIS, arXiv "
                               "2605.05628: 40 KB / 320 entries per port)", 320, min=1)
    timeout: int = _f("time", "a merge-table entry older than this is written home (a partial sum) "
                      "or dropped (a served load) (assumption: 2 us, about two round trips of a "
                      "250 ns link plus queueing; CAIS gives per-entry timers but no value)",
                      2_000_000, min=1)
    throttle: bool = _f("bool", "hold back a GPU that runs ahead: a request that misses a full "
                        "table waits at its input port (instead of evicting the least recently "
                        "used entry) when every entry of the table already holds that GPU's "
                        "request, so it would only push out partial sums the other GPUs have yet "
                        "to reach (CAIS, arXiv 2605.05628, throttles GPUs that run ahead of their "
                        "group; the policy is this model's reading of it)", False)
    sync_entries: int = _f("int", "entries of each switch's group sync table (sync.cais: one per "
                           "group of matching thread blocks in flight, keyed by its flag; CAIS, "
                           "arXiv 2605.05628, places the table in the switch but gives no size. "
                           "assumption: 256, room for the 132 thread-block groups of one GEMM "
                           "kernel per GPU plus a collective's 16 channels even if every flag "
                           "hashed to one switch; a full table holds the arrival at its input)",
                           256, min=1)


@attrs.frozen
class SwitchConfig:
    count: int = _f("int", "NVSwitch chips", min=1)
    ports: int = _f("int", "NVLink ports per switch chip", min=1)
    traversal_latency: int = _f("time", "input-to-output latency of one switch", min=0)
    output_queue_packets: int = _f("int", "packets queued per output port", min=1)
    forwarding: str = _f("choice", "cut_through: a packet starts across the switch once its header "
                         "flit is in; store_and_forward: once the whole packet is",
                         choices=("cut_through", "store_and_forward"))
    gpu_link_switch: tuple = _f("int_tuple", "switch index of each of a GPU's links", min=0)
    nvls: NvlsConfig = _f("node", "the switch's multicast and reduction engine (NVLink SHARP)",
                          cls=NvlsConfig)
    cais: CaisSwitchConfig = _f("node", "the switch's CAIS merge unit (components/cais/)",
                                CaisSwitchConfig(), cls=CaisSwitchConfig)
    topology: str = _f("choice", "nvswitch: every GPU's links go to the node's NVSwitch chips "
                       "(gpu_link_switch); bridge_pairs: GPUs 2i and 2i+1 of a node joined by NVLink "
                       "bridges, no NVSwitch", "nvswitch", choices=("nvswitch", "bridge_pairs"))


# Multi-node fabrics (components/fabric.py, pcie.py, nic.py, infiniband.py). A one-node system
# leaves these sections out; with nodes.count > 1 every hardware number below must be given (a
# zero is "not given": the loader names the key).
@attrs.frozen
class NodesConfig:
    count: int = _f("int", "nodes (servers); system.num_gpus becomes count x gpus_per_node", 1,
                    min=1)
    gpus_per_node: int = _f("int", "GPUs per node (0: system.num_gpus, one node)", 0, min=0)


@attrs.frozen
class PcieConfig:
    bandwidth: float = _f("bandwidth", "per link (x16), per direction, after line encoding", 0.0,
                          min=0)
    latency: int = _f("time", "one-way link latency (PHY, retimers, traces)", 0, min=0)
    max_payload_bytes: int = _f("size", "largest TLP payload (Max_Payload_Size)", 0, min=0)
    tlp_overhead_bytes: int = _f("size", "bytes per TLP besides its payload: framing token, "
                                 "sequence number, header, LCRC", 0, min=0)
    buffer_bytes: int = _f("size", "receive buffer (flow-control credits) per link direction", 0,
                           min=0)
    switch_latency: int = _f("time", "traversal of a PCIe switch (systems with one)", 0, min=0)


@attrs.frozen
class NicConfig:
    per_node: int = _f("int", "NICs per node", 0, min=0)
    gpus_per_nic: int = _f("int", "GPUs sharing one NIC (> 1: a PCIe switch joins them)", 1,
                           min=1)
    message_rate: float = _f("float", "work requests (RDMA messages) the NIC starts per second",
                             0.0, min=0)
    processing_latency: int = _f("time", "NIC pipeline latency a packet spends crossing it", 0,
                                 min=0)
    doorbell_latency: int = _f("time", "from the GPU's doorbell to the first byte of a work "
                               "request on the wire (WQE fetch and payload read over PCIe)", 0,
                               min=0)
    dma_read_ahead: int = _f("size", "payload the NIC's DMA engine may have requested from a GPU "
                             "and not yet received (outstanding PCIe reads): the transmit queue "
                             "of the GPU's PCIe link, which bounds how far the hub reads HBM "
                             "ahead of the link", 0, min=0)
    send_scheduling: str = _f("choice", "qp_round_robin: the NIC's send scheduler serves its "
                              "queue pairs (one per destination GPU) round-robin, one IB packet "
                              "(MTU) at a time; message_fifo: whole messages in the order the GPU "
                              "issued them", "qp_round_robin",
                              choices=("qp_round_robin", "message_fifo"))
    queue_pairs: str = _f("choice", "the queue pairs a GPU's RDMA messages use, which the send "
                          "scheduler serves in turn and whose own messages keep their order: "
                          "per_peer, one per destination GPU; per_block, one per (issuing thread "
                          "block, destination GPU), as DeepEP's normal internode kernels give each "
                          "channel its own QP to every peer (num_qps_per_rank = channels, "
                          "NVSHMEM_IBGDA_NUM_RC_PER_PE; DeepEP PR #130)", "per_peer",
                          choices=("per_peer", "per_block"))


@attrs.frozen
class InfinibandConfig:
    bandwidth: float = _f("bandwidth", "per port, per direction (data rate)", 0.0, min=0)
    latency: int = _f("time", "one-way cable + PHY latency per link", 0, min=0)
    mtu_bytes: int = _f("size", "path MTU: largest payload of one IB packet", 0, min=0)
    packet_overhead_bytes: int = _f("size", "bytes per IB data packet besides its payload "
                                    "(LRH, BTH, RETH, ICRC, VCRC)", 0, min=0)
    ack_bytes: int = _f("size", "bytes of an acknowledgement packet (LRH, BTH, AETH, ICRC, VCRC)",
                        0, min=0)
    buffer_bytes: int = _f("size", "receive buffer (link credits) per port and direction", 0,
                           min=0)
    switch_latency: int = _f("time", "port-to-port traversal of an IB switch", 0, min=0)
    switch_ports: int = _f("int", "ports per IB switch", 0, min=0)
    topology: str = _f("choice", "single_switch: every NIC on one switch; rail_optimized: NIC i "
                       "of every node on leaf i (its rail), leaves joined by spine switches",
                       "single_switch", choices=("single_switch", "rail_optimized"))
    spine_switches: int = _f("int", "spine switches (rail_optimized), each linked once to every "
                             "leaf", 0, min=0)


@attrs.frozen
class SystemConfig:
    name: str = _f("str", "system name")
    num_gpus: int = _f("int", "GPUs in the system", min=1)
    gpu: GpuConfig = _f("node", "one GPU (all GPUs are identical)", cls=GpuConfig)
    nvlink: NvlinkConfig = _f("node", "NVLink links", cls=NvlinkConfig)
    switch: SwitchConfig = _f("node", "NVSwitch chips", cls=SwitchConfig)
    nodes: NodesConfig = _f("node", "nodes of a multi-node system", NodesConfig(), cls=NodesConfig)
    pcie: PcieConfig = _f("node", "PCIe links between GPUs and NICs (multi-node)", PcieConfig(),
                          cls=PcieConfig)
    nic: NicConfig = _f("node", "RDMA NICs (multi-node)", NicConfig(), cls=NicConfig)
    infiniband: InfinibandConfig = _f("node", "InfiniBand links and switches (multi-node)",
                                      InfinibandConfig(), cls=InfinibandConfig)


# -------------------------------------------------------------------------------- workload
@attrs.frozen
class BufferConfig:
    name: str = _f("str", "buffer name (the YAML key)")
    bytes: int = _f("size", "size per GPU (symmetric allocation)", min=1)
    region: str = _f("choice", "control buffers are always backed by real memory", "data",
                     choices=("control", "data"))
    init: str = _f("choice", "initial contents (random: uniform in [-1, 1) for f32/bf16, any byte for "
                             "u8, integers in [-1000, 1000) for i64)", "zeros",
                   choices=("zeros", "arange", "random", "fill"))
    dtype: str = _f("choice", "element type for init", "f32", choices=("f32", "bf16", "i64", "u8"))
    value: float = _f("float", "fill value (init: fill)", 0.0)
    seed: int | None = _f("opt_int", "random seed (init: random); default derived from run.seed",
                          None, min=0)


@attrs.frozen
class MulticastConfig:
    buffer: str = _f("str", "the symmetric buffer the multicast object binds (its range, on every "
                     "member: multimem addresses are the buffer's addresses)")
    gpus: tuple = _f("int_tuple", "member GPUs (at least two; empty: every GPU)", (), min=0)
    # DySHARP's dynamic objects (components/dysharp.py): targets_per_gpu > 0
    targets_per_gpu: int = _f("int", "0: a static NVLS object; > 0: a DySHARP dynamic object whose "
                              "targets (experts) are placed targets_per_gpu per member GPU (target "
                              "e on GPU e // targets_per_gpu: the switch's placement table); "
                              "`buffer` is then each member's receive layout [targets_per_gpu]"
                              "[layout rows][row_bytes]", 0, min=0)
    row_bytes: int = _f("size", "dynamic object: bytes of one algebraic row (a token)", 0, min=0)
    rows: int = _f("int", "dynamic object: algebraic rows its multimem addresses name (address = "
                   "buffer address + row x row_bytes + offset)", 0, min=0)
    counts: str = _f("str", "dynamic object: buffer (control region) of one i64 per local target: "
                     "rows the hub has placed in that target's layout", "")
    al_table: str = _f("str", "dynamic object: buffer (control region) holding the AL table: one "
                       "entry per algebraic row and local target (layout row + 1; 0: not placed)",
                       "")
    tracker: str = _f("str", "dynamic object: buffer (control region) of the token tracker's "
                      "tile-ready words, one i64 per row tile [layout tiles][targets_per_gpu]: the "
                      "hub sets a tile's word to 1 once every byte of its rows has landed (every "
                      "object naming the same tracker counts towards it); '': not tracked", "")
    tile_rows: int = _f("int", "dynamic object with a tracker: rows of one tracked row tile", 0,
                        min=0)
    layout_rows: int = _f("int", "dynamic object: rows each local target's layout may hold (the "
                          "hub refuses a row beyond them: a full layout is a run error); the "
                          "layouts keep the buffer's stride, buffer bytes / (targets_per_gpu x "
                          "row_bytes) rows each, which the algebraic range (rows x row_bytes) "
                          "may make far larger than any target receives; the token tracker's "
                          "tile table needs entries for these rows only (targets_per_gpu x "
                          "ceil(layout_rows / tile_rows)); 0: the whole stride", 0, min=0)
    done_counters: str = _f("str", "dynamic object with a tracker: buffer (control region) of the "
                            "tiles' finished-job counters (the paper's finished-TB counters): the "
                            "tracker frees a tile's table entry once the i64 at done_offset + "
                            "tile x done_stride reaches done_jobs (a local atomic add); '': "
                            "entries are never freed and every tile needs one at once", "")
    done_offset: int = _f("size", "dynamic object: byte offset of tile 0's finished-job counter in "
                          "done_counters", 0, min=0)
    done_stride: int = _f("size", "dynamic object: bytes from one tile's finished-job counter to "
                          "the next", 8, min=0)
    done_jobs: int = _f("int", "dynamic object: the count at which a tile's jobs are all done", 0,
                        min=0)


@attrs.frozen
class CaisGroupConfig:
    buffer: str = _f("str", "the symmetric buffer the group registers (ld.cais / red.cais "
                     "addresses lie in it, on the home GPU)")
    gpus: tuple = _f("int_tuple", "the group's GPUs (at least two; empty: every GPU): a merged "
                     "request is complete once every one of them has sent it", (), min=0)


@attrs.frozen
class LaunchConfig:
    kernel: str = _f("str", "kernel name")
    # an int, or an expression string evaluated per GPU by the builder like params ("4 * nsm")
    grid: int | str = _f("int_or_expr", "thread blocks per GPU", min=1)
    stream: int = _f("int", "stream: launches on one stream run in order", 0, min=0)
    gpus: tuple | None = _f("opt_int_tuple", "GPUs to launch on (default: every GPU)", None,
                            min=0)
    params: tuple = _f("params", "kernel parameters: name -> int or expression", ())
    host_delay: int = _f("time", "host-side time before this launch is issued, on top of "
                         "system.gpu.kernel_launch_latency (e.g. the host polling device memory "
                         "and sizing buffers before it can launch)", 0, min=0)
    warp_groups: int = _f("int", "instruction streams per thread block: 1 (default) runs each "
                          "block as one stream; G > 1 makes every block G warp groups that issue "
                          "independently from their own registers (a DeepEP channel block: one "
                          "warp group per peer rank). A block is placed whole on one SM and counts "
                          "once against system.gpu.sm.max_resident_tbs; %tb numbers the warp "
                          "groups (block * G + group) and %ntb counts them", 1, min=1)
    dynamic_smem: int = _f("size", "shared memory each thread block asks for at launch on top of "
                           "its warp groups' .smem (CUDA's dynamic shared memory, "
                           "cudaLaunchConfig_t::dynamicSmemBytes): the block holds it on its SM "
                           "until it exits, so blocks of other launches fit beside it only in "
                           "what is left of system.gpu.sm.smem_bytes; e.g. DeepEP's TMA staging "
                           "buffers", 0, min=0)
    kernel_threads: str = _f("choice", "declared: each thread block holds its kernel's .threads x "
                             ".regs registers and .threads threads (a residency limit); none: it "
                             "holds none - a launch that does not keep the kernel's launch shape "
                             "(DeepEP's per-stream fallback blocks)", "declared",
                             choices=("declared", "none"))
    dam_tile_tbs: int = _f("int", "0: an ordinary launch. N > 0: the MoE-Hub DAM starts its thread "
                           "blocks, N per ready tile, then one last block once every tile was "
                           "started (system.gpu.hub.moe.dam.consumers: launch); the grid is an upper "
                           "bound and the first parameter the tile descriptor queue the DAM fills "
                           "(components/moehub/dam.py)", 0, min=0)
    dam_groups: tuple | None = _f("opt_int_tuple", "with dam_tile_tbs: the tile's thread-block "
                                  "groups in dependency order, [first, second] summing to "
                                  "dam_tile_tbs: the DAM starts the first group when the tile is "
                                  "ready and the second once every block of the first exited (its "
                                  "per-group counter reached zero; MoE-Hub arXiv 2605.05888). "
                                  "Default: one group, every block at once", None, min=1)


@attrs.frozen
class ReportConfig:
    name: str = _f("str", "report name (the YAML key)")
    expr: str = _f("str", "formula over stats")
    unit: str = _f("str", "unit of the result")
    desc: str = _f("str", "one-line description")


@attrs.frozen
class MoeWorkloadConfig:
    num_experts: int = _f("int", "experts addressed by send_to_expert (0: the hub's MoE path is "
                          "unused)", 0, min=0)
    placement: tuple | None = _f("opt_int_tuple", "GPU of each expert (default: blocks of "
                                 "num_experts / num_gpus consecutive experts per GPU)", None, min=0)
    window_rows: int = _f("int", "rows in each expert's receive window (a multiple of "
                          "system.gpu.hub.moe.dam.tile_rows)", 0, min=0)
    row_bytes: int = _f("size", "window slot size: the largest row send_to_expert may send",
                        0, min=0)


@attrs.frozen
class RoutingConfig:
    kind: str = _f("choice", "token-to-expert routing generator (moehub_arch/workloads/routing.py)",
                   "uniform", choices=("uniform", "balanced", "skewed", "group_limited", "normal",
                                       "trace"))
    gini: float = _f("float", "skewed: target Gini coefficient of the per-expert load", 0.2)
    std: float = _f("float", "normal: standard deviation of each expert's probability around "
                    "1/experts (MoE-Hub, arXiv 2605.05888: 0-0.05, 0.032 typical)", 0.032)
    trace: str = _f("str", "trace: routing file (.npy, .npz or .json of top-k expert ids and "
                           "optional weights), relative to the config file", "")
    seed: int | None = _f("opt_int", "generator seed (default: run.seed)", None, min=0)


@attrs.frozen
class MoehubSchemeConfig:
    dispatch_tbs: int = _f("int", "router/dispatch thread blocks per GPU (each sends a stride of "
                           "tokens with send_to_expert)", 32, min=1)
    expert_tbs: int = _f("int", "GEMM worker thread blocks per GPU (moehub_expert; each needs "
                         "most of an SM's shared memory: at most one per SM is resident); the "
                         "claimers are extra, one per local expert", 132, min=1)
    tile_groups: str = _f("choice", "with system.gpu.hub.moe.dam.consumers: launch, how the DAM "
                          "starts a tile's blocks: split (the gate/up group when the tile is ready, "
                          "the down group once every gate/up block exited: the paper's "
                          "per-thread-block-group counters, MoE-Hub arXiv 2605.05888) or together "
                          "(every job at once: the down blocks hold SMs while they wait for the "
                          "gate/up blocks; this project's first launch model)", "split",
                          choices=("split", "together"))
    stores: str = _f("choice", "how moehub_dispatch hands rows to the hub: send_to_expert (this "
                     "project's first reading: a row joins a byte stream toward the expert's GPU "
                     "behind a row header) or row_sparse (the published ISA, MoE-Hub arXiv "
                     "2605.05888: rowsp.malloc registers one allocation id per expert, then st.rowsp "
                     "stores name (id, row, offset); a row's packets never carry another row)",
                     "send_to_expert", choices=("send_to_expert", "row_sparse"))
    multi_expert_store: bool = _f("bool", "an ISA experiment beyond the paper: one store per token "
                                  "and destination GPU names every expert of the token on that GPU "
                                  "(send_to_experts, or st.rowsp.experts with stores: row_sparse); "
                                  "the row crosses the links once and the destination AAU writes it "
                                  "into each expert's window", False)
    nop_choices: int = _f("int", "with stores: row_sparse, each token's last nop_choices routing "
                          "choices (of its top-k list) are stored with st.rowsp.nop, marking them "
                          "non-critical (system.gpu.hub.moe.rpm.schedule: paper sends them after the "
                          "critical rows). 0 (default): none - assumption: the MoE-Hub paper (arXiv "
                          "2605.05888) has the .nop suffix but does not say which rows its dispatch "
                          "marks", 0, min=0)


@attrs.frozen
class DeepepSchemeConfig:
    comm_sms: int = _f("int", "SMs (one TB each) for dispatch and combine; half send, half "
                       "receive: channels = comm_sms / 2", 20, min=2)
    host_sync_latency: int = _f("time", "host round trip after the count exchange: the CPU polls "
                                "the counts, sizes the receive buffers and launches dispatch", 10_000_000,
                                min=0)
    ring_rows: int = _f("int", "rows of each (channel, peer) ring buffer", 64, min=1)
    send_chunk_tokens: int = _f("int", "tokens a dispatch sender puts into a ring before it "
                                "publishes the tail (at most half the ring; DeepEP's "
                                "num_max_nvl_chunked_send_tokens)", 8, min=1)
    combine_send_chunk_tokens: int = _f("int", "tokens an intranode combine sender puts into a "
                                        "ring on the home rank before it publishes the tail, "
                                        "and the room it waits for before each chunk (at most "
                                        "half the ring; DeepEP's combine config has its own "
                                        "num_max_nvl_chunked_send_tokens: deep_ep/buffer.py "
                                        "get_combine_config, 4 for 8 ranks); 0: the dispatch's "
                                        "send_chunk_tokens", 0, min=0)
    kernels: str = _f("choice", "layer: the whole MoE layer; communication: only layout, notify, "
                      "dispatch, combine and the home reduction - the experts are the identity "
                      "(combine sends the received rows back) and there are no shared experts, "
                      "as DeepEP's own benchmark times its dispatch and combine kernels",
                      "layer", choices=("layer", "communication"))
    dispatch_dtype: str = _f("choice", "element type of the dispatched token rows: bf16 (2 B per "
                             "element) or fp8 (1 B per element plus one fp32 scale per 128 "
                             "elements; timing mode with kernels: communication only); combine "
                             "is always bf16", "bf16", choices=("bf16", "fp8"))
    home_reduce: str = _f("choice", "where the intranode combine sums a token's rows at home: "
                          "receivers (DeepEP's combine, csrc/kernels/intranode.cu: the senders "
                          "copy each (token, rank) row into a per-(channel, rank) ring on the "
                          "home rank and the channel's receiver SMs, in the same kernel, wait "
                          "for the token's rows from every rank holding it and add them in "
                          "fp32, with ring head/tail flow control) or kernel (the first model, "
                          "kept to compare: deepep_combine_partials copies the rows to a "
                          "[token][rank] buffer at home and a separate kernel, deepep_reduce, "
                          "sums them after it ended)", "receivers",
                          choices=("receivers", "kernel"))
    head_poll: str = _f("choice", "how a sender of the intranode combine (home_reduce: receivers) "
                        "learns that a ring on the home rank has room: remote (DeepEP's, "
                        "csrc/kernels/intranode.cu combine: the head lives on the home rank and "
                        "the sender reads it with a volatile load through NVLink before every "
                        "chunk, until the whole chunk fits - a round trip per chunk) or pushed "
                        "(the first model, kept to compare: the home's head updater stores the "
                        "head into the sender's memory every chunk and the sender waits on its "
                        "local copy only when the ring is full)", "remote",
                        choices=("remote", "pushed"))
    internode: str = _f("choice", "on a multi-node system: forward (DeepEP's internode kernels, "
                        "csrc/kernels/internode.cu: a token goes once over RDMA to the GPU of the "
                        "same local rank on each node holding any of its experts, which forwards "
                        "it over NVLink to the ranks there; combine reduces a node's partial rows "
                        "at that forwarder and sends one row per node home) or direct (every "
                        "sender puts to the expert's GPU itself, across the NIC for other nodes: "
                        "the intranode kernels run unchanged on the whole system)", "forward",
                        choices=("forward", "direct"))
    rdma_ring_rows: int = _f("int", "rows of each (channel, source node) RDMA receive ring of the "
                             "internode kernels (assumption: 128 rows, 1.8 MB of bf16 DeepSeek-V3 "
                             "rows per ring: a few chunks in flight per channel and node)", 128,
                             min=1)
    rdma_send_chunk_tokens: int = _f("int", "tokens an internode RDMA sender puts before it "
                                     "publishes the ring tail (at most half the ring; DeepEP's "
                                     "num_max_rdma_chunked_send_tokens; assumption: 16)", 16,
                                     min=1)


@attrs.frozen
class DeepepLlSchemeConfig:
    send_tbs: int = _f("int", "sending thread blocks per GPU of the low-latency dispatch (they "
                       "must all be resident at once: they wait for each other before sending "
                       "the counts; assumption: 132, one per H100/H800 SM, as DeepEP's "
                       "low-latency kernels spread their sending warps over every SM they get)",
                       132, min=1)
    kernels: str = _f("choice", "layer: the whole MoE layer; communication: dispatch, combine and "
                      "the home reduction alone with identity experts (DeepEP's "
                      "tests/test_low_latency.py times its dispatch and combine kernels so)",
                      "layer", choices=("layer", "communication"))
    dispatch_dtype: str = _f("choice", "element type of the dispatched rows: bf16, or fp8 (1 B "
                             "per element plus one fp32 scale per 128; timing mode with kernels: "
                             "communication only); combine is bf16", "bf16",
                             choices=("bf16", "fp8"))


@attrs.frozen
class CountedSchemeConfig:
    send_tbs: int = _f("int", "sending thread blocks per GPU of the counted-write dispatch (they "
                       "must all be resident at once: they wait for each other before sending "
                       "the counts; assumption: 132, as scheme deepep_ll's senders)", 132, min=1)
    kernels: str = _f("choice", "layer: the whole MoE layer; communication: dispatch, combine and "
                      "the home reduction alone with identity experts", "layer",
                      choices=("layer", "communication"))


@attrs.frozen
class HiermoeSchemeConfig:
    level: str = _f("choice", "the topology level at which a token row is deduplicated: auto "
                    "(HierMoE's choice, arXiv 2508.09591: the level its alpha-beta performance "
                    "model gives the shortest all-to-all), gpu (once per destination GPU) or "
                    "node (once per destination node, fanned out inside)", "auto",
                    choices=("auto", "gpu", "node"))
    expert_swap: bool = _f("bool", "swap experts between GPUs before the layer so that the "
                           "busiest GPU's token-expert rows drop (HierMoE's expert swap), from "
                           "the load observed in the previous iteration (assumption: equal to "
                           "this iteration's - hot experts stay hot for many steps - so the "
                           "swap's benefit is an upper bound)", True)


@attrs.frozen
class OverlapSchemeConfig:
    comm_sms: int = _f("int", "SMs for communication, as DeepEP's comm_sms: channels = comm_sms / "
                       "2, a sender and a receiver thread block per channel (a warp group per "
                       "peer), each holding an SM of its own", 20, min=2)
    ring_rows: int = _f("int", "rows of each (channel, peer) ring buffer", 64, min=1)
    compute_tbs: int = _f("int", "persistent GEMM thread blocks per GPU (each needs most of an "
                          "SM's shared memory: at most one per SM is resident; at most num_sms - "
                          "comm_sms, since the communication blocks each hold an SM)", 112, min=1)


@attrs.frozen
class MegatronSchemeConfig:
    host_sync_latency: int = _f("time", "device-to-host synchronisation after the count "
                                "all-gather: the host reads the tokens per expert, computes the "
                                "all-to-all splits and launches the permutation (assumption: "
                                "the same round trip as deepep.host_sync_latency)", 10_000_000,
                                min=0)
    a2a_chunk_bytes: int = _f("size", "bytes per put of the all-to-all (one put per piece of a "
                              "peer's contiguous range; assumption: 64 KB, large enough that a "
                              "put's issue cost is negligible)", 65536, min=1)
    permute_tbs: int = _f("int", "thread blocks per GPU of the count, permute and unpermute "
                          "kernels (assumption: one per SM)", 132, min=1)


@attrs.frozen
class FastermoeSchemeConfig:
    group_size: int = _f("int", "GPUs per group of FasterMoE's group-wise exchange: in step s a "
                         "GPU exchanges rows with the group s ahead (fastmoe's "
                         "FMOE_FASTER_GROUP_SIZE, default 4 in cuda/fastermoe/smart_schedule.cpp; "
                         "a group larger than the GPUs is all of them: one step, no overlap)", 4,
                         min=1)
    shadow: str = _f("choice", "shadow experts: policy (FasterMoE's global policy, "
                     "fmoe/fastermoe/shadow_policy.py, on the simulated GPU's tensor peak and "
                     "NVLink bandwidth: the most loaded experts are replicated while the policy's "
                     "estimate falls) or none (fastmoe's default, FMOE_FASTER_SHADOW_ENABLE "
                     "unset); assumption: policy, the system the MoE-Hub and DySHARP papers "
                     "compare with is FasterMoE with both of its techniques", "policy",
                     choices=("policy", "none"))
    host_sync_latency: int = _f("time", "device-to-host synchronisation after the count "
                                "all-gather: the host reads the counts, runs the shadow policy, "
                                "computes the exchange tables and launches the permutation "
                                "(assumption: the same round trip as megatron's)", 10_000_000,
                                min=0)
    a2a_chunk_bytes: int = _f("size", "bytes per put of the exchange and the weight broadcast "
                              "(assumption: 64 KB, as megatron)", 65536, min=1)
    permute_tbs: int = _f("int", "thread blocks per GPU of the count, permute and unpermute "
                          "kernels (assumption: one per SM)", 132, min=1)


@attrs.frozen
class CcfuserSchemeConfig:
    host_sync_latency: int = _f("time", "device-to-host synchronisation after the count "
                                "all-gather: the host reads the counts and writes the gather "
                                "lists and the GEMM tile table (assumption: the same round trip "
                                "as megatron's)", 10_000_000, min=0)
    pull_tbs: int = _f("int", "thread blocks per GPU that read token rows straight from the "
                       "source GPUs' memory into the GEMM tiles (assumption: 16, beside the "
                       "persistent GEMM blocks; each holds no shared memory)", 16, min=1)
    compute_tbs: int = _f("int", "persistent GEMM thread blocks per GPU (one per SM: their shared "
                          "memory fills most of an SM; assumption: every SM)", 132, min=1)


@attrs.frozen
class TutelSchemeConfig:
    capacity_factor: float = _f("float", "expert capacity per source GPU = ceil(capacity_factor x "
                                "tokens x top-k / experts), rounded up to a multiple of chunks; "
                                "rows beyond it are dropped, free slots are sent as padding "
                                "(Tutel's capacity_factor, default 1.0)", 1.0)
    chunks: int = _f("int", "pipeline chunks: the capacity is split into this many slices, each "
                     "moved by its own all-to-all and computed as soon as it arrived, so one "
                     "chunk's all-to-all overlaps another's expert FFN (Tutel's "
                     "a2a_ffn_overlap_degree; assumption: 2, the smallest that overlaps - Tutel's "
                     "own default 1 does not)", 2, min=1)
    a2a_chunk_bytes: int = _f("size", "bytes per put of the all-to-all (assumption: 64 KB, as "
                              "megatron)", 65536, min=1)
    permute_tbs: int = _f("int", "thread blocks per GPU of the encode and decode kernels "
                          "(assumption: one per SM)", 132, min=1)
    all_to_all: str = _f("choice", "the all-to-all algorithm: flat (every GPU puts to every GPU), "
                         "2dh (Tutel's 2-D hierarchical all-to-all, arXiv 2206.03382: a stride "
                         "copy, an all-to-all inside the node that gathers at each GPU the rows "
                         "bound for its local rank on every node, a second stride copy, then one "
                         "all-to-all among the GPUs of one local rank across nodes - one IB "
                         "message per peer node carrying all the node's GPUs' rows; needs more "
                         "than one node and more than one GPU per node), auto (2dh on such a "
                         "system, flat otherwise: Tutel's use_2dh option is off by default, but "
                         "its paper evaluates 2DH at multi-node scale, where the flat algorithm "
                         "sends GPUs-per-node times more, smaller IB messages)", "auto",
                         choices=("auto", "flat", "2dh"))


@attrs.frozen
class NvlsSchemeConfig:
    channels: int = _f("int", "thread blocks per GPU of the all-gather and the reduce-scatter "
                       "(NCCL's NVLS channels; assumption: 16, NCCL's NVLS channel count on "
                       "H100 - NCCL_NVLS_NCHANNELS' default)", 16, min=1)
    chunk_bytes: int = _f("size", "bytes per multimem.st / multimem.ld_reduce of the all-gather "
                          "and the reduce-scatter (NCCL's chunk; assumption: 64 KB, as the "
                          "all-to-all schemes' puts)", 65536, min=1)
    select_tbs: int = _f("int", "thread blocks per GPU of the kernels that pick the local "
                         "experts' rows out of the all-gathered tokens and build the partial "
                         "sums (assumption: one per SM)", 132, min=1)


@attrs.frozen
class DysharpSchemeConfig:
    channels: int = _f("int", "thread blocks per GPU of the dispatch and the combine kernels (each "
                       "issues one dymultimem operation per token in turn; assumption: 16, as "
                       "scheme nvls's channels)", 16, min=1)
    scale_tbs: int = _f("int", "fusion none: thread blocks per GPU of the pass that weights the "
                        "expert outputs by their router weights (assumption: four per SM of an "
                        "H100, so an SM hides one block's meta-row load behind the others' vector "
                        "work)", 528,
                        min=1)
    fusion: str = _f("choice", "token: token-centric fusion, the paper's design (dispatch, "
                     "expert GEMMs and combine overlap, driven by the token tracker); none: "
                     "separate kernels with barriers between them", "token",
                     choices=("token", "none"))
    compute_tbs: int | str = _f("int_or_expr", "fusion token: persistent expert-GEMM thread blocks "
                                "per GPU (assumption: one per SM, as the unfused grouped GEMM "
                                "uses every SM)", "nsm", min=1)
    gate_tbs: int | str = _f("int_or_expr", "fusion token: thread blocks per GPU of the gate-weight "
                             "and ready-notice group (assumption: two per SM, so that with the "
                             "GEMM block and the dispatch-and-combine blocks every block of the "
                             "megakernel is resident at once within system.gpu.sm."
                             "max_resident_tbs 4)", "2 * nsm", min=1)


@attrs.frozen
class LayerConfig:
    model: str = _f("str", "model shape: a name in workloads/models/ or a path to a model YAML "
                           "('' = no MoE layer: the workload's own launches run)", "")
    tokens_per_gpu: int = _f("int", "tokens routed on each GPU", 0, min=0)
    top_k: int = _f("int", "experts per token, in place of the model file's model.top_k (0: the "
                    "model's own); `moehub-sim layer --top-k K`", 0, min=0)
    kernel_files: tuple = _f("str_tuple", "your copies of the scheme's kernel files, each run in "
                             "place of the shipped file of the same name (a modified "
                             "moe_layer.s replaces workloads/kernels/moehub/moe_layer.s): the copy "
                             "keeps the shipped kernel and macro names, so the scheme's launches "
                             "run it", ())
    routing: RoutingConfig = _f("node", "routing generator", RoutingConfig(), cls=RoutingConfig)
    gemm_n_tile: int = _f("int", "output columns of one expert-GEMM job (a thread block's N tile): "
                          "a row tile's gate/up GEMM is FFN width / n_tile jobs, its down GEMM "
                          "hidden / n_tile jobs, spread over the SMs; must divide both", 128, min=1)
    gemm_swizzle: int = _f("int", "row tiles per group of the bulk expert GEMMs' job order "
                           "(deepep, megatron, tutel; workloads/kernels/lib/gemm_tiles.s "
                           "swizzle_job): inside a group the column job is the outer loop, so the "
                           "thread blocks running at one time share weight column tiles in the L2; "
                           "1 = row tile by row tile. Default 8: DeepGEMM's group size heuristic "
                           "(deep_gemm get_num_1d_blocks_per_group: of 8 and 16 row tiles, the one "
                           "with the smaller G x BLOCK_M + ceil(SMs / G) x BLOCK_N; 128 x 128 tiles "
                           "on 132 SMs tie and it keeps 8)", 8, min=1)
    stream_swizzle: int = _f("int", "tiles per group of the streaming expert kernels' job order "
                             "(overlap, moehub; workloads/kernels/lib/streaming.s): as "
                             "gemm_swizzle, for tiles that arrive over time - a group's later "
                             "column jobs wait for all its tiles, and its down jobs come lag "
                             "groups later, so the group trades L2 reuse for latency. 1 = tile by "
                             "tile. assumption: 4, half the bulk GEMMs' group (no public streaming "
                             "kernel states one)", 4, min=1)
    combine_tbs: int = _f("int", "thread blocks per GPU of the final weighted combine", 32, min=1)
    passes: str = _f("choice", "which passes run: forward, or training (the forward, then the "
                     "layer's backward from a gradient dy of its output: the combine's backward "
                     "as a dispatch of output gradients, the experts' dgrad and wgrad, the "
                     "dispatch's backward as a combine of input gradients, the router-weight "
                     "gradients; schemes with a backward: megatron; docs/training.md)", "forward",
                     choices=("forward", "training"))
    shared_tbs: int = _f("int", "thread blocks per GPU of the shared experts (if the model has "
                         "any)", 16, min=1)
    moehub: MoehubSchemeConfig = _f("node", "scheme moehub", MoehubSchemeConfig(),
                                    cls=MoehubSchemeConfig)
    deepep: DeepepSchemeConfig = _f("node", "scheme deepep", DeepepSchemeConfig(),
                                    cls=DeepepSchemeConfig)
    deepep_ll: DeepepLlSchemeConfig = _f("node", "scheme deepep_ll", DeepepLlSchemeConfig(),
                                         cls=DeepepLlSchemeConfig)
    counted: CountedSchemeConfig = _f("node", "scheme counted (Blackwell counted writes)",
                                      CountedSchemeConfig(), cls=CountedSchemeConfig)
    hiermoe: HiermoeSchemeConfig = _f("node", "scheme hiermoe (its kernels take "
                                      "workload.layer.deepep's settings)", HiermoeSchemeConfig(),
                                      cls=HiermoeSchemeConfig)
    overlap: OverlapSchemeConfig = _f("node", "scheme overlap", OverlapSchemeConfig(),
                                      cls=OverlapSchemeConfig)
    megatron: MegatronSchemeConfig = _f("node", "scheme megatron", MegatronSchemeConfig(),
                                        cls=MegatronSchemeConfig)
    tutel: TutelSchemeConfig = _f("node", "scheme tutel", TutelSchemeConfig(),
                                  cls=TutelSchemeConfig)
    fastermoe: FastermoeSchemeConfig = _f("node", "scheme fastermoe", FastermoeSchemeConfig(),
                                          cls=FastermoeSchemeConfig)
    ccfuser: CcfuserSchemeConfig = _f("node", "scheme ccfuser", CcfuserSchemeConfig(),
                                      cls=CcfuserSchemeConfig)
    nvls: NvlsSchemeConfig = _f("node", "scheme nvls", NvlsSchemeConfig(), cls=NvlsSchemeConfig)
    dysharp: DysharpSchemeConfig = _f("node", "scheme dysharp", DysharpSchemeConfig(),
                                      cls=DysharpSchemeConfig)


@attrs.frozen
class BlockConfig:
    """A transformer block of a dense model under tensor parallelism (workloads/block.py)."""
    model: str = _f("str", "dense model shape: a name in workloads/blocks/ or a path to a block "
                           "model YAML ('' = no block)", "")
    kind: str = _f("choice", "which part of the block: ffn (the dense SwiGLU FFN: column-parallel "
                   "gate/up, row-parallel down, then the TP all-reduce); attention (norm, "
                   "column-parallel QKV, causal FlashAttention-style attention over this GPU's "
                   "heads, row-parallel output projection, all-reduce, residual); transformer "
                   "(the attention part, then norm, FFN, all-reduce, residual: one whole layer)",
                   "ffn", choices=("ffn", "attention", "transformer"))
    scheme: str = _f("choice", "how the row-parallel partial sums are combined: tp_ring (NCCL "
                     "ring all-reduce over puts/flags), sp_ring (sequence parallelism, kinds "
                     "attention and transformer: ring reduce-scatter after each row-parallel "
                     "GEMM, norms and residuals on the sequence shard, ring all-gather before "
                     "each column-parallel GEMM), tp_nvls (NCCL's NVLink SHARP all-reduce: "
                     "multimem.ld_reduce + multimem.st in the switch), sp_nvls (sp_ring with the "
                     "NVLS reduce-scatter and all-gather), cais (sp_ring with CAIS's switch "
                     "operations: red.cais reduce-scatter, ld.cais all-gather, merged in the "
                     "switch's merge unit), t3 (T3's "
                     "producer-triggered reduce-scatter fused into the output projection and "
                     "the FFN's down GEMM - each finished row tile is sent to its owner with a "
                     "near-memory add, put.add.bf16 - then an all-gather), tp_none (t = 1: no "
                     "collective, the reference)",
                     "tp_ring", choices=("tp_ring", "sp_ring", "tp_nvls", "sp_nvls", "cais", "tp_none",
                                         "t3"))
    tp: int = _f("int", "tensor-parallel degree t: every GPU of the system is one TP rank (must "
                 "equal system.num_gpus and divide heads, hidden and ffn)", 8, min=1)
    tokens: int = _f("int", "tokens in the block (sequence x batch); 0: the model's seq x batch",
                     0, min=0)
    gemm_tbs: int = _f("int", "thread blocks per GPU of the FFN kernel (assumption: one per SM "
                       "of an H100, 132)", 132, min=1)
    tile_rows: int = _f("int", "M tile of the FFN GEMM jobs (assumption: 128, CUTLASS's common "
                        "128 x 128 tile)", 128, min=1)
    allreduce_channels: int = _f("int", "thread blocks (NCCL channels) of the TP collectives, "
                                 "ring or NVLS (assumption: 16, as configs/ubench/"
                                 "allreduce_ring.yaml and allreduce_nvls.yaml)", 16, min=1)
    attention_tile: int = _f("int", "query and key tile of the attention kernel, Br = Bc (must "
                             "divide seq; assumption: 64, FlashAttention-2's key block for head "
                             "dim 128, arXiv 2307.08691)", 64, min=1)
    allreduce_slice: int = _f("int", "largest elements per put of the ring collectives (NCCL's "
                              "chunk); the block uses the largest divisor <= this of a channel's "
                              "share, preferring multiples of 64 elements (whole 128 B packets; "
                              "assumption: 64K elements = 128 KB bf16)",
                              65536, min=1)
    nvls_slice: int = _f("int", "largest elements per multimem operation of the NVLS collectives "
                         "(tp_nvls, sp_nvls), chosen as allreduce_slice is (assumption: 32K "
                         "elements = 64 KB bf16, the slice of configs/ubench/allreduce_nvls.yaml "
                         "whose busbw is the validated figure: a TB-level ld_reduce keeps its whole "
                         "slice in flight, where NCCL's warps keep a few 16 B vectors each)",
                         32768, min=1)
    cais_fusion: bool = _f("bool", "scheme cais: fuse the all-gather into the QKV projection "
                           "(its thread blocks pull their row tiles with ld.cais) and the "
                           "reduce-scatter into the output projection (its thread blocks push "
                           "their tiles home with red.cais) instead of collective kernels "
                           "between the GEMMs (CAIS, arXiv 2605.05628; tp/cais.s tp_gemm_cais); "
                           "the FFN's collectives stay kernels", False)
    t3_collectives: str = _f("choice", "scheme t3: how the all-gathers after its fused "
                             "reduce-scatters run (T3 does not fuse them): ring (NCCL's ring "
                             "all-gather, as sp_ring; T3's own setting, arXiv 2401.16677) or "
                             "nvls (NVLink SHARP's multimem.st, as sp_nvls)", "ring",
                             choices=("ring", "nvls"))
    passes: str = _f("choice", "which passes run: forward (inference prefill) or training "
                     "(the forward, keeping the activations the backward needs, then the "
                     "backward: input and weight gradients and the input gradients' all-reduces; "
                     "schemes tp_ring, tp_nvls, tp_none and (kinds attention, transformer) sp_ring, "
                     "sp_nvls, cais - cais's training forward runs its collective kernels, "
                     "cais_dataflow ignored; tp/ffn_backward.s, "
                     "tp/block_backward.s)",
                     "forward", choices=("forward", "training"))
    cais_dataflow: bool = _f("bool", "scheme cais, kind transformer: CAIS's graph-level dataflow "
                             "(arXiv 2605.05628) from the output projection to the layer's end as "
                             "one persistent kernel (tp/cais_dataflow.s tp_cais_dataflow) with "
                             "per-row-tile dependencies in memory - output projection GEMM-RS -> "
                             "residual + norm on the tile's home -> FFN gate/up AG-GEMM -> down "
                             "GEMM-RS -> residual - so the reductions toward the homes, the gathers "
                             "from them and the FFN's GEMMs overlap (with cais_fusion the QKV "
                             "projection is an AG-GEMM as well). false: the collectives as kernels "
                             "between the GEMMs, as before the dataflow (bit-identical). Kind "
                             "attention, passes: training (whose backward needs the gathered "
                             "norm output the dataflow kernel does not keep) and the other "
                             "schemes ignore it", True)
    cais_window: int = _f("int", "cais_dataflow: GEMM-RS jobs whose reductions may be in flight "
                          "per GPU, posted in the same order on every GPU (job s waits until s - "
                          "window + 1 jobs are complete), so that the GPUs' contributions to a "
                          "line meet in the merge table (assumption: 64 jobs of 128 x 128 bf16 = "
                          "2 MB per GPU; consecutive jobs go to different homes, so 256 KB per "
                          "home on 8 GPUs, a third of a home's merge tables - 18 ports x 40 KB - "
                          "and about what a GPU's links (450 GB/s) move in a fence's round trip "
                          "of a few us; at most 4095)", 64, min=1)
    cais_sync: bool = _f("bool", "scheme cais: merging-aware thread-block coordination (CAIS, "
                         "arXiv 2605.05628): the same thread block on every GPU is one group; "
                         "before each slice of a collective (each job of a fused GEMM) the group "
                         "syncs in the switch's group sync table (sync.cais), so no GPU runs more "
                         "than one group ahead and the requests for a line meet in the merge "
                         "table. false: no coordination (only the common request order)", True)


@attrs.frozen
class WorkloadConfig:
    mode: str = _f("choice", "functional: real data; timing: addresses only", "timing",
                   choices=("functional", "timing"))
    kernel_files: tuple = _f("str_tuple", "assembly files (absolute paths once loaded)", ())
    isa_files: tuple = _f("str_tuple", "extra instruction-set files read after the shipped isa/*.yaml "
                          "(add mnemonics, or redefine one with replace: true); absolute paths once "
                          "loaded", ())
    buffers: tuple = _f("named", "symmetric buffers: name -> fields", (), cls=BufferConfig)
    launches: tuple = _f("list", "kernel launches", (), cls=LaunchConfig)
    multicast: tuple = _f("list", "NVLink SHARP multicast objects (cuMulticastCreate + BindMem): "
                          "a buffer and a group of GPUs that multimem instructions address",
                          (), cls=MulticastConfig)
    cais: tuple = _f("list", "CAIS groups (components/cais/): a buffer and the GPUs whose "
                     "ld.cais / red.cais to it the switch merges", (), cls=CaisGroupConfig)
    report: tuple = _f("named", "derived results: name -> fields", (), cls=ReportConfig)
    moe: MoeWorkloadConfig = _f("node", "experts served by the MoE-Hub: placement, receive windows",
                                MoeWorkloadConfig(), cls=MoeWorkloadConfig)
    layer: LayerConfig = _f("node", "an MoE layer of a real model run by `scheme` (its buffers, "
                            "routing tables and launches are generated)", LayerConfig(),
                            cls=LayerConfig)
    block: BlockConfig = _f("node", "a transformer block of a dense model under tensor parallelism "
                            "(its buffers and launches are generated; scheme must be none)",
                            BlockConfig(), cls=BlockConfig)


# the engine's exact shortcuts (run.shortcuts), bit i of the engine's `shortcuts` parameter each
# (engine/events.py SHORTCUT_*)
SHORTCUTS = ("tx_wake", "idle_output", "sm_fold", "back_to_back")


@attrs.frozen
class RunConfig:
    seed: int = _f("int", "random seed", 1, min=0)
    engine: str = _f("choice", "compiled (numba) or reference (python) loop", "numba",
                     choices=("numba", "python"))
    max_events: int = _f("int", "stop after this many events (0 = unlimited)", 0, min=0)
    batch_events: int = _f("int", "events per compiled-loop call between progress reports",
                           2_000_000, min=1)
    packet_train: int = _f("int", "simulate up to this many consecutive full link packets of one "
                           "transfer as one train (one event per hop): bandwidth, header and flit "
                           "overhead, credits and packet statistics stay exact; store-and-forward "
                           "and arbitration per train are an approximation (tools/bench.py "
                           "measures its error). 1 = every packet simulated (exact)", 1, min=1)
    shortcuts: tuple = _f("choice_tuple", "the engine's exact shortcuts (docs/engine_order.md): "
                          "tx_wake (a link transmitter sleeps straight to its head packet's ready "
                          "tick), idle_output (a switch input's packet is sent on an idle output "
                          "link in its arrival event), sm_fold (register-only instructions that "
                          "nothing else can observe issue in the SM's issue event before them), "
                          "back_to_back (a switch output link sends its next queued packet, due "
                          "right after the one it sends, in the same event). "
                          "Each gives the same model stats with fewer events; [] runs every event "
                          "of the reference path (the tests compare both)", SHORTCUTS,
                          choices=SHORTCUTS)
    # robustness (docs/robustness.md): watchdog, limits, end-of-run invariants
    watchdog_interval: int = _f("time", "stop the run (exit status 3, with a report of who waits on "
                                "what) when no instruction issues for this much simulated time; "
                                "0ps disables the watchdog", 1_000_000_000, min=0)
    livelock_interval: int = _f("time", "stop the run (exit status 3, with the kernel, line and loop "
                                "of each spinning thread block) when a thread block keeps issuing "
                                "instructions without touching memory, the hub or the links or "
                                "exiting for this much simulated time; 0ps disables the check. "
                                "assumption: 1 ms, as the watchdog, is far longer than any "
                                "register-only stretch of a real kernel (thousands of cycles)",
                                1_000_000_000, min=0)
    max_ticks: int = _f("time", "stop the run cleanly at this simulated time, stats dumped (0ps: no "
                        "limit)", 0, min=0)
    max_wall: int = _f("time", "stop the run cleanly after this much host wall-clock time, checked "
                       "between batches of batch_events events (0ps: no limit; a host time, "
                       "so not bounded by the simulated-time range)", 0, min=0,
                       max=2 ** 63 - 1)
    check_invariants: bool = _f("bool", "check conservation invariants at the end of the run "
                                "(bytes per link, packets, credits, thread blocks, hub queues, MoE "
                                "token accounting); a violation is exit status 4", True)


# ------------------------------------------------------------------- observing a run
TRACE_COMPONENTS = ("sm", "launches", "phases", "nvlink", "hub", "switch")
# debug flags, gem5 style (moehub_arch/trace/records.py maps them to record categories)
DEBUG_FLAGS = ("SM", "Launch", "NVLink", "Switch", "Hub", "RPM", "AAU", "DAM", "MoEHub", "All")


@attrs.frozen
class TraceConfig:
    enabled: bool = _f("bool", "write trace.json, a timeline in Chrome trace-event format for "
                       "ui.perfetto.dev (`moehub-sim run --trace`)", False)
    start: int = _f("time", "timeline window: first simulated time shown", 0, min=0)
    stop: int = _f("time", "timeline window: last simulated time shown (0 = end of the run)", 0,
                   min=0)
    gpus: tuple | None = _f("opt_int_tuple", "GPUs shown (default: every GPU); switches are shown "
                            "when the component list has switch", None, min=0)
    components: tuple = _f("choice_tuple", "what the timeline shows: sm (thread-block residency "
                           "and activity per TB slot, SM occupancy counters), launches (kernel "
                           "spans per stream), phases (MoE layer phases), nvlink (utilisation "
                           "per link direction), hub (queue and window occupancy), switch (port "
                           "queues)", TRACE_COMPONENTS, choices=TRACE_COMPONENTS)
    counter_period: int = _f("time", "sampling period of the counters (link utilisation over the "
                             "period, occupancies at the sampled instant)", 100_000, min=1)
    max_events: int = _f("int", "most trace events written (bounds the file at roughly 100 B per "
                         "event); the rest is dropped with a warning", 2_000_000, min=1)


@attrs.frozen
class DebugConfig:
    flags: tuple = _f("choice_tuple", "components whose events are printed, one line each "
                      "(`--debug-flags Hub,NVLink`; MoEHub = RPM,AAU,DAM)", (), choices=DEBUG_FLAGS)
    start: int = _f("time", "first simulated time printed (`--debug-start`)", 0, min=0)
    file: str = _f("str", "where the lines go: a file name (relative to the output directory, as "
                   "gem5's --debug-file) or '' for standard error", "")


@attrs.frozen
class OccupancyConfig:
    period: int = _f("time", "occupancy monitor (components/occupancy.py): sample every GPU's hub "
                     "request FIFO and link transmit backlog every period (0 = off)", 0, min=0)


@attrs.frozen
class StatsConfig:
    dump_period: int = _f("time", "gem5-style periodic stat dumps: every period the stats as they "
                          "are then go to stats_dumps.txt / stats_dumps.csv (0 = off)", 0, min=0)
    occupancy: OccupancyConfig = _f("node", "queue-occupancy monitor", OccupancyConfig(),
                                    cls=OccupancyConfig)


# ---------------------------------------------------------------------------------- root
@attrs.frozen
class Config:
    system: SystemConfig = _f("node", "the simulated machine", cls=SystemConfig)
    scheme: str = _f("choice", "how the MoE layer (workload.layer) moves tokens: none (the "
                     "workload's own launches), deepep, overlap, moehub, megatron, tutel, "
                     "deepep_ll, hiermoe, nvls, dysharp, counted, fastermoe, ccfuser", "none",
                     choices=("none", "deepep", "overlap", "moehub", "megatron", "tutel",
                              "deepep_ll", "hiermoe", "nvls", "dysharp", "counted", "fastermoe",
                              "ccfuser"))
    workload: WorkloadConfig = _f("node", "what runs on it", WorkloadConfig(), cls=WorkloadConfig)
    run: RunConfig = _f("node", "how the simulation runs", RunConfig(), cls=RunConfig)
    stats: StatsConfig = _f("node", "statistics output", StatsConfig(), cls=StatsConfig)
    trace: TraceConfig = _f("node", "timeline of the run (trace.json)", TraceConfig(), cls=TraceConfig)
    debug: DebugConfig = _f("node", "debug output per component", DebugConfig(), cls=DebugConfig)
    source_files: tuple = attrs.field(default=(), metadata={"kind": "internal"})
    # which file (or --set) set each key: ((key path tuple, label), ...), for errors found after
    # loading (builder, MoE layer) so they can name the file as loading errors do
    key_sources: tuple = attrs.field(default=(), eq=False, repr=False, metadata={"kind": "internal"})
    # warnings of the loader (an extends entry overriding keys an earlier one set), for the user
    load_warnings: tuple = attrs.field(default=(), eq=False, repr=False,
                                       metadata={"kind": "internal"})

    def to_dict(self) -> dict:
        """Every resolved value as a JSON-serialisable nested dict (base units), with beside the
        sections: `units` (base unit of each kind), `key_units` (the unit of every quantity key,
        e.g. system.gpu.hub.moe.rpm.flush_timeout: ps), `source_files`, `value_sources` (the file
        or --set that set each key) and `load_warnings`."""
        out = {"units": dict(BASE_UNITS)}
        for a in attrs.fields(Config):
            if a.metadata.get("kind") != "internal":
                out[a.name] = _to_plain(getattr(self, a.name))
        out["key_units"] = key_units(self)
        out["source_files"] = list(self.source_files)
        out["value_sources"] = {_dotted(k): label for k, label in self.key_sources if k}
        out["load_warnings"] = list(self.load_warnings)
        return out

    def where(self, path=()) -> str:
        """The file (or `--set ...`) that set the key `path` (a tuple, or a dotted string such as
        'workload.launches[0].grid'); the main config file if none set it."""
        if isinstance(path, str):
            path = tuple(int(k) if k.isdigit() else k
                         for k in path.replace("[", ".").replace("]", "").split(".") if k)
        best, label = -1, ""
        for key, src in self.key_sources:
            if len(key) > best and tuple(path[:len(key)]) == tuple(key):
                best, label = len(key), src
        return label


def _dotted(path) -> str:
    out = ""
    for k in path:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    return out


def key_units(obj, prefix="") -> dict:
    """Dotted key -> base unit (ps, Hz, B, B/s) of every quantity in a config node."""
    out = {}
    for a in attrs.fields(type(obj)):
        kind = a.metadata.get("kind")
        name = f"{prefix}.{a.name}" if prefix else a.name
        v = getattr(obj, a.name)
        if kind in UNIT_KINDS:
            out[name] = BASE_UNITS[kind]
        elif kind == "node":
            out.update(key_units(v, name))
        elif kind in ("list", "named"):
            for i, item in enumerate(v):
                out.update(key_units(item, f"{name}.{item.name}" if kind == "named"
                                     else f"{name}[{i}]"))
    return out


def _to_plain(obj):
    if attrs.has(type(obj)):
        out = {}
        for a in attrs.fields(type(obj)):
            v = getattr(obj, a.name)
            kind = a.metadata.get("kind")
            if kind == "named":
                out[a.name] = {item.name: {k: w for k, w in _to_plain(item).items() if k != "name"}
                               for item in v}
            elif kind == "params":
                out[a.name] = {k: w for k, w in v}
            else:
                out[a.name] = _to_plain(v)
        return out
    if isinstance(obj, tuple):
        return [_to_plain(v) for v in obj]
    return obj


_FLAT_SECTIONS = ("sm", "hbm", "l2", "hub", "nvlink", "switch")


def flat_params(cfg: Config) -> dict:
    """Numeric system parameters in one flat namespace for ISA cost expressions.

    Keys: gpu.num_sms, gpu.sm_clock, gpu.kernel_launch_latency, sm.<field>, hbm.<field>,
    hub.<field> (and hub.moe.<block>.<field>), nvlink.<field>, switch.<field>, system.num_gpus.
    Values in base units.
    """
    s = cfg.system
    out = {"system.num_gpus": s.num_gpus, "gpu.num_sms": s.gpu.num_sms,
           "gpu.sm_clock": s.gpu.sm_clock, "gpu.kernel_launch_latency": s.gpu.kernel_launch_latency}
    sections = {"sm": s.gpu.sm, "hbm": s.gpu.hbm, "l2": s.gpu.l2, "hub": s.gpu.hub, "nvlink": s.nvlink,
                "switch": s.switch}
    for prefix in _FLAT_SECTIONS:
        _flatten(sections[prefix], prefix, out)
    return out


def _flatten(node, prefix, out):
    for a in attrs.fields(type(node)):
        v = getattr(node, a.name)
        if attrs.has(type(v)):
            _flatten(v, f"{prefix}.{a.name}", out)   # e.g. hub.moe.rpm.row_header_bytes
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[f"{prefix}.{a.name}"] = v
