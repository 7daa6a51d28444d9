"""The `workload.layer.<scheme>:` sections of the config schema: each MoE scheme's options
(moehub, deepep, deepep_ll, counted, hiermoe, overlap, megatron, fastermoe, ccfuser, tutel, nvls,
dysharp), with the defaults of the implementations they follow.
"""
import attrs

from .schema_fields import _f


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
    combine_forwarders: str = _f("choice", "thread-block shape of the internode combine "
                                 "(deepep_combine_internode): block (DeepEP's, the default: "
                                 "csrc/kernels/internode.cu combine at 3b1045d puts a channel's "
                                 "forwarder warps in one block on one SM, posting a chunk of "
                                 "rows as one RDMA write on the channel's one QP per peer; ours "
                                 "packs the NVL senders as many to a block and sums rows in 14 KB "
                                 "fp32 slices to fit the SM) or stream (section 13 of "
                                 "docs/internode_validation.md, kept to compare: a thread block "
                                 "per forwarder warp and per NVL sender, each with its own queue "
                                 "pair and a whole fp32 row)", "block",
                                 choices=("block", "stream"))


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
    walk: str = _f("choice", "fusion token: the receive-layout rows per expert the GEMM and gate "
                   "groups walk - tracked: the tiles rows land in (the tracked objects' layout_rows, "
                   "the token tracker's tiles); stride: every tile of the layouts' stride, which "
                   "spans the algebraic range (P T / local experts rows) that no expert's rows "
                   "reach (the earlier kernels: an empty slot costs a gate block two dependent "
                   "reads, a tile's job a GEMM block two)", "tracked", choices=("tracked", "stride"))
    combine_order: str = _f("choice", "fusion token: the order each dispatch-and-combine block "
                            "takes its tokens' dymultimem.ld_reduce in - token: its tokens in "
                            "token order, waiting for each to be ready (the paper's combine polls "
                            "a token's ready count before its ld_reduce, arXiv 2605.05607 Sec. "
                            "IV-C; the check is system.switch.nvls.dysharp.tracker_ready); ready: "
                            "in the order tokens become ready - the source's token tracker "
                            "appends a token's index to a ready queue in memory when its k-th "
                            "expert output is noticed, and the blocks take the queue's positions "
                            "in turn (an extension of the paper's tracker, assumption: "
                            "components/dysharp_ready.py)", "token", choices=("token", "ready"))
    gate_tbs: int | str = _f("int_or_expr", "fusion token: thread blocks per GPU of the gate-weight "
                             "and ready-notice group (assumption: two per SM, so that with the "
                             "GEMM block and the dispatch-and-combine blocks every block of the "
                             "megakernel is resident at once within system.gpu.sm."
                             "max_resident_tbs 4)", "2 * nsm", min=1)
