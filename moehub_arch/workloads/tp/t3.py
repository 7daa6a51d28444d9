"""Scheme t3: T3's producer-triggered GEMM fused with the reduce-scatter (Pati et al., ASPLOS
2024; workloads/kernels/tp/t3.s), its all-gather (ring or NVLS), and the functional check of
its arrival-order sums against the exact sum."""
import numpy as np


class T3Collectives:
    """The t3 launches and its sum's check, for TransformerBlock (workloads/block.py)."""

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

    def _t3_sum(self, sim, parts, buffer):
        """t3's reduce-scatters add in arrival order (tp/t3.s): check the simulated sum in
        `buffer` (after the all-gather, on every GPU) against the exact sum of the reference
        partials within reference.t3_reduction_bound, fold the result into self.t3_check, and
        return the simulated sum, from which the rest of the block is bit-exact."""
        from ..reference import t3_reduction_bound
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
