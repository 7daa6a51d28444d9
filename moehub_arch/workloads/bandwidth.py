"""Bandwidth figures as public MoE communication benchmarks define them.

DeepEP (normal kernels, github.com/deepseek-ai/DeepEP) reports a dispatch or combine kernel's bandwidth as the bytes a
rank *receives* - its own tokens included - divided by the kernel's time. Here:

- a token row goes once to every rank that holds at least one of the token's experts (DeepEP
  deduplicates per rank: the receiving rank fans it out to its local experts), so the rows rank r
  receives in dispatch are the (source rank, token) pairs with an expert on r, r's own tokens
  included (they never cross NVLink, but DeepEP counts them);
- a row is `dispatch_row_bytes(hidden, dtype)` bytes: BF16 2 B per element; FP8 1 B per element
  plus one fp32 scale per 128 elements (DeepEP's FP8 input is the pair x [T][H] e4m3,
  scales [T][H/128] fp32: deep_ep/buffer.py, Buffer.dispatch docstring);
- combine sends every one of those rows back home, always in BF16, so its byte count is the
  dispatch row count times 2H;
- the figure is the mean over ranks of (rank r's bytes / rank r's kernel time).

NCCL's all-to-all bandwidth (algbw = bytes each rank sends / time; busbw = algbw x (n-1)/n) is a
report expression of configs/ubench/alltoall.yaml.
"""
import numpy as np

FP8_SCALE_BLOCK = 128     # elements per fp32 scale (DeepSeek-V3 / DeepEP 1x128 activation tiles)
FP32_BYTES = 4


def dispatch_row_bytes(hidden, dtype):
    """Bytes of one dispatched token row: bf16, or fp8 with its per-128-element fp32 scales."""
    if dtype == "bf16":
        return 2 * hidden
    if dtype == "fp8":
        return hidden + FP32_BYTES * (-(-hidden // FP8_SCALE_BLOCK))
    raise ValueError(f"dispatch dtype must be 'bf16' or 'fp8', not {dtype!r}")


def tokens_received_per_rank(topk_idx, local_experts):
    """Token rows each rank receives in a deduplicated dispatch, its own tokens included.

    topk_idx [P, T, k] global expert ids (block placement: rank r holds experts r*El ..
    r*El + El - 1); returns int64 [P]."""
    idx = np.asarray(topk_idx, dtype=np.int64)
    P = idx.shape[0]
    n, k = idx.shape[0] * idx.shape[1], idx.shape[2]
    hit = np.zeros((n, P), dtype=bool)
    hit[np.repeat(np.arange(n), k), (idx.reshape(n, k) // local_experts).reshape(-1)] = True
    return hit.sum(axis=0).astype(np.int64)


def node_rows_sent_per_rank(topk_idx, local_experts, node_gpus):
    """Token rows each rank sends over RDMA in DeepEP's internode dispatch as its test counts
    them (tests/test_internode.py, num_rdma_token_sent): one per (token of the rank, node holding
    any of its experts), the rank's own node included. Returns int64 [P]."""
    idx = np.asarray(topk_idx, dtype=np.int64)
    P, T, k = idx.shape
    nodes = idx // (local_experts * node_gpus)                    # [P, T, k]
    N = P // node_gpus
    hit = np.zeros((P, T, N), dtype=bool)
    np.put_along_axis(hit, nodes, True, axis=2)
    return hit.sum(axis=(1, 2)).astype(np.int64)


def mean_rank_bandwidth_GBps(bytes_per_rank, ticks_per_rank):
    """Mean over ranks of bytes / kernel time, in GB/s (1e9 B/s); ticks are picoseconds."""
    b = np.asarray(bytes_per_rank, dtype=np.float64)
    t = np.asarray(ticks_per_rank, dtype=np.float64)
    if b.shape != t.shape or not b.size:
        raise ValueError(f"one byte count and one time per rank expected, found {b.shape} and "
                         f"{t.shape}")
    if (t <= 0).any():
        raise ValueError("kernel times must be positive")
    return float(np.mean(b / (t * 1e-12))) / 1e9
