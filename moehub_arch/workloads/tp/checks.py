"""Functional mode: the block's output against the NumPy reference (workloads/block_reference.py,
reference.py), every GEMM, rounding and collective in the kernels' orders, so the check is
bit-identical; and the end-of-run invariants that hold it to that."""
import numpy as np

from ..layer import unslice_weights


class BlockChecks:
    """The reference checks, for TransformerBlock (workloads/block.py)."""

    def _combine_gradients(self, parts):
        """The scheme's all-reduce of per-GPU input gradients [T, H] (ring order, NVLS's fp32 in
        rank order, or t = 1; a sequence-parallel reduce-scatter leaves each GPU its chunk of
        this)."""
        from ..reference import nvls_allreduce_reference, ring_allreduce_reference
        parts = np.stack([p.reshape(-1) for p in parts])
        if self.nvls or self.cais:     # the merge unit's order is NVLS's (components/cais/)
            out = nvls_allreduce_reference(parts, bf16=True)
        elif self.ring or self.sp:
            out = ring_allreduce_reference(parts, bf16=True)
        else:
            out = parts[0]
        return out.reshape(self.shape.tokens, self.shape.hidden)

    def _weights(self, sim, g, name, n, cols):
        return unslice_weights(sim.read_buffer(g, name).reshape(1, -1), n, cols)[0]

    def reference(self, sim):
        """The block output per the NumPy reference (block_reference.py), from the inputs and
        weights in simulated memory: [T, H] float32 (bf16 values), the same on every GPU."""
        from ..block_reference import flash_attention, norm
        from ..reference import expert_ffn, gemm_seq, to_bf16
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

    def _output_error(self, sim):
        from ..reference import max_abs_error
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
