"""The `system:` sections of the config schema: the simulated machine (GPU, SM, HBM, L2, hub and
its MoE-Hub blocks, NVLink, NVSwitch with NVLS / DySHARP / CAIS, nodes, PCIe, NIC, InfiniBand).

System fields have no defaults on purpose: every hardware number must come from a config file,
where it carries a comment naming its source (schema.py describes the field kinds).
"""
import attrs

from .schema_fields import _f

@attrs.frozen
class SmConfig:
    max_resident_tbs: int = _f("int", "thread blocks resident on one SM at a time", min=1,
                               unit="thread blocks")
    issue_width: int = _f("int", "instructions issued per SM cycle", min=1,
                          unit="instructions/cycle")
    smem_bytes: int = _f("size", "shared memory per SM", min=0)
    tb_launch_cycles: int = _f("int", "SM cycles to launch a thread block", min=0, unit="SM cycles")
    tensor_bf16_flops_per_cycle: int = _f("int", "dense BF16 tensor FLOP per SM cycle", min=1,
                                          unit="FLOP/cycle")
    tensor_tf32_flops_per_cycle: int = _f("int", "dense TF32 tensor FLOP per SM cycle", min=1,
                                          unit="FLOP/cycle")
    tensor_fp8_flops_per_cycle: int = _f("int", "dense FP8 tensor FLOP per SM cycle (0: no FP8 "
                                         "tensor cores); an ISA throughput expression names it "
                                         "as sm.tensor_fp8_flops_per_cycle", min=0,
                                         unit="FLOP/cycle")
    vector_lanes: int = _f("int", "FP32 lanes per SM", min=1, unit="lanes")
    lsu_bytes_per_cycle: int = _f("int", "load/store bytes per SM cycle", min=1, unit="bytes/cycle")
    smem_latency_cycles: int = _f("int", "shared memory load latency in SM cycles", min=0,
                                  unit="SM cycles")
    registers: int = _f("int", "32-bit registers per SM: the resident blocks' registers (a "
                        "kernel's .threads x .regs, allocated per warp in units of "
                        "register_alloc_unit) must fit", min=1, unit="registers")
    max_threads: int = _f("int", "threads resident on one SM (the resident blocks' .threads)",
                          min=1, unit="threads")
    register_alloc_unit: int = _f("int", "registers are allocated to a warp in multiples of this "
                                  "many (CUDA occupancy: 256 on compute capability 5.0-9.0)",
                                  min=1, unit="registers")


MEMORY_ARBITRATION = ("paced", "fifo")


@attrs.frozen
class HbmConfig:
    bandwidth: float = _f("bandwidth", "peak HBM bandwidth per GPU", min=1)
    channels: int = _f("int", "independent HBM channels per GPU", min=1, unit="channels")
    interleave_bytes: int = _f("size", "address interleave granule across channels", min=1)
    latency_cycles: int = _f("int", "load latency in SM cycles", min=0, unit="SM cycles")
    atomic_latency_cycles: int = _f("int", "extra latency of an atomic at memory, SM cycles", min=0,
                                    unit="SM cycles")
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
                          "arbitration a request waits at most for a full queue to drain", min=1,
                          unit="requests")


L2_LINK_WRITES = ("hbm", "write_back")


