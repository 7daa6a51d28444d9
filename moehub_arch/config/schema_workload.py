"""The `workload:` sections of the config schema: buffers, launches, multicast objects and CAIS
groups, reports, the MoE-Hub's expert placement, routing, the MoE layer (its schemes' options are
schema_schemes.py's) and the transformer block under tensor parallelism.
"""
import attrs

from .schema_fields import _f
from .schema_schemes import (CcfuserSchemeConfig, CountedSchemeConfig, DeepepLlSchemeConfig,
                             DeepepSchemeConfig, DysharpSchemeConfig, FastermoeSchemeConfig,
                             HiermoeSchemeConfig, MegatronSchemeConfig, MoehubSchemeConfig,
                             NvlsSchemeConfig, OverlapSchemeConfig, TutelSchemeConfig)

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
                        min=0, unit="rows")
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
    ready_words: str = _f("str", "dynamic object: buffer (control region) of the per-token ready "
                          "words at each source GPU, [tokens][ready_count] i64 (the token "
                          "tracker's output-readiness table: word j of token t is set when the "
                          "token's j-th expert output is ready); with ready_queue the hub appends "
                          "t + 1 to ready_queue when a store sets the last of a token's words "
                          "(components/dysharp_ready.py); '': no ready queue", "")
    ready_count: int = _f("int", "dynamic object with ready_words: words per token (its top-k)", 0,
                          min=0)
    ready_queue: str = _f("str", "dynamic object with ready_words: buffer (control region) of one "
                          "i64 per token, zero at the start: position i receives the (i + 1)-th "
                          "token to become ready, as its index + 1", "")


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
                          "unused)", 0, min=0, unit="experts")
    placement: tuple | None = _f("opt_int_tuple", "GPU of each expert (default: blocks of "
                                 "num_experts / num_gpus consecutive experts per GPU)", None, min=0)
    window_rows: int = _f("int", "rows in each expert's receive window (a multiple of "
                          "system.gpu.hub.moe.dam.tile_rows)", 0, min=0, unit="rows")
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
class LayerConfig:
    model: str = _f("str", "model shape: a name in workloads/models/ or a path to a model YAML "
                           "('' = no MoE layer: the workload's own launches run)", "")
    tokens_per_gpu: int = _f("int", "tokens routed on each GPU", 0, min=0, unit="tokens")
    top_k: int = _f("int", "experts per token, in place of the model file's model.top_k (0: the "
                    "model's own); `moehub-sim layer --top-k K`", 0, min=0, unit="experts")
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
                        "128 x 128 tile)", 128, min=1, unit="rows")
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
