"""Schemes tp_nvls and sp_nvls (and t3's NVLS all-gather): NCCL's NVLink SHARP collectives, the
switch reducing (multimem.ld_reduce) and multicasting (multimem.st) on multicast objects
(workloads/kernels/tp/allreduce_nvls.s, lib/nvls_allreduce.s)."""
from ...config.schema import MulticastConfig


class NvlsCollectives:
    """The NVLS launches and multicast objects, for TransformerBlock (workloads/block.py)."""

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
