"""The training backward of the block (workload.block.passes: training): the FFN's
(workloads/kernels/tp/ffn_backward.s) and the attention's and norms' (tp/block_backward.s),
the backward's stats, and the functional check of the gradients against the NumPy reference."""
import numpy as np

from .shape import (ATTENTION_BACKWARD_PHASES, ATTENTION_BWD_SMEM, BACKWARD_PHASES,
                    FFN_BACKWARD_PHASES)


class BlockBackward:


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

    def _block_gradient_error(self, sim):
        """Training, kinds attention and transformer: the largest |simulated - reference| of dx
        (every GPU), each GPU's weight gradients (QKV, output projection, the FFN's), the norms'
        parameter gradients and the attention's dQ, dK, dV, against the NumPy reference in the
        kernels' orders (block_reference.attention_backward, norm_backward; reference.
        ffn_backward; the collectives' orders): bit-identical. Needs reference() first (the
        forward's activations)."""
        from ..block_reference import attention_backward, norm_backward
        from ..reference import ffn_backward, gemm_seq, max_abs_error, to_bf16
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
        from ..reference import ffn_backward, max_abs_error
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
