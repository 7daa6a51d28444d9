"""The bad-input table: every kind of user error gets one clear paragraph and exit status 2.

Each case writes its input files into a temporary folder and runs the command line in-process
(`moehub_arch.cli.main`, the function `moehub-sim` calls): the exit status must be 2, stderr one
paragraph naming the file and the key path (or `file:line:col`) with what was expected and
found, and no traceback. A representative subset also runs as a real `moehub-sim` subprocess.
No case needs a simulation to run (errors are found while loading, assembling or building);
the last few are runtime errors in kernels, which stop the simulation at the faulty instruction.
"""
import json

import numpy as np
import pytest

from conftest import CONFIGS, run_cli

P2P = str(CONFIGS / "ubench/p2p_latency.yaml")
HUB = str(CONFIGS / "hub/dispatch_combine.yaml")
LAYER = str(CONFIGS / "experiments/functional.yaml")
DGX = str(CONFIGS / "systems/dgx_h100.yaml")

# the p2p_latency kernel's parameters, so a user kernel can stand in for it
KERNEL_HEAD = ".kernel pingpong\n.param peer\n.param flag\n.param iters\n.param times\n"
ISA_HEAD = "instructions:\n"
GOOD_IDX = [[2 * t % 8, (2 * t + 1) % 8] for t in range(64)]   # 64 tokens per GPU, top-2 of 8


def _trace(name, idx, weight=None):
    """A routing trace for functional.yaml: 4 GPUs x 64 tokens, top-2 of 8 experts."""
    def write(path):
        arrays = {"topk_idx": np.asarray(idx)}
        if weight is not None:
            arrays["topk_weight"] = np.asarray(weight)
        np.savez(path, **arrays)
    return name, write


def _run_trace(trace_name):
    return ["run", LAYER, "--set", "workload.layer.routing.kind=trace",
            "--set", f"workload.layer.routing.trace={{tmp}}/{trace_name}"]


def _set(config, *overrides):
    argv = ["run", config]
    for o in overrides:
        argv += ["--set", o]
    return argv


def _asm(body):
    """Assemble a one-kernel file k.s through `moehub-sim asm`."""
    return {"k.s": KERNEL_HEAD + body}, ["asm", "{tmp}/k.s"]


def _isa(body):
    """Run p2p_latency with a user ISA file (workload.isa_files)."""
    return {"my.yaml": ISA_HEAD + body}, _set(P2P, "workload.isa_files=[{tmp}/my.yaml]")


def _yaml(body):
    """A config file bad.yaml extending p2p_latency."""
    return {"bad.yaml": f"extends: {P2P}\n{body}"}, ["run", "{tmp}/bad.yaml"]


def _bytes(data):
    """A file's exact bytes (encodings, binary files)."""
    return lambda path: path.write_bytes(data)


def _sparse(size):
    """A file of `size` bytes (sparse: costs no disk), full of NULs."""
    def write(path):
        with open(path, "wb") as f:
            f.truncate(size)
    return write


def _truncated_npz(path):
    np.savez(path, topk_idx=np.asarray(GOOD_IDX * 4))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


# "billion laughs": 9 levels of 9 aliases each expand to 9**9 (387 million) nodes
ALIAS_BOMB = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9) if i else ', '.join(['1'] * 9)}]\n"
                     for i in range(9))