@attrs.frozen
class L2Config:
    bandwidth: float = _f("bandwidth", "aggregate L2 read bandwidth per GPU (reads marked shared)",
                          min=1)
    latency_cycles: int = _f("int", "L2 hit latency in SM cycles", min=0, unit="SM cycles")
    link_writes: str = _f("choice", "where writes arriving from NVLink land: hbm (the link buffer "
                          "is held until the HBM channels took the data) or write_back (the L2 "
                          "absorbs them at its bandwidth; the HBM write-back costs channel bandwidth "
                          "but holds no link buffer)", choices=L2_LINK_WRITES)
    capacity: int = _f("size", "bytes of mma operand regions (weight tiles, shared row tiles) the "
                       "L2 holds: marked reads beyond it miss and are read from HBM "
                       "(components/l2.py)", min=1)
    tracked_regions: int = _f("int", "entries of the L2 residency table per GPU: one per resident "
                              "operand region, least recently used evicted when full", min=1,
                              unit="regions")


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
                              "descriptor ring); send_to_expert blocks when it is full", min=1,
                              unit="rows")
    row_header_bytes: int = _f("size", "metadata carried with each row in the byte stream (expert, "
                               "size, home slot, aux)", min=0)
    packets_per_cycle: int = _f("int", "packets the RPM emits per hub cycle", min=1,
                                unit="packets/hub cycle")
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
                             256, min=1, unit="ids")


AAU_OVERFLOW = ("stall", "spill")
AAU_ALLOCATION = ("bump", "paired")


@attrs.frozen
class AauConfig:
    alloc_latency_cycles: int = _f("int", "hub cycles to allocate a window slot for a row", min=0,
                                   unit="hub cycles")
    record_table_entries: int = _f("int", "on-chip row address table entries per GPU (one per row "
                                   "allocated whose tile is not yet released); what happens when it "
                                   "is full is `overflow`", min=1, unit="records")
    overflow: str = _f("choice", "a full row table: stall (allocation waits until a tile is released: "
                       "this project's first reading) or spill (the oldest entry is evicted FIFO to "
                       "device memory, an HBM write; a later packet of that row reads it back: MoE-Hub "
                       "arXiv 2605.05888)", choices=AAU_OVERFLOW)
    record_bytes: int = _f("size", "completion record entry size (at least 32 B: source GPU, home "
                           "slot, aux, bytes)", min=32)
    allocation: str = _f("choice", "where a row gets its window slot: bump (the next free slot of "
                         "its expert's window, in arrival order: MoE-Hub arXiv 2605.05888, the "
                         "default) or paired (a training design beyond the paper: a gradient row "
                         "takes the slot its forward row got, looked up in a pairing table the "
                         "AAU writes from the forward's completion records, and the DAM makes "
                         "each forward tile ready once its gradient rows landed, in any order; "
                         "needs scheme: moehub with workload.layer.passes: training; "
                         "components/moehub/pairing.py)", "bump", choices=AAU_ALLOCATION)
    pair_table: str = _f("choice", "allocation: paired - where the pairing table lives: memory "
                         "(device memory: a posted HBM write per forward row, an HBM read each "
                         "gradient row's writes wait for; no SRAM) or on_chip (hub SRAM of "
                         "num_gpus x the layer's pairs per GPU entries, counted in "
                         "aau.sram_bytes: the lookup costs only the allocation pipeline, as an "
                         "on-chip row-table entry)", "memory", choices=("memory", "on_chip"))
    pair_entry_bytes: int = _f("size", "allocation: paired - bytes of one pairing-table entry in "
                               "device memory (the forward slot index + 1, 0: no forward row). "
                               "Default 4 B, assumption: a window slot index fits 32 bits", 4,
                               min=1)


