"""Scheme cais: CAIS's memory-semantic switch operations (arXiv 2605.05628): the collective
kernels (workloads/kernels/tp/cais.s, lib/cais_collectives.s), the GEMMs fused with them
(cais_fusion), the group sync of matching thread blocks (cais_sync) and the graph-level
dataflow kernel (tp/cais_dataflow.s, cais_dataflow)."""
from ...config.schema import CaisGroupConfig
from .shape import _buf


class CaisCollectives:
    """The CAIS launches and groups, for TransformerBlock (workloads/block.py)."""

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
