"""Scheme `nvls`: DySHARP's NVLink SHARP baseline (arXiv 2605.05607, its "NVLS" baseline): the MoE
dispatch as an all-gather and the combine as a reduce-scatter, both over one static multicast
object of every GPU, executed by the NVSwitch's multicast and reduction engine
(moehub_arch/components/nvls.py). Kernels and layouts: workloads/kernels/nvls/nvls.s.

Stream 0, in order:
  nvls_allgather       every GPU multicasts its token rows, expert ids and router weights
                       (multimem.st, one packet up, one copy down to every GPU) into the gathered
                       buffers: every GPU then holds all P x T tokens
  nvls_barrier         every GPU's rows are in everywhere (flags; the fence of multimem.st
                       completes when every member has the data)
  nvls_select          the rows of the local experts picked out of the gathered tokens into an
                       expert-major buffer (local copies; per-expert cursors by atomics)
  grouped GEMM         grouped_tiles, grouped_gate_up, grouped_down (moe_common.s)
  nvls_partial         per gathered token, this GPU's weighted sum of its experts' outputs as a
                       bf16 row (a zero row for tokens none of whose experts is here)
  nvls_barrier         every GPU's partials are written
  nvls_reduce_scatter  each GPU reduces its own tokens' rows over all GPUs with
                       multimem.ld_reduce (the switch reads every GPU's partial and sums them)
  nvls_output          out = shared experts + the reduced row
Stream 1: the shared experts (common shared_ffn).

No count exchange and no host round trip: the all-gather moves every token to every GPU, so
nothing needs to know the routing in advance; the price is traffic. Per GPU and layer, with T
tokens of R bytes: the all-gather puts T R on the GPU's uplink and P T R on its downlinks; the
reduce-scatter puts P T R partial rows up (this GPU's partial of every token, read by the switch
for each owner) and T R results down. Whatever the top-k, that is (P + 1) T R each way, where
DeepEP moves about m T R each way (m: distinct GPUs among a token's experts) - DySHARP's reason
for dynamic multicast (system.moe.nvlink.{up,down}_wire_bytes show it).

Arithmetic order (functional mode): a GPU's partial is the fp32 sum over its slots ascending,
rounded to bf16; the switch adds the P partials in fp32 in rank order and rounds once to bf16
(nvls.py); the output adds that row to the shared experts' fp32 sum. The reference follows the
same order (combine="switch_reduce"), so the error is 0.0.

Buffers: the expert-major rows (nv_xe / nv_ye) are sized by the most rows any expert receives in
this routing (the host does not need it at run time: the device counts the rows itself; a
deployment would reserve the worst case, which changes no timing here).
"""
import numpy as np

from ...config.schema import LaunchConfig, MulticastConfig
from ..alltoall import PhasedLaunches, i64_preset
from ..layer_backward import (KERNELS as BACKWARD_KERNELS, backward_buffers, expert_bwd_launches,
                              shared_bwd)
from ..layer import (ACCT_NAMES, GROUPED_KERNELS, SHARED_KERNELS, LayerError, SchemePlan, _buf,
                     expert_load_max, grouped_gemm_launches, shared_expert_launches)

KERNELS = "workloads/kernels/nvls/nvls.s"
PARTIAL_ACC_BYTES = 28 * 1024   # nvls_partial's .smem: one fp32 row of up to 7168 elements
MULTICAST_BUFFERS = ("nv_xall", "nv_idxall", "nv_wall", "nv_ypart")



def check_switch_scheme(scheme, layer, acc_bytes, acc_what):
    """What a scheme that multicasts and reduces in the NVSwitches (nvls, dysharp) needs: an fp32
    row of the hidden size in its kernel's shared memory, two GPUs or more, and switches."""
    s, cfg = layer.shape, layer.cfg
    if 4 * s.hidden > acc_bytes:
        raise LayerError(f"workload.layer.model: scheme {scheme} keeps {acc_what} in "
                         f"{acc_bytes // 1024} KB of shared memory (hidden <= {acc_bytes // 4}), "
                         f"found hidden {s.hidden}")
    if s.num_gpus < 2:
        raise LayerError(f"system.num_gpus: scheme {scheme} multicasts over a group of GPUs (a "
                         f"multicast object needs at least two), found {s.num_gpus}")
    if cfg.system.switch.topology == "bridge_pairs":
        raise LayerError(f"scheme: {scheme} needs NVSwitches (system.switch.topology is "
                         f"bridge_pairs: there is no switch to multicast or reduce in)")

