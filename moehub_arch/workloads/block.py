"""A transformer layer of a dense model under tensor parallelism, as a simulator workload
(`workload.block`, beside the MoE layer's `workload.layer`), after Megatron-LM's tensor
parallelism (Shoeybi et al., arXiv 1909.08053, section 3). With degree t, GPU r holds:

kind `ffn`: the dense SwiGLU FFN - column slice r of the gate and up weights ([H][I/t]: no
  communication) and row slice r of the down weights ([I/t][H]), so it computes a full-size
  partial Y_r = bf16(silu(X Wg_r) * (X Wu_r)) Wd_r and the block output is the all-reduce sum_r
  Y_r. The FFN is the shared-expert kernel of the MoE layers (workloads/kernels/common/
  moe_common.s `shared_ffn`, one "expert" of width I/t); its GEMM jobs are the kernel library's.
kind `attention`: xn = norm(x) (RMSNorm or LayerNorm, the model's `norm`; every rank computes it
  on the replicated x), QKV = xn W_qkv,r (column-parallel: heads/t heads per GPU), causal
  FlashAttention-style attention over those heads (lib/attention.s: tiled mma + online softmax),
  Y_r = attn W_o,r (row-parallel), then h = x + all-reduce(Y_r).
kind `transformer`: the attention part, then norm, the FFN, all-reduce and a second residual:
  one whole pre-norm layer (as LLaMA and Megatron-LM GPT).
Kernels: workloads/kernels/tp/transformer.s (tp_norm, tp_gemm, attention, residual_add) over
the kernel library (lib/norm.s, lib/attention.s, lib/gemm_tiles.s). The partials are combined by
the TP scheme (`workload.block.scheme`):
  tp_ring  NCCL's ring all-reduce (workloads/kernels/tp/allreduce_ring.s, lib/ring_allreduce.s)
  sp_ring  Megatron-LM's sequence parallelism (Korthikanti et al., arXiv 2205.05198, section 4.2.2):
           the all-reduce after each row-parallel GEMM becomes a ring reduce-scatter, the norm and
           residual work on this GPU's T / t tokens, and a ring all-gather rebuilds the full input
           of the next column-parallel GEMM (the two halves of the ring all-reduce, kernel
           ring_half); GPU g's shard is chunk (g + 1) % t, where the reduce-scatter leaves it.
  tp_nvls  NCCL's NVLink SHARP all-reduce (workloads/kernels/tp/allreduce_nvls.s kernel
           nvls_tp_collective, lib/nvls_allreduce.s): GPU g loads its chunk reduced by the switch
           (multimem.ld_reduce) and multicasts the sum (multimem.st); the block binds each
           all-reduce's input and output as multicast objects (workload.multicast).
  sp_nvls  sequence parallelism as sp_ring, its reduce-scatter the ld_reduce half and its
           all-gather the multimem.st half of the NVLS all-reduce (GPU g owns chunk (g + 1) % t,
           the same shard as sp_ring's).
  cais     CAIS's memory-semantic switch operations (arXiv 2605.05628; workloads/kernels/tp/cais.s
           kernel cais_tp_collective, lib/cais_collectives.s, the switch's merge unit
           components/cais_merge.py) in sp_ring's dataflow: the reduce-scatter after each
           row-parallel GEMM pushes every rank's partial sums home with red.cais (merged in the
           switch, posted: no round trip per slice), the norm and residual work on this GPU's
           shard, and the all-gather pulls every shard with ld.cais (one read of the home per
           line, fanned out). The block registers each collective's output as a CAIS group
           (workload.cais); system.switch.cais.throttle adds the switch's throttling of GPUs
           that run ahead. workload.block.cais_fusion fuses the attention's collectives into
           its GEMMs' thread blocks (tp/cais.s tp_gemm_cais): the QKV projection pulls its row
           tiles with ld.cais (AG-GEMM), the output projection pushes its tiles home with
           red.cais (GEMM-RS). workload.block.cais_sync (default on) adds CAIS's merging-aware
           thread-block coordination: each group of matching thread blocks syncs in the
           switch's group sync table (sync.cais) before each slice or job it accesses.
           workload.block.cais_dataflow (kind transformer, the default; false: the collective
           kernels above, as before it) is CAIS's graph-level dataflow from
           the output projection to the layer's end: one persistent kernel (tp/cais_dataflow.s
           tp_cais_dataflow) whose thread-block jobs - output projection GEMM-RS, residual +
           norm on each row tile's home, FFN gate/up AG-GEMM, down GEMM-RS, residual - wait for
           each other per row tile through words in memory, so the reductions toward the homes,
           the gathers from them and the FFN's GEMMs overlap; at most cais_window GEMM-RS jobs
           of reductions are in flight per GPU, in the same order on every GPU. The next
           layer's norm and QKV are not composed (the block is one layer).
  t3       T3's producer-triggered fused GEMM + reduce-scatter (Pati et al., ASPLOS 2024, arXiv
           2401.16677; workloads/kernels/tp/t3.s kernels tp_gemm_t3 and tp_ffn_t3), in the
           row-parallel GEMMs (the output projection and the FFN's down GEMM): each row tile of the partial sum is sent to the rank that owns its
           rows (sp_ring's shard, chunk (g + 1) % t on GPU g) as soon as it is stored, with a
           near-memory add at the owner (put.add.bf16, T3's op-and-store), in T3's staggered
           order (rank g starts with its ring neighbour's chunk and ends with its own); then an
           all-gather rebuilds the full sum on every rank, and the residual and the next norm
           work on every token as in tp_ring. workload.block.t3_collectives picks how the
           all-gathers (which T3 does not fuse) run: ring (NCCL's ring, T3's own setting) or
           nvls (NVLink SHARP's multimem.st half). What of T3's hardware is modelled:
           the near-memory compute (the owner's memory adds the update; timed as the write it is
           on the channels, the read of the old value staying inside the DRAM: assumption, as
           T3's near-memory compute has it) and the DMA (the hub reads the finished tile from
           HBM and sends it: one request per row tile, no SM copy). The tracker is the kernel's:
           each job counts its stored tile in its row tile's tracker word (a local atomic) and
           the job that completes the row tile issues the DMA (one instruction) - T3's tracker
           counts the stores at the memory controller and fires the DMA itself, so this costs
           the SM one atomic per job and one issue per tile that T3 does not (assumption: small
           against a 128 x 128 x K job). Not modelled: T3's memory-controller arbitration
           (T3-MCA, which favours the GEMM's memory traffic over the DMA's; here the channels
           serve both as any other traffic). The homes add the t contributions
           in arrival order, each add rounded to bf16: not a fixed order, so the functional check
           bounds the reduce-scatter against the exact sum ((t - 1) 2^-8 sum|y_r| / (1 - (t - 1)
           2^-8), reference.t3_reduction_bound) and takes the rest of the block bit-exactly
           from the simulated sum.
  tp_none  t = 1: no collective, the reference without communication.
Training (workload.block.passes: training; schemes tp_ring, tp_nvls, tp_none, and for kinds
attention and transformer sp_ring, sp_nvls, cais): after the forward, the backward. Kind ffn:
workloads/kernels/tp/ffn_backward.s (ffn_bwd_act: G and U recomputed,
D = dY Wd_r^T, dU = silu(G) D, dG = silu'(G) (D U); ffn_dgrad: dX_r = dG Wg_r^T + dU Wu_r^T;
ffn_wgrad: dWg_r, dWu_r, dWd_r in fp32), then the scheme's all-reduce of dX_r (the backward of
the column-parallel input copy). dY, the gradient of the block output, is replicated (the
forward's all-reduce makes the output every rank's). Functional mode checks dX on every GPU and
each GPU's weight gradients against reference.ffn_backward bit for bit.
Kinds attention and transformer (_block_backward; workloads/kernels/tp/block_backward.s): the
forward's attention kernel keeps each query row's softmax statistics (attention_train); the
backward runs in autograd's order - [the FFN's backward as above, then norm 2's backward plus dy,
the residual path's gradient: dh1] -> the output projection's dgrad (tp_dgrad; no collective, its
forward is row-parallel) and fp32 wgrad (tp_wgrad) -> FlashAttention-2's attention backward in
two deterministic passes (attention_bwd pass 0: D = rowsum(dO O) and dQ; pass 1: dK, dV;
lib/attention_backward.s) -> the QKV projection's dgrad and wgrad -> the scheme's all-reduce of
dxn_r (the backward of the column-parallel input copy) -> norm 1's backward plus dh1 (lib/
norm_backward.s: the residual gradient added in the norm's epilogue; the parameter gradients
summed per thread block, then over the thread blocks, norm_grad_reduce). Functional mode checks
dx on every GPU, every GPU's weight gradients, the norms' parameter gradients and dQ/dK/dV
against block_reference.attention_backward / norm_backward and reference.ffn_backward bit for
bit (gradient_max_abs_error 0). Sequence parallelism's backward mirrors its forward: dY and dh1
are all-gathered before the GEMMs that need every token, the input gradients of the column-
parallel GEMMs reduce-scattered, the norms' backward runs on this GPU's shard (each rank's norm
parameter gradients are the partial over its shard; Megatron-LM's all-reduce of them is not
modelled). cais's backward is sp_ring's with the merge unit's collectives (red.cais reduce-
scatters, ld.cais all-gathers, the group sync per slice: _cais, as its forward's kernels); its
training forward runs the collective kernels, not the dataflow kernel (_runs_dataflow), and
cais_fusion is refused with training (the fused QKV projection does not keep its gathered input).
Not built: the backward of the t3 scheme, GeLU MLPs (every model's FFN is SwiGLU
here), rotary embeddings.

Kernels run stream-ordered on every GPU, so each starts system.gpu.kernel_launch_latency after
its predecessor ends (system.block.launch_gaps_us reports that time; CUDA graphs would shrink it).

Functional mode: x, the norms' parameters and the constants are the same on every GPU (TP
replicates them), weights are random per GPU (each GPU's shard); the output on every GPU must
equal the NumPy reference (`reference`: workloads/block_reference.py and reference.py, every
GEMM sequential-k fp32, bf16 roundings where the kernels round, the all-reduce in the ring's
order, or for the NVLS schemes in the switch's: FP32 accumulation over the ranks in rank order,
one rounding to bf16, reference.nvls_allreduce_reference). All orders are fixed, so the check is
bit-identical (error 0). A real NVSwitch adds in arrival order, which NVIDIA does not publish;
any order stays within the bound nvls_allreduce_reference states ((t - 1) 2^-24 sum|x_i| plus
one bf16 rounding), which tests/test_tp_nvls.py checks against the exact sum. block_reference.py gives
the bound of that order against exact float64 attention, which tests/test_transformer_block.py
checks.
"""
import attrs
import numpy as np

from ..config.files import ConfigError, display_path, read_yaml
from ..config.schema import BufferConfig, CaisGroupConfig, LaunchConfig, MulticastConfig
from ..paths import data_root
from .layer import GEMM_JOB_ELEMENTS, LayerError, unslice_weights

