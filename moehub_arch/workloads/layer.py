"""One MoE layer of a real model as a simulator workload: shapes, buffers, routing tables, the
scheme's launch plan, and the end-of-run results (layer stats, token accounting, functional check).

`expand_layer(cfg)` turns `scheme` + `workload.layer` into ordinary workload content - symmetric
buffers, kernel launches, MoE-Hub windows - so the engine runs a layer exactly like any other
workload, and `config.json` shows everything that was generated. The routing table (top-k expert
ids and router weights) is produced by a seeded generator and written into simulated memory
(control region: kernels read it with `ld`), never handed to the engine any other way.

Every scheme shares the data layout and two kernels (workloads/kernels/common/moe_common.s): the
shared experts and the final weighted combine, so the schemes differ only in how routed rows reach
their experts and how expert outputs come back home (`yhome`). Each scheme is one module in
`schemes/` with a `plan(layer) -> SchemePlan` function.

Token accounting: kernels count rows in `acct` (words below) with atomics; `finish` turns them into
stats and `invariants` (one of the end-of-run checks, moehub_arch/checks.py) requires every
token-expert pair to be sent, received, computed and combined exactly once.
"""
from pathlib import Path

import attrs
import numpy as np

from ..errors import UserError
from ..config.loader import ConfigError
from ..config.schema import BufferConfig, LaunchConfig, MoeWorkloadConfig
from ..paths import data_root
from ..config.models import load_model, with_top_k
from .layer_backward import add_backward_stats, backward_invariants, check_backward
from .routing import generate_routing

# acct words (i64, per GPU)
ACCT_SENT, ACCT_RECEIVED, ACCT_COMPUTED, ACCT_COMBINED = 0, 1, 2, 3
ACCT_WORDS = 8
ACCT_NAMES = ("sent", "received", "computed", "combined")

COMMON_KERNELS = "workloads/kernels/common/moe_common.s"
# the schemes whose plan builds the layer's backward (workload.layer.passes: training) in their
# default configuration on one node (`e2e --training` simulates their backward); a configuration
# of theirs without one names its key (plan.backward_why)
BACKWARD_SCHEMES = ("megatron", "deepep", "hiermoe", "overlap", "nvls", "moehub", "counted",
                    "tutel", "dysharp", "ccfuser", "fastermoe")
# every expert-GEMM job keeps G, U [tile][n] f32 and Hq [tile][n] bf16 in the `.smem 160KB` its
# kernels declare (moe_common.s, deepep.s, moe_layer.s): at most 16384 elements of a tile x n job
GEMM_JOB_ELEMENTS = 16384


class LayerError(UserError):
    """A layer that cannot be built as configured (exit status 2)."""

    exit_code = 2


@attrs.frozen
class LayerShape:
    """Sizes of one MoE layer on the system (all per GPU unless said otherwise)."""
    model: str
    num_gpus: int
    tokens: int           # tokens routed on each GPU
    experts: int          # routed experts in the system
    top_k: int
    hidden: int
    ffn: int              # routed expert FFN width I
    shared: int           # shared experts (run locally on every GPU)
    shared_ffn: int
    local_experts: int    # routed experts per GPU (block placement: GPU g holds g*El .. g*El+El-1)
    tile_rows: int        # M tile of every grouped GEMM (system.gpu.hub.moe.dam.tile_rows)
    n_tile: int           # output columns of one expert-GEMM job (workload.layer.gemm_n_tile)
    swizzle: int          # row tiles per group of the bulk GEMMs' job order (workload.layer.gemm_swizzle)
    stream_swizzle: int   # tiles per group of the streaming kernels' order (workload.layer.stream_swizzle)
    functional: bool

    @property
    def row_bytes(self):
        return self.hidden * 2        # bf16 token rows

    @property
    def pairs(self):
        """Token-expert pairs routed per GPU."""
        return self.tokens * self.top_k

    def scratch_bytes(self, ffn):
        """Per-TB scratch of one SwiGLU tile: G, U [tile][ffn] f32, Hh [tile][ffn] bf16,
        Y [tile][H] f32, Yb [tile][H] bf16; rounded to 256 B."""
        n = self.tile_rows * (10 * ffn + 6 * self.hidden)
        return (n + 255) // 256 * 256


