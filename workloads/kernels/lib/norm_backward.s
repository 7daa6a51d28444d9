# Kernel library: the backward of RMSNorm and LayerNorm (lib/norm.s is the forward), fused with
# the residual connection's gradient. With xhat = (x [- mean]) r, r = 1 / sqrt(mean square + eps)
# (recomputed from x by norm_rows_xhat, bit for bit the forward's), gy = dy * gain:
#   RMSNorm   dx = r (gy - xhat mean(gy xhat))
#   LayerNorm dx = r (gy - mean(gy) - xhat mean(gy xhat))
# (the derivative of y = xhat g [+ b]; Ba et al., arXiv 1607.06450; Zhang & Sennrich, arXiv
# 1910.07467), then dx + the residual path's gradient, rounded once to bf16 (assumption: the add is
# fused into the norm's epilogue, as fused add-norm kernels do, instead of a pass of its own). The
# parameter gradients dgain = sum over rows of dy xhat and dbias = sum of dy (LayerNorm) are
# accumulated per thread block in fp32 in row order and summed over the thread blocks by a second
# kernel (tp/block_backward.s norm_grad_reduce): the two-stage reduction of Apex's fused LayerNorm
# backward (cuComputePartGradGammaBeta, cuComputeGradGammaBeta) in a fixed order.
# The NumPy reference is workloads/block_reference.py norm_backward (same order and roundings).
#
#   norm_bwd_rows dx, x, dy, resid, rows, hidden, layernorm
#       dx[rows][H] = bf16(norm'(x) dy + resid) for bf16 rows x, dy, resid; adds this block's
#       dy xhat (and dy) row by row into the fp32 [H] accumulators at r26 (r27). Needs norm_smem
#       first and the fp32 workspaces gy at r23, tmp at r24 ([rows][H] each) and the row vector
#       c at r25 ([rows]); writes r1 .. r7, r9.

.macro norm_bwd_rows dx, x, dy, resid, rows, hidden, layernorm
    norm_rows_xhat \x, \rows, \hidden, \layernorm       # r22 = xhat, r4 = r, r6 = &H
    vcvt.f32.bf16 r23, \dy, r1
    vmul.f32 r24, r23, r22, r1       # dy xhat
    shl r2, \hidden, 2               # r2 = bytes of an fp32 row
    mov r5, 0
    mov r7, r24
    mov r9, r23
row_\@:
    vadd.f32 r26, r26, r7, \hidden   # dgain += dy xhat, row by row
    beq \layernorm, 0, nobias_\@
    vadd.f32 r27, r27, r9, \hidden   # dbias += dy
nobias_\@:
    add r7, r7, r2
    add r9, r9, r2
    add r5, r5, 1
    blt r5, \rows, row_\@
    vcol_mul.f32 r23, r23, r20, \hidden, r1       # gy = dy gain
    beq \layernorm, 0, rms_\@
    vrow_sum.f32 r3, r23, \hidden, r1
    vrow_div.f32 r3, r3, r6, \rows, \rows         # mean(gy)
rms_\@:
    vmul.f32 r24, r23, r22, r1
    vrow_sum.f32 r25, r24, \hidden, r1
    vrow_div.f32 r25, r25, r6, \rows, \rows       # mean(gy xhat)
    vrow_mul.f32 r24, r22, r25, \hidden, r1
    vsub.f32 r23, r23, r24, r1
    beq \layernorm, 0, scale_\@
    vrow_sub.f32 r23, r23, r3, \hidden, r1
scale_\@:
    vrow_mul.f32 r23, r23, r4, \hidden, r1        # times r
    vcvt.f32.bf16 r24, \resid, r1
    vadd.f32 r23, r23, r24, r1                    # + the residual path's gradient
    vcvt.bf16.f32 \dx, r23, r1
.endm
