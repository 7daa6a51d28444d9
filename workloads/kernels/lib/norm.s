# Kernel library: RMSNorm (Zhang & Sennrich, arXiv 1910.07467: y = x / sqrt(mean(x^2) + eps) * g)
# and LayerNorm (Ba et al., arXiv 1607.06450: y = (x - mean) / sqrt(var + eps) * g + b) over rows
# of bf16 activations, computed in fp32 and stored as bf16 (as Megatron-LM's and Apex's fused
# norm kernels do). The NumPy reference is workloads/block_reference.py `norm` (same order):
#   [LayerNorm: mean = rowsum(x) / H; x = x - mean]  var = rowsum(x^2) / H;
#   r = rsqrt(var + eps); y = bf16(((x r) g) [+ b]).
#
#   norm_smem gain, bias, consts, hidden
#       copies the fp32 constants (global words: 0 unused, 1 eps, 2 H as fp32) to %smem and the
#       fp32 gain and bias [H] after them. Writes r1, r2, r20 (gain), r21 (bias), r22 (the rows'
#       fp32 workspace: the kernel's .smem must hold 16 + 8 H + 4 rows (H + 2) bytes).
#   norm_rows dst, src, rows, hidden, layernorm
#       dst[rows][H] = norm(src[rows][H]), layernorm 0 (RMSNorm) or 1. Needs norm_smem first;
#       writes r1 .. r6.
#   norm_rows_xhat src, rows, hidden, layernorm
#       norm_rows up to the gain: leaves xhat = (x [- mean]) r in the fp32 workspace r22, r (the
#       rows' 1 / rms) in the fp32 vector at r4, r1 = rows x H, r6 = the address of H (fp32).
#       The backward (lib/norm_backward.s) recomputes xhat with it, bit for bit the forward's.

.macro norm_smem gain, bias, consts, hidden
    copy %smem, \consts, 16
    add r20, %smem, 16               # r20 = gain
    shl r1, \hidden, 2
    copy r20, \gain, r1
    add r21, r20, r1                 # r21 = bias
    copy r21, \bias, r1
    add r22, r21, r1                 # r22 = x rows in fp32
.endm

.macro norm_rows dst, src, rows, hidden, layernorm
    norm_rows_xhat \src, \rows, \hidden, \layernorm
    vcol_mul.f32 r22, r22, r20, \hidden, r1
    beq \layernorm, 0, out_\@
    vcol_add.f32 r22, r22, r21, \hidden, r1
out_\@:
    vcvt.bf16.f32 \dst, r22, r1
.endm

.macro norm_rows_xhat src, rows, hidden, layernorm
    mul r1, \rows, \hidden           # r1 = elements
    shl r3, r1, 2
    add r3, r3, r22                  # r3 = per-row statistic [rows]
    shl r4, \rows, 2
    add r4, r4, r3                   # r4 = per-row 1 / rms [rows]
    add r5, %smem, 4                 # r5 = eps
    add r6, %smem, 8                 # r6 = H (fp32)
    vcvt.f32.bf16 r22, \src, r1
    beq \layernorm, 0, rms_\@
    vrow_sum.f32 r3, r22, \hidden, r1
    vrow_div.f32 r3, r3, r6, \rows, \rows         # mean (one row of `rows`: b[0] = H)
    vrow_sub.f32 r22, r22, r3, \hidden, r1
rms_\@:
    vrow_sumsq.f32 r3, r22, \hidden, r1
    vrow_div.f32 r3, r3, r6, \rows, \rows         # mean square (the variance for LayerNorm)
    vrow_add.f32 r3, r3, r5, \rows, \rows
    vrsqrt.f32 r4, r3, \rows
    vrow_mul.f32 r22, r22, r4, \hidden, r1
.endm

# Sequence parallelism (scheme sp_ring; Korthikanti et al., arXiv 2205.05198): with sharded = 1,
# tp_norm and residual_add work on this GPU's sequence shard only - `tokens` (`elems`) is the
# shard's size and the shard is chunk (g + 1) % P of the full buffer, the chunk the ring's
# reduce-scatter leaves complete on GPU g (lib/ring_allreduce.s).
#   shard_offset off, size, esize     off = the byte offset of this GPU's shard (0 unless the
#                                     kernel's %sharded is 1): ((g + 1) % P) size esize
.macro shard_offset off, size, esize
    mov \off, 0
    beq %sharded, 0, whole_\@
    add \off, %gpu, 1
    rem \off, \off, %ngpu
    mul \off, \off, \size
    mul \off, \off, \esize
whole_\@:
.endm