@attrs.frozen
class SchemePlan:
    """What a scheme adds to the common layer workload."""
    buffers: tuple            # BufferConfig
    launches: tuple           # LaunchConfig (the common shared-expert / combine launches included)
    kernel_files: tuple       # paths relative to the data root
    moe: MoeWorkloadConfig | None = None   # MoE-Hub windows (scheme moehub)
    presets: dict = attrs.field(factory=dict)  # buffer name -> [num_gpus, bytes] uint8 contents
    received_stat: str | None = None  # stat pattern counting rows received at the experts, if the
                                      # scheme's kernels do not count them in acct
    received_rows: object = None      # callable(sim) -> rows received at the experts, where
                                      # neither acct nor one stat pattern counts them alone
    phases: dict = attrs.field(factory=dict)  # phase -> kernel names (mediation, dispatch, ...)
    launch_phases: tuple = ()         # phase of each launch (same order), where one kernel serves
                                      # two phases (the all-to-all of dispatch and of combine)
    mediation_extra_ps: int = 0       # mediation time outside kernels (host round trip, launches)
    n_tile: int = 0                   # column tile of the routed experts' weight layout
                                      # [El][cols / n_tile][rows][n_tile]; 0: plain [El][rows][cols]
    reference_kwargs: dict = attrs.field(factory=dict)  # extra moe_layer_reference arguments: the
                                      # scheme's arithmetic order (e.g. DeepEP's per-rank partial sums)
    checked_accounting: tuple = ACCT_NAMES  # acct counts that must equal the pairs (a scheme
                                      # without expert compute does not count "computed")
    expected_rows: dict = attrs.field(factory=dict)  # acct name -> expected total over GPUs where
                                      # it is not the pairs (tutel: kept pairs, padded GEMM rows)
    unchecked_why: str = "the scheme's configuration does not run this step"
    extra_acct: tuple = ()            # (name, acct word, description): more counts, checked
                                      # against expected_rows[name]
    kept_pairs: object = None         # callable(sim) -> bool [P, T, k]: the pairs the scheme kept
                                      # (capacity drops); the output is also checked without the
                                      # dropped ones
    extra_stats: object = None        # callable(sim, layer): the scheme's own end-of-run stats
    multicast: tuple = ()             # MulticastConfig: NVLink SHARP multicast objects (scheme nvls)
    backward: bool = False            # the plan runs the layer's backward (passes: training;
                                      # layer_backward.py); a scheme without one rejects training
    backward_row_order: object = None  # callable(sim) -> {expert: (flat tokens, slots)}: the order
                                      # of each expert's rows in the backward's buffers
    backward_why: str = ""            # why this configuration of the scheme has no backward
    backward_reference: dict = attrs.field(factory=dict)  # moe_layer_backward_reference
                                      # arguments: the backward's sum order (DeepEP: per_rank)
    backward_dx_f32: str = ""         # an fp32 buffer holding dx before its bf16 rounding (a
                                      # scheme whose gradient combine writes fp32, as its forward)
    backward_expected_rows: dict = attrs.field(factory=dict)  # rows_{dispatched,computed,
                                      # combined} where not every pair once (tutel: kept pairs,
                                      # padding computed)
    backward_acct: tuple = ()         # (buffer, i64 word, bacct word): backward rows a scheme's
                                      # reused forward kernels count in a buffer of their own