@attrs.frozen
class DamConfig:
    tile_rows: int = _f("int", "rows of one tile: the unit made ready and claimed", min=1,
                        unit="rows")
    notify_latency_cycles: int = _f("int", "hub cycles from a tile's last row landing to the tile "
                                    "being claimable", min=0, unit="hub cycles")
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
                           "together (at most the expert window's tiles)", min=1, unit="tiles")


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
                                  0, min=0, unit="rows")
    forward_latency_cycles: int = _f("int", "internode: per_node - hub cycles from a row's last "
                                     "byte written in the forwarding buffer to its copies entering "
                                     "the RPM's streams (read the row's expert list, one "
                                     "descriptor per destination). Default 4, assumption: as the "
                                     "AAU's allocation (a table lookup and a descriptor write)",
                                     4, min=0, unit="hub cycles")
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
    packets_per_cycle: int = _f("int", "packets the hub moves per hub cycle", min=1,
                                unit="packets/hub cycle")
    request_queue_depth: int = _f("int", "SM-to-hub request queue entries", min=1, unit="requests")
    max_outstanding_requests: int = _f("int", "remote requests in flight per GPU", min=1,
                                       unit="requests")
    posted_store_tags: int = _f("int", "multimem.st / multimem.red / dymultimem.st operations "
                                "whose last packet is out (their request-table entry is free) and "
                                "whose write responses are still due: the fence counts them (0: a "
                                "multimem store holds its table entry until its responses are in)",
                                min=0, unit="operations")
    tx_latency_cycles: int = _f("int", "hub cycles from request to NVLink port", min=0,
                                unit="hub cycles")
    rx_latency_cycles: int = _f("int", "hub cycles from NVLink port to memory/SM", min=0,
                                unit="hub cycles")
    moe: MoeHubConfig = _f("node", "MoE-Hub control plane: RPM, AAU, DAM", cls=MoeHubConfig)


@attrs.frozen
class GpuConfig:
    name: str = _f("str", "GPU model name")
    num_sms: int = _f("int", "streaming multiprocessors per GPU", min=1, unit="SMs")
    sm_clock: int = _f("frequency", "SM clock", min=1)
    kernel_launch_latency: int = _f("time", "host-side kernel launch overhead", min=0)
    sm: SmConfig = _f("node", "streaming multiprocessor", cls=SmConfig)
    hbm: HbmConfig = _f("node", "HBM memory", cls=HbmConfig)
    l2: L2Config = _f("node", "L2 cache, for reads of data shared by many tiles", cls=L2Config)
    hub: HubConfig = _f("node", "communication hub between SMs and NVLink", cls=HubConfig)


