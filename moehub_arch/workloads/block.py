"""A transformer block of a dense model under tensor parallelism, as a simulator workload
(`workload.block`, beside the MoE layer's `workload.layer`).

What is built (kind `ffn`): the dense SwiGLU FFN of Megatron-LM's tensor parallelism (Shoeybi et
al., arXiv 1909.08053, section 3): with degree t, GPU r holds the column slice r of the gate and up
weights ([H][I/t]: column-parallel, no communication) and the row slice r of the down weights
([I/t][H]: row-parallel), so it computes a full-size partial Y_r = bf16(silu(X Wg_r) * (X Wu_r)) Wd_r
and the block output is the all-reduce sum_r Y_r. The FFN is the shared-expert kernel of the MoE
layers (workloads/kernels/common/moe_common.s `shared_ffn`, one "expert" of width I/t): the GEMM
jobs are the kernel library's (lib/gemm_tiles.s), never a copy. The partials are combined by the
TP scheme (`workload.block.scheme`):
  tp_ring  NCCL's ring all-reduce (workloads/kernels/tp/allreduce_ring.s, lib/ring_allreduce.s)
  tp_none  t = 1: the FFN alone, the reference without communication.
Attention (QKV, FlashAttention-style softmax, output projection), RMSNorm/LayerNorm and sequence
parallelism are not built yet: softmax and norms need ISA instructions (exp, max-reduce, rsqrt)
that isa/base.yaml lacks (README, "Transformer blocks").

Functional mode: x is the same on every GPU (TP replicates the block input), weights are random
per GPU (each GPU's shard); the output on every GPU must equal the NumPy reference
expert_ffn per GPU (reference.py: sequential-k fp32 GEMMs, bf16 roundings where the kernel
rounds) summed by reference.ring_allreduce_reference in the ring's order. Both orders are fixed,
so the check is bit-identical (error 0), stricter than the (t - 1) bf16 roundings' bound.
"""
import attrs
import numpy as np

from ..config.loader import ConfigError, _display, _read_yaml
from ..config.schema import BufferConfig, LaunchConfig
from ..paths import data_root
from .layer import GEMM_JOB_ELEMENTS, LayerError, unslice_weights

COMMON_KERNELS = "workloads/kernels/common/moe_common.s"
TP_KERNELS = "workloads/kernels/tp/allreduce_ring.s"
BLOCK_DIR = "workloads/blocks"
KEY = "workload.block"
_MODEL_KEYS = ("name", "hidden", "ffn", "heads", "layers", "seq", "batch")


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