def layer_shape(cfg):
    layer, sysc = cfg.workload.layer, cfg.system
    try:
        m = load_model(layer.model)
    except ConfigError as e:
        raise LayerError(f"workload.layer.model: {e}") from None
    try:
        m = with_top_k(m, layer.top_k)
    except ConfigError as e:
        raise LayerError(str(e)) from None
    P = sysc.num_gpus
    if m.top_k > 8 and cfg.scheme != "dysharp":
        # (scheme dysharp's kernels hand the ids to the hub as a list: no ld.v8 limit)
        raise LayerError(f"workload.layer.model: {m.name} routes each token to {m.top_k} experts; "
                         f"the layer kernels read a token's expert ids with one ld.v8 (top-k <= 8; "
                         f"scheme dysharp has no such limit)")
    if m.experts % P:
        raise LayerError(f"workload.layer.model: {m.name} has {m.experts} routed experts, not a "
                         f"multiple of system.num_gpus ({P}); expert parallelism places the same "
                         f"number of experts on every GPU")
    n = layer.gemm_n_tile
    widths = [("hidden", m.hidden), ("expert_ffn", m.expert_ffn)]
    if m.shared_experts:
        widths.append(("shared_expert_ffn", m.shared_expert_ffn))
    for name, v in widths:
        if v % n:
            raise LayerError(f"workload.layer.gemm_n_tile: {n} does not divide {m.name}'s {name} "
                             f"({v}); every GEMM job must cover whole columns")
    tile = sysc.gpu.hub.moe.dam.tile_rows
    if tile * n > GEMM_JOB_ELEMENTS:
        raise LayerError(f"workload.layer.gemm_n_tile: a GEMM job of {tile} rows "
                         f"(system.gpu.hub.moe.dam.tile_rows) x {n} columns needs {tile * n * 10} "
                         f"bytes of shared memory for its gate, up and activation tiles; the "
                         f"expert kernels reserve 160 KB (tile_rows x gemm_n_tile <= "
                         f"{GEMM_JOB_ELEMENTS}); use a smaller gemm_n_tile or tile_rows")
    return LayerShape(
        model=m.name, n_tile=n, swizzle=layer.gemm_swizzle,
        stream_swizzle=layer.stream_swizzle, num_gpus=P, tokens=layer.tokens_per_gpu, experts=m.experts, top_k=m.top_k,
        hidden=m.hidden, ffn=m.expert_ffn, shared=m.shared_experts,
        shared_ffn=m.shared_expert_ffn if m.shared_experts else 0, local_experts=m.experts // P,
        tile_rows=sysc.gpu.hub.moe.dam.tile_rows, functional=cfg.workload.mode == "functional"), m


def _buf(name, nbytes, region="data", init="zeros", dtype="f32", value=0.0):
    return BufferConfig(name=name, bytes=max(int(nbytes), 8), region=region, init=init,
                        dtype=dtype, value=value)


def common_buffers(s):
    """Buffers every scheme uses (layouts in workloads/kernels/common/moe_common.s)."""
    mat = s.hidden * s.ffn * 2
    out = [
        _buf("x", s.tokens * s.row_bytes, init="random", dtype="bf16"),
        # + 64 B: a kernel may read a token's ids with one ld.v8 whatever k is
        _buf("topk_idx", s.pairs * 8 + 64, region="control", dtype="i64"),
        _buf("topk_w", s.pairs * 4, region="control", dtype="f32"),
        _buf("one", 8, region="control", init="fill", dtype="f32", value=1.0),
        _buf("acct", ACCT_WORDS * 8, region="control", dtype="i64"),
        _buf("done", s.num_gpus * 8, region="control", dtype="i64"),
        _buf("w_gate", s.local_experts * mat, init="random", dtype="bf16"),
        _buf("w_up", s.local_experts * mat, init="random", dtype="bf16"),
        _buf("w_down", s.local_experts * mat, init="random", dtype="bf16"),
        _buf("yhome", s.pairs * s.row_bytes, dtype="bf16"),
        _buf("out", s.tokens * s.hidden * 4, dtype="f32"),
        _buf("ys", max(s.shared, 1) * s.tokens * s.row_bytes, dtype="bf16"),
    ]
    if s.shared:
        smat = s.hidden * s.shared_ffn * 2
        out += [_buf("ws_gate", s.shared * smat, init="random", dtype="bf16"),
                _buf("ws_up", s.shared * smat, init="random", dtype="bf16"),
                _buf("ws_down", s.shared * smat, init="random", dtype="bf16")]
    return out


