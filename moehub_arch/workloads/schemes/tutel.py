"""Scheme `tutel`: Tutel's fixed-capacity expert parallelism (Tutel, arXiv 2206.03382; its
fast_encode / fast_decode and the all-to-all with overlap) - a baseline of the MoE-Hub paper
(arXiv 2605.05888) and DySHARP (arXiv 2605.05607).

Every expert takes at most C = ceil(capacity_factor x T x k / E) rows from each source GPU
(rounded up to a multiple of `chunks`). The send buffer is [E][C][H]: rows beyond C are dropped
(counted in acct word 6, `system.moe.rows_dropped`; their weight in the combine is zero) and free
slots stay zero padding that is sent and computed like real rows. Because every split is known in
advance (E x C rows for every GPU pair) there is no count exchange, no barrier and no host round
trip: the all-to-all starts as soon as the rows are encoded.

Streams (Tutel's overlap: the capacity is split into `chunks` slices along C; slice c of every
expert moves with its own all-to-all and is computed as soon as it is in, while slice c + 1 moves):
  0  permute_rows (the encode, capacity cap C), then per slice c an a2a_put that lands expert le's
     slice from source s at row s*Cc of [c][le] in tu_recv [chunks][El][P*Cc][H] (the layout
     change of Tutel's all-to-all folded into the puts: El ranges per peer) and counts its
     arrival on the peer (tu_arrive[c])
  2  per slice: flag_wait (tu_arrive[c] = P), the grouped GEMM over the padded [El][P*Cc] rows,
     flag_set tu_done[c]
  3  per slice: flag_wait (tu_done[c]), a2a_put back into the home GPU's tu_ret [E][C][H]; the last
     raises done[gpu] on every peer; then gather_rows (the decode: each kept pair's row, a zero
     row for a dropped one) and moe_combine
  1  the shared experts
The flag_wait launches belong to no phase (a phase spans its kernels' first start to last end).
Thread blocks: the GEMMs take every SM (one job TB each); the all-to-all and the encode/decode
kernels need no shared memory and share the SMs.

Across nodes (`workload.layer.tutel.all_to_all`, auto: on a multi-node system) both all-to-alls
are Tutel's 2-D hierarchical all-to-all (class TwoDH below): an all-to-all inside the node, then
one among the GPUs of one local rank across nodes, with a stride copy before each; in training
the backward's gradient dispatch and combine run the same steps (TwoDH).

What it leaves out: zeroing the padding of the send buffer each call (E x C x H x 2 bytes of HBM
writes; here it starts zero), its dynamic capacity (capacity_factor <= 0) and adaptive
parallelism switching; which pairs overflow an expert follows the order its atomic cursor
serves them, not Tutel's slot-priority order (the number dropped per expert and source is the
same).
"""
import math

import numpy as np

from ..alltoall import (ENTRY_BYTES, KERNELS as A2A_KERNELS, PhasedLaunches, a2a_group_launch,
                        a2a_launch, copy_launch, entries_preset, flag_set_launch,
                        flag_wait_launch, gather_launch, i64_preset, merge_adjacent, permute_launch,
                        split_pieces)
from ..layer import (GROUPED_KERNELS, SHARED_KERNELS, LayerError, SchemePlan, _buf,
                     combine_launch, grouped_gemm_launches, shared_expert_launches)
from ..layer_backward import (KERNELS as BACKWARD_KERNELS, combine_bwd_launch,
                              dispatch_bwd_launch, shared_bwd, sliced_bwd_buffers,
                              sliced_expert_bwd, sorted_row_order)
from .deepep import node_gpus