# (id, files: name -> text or writer, argv with {tmp}, fragments that must be in stderr)
CASES = [
    # ---- config: keys, types, units, ranges -------------------------------------------------
    ("unknown-key", {}, _set(P2P, "system.nvlink.bandwith=20GB/s"),
     ["--set system.nvlink.bandwith", "unknown key", "did you mean 'bandwidth'"]),
    ("unknown-key-in-file", *_yaml("system:\n  gpu:\n    hbm:\n      chanels: 4\n"),
     ["bad.yaml", "system.gpu.hbm.chanels", "did you mean 'channels'"]),
    ("unknown-top-level", *_yaml("wrkload: {}\n"), ["bad.yaml", "wrkload", "did you mean 'workload'"]),
    ("wrong-type-int", {}, _set(P2P, "system.num_gpus=two"),
     ["system.num_gpus", "expected an integer", "'two'"]),
    ("wrong-type-fraction", {}, _set(P2P, "system.gpu.num_sms=2.5"),
     ["system.gpu.num_sms", "expected an integer", "2.5"]),
    ("wrong-type-mapping", *_yaml("system:\n  gpu: [1, 2]\n"),
     ["bad.yaml", "system.gpu", "expected a mapping", "found a list"]),
    ("wrong-type-bool", {}, _set(P2P, "run.check_invariants=maybe"),
     ["run.check_invariants", "expected true or false", "'maybe'"]),
    ("wrong-unit", {}, _set(P2P, "system.nvlink.bandwidth=20GB"),
     ["system.nvlink.bandwidth", "'20GB' is a size, expected a bandwidth"]),
    ("missing-unit", *_yaml("system:\n  nvlink:\n    latency: 300\n"),
     ["bad.yaml", "system.nvlink.latency", "bare number", "300ns"]),
    ("unknown-unit", *_yaml("system:\n  switch:\n    traversal_latency: 250 parsecs\n"),
     ["bad.yaml", "system.switch.traversal_latency", "unknown unit 'parsecs'"]),
    ("negative-time", {}, _set(P2P, "run.max_ticks=-5ns"), ["run.max_ticks", "cannot be negative"]),
    ("out-of-range-int", {}, _set(P2P, "system.num_gpus=0"),
     ["system.num_gpus", "expected an integer >= 1, found 0"]),
    ("out-of-range-quantity", {}, _set(P2P, "system.nvlink.bandwidth=0GB/s"),
     ["system.nvlink.bandwidth", "greater than zero"]),
    ("bad-choice", {}, _set(P2P, "system.gpu.hub.moe.rpm.arbitration=longest"),
     ["arbitration", "expected one of round_robin, longest_first", "did you mean 'longest_first'"]),
    ("missing-required-key", {"sys.yaml": open(DGX).read().replace("    latency: 100ns", "    # latency removed")},
     ["run", "{tmp}/sys.yaml"], ["sys.yaml", "system.nvlink.latency", "required key is missing"]),
    ("yaml-syntax", {"bad.yaml": "system:\n  num_gpus: [1, 2\n"}, ["run", "{tmp}/bad.yaml"],
     ["bad.yaml:", "YAML syntax error"]),
    ("duplicate-key", *_yaml("run:\n  seed: 1\n  seed: 2\n"), ["bad.yaml:4", "'seed' appears twice"]),
    ("extends-missing", {"bad.yaml": "extends: nowhere.yaml\n"}, ["run", "{tmp}/bad.yaml"],
     ["bad.yaml", "extends", "'nowhere.yaml' not found"]),
    ("extends-cycle", {"a.yaml": "extends: b.yaml\n", "b.yaml": "extends: a.yaml\n"},
     ["run", "{tmp}/a.yaml"], ["extends: cycle", "a.yaml -> ", "b.yaml"]),
    ("config-not-found", {}, ["run", "{tmp}/missing.yaml"], ["missing.yaml", "not found"]),
    ("set-without-value", {}, _set(P2P, "run.seed"), ["--set run.seed", "expected key.path=value"]),
    ("bad-flag-time", {}, ["run", P2P, "--max-ticks", "soon"], ["--max-ticks soon", "expected a time"]),
    # ---- config: inconsistent topology and workload --------------------------------------------
    ("links-vs-switch-map", {}, _set(DGX, "system.switch.gpu_link_switch=[0, 1]"),
     ["system.switch.gpu_link_switch", "one switch index per link", "links_per_gpu = 18", "found 2"]),
    ("switch-index-range", {}, _set(DGX, "system.switch.count=3"),
     ["system.switch.gpu_link_switch[", "switch index 3 out of range", "count = 3"]),
    ("links-vs-switch-ports", {}, _set(DGX, "system.switch.ports=16"),
     ["system.switch.ports", "switch 0 needs 40 ports", "(8 GPUs x 5 links)", "found 16"]),
    ("rx-buffer-too-small", {}, _set(DGX, "system.nvlink.rx_buffer_flits=8"),
     ["system.nvlink.rx_buffer_flits", "at least 17 flits", "deadlocks"]),
    ("packet-train-too-long", {}, _set(DGX, "run.packet_train=64"),
     ["run.packet_train", "receive buffer", "found 64"]),
    ("header-not-flits", {}, _set(DGX, "system.nvlink.header_bytes=20B"),
     ["system.nvlink.header_bytes", "multiple of system.nvlink.flit_bytes"]),
    ("launch-gpu-range", {}, _set(P2P, "workload.launches.0.gpus=[0, 9]"),
     ["--set workload.launches.0.gpus", "workload.launches[0].gpus[1]", "GPU 9 out of range",
      "num_gpus = 8"]),
    ("launch-gpu-range-in-file", *_yaml("workload:\n  launches:\n    - {kernel: pingpong, grid: 1, gpus: [0, 9], "
                                        "params: {peer: 1, flag: 0, iters: 1, times: 0}}\n"),
     ["bad.yaml", "workload.launches[0].gpus[1]", "GPU 9 out of range"]),
    ("unknown-kernel", {}, _set(P2P, "workload.launches.0.kernel=pingpng"),
     ["workload.launches[0].kernel", "no kernel named 'pingpng'", "did you mean 'pingpong'"]),
    ("kernel-params", {}, _set(P2P, "workload.launches.0.params.count=1"),
     ["p2p_latency.yaml", "workload.launches[0].params", "declares parameters (peer, flag, iters, "
      "times)", "unknown: count"]),
    ("unknown-buffer", {}, _set(P2P, "workload.launches.0.params.flag='@flags'"),
     ["workload.launches[0].params.flag", "'@flags' names a buffer that is not declared",
      "did you mean '@flag'?", "declared: flag, times"]),
    ("buffers-exceed-hbm", {}, _set(P2P, "workload.buffers.flag.bytes=100GB"),
     ["p2p_latency.yaml", "workload.buffers", "more than system.gpu.hbm.capacity"]),
    ("kernel-file-missing", {}, _set(P2P, "workload.kernel_files=[./nope.s]"),
     ["--set workload.kernel_files", "kernel file './nope.s' not found"]),
    ("kernel-smem-too-large", {"k.s": KERNEL_HEAD + ".smem 1GB\n    exit\n"},
     _set(P2P, "workload.kernel_files=[{tmp}/k.s]"),
     ["kernel 'pingpong'", "k.s:1", "asks for 1073741824 bytes of shared memory",
      "system.gpu.sm.smem_bytes"]),
    ("experts-not-divisible", {}, _set(HUB, "workload.moe.num_experts=6"),
     ["workload.moe.num_experts", "multiple of system.num_gpus (4)", "found 6"]),
    ("placement-length", {}, _set(HUB, "workload.moe.placement=[0, 1, 2]"),
     ["workload.moe.placement", "one GPU per expert (8), found 3"]),
    ("window-not-tiles", {}, _set(HUB, "workload.moe.window_rows=12"),
     ["workload.moe.window_rows", "multiple of system.gpu.hub.moe.dam.tile_rows (8)", "found 12"]),
    ("record-table-deadlock", {}, _set(HUB, "system.gpu.hub.moe.aau.record_table_entries=4"),
     ["record_table_entries", "at least 15 entries", "deadlocks"]),
    # a scheme-generated MoE-Hub layer: its windows are generated at build time, the check is not
    ("record-table-below-tile-rows", {}, _set(LAYER, "scheme=moehub",
                                              "system.gpu.hub.moe.aau.record_table_entries=8",
                                              "system.gpu.hub.moe.dam.tile_rows=16"),
     ["system.gpu.hub.moe.aau.record_table_entries", "system.gpu.hub.moe.dam.tile_rows = 16",
      "at least 31 entries", "found 8", "deadlocks"]),
    # multi-expert stores take one record per named expert at once (top-2 of 2 local experts)
    ("record-table-multi-expert-store", {}, _set(LAYER, "scheme=moehub",
                                                 "workload.layer.moehub.multi_expert_store=true",
                                                 "system.gpu.hub.moe.aau.record_table_entries=31",
                                                 "system.gpu.hub.moe.dam.tile_rows=16"),
     ["at least 32 entries", "one more store of up to 2 rows", "found 31", "deadlocks"]),
    ("system-file-not-found", {}, ["run", P2P, "--system", "{tmp}/none.yaml"],
     ["--system", "none.yaml", "not found"]),
    ("layer-without-model", {}, _set(LAYER, "workload.layer.model=''"),
     ["workload.layer.model", "scheme 'moehub' runs an MoE layer"]),
    ("model-experts-vs-gpus", {}, _set(LAYER, "system.num_gpus=3"),
     ["functional.yaml", "workload.layer.model", "8 routed experts", "multiple of system.num_gpus (3)"]),
    ("gemm-tile-divides", {}, _set(LAYER, "workload.layer.gemm_n_tile=48"),
     ["workload.layer.gemm_n_tile", "48 does not divide", "hidden (64)"]),
    ("tokens-exceed-hbm", {}, _set(LAYER, "workload.layer.tokens_per_gpu=100000000",
                                   "system.gpu.hbm.capacity=1GB"),
     ["workload.layer.tokens_per_gpu", "100000000 tokens", "system.gpu.hbm.capacity"]),
    ("gemm-job-too-big", {}, _set(LAYER, "system.gpu.hub.moe.dam.tile_rows=1024"),
     ["workload.layer.gemm_n_tile", "1024 rows", "x 32 columns", "reserve 160 KB"]),
    ("gini-range", {}, _set(LAYER, "workload.layer.routing.kind=skewed", "workload.layer.routing.gini=0.97"),
     ["--set workload.layer.routing.gini=0.97", "workload.layer.routing.gini",
      "expected a number in [0, 0.9]", "0.97"]),
    ("normal-std-negative", {}, _set(LAYER, "workload.layer.routing.kind=normal",
                                     "workload.layer.routing.std=-0.01"),
     ["workload.layer.routing.std", "expected a non-negative number", "-0.01"]),
    ("normal-std-not-a-number", {}, _set(LAYER, "workload.layer.routing.kind=normal",
                                         "workload.layer.routing.std=wide"),
     ["workload.layer.routing.std", "expected a number", "wide"]),
    ("tutel-capacity-factor", {}, _set(LAYER, "scheme=tutel",
                                       "workload.layer.tutel.capacity_factor=0"),
     ["workload.layer.tutel.capacity_factor", "expected a positive number"]),
    ("unknown-model", {}, _set(LAYER, "workload.layer.model=mixtral"),
     ["workload.layer.model", "mixtral"]),
    # ---- assembly: file:line:col -----------------------------------------------------------------
    ("asm-unknown-mnemonic", *_asm("    addd r1, r1, 1\n    exit\n"),
     ["k.s:6:5:", "unknown instruction 'addd'", "did you mean 'add'"]),
    ("asm-operand-count", *_asm("    add r1, r1\n    exit\n"),
     ["k.s:6:5:", "'add' takes 3 operand(s) (dst, a, b), found 2"]),
    ("asm-operand-kind", *_asm("    add 5, r1, 1\n    exit\n"),
     ["k.s:6:9:", "operand 'dst' of 'add' must be a general register", "found '5'"]),
    ("asm-memory-operand", *_asm("    ld r1, %flag\n    exit\n"),
     ["k.s:6:12:", "expected a memory operand [base+offset]"]),
    ("asm-undefined-label", *_asm("    bra nowhere\n    exit\n"),
     ["k.s:6:9:", "undefined label 'nowhere'"]),
    ("asm-duplicate-label", *_asm("top:\n    nop\ntop:\n    exit\n"),
     ["k.s:8:1:", "label 'top' already defined at line 6"]),
    ("asm-register-range", *_asm("    add r32, r1, 1\n    exit\n"),
     ["k.s:6:9:", "register 'r32' does not exist (r0-r31)"]),
    ("asm-immediate-too-large", *_asm("    mov r1, 18446744073709551616\n    exit\n"),
     ["k.s:6:13:", "does not fit in 64 bits"]),
    ("asm-unknown-param", *_asm("    add r1, %iter, 1\n    exit\n"),
     ["k.s:6:13:", "unknown register or parameter '%iter'", "did you mean '%iters'"]),
    ("asm-no-exit", *_asm("    add r1, r1, 1\n"), ["k.s:6:1:", "can run past its last instruction"]),
    ("asm-include-missing", *_asm('.include "lib/nothere.s"\n    exit\n'),
     ["k.s:6:1:", ".include: cannot find 'lib/nothere.s'", "workloads/kernels/lib/nothere.s"]),
    ("asm-include-cycle", {"k.s": KERNEL_HEAD + '.include "inc.s"\n    exit\n',
                           "inc.s": '    nop\n.include "k.s"\n'}, ["asm", "{tmp}/k.s"],
     ["inc.s:2:1:", "include cycle:", "k.s -> ", "inc.s -> ", "(included from "]),
    ("asm-error-in-include", {"k.s": KERNEL_HEAD + '.include "inc.s"\n    exit\n',
                              "inc.s": "    nop\n    add r1, r1\n"}, ["asm", "{tmp}/k.s"],
     ["inc.s:2:5:", "'add' takes 3 operand(s)", "(included from ", "k.s:6)"]),
    ("asm-macro-arguments", *_asm(".macro twice r\n    add \\r, \\r, \\r\n.endm\n    twice r1, r2\n    exit\n"),
     ["k.s:9:5:", "macro 'twice' takes 1 argument(s) (r; defined at", "found 2"]),
    ("asm-in-run", {"k.s": KERNEL_HEAD + "    bra nowhere\n    exit\n"},
     _set(P2P, "workload.kernel_files=[{tmp}/k.s]"), ["k.s:6:9:", "undefined label 'nowhere'"]),
    # ---- ISA files --------------------------------------------------------------------------------
    ("isa-missing-field", *_isa("  add3: {semantic: alu, subop: add, unit: alu, operands: [dst, a, b], "
                                "latency: 1, description: d}\n"),
     ["my.yaml:2", "instructions.add3", "missing field 'ii'"]),
    ("isa-duplicate-mnemonic", *_isa("  add: {semantic: nop, unit: alu, operands: [], latency: 1, ii: 1, "
                                     "description: d}\n"),
     ["my.yaml:2", "'add' is already defined at", "base.yaml", "replace: true"]),
    ("isa-unknown-field", *_isa("  x: {semantic: nop, unit: alu, operands: [], latency: 1, ii: 1, "
                                "descr: d}\n"),
     ["my.yaml:2", "unknown field 'descr'"]),
    ("isa-unknown-semantic", *_isa("  x: {semantic: alux, unit: alu, operands: [], latency: 1, ii: 1, "
                                   "description: d}\n"),
     ["my.yaml:2", "unknown semantic 'alux'", "did you mean 'alu'"]),
    ("isa-bad-cost", *_isa("  x: {semantic: nop, unit: alu, operands: [], latency: sm.nope, ii: 1, "
                           "description: d}\n"),
     ["my.yaml:2", "instructions.x.latency", "cannot evaluate 'sm.nope'"]),
    ("isa-file-missing", {}, _set(P2P, "workload.isa_files=[./none.yaml]"),
     ["workload.isa_files[0]", "ISA file './none.yaml' not found"]),
    # ---- routing traces ---------------------------------------------------------------------------
    ("trace-wrong-shape", dict([_trace("t.npz", GOOD_IDX)]), _run_trace("t.npz"),
     ["t.npz", "workload.layer.routing.trace", "wrong shape", "(256, 2)", "(64, 2)"]),
    ("trace-expert-range", dict([_trace("t.npz", [[0, 9]] + (GOOD_IDX * 4)[1:])]),
     _run_trace("t.npz"), ["t.npz", "expert id out of range [0, 8)", "token 0", "has 9"]),
    ("trace-nan-weight", dict([_trace("t.npz", GOOD_IDX * 4,
                                      [[0.5, float("nan")]] + [[0.5, 0.5]] * 255)]),
     _run_trace("t.npz"), ["t.npz", "topk_weight must be finite", "nan", "token 0"]),
    ("trace-duplicate-expert", dict([_trace("t.npz", [[3, 3]] + GOOD_IDX[1:] + GOOD_IDX * 3)]),
     _run_trace("t.npz"), ["t.npz", "token 0", "expert 3 more than once"]),
    ("trace-not-found", {}, _run_trace("none.npz"),
     ["--set workload.layer.routing.trace", "routing trace", "none.npz' not found"]),
    # ---- checkpoints ------------------------------------------------------------------------------
    ("restore-not-a-checkpoint", {"ck/readme": "x"}, ["run", "--restore", "{tmp}/ck"],
     ["ck: not a checkpoint directory (no meta.json"]),
    ("restore-with-config", {}, ["run", P2P, "--restore", "{tmp}"],
     ["a checkpoint carries its own config", "CONFIG"]),
    # ---- corrupt files: encodings, binary, empty, huge, YAML alias bombs (moehub_arch/inputs.py) --
    ("config-utf16-without-bom", {"bad.yaml": _bytes(f"extends: {P2P}\n".encode("utf-16-le"))},
     ["run", "{tmp}/bad.yaml"], ["bad.yaml:1:2:", "contains NUL bytes", "without a byte-order mark"]),
    ("config-utf16-broken-bom", {"bad.yaml": _bytes(b"\xff\xfea\x00b")}, ["run", "{tmp}/bad.yaml"],
     ["bad.yaml", "UTF-16 LE byte-order mark but is not valid UTF-16 LE", "save it again as UTF-8"]),
    ("config-latin1", {"bad.yaml": _bytes(f"extends: {P2P}\nrun:\n  seed: 1 # caf\u00e9\n".encode("latin-1"))},
     ["run", "{tmp}/bad.yaml"], ["bad.yaml:3:16:", "byte 0xe9 is not UTF-8", "another encoding"]),
    ("config-binary", {"bad.yaml": _bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")},
     ["run", "{tmp}/bad.yaml"], ["bad.yaml:1:1:", "byte 0x89 is not UTF-8", "a binary file"]),
    ("config-empty", {"bad.yaml": ""}, ["run", "{tmp}/bad.yaml"],
     ["bad.yaml: the config file is empty", "expected a mapping with keys extends, system"]),
    ("config-comments-only", {"bad.yaml": "# to do\n"}, ["run", "{tmp}/bad.yaml"],
     ["bad.yaml: the config file is empty"]),
    ("config-huge", {"bad.yaml": _sparse(65 * 2 ** 20)}, ["run", "{tmp}/bad.yaml"],
     ["bad.yaml: the config file is 65.0 MiB", "larger than 64.0 MiB is refused"]),
    ("config-alias-bomb", *_yaml(ALIAS_BOMB), ["bad.yaml:8:", "more than 2,000,000 YAML nodes",
                                               "alias bomb"]),
    ("config-recursive-alias", *_yaml("run: &r\n  seed: *r\n"),
     ["bad.yaml:2:", "an alias (*name) that contains itself"]),
    ("config-nested-too-deeply", *_yaml("run: " + "[" * 100_000 + "\n"),
     ["bad.yaml: the config file is nested too deeply to read"]),
    ("extends-binary", {"bad.yaml": "extends: base.yaml\n", "base.yaml": _bytes(b"\x00\x01\x02")},
     ["run", "{tmp}/bad.yaml"], ["base.yaml:1:1:", "contains NUL bytes"]),
    ("set-recursive-alias", {}, _set(P2P, "workload.report=&a [*a]"),
     ["--set workload.report=&a [*a]", "contains itself"]),
    ("asm-latin1", {"k.s": _bytes((KERNEL_HEAD + "    exit  # fin\u00e9\n").encode("latin-1"))},
     ["asm", "{tmp}/k.s"], ["k.s:6:16:", "cannot read the kernel file", "byte 0xe9 is not UTF-8"]),
    ("asm-binary", {"k.s": _bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))},
     ["asm", "{tmp}/k.s"], ["k.s:1:8:", "cannot read the kernel file", "contains NUL bytes"]),
    ("asm-binary-in-run", {"k.s": _bytes(bytes(range(256)))},
     _set(P2P, "workload.kernel_files=[{tmp}/k.s]"), ["k.s:1:1:", "cannot read the kernel file",
                                                     "contains NUL bytes"]),
    ("asm-include-binary", {"k.s": KERNEL_HEAD + '.include "lib.s"\n    exit\n',
                            "lib.s": _bytes(b"\x00\x01\x02")},
     ["asm", "{tmp}/k.s"], ["k.s:6:1: .include: ", "lib.s:1:1: cannot read the included kernel file",
                            "contains NUL bytes"]),
    ("isa-binary", {"my.yaml": _bytes(b"\xde\xad\xbe\xef")},
     _set(P2P, "workload.isa_files=[{tmp}/my.yaml]"),
     ["my.yaml:1:3:", "cannot read the ISA file", "byte 0xbe is not UTF-8", "a binary file"]),
    ("isa-empty", {"my.yaml": ""}, _set(P2P, "workload.isa_files=[{tmp}/my.yaml]"),
     ["my.yaml: expected a top-level mapping 'instructions"]),
    ("isa-alias-bomb", {"my.yaml": ALIAS_BOMB}, _set(P2P, "workload.isa_files=[{tmp}/my.yaml]"),
     ["my.yaml:7:", "the ISA file expands to more than 2,000,000 YAML nodes"]),
    ("trace-truncated-npz", {"t.npz": _truncated_npz}, _run_trace("t.npz"),
     ["t.npz", "workload.layer.routing.trace", "cannot read the trace file as a NumPy .npz archive"]),
    ("trace-npz-not-a-zip", {"t.npz": "topk_idx = [[0, 1]]\n"}, _run_trace("t.npz"),
     ["t.npz", "cannot read the trace file as a NumPy .npz archive"]),
    ("trace-pickled-objects", {"t.npy": lambda p: np.save(p, np.array([[0, 1]] * 256, dtype=object))},
     _run_trace("t.npy"), ["t.npy", "cannot read the trace file as a NumPy .npy array", "pickle"]),
    ("trace-json-binary", {"t.json": _bytes(b"{\"topk_idx\": \xff}")}, _run_trace("t.json"),
     ["t.json", "workload.layer.routing.trace", "byte 0xff is not UTF-8"]),
    ("sweep-binary", {"s.yaml": _bytes(b"\xfe\xed\x00")}, ["sweep", "{tmp}/s.yaml"],
     ["s.yaml:1:1:", "cannot read the sweep file", "not UTF-8"]),
    ("sweep-alias-bomb", {"s.yaml": ALIAS_BOMB}, ["sweep", "{tmp}/s.yaml"],
     ["s.yaml:7:", "the sweep file expands to more than 2,000,000 YAML nodes"]),
    # ---- runtime errors in kernels (the simulation stops at the faulty instruction) -------------
    ("runtime-misaligned", {"k.s": KERNEL_HEAD + "    ld r1, [%flag+4]\n    exit\n"},
     _set(P2P, "workload.kernel_files=[{tmp}/k.s]"),
     ["k.s:6: runtime error in kernel 'pingpong'", "misaligned address", "value 4"]),
    ("runtime-div-zero", {"k.s": KERNEL_HEAD + "    mov r2, 0\n    div r1, %iters, r2\n    exit\n"},
     _set(P2P, "workload.kernel_files=[{tmp}/k.s]"),
     ["k.s:7: runtime error in kernel 'pingpong'", "'alu.div'", "integer division by zero"]),
]
IDS = [c[0] for c in CASES]