@attrs.frozen
class NvlinkConfig:
    links_per_gpu: int = _f("int", "NVLink links per GPU", min=1, unit="links")
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
    rx_buffer_flits: int = _f("int", "receive buffer (credits) per link direction", min=1,
                              unit="flits")
    tx_queue_packets: int = _f("int", "transmit queue per link", min=1, unit="packets")
    response_path: str = _f("choice", "separate: responses (write responses, read data, atomic "
                            "results) travel in their own virtual channel, made beside the hub's "
                            "request packetizer, with their own transmit queues, receive buffers "
                            "and credits; shared: they take the request packetizer's slots and "
                            "queue behind requests in one channel per link",
                            choices=("separate", "shared"))
    response_queue_packets: int = _f("int", "response-channel transmit queue per link direction "
                                     "(GPU and switch output ports; response_path: separate)",
                                     min=1, unit="packets")
    response_buffer_flits: int = _f("int", "response-channel receive buffer (credits) per link "
                                    "direction (switch input ports and GPUs; response_path: "
                                    "separate)", min=1, unit="flits")
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
                          "(components/dysharp.py)", min=1, unit="targets")
    multimemq_entries: int = _f("int", "a GPU's MultimemQ: dymultimem operations whose target "
                                "lists are being fetched and whose packets the hub has not all "
                                "sent; a full queue stalls the issuing thread block", min=1,
                                unit="entries")
    al_tlb_entries: int = _f("int", "a GPU hub's AL-TLB: cached entries of the algebraic-to-layout "
                             "table (the table itself lives in HBM)", min=1, unit="entries")
    al_tlb_ways: int = _f("int", "AL-TLB associativity: entries per set, LRU within a set "
                          "(0: fully associative; 1: direct-mapped); al_tlb_entries must be a "
                          "multiple of it", min=0, unit="entries")
    tracker_tiles: int = _f("int", "token-centric fusion: entries of a GPU's token-tracker tile "
                            "table (an arrival counter per row tile in use: taken by the tile's "
                            "first bytes, freed when its jobs are done, where the objects name "
                            "workload.multicast[].done_counters; without them every tile needs "
                            "one at once)", min=1, unit="entries")
    tracker_tokens: int = _f("int", "token-centric fusion: entries of a GPU's token-tracker token "
                             "table (one ready-output counter per token it sends); a layer with "
                             "more tokens per GPU is refused", min=1, unit="tokens")
    tracker_full: str = _f("choice", "token-centric fusion: a tile whose first bytes find the tile "
                           "table full - defer: the bytes are written and counted aside (the "
                           "paper's per-tile DRAM table), the tile takes the next entry freed and "
                           "is raised then if complete; stall: the copy waits at the destination "
                           "hub holding its link buffer space until an entry frees (back-pressure "
                           "on the link). stall can deadlock whatever the grant order: waiting "
                           "copies hold link buffer space that a granted tile's own bytes may "
                           "need (components/dysharp_tracker.py)", "defer",
                           choices=("defer", "stall"))
    tracker_grant: str = _f("choice", "token-centric fusion: which tiles may take tile-table "
                            "entries - expert_head: one entry per local expert is kept for the "
                            "expert's lowest tile whose jobs are not done (its head tile, the one "
                            "the GEMM group needs first), the rest are shared by the other tiles "
                            "in arrival order, so with tracker_full: defer the table cannot "
                            "deadlock; arrival: every entry is shared in arrival order (the "
                            "earlier model: a table near the local experts' count can deadlock)",
                            "expert_head", choices=("expert_head", "arrival"))
    tracker_ready: str = _f("choice", "token-centric fusion: how the combine learns that a token's "
                            "k experts are done - count: one check of the token's ready count per "
                            "token (the paper's per-token ready-output counter; here the token's k "
                            "ready words read in one coalesced access, a lane per slot); slots: one "
                            "wait per slot in turn, k dependent memory accesses per token (the "
                            "earlier model)", "count", choices=("count", "slots"))


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
                               "2605.05628: 40 KB / 320 entries per port)", 320, min=1,
                               unit="entries")
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
                           256, min=1, unit="entries")


@attrs.frozen
class SwitchCounterConfig:
    entries: int = _f("int", "fetch-and-add counters per switch chip (ctr.add; "
                      "components/switch_counter.py). 0: none, the block is off (assumption: a "
                      "worked example of a block, not a published NVSwitch feature)", 0, min=0,
                      unit="counters")


@attrs.frozen
class SwitchConfig:
    count: int = _f("int", "NVSwitch chips", min=1, unit="switches")
    ports: int = _f("int", "NVLink ports per switch chip", min=1, unit="ports")
    traversal_latency: int = _f("time", "input-to-output latency of one switch", min=0)
    output_queue_packets: int = _f("int", "packets queued per output port", min=1, unit="packets")
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
    counter: SwitchCounterConfig = _f("node", "the switch's fetch-and-add counters "
                                      "(components/switch_counter.py)", SwitchCounterConfig(),
                                      cls=SwitchCounterConfig)