def check_fits(cfg, s, buffers):
    """The layer's buffers must fit one GPU's HBM; the error names the token count and the
    largest buffers (the builder's own check would only name the generated buffer list)."""
    from ..builder import BUFFER_ALIGN
    sizes = sorted(((-(-b.bytes // BUFFER_ALIGN) * BUFFER_ALIGN, b.name) for b in buffers),
                   reverse=True)
    need, cap = sum(n for n, _ in sizes), cfg.system.gpu.hbm.capacity
    if need > cap:
        top = ", ".join(f"{name} {n / 2**30:.3g} GiB" for n, name in sizes[:3])
        raise LayerError(f"workload.layer.tokens_per_gpu: {s.tokens} tokens of {s.model} need "
                         f"{need / 2**30:.3g} GiB of buffers per GPU ({top}, ...), more than "
                         f"system.gpu.hbm.capacity ({cap / 2**30:.3g} GiB); use fewer tokens")


def shared_expert_launches(s, cfg, stream):
    """The shared experts on their own stream (they need no communication): one kernel of gate/up
    and down jobs (moe_common.s shared_ffn)."""
    if not s.shared:
        return [], []
    T, Is = s.tokens, s.shared_ffn
    tiles = s.shared * -(-T // s.tile_rows)
    bufs = [_buf("hs", s.shared * T * Is * 2, dtype="bf16"),
            _buf("shared_jobs", (2 + tiles) * 8, region="control", dtype="i64")]
    ffn = LaunchConfig(kernel="shared_ffn", grid=cfg.workload.layer.shared_tbs, stream=stream,
                       params=(("x", "@x"), ("wg", "@ws_gate"), ("wu", "@ws_up"),
                               ("wd", "@ws_down"), ("hs", "@hs"), ("ys", "@ys"),
                               ("jobs", "@shared_jobs"), ("acct", "@acct"), ("tokens", T),
                               ("hidden", s.hidden), ("ffn", Is), ("experts", s.shared),
                               ("tile_rows", s.tile_rows), ("n_tile", s.n_tile),
                               # every row tile is there from the start: the bulk GEMMs' groups
                               ("swizzle", s.swizzle)))
    return bufs, [ffn]


SHARED_KERNELS = ("shared_ffn",)
GROUPED_KERNELS = ("grouped_tiles", "grouped_gate_up", "grouped_down")


def grouped_gemm_launches(s, stream, tbs, counts, xe, ye, cap, *, experts=None,
                          weights=("w_gate", "w_up", "w_down"), table="grouped_table", he="he",
                          he_rows=0):
    """A grouped SwiGLU GEMM over expert-major rows already in place (moe_common.s): the tile
    table from `counts` (control buffer [El] i64 of rows per local expert), then the gate/up and
    the down column jobs on `tbs` thread blocks. `xe`/`ye` name [El][cap][H] bf16 buffers (a
    buffer name, optionally '+ offset'); the routed weights must use the column-tile layout
    (SchemePlan.n_tile = s.n_tile). Several calls on one stream may share the returned buffers
    (each GEMM's tile table and activations are used only until its down jobs end).
    `experts` (default: the local experts), `weights` (gate, up, down buffer names), `table` and
    `he` serve a GEMM over other experts' copies (scheme fastermoe's shadowed experts);
    `he_rows`: the activations of this GEMM's rows start that many rows into `he` (a slice of
    the rows when several GEMMs keep theirs side by side, `cap` rows apart)."""
    El, tile = s.local_experts if experts is None else experts, s.tile_rows
    wg, wu, wd = weights
    tiles = El * (-(-cap // tile))
    bufs = [_buf(table, 64 * (tiles + 1), region="control", dtype="i64"),
            _buf(he, El * cap * s.ffn * 2, dtype="bf16")]
    common = (("hidden", s.hidden), ("ffn", s.ffn), ("tile_rows", tile))
    return bufs, [
        LaunchConfig(kernel="grouped_tiles", grid=1, stream=stream, params=(
            ("counts", f"@{counts}"), ("table", f"@{table}"), ("xe", f"@{xe}"),
            ("he", f"@{he} + {he_rows * s.ffn * 2}" if he_rows else f"@{he}"),
            ("ye", f"@{ye}"), ("cap", cap), ("local_experts", El)) + common),
        LaunchConfig(kernel="grouped_gate_up", grid=tbs, stream=stream, params=(
            ("table", f"@{table}"), ("wg", f"@{wg}"), ("wu", f"@{wu}")) + common
            + (("n_tile", s.n_tile), ("swizzle", s.swizzle))),
        LaunchConfig(kernel="grouped_down", grid=tbs, stream=stream, params=(
            ("table", f"@{table}"), ("wd", f"@{wd}")) + common
            + (("n_tile", s.n_tile), ("swizzle", s.swizzle), ("acct", "@acct"))),
    ]


def unslice_weights(w, n_tile, cols):
    """Weights stored as column tiles [experts][cols / n_tile][rows][n_tile] (moe_common.s) ->
    [experts][rows][cols]."""
    w = w.reshape(w.shape[0], cols // n_tile, -1, n_tile)
    return w.transpose(0, 2, 1, 3).reshape(w.shape[0], w.shape[2], cols)


def combine_launch(s, cfg, stream):
    """The final weighted combine; it waits for the local shared experts (acct word 5) and for
    done[g] = 1 from every GPU."""
    return LaunchConfig(kernel="moe_combine", grid=cfg.workload.layer.combine_tbs, stream=stream,
                        params=(("out", "@out"), ("yhome", "@yhome"), ("ys", "@ys"),
                                ("topk_w", "@topk_w"), ("one", "@one"), ("done", "@done"),
                                ("acct", "@acct"), ("tokens", s.tokens), ("topk", s.top_k),
                                ("hidden", s.hidden), ("shared", s.shared),
                                ("shared_tbs", cfg.workload.layer.shared_tbs)))


def expert_load_max(layer):
    """Most token-expert rows any one expert receives in this layer's routing."""
    counts = np.bincount(layer.routing.topk_idx.reshape(-1), minlength=layer.shape.experts)
    return int(counts.max())


def max_tiles_per_gpu(layer):
    """Most GEMM row tiles (tile_rows rows, the last one of an expert partial) on any GPU."""
    s = layer.shape
    counts = np.bincount(layer.routing.topk_idx.reshape(-1), minlength=s.experts)
    tiles = -(-counts // s.tile_rows)
    return int(tiles.reshape(s.num_gpus, s.local_experts).sum(axis=1).max())


def _scheme_module(name):
    import importlib
    import pkgutil
    from . import schemes
    available = sorted(m.name for m in pkgutil.iter_modules(schemes.__path__))
    if name not in available:
        # the schema names every planned scheme; one not implemented yet is an input error
        raise LayerError(f"scheme: '{name}' is not implemented in this version (available: "
                         f"{', '.join(available)})")
    return importlib.import_module(f"{__package__}.schemes.{name}")


def replace_kernel_files(files, copies, scheme):
    """The scheme's kernel files with the user's copies (workload.layer.kernel_files) each in place
    of the shipped file of the same name; a copy that replaces none is an error naming them."""
    files = list(files)
    names = [Path(f).name for f in files]
    for i, copy in enumerate(copies):
        name = Path(copy).name
        if name not in names:
            raise LayerError(f"workload.layer.kernel_files[{i}]: '{copy}' replaces no kernel file "
                             f"of scheme {scheme} (its files: {', '.join(names)}); a copy keeps "
                             f"the name of the file it replaces")
        files[names.index(name)] = str(copy)
    return files


class MoeLayer:
    """The generated layer of one run: shape, routing, plan; `finish` adds the layer's results."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.shape, self.model = layer_shape(cfg)
        r = cfg.workload.layer.routing
        s = self.shape
        # before the routing is generated: an absurd token count must be a message, not an
        # out-of-memory crash of the generator
        check_fits(cfg, s, common_buffers(s))
        self.routing = generate_routing(
            r.kind, num_gpus=s.num_gpus, tokens_per_gpu=s.tokens, num_experts=s.experts,
            top_k=s.top_k, seed=cfg.run.seed if r.seed is None else r.seed, router=self.model.router,
            gini=r.gini, trace=r.trace or None, std=r.std)
        self.plan = _scheme_module(cfg.scheme).plan(self)
        self.training = cfg.workload.layer.passes == "training"
        if self.training and not self.plan.backward:
            why = self.plan.backward_why or "it has no backward pass yet"
            raise LayerError(f"workload.layer.passes: training runs the MoE layer's backward, "
                             f"built for schemes {', '.join(BACKWARD_SCHEMES)} "
                             f"(docs/training.md); scheme '{cfg.scheme}' cannot: {why}; use "
                             f"passes: forward")

    def expanded_config(self):
        """cfg with the layer's buffers, launches, kernels and MoE-Hub windows filled in."""
        cfg, plan = self.cfg, self.plan
        files = replace_kernel_files([str(data_root() / f) for f in
                                      (COMMON_KERNELS,) + tuple(plan.kernel_files)],
                                     cfg.workload.layer.kernel_files, cfg.scheme)
        buffers = tuple(cfg.workload.buffers) + tuple(common_buffers(self.shape)) + tuple(plan.buffers)
        check_fits(cfg, self.shape, buffers)
        wl = attrs.evolve(cfg.workload, buffers=buffers,
                          launches=tuple(plan.launches),
                          kernel_files=tuple(cfg.workload.kernel_files) + tuple(files))
        if plan.moe is not None:
            wl = attrs.evolve(wl, moe=plan.moe)
        if plan.multicast:
            wl = attrs.evolve(wl, multicast=tuple(cfg.workload.multicast) + tuple(plan.multicast))
        return attrs.evolve(cfg, workload=wl)

    def presets(self):
        """Initial contents of the routing tables (and any scheme buffers) per GPU."""
        s = self.shape
        out = {"topk_idx": self.routing.topk_idx.reshape(s.num_gpus, -1).astype(np.int64).view(np.uint8),
               "topk_w": self.routing.topk_weight.reshape(s.num_gpus, -1).astype(np.float32).view(np.uint8)}
        out.update(self.plan.presets)
        return out

    # ---- end of run --------------------------------------------------------------------------
    def finish(self, sim):
        """Layer stats, token-accounting counts and (functional mode) the output check; the
        accounting is checked with the other end-of-run invariants (`invariants`)."""
        from .layer_stats import add_layer_stats
        add_layer_stats(sim, self)
        # a scheme's own figures (DeepEP's bandwidths, ...) divide by kernel times: in a run
        # stopped early (--max-wall, --max-ticks, a signal) each scheme reports those whose
        # kernels finished on every GPU (layer_stats.kernels_finished)
        if self.plan.extra_stats is not None:
            self.plan.extra_stats(sim, self)
        self._accounting_stats(sim)
        if self.training and sim.stopped is None:
            from .layer_stats import tensor_peak
            starts = np.array([int(sim.state.ln[l.index].start) for l in sim.launches])
            ends = np.array([int(sim.state.ln[l.index].end) for l in sim.launches])
            add_backward_stats(sim, self, starts, ends, tensor_peak(self.cfg))
        # a stopped run's output is not computed yet: nothing to compare with the reference
        if self.shape.functional and sim.stopped is None:
            self._check_output(sim)

    def _accounting_stats(self, sim):
        s, stats = self.shape, sim.stats
        counts = np.zeros(ACCT_WORDS, np.int64)
        for g in range(s.num_gpus):
            counts += sim.read_buffer(g, "acct", "i64")
        got = {n: int(counts[i]) for i, n in enumerate(ACCT_NAMES)}
        if self.plan.received_stat:
            got["received"] = int(sum(x.value for x in stats.match(self.plan.received_stat)))
        if self.plan.received_rows is not None:
            got["received"] = self.plan.received_rows(sim)
        checked, expected = self.plan.checked_accounting, self.plan.expected_rows
        for name in ACCT_NAMES:
            must = (f"must equal {expected[name]}, see the scheme" if name in expected
                    else "must equal tokens x top-k x GPUs")
            stats.add(f"system.moe.rows_{name}", got[name], "count",
                      f"token-expert rows {name} over all GPUs ({must})"
                      if name in checked else
                      f"token-expert rows {name} over all GPUs (not checked: "
                      f"{self.plan.unchecked_why})")
        for name, word, desc in self.plan.extra_acct:
            stats.add(f"system.moe.rows_{name}", int(counts[word]), "count",
                      f"{desc} (must equal {expected[name]})")

    def invariants(self, sim):
        """Token accounting (checks.py): every token-expert pair sent, received, computed and
        combined exactly once (the steps the scheme's configuration runs); violations as lines
        with the numbers."""
        s = self.shape
        want = s.num_gpus * s.pairs
        expected = self.plan.expected_rows
        names = tuple(self.plan.checked_accounting) + tuple(n for n, _, _ in self.plan.extra_acct)
        bad = [f"{n} {int(sim.stats[f'system.moe.rows_{n}'])}"
               + (f" (expected {expected[n]})" if n in expected else "")
               for n in names if int(sim.stats[f"system.moe.rows_{n}"]) != expected.get(n, want)]
        if self.training:
            back = backward_invariants(sim, self)
        else:
            back = []
        if not bad:
            return back
        return back + [f"token accounting in scheme '{sim.cfg.scheme}': each of the {want} token-expert "
                f"pairs ({s.num_gpus} GPUs x {s.tokens} tokens x top-{s.top_k}) must be sent, "
                f"received, computed and combined exactly once; found {', '.join(bad)}"]

    def _check_output(self, sim):
        from .reference import max_abs_error, moe_layer_reference
        s = self.shape
        P, T, H, I, El = s.num_gpus, s.tokens, s.hidden, s.ffn, s.local_experts

        def read(name, shape):
            return np.stack([sim.read_buffer(g, name).reshape(shape) for g in range(P)])

        x = read("x", (T, H))
        n = self.plan.n_tile or None
        wg = read("w_gate", (El, H * I)).reshape(P * El, -1)
        wu = read("w_up", (El, H * I)).reshape(P * El, -1)
        wd = read("w_down", (El, I * H)).reshape(P * El, -1)
        wg = unslice_weights(wg, n or I, I)
        wu = unslice_weights(wu, n or I, I)
        wd = unslice_weights(wd, n or H, H)
        shared = {}
        if s.shared:
            Is, S, ns = s.shared_ffn, s.shared, s.n_tile
            # every GPU holds its own copy of the shared experts (initialised per GPU); the
            # reference uses each GPU's own copy
            shared = [dict(
                shared_gate=unslice_weights(sim.read_buffer(g, "ws_gate").reshape(S, -1), ns, Is),
                shared_up=unslice_weights(sim.read_buffer(g, "ws_up").reshape(S, -1), ns, Is),
                shared_down=unslice_weights(sim.read_buffer(g, "ws_down").reshape(S, -1), ns, H))
                for g in range(P)]
        out = read("out", (T, H))

        def error(weights):
            err = scale = 0.0
            for g in range(P):
                kw = dict(shared[g]) if s.shared else {}
                kw.update(self.plan.reference_kwargs)
                ref = moe_layer_reference(x[g:g + 1], self.routing.topk_idx[g:g + 1],
                                          weights[g:g + 1], wg, wu, wd, **kw)
                err = max(err, float(max_abs_error(out[g:g + 1], ref)))
                scale = max(scale, float(np.abs(ref).max()))
            return err, scale

        err, scale = error(self.routing.topk_weight)
        sim.stats.add("system.moe.output_max_abs_error", err, "",
                      "largest |simulated - NumPy reference| over every output element")
        if self.plan.kept_pairs is not None:
            # the reference without the dropped pairs: their weight 0 adds an exact zero
            kept = self.plan.kept_pairs(sim)
            kept_err, _ = error(np.where(kept, self.routing.topk_weight, np.float32(0.0)))
            sim.stats.add("system.moe.output_max_abs_error_kept", kept_err, "",
                          "largest |simulated - NumPy reference of the kept pairs only| (the "
                          "dropped token-expert pairs excluded)")
        sim.stats.add("system.moe.output_max_abs_reference", scale, "",
                      "largest |reference output| (scale for the error above)")
        if self.training:
            check_backward(sim, self, x, wg, wu, wd, unslice_weights)