COMMON_KERNELS = "workloads/kernels/common/moe_common.s"
TP_KERNELS = "workloads/kernels/tp/allreduce_ring.s"
NVLS_KERNELS = "workloads/kernels/tp/allreduce_nvls.s"
CAIS_KERNELS = "workloads/kernels/tp/cais.s"
CAIS_DATAFLOW_KERNELS = "workloads/kernels/tp/cais_dataflow.s"
T3_KERNELS = "workloads/kernels/tp/t3.s"
SP_SCHEMES = ("sp_ring", "sp_nvls", "cais")  # sequence parallelism: norms and residuals sharded
NVLS_SCHEMES = ("tp_nvls", "sp_nvls")       # collectives in the switch (multimem)
TRANSFORMER_KERNELS = "workloads/kernels/tp/transformer.s"
BACKWARD_KERNELS = "workloads/kernels/tp/ffn_backward.s"
BLOCK_BACKWARD_KERNELS = "workloads/kernels/tp/block_backward.s"   # attention + norms backward
TRAINING_SCHEMES = ("tp_ring", "tp_nvls", "tp_none", "sp_ring", "sp_nvls",   # passes: training
                    "cais")
FFN_BACKWARD_PHASES = ("ffn_bwd_act", "ffn_dgrad", "ffn_wgrad")
ATTENTION_BACKWARD_PHASES = ("o_proj_dgrad", "o_proj_wgrad", "attention_bwd", "qkv_dgrad",
                             "qkv_wgrad")
BACKWARD_PHASES = FFN_BACKWARD_PHASES + ATTENTION_BACKWARD_PHASES + ("norm_bwd", "dx_allreduce")
BLOCK_DIR = "workloads/blocks"
KEY = "workload.block"
_MODEL_KEYS = ("name", "hidden", "ffn", "heads", "layers", "seq", "batch", "norm", "norm_eps")
NORMS = ("rmsnorm", "layernorm")


class BlockError(LayerError):
    """A transformer block that cannot be built as configured (exit status 2)."""


@attrs.frozen
class BlockModel:
    """The shape of a dense transformer model (workloads/blocks/*.yaml)."""
    name: str
    hidden: int
    ffn: int
    heads: int
    layers: int
    seq: int
    batch: int
    norm: str           # rmsnorm or layernorm
    norm_eps: float


def load_block_model(name_or_path):
    """A dense model shape: a bare name means workloads/blocks/<name>.yaml; a path is a file."""
    from pathlib import Path
    text = str(name_or_path)
    path = Path(text) if ("/" in text or text.endswith((".yaml", ".yml"))) else \
        data_root() / BLOCK_DIR / f"{text}.yaml"
    shown = display_path(path)
    if not path.is_file():
        known = sorted(p.stem for p in (data_root() / BLOCK_DIR).glob("*.yaml"))
        raise ConfigError(f"{KEY}.model: no block model '{text}' ({shown} does not exist; "
                          f"shipped: {', '.join(known)})", key=f"{KEY}.model")
    raw = read_yaml(path)
    if not isinstance(raw, dict) or set(raw) != {"block_model"} or not isinstance(raw["block_model"], dict):
        raise ConfigError(f"{shown}: the top level must be one mapping 'block_model' with keys "
                          f"{', '.join(_MODEL_KEYS)}", file=shown)
    m = raw["block_model"]
    for k in m:
        if k not in _MODEL_KEYS:
            raise ConfigError(f"{shown}: block_model.{k}: unknown key; expected "
                              f"{', '.join(_MODEL_KEYS)}", file=shown, key=f"block_model.{k}")
    for k in _MODEL_KEYS:
        v = m.get(k)
        if k == "name":
            ok, want = isinstance(v, str) and v, "a non-empty name"
        elif k == "norm":
            ok, want = v in NORMS, "one of " + ", ".join(NORMS)
        elif k == "norm_eps":
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1
            want = "a number in (0, 1)"
        else:
            ok = isinstance(v, int) and not isinstance(v, bool) and v > 0
            want = "a positive integer"
        if not ok:
            raise ConfigError(f"{shown}: block_model.{k}: expected {want}, found {v!r}",
                              file=shown, key=f"block_model.{k}")
    if m["hidden"] % m["heads"]:
        raise ConfigError(f"{shown}: block_model.heads: {m['heads']} does not divide hidden "
                          f"({m['hidden']}): every head has hidden / heads columns",
                          file=shown, key="block_model.heads")
    return BlockModel(**{k: (float(m[k]) if k == "norm_eps" else m[k]) for k in _MODEL_KEYS})


def _buf(name, nbytes, region="data", init="zeros", dtype="bf16"):
    return BufferConfig(name=name, bytes=max(int(nbytes), 8), region=region, init=init, dtype=dtype)


def _n_tile(hidden, ffn_t, tile_rows):
    """Largest GEMM column job (<= 128) that divides the hidden size and the per-GPU FFN width and
    fits the FFN kernel's shared memory (layer.GEMM_JOB_ELEMENTS)."""
    for n in (128, 64, 32, 16, 8):
        if hidden % n == 0 and ffn_t % n == 0 and tile_rows * n <= GEMM_JOB_ELEMENTS:
            return n
    return 0


@attrs.frozen
class BlockShape:
    model: str
    kind: str
    tp: int
    tokens: int
    hidden: int
    ffn_t: int          # FFN columns per GPU (I / t)
    n_tile: int
    tile_rows: int
    channels: int
    slice: int          # all-reduce elements per put (_ring_slice)
    functional: bool
    heads_t: int = 0    # attention heads per GPU (heads / t)
    head_dim: int = 0
    seq: int = 0
    batch: int = 0
    attn_tile: int = 0
    qkv_n: int = 0      # GEMM column job of the QKV projection (divides head_dim)
    o_n: int = 0        # GEMM column job of the output projection (divides hidden)
    norm_rows: int = 0  # rows per norm / residual block
    norm_bwd_rows: int = 0   # passes training: rows per block of the norms' backward
    proj_kn: int = 0    # passes training: column job of the QKV projection's dgrad / wgrad (of H)
    o_kn: int = 0       # passes training: column job of the output projection's (of H / t heads)
    home_rows: int = 0  # t3, cais_dataflow: rows of the fused GEMMs' row tiles (divide tokens / t)


ATTENTION_SMEM = 128 * 1024      # .smem of kernels attention and tp_norm (workloads/kernels/tp/transformer.s)
GEMM_SMEM = 96 * 1024            # .smem of tp_gemm


def _attention_smem(tile, dh):
    """Bytes of lib/attention.s's shared-memory layout (flash_attention_smem)."""
    return 16 + tile * dh * 2 + tile * tile * (4 + 2) + tile * dh * 4 + tile * tile * 4 + 5 * tile * 4


def _gemm_n(cols, tile_rows, group):
    """Largest GEMM column job (a multiple of 8, <= 128) dividing cols and group that fits
    tp_gemm's smem: 128 for head dim 128, 56 for DeepSeek-V3's 7168 / 128 heads."""
    for n in range(128, 7, -8):
        if cols % n == 0 and group % n == 0 and tile_rows * n * 6 <= GEMM_SMEM \
                and tile_rows * n <= GEMM_JOB_ELEMENTS:
            return n
    return 0