def capacity(T, k, E, factor, chunks):
    """Rows each expert takes from one source GPU (a multiple of `chunks`)."""
    c = max(1, math.ceil(factor * T * k / E))
    return -(-c // chunks) * chunks


def expected_drops(topk_idx, E, C):
    """Pairs beyond an expert's capacity, per source GPU: sum over (g, e) of max(0, n - C)."""
    P = topk_idx.shape[0]
    n = np.stack([np.bincount(topk_idx[g].reshape(-1), minlength=E) for g in range(P)])
    return int(np.maximum(n - C, 0).sum())


# the all-to-all kernels of each algorithm (phases: the launches' own phase decides)
A2A_STEPS = {False: ("a2a_put",), True: ("copy_chunks", "a2a_put_group")}


def all_to_all_2dh(choice, P, G):
    """Whether workload.layer.tutel.all_to_all selects the 2-D hierarchical all-to-all on a system
    of P GPUs, G per node."""
    possible = G < P and G > 1
    if choice == "2dh" and not possible:
        raise LayerError(f"workload.layer.tutel.all_to_all: 2dh needs more than one node and more "
                         f"than one GPU per node (Tutel falls back to the flat all-to-all there; "
                         f"say flat or auto), found {P // G} node(s) of {G} GPU(s)")
    return possible and choice != "flat"


class TwoDH:
    """Tables, buffers and launches of Tutel's 2-D hierarchical all-to-all (2DH, arXiv 2206.03382
    section 4; the released implementation is tutel's nccl_all_to_all_2d_async) for one layer:
    per capacity slice c, in each direction, on GPU x = (node Nx, local rank Lx) of N nodes x G:

      A  stride copy: the slice's blocks (El x Cc rows per destination GPU) reordered from
         destination-GPU order [Nd][Ld] to local-rank order [Ld][Nd] (staging S1), so that the
         blocks bound for one local rank on every node are contiguous
      B  all-to-all inside the node (a2a_put_group, span G): S1[L] -> GPU (Nx, L) at R1[Lx]
      C  stride copy on the receiving GPU, once every local peer's block is in: R1[source local
         rank][Nd] -> S2[Nd][...] (node-major), so that everything bound for one node is contiguous
      D  all-to-all among the GPUs of local rank Lx on the N nodes (span N, stride G): one range
         per peer node (G x El x Cc rows: every GPU of the node), cut into a2a_chunk_bytes puts -
         G times fewer and G times larger InfiniBand messages than the flat all-to-all's

    Dispatch: S2's node block is laid out [le][source local rank][Cc] and D puts each local
    expert's G x Cc rows straight into tu_recv's [le][source GPU][Cc] layout (the sources of one
    node are adjacent there: El ranges per peer node). Combine: D lands node blocks in the home
    GPU's source-major staging R2 [expert GPU][le][Cc], and a last copy (E) puts each slice into
    tu_ret's [E][C] rows; with one slice R2 is tu_ret itself (no E). The stride copies are real
    HBM copies, as in Tutel (NCCL sends contiguous buffers); what Tutel does with its output's
    layout change (a reshape copy) is folded into D's puts in the dispatch, as in the flat path.
    The copies use the encode's thread blocks (copy_tbs), pieces of at most a2a_chunk_bytes.

    tu_recv / tu_ye's row of (slice c, local expert le, source GPU g) is c slice_rows + le
    expert_rows + g Cc (plan: slice-major forward only, expert-major in training). The backward
    (passes: training) runs the same tables in the same directions with other buffers: the
    gradient dispatch (home -> expert, the combine's backward) is the dispatch's A-D from
    tu_dsend to b_dye, the gradient combine (expert -> home, the dispatch's backward) the
    combine's A-E from b_dxe to tu_dret; the staging buffers serve again (the forward is done
    with them on every GPU before any backward starts: the forward's gather waits for every
    GPU's last combine step), with their own arrival counters.
    """

    def __init__(self, P, G, El, C, Cc, n, rb, piece, copy_tbs, slice_rows, expert_rows):
        self.P, self.G, self.N, self.El, self.C, self.Cc, self.n = P, G, P // G, El, C, Cc, n
        self.rb, self.piece, self.copy_tbs = rb, piece, copy_tbs
        self.u = Cc * rb                               # one (GPU pair, local expert) block
        self.slice = El * P * self.u                   # one slice of every staging buffer
        G, N, El, u, sl = self.G, self.N, self.El, self.u, self.slice

        def recv(c, le, g):
            """Byte offset in tu_recv / tu_ye (and b_dye / b_dxe) of slice c, expert le,
            source g."""
            return (c * slice_rows + le * expert_rows + g * Cc) * rb
        self.copies = {}                               # table name -> ([P][n*K][3], K)
        self.group = {}                                # table name -> ([P][n*span*e][3], e)
        A, Cd, A2, C2, E2 = ([[[] for _ in range(n)] for _ in range(P)] for _ in range(5))
        for x in range(P):
            for c in range(n):
                o = c * sl
                for d in range(P):
                    Nd, Ld = divmod(d, G)
                    for le in range(El):
                        # dispatch A: tu_send [E][C] -> S1 [Ld][Nd][le]
                        A[x][c].append((((d * El + le) * C + c * Cc) * rb,
                                        o + ((Ld * N + Nd) * El + le) * u, u))
                        # combine A: tu_ye [c][le][src] -> S1 [Ls][Ns][le] (d: the home GPU)
                        A2[x][c].append((recv(c, le, d),
                                         o + ((Ld * N + Nd) * El + le) * u, u))
                        # combine E: R2 [expert GPU d][le] -> tu_ret [E][C]
                        E2[x][c].append((o + (d * El + le) * u,
                                         ((d * El + le) * C + c * Cc) * rb, u))
                for g in range(G):
                    for m in range(N):
                        for le in range(El):
                            r1 = o + ((g * N + m) * El + le) * u
                            # dispatch C: R1 [g][Nd][le] -> S2 [Nd][le][g]
                            Cd[x][c].append((r1, o + ((m * El + le) * G + g) * u, u))
                            # combine C: R1 [g][Ns][le] -> S2 [Ns][g][le]
                            C2[x][c].append((r1, o + ((m * G + g) * El + le) * u, u))
        for name, t in (("tu_h_a", A), ("tu_h_c", Cd), ("tu_h_ca", A2), ("tu_h_cc", C2),
                        ("tu_h_ce", E2)):
            per_slice = [[split_pieces(merge_adjacent(t[x][c]), piece) for c in range(n)]
                         for x in range(P)]
            K = max(1, max(len(e) for rows in per_slice for e in rows))
            self.copies[name] = ([sum((pad_to(e, K) for e in rows), []) for rows in per_slice],
                                 K)
        B, D, D2 = ([] for _ in range(3))
        for x in range(P):
            Nx, Lx = divmod(x, G)
            B.append([(c * sl + j * N * El * u, c * sl + Lx * N * El * u, N * El * u)
                      for c in range(n) for j in range(G)])
            D.append([(c * sl + (m * El + le) * G * u, recv(c, le, Nx * G), G * u)
                      for c in range(n) for m in range(N) for le in range(El)])
            # R2 [expert GPU][le] per slice; with one slice tu_ret [E][C] itself (C = Cc)
            D2.append([(c * sl + m * G * El * u, (c * sl if n > 1 else 0) + Nx * G * El * u,
                        G * El * u) for c in range(n) for m in range(N)])
        self.group = {"tu_h_b": (B, 1), "tu_h_d": (D, El), "tu_h_cd": (D2, 1)}

    def buffers(self, training):
        n, sl = self.n, self.slice
        out = [_buf(f"tu_h_{b}", n * sl, dtype="bf16") for b in ("s1", "r1", "s2", "cs1", "cr1",
                                                                 "cs2")]
        if n > 1:
            out.append(_buf("tu_h_cr2", n * sl, dtype="bf16"))
        # arrival counters: per slice, the dispatch's B, the combine's B and D; in training the
        # same for the backward's gradient dispatch and combine
        out.append(_buf("tu_h_arr", (6 if training else 3) * n * 8, region="control",
                        dtype="i64"))
        for name, (rows, _) in list(self.copies.items()) + list(self.group.items()):
            out.append(_buf(name, len(rows[0]) * ENTRY_BYTES + 64, region="control",
                            dtype="i64"))                 # + 64: ld.v8
        return out

    def presets(self):
        return {name: entries_preset(rows)
                for name, (rows, _) in list(self.copies.items()) + list(self.group.items())}

    def _copy(self, stream, name, c, src, dst, wait=None):
        K = self.copies[name][1]
        return copy_launch(stream, min(self.copy_tbs, K), f"@{name} + {c * K * ENTRY_BYTES}", K,
                           src, dst, wait=wait)

    def _group(self, stream, name, c, src, dst, intra, **kw):
        span, stride = (self.G, 1) if intra else (self.N, self.G)
        e = self.group[name][1]
        return a2a_group_launch(stream, f"@{name} + {c * span * e * ENTRY_BYTES}", e, src, dst,
                                self.piece, span=span, stride=stride, **kw)

    def _arr(self, i, c):
        return f"@tu_h_arr + {8 * (i * self.n + c)}"

    def dispatch_launches(self, c, stream=0, src="@tu_send", dst="@tu_recv",
                          arrive="@tu_arrive", counters=0, wait=None):
        """Slice c: A, B, C (once the node's G blocks are in), D (its arrivals counted in
        `arrive`[c]: N per slice). The forward's dispatch on stream 0; the backward's gradient
        dispatch (counters 3: its own arrival counters) with `wait` before A."""
        return [self._copy(stream, "tu_h_a", c, src, "@tu_h_s1", wait=wait),
                self._group(stream, "tu_h_b", c, "@tu_h_s1", "@tu_h_r1", True,
                            arrive=self._arr(counters, c)),
                self._copy(stream, "tu_h_c", c, "@tu_h_r1", "@tu_h_s2",
                           wait=(self._arr(counters, c), self.G)),
                self._group(stream, "tu_h_d", c, "@tu_h_s2", dst, False,
                            arrive=f"{arrive} + {8 * c}")]

    def combine_launches(self, c, src="@tu_ye", ret="@tu_ret", done="@done", counters=1,
                         wait=None):
        """Stream 3, slice c (after its GEMM; `wait` before A): A, B, C, D; the last slice's D
        raises `done`[] for every GPU of the sender's node on each peer (their rows came with
        it). The forward's combine, or the backward's gradient combine (b_dxe -> tu_dret,
        counters 4 and 5)."""
        last = c == self.n - 1
        return [self._copy(3, "tu_h_ca", c, src, "@tu_h_cs1", wait=wait),
                self._group(3, "tu_h_b", c, "@tu_h_cs1", "@tu_h_cr1", True,
                            arrive=self._arr(counters, c)),
                self._copy(3, "tu_h_cc", c, "@tu_h_cr1", "@tu_h_cs2",
                           wait=(self._arr(counters, c), self.G)),
                self._group(3, "tu_h_cd", c, "@tu_h_cs2", "@tu_h_cr2" if self.n > 1 else ret,
                            False, arrive=self._arr(counters + 1, c), done=done if last else 0,
                            done_span=self.G)]

    def combine_unstage_launches(self, ret="@tu_ret", counters=1):
        """Stream 3, after every slice's D: E per slice, once its N node blocks are in."""
        if self.n == 1:
            return []
        return [self._copy(3, "tu_h_ce", c, "@tu_h_cr2", ret,
                           wait=(self._arr(counters + 1, c), self.N)) for c in range(self.n)]


def _backward(s, cfg, add, presets, n, C, Cc, table_bytes, piece, hd):
    """The backward after the forward, slice by slice as the forward (Tutel's overlap: its
    autograd runs each slice's all-to-all on the communication stream while another slice's
    expert backward computes), over the expert-major layout; returns its buffers.
      stream 3  the shared experts' backward; the combine's backward (dO rows into tu_dsend's
                capacity slots; a dropped pair, map -1, gets none); per slice c, tu_fwd's slice
                table carries its [E][Cc] blocks (padding included) to the experts' rows
                (tu_darrive[c] counts the sources); then per slice, once tu_bdone[c] is set,
                tu_bwd's slice table brings its dX rows home (the last raises bdone), and
                moe_dispatch_bwd sums them (dropped pairs skipped)
      stream 2  per slice: wait for its P sources, its tile table, grouped_bwd_act and
                grouped_dgrad over its rows (padding rows give zero gradients), tu_bdone[c] = 1;
                after the last slice the weight gradients over every slice's rows at once (the
                slices' sums, which autograd accumulates, in one pass)
    With one slice this is the whole capacity's all-to-alls in reverse around one expert
    backward. Across nodes (`hd`, the TwoDH of the forward) each all-to-all is the 2-D
    hierarchical one: the gradient dispatch runs the forward dispatch's steps A-D (its rows
    arrive from N peer nodes per slice), the gradient combine the forward combine's A-E."""
    P, E, El = s.num_gpus, s.experts, s.local_experts
    bufs, tt = sliced_bwd_buffers(s, _buf, presets, "tu", n, P * Cc, E * C)
    sbb, slaunches = shared_bwd(s, cfg, 3, _buf)
    for launch, phase in slaunches:
        add(launch, phase)
    add(combine_bwd_launch(s, cfg, 3, "@tu_map", "@tu_dsend"), "backward_dispatch")
    for c in range(n):
        if hd:
            for launch in hd.dispatch_launches(c, 3, "@tu_dsend", "@b_dye", "@tu_darrive", 3):
                add(launch, "backward_dispatch")
        else:
            add(a2a_launch(3, f"@tu_fwd + {c * table_bytes}", El, "@tu_dsend", "@b_dye", piece,
                           arrive=f"@tu_darrive + {8 * c}"), "backward_dispatch")
    for launch, phase in sliced_expert_bwd(s, 2, cfg.system.gpu.num_sms, "tu", n, P * Cc, tt,
                                           lambda c: "tu_rows", "tu_recv", "he",
                                           hd.N if hd else P):
        add(launch, phase)
    for c in range(n):
        wait = (f"@tu_bdone + {8 * c}", 1)
        if hd:
            for launch in hd.combine_launches(c, "@b_dxe", "@tu_dret", "@bdone", 4, wait):
                add(launch, "backward_combine")
        else:
            add(a2a_launch(3, f"@tu_bwd + {c * table_bytes}", El, "@b_dxe", "@tu_dret", piece,
                           wait=wait, done="@bdone" if c == n - 1 else 0), "backward_combine")
    if hd:
        for launch in hd.combine_unstage_launches("@tu_dret", 4):
            add(launch, "backward_combine")
    add(dispatch_bwd_launch(s, cfg, 3, "@tu_dret", "@tu_map"), "backward_combine")
    return bufs + sbb


def pad_to(entries, K):
    return list(entries) + [(0, 0, 0)] * (K - len(entries))


def plan(layer):
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.tutel
    P, T, k, E, El, H = s.num_gpus, s.tokens, s.top_k, s.experts, s.local_experts, s.hidden
    rb = s.row_bytes
    f = opts.capacity_factor
    if not (isinstance(f, (int, float)) and math.isfinite(f) and f > 0):
        raise LayerError(f"workload.layer.tutel.capacity_factor: expected a positive number "
                         f"(Tutel's default is 1.0; rows beyond capacity_factor x tokens x top-k "
                         f"/ experts per expert are dropped), found {f!r}")
    n = opts.chunks
    C = capacity(T, k, E, f, n)
    Cc = C // n
    nsm = cfg.system.gpu.num_sms
    tbs, piece = opts.permute_tbs, opts.a2a_chunk_bytes
    slice_bytes = El * P * Cc * rb                     # one slice of tu_recv / tu_ye
    G = node_gpus(cfg)
    two_d = all_to_all_2dh(opts.all_to_all, P, G)
    training = cfg.workload.layer.passes == "training"
    # where slice c of local expert le from source g lands in tu_recv / tu_ye: row
    # c * slice_rows + le * expert_rows + g * Cc. Forward only: slice-major [chunks][El][P][Cc]
    # (each slice's GEMM its own block; the slices share one activation buffer). Training:
    # expert-major [El][chunks][P][Cc] (each slice's GEMM over rows expert_rows apart, its
    # activations beside the others'), so an expert's rows of every slice lie together for the
    # weight gradients - the layouts agree with one slice
    expert_major = training
    slice_rows, expert_rows = (P * Cc, P * C) if expert_major else (El * P * Cc, P * Cc)

    fwd = np.zeros((P, n, P, El, 3), np.int64)         # [gpu][slice][peer][le]
    bwd = np.zeros((P, n, P, El, 3), np.int64)
    for g in range(P):
        for c in range(n):
            for r in range(P):
                for le in range(El):
                    fwd[g, c, r, le] = (((r * El + le) * C + c * Cc) * rb,
                                        (c * slice_rows + le * expert_rows + g * Cc) * rb,
                                        Cc * rb)
                    bwd[g, c, r, le] = ((c * slice_rows + le * expert_rows + r * Cc) * rb,
                                        ((g * El + le) * C + c * Cc) * rb, Cc * rb)
    table_bytes = P * El * ENTRY_BYTES                 # one slice's table
    buffers = [
        _buf("tu_cnt", E * 8, region="control", dtype="i64"),
        _buf("tu_base", E * 8, region="control", dtype="i64"),
        _buf("tu_map", s.pairs * 8, region="control", dtype="i64"),
        _buf("tu_fwd", n * table_bytes + 64, region="control", dtype="i64"),   # + 64: ld.v8
        _buf("tu_bwd", n * table_bytes + 64, region="control", dtype="i64"),
        _buf("tu_rows", El * 8, region="control", dtype="i64"),
        _buf("tu_arrive", n * 8, region="control", dtype="i64"),
        _buf("tu_done", n * 8, region="control", dtype="i64"),
        _buf("tu_send", E * C * rb, dtype="bf16"),
        _buf("tu_ret", E * C * rb, dtype="bf16"),
        _buf("tu_recv", n * slice_bytes, dtype="bf16"),
        _buf("tu_ye", n * slice_bytes, dtype="bf16"),
    ]
    presets = {"tu_base": i64_preset(np.tile(np.arange(E, dtype=np.int64) * C, (P, 1))),
               "tu_fwd": entries_preset(fwd.reshape(P, -1, 3)),
               "tu_bwd": entries_preset(bwd.reshape(P, -1, 3)),
               "tu_rows": i64_preset(np.full((P, El), P * Cc, np.int64))}

    plan_launches = PhasedLaunches()
    add = plan_launches.add
    sbufs, shared = shared_expert_launches(s, cfg, stream=1)
    for launch in shared:
        add(launch, "expert")
    add(permute_launch(s, 0, tbs, cnt="@tu_cnt", base="@tu_base", out="@tu_send",
                       map_="@tu_map", cap=C), "dispatch")
    if two_d:
        hd = TwoDH(P, G, El, C, Cc, n, rb, piece, min(nsm, tbs), slice_rows, expert_rows)
        buffers += hd.buffers(training)
        presets.update(hd.presets())
        for c in range(n):
            for launch in hd.dispatch_launches(c):
                add(launch, "dispatch")
    else:
        for c in range(n):
            add(a2a_launch(0, f"@tu_fwd + {c * table_bytes}", El, "@tu_send", "@tu_recv", piece,
                           arrive=f"@tu_arrive + {8 * c}"), "dispatch")
    gbufs = []
    for c in range(n):
        # waits: in no phase (2dh: the inter-node step brings every slice from N peers)
        add(flag_wait_launch(2, f"@tu_arrive + {8 * c}", P // G if two_d else P), "")
        gbufs, gemm = grouped_gemm_launches(s, 2, nsm, "tu_rows",
                                            f"tu_recv + {c * slice_rows * rb}",
                                            f"tu_ye + {c * slice_rows * rb}", expert_rows,
                                            he_rows=c * slice_rows if expert_major else 0)
        for launch in gemm:
            add(launch, "expert")
        add(flag_set_launch(2, f"@tu_done + {8 * c}", 1), "expert")
    for c in range(n):
        add(flag_wait_launch(3, f"@tu_done + {8 * c}", 1), "")
        if two_d:
            for launch in hd.combine_launches(c):
                add(launch, "combine")
        else:
            add(a2a_launch(3, f"@tu_bwd + {c * table_bytes}", El, "@tu_ye", "@tu_ret", piece,
                           done="@done" if c == n - 1 else 0), "combine")
    if two_d:
        for launch in hd.combine_unstage_launches():
            add(launch, "combine")
    add(gather_launch(s, 3, tbs, map_="@tu_map", src="@tu_ret"), "combine")
    add(combine_launch(s, cfg, stream=3), "combine")

    dropped = expected_drops(layer.routing.topk_idx, E, C)
    kept = P * s.pairs - dropped
    bbufs = []
    if training:
        bbufs = _backward(s, cfg, add, presets, n, C, Cc, table_bytes, piece,
                          hd if two_d else None)

    def row_order(sim):
        """{expert: (flat tokens, slots)} of the kept pairs in tu_recv's (expert-major) order:
        slice, then source GPU ascending, then the source's capacity slot (its map)."""
        rows = {}
        for src in range(P):
            mp = sim.read_buffer(src, "tu_map", "i64")[:s.pairs]
            idx = layer.routing.topk_idx[src].reshape(-1)
            for e in np.unique(idx):
                sel = np.nonzero((idx == e) & (mp >= 0))[0]
                slot = mp[sel] - e * C                 # the pair's capacity slot at its expert
                rows.setdefault(int(e), []).extend(zip(slot // Cc, [src] * len(sel), slot,
                                                       src * T + sel // k, sel % k))
        return sorted_row_order(rows)

    def kept_pairs(sim):
        return np.stack([sim.read_buffer(g, "tu_map", "i64")[:s.pairs].reshape(T, k) >= 0
                         for g in range(P)])

    def extra_stats(sim, layer):
        if G < P:                                  # multi-node: where the choice applies
            sim.stats.add("system.moe.tutel.all_to_all_2dh", int(two_d), "count",
                          "1 when the all-to-alls are Tutel's 2-D hierarchical ones (inside "
                          "the node, then among the GPUs of one local rank across nodes), "
                          "0 flat")
        sim.stats.add("system.moe.tutel.capacity", C, "count",
                      "rows each expert takes from one source GPU (capacity_factor x tokens x "
                      "top-k / experts, rounded up to a multiple of chunks)")
        sim.stats.add("system.moe.tutel.padding_rows", P * E * C - kept, "count",
                      "zero rows sent and computed as padding (capacity slots no token took)")

    return SchemePlan(
        buffers=tuple(buffers + gbufs + sbufs + bbufs), launches=tuple(plan_launches.launches),
        kernel_files=(A2A_KERNELS,) + (BACKWARD_KERNELS if training else ()),
        presets=presets, n_tile=s.n_tile, backward=True,
        backward_row_order=row_order,
        backward_expected_rows={"dispatched": kept, "computed": P * El * P * C,
                                "combined": kept},
        phases={"mediation": (),
                "dispatch": ("permute_rows",) + A2A_STEPS[two_d],
                "expert": GROUPED_KERNELS + ("flag_set",) + SHARED_KERNELS,
                "combine": A2A_STEPS[two_d] + ("gather_rows", "moe_combine")},
        launch_phases=tuple(plan_launches.phases),
        checked_accounting=("sent", "computed", "combined"),
        unchecked_why="the all-to-all moves fixed-capacity blocks, padding included",
        expected_rows={"sent": kept, "computed": P * El * P * C, "combined": P * s.pairs,
                       "dropped": dropped},
        extra_acct=(("dropped", 6, "token-expert pairs dropped: beyond their expert's capacity "
                     "for their source GPU"),),
        kept_pairs=kept_pairs, extra_stats=extra_stats)