def _materialise(tmp_path, files, argv):
    for name, content in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if callable(content):
            content(path)
        else:
            path.write_text(content)
    return [a.replace("{tmp}", str(tmp_path)) for a in argv]


def _paragraph(err):
    """The error as the user sees it: one 'moehub-sim: error:' paragraph (runtime errors name the
    faulty line; stuck runs add a report, which bad input never gets)."""
    assert err.startswith("moehub-sim: error: "), err
    assert "Traceback" not in err, err
    assert err.count("moehub-sim: error:") == 1, err
    return err


def test_the_table_is_big_enough():
    assert len(CASES) >= 40 and len(set(IDS)) == len(IDS)


@pytest.mark.parametrize("case_id,files,argv,fragments", CASES, ids=IDS)
def test_bad_input_gives_one_paragraph_and_exit_2(tmp_path, capsys, case_id, files, argv,
                                                   fragments):
    from moehub_arch.cli import main
    argv = _materialise(tmp_path, files, argv)
    rc = main(argv + ["-o", str(tmp_path / "out")] if argv[0] == "run" else argv)
    err = capsys.readouterr().err
    assert rc == 2, (rc, err)
    msg = _paragraph(err)
    for f in fragments:
        assert f.replace("{tmp}", str(tmp_path)) in msg, (f, msg)
    assert not (tmp_path / "out" / "stats.json").exists() or case_id.startswith("runtime")


# one case of each kind through a real `moehub-sim` process: exit status, stderr, no traceback
SUBPROCESS = ["unknown-key-in-file", "links-vs-switch-ports", "tokens-exceed-hbm", "asm-duplicate-label",
              "isa-duplicate-mnemonic", "trace-nan-weight"]


@pytest.mark.parametrize("case_id", SUBPROCESS)
def test_bad_input_through_the_command(tmp_path, case_id):
    _, files, argv, fragments = CASES[IDS.index(case_id)]
    argv = _materialise(tmp_path, files, argv)
    r = run_cli(*argv, *(["-o", tmp_path / "out"] if argv[0] == "run" else []))
    assert r.returncode == 2, (r.returncode, r.stderr)
    _paragraph(r.stderr)
    for f in fragments:
        assert f in r.stderr, (f, r.stderr)