def plan(layer):
    s, cfg = layer.shape, layer.cfg
    opts = cfg.workload.layer.nvls
    P, T, k, El, H = s.num_gpus, s.tokens, s.top_k, s.local_experts, s.hidden
    U = P * T                                        # gathered tokens
    rb = s.row_bytes
    check_switch_scheme("nvls", layer, PARTIAL_ACC_BYTES, "a token's fp32 partial sum")
    cap = max(1, expert_load_max(layer))
    buffers = [
        _buf("nv_xall", U * rb, dtype="bf16"),
        _buf("nv_idxall", U * k * 8 + 64, region="control", dtype="i64"),   # + 64: ld.v8
        _buf("nv_wall", U * k * 4, region="control", dtype="f32"),
        _buf("nv_cnt", El * 8, region="control", dtype="i64"),
        _buf("nv_map", U * k * 8 + 64, region="control", dtype="i64"),
        _buf("nv_flags", 2 * P * 8, region="control", dtype="i64"),
        _buf("nv_xe", El * cap * rb, dtype="bf16"),
        _buf("nv_ye", El * cap * rb, dtype="bf16"),
        _buf("nv_ypart", U * rb, dtype="bf16"),
        _buf("nv_comb", T * rb, dtype="bf16"),
    ]
    multicast = tuple(MulticastConfig(buffer=b) for b in MULTICAST_BUFFERS)
    gbufs, gemm = grouped_gemm_launches(s, 0, cfg.system.gpu.num_sms, "nv_cnt", "nv_xe", "nv_ye",
                                        cap)
    sbufs, shared = shared_expert_launches(s, cfg, stream=1)
    launches = PhasedLaunches()
    add = launches.add
    for launch in shared:
        add(launch, "expert")
    add(LaunchConfig(kernel="nvls_allgather", grid=opts.channels, stream=0, params=(
        ("x", "@x"), ("topk_idx", "@topk_idx"), ("topk_w", "@topk_w"), ("xall", "@nv_xall"),
        ("idxall", "@nv_idxall"), ("wall", "@nv_wall"), ("acct", "@acct"), ("tokens", T),
        ("topk", k), ("hidden", H), ("chunk", opts.chunk_bytes))), "dispatch")
    add(LaunchConfig(kernel="nvls_barrier", grid=1, stream=0, params=(
        ("flags", "@nv_flags"),)), "dispatch")
    add(LaunchConfig(kernel="nvls_select", grid=opts.select_tbs, stream=0, params=(
        ("xall", "@nv_xall"), ("idxall", "@nv_idxall"), ("cnt", "@nv_cnt"), ("xe", "@nv_xe"),
        ("map", "@nv_map"), ("acct", "@acct"), ("gathered", U), ("topk", k), ("hidden", H),
        ("local_experts", El), ("cap", cap))), "dispatch")
    for launch in gemm:
        add(launch, "expert")
    add(LaunchConfig(kernel="nvls_partial", grid=opts.select_tbs, stream=0, params=(
        ("ye", "@nv_ye"), ("wall", "@nv_wall"), ("map", "@nv_map"), ("ypart", "@nv_ypart"),
        ("acct", "@acct"), ("gathered", U), ("topk", k), ("hidden", H))), "combine")
    add(LaunchConfig(kernel="nvls_barrier", grid=1, stream=0, params=(
        ("flags", f"@nv_flags + {P * 8}"),)), "combine")
    add(LaunchConfig(kernel="nvls_reduce_scatter", grid=opts.channels, stream=0, params=(
        ("ypart", "@nv_ypart"), ("comb", "@nv_comb"), ("tokens", T), ("hidden", H),
        ("chunk", opts.chunk_bytes))), "combine")
    add(LaunchConfig(kernel="nvls_output", grid=cfg.workload.layer.combine_tbs, stream=0, params=(
        ("out", "@out"), ("ys", "@ys"), ("comb", "@nv_comb"), ("one", "@one"), ("acct", "@acct"),
        ("tokens", T), ("hidden", H), ("shared", s.shared),
        ("shared_tbs", cfg.workload.layer.shared_tbs))), "combine")
    training = cfg.workload.layer.passes == "training"
    bbufs, presets = [], {}
    if training:
        # the backward on stream 0: the reduce-scatter's backward an all-gather of dy, the
        # all-gather's backward a reduce-scatter of the input gradients (the roles swap, the
        # multicast object and the switch's reduction serve again)
        bbufs = backward_buffers(s, cap, _buf) + [
            _buf("nv_dyall", U * rb, dtype="bf16"),
            _buf("nv_dxpart", U * rb, dtype="bf16"),
            _buf("nv_dxcomb", T * rb, dtype="bf16"),
            _buf("nv_bdx", T * H * 4, dtype="f32"),
            _buf("nv_bdw", U * k * 4, dtype="f32"),
            _buf("nv_bones", U * k * 4, region="control", init="fill", dtype="f32", value=1.0),
            _buf("nv_bflags", 2 * P * 8, region="control", dtype="i64"),
            _buf("nv_bacct", 8 * 8, region="control", dtype="i64"),
            _buf("nv_bbases", El * 8, region="control", dtype="i64")]
        multicast += (MulticastConfig(buffer="nv_dyall"), MulticastConfig(buffer="nv_dxpart"))
        presets["nv_bbases"] = i64_preset(np.tile(np.arange(El, dtype=np.int64) * cap, (P, 1)))
        sbb, slaunches = shared_bwd(s, cfg, 0, _buf, done_flag=False)
        bbufs += sbb
        for launch, phase in slaunches:
            add(launch, phase)
        add(LaunchConfig(kernel="nvls_bwd_allgather", grid=opts.channels, stream=0, params=(
            ("x", "@dy"), ("xall", "@nv_dyall"), ("tokens", T), ("hidden", H),
            ("chunk", opts.chunk_bytes))), "backward_dispatch")
        add(LaunchConfig(kernel="nvls_barrier", grid=1, stream=0, params=(
            ("flags", "@nv_bflags"),)), "backward_dispatch")
        add(LaunchConfig(kernel="nvls_bwd_weight", grid=opts.select_tbs, stream=0, params=(
            ("dyall", "@nv_dyall"), ("ye", "@nv_ye"), ("wall", "@nv_wall"), ("map", "@nv_map"),
            ("dye", "@b_dye"), ("bdw", "@nv_bdw"), ("dw", "@dw"), ("bacct", "@bacct"),
            ("tokens", T), ("gathered", U), ("topk", k), ("hidden", H))), "backward_dispatch")
        for launch in expert_bwd_launches(s, 0, cfg.system.gpu.num_sms, "nv_cnt", "nv_xe", "he",
                                          cap, "nv_bbases"):
            add(launch, "backward_expert")
        add(LaunchConfig(kernel="nvls_partial", grid=opts.select_tbs, stream=0, params=(
            ("ye", "@b_dxe"), ("wall", "@nv_bones"), ("map", "@nv_map"),
            ("ypart", "@nv_dxpart"), ("acct", "@nv_bacct"), ("gathered", U), ("topk", k),
            ("hidden", H))), "backward_combine")
        add(LaunchConfig(kernel="nvls_barrier", grid=1, stream=0, params=(
            ("flags", f"@nv_bflags + {P * 8}"),)), "backward_combine")
        add(LaunchConfig(kernel="nvls_reduce_scatter", grid=opts.channels, stream=0, params=(
            ("ypart", "@nv_dxpart"), ("comb", "@nv_dxcomb"), ("tokens", T), ("hidden", H),
            ("chunk", opts.chunk_bytes))), "backward_combine")
        # the shared experts' backward ran before on this stream: nothing to wait for
        add(LaunchConfig(kernel="nvls_output", grid=cfg.workload.layer.combine_tbs, stream=0,
                         params=(("out", "@nv_bdx"), ("ys", "@b_dxs"), ("comb", "@nv_dxcomb"),
                                 ("one", "@one"), ("acct", "@nv_bacct"), ("tokens", T),
                                 ("hidden", H), ("shared", s.shared), ("shared_tbs", 0))),
            "backward_combine")

    def row_order(sim):
        """{expert: (flat tokens, slots)} in nv_xe's order: the rows nvls_select placed (map)."""
        order = {}
        for g in range(P):
            mp = sim.read_buffer(g, "nv_map", "i64")[:U * k]
            sel = np.nonzero(mp >= 0)[0]
            sel = sel[np.argsort(mp[sel], kind="stable")]
            idx = layer.routing.topk_idx.reshape(U, k)
            for pair in sel:
                e = int(idx[pair // k, pair % k])
                t_, s_ = order.setdefault(e, ([], []))
                t_.append(int(pair // k))
                s_.append(int(pair % k))
        return order

    return SchemePlan(
        buffers=tuple(buffers + gbufs + sbufs + bbufs), launches=tuple(launches.launches),
        kernel_files=(KERNELS,) + (BACKWARD_KERNELS if training else ()), n_tile=s.n_tile,
        multicast=multicast, presets=presets, backward=True, backward_row_order=row_order,
        backward_reference={"combine": "switch_reduce", "local_experts": El},
        backward_dx_f32="nv_bdx", backward_acct=(("nv_bacct", 3, 2),),
        phases={"dispatch": ("nvls_allgather", "nvls_barrier", "nvls_select"),
                "expert": GROUPED_KERNELS + SHARED_KERNELS,
                "combine": ("nvls_partial", "nvls_barrier", "nvls_reduce_scatter",
                            "nvls_output")},
        launch_phases=tuple(launches.phases),
        reference_kwargs={"combine": "switch_reduce", "local_experts": El},
        checked_accounting=ACCT_NAMES)
