"""The transformer block's shape: its model file (workloads/blocks/*.yaml), the sizes and tiles
the kernels run with, and the checks a user can act on (workloads/block.py builds the block from
them). The kernel files and the phases of each TP scheme are named here too."""
import attrs

from ...config.files import ConfigError, display_path, read_yaml
from ...config.schema import BufferConfig
from ...paths import data_root
from ..layer import GEMM_JOB_ELEMENTS, LayerError

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
