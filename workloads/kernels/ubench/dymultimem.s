# DySHARP microbenchmark (configs/ubench/dymultimem.yaml; components/dysharp.py): GPU 0 sends
# `rows` token rows, each with one dymultimem.st to the same target list (count expert ids t0 ..
# t7, written here), then (reduce = 1) reduces them back with one dymultimem.ld_reduce.add.bf16 each: out[i] =
# the sum over the targets of their copy of row i. Every other GPU only serves the switch.
.kernel dymultimem_roundtrip
.param src                   # [rows][row_bytes] bf16: the rows to send
.param out                   # [rows][row_bytes] bf16: their reductions
.param mm                    # multimem base of the dynamic object (algebraic row i at + i row_bytes)
.param list                  # [8] i64: the target list
.param count
.param rows
.param row_bytes
.param t0
.param t1
.param t2
.param t3
.param t4
.param t5
.param t6
.param t7
.param reduce                # 0: dispatch only
    bne %gpu, 0, done
    st [%list], %t0
    st [%list+8], %t1
    st [%list+16], %t2
    st [%list+24], %t3
    st [%list+32], %t4
    st [%list+40], %t5
    st [%list+48], %t6
    st [%list+56], %t7
    mov r1, 0                    # r1 = row
send:
    bge r1, %rows, sent
    mul r2, r1, %row_bytes
    add r3, r2, %mm
    add r4, r2, %src
    dymultimem.st r3, r4, %row_bytes, %list, %count
    add r1, r1, 1
    bra send
sent:
    fence                        # every target's GPU has written the rows
    beq %reduce, 0, done
    mov r1, 0
reduce:
    bge r1, %rows, reduced
    mul r2, r1, %row_bytes
    add r3, r2, %mm
    add r4, r2, %out
    dymultimem.ld_reduce.add.bf16 r4, r3, %row_bytes, %list, %count
    add r1, r1, 1
    bra reduce
reduced:
    fence
done:
    exit
