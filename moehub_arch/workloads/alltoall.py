"""Host-side tables and launches of the all-to-all token dispatchers (schemes megatron and tutel;
kernels in workloads/kernels/common/moe_alltoall.s).

Both schemes permute every kept token-expert row into a contiguous send buffer in expert order,
move it with an NCCL-style all-to-all of contiguous byte ranges (`a2a_put`: one range per peer
and table entry, cut into puts), compute the grouped GEMM and move the outputs back the same way;
`gather_rows` then puts each pair's output row at its yhome slot for the common moe_combine. What
differs is who sizes the ranges: megatron's host, from the exchanged per-expert counts; tutel's
static capacity. The tables are written by the host (the plan) as presets: 32-byte entries of
source offset, destination offset and bytes.
"""
import numpy as np

from ..config.schema import LaunchConfig

ENTRY_BYTES = 32
KERNELS = "workloads/kernels/common/moe_alltoall.s"


class PhasedLaunches:
    """Launches in order with the phase of each (SchemePlan.launch_phases): the all-to-all and
    copy kernels serve both dispatch and combine, so phases go by launch, not by kernel name."""

    def __init__(self):
        self.launches, self.phases = [], []

    def add(self, launch, phase):
        """`phase` '' for a launch in no phase (a wait for another stream)."""
        self.launches.append(launch)
        self.phases.append(phase)


def entries_preset(tables):
    """[P][n][3] int64 (source offset, destination offset, bytes) -> [P, n * 32] uint8 rows."""
    t = np.asarray(tables, dtype=np.int64)
    out = np.zeros(t.shape[:2] + (4,), np.int64)
    out[..., :3] = t
    return out.reshape(t.shape[0], -1).view(np.uint8)


def split_pieces(entries, piece):
    """Cut (src, dst, bytes) entries into pieces of at most `piece` bytes (so copies spread over
    thread blocks)."""
    out = []
    for src, dst, n in entries:
        off = 0
        while off < n:
            m = min(piece, n - off)
            out.append((src + off, dst + off, m))
            off += m
    return out


def pad_tables(per_gpu):
    """Lists of entries per GPU -> [P][n][3] with zero-byte entries (skipped) up to the longest."""
    n = max(1, max(len(t) for t in per_gpu))
    return [list(t) + [(0, 0, 0)] * (n - len(t)) for t in per_gpu], n


def a2a_launch(stream, table, entries, src, dst, chunk, *, wait=None, arrive=0, done=0):
    """One a2a_put launch: `table` an expression for the table address ('@buf + offset'); `wait`
    (address expression, value) or None; `arrive` / `done` address expressions or 0."""
    wait_addr, wait_value = wait if wait else (0, 0)
    return LaunchConfig(kernel="a2a_put", grid="ngpu", stream=stream, params=(
        ("table", table), ("entries", entries), ("src", src), ("dst", dst), ("chunk", chunk),
        ("wait_addr", wait_addr), ("wait_value", wait_value), ("arrive", arrive),
        ("done", done)))


def a2a_group_launch(stream, table, entries, src, dst, chunk, *, span, stride, arrive=0, done=0,
                     done_span=1):
    """One a2a_put_group launch: the all-to-all among `span` GPUs `stride` ids apart (Tutel's 2-D
    hierarchical all-to-all, schemes/tutel.py); `done` sets the flags of the sender's aligned
    block of `done_span` GPUs on each peer."""
    return LaunchConfig(kernel="a2a_put_group", grid=span, stream=stream, params=(
        ("table", table), ("entries", entries), ("src", src), ("dst", dst), ("chunk", chunk),
        ("span", span), ("stride", stride), ("arrive", arrive), ("done", done),
        ("done_span", done_span)))


def merge_adjacent(entries):
    """(src, dst, bytes) entries with each one that continues the previous one on both sides
    merged into it (the host copies one range where the layout allows)."""
    out = []
    for src, dst, n in entries:
        if out and out[-1][0] + out[-1][2] == src and out[-1][1] + out[-1][2] == dst:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + n)
        else:
            out.append((src, dst, n))
    return out


def permute_launch(s, stream, tbs, *, cnt, base, out, map_, cap, host_delay=0):
    return LaunchConfig(kernel="permute_rows", grid=tbs, stream=stream, host_delay=host_delay,
                        params=(("x", "@x"), ("topk_idx", "@topk_idx"), ("cnt", cnt),
                                ("base", base), ("out", out), ("map", map_), ("acct", "@acct"),
                                ("tokens", s.tokens), ("topk", s.top_k), ("hidden", s.hidden),
                                ("cap", cap)))


def gather_launch(s, stream, tbs, *, map_, src):
    return LaunchConfig(kernel="gather_rows", grid=tbs, stream=stream, params=(
        ("map", map_), ("src", src), ("yhome", "@yhome"), ("done", "@done"),
        ("pairs", s.pairs), ("hidden", s.hidden)))


def copy_launch(stream, tbs, table, count, src, dst, wait=None):
    wait_addr, wait_value = wait if wait else (0, 0)
    return LaunchConfig(kernel="copy_chunks", grid=tbs, stream=stream, params=(
        ("table", table), ("count", count), ("src", src), ("dst", dst),
        ("wait_addr", wait_addr), ("wait_value", wait_value)))


def flag_wait_launch(stream, addr, value):
    return LaunchConfig(kernel="flag_wait", grid=1, stream=stream,
                        params=(("addr", addr), ("value", value)))


def flag_set_launch(stream, addr, value):
    return LaunchConfig(kernel="flag_set", grid=1, stream=stream,
                        params=(("addr", addr), ("value", value)))


def i64_preset(rows):
    """[P][n] integers -> [P, n * 8] uint8 rows."""
    return np.ascontiguousarray(np.asarray(rows, dtype=np.int64)).view(np.uint8)
