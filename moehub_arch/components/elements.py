"""Element access for functional data: a bf16 or fp32 element of a byte view, read as fp32 and
written back rounded to its storage type (round to nearest even for bf16). Shared by the SM's
tensor and vector instructions (sm.py), the switch's reductions (nvls.py) and the memory's
near-memory updates (add_elements_bf16: put.add.bf16)."""
import numpy as np
from ..engine.jit import compiled

from ..isa.encoding import DT_BF16


@compiled
def load_f32(view, i, dtype):
    """Element i of the byte view as fp32 (bf16 widens exactly)."""
    if dtype == DT_BF16:
        lo = np.uint32(view[2 * i])
        hi = np.uint32(view[2 * i + 1])
        return np.uint32((hi << np.uint32(24)) | (lo << np.uint32(16))).view(np.float32)
    return view[4 * i:4 * i + 4].view(np.float32)[0]


@compiled
def store_f32(view, i, dtype, value):
    """Element i of the byte view = value, rounded to the storage type."""
    if dtype == DT_BF16:
        bits = np.float32(value).view(np.uint32)
        # round to nearest even on the 16 dropped bits
        rounding = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
        b16 = (bits + rounding) >> np.uint32(16)
        view[2 * i] = np.uint8(b16 & np.uint32(0xFF))
        view[2 * i + 1] = np.uint8(b16 >> np.uint32(8))
    else:
        view[4 * i:4 * i + 4].view(np.float32)[0] = np.float32(value)


@compiled
def add_elements_bf16(dst, src, nbytes):
    """Near-memory update (put.add.bf16, T3's op-and-store): every bf16 element of dst += the
    element of src, added in fp32 and rounded once to bf16. dst and src are byte views of
    nbytes (a whole number of elements) that do not overlap."""
    for i in range(nbytes // 2):
        store_f32(dst, i, DT_BF16, np.float32(load_f32(dst, i, DT_BF16) + load_f32(src, i, DT_BF16)))