def _ring_slice(share, cap):
    """Elements per put of the ring all-reduce: the largest divisor of a channel's share of a
    chunk that is at most `cap` (workload.block.allreduce_slice), preferring whole 128 B packets
    (multiples of 64 bf16 elements). A share that is not a power of two (Mega-GPT-8B's 294,912 =
    2^15 x 9) gets 49,152-element slices instead of the 32,768 a power-of-two rule allows."""
    best = 1
    for d in range(1, int(share ** 0.5) + 1):
        if share % d:
            continue
        for c in (d, share // d):
            if c <= cap and ((c % 64 == 0, c) > (best % 64 == 0, best)):
                best = c
    return best


def block_shape(cfg):
    b, P = cfg.workload.block, cfg.system.num_gpus
    try:
        m = load_block_model(b.model)
    except ConfigError as e:
        raise BlockError(str(e)) from None
    t = b.tp
    if t != P:
        raise BlockError(f"{KEY}.tp: {t}, but system.num_gpus is {P}; the block runs one "
                         f"tensor-parallel group over every GPU of the system (set both equal)")
    if b.scheme == "tp_none" and t != 1:
        raise BlockError(f"{KEY}.scheme: tp_none is the single-GPU reference (t = 1), but "
                         f"{KEY}.tp is {t}; use tp_ring for t > 1")
    if b.scheme in SP_SCHEMES and (t == 1 or b.kind == "ffn"):
        raise BlockError(f"{KEY}.scheme: {b.scheme} shards the norms and residuals of kinds "
                         f"attention and transformer over t > 1 GPUs (here kind {b.kind}, tp {t}); "
                         f"use tp_ring, tp_nvls or tp_none")
    if b.cais_fusion and (b.scheme != "cais" or b.kind == "ffn"):
        raise BlockError(f"{KEY}.cais_fusion: fuses CAIS's collectives into the QKV and output "
                         f"projections of scheme cais (kinds attention and transformer), but the "
                         f"scheme is {b.scheme} and the kind {b.kind}; set {KEY}.scheme: cais or "
                         f"cais_fusion: false")
    if b.scheme == "t3" and t == 1:
        raise BlockError(f"{KEY}.scheme: t3 fuses a reduce-scatter over t > 1 GPUs into the "
                         f"row-parallel GEMMs, but {KEY}.tp is 1; use tp_none")
    if b.scheme in NVLS_SCHEMES + ("cais",) and t == 1:
        raise BlockError(f"{KEY}.scheme: {b.scheme} reduces in the NVSwitch over a multicast "
                         f"group of t > 1 GPUs, but {KEY}.tp is 1; use tp_none")
    if b.passes == "training" and b.scheme not in TRAINING_SCHEMES:
        raise BlockError(f"{KEY}.passes: training (forward + backward) is built for schemes "
                         f"{', '.join(TRAINING_SCHEMES)} (here scheme {b.scheme}); the backward "
                         f"of the t3 scheme is not built: use passes: forward")
    if b.passes == "training" and b.cais_fusion:
        raise BlockError(f"{KEY}.cais_fusion: the fused QKV projection gathers its input rows "
                         f"with ld.cais without keeping them, but the training backward needs "
                         f"the gathered norm output (the QKV weight gradient X^T dY): use "
                         f"cais_fusion: false with passes: training")
    for name, v in (("heads", m.heads), ("hidden", m.hidden), ("ffn", m.ffn)):
        if v % t:
            raise BlockError(f"{KEY}.tp: {t} does not divide {m.name}'s {name} ({v}); tensor "
                             f"parallelism gives every GPU the same share of heads, hidden "
                             f"columns and FFN columns")
    tokens = b.tokens or m.seq * m.batch
    n = _n_tile(m.hidden, m.ffn // t, b.tile_rows)
    if not n:
        raise BlockError(f"{KEY}.tile_rows: no GEMM job width of 8 .. 128 columns divides both "
                         f"{m.name}'s hidden ({m.hidden}) and FFN per GPU ({m.ffn // t}) with "
                         f"{b.tile_rows} x n <= {GEMM_JOB_ELEMENTS} elements of shared memory")
    C, elems = b.allreduce_channels, tokens * m.hidden
    share = elems // (P * C) if elems % (P * C) == 0 else 0
    if P > 1 and not share:
        raise BlockError(f"{KEY}.allreduce_channels: the all-reduce of {tokens} x {m.hidden} "
                         f"elements must split evenly into {P} chunks x {C} channels; use a "
                         f"channel count that divides {elems // P if elems % P == 0 else elems}")
    nvls_sized = b.scheme in NVLS_SCHEMES + ("cais",) or (b.scheme == "t3" and
                                                          b.t3_collectives == "nvls")
    sl = _ring_slice(share, b.nvls_slice if nvls_sized else b.allreduce_slice)
    extra = {}
    if b.kind != "ffn":
        extra = _attention_shape(b, m, t, tokens, b.scheme in SP_SCHEMES)
        if b.passes == "training":
            extra.update(_attention_backward_shape(b, m, t, tokens, extra))
    dataflow = _runs_dataflow(b)
    if dataflow and b.gemm_tbs > cfg.system.gpu.num_sms:
        raise BlockError(f"{KEY}.gemm_tbs: {b.gemm_tbs} thread blocks, but the dataflow kernel "
                         f"(tp/cais_dataflow.s) needs every one resident at once - one per SM "
                         f"(160 KB of shared memory) on {cfg.system.gpu.num_sms} SMs: its jobs "
                         f"wait for each other across thread blocks; use at most "
                         f"{cfg.system.gpu.num_sms}, or cais_dataflow: false")
    if dataflow and b.cais_window > 4095:
        raise BlockError(f"{KEY}.cais_window: {b.cais_window} jobs, but the dataflow kernel takes "
                         f"at most 4095 (a 12-bit field of its dims parameter)")
    if b.scheme == "t3" or dataflow:
        extra["home_rows"] = _home_rows(b, tokens, t)
    return BlockShape(model=m.name, kind=b.kind, tp=t, tokens=tokens, hidden=m.hidden,
                      ffn_t=m.ffn // t, n_tile=n, tile_rows=b.tile_rows, channels=C, slice=sl,
                      functional=cfg.workload.mode == "functional", **extra), m


def _runs_dataflow(b):
    """Whether the block runs cais's persistent dataflow kernel (tp/cais_dataflow.s): scheme
    cais, kind transformer, cais_dataflow on, and passes forward - a training step runs its
    forward with the collective kernels (cais_dataflow: false), because the backward needs the
    gathered norm-2 output on every GPU (the FFN's recomputation and weight gradients read every
    token of it) and the dataflow kernel's AG-GEMM pulls those rows with ld.cais into shared
    memory without keeping them."""
    return (b.cais_dataflow and b.scheme == "cais" and b.kind == "transformer"
            and b.passes == "forward")


def _home_rows(b, tokens, t):
    """Rows of the row tiles of tp_gemm_t3 and tp_cais_dataflow: the largest divisor of a rank's
    chunk (tokens / t) that is at most tile_rows, so that no row tile spans two owners (t3's
    tracker fires one DMA per tile; the dataflow's norm of a tile runs on one home)."""
    if tokens % t:
        raise BlockError(f"{KEY}.tp: scheme {b.scheme} sends every row to the rank that owns its "
                         f"chunk of tokens / t rows, but {t} does not divide {tokens} tokens")
    chunk = tokens // t
    return max(d for d in range(1, min(b.tile_rows, chunk) + 1) if chunk % d == 0)


def _attention_shape(b, m, t, tokens, sp):
    """The attention part's shape: heads per GPU, tiles, and the errors a user can act on."""
    dh, tile = m.hidden // m.heads, b.attention_tile
    seq = m.seq
    if b.tokens and b.tokens % seq:
        raise BlockError(f"{KEY}.tokens: {b.tokens} is not a whole number of {m.name}'s "
                         f"sequences of {seq} tokens (attention runs over whole sequences)")
    if seq % tile:
        raise BlockError(f"{KEY}.attention_tile: {tile} does not divide {m.name}'s sequence "
                         f"length ({seq}); the causal kernel tiles queries and keys alike")
    if _attention_smem(tile, dh) > ATTENTION_SMEM:
        raise BlockError(f"{KEY}.attention_tile: tiles of {tile} rows with head dim {dh} need "
                         f"{_attention_smem(tile, dh)} B of shared memory, more than the "
                         f"attention kernel's {ATTENTION_SMEM} B; use a smaller tile")
    ht = m.hidden // t
    qkv_n = _gemm_n(3 * ht, b.tile_rows, dh)
    o_n = _gemm_n(m.hidden, b.tile_rows, m.hidden)
    if not qkv_n or not o_n:
        raise BlockError(f"{KEY}.tile_rows: no GEMM job of 8 .. 128 columns (a multiple of 8) "
                         f"dividing the head dim ({dh}) and hidden ({m.hidden}) fits "
                         f"{b.tile_rows} rows in the projection kernel's {GEMM_SMEM} B of shared "
                         f"memory")
    if sp and tokens % t:
        raise BlockError(f"{KEY}.tp: sequence parallelism gives every GPU tokens / t rows, but "
                         f"{t} does not divide {tokens} tokens")
    local = tokens // t if sp else tokens      # rows the norms and residuals work on per GPU
    rows = 1
    while local % (rows * 2) == 0 and 16 + 8 * m.hidden + 4 * rows * 2 * (m.hidden + 2) \
            <= ATTENTION_SMEM and rows * 2 * m.hidden <= 16384:
        rows *= 2
    if 16 + 8 * m.hidden + 4 * rows * (m.hidden + 2) > ATTENTION_SMEM:
        raise BlockError(f"{m.name}: hidden {m.hidden} is too wide for the norm kernel's "
                         f"{ATTENTION_SMEM} B of shared memory")
    return dict(heads_t=m.heads // t, head_dim=dh, seq=seq, batch=tokens // seq,
                attn_tile=tile, qkv_n=qkv_n, o_n=o_n, norm_rows=rows)


ATTENTION_BWD_SMEM = 224 * 1024   # .smem of the backward kernels (tp/block_backward.s)


def _attention_backward_shape(b, m, t, tokens, fwd):
    """passes training, kinds attention and transformer: the backward kernels' tiles and the
    errors a user can act on."""
    tile, dh, H = fwd["attn_tile"], fwd["head_dim"], m.hidden
    need = 16 + 14 * tile * dh + 14 * tile * tile + 12 * tile   # lib/attention_backward.s
    if need > ATTENTION_BWD_SMEM:
        raise BlockError(f"{KEY}.attention_tile: the attention backward's tiles of {tile} rows "
                         f"with head dim {dh} need {need} B of shared memory, more than its "
                         f"kernels' {ATTENTION_BWD_SMEM} B; use a smaller tile for training")
    if b.scheme in SP_SCHEMES:
        tokens //= t     # the norms work on this GPU's sequence shard
    rows = 1     # the norms' backward: a power of two dividing tokens, at least one block per TB
    while tokens % (rows * 2) == 0 and tokens // (rows * 2) >= b.gemm_tbs and \
            16 + 16 * H + 12 * rows * 2 * H + 24 * rows <= ATTENTION_BWD_SMEM:
        rows *= 2
    if 16 + 16 * H + 12 * H + 12 > ATTENTION_BWD_SMEM:
        raise BlockError(f"{m.name}: hidden {H} is too wide for the norm backward's "
                         f"{ATTENTION_BWD_SMEM} B of shared memory")
    ht = H // t
    proj_kn, o_kn = _gemm_n(H, b.tile_rows, H), _gemm_n(ht, b.tile_rows, ht)
    if not proj_kn or not o_kn or (2 * H) % 8 or b.gemm_tbs * 8 * 4 > ATTENTION_BWD_SMEM:
        raise BlockError(f"{KEY}.gemm_tbs: the backward's GEMM jobs need a multiple of 8 "
                         f"dividing hidden ({H}) and hidden / t ({ht}) with {b.tile_rows} rows, "
                         f"and its norm-gradient sum holds {b.gemm_tbs} partials of 8 columns "
                         f"in {ATTENTION_BWD_SMEM} B (at most {ATTENTION_BWD_SMEM // 32} thread "
                         f"blocks)")
    return dict(norm_bwd_rows=rows, proj_kn=proj_kn, o_kn=o_kn)


class TransformerBlock:
    """The generated block of one run; same interface as the MoE layer (simulation.py)."""

    def __init__(self, cfg):
        self.cfg = cfg
        if cfg.scheme != "none":
            raise BlockError(f"scheme: '{cfg.scheme}' runs an MoE layer; a transformer block "
                             f"({KEY}.model = {cfg.workload.block.model}) takes its TP scheme from "
                             f"{KEY}.scheme and needs scheme: none")
        self.shape, self.model = block_shape(cfg)
        s = self.shape
        scheme = cfg.workload.block.scheme
        self.t3 = scheme == "t3"
        t3_nvls = self.t3 and cfg.workload.block.t3_collectives == "nvls"
        self.ring = (scheme == "tp_ring" or (self.t3 and not t3_nvls)) and s.tp > 1
        self.sp = scheme in SP_SCHEMES
        self.nvls = scheme in NVLS_SCHEMES or t3_nvls   # NVLS collective kernels
        self.cais = scheme == "cais"
        self.fuse = self.cais and cfg.workload.block.cais_fusion   # tp_gemm_cais (tp/cais.s)
        # CAIS's graph-level dataflow (tp/cais_dataflow.s): one persistent kernel from the output
        # projection to the layer's end (with cais_fusion, the QKV projection is an AG-GEMM too)
        self.dataflow = _runs_dataflow(cfg.workload.block)
        self.buffers, self.launches, self.phases, self.multicast = [], [], [], []
        self.cais_groups = []
        self.kernel_files = [COMMON_KERNELS]
        if self.nvls:
            self.kernel_files.append(NVLS_KERNELS)
        elif self.cais:
            self.kernel_files.append(CAIS_KERNELS)
            if self.dataflow:
                self.kernel_files.append(CAIS_DATAFLOW_KERNELS)
        elif self.ring or self.sp:
            self.kernel_files.append(TP_KERNELS)
        if self.t3:
            self.kernel_files.append(T3_KERNELS)
        if s.kind != "ffn":
            self.kernel_files.append(TRANSFORMER_KERNELS)
        T, H = s.tokens, s.hidden
        self.training = cfg.workload.block.passes == "training"
        if self.training:
            self.kernel_files.append(BACKWARD_KERNELS)
            if s.kind != "ffn":
                self.kernel_files.append(BLOCK_BACKWARD_KERNELS)
        if s.kind == "ffn":
            self.output = self._ffn("x", "")
            if self.training:
                self._buffer("dy", T * H * 2)   # functional mode: preset, the same on every GPU
                self.dx = self._ffn_backward("x")
        else:
            self._buffer("x", T * H * 2)
            self._buffer("consts", 16, dtype="f32")
            if self.dataflow:       # forward only (_runs_dataflow): no backward follows
                self.output = self._dataflow_tail("x", self._attention_core("x"))
            else:
                h1 = self.output = self._attention("x")
                if s.kind == "transformer":
                    self._norm(h1, "hn", "2")
                    y = self._ffn("hn", "2")
                    self.output = self._residual(h1, y, "out")
                if self.training:
                    self.dx = self._block_backward(h1)
        self._check_fits()

    # ---- generation --------------------------------------------------------------------------
    def _buffer(self, name, nbytes, **kw):
        self.buffers.append(_buf(name, nbytes, **kw))
        return name

    def _launch(self, phase, kernel, grid, params):
        self.launches.append(LaunchConfig(kernel=kernel, grid=grid, stream=0, params=params))
        self.phases.append(phase)

    def _bind(self, buffer):
        """A multicast object over every GPU bound to `buffer` (cuMulticastCreate + BindMem)."""
        if buffer not in (m.buffer for m in self.multicast):
            self.multicast.append(MulticastConfig(buffer=buffer))

    def _nvls(self, phase, src, out, suffix):
        """An NVLS collective (lib/nvls_allreduce.s): phase 0 all-reduce (src -> out), 1
        reduce-scatter (src -> out, this GPU's chunk), 2 all-gather (in place in out). GPU g owns
        chunk (g + 1) % t in the sharded schemes and in t3's all-gather, chunk g otherwise."""
        s = self.shape
        T, H, P, C = s.tokens, s.hidden, s.tp, s.channels
        if phase != 2:
            self._bind(src)       # multimem.ld_reduce reads it on every GPU
        if phase != 1:
            self._bind(out)       # multimem.st writes it on every GPU
        self._buffer(f"flags{suffix}", C * P * 8, region="control", dtype="i64")
        self._launch(("allreduce", "reduce_scatter", "all_gather")[phase], "nvls_tp_collective",
                     C, (("send", f"@{src}"), ("recv", f"@{out}"), ("flags", f"@flags{suffix}"),
                         ("elems", T * H), ("slice", s.slice), ("bf16", 1), ("phase", phase),
                         ("shift", int(self.sp or (self.t3 and phase == 2)))))
        return out

    def _cais(self, phase, src, out, suffix):
        """A CAIS collective (lib/cais_collectives.s): phase 1 reduce-scatter (src -> out, this
        GPU's chunk), 2 all-gather (in place in out)."""
        s = self.shape
        T, H, C = s.tokens, s.hidden, s.channels
        self._cais_group(out)
        self._buffer(f"flags{suffix}", C * s.tp * 8, region="control", dtype="i64")
        self._launch(("allreduce", "reduce_scatter", "all_gather")[phase], "cais_tp_collective",
                     C, (("send", f"@{src}"), ("recv", f"@{out}"), ("flags", f"@flags{suffix}"),
                         ("elems", T * H), ("slice", s.slice), ("phase", phase), ("shift", 1),
                         ("sync", self._sync_flags(f"sync{suffix}", C))))
        return out

    def _sync_flags(self, name, tbs):
        """The group sync flags of a CAIS kernel's thread blocks (one i64 per thread block,
        registered with workload.cais so the switch's group sync table knows the members), or -1
        without coordination (workload.block.cais_sync: false)."""
        if not self.cfg.workload.block.cais_sync:
            return -1
        self._buffer(name, tbs * 8, region="control", dtype="i64")
        self._cais_group(name)
        return f"@{name}"

    def _cais_group(self, buffer):
        """Register `buffer` for CAIS: red.cais / ld.cais address it (workload.cais)."""
        if buffer not in (g.buffer for g in self.cais_groups):
            self.cais_groups.append(CaisGroupConfig(buffer=buffer))

    def _gemm_cais(self, phase, a, w, y, k, ncols, n, group, mode, recv):
        """A GEMM fused with a CAIS collective (tp/cais.s tp_gemm_cais): mode 2 pulls A's row
        tiles from their homes with ld.cais (AG-GEMM), mode 1 pushes Y's rows home into `recv`
        with red.cais (GEMM-RS)."""
        s, tbs = self.shape, self.cfg.workload.block.gemm_tbs
        self._cais_group(recv if mode == 1 else a)
        self._buffer(f"flags_{phase}", tbs * s.tp * 8, region="control", dtype="i64")
        self._buffer(f"ready_{phase}", -(-s.tokens // s.tile_rows) * 8, region="control",
                     dtype="i64")
        self._launch(phase, "tp_gemm_cais", tbs, (
            ("a", f"@{a}"), ("w", f"@{w}"), ("y", f"@{y}"), ("tokens", s.tokens), ("k", k),
            ("ncols", ncols), ("n_tile", n), ("tile_rows", s.tile_rows), ("group", group),
            ("recv", f"@{recv}"), ("ready", f"@ready_{phase}"), ("flags", f"@flags_{phase}"),
            ("mode", mode), ("sync", self._sync_flags(f"sync_{phase}", tbs))))
        return recv

    def _gemm_t3(self, a, w, y, k, ncols, n, recv):
        """The output projection fused with T3's reduce-scatter (tp/t3.s tp_gemm_t3): each row
        tile goes to its owner's `recv` with a near-memory add as soon as it is stored; then the
        all-gather (ring or NVLS, t3_collectives) rebuilds the whole sum in `recv` on every GPU."""
        s, tbs = self.shape, self.cfg.workload.block.gemm_tbs
        self._buffer(f"flags_t3", tbs * s.tp * 8, region="control", dtype="i64")
        self._buffer(f"ready_t3", s.tokens // s.home_rows * 8, region="control", dtype="i64")
        self._launch("o_proj", "tp_gemm_t3", tbs, (
            ("a", f"@{a}"), ("w", f"@{w}"), ("y", f"@{y}"), ("tokens", s.tokens), ("k", k),
            ("ncols", ncols), ("n_tile", n), ("tile_rows", s.home_rows), ("group", ncols),
            ("recv", f"@{recv}"), ("ready", "@ready_t3"), ("flags", "@flags_t3")))
        return self._t3_all_gather(recv, "_t3")

    def _t3_all_gather(self, recv, suffix):
        """t3's all-gather after a fused reduce-scatter, in place in `recv` (GPU g owns chunk
        (g + 1) % t): NVLS's multimem.st half, or the ring's all-gather half (tp/allreduce_ring.s
        ring_half phase 2), as workload.block.t3_collectives says."""
        if self.nvls:
            return self._nvls(2, recv, recv, f"_ag{suffix}")
        s = self.shape
        T, H, P, C = s.tokens, s.hidden, s.tp, s.channels
        self._buffer(f"flags_ag{suffix}", C * 2 * (P - 1) * 8, region="control", dtype="i64")
        self._launch("all_gather", "ring_half", C, (
            ("send", f"@{recv}"), ("recv", f"@{recv}"), ("stage", f"@{recv}"),
            ("flags", f"@flags_ag{suffix}"), ("elems", T * H), ("slice", s.slice), ("bf16", 1),
            ("phase", 2)))
        return recv

    def _ring_half(self, phase, src, out, suffix):
        """Sequence parallelism's collectives: phase 1 reduce-scatter (src -> out), 2 all-gather
        (in place in out)."""
        if self.nvls:
            return self._nvls(phase, src, out, suffix)
        if self.cais:
            return self._cais(phase, src, out, suffix)
        s = self.shape
        T, H, P, C = s.tokens, s.hidden, s.tp, s.channels
        if phase == 1:
            self._buffer(f"stage{suffix}", T * H * 2 * (P - 1) // P)
        self._buffer(f"flags{suffix}", C * 2 * (P - 1) * 8, region="control", dtype="i64")
        self._launch("reduce_scatter" if phase == 1 else "all_gather", "ring_half", C, (
            ("send", f"@{src}"), ("recv", f"@{out}"),
            ("stage", f"@stage{suffix}" if phase == 1 else f"@{out}"),
            ("flags", f"@flags{suffix}"), ("elems", T * H), ("slice", s.slice), ("bf16", 1),
            ("phase", phase)))
        return out

    def _allreduce(self, src, suffix):
        """The TP scheme's combine of the row-parallel partial sums `src`; returns the result
        (sp_ring: reduce-scatter, the result complete on this GPU's sequence shard only)."""
        if self.sp:
            s = self.shape
            return self._ring_half(1, src, self._buffer(f"ar{suffix}", s.tokens * s.hidden * 2),
                                   f"_rs{suffix}")
        if self.nvls:
            s = self.shape
            out = self._buffer(f"ar{suffix}" if suffix else "out", s.tokens * s.hidden * 2)
            return self._nvls(0, src, out, suffix)
        if not self.ring:
            return src
        s = self.shape
        T, H, P, C = s.tokens, s.hidden, s.tp, s.channels
        out = self._buffer(f"ar{suffix}" if suffix else "out", T * H * 2)
        self._buffer(f"stage{suffix}", T * H * 2 * (P - 1) // P)
        self._buffer(f"flags{suffix}", C * 2 * (P - 1) * 8, region="control", dtype="i64")
        self._launch("allreduce", "allreduce_ring", C, (
            ("send", f"@{src}"), ("recv", f"@{out}"), ("stage", f"@stage{suffix}"),
            ("flags", f"@flags{suffix}"), ("elems", T * H), ("slice", s.slice), ("bf16", 1)))
        return out

    def _ffn(self, x, suffix):
        """Column-parallel gate/up, row-parallel down (shared_ffn), then the all-reduce."""
        s, cfg = self.shape, self.cfg
        T, H, I = s.tokens, s.hidden, s.ffn_t
        tiles = -(-T // (s.home_rows if self.t3 else s.tile_rows))
        if s.kind == "ffn":
            self._buffer("x", T * H * 2)   # functional mode: preset, the same on every GPU
        self.buffers += [
            _buf("ws_gate", H * I * 2, init="random"), _buf("ws_up", H * I * 2, init="random"),
            _buf("ws_down", I * H * 2, init="random"),
            _buf("hs", T * I * 2), _buf("ys", T * H * 2),
            _buf("shared_jobs", (2 + tiles) * 8, region="control", dtype="i64"),
            _buf("acct", 64, region="control", dtype="i64")]
        params = (("x", f"@{x}"), ("wg", "@ws_gate"), ("wu", "@ws_up"), ("wd", "@ws_down"),
                  ("hs", "@hs"), ("ys", "@ys"), ("jobs", "@shared_jobs"), ("acct", "@acct"),
                  ("tokens", T), ("hidden", H), ("ffn", I), ("experts", 1),
                  ("tile_rows", s.home_rows if self.t3 else s.tile_rows), ("n_tile", s.n_tile),
                  ("swizzle", 1))    # row tile by row tile (the TP blocks' FFN order before groups)
        if self.t3:
            # T3's reduce-scatter fused into the down GEMM (tp/t3.s tp_ffn_t3), then the all-gather
            tbs = cfg.workload.block.gemm_tbs
            recv = self._buffer(f"ar{suffix}" if suffix else "out", T * H * 2)
            self._buffer("ready_ffn_t3", T // s.home_rows * 8, region="control", dtype="i64")
            self._buffer("flags_ffn_t3", tbs * s.tp * 8, region="control", dtype="i64")
            self._launch("ffn", "tp_ffn_t3", tbs, params + (
                ("recv", f"@{recv}"), ("ready", "@ready_ffn_t3"), ("flags", "@flags_ffn_t3")))
            return self._t3_all_gather(recv, f"_ffn_t3")
        self._launch("ffn", "shared_ffn", cfg.workload.block.gemm_tbs, params)
        return self._allreduce("ys", suffix)

    def _ffn_backward(self, x):
        """The FFN's training backward (tp/ffn_backward.s) after its forward (_ffn, which keeps
        x and hs): D, dG, dU (ffn_bwd_act, G and U recomputed), dX_r (ffn_dgrad), the weight
        gradients in fp32 (ffn_wgrad), then the all-reduce of dX_r; returns dX's buffer. dy, the
        gradient of the block output, is replicated as the output is."""
        s, tbs = self.shape, self.cfg.workload.block.gemm_tbs
        T, H, I, n = s.tokens, s.hidden, s.ffn_t, s.n_tile
        self._buffer("dg", T * I * 2)
        self._buffer("du", T * I * 2)
        self._buffer("dxr", T * H * 2)
        for w in ("dwg", "dwu", "dwd"):
            self._buffer(w, H * I * 4, dtype="f32")
        shape = (("tokens", T), ("hidden", H), ("ffn", I))
        self._launch("ffn_bwd_act", "ffn_bwd_act", tbs, (
            ("x", f"@{x}"), ("dy", "@dy"), ("wg", "@ws_gate"), ("wu", "@ws_up"),
            ("wd", "@ws_down"), ("dg", "@dg"), ("du", "@du")) + shape +
            (("tile_rows", s.tile_rows), ("n_tile", n)))
        self._launch("ffn_dgrad", "ffn_dgrad", tbs, (
            ("dg", "@dg"), ("du", "@du"), ("wg", "@ws_gate"), ("wu", "@ws_up"),
            ("dxr", "@dxr")) + shape + (("tile_rows", s.tile_rows), ("n_tile", n)))
        self._launch("ffn_wgrad", "ffn_wgrad", tbs, (
            ("x", f"@{x}"), ("dy", "@dy"), ("hs", "@hs"), ("dg", "@dg"), ("du", "@du"),
            ("dwg", "@dwg"), ("dwu", "@dwu"), ("dwd", "@dwd")) + shape + (("n_tile", n),))
        return self._backward_collective(lambda: self._allreduce("dxr", "_dx"))

    def _block_backward(self, h1):
        """The backward of kinds attention and transformer (tp/block_backward.s, and for the
        transformer's FFN tp/ffn_backward.s), in autograd's order, given dy (the gradient of the
        block output, replicated as the output is): [the FFN's backward and the all-reduce of its
        dX_r, then norm 2's backward plus dy, the residual path: dh1] -> the output projection's
        dgrad (no collective: its forward is row-parallel) and wgrad -> the attention backward
        (D and dQ, then dK and dV) -> the QKV projection's dgrad and wgrad -> the all-reduce of
        dxn_r (the backward of the column-parallel QKV's input copy) -> norm 1's backward plus
        dh1: dx. Returns dx's buffer."""
        s, tbs = self.shape, self.cfg.workload.block.gemm_tbs
        T, H, dh, ht = s.tokens, s.hidden, s.head_dim, s.heads_t * s.head_dim
        dy = self._buffer("dy", T * H * 2)     # functional mode: preset, the same on every GPU
        if self.sp:      # the output is sharded, so is dy: the GEMMs after it need every token
            self._backward_collective(lambda: self._ring_half(2, dy, dy, "_agdy"))
        dh1 = dy
        if s.kind == "transformer":
            dhn = self._ffn_backward("hn")
            dh1 = self._norm_backward(h1, dhn, dy, "2", "dh1")
            if self.sp:
                self._backward_collective(lambda: self._ring_half(2, dh1, dh1, "_agdh1"))
        self._buffer("dao", T * ht * 2)
        self._buffer("dw_o", ht * H * 4, dtype="f32")
        self._proj_backward("o_proj", "ao", dh1, "w_o", "dao", "dw_o", ht, H, s.o_n, s.o_kn, H)
        self._buffer("dqkv", T * 3 * ht * 2)
        self._buffer("d_stat", s.heads_t * T * 4, dtype="f32")
        params = (("qkv", "@qkv"), ("out", "@ao"), ("dout", "@dao"), ("dqkv", "@dqkv"),
                  ("mask", "@mask"), ("consts", "@consts"), ("m_stat", "@m_stat"),
                  ("l_stat", "@l_stat"), ("d_stat", "@d_stat"), ("seq", s.seq),
                  ("batch", s.batch), ("heads", s.heads_t), ("dh", dh), ("tile", s.attn_tile))
        for attention_pass in (0, 1):       # D and dQ, then dK and dV
            self._launch("attention_bwd", "attention_bwd", tbs,
                         params + (("pass", attention_pass),))
        self._buffer("dxnr", T * H * 2)
        self._buffer("dw_qkv", H * 3 * ht * 4, dtype="f32")
        self._proj_backward("qkv", "xn", "dqkv", "w_qkv", "dxnr", "dw_qkv", H, 3 * ht, s.qkv_n,
                            s.proj_kn, dh)
        dxn = self._backward_collective(lambda: self._allreduce("dxnr", "_dxn"))
        return self._norm_backward("x", dxn, dh1, "1", "dx")

    def _backward_collective(self, launch):
        """Run launch() (which adds a collective's launches) and file them under the backward's
        collectives (phase dx_allreduce); returns what launch returns."""
        first = len(self.launches)
        out = launch()
        for i in range(first, len(self.launches)):
            self.phases[i] = "dx_allreduce"
        return out

    def _proj_backward(self, phase, a, dy, w, dx, dw, k, ncols, n, kn, group):
        """The backward of tp_gemm's Y = A W (Y in blocks of [T][group]): dX = dY W^T (tp_dgrad)
        and dW = A^T dY in fp32 (tp_wgrad)."""
        s, tbs = self.shape, self.cfg.workload.block.gemm_tbs
        shape = (("tokens", s.tokens), ("k", k), ("ncols", ncols), ("n_tile", n), ("kn", kn))
        self._launch(f"{phase}_dgrad", "tp_dgrad", tbs, (
            ("dy", f"@{dy}"), ("w", f"@{w}"), ("dx", f"@{dx}")) + shape +
            (("tile_rows", s.tile_rows), ("group", group)))
        self._launch(f"{phase}_wgrad", "tp_wgrad", tbs, (
            ("a", f"@{a}"), ("dy", f"@{dy}"), ("dw", f"@{dw}")) + shape + (("group", group),))

    def _norm_backward(self, x, dy, resid, which, dx):
        """Norm `which`'s backward plus the residual path's gradient `resid` (tp_norm_bwd), then
        the sum of the thread blocks' parameter-gradient partials (norm_grad_reduce) into
        dnorm<which> (fp32 [2][H]: dgain, dbias). Returns dx's buffer."""
        s, tbs = self.shape, self.cfg.workload.block.gemm_tbs
        T, H = s.tokens, s.hidden
        self._buffer(dx, T * H * 2)
        part = self._buffer(f"norm{which}_part", tbs * 2 * H * 4, dtype="f32")
        grad = self._buffer(f"dnorm{which}", 2 * H * 4, dtype="f32")
        self._launch("norm_bwd", "tp_norm_bwd", tbs, (
            ("x", f"@{x}"), ("dy", f"@{dy}"), ("resid", f"@{resid}"), ("dx", f"@{dx}"),
            ("gain", f"@norm{which}_gain"), ("bias", f"@norm{which}_bias"),
            ("consts", "@consts"), ("part", f"@{part}"), ("tokens", T // s.tp if self.sp else T),
            ("hidden", H), ("rows", s.norm_bwd_rows),
            ("layernorm", int(self.model.norm == "layernorm")), ("sharded", int(self.sp))))
        chunk = max(c for c in (8, 16, 32, 64, 128, 256)
                    if (2 * H) % c == 0 and tbs * c * 4 <= ATTENTION_BWD_SMEM)
        self._launch("norm_bwd", "norm_grad_reduce", tbs, (
            ("part", f"@{part}"), ("grad", f"@{grad}"), ("parts", tbs), ("elems", 2 * H),
            ("chunk", chunk)))
        return dx

    def _norm(self, x, y, which):
        s = self.shape
        T, H = s.tokens, s.hidden
        self._buffer(f"norm{which}_gain", H * 4, dtype="f32")
        self._buffer(f"norm{which}_bias", H * 4, dtype="f32")
        self._buffer(y, T * H * 2)
        self._launch("norm", "tp_norm", self.cfg.workload.block.gemm_tbs, (
            ("x", f"@{x}"), ("y", f"@{y}"), ("gain", f"@norm{which}_gain"),
            ("bias", f"@norm{which}_bias"), ("consts", "@consts"),
            ("tokens", T // s.tp if self.sp else T), ("hidden", H), ("rows", s.norm_rows),
            ("layernorm", int(self.model.norm == "layernorm")), ("sharded", int(self.sp))))
        if self.fuse and which == "1":     # the QKV projection gathers its rows itself
            self._cais_group(y)
        elif self.sp:   # the column-parallel GEMM after the norm needs every token
            self._ring_half(2, y, y, f"_ag{which}")

    def _gemm(self, phase, a, w, y, k, ncols, n, group):
        s = self.shape
        self._launch(phase, "tp_gemm", self.cfg.workload.block.gemm_tbs, (
            ("a", f"@{a}"), ("w", f"@{w}"), ("y", f"@{y}"), ("tokens", s.tokens), ("k", k),
            ("ncols", ncols), ("n_tile", n), ("tile_rows", s.tile_rows), ("group", group)))

    def _residual(self, a, b, y):
        s = self.shape
        self._buffer(y, s.tokens * s.hidden * 2)
        chunk = s.norm_rows * s.hidden
        elems = s.tokens * s.hidden // (s.tp if self.sp else 1)
        self._launch("residual", "residual_add", self.cfg.workload.block.gemm_tbs, (
            ("a", f"@{a}"), ("b", f"@{b}"), ("y", f"@{y}"), ("elems", elems),
            ("chunk", chunk), ("sharded", int(self.sp))))
        return y

    def _attention_core(self, x):
        """norm -> QKV (column-parallel) -> attention; returns the attention output's buffer."""
        s = self.shape
        T, H, dh, tile = s.tokens, s.hidden, s.head_dim, s.attn_tile
        ht = s.heads_t * dh
        self._norm(x, "xn", "1")
        self._buffer("w_qkv", H * 3 * ht * 2, init="random")
        self._buffer("qkv", T * 3 * ht * 2)
        if self.fuse:
            self._gemm_cais("qkv", "xn", "w_qkv", "qkv", H, 3 * ht, s.qkv_n, dh, 2, "xn")
        else:
            self._gemm("qkv", "xn", "w_qkv", "qkv", H, 3 * ht, s.qkv_n, dh)
        self._buffer("mask", tile * tile * 4, dtype="f32")
        self._buffer("ao", T * ht * 2)
        stats = ()
        if self.training:   # attention_train (tp/block_backward.s) keeps m and l per query row
            stats = (("m_stat", f"@{self._buffer('m_stat', s.heads_t * T * 4, dtype='f32')}"),
                     ("l_stat", f"@{self._buffer('l_stat', s.heads_t * T * 4, dtype='f32')}"))
        self._launch("attention", "attention_train" if stats else "attention",
                     self.cfg.workload.block.gemm_tbs, (
            ("qkv", "@qkv"), ("out", "@ao"), ("mask", "@mask"), ("consts", "@consts"),
            ("seq", s.seq), ("batch", s.batch), ("heads", s.heads_t), ("dh", dh),
            ("tile", tile)) + stats)
        return "ao"

    def _attention(self, x):
        """_attention_core -> output projection (row-parallel) -> all-reduce -> residual; returns
        the name of the residual output."""
        s = self.shape
        T, H, ht = s.tokens, s.hidden, s.heads_t * s.head_dim
        self._attention_core(x)
        self._buffer("w_o", ht * H * 2, init="random")
        self._buffer("ya", T * H * 2)
        if self.fuse:
            ar = self._gemm_cais("o_proj", "ao", "w_o", "ya", ht, H, s.o_n, H, 1,
                                 self._buffer("ar1", T * H * 2))
            return self._residual(x, ar, "h1")
        if self.t3:
            ar = self._gemm_t3("ao", "w_o", "ya", ht, H, s.o_n, self._buffer("ar1", T * H * 2))
            return self._residual(x, ar, "h1")
        self._gemm("o_proj", "ao", "w_o", "ya", ht, H, s.o_n, H)
        return self._residual(x, self._allreduce("ya", "1"), "h1")

    def _dataflow_tail(self, x, ao):
        """CAIS's dataflow from the output projection to the end of the layer, one persistent
        kernel (tp/cais_dataflow.s tp_cais_dataflow: GEMM-RS -> residual + norm on the tile's
        home -> FFN gate/up AG-GEMM -> down GEMM-RS -> residual, per-row-tile dependencies in
        memory); returns the layer output's buffer (complete on this GPU's sequence shard)."""
        import math
        s, P = self.shape, self.shape.tp
        T, H, I, n, rows = s.tokens, s.hidden, s.ffn_t, s.n_tile, s.home_rows
        ht = s.heads_t * s.head_dim
        R = T // rows
        self._buffer("w_o", ht * H * 2, init="random")
        self._buffer("ya", T * H * 2)
        for b in ("ar1", "h1", "hn", "ys", "ar2", "out"):
            self._buffer(b, T * H * 2)
        for b in ("ar1", "hn", "ar2"):       # red.cais into ar1 and ar2, ld.cais from hn
            self._cais_group(b)
        self._buffer("norm2_gain", H * 4, dtype="f32")
        self._buffer("norm2_bias", H * 4, dtype="f32")
        self.buffers += [
            _buf("ws_gate", H * I * 2, init="random"), _buf("ws_up", H * I * 2, init="random"),
            _buf("ws_down", I * H * 2, init="random"), _buf("hs", T * I * 2)]
        # next job, released, cnt1, cnt2 [R], done1, done2 [R][P], ready, gathered, gu, normed [R]
        self._buffer("dataflow_ctrl", (2 + 2 * R + 2 * R * P + 4 * R) * 8,
                     region="control", dtype="i64")
        norm_rows = math.gcd(s.norm_rows, rows)
        # the AG-GEMM's gather slice: the most rows of a tile within 64 KB (assumption: the NVLS
        # collectives' 64 KB slice, workload.block.nvls_slice)
        gather = max([1] + [d for d in range(1, rows + 1) if rows % d == 0 and d * H * 2 <= 65536])
        dims = (s.o_n | n << 12 | norm_rows << 24 | int(self.model.norm == "layernorm") << 36
                | self.cfg.workload.block.cais_window << 40 | gather << 52)
        self._launch("dataflow", "tp_cais_dataflow", self.cfg.workload.block.gemm_tbs, (
            ("a", f"@{ao}"), ("wo", "@w_o"), ("ya", "@ya"), ("x", f"@{x}"), ("ar1", "@ar1"),
            ("h1", "@h1"), ("hn", "@hn"), ("gain", "@norm2_gain"), ("bias", "@norm2_bias"),
            ("consts", "@consts"), ("wg", "@ws_gate"), ("wu", "@ws_up"), ("wd", "@ws_down"),
            ("hs", "@hs"), ("ys", "@ys"), ("ar2", "@ar2"), ("out", "@out"),
            ("ctrl", "@dataflow_ctrl"), ("tokens", T), ("hidden", H), ("ffn", I),
            ("tile_rows", rows), ("dims", dims)))
        return "out"

    def _check_fits(self):
        from ..builder import BUFFER_ALIGN
        need = sum(-(-b.bytes // BUFFER_ALIGN) * BUFFER_ALIGN for b in self.buffers)
        cap = self.cfg.system.gpu.hbm.capacity
        if need > cap:
            raise BlockError(f"{KEY}.tokens: {self.shape.tokens} tokens of {self.shape.model} need "
                             f"{need / 2**30:.3g} GiB of buffers per GPU, more than "
                             f"system.gpu.hbm.capacity ({cap / 2**30:.3g} GiB); use fewer tokens")

    def expanded_config(self):
        cfg = self.cfg
        files = [str(data_root() / f) for f in self.kernel_files]
        wl = attrs.evolve(cfg.workload, buffers=tuple(cfg.workload.buffers) + tuple(self.buffers),
                          launches=tuple(cfg.workload.launches) + tuple(self.launches),
                          kernel_files=tuple(cfg.workload.kernel_files) + tuple(files),
                          multicast=tuple(cfg.workload.multicast) + tuple(self.multicast),
                          cais=tuple(cfg.workload.cais) + tuple(self.cais_groups))
        return attrs.evolve(cfg, workload=wl)

    # ---- functional inputs -------------------------------------------------------------------
    def presets(self):
        """Functional mode: the replicated inputs and parameters, the same on every GPU (TP
        replicates the block input, the norms' parameters and the constants), from the seed:
        x bf16 in [-1, 1); norm gains in [0.5, 1.5) and biases in [-0.5, 0.5) (fp32); consts
        (fp32 words: softmax scale 1 / sqrt(dh), norm eps, H); the causal mask tile."""
        if not self.shape.functional:
            return {}
        s = self.shape
        rng = np.random.default_rng([self.cfg.run.seed, 21])
        x = rng.uniform(-1.0, 1.0, s.tokens * s.hidden).astype(np.float32)
        bits = (x.view(np.uint32) + 0x7FFF + ((x.view(np.uint32) >> 16) & 1)) >> 16
        out = {"x": bits.astype(np.uint16).view(np.uint8)}
        if self.training:
            # dY, the gradient of the block output: bf16 in [-1, 1), replicated as the output is
            # (its own stream, so that x is the forward's)
            dy = np.random.default_rng([self.cfg.run.seed, 21, 1]).uniform(
                -1.0, 1.0, s.tokens * s.hidden).astype(np.float32)
            dbits = (dy.view(np.uint32) + 0x7FFF + ((dy.view(np.uint32) >> 16) & 1)) >> 16
            out["dy"] = dbits.astype(np.uint16).view(np.uint8)
        if s.kind != "ffn":
            H = s.hidden
            for w in ("1", "2") if s.kind == "transformer" else ("1",):
                out[f"norm{w}_gain"] = rng.uniform(0.5, 1.5, H).astype(np.float32).view(np.uint8)
                out[f"norm{w}_bias"] = rng.uniform(-0.5, 0.5, H).astype(np.float32).view(np.uint8)
            out["consts"] = self.constants().view(np.uint8)
            out["mask"] = self.mask().view(np.uint8)
        return {k: np.tile(v, (s.tp, 1)) for k, v in out.items()}

    def constants(self):
        s = self.shape
        return np.array([1.0 / np.sqrt(s.head_dim), self.model.norm_eps, s.hidden, 0.0],
                        dtype=np.float32)

    def mask(self):
        t = self.shape.attn_tile
        return np.where(np.triu(np.ones((t, t), dtype=bool), 1), np.float32(-np.inf),
                        np.float32(0.0)).astype(np.float32).reshape(-1)

    # ---- end of run --------------------------------------------------------------------------
    def finish(self, sim):
        s, stats = self.shape, sim.stats
        spans = {}          # phase -> {launch: (first start, last end) over all GPUs}
        first = len(self.cfg.workload.launches)     # the block's launches follow the config's
        for l in sim.launches:
            a = stats.get(f"system.gpu{l.gpu}.launch{l.index}.start_tick")
            e = stats.get(f"system.gpu{l.gpu}.launch{l.index}.end_tick")
            k = l.config_index - first
            if a is None or e is None or not 0 <= k < len(self.phases):
                continue
            per = spans.setdefault(self.phases[k], {})
            lo, hi = per.get(k, (a, e))
            per[k] = (min(lo, a), max(hi, e))
        every = [se for per in spans.values() for se in per.values()]
        lo, hi = min(a for a, _ in every), max(e for _, e in every)
        total = max(hi - lo, 0)

        def phase_ticks(phase):
            return sum(max(e - a, 0) for a, e in spans.get(phase, {}).values())

        stats.add("system.block.time_us", total * 1e-6, "us",
                  "block time: first kernel start to last kernel end over all GPUs")
        busy = 0
        for phase, what in (("norm", "the norms (tp_norm)"),
                            ("qkv", "the QKV projection (column-parallel tp_gemm)"),
                            ("attention", "causal attention (the attention kernel)"),
                            ("o_proj", "the output projection (row-parallel tp_gemm)"),
                            ("residual", "the residual adds"),
                            ("ffn", "the FFN GEMMs (gate/up + down)"),
                            ("dataflow", "cais_dataflow's persistent kernel (output projection "
                                         "GEMM-RS -> residual + norm -> FFN AG-GEMM -> down "
                                         "GEMM-RS -> residual, tp/cais_dataflow.s)"),
                            ("allreduce", "the TP all-reduces (tp_ring, tp_nvls)"),
                            ("reduce_scatter", "the reduce-scatters (sp_ring, sp_nvls)"),
                            ("all_gather", "the all-gathers (sp_ring, sp_nvls; t3's after its "
                                           "fused reduce-scatter)")):
            ticks = phase_ticks(phase)
            busy += ticks
            if phase == "dataflow" and not self.dataflow:
                continue
            if phase in ("ffn", "allreduce") or (s.kind != "ffn" and (
                    self.sp or (self.t3 and phase == "all_gather")
                    or phase not in ("reduce_scatter", "all_gather"))):
                stats.add(f"system.block.{phase}_time_us", ticks * 1e-6, "us",
                          f"{what}: per launch first start to last end over all GPUs, summed "
                          f"over the block's launches")
        busy += sum(phase_ticks(p) for p in BACKWARD_PHASES)     # passes: training
        stats.add("system.block.launch_gaps_us", max(total - busy, 0) * 1e-6, "us",
                  "block time minus the phases' times: mostly launch gaps (stream-ordered "
                  "launches start system.gpu.kernel_launch_latency after their predecessor "
                  "ends), less where GPUs run a phase staggered")
        fticks = phase_ticks("ffn")
        flops = 6.0 * s.tokens * s.hidden * s.ffn_t
        stats.add("system.block.ffn_TFLOPs", flops / fticks if fticks else 0.0,
                  "TFLOP/s", "FFN FLOPs per GPU (3 GEMMs of 2 T H I/t) / FFN time")
        if s.kind != "ffn":
            at = phase_ticks("attention")
            aflops = 2.0 * s.batch * s.heads_t * s.head_dim * s.seq * (s.seq + s.attn_tile)
            stats.add("system.block.attention_TFLOPs", aflops / at if at else 0.0, "TFLOP/s",
                      "causal attention FLOPs per GPU computed (Q K^T and P V over the key "
                      "tiles visited: 4 batch heads/t dh S (S + tile) / 2) / attention time")
        if self.training:
            self._training_stats(stats, spans, phase_ticks)
        ar = phase_ticks("allreduce")
        n_ar = len(spans.get("allreduce", {}))
        nbytes = s.tokens * s.hidden * 2 * n_ar
        busbw = nbytes / (ar * 1e-12) / 1e9 * 2 * (s.tp - 1) / s.tp if ar else 0.0
        stats.add("system.block.allreduce_busbw_GBps", busbw, "GB/s",
                  "all-reduce bus bandwidth (nccl-tests): bytes / time x 2(t-1)/t")
        if self.sp:
            ar = phase_ticks("reduce_scatter") + phase_ticks("all_gather")
            stats.add("system.block.collective_time_us", ar * 1e-6, "us",
                      "the reduce-scatters and all-gathers together (the all-reduces' share)")
        if self.t3:
            ar = phase_ticks("allreduce") + phase_ticks("all_gather")
            stats.add("system.block.collective_time_us", ar * 1e-6, "us",
                      "the collective kernels: the all-gathers after the fused reduce-scatters "
                      "(those run inside the output projection and the FFN: o_proj_time_us, "
                      "ffn_time_us)")
            ar += phase_ticks("o_proj") + phase_ticks("ffn")
        ar += phase_ticks("dx_allreduce")      # passes: training: the input gradient's too
        nv = sim.cfg.system.nvlink
        tx = sum(x.value for x in stats.match("system.gpu*.nvlink*.tx_wire_bytes"))
        cap = s.tp * nv.links_per_gpu * nv.bandwidth * 1e-12
        stats.add("system.block.link_utilisation_pct", 100.0 * tx / (cap * total) if total else 0.0,
                  "%", "NVLink GPU-side transmit bytes (headers included) / (links x link "
                       "bandwidth x block time), over every GPU's links")
        stats.add("system.block.allreduce_link_utilisation_pct",
                  100.0 * tx / (cap * ar) if ar else 0.0, "%",
                  "the same over the collectives' time only (all NVLink traffic is theirs; t3: "
                  "with its output projection and FFN, whose GEMMs carry the reduce-scatters; "
                  "training: with the input gradient's all-reduce)")
        if s.functional:
            err = self._output_error(sim)
            stats.add("system.block.output_max_abs_error", err, "",
                      "largest |simulated - NumPy reference| over every GPU's output (0: the "
                      "orders match, see workloads/block.py)")
            if self.training:
                stats.add("system.block.gradient_max_abs_error", self._gradient_error(sim), "",
                          "training: largest |simulated - NumPy reference| over every GPU's dX "
                          "and weight gradients dWg, dWu, dWd (0: the orders match, "
                          "workloads/block.py)")
            if self.t3:
                t3_err, over, same = self.t3_check
                stats.add("system.block.t3_reduction_max_abs_error", t3_err, "",
                          "t3: largest |simulated - exact| of the output projection's sum "
                          "(the homes add in arrival order), over every GPU")
                stats.add("system.block.t3_reduction_over_bound", over, "",
                          "t3: largest (|simulated - exact| - bound) of that sum "
                          "(reference.t3_reduction_bound; <= 0: within the bound)")
                stats.add("system.block.t3_copies_identical", int(same), "",
                          "t3: 1 if every GPU holds the same sum after the all-gather")

    def _training_stats(self, stats, spans, phase_ticks):
        """passes: training - the forward's and the backward's times and the backward's phases."""
        s = self.shape
        back = [se for ph in BACKWARD_PHASES for se in spans.get(ph, {}).values()]
        fwd = [se for ph, per in spans.items() if ph not in BACKWARD_PHASES for se in per.values()]
        for name, part, what in (("forward", fwd, "the forward's launches"),
                                 ("backward", back, "the backward's launches (tp/ffn_backward.s, "
                                                    "tp/block_backward.s and the input "
                                                    "gradients' all-reduces)")):
            t = (max(e for _, e in part) - min(a for a, _ in part)) if part else 0
            stats.add(f"system.block.{name}_time_us", t * 1e-6, "us",
                      f"training: first start to last end over {what}, all GPUs")
        phases = (("ffn_bwd_act", "D = dY Wd^T, G and U recomputed, dG and dU"),
                  ("ffn_dgrad", "dX_r = dG Wg^T + dU Wu^T"),
                  ("ffn_wgrad", "the weight gradients dWg, dWu, dWd (fp32)"),
                  ("dx_allreduce", "the all-reduces of the input gradients dX_r (the scheme's)"))
        if s.kind != "ffn":
            phases += (
                ("o_proj_dgrad", "the output projection's input gradient dY W_o^T (tp_dgrad)"),
                ("o_proj_wgrad", "the output projection's weight gradient (fp32, tp_wgrad)"),
                ("attention_bwd", "the attention backward: D and dQ, then dK and dV "
                                  "(attention_bwd, passes 0 and 1)"),
                ("qkv_dgrad", "the QKV projection's input gradient (tp_dgrad)"),
                ("qkv_wgrad", "the QKV projection's weight gradient (fp32, tp_wgrad)"),
                ("norm_bwd", "the norms' backward with the residual gradients and their "
                             "parameter gradients (tp_norm_bwd, norm_grad_reduce)"))
        for phase, what in phases:
            stats.add(f"system.block.{phase}_time_us", phase_ticks(phase) * 1e-6, "us",
                      f"training: {what}; first start to last end over all GPUs")
        ffn_flops = 16.0 * s.tokens * s.hidden * s.ffn_t
        if s.kind == "ffn":
            gemm = sum(phase_ticks(p) for p in FFN_BACKWARD_PHASES)
            stats.add("system.block.backward_TFLOPs", ffn_flops / gemm if gemm else 0.0,
                      "TFLOP/s", "backward GEMM FLOPs per GPU (8 GEMMs of 2 T H I/t: G and U "
                      "recomputed, D, dX_r's two, three weight gradients) / the backward "
                      "kernels' time")
            return
        ht = s.heads_t * s.head_dim
        # 7 tile GEMMs per visited (query, key) tile pair: S and dP twice, dV, dK, dQ
        attn = 7.0 * s.batch * s.heads_t * s.head_dim * s.seq * (s.seq + s.attn_tile)
        flops = 4.0 * s.tokens * s.hidden * 4 * ht + attn     # dgrad + wgrad of QKV and o_proj
        phases = ATTENTION_BACKWARD_PHASES
        if s.kind == "transformer":
            flops += ffn_flops
            phases += FFN_BACKWARD_PHASES
        gemm = sum(phase_ticks(p) for p in phases)
        stats.add("system.block.backward_TFLOPs", flops / gemm if gemm else 0.0, "TFLOP/s",
                  "backward GEMM FLOPs per GPU (the projections' dgrad and wgrad, 4 T H 4 H/t; "
                  "the attention backward's 7 tile GEMMs per visited tile pair; the FFN's 16 T "
                  "H I/t) / the time of those kernels")
        at = phase_ticks("attention_bwd")
        stats.add("system.block.attention_bwd_TFLOPs", attn / at if at else 0.0, "TFLOP/s",
                  "attention backward FLOPs per GPU (7 tile GEMMs per visited tile pair, 7 "
                  "batch heads/t dh S (S + tile)) / its time")

    def _combine_gradients(self, parts):
        """The scheme's all-reduce of per-GPU input gradients [T, H] (ring order, NVLS's fp32 in
        rank order, or t = 1; a sequence-parallel reduce-scatter leaves each GPU its chunk of
        this)."""
        from .reference import nvls_allreduce_reference, ring_allreduce_reference
        parts = np.stack([p.reshape(-1) for p in parts])
        if self.nvls or self.cais:     # the merge unit's order is NVLS's (components/cais_merge.py)
            out = nvls_allreduce_reference(parts, bf16=True)
        elif self.ring or self.sp:
            out = ring_allreduce_reference(parts, bf16=True)
        else:
            out = parts[0]
        return out.reshape(self.shape.tokens, self.shape.hidden)

    def _block_gradient_error(self, sim):
        """Training, kinds attention and transformer: the largest |simulated - reference| of dx
        (every GPU), each GPU's weight gradients (QKV, output projection, the FFN's), the norms'
        parameter gradients and the attention's dQ, dK, dV, against the NumPy reference in the
        kernels' orders (block_reference.attention_backward, norm_backward; reference.
        ffn_backward; the collectives' orders): bit-identical. Needs reference() first (the
        forward's activations)."""
        from .block_reference import attention_backward, norm_backward
        from .reference import ffn_backward, gemm_seq, max_abs_error, to_bf16
        s, acts = self.shape, self.reference_activations
        T, H, dh, ht, I = s.tokens, s.hidden, s.head_dim, s.heads_t * s.head_dim, s.ffn_t
        tbs, kind, eps = self.cfg.workload.block.gemm_tbs, self.model.norm, self.constants()[1]
        scale = self.constants()[0]
        dy = sim.read_buffer(0, "dy")[:T * H].reshape(T, H)
        err = 0.0

        def check(g, name, ref):
            nonlocal err
            got = sim.read_buffer(g, name)[:ref.size]
            err = max(err, max_abs_error(got, ref.reshape(-1)))

        def norm_grads(which, inp, d_out, resid):
            """dx (every row: rows are independent) and each GPU's parameter gradients (with
            sequence parallelism the partial over its shard, chunk (g + 1) % t)."""
            gain = sim.read_buffer(0, f"norm{which}_gain")[:H]
            dx, dgain, dbias = norm_backward(inp, d_out, resid, gain, kind, eps,
                                             s.norm_bwd_rows, tbs)
            for g in range(s.tp):
                if self.sp:
                    rows = self._shard_rows(g)
                    _, dgain, dbias = norm_backward(inp[rows], d_out[rows], resid[rows], gain,
                                                    kind, eps, s.norm_bwd_rows, tbs)
                check(g, f"dnorm{which}", np.concatenate([dgain, dbias]))
            return dx

        dh1 = dy
        if s.kind == "transformer":
            parts = []
            for g in range(s.tp):
                w = [self._weights(sim, g, name, s.n_tile, cols) for name, cols in
                     (("ws_gate", I), ("ws_up", I), ("ws_down", H))]
                dxr, dwg, dwu, dwd = ffn_backward(acts["hn"], dy, *w)
                parts.append(dxr)
                for name, ref, cols in (("dwg", dwg, I), ("dwu", dwu, I), ("dwd", dwd, H)):
                    got = self._weights(sim, g, name, s.n_tile, cols)
                    err = max(err, max_abs_error(got.reshape(-1), ref.reshape(-1)))
            dh1 = norm_grads("2", acts["h1"], self._combine_gradients(parts), dy)
        parts = []
        for g in range(s.tp):
            w_o = self._weights(sim, g, "w_o", s.o_n, H)
            dao = to_bf16(gemm_seq(dh1, np.ascontiguousarray(w_o.T)))
            dw_o = gemm_seq(np.ascontiguousarray(acts["ao"][g].T), dh1)
            got = self._weights(sim, g, "dw_o", s.o_n, H)
            err = max(err, max_abs_error(got.reshape(-1), dw_o.reshape(-1)))
            qkv, dqkv = acts["qkv"][g], np.zeros((T, 3 * ht), dtype=np.float32)
            for b in range(s.batch):
                rows = slice(b * s.seq, (b + 1) * s.seq)
                for h in range(s.heads_t):
                    cols = [slice((j * s.heads_t + h) * dh, (j * s.heads_t + h + 1) * dh)
                            for j in range(3)]
                    hc = slice(h * dh, (h + 1) * dh)
                    grads = attention_backward(
                        *(qkv[rows, c] for c in cols), acts["ao"][g][rows, hc], dao[rows, hc],
                        acts["m"][g][h, rows], acts["l"][g][h, rows], s.attn_tile, scale)
                    for c, grad in zip(cols, grads):
                        dqkv[rows, c] = grad
            # dqkv as stored: 3 heads_t blocks of [T][dh] (tp_gemm's layout, group = dh)
            check(g, "dqkv", dqkv.reshape(T, 3 * s.heads_t, dh).transpose(1, 0, 2))
            w_qkv = self._weights(sim, g, "w_qkv", s.qkv_n, 3 * ht)
            parts.append(to_bf16(gemm_seq(dqkv, np.ascontiguousarray(w_qkv.T))))
            dw_qkv = gemm_seq(np.ascontiguousarray(acts["xn"].T), dqkv)
            got = self._weights(sim, g, "dw_qkv", s.qkv_n, 3 * ht)
            err = max(err, max_abs_error(got.reshape(-1), dw_qkv.reshape(-1)))
        dx = norm_grads("1", acts["x"], self._combine_gradients(parts), dh1)
        for g in range(s.tp):
            rows = self._shard_rows(g) if self.sp else slice(0, T)
            got = sim.read_buffer(g, self.dx)[:T * H].reshape(T, H)[rows]
            err = max(err, max_abs_error(got.reshape(-1), dx[rows].reshape(-1)))
        return err

    def _shard_rows(self, g):
        """Sequence parallelism: the rows of GPU g's shard, chunk (g + 1) % t."""
        n = self.shape.tokens // self.shape.tp
        c = (g + 1) % self.shape.tp
        return slice(c * n, (c + 1) * n)

    def _gradient_error(self, sim):
        """Training: the largest |simulated - reference| of dX (every GPU, after the all-reduce)
        and of each GPU's weight gradients. The reference (reference.ffn_backward) rounds and
        orders as tp/ffn_backward.s; dX's sum over the ranks is the scheme's collective's
        (ring order, or NVLS's fp32 in rank order), so the check is bit-identical."""
        from .reference import ffn_backward, max_abs_error
        s = self.shape
        if s.kind != "ffn":
            return self._block_gradient_error(sim)
        T, H, I, n = s.tokens, s.hidden, s.ffn_t, s.n_tile
        x = sim.read_buffer(0, "x")[:T * H].reshape(T, H)
        dy = sim.read_buffer(0, "dy")[:T * H].reshape(T, H)
        err, parts = 0.0, []
        for g in range(s.tp):
            w = [self._weights(sim, g, name, n, cols) for name, cols in
                 (("ws_gate", I), ("ws_up", I), ("ws_down", H))]
            dxr, dwg, dwu, dwd = ffn_backward(x, dy, *w)
            parts.append(dxr.reshape(-1))
            for name, ref, cols in (("dwg", dwg, I), ("dwu", dwu, I), ("dwd", dwd, H)):
                got = self._weights(sim, g, name, n, cols)
                err = max(err, max_abs_error(got.reshape(-1), ref.reshape(-1)))
        dx = self._combine_gradients(parts)
        for g in range(s.tp):
            err = max(err, max_abs_error(sim.read_buffer(g, self.dx)[:T * H], dx.reshape(-1)))
        return err

    def _weights(self, sim, g, name, n, cols):
        return unslice_weights(sim.read_buffer(g, name).reshape(1, -1), n, cols)[0]

    def reference(self, sim):
        """The block output per the NumPy reference (block_reference.py), from the inputs and
        weights in simulated memory: [T, H] float32 (bf16 values), the same on every GPU."""
        from .block_reference import flash_attention, norm
        from .reference import expert_ffn, gemm_seq, to_bf16
        s = self.shape
        T, H, I, n = s.tokens, s.hidden, s.ffn_t, s.n_tile
        x = sim.read_buffer(0, "x")[:T * H].reshape(T, H)
        self.t3_check = (0.0, -np.inf, True)    # t3: (max error, max over the bound, copies equal)

        combine = self._combine_gradients      # the scheme's sum of the per-GPU partials

        def ffn(inp):
            parts = []
            for g in range(s.tp):
                wg = self._weights(sim, g, "ws_gate", n, I)
                wu = self._weights(sim, g, "ws_up", n, I)
                wd = self._weights(sim, g, "ws_down", n, H)
                parts.append(expert_ffn(inp, wg, wu, wd))
            if self.t3:
                return self._t3_sum(sim, parts, "out" if s.kind == "ffn" else "ar2")
            return combine(parts)

        if s.kind == "ffn":
            return ffn(x)
        consts = self.constants()
        eps, scale = consts[1], consts[0]
        dh, ht = s.head_dim, s.heads_t * s.head_dim

        def normed(which, inp):
            gain = sim.read_buffer(0, f"norm{which}_gain")[:H]
            bias = sim.read_buffer(0, f"norm{which}_bias")[:H]
            return norm(inp, gain, bias, self.model.norm, eps)

        xn = normed("1", x)
        parts = []
        acts = self.reference_activations = dict(x=x, xn=xn, qkv=[], ao=[], m=[], l=[])
        for g in range(s.tp):
            qkv = to_bf16(gemm_seq(xn, self._weights(sim, g, "w_qkv", s.qkv_n, 3 * ht)))
            ao = np.zeros((T, ht), dtype=np.float32)
            m_stat = np.zeros((s.heads_t, T), dtype=np.float32)
            l_stat = np.zeros((s.heads_t, T), dtype=np.float32)
            for b in range(s.batch):
                rows = slice(b * s.seq, (b + 1) * s.seq)
                for h in range(s.heads_t):
                    q, k, v = (qkv[rows, (j * s.heads_t + h) * dh:(j * s.heads_t + h + 1) * dh]
                               for j in range(3))
                    ao[rows, h * dh:(h + 1) * dh], m_stat[h, rows], l_stat[h, rows] = \
                        flash_attention(q, k, v, s.attn_tile, scale, stats=True)
            parts.append(to_bf16(gemm_seq(ao, self._weights(sim, g, "w_o", s.o_n, H))))
            for name, value in (("qkv", qkv), ("ao", ao), ("m", m_stat), ("l", l_stat)):
                acts[name].append(value)
        h1 = to_bf16(x + (self._t3_sum(sim, parts, "ar1") if self.t3 else combine(parts)))
        acts["h1"] = h1
        if s.kind == "attention":
            return h1
        acts["hn"] = normed("2", h1)
        return to_bf16(h1 + ffn(acts["hn"]))

    def _t3_sum(self, sim, parts, buffer):
        """t3's reduce-scatters add in arrival order (tp/t3.s): check the simulated sum in
        `buffer` (after the all-gather, on every GPU) against the exact sum of the reference
        partials within reference.t3_reduction_bound, fold the result into self.t3_check, and
        return the simulated sum, from which the rest of the block is bit-exact."""
        from .reference import t3_reduction_bound
        s = self.shape
        n = s.tokens * s.hidden
        parts = np.stack([p.reshape(-1) for p in parts])
        exact = parts.astype(np.float64).sum(axis=0)
        bound = t3_reduction_bound(parts)
        got = [sim.read_buffer(g, buffer)[:n].astype(np.float64) for g in range(s.tp)]
        err = max(float(np.max(np.abs(v - exact))) for v in got)
        over = max(float(np.max(np.abs(v - exact) - bound)) for v in got)
        same = all(np.array_equal(v, got[0]) for v in got)
        e0, o0, s0 = self.t3_check
        self.t3_check = (max(e0, err), max(o0, over), s0 and same)
        return got[0].astype(np.float32).reshape(s.tokens, s.hidden)

    def _output_error(self, sim):
        from .reference import max_abs_error
        s = self.shape
        ref = self.reference(sim).reshape(-1)
        if not self.sp:
            return max(max_abs_error(sim.read_buffer(g, self.output)[:s.tokens * s.hidden], ref)
                       for g in range(s.tp))
        # sequence parallelism: GPU g holds the output of its shard, chunk (g + 1) % t
        n = s.tokens * s.hidden // s.tp
        return max(max_abs_error(sim.read_buffer(g, self.output)[c * n:(c + 1) * n],
                                 ref[c * n:(c + 1) * n])
                   for g in range(s.tp) for c in [(g + 1) % s.tp])

    def invariants(self, sim):
        """Functional mode: the output is the reference exactly (every order fixed)."""
        out = []
        err = sim.stats.get("system.block.output_max_abs_error")
        if err is not None and err != 0.0:
            out.append(f"transformer block {self.shape.model}: output differs from the NumPy "
                       f"reference by up to {err} (expected bit-identical: workloads/block.py)")
        gerr = sim.stats.get("system.block.gradient_max_abs_error")
        if gerr is not None and gerr != 0.0:
            out.append(f"transformer block {self.shape.model}, training: the gradients differ "
                       f"from the NumPy reference by up to {gerr} (expected bit-identical: "
                       f"workloads/block.py)")
        over = sim.stats.get("system.block.t3_reduction_over_bound")
        if over is not None and over > 0.0:
            out.append(f"transformer block {self.shape.model}, scheme t3: the output projection's "
                       f"sum is off the exact sum by {over} more than reference."
                       f"t3_reduction_bound allows")
        if sim.stats.get("system.block.t3_copies_identical") == 0:
            out.append(f"transformer block {self.shape.model}, scheme t3: the GPUs hold different "
                       f"sums after the all-gather")
        return out