def load_block_model(name_or_path):
    """A dense model shape: a bare name means workloads/blocks/<name>.yaml; a path is a file."""
    from pathlib import Path
    text = str(name_or_path)
    path = Path(text) if ("/" in text or text.endswith((".yaml", ".yml"))) else \
        data_root() / BLOCK_DIR / f"{text}.yaml"
    shown = _display(path)
    if not path.is_file():
        known = sorted(p.stem for p in (data_root() / BLOCK_DIR).glob("*.yaml"))
        raise ConfigError(f"{KEY}.model: no block model '{text}' ({shown} does not exist; "
                          f"shipped: {', '.join(known)})", key=f"{KEY}.model")
    raw = _read_yaml(path)
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
        ok = isinstance(v, str) and v if k == "name" else \
            isinstance(v, int) and not isinstance(v, bool) and v > 0
        if not ok:
            want = "a non-empty name" if k == "name" else "a positive integer"
            raise ConfigError(f"{shown}: block_model.{k}: expected {want}, found {v!r}",
                              file=shown, key=f"block_model.{k}")
    return BlockModel(**{k: m[k] for k in _MODEL_KEYS})


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
    tp: int
    tokens: int
    hidden: int
    ffn_t: int          # FFN columns per GPU (I / t)
    n_tile: int
    tile_rows: int
    channels: int
    slice: int          # all-reduce elements per put
    functional: bool


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
    sl = 1
    while sl * 2 <= b.allreduce_slice and share % (sl * 2) == 0:
        sl *= 2
    return BlockShape(model=m.name, tp=t, tokens=tokens, hidden=m.hidden, ffn_t=m.ffn // t,
                      n_tile=n, tile_rows=b.tile_rows, channels=C, slice=sl,
                      functional=cfg.workload.mode == "functional"), m


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
        self.ring = cfg.workload.block.scheme == "tp_ring" and s.tp > 1
        T, H, I = s.tokens, s.hidden, s.ffn_t
        tiles = -(-T // s.tile_rows)
        self.buffers = [
            _buf("x", T * H * 2),   # functional mode: preset, the same on every GPU
            _buf("ws_gate", H * I * 2, init="random"), _buf("ws_up", H * I * 2, init="random"),
            _buf("ws_down", I * H * 2, init="random"),
            _buf("hs", T * I * 2), _buf("ys", T * H * 2),
            _buf("shared_jobs", (2 + tiles) * 8, region="control", dtype="i64"),
            _buf("acct", 64, region="control", dtype="i64")]
        ffn = LaunchConfig(kernel="shared_ffn", grid=cfg.workload.block.gemm_tbs, stream=0, params=(
            ("x", "@x"), ("wg", "@ws_gate"), ("wu", "@ws_up"), ("wd", "@ws_down"), ("hs", "@hs"),
            ("ys", "@ys"), ("jobs", "@shared_jobs"), ("acct", "@acct"), ("tokens", T),
            ("hidden", H), ("ffn", I), ("experts", 1), ("tile_rows", s.tile_rows),
            ("n_tile", s.n_tile)))
        self.launches = [ffn]
        self.kernel_files = [COMMON_KERNELS]
        if self.ring:
            P, C = s.tp, s.channels
            self.buffers += [_buf("out", T * H * 2),
                             _buf("stage", T * H * 2 * (P - 1) // P),
                             _buf("flags", C * 2 * (P - 1) * 8, region="control", dtype="i64")]
            self.launches.append(LaunchConfig(kernel="allreduce_ring", grid=C, stream=0, params=(
                ("send", "@ys"), ("recv", "@out"), ("stage", "@stage"), ("flags", "@flags"),
                ("elems", T * H), ("slice", s.slice), ("bf16", 1))))
            self.kernel_files.append(TP_KERNELS)
        self.output = "out" if self.ring else "ys"
        self._check_fits()

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
                          kernel_files=tuple(cfg.workload.kernel_files) + tuple(files))
        return attrs.evolve(cfg, workload=wl)

    def presets(self):
        """x: one block input for every GPU (TP replicates it), bf16 in [-1, 1) from the seed."""
        if not self.shape.functional:
            return {}
        s = self.shape
        rng = np.random.default_rng([self.cfg.run.seed, 21])
        x = rng.uniform(-1.0, 1.0, s.tokens * s.hidden).astype(np.float32)
        bits = (x.view(np.uint32) + 0x7FFF + ((x.view(np.uint32) >> 16) & 1)) >> 16
        row = bits.astype(np.uint16).view(np.uint8)
        return {"x": np.tile(row, (s.tp, 1))}

    # ---- end of run --------------------------------------------------------------------------
    def finish(self, sim):
        s, stats = self.shape, sim.stats
        spans = {}
        for l in sim.launches:
            a = sim.stats.get(f"system.gpu{l.gpu}.launch{l.index}.start_tick")
            e = sim.stats.get(f"system.gpu{l.gpu}.launch{l.index}.end_tick")
            if a is None or e is None:
                continue
            lo, hi = spans.get(l.kernel, (None, None))
            spans[l.kernel] = (a if lo is None else min(lo, a), e if hi is None else max(hi, e))
        lo = min(v[0] for v in spans.values())
        hi = max(v[1] for v in spans.values())
        total = max(hi - lo, 0)
        f0, f1 = spans.get("shared_ffn", (lo, lo))
        stats.add("system.block.time_us", total * 1e-6, "us",
                  "block time: first kernel start to last kernel end over all GPUs")
        stats.add("system.block.ffn_time_us", max(f1 - f0, 0) * 1e-6, "us",
                  "the FFN GEMMs (gate/up + down), first start to last end over all GPUs")
        flops = 6.0 * s.tokens * s.hidden * s.ffn_t
        stats.add("system.block.ffn_TFLOPs", flops / max(f1 - f0, 1) if f1 > f0 else 0.0,
                  "TFLOP/s", "FFN FLOPs per GPU (3 GEMMs of 2 T H I/t) / FFN time")
        a0, a1 = spans.get("allreduce_ring", (f1, f1))
        ar = max(a1 - a0, 0)
        stats.add("system.block.allreduce_time_us", ar * 1e-6, "us",
                  "the TP all-reduce (tp_ring), first start to last end over all GPUs")
        nbytes = s.tokens * s.hidden * 2
        busbw = nbytes / (ar * 1e-12) / 1e9 * 2 * (s.tp - 1) / s.tp if ar else 0.0
        stats.add("system.block.allreduce_busbw_GBps", busbw, "GB/s",
                  "all-reduce bus bandwidth (nccl-tests): bytes / time x 2(t-1)/t")
        nv = sim.cfg.system.nvlink
        tx = sum(x.value for x in stats.match("system.gpu*.nvlink*.tx_wire_bytes"))
        cap = s.tp * nv.links_per_gpu * nv.bandwidth * 1e-12
        stats.add("system.block.link_utilisation_pct", 100.0 * tx / (cap * total) if total else 0.0,
                  "%", "NVLink GPU-side transmit bytes (headers included) / (links x link "
                       "bandwidth x block time), over every GPU's links")
        stats.add("system.block.allreduce_link_utilisation_pct",
                  100.0 * tx / (cap * ar) if ar else 0.0, "%",
                  "the same over the all-reduce time only (all NVLink traffic is the all-reduce's)")
        if s.functional:
            err = self._output_error(sim)
            stats.add("system.block.output_max_abs_error", err, "",
                      "largest |simulated - NumPy reference| over every GPU's output (0: the "
                      "orders match, see workloads/block.py)")

    def _output_error(self, sim):
        from .reference import expert_ffn, max_abs_error, ring_allreduce_reference
        s = self.shape
        T, H, I, n = s.tokens, s.hidden, s.ffn_t, s.n_tile
        x = sim.read_buffer(0, "x").reshape(T, H)
        parts = []
        for g in range(s.tp):
            wg = unslice_weights(sim.read_buffer(g, "ws_gate").reshape(1, -1), n, I)[0]
            wu = unslice_weights(sim.read_buffer(g, "ws_up").reshape(1, -1), n, I)[0]
            wd = unslice_weights(sim.read_buffer(g, "ws_down").reshape(1, -1), n, H)[0]
            parts.append(expert_ffn(x, wg, wu, wd).reshape(-1))
        ref = ring_allreduce_reference(np.stack(parts), bf16=True) if self.ring else parts[0]
        return max(max_abs_error(sim.read_buffer(g, self.output)[:T * H], ref)
                   for g in range(s.tp))

    def invariants(self, sim):
        """Functional mode: the output is the reference exactly (both reduction orders fixed)."""
        err = sim.stats.get("system.block.output_max_abs_error")
        if err is None or err == 0.0:
            return []
        return [f"transformer block {self.shape.model}: output differs from the NumPy reference "
                f"by up to {err} (expected bit-identical: workloads/block.py)"]
