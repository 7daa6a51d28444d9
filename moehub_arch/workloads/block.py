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
           components/cais/) in sp_ring's dataflow: the reduce-scatter after each
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

from ..config.schema import LaunchConfig
from ..paths import data_root
from .tp.backward import BlockBackward
from .tp.cais import CaisCollectives
from .tp.checks import BlockChecks
from .tp.nvls import NvlsCollectives
from .tp.ring import RingCollectives
from .tp.shape import (BACKWARD_KERNELS, BACKWARD_PHASES, BLOCK_BACKWARD_KERNELS,
                       CAIS_DATAFLOW_KERNELS, CAIS_KERNELS, COMMON_KERNELS, KEY, NVLS_KERNELS,
                       NVLS_SCHEMES, SP_SCHEMES, T3_KERNELS, TP_KERNELS, TRANSFORMER_KERNELS,
                       BlockError, _buf, _runs_dataflow, block_shape)
from .tp.t3 import T3Collectives


class TransformerBlock(RingCollectives, NvlsCollectives, CaisCollectives, T3Collectives,
                       BlockBackward, BlockChecks):
    """The generated block of one run; same interface as the MoE layer (simulation.py). The
    forward's launches are built here; each TP scheme's collectives come from its own module
    (tp/ring.py, nvls.py, cais.py, t3.py), the training backward from tp/backward.py and the
    functional checks from tp/checks.py."""

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

    def _ring_half(self, phase, src, out, suffix):
        """Sequence parallelism's collectives: phase 1 reduce-scatter (src -> out), 2 all-gather
        (in place in out)."""
        if self.nvls:
            return self._nvls(phase, src, out, suffix)
        if self.cais:
            return self._cais(phase, src, out, suffix)
        return self._ring_phase(phase, src, out, suffix)

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
        return self._ring_allreduce(src, suffix)

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