# Multi-node fabrics (components/fabric.py, pcie.py, nic.py, infiniband.py). A one-node system
# leaves these sections out; with nodes.count > 1 every hardware number below must be given (a
# zero is "not given": the loader names the key).
@attrs.frozen
class NodesConfig:
    count: int = _f("int", "nodes (servers); system.num_gpus becomes count x gpus_per_node", 1,
                    min=1, unit="nodes")
    gpus_per_node: int = _f("int", "GPUs per node (0: system.num_gpus, one node)", 0, min=0,
                            unit="GPUs")


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
    per_node: int = _f("int", "NICs per node", 0, min=0, unit="NICs")
    gpus_per_nic: int = _f("int", "GPUs sharing one NIC (> 1: a PCIe switch joins them)", 1,
                           min=1, unit="GPUs")
    message_rate: float = _f("float", "work requests (RDMA messages) the NIC starts per second",
                             0.0, min=0, unit="messages/s")
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
                              "(MTU) at a time (DeepEP issue 147: round-robin by QPN; "
                              "assumption: one IB packet per turn); message_fifo: whole messages "
                              "in the order the GPU issued them", "qp_round_robin",
                              choices=("qp_round_robin", "message_fifo"))
    queue_pairs: str = _f("choice", "the queue pairs a GPU's RDMA messages use, which the send "
                          "scheduler serves in turn and whose own messages keep their order: "
                          "per_peer, one per destination GPU; per_block, one per (issuing thread "
                          "block, destination GPU), as DeepEP's normal internode kernels give each "
                          "channel its own QP to every peer (num_qps_per_rank = channels, "
                          "NVSHMEM_IBGDA_NUM_RC_PER_PE; DeepEP PR #130)", "per_peer",
                          choices=("per_peer", "per_block"))
    work_requests: str = _f("choice", "where a GPU's RDMA work requests wait for the NIC: "
                            "send_queue, posted into their queue pair's send queue in GPU memory "
                            "and the doorbell rung (IBGDA: DeepEP's ibgda_device.cuh, "
                            "ibgda_post_send), so they leave the hub's request FIFO and NVLink "
                            "stores never wait behind them; hub_fifo, in the hub's request FIFO "
                            "among the NVLink stores (the model before)", "send_queue",
                            choices=("send_queue", "hub_fifo"))
    send_queue_depth: int = _f("int", "work requests one queue pair's send queue holds, each from "
                               "its post to its completion (work_requests: send_queue); a thread "
                               "posting to a full one waits. DeepEP's deep_ep/buffer.py sets "
                               "NVSHMEM_QP_DEPTH = 1024", 1024, min=1, unit="work requests")


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
    switch_ports: int = _f("int", "ports per IB switch", 0, min=0, unit="ports")
    topology: str = _f("choice", "single_switch: every NIC on one switch; rail_optimized: NIC i "
                       "of every node on leaf i (its rail), leaves joined by spine switches",
                       "single_switch", choices=("single_switch", "rail_optimized"))
    spine_switches: int = _f("int", "spine switches (rail_optimized), each linked once to every "
                             "leaf", 0, min=0, unit="switches")
    routing: str = _f("choice", "which spine a packet between rails climbs to (topology.py): "
                      "ftree, one spine per destination NIC as OpenSM's fat-tree engine assigns "
                      "it (every leaf reaches a NIC through the same spine, a leaf's NICs spread "
                      "over the spines); minhop, one port per destination NIC chosen by each "
                      "switch on its own as OpenSM's default Min Hop engine does (least-loaded "
                      "equal-cost port, LIDs in order); adaptive, per packet round-robin among "
                      "the spines with room (switch adaptive routing)", "ftree",
                      choices=("ftree", "minhop", "adaptive"))


@attrs.frozen
class SystemConfig:
    name: str = _f("str", "system name")
    num_gpus: int = _f("int", "GPUs in the system", min=1, unit="GPUs")
    gpu: GpuConfig = _f("node", "one GPU (all GPUs are identical)", cls=GpuConfig)
    nvlink: NvlinkConfig = _f("node", "NVLink links", cls=NvlinkConfig)
    switch: SwitchConfig = _f("node", "NVSwitch chips", cls=SwitchConfig)
    nodes: NodesConfig = _f("node", "nodes of a multi-node system", NodesConfig(), cls=NodesConfig)
    pcie: PcieConfig = _f("node", "PCIe links between GPUs and NICs (multi-node)", PcieConfig(),
                          cls=PcieConfig)
    nic: NicConfig = _f("node", "RDMA NICs (multi-node)", NicConfig(), cls=NicConfig)
    infiniband: InfinibandConfig = _f("node", "InfiniBand links and switches (multi-node)",
                                      InfinibandConfig(), cls=InfinibandConfig)
