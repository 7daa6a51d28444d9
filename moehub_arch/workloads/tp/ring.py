"""Scheme tp_ring (and sp_ring's halves, t3's ring all-gather): NCCL's ring all-reduce over the
links (workloads/kernels/tp/allreduce_ring.s, lib/ring_allreduce.s)."""


class RingCollectives:
    """The ring's launches, for TransformerBlock (workloads/block.py picks the scheme)."""

    def _ring_allreduce(self, src, suffix):
        """NCCL's ring all-reduce of `src` (tp/allreduce_ring.s allreduce_ring); returns the
        result's buffer."""
        s = self.shape
        T, H, P, C = s.tokens, s.hidden, s.tp, s.channels
        out = self._buffer(f"ar{suffix}" if suffix else "out", T * H * 2)
        self._buffer(f"stage{suffix}", T * H * 2 * (P - 1) // P)
        self._buffer(f"flags{suffix}", C * 2 * (P - 1) * 8, region="control", dtype="i64")
        self._launch("allreduce", "allreduce_ring", C, (
            ("send", f"@{src}"), ("recv", f"@{out}"), ("stage", f"@stage{suffix}"),
            ("flags", f"@flags{suffix}"), ("elems", T * H), ("slice", s.slice), ("bf16", 1)))
        return out

    def _ring_phase(self, phase, src, out, suffix):
        """The ring's halves (tp/allreduce_ring.s ring_half): phase 1 reduce-scatter (src -> out,
        staged), 2 all-gather (in place in out)."""
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
