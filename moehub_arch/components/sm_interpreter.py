"""The SM's base instruction interpreter: what each instruction does when its thread block issues it.

`execute` runs the instruction at a thread block's pc (components/sm.py's issue pipeline calls
it once per issued instruction): the base ISA's semantic families - ALU, branch, word loads and
stores, copies, `mma`, vector instructions, puts and gets (counted puts, components/
counted_write.py), flags and atomics, waits, fences, sleep, exit - then the common tail that
occupies the instruction's unit and sets when the thread block may issue again (the model of
components/sm.py's docstring). The extensions' instructions are their modules': MoE-Hub's in
moehub/isa.py, the multimem ones in nvls_gpu.py (DySHARP's dynamic subops in dysharp_isa.py),
CAIS's in cais/isa.py; this interpreter dispatches to them by semantic id, and each returns
whether the instruction completed its issue. What every instruction shares - operands, address
checks, access timing - is sm_operands.py; the functional numerics are sm_numerics.py.
"""
import numpy as np

from ..engine.jit import compiled
from ..engine.clock import cycle_edge
from ..engine.events import push
from ..engine.state import (ERR_ADDR_RANGE, ERR_BAD_GPU, ERR_BAD_SIZE, ERR_CW_COUNTER,
                            ERR_DIV_ZERO, ERR_MISALIGNED, ERR_RED_REMOTE, ERR_REG_RANGE,
                            ERR_UNBACKED_WORD, ERR_WAIT_COUNT, TB_WAIT_FENCE, TB_WAIT_FLAG, TB_WAIT_REMOTE,
                            WAIT_FENCE, WAITLIST_FLAG)
from ..isa.encoding import (ALU_ADD, ALU_AND, ALU_DIV, ALU_MAX, ALU_MIN, ALU_MOV, ALU_MUL, ALU_OR,
                            ALU_REM, ALU_SETEQ, ALU_SETGT, ALU_SETLE, ALU_SETLT, ALU_SETNE, ALU_SHL,
                            ALU_SHR, ALU_SUB, ALU_XOR, ATOM_RED_ADD, CMP_GE, DT_BF16, DTYPE,
                            DTYPE_DST_SHIFT, DTYPE_LSU_LOADS, DTYPE_SRC_MASK, II, LAT, MMA_A_L2,
                            MMA_AT, MMA_B_L2, MMA_BT, MMA_BT_B_L2, MMA_L2, MMA_RA, MMA_RA_B_L2,
                            NUM_GENERAL_REGS, OP0, PUT_ADD_BF16, PUT_SM, SEM, SEM_ALU, SEM_ATOM,
                            SEM_BRANCH, SEM_COPY, SEM_COPY2D, SEM_EXIT, SEM_FENCE, SEM_FLAG_SET,
                            SEM_GET, SEM_LD, SEM_MMA, SEM_NOP, SEM_PUT, SEM_PUT_COUNTED,
                            SEM_SEND_HOME, SEM_SLEEP, SEM_ST, SEM_VEC, SEM_WAIT, SEM_WAIT_ALL,
                            SEM_WAIT_COUNT, SEM_WAIT_LANES, SUBOP, THR, VEC_ADD, VEC_AXPY, VEC_COL_ADD, VEC_COL_MUL,
                            VEC_DSILU_MUL, VEC_FIRST_ROWWISE, VEC_LAST_ROWWISE, VEC_MAX, VEC_MUL,
                            VEC_ROW_ADD, VEC_ROW_DIV, VEC_ROW_MAX, VEC_ROW_MUL, VEC_ROW_SUB,
                            VEC_ROW_SUM, VEC_ROW_SUMSQ, VEC_SILU_MUL, VEC_SUB, VEC_ZERO,
                            WAIT_ALL_MAX)
from .hbm import (copy_overlapping, hbm_access, hbm_access_paced, move_bytes, raise_error,
                  read_word, update_bytes_bf16, write_word)
from .l2 import l2_operand_read_span
from .hub import REQ_ATOM, REQ_GET, REQ_PUT, REQ_STORE, atomic_ticks, hub_room_for, hub_submit
from .counted_write import (counted_local_put, counted_put_issued, counted_wait_issued,
                            counter_add, counter_ok)
from .nic import rdma_message
from .moehub.dam import dam_block_exited
from .scheduler import block_exit
from .waiters import add_waiter, compare, notify_stores
from .wakeups import tb_resume
from .sm_operands import (charge_unit, check_hbm_word, check_range, is_smem, mem_access,
                          mem_access_paced, occupy_lsu, operand, pace_ticks, stall_on_hub,
                          tb_block, tb_bytes)
from .sm_numerics import mma_functional, vec_functional
from .dysharp_ready import dysharp_ready_word
from .dysharp_tracker import dysharp_counter_added
# the extensions' instructions: declared by their blocks (declare.Semantic), called through the
# generated chain
from ..engine import extension

EV_LOCAL_DONE = 6    # a0 = TB slot: an asynchronous same-GPU put/get completed (declared in sm.py)

# Semantics that neither touch memory, the hub or the links nor end the thread block: a TB that
# issues only these for run.livelock_interval is reported as livelocked (watchdog.py). Every other
# semantic stamps the TB's `progress` tick when it issues: one shift, test and store per
# instruction. New semantics count as progress unless added here (never a false report). `sleep`
# is not idle: a sleeping TB waits for time as others wait for a flag (a deliberate back-off);
# it stamps its wake-up tick.
IDLE_SEMANTICS = (1 << SEM_NOP) | (1 << SEM_ALU) | (1 << SEM_BRANCH) | (1 << SEM_FENCE)


@compiled
def execute(st, slot, sm, tick, cyc):
    """Execute the instruction at the TB's pc (all semantics; dispatch by integer semantic id)."""
    pc = st.tb[slot].pc
    row = st.code[pc]
    sem = row[SEM]
    sub = row[SUBOP]
    g = sm // st.p[0].sms_per_gpu
    P = st.p[0].sm_period_fs
    occ = row[II]          # unit occupancy, cycles
    lat = row[LAT]         # extra cycles until the TB may issue again
    work = 0               # work units for size-dependent instructions
    mem_done = tick        # completion of memory accesses
    next_pc = pc + 1
    if not (IDLE_SEMANTICS >> sem) & 1:
        st.tb[slot].progress = tick

    if sem == SEM_ALU:
        a = operand(st, slot, row, 1, tick, cyc)
        b = operand(st, slot, row, 2, tick, cyc)
        if sub == ALU_MOV:
            v = a
        elif sub == ALU_ADD:
            v = a + b
        elif sub == ALU_SUB:
            v = a - b
        elif sub == ALU_MUL:
            v = a * b
        elif sub == ALU_DIV or sub == ALU_REM:
            if b == 0:
                raise_error(st, ERR_DIV_ZERO, slot, a)
                return
            # C semantics (truncate toward zero), the same in both engines
            qa = abs(a) // abs(b)
            if (a < 0) != (b < 0):
                qa = -qa
            v = qa if sub == ALU_DIV else a - qa * b
        elif sub == ALU_AND:
            v = a & b
        elif sub == ALU_OR:
            v = a | b
        elif sub == ALU_XOR:
            v = a ^ b
        elif sub == ALU_SHL:
            v = a << b
        elif sub == ALU_SHR:
            v = a >> b
        elif sub == ALU_MIN:
            v = min(a, b)
        elif sub == ALU_MAX:
            v = max(a, b)
        elif sub == ALU_SETLT:
            v = 1 if a < b else 0
        elif sub == ALU_SETLE:
            v = 1 if a <= b else 0
        elif sub == ALU_SETEQ:
            v = 1 if a == b else 0
        elif sub == ALU_SETNE:
            v = 1 if a != b else 0
        elif sub == ALU_SETGT:
            v = 1 if a > b else 0
        else:  # ALU_SETGE
            v = 1 if a >= b else 0
        st.regs[slot, row[OP0]] = v

    elif sem == SEM_BRANCH:
        a = operand(st, slot, row, 0, tick, cyc)
        b = operand(st, slot, row, 1, tick, cyc)
        if compare(sub, a, b):
            next_pc = row[OP0 + 2]

    elif sem == SEM_LD or sem == SEM_ST:
        ai = 1 if sem == SEM_LD else 0
        addr = operand(st, slot, row, ai, tick, cyc) + row[OP0 + ai + 1]
        if addr % 8 != 0:
            raise_error(st, ERR_MISALIGNED, slot, addr)
            return
        if not check_range(st, slot, addr, 8):
            return
        view = tb_bytes(st, g, sm, addr, 8)
        if view.shape[0] == 0:
            raise_error(st, ERR_UNBACKED_WORD, slot, addr)
            return
        if sem == SEM_LD:
            nw = 1 << sub                  # ld.vN: N words into dst .. dst + N - 1, one access
            if row[OP0] + nw > NUM_GENERAL_REGS:
                raise_error(st, ERR_REG_RANGE, slot, row[OP0])
                return
            if nw > 1:
                if not check_range(st, slot, addr, 8 * nw):
                    return
                view = tb_bytes(st, g, sm, addr, 8 * nw)
                if view.shape[0] == 0:
                    raise_error(st, ERR_UNBACKED_WORD, slot, addr)
                    return
            words = view.view(np.int64)
            for i in range(nw):
                st.regs[slot, row[OP0] + i] = words[i]
            mem_done = mem_access(st, g, addr, 8 * nw, tick, False)
        else:
            words = view.view(np.int64)
            words[0] = operand(st, slot, row, 2, tick, cyc)
            visible = mem_access(st, g, addr, 8, tick, True)
            if not is_smem(addr):
                notify_stores(st, g, addr, 8, visible)
            # stores are posted: the TB does not wait for the memory write

    elif sem == SEM_COPY or sem == SEM_COPY2D:
        dst = operand(st, slot, row, 0, tick, cyc)
        src = operand(st, slot, row, 1, tick, cyc)
        if sem == SEM_COPY:
            rows = 1
            row_bytes = operand(st, slot, row, 2, tick, cyc)
            dst_stride = row_bytes
            src_stride = row_bytes
        else:
            rows = operand(st, slot, row, 2, tick, cyc)
            row_bytes = operand(st, slot, row, 3, tick, cyc)
            dst_stride = operand(st, slot, row, 4, tick, cyc)
            src_stride = operand(st, slot, row, 5, tick, cyc)
        if rows < 0 or row_bytes < 0:
            raise_error(st, ERR_BAD_SIZE, slot, rows * row_bytes)
            return
        if rows > 0 and row_bytes > 0:
            span_d = (rows - 1) * dst_stride + row_bytes
            span_s = (rows - 1) * src_stride + row_bytes
            if not check_range(st, slot, dst, span_d) or not check_range(st, slot, src, span_s):
                return
            pace = pace_ticks(st, row, rows * row_bytes)
            if rows == 1 or (dst_stride == row_bytes and src_stride == row_bytes):
                # contiguous: one access per side
                total = rows * row_bytes
                rd = mem_access_paced(st, g, src, total, tick, False, pace)
                wr = mem_access_paced(st, g, dst, total, tick, True, pace)
                mem_done = max(rd, wr)
            else:
                for r in range(rows):
                    rd = mem_access_paced(st, g, src + r * src_stride, row_bytes, tick, False, pace)
                    wr = mem_access_paced(st, g, dst + r * dst_stride, row_bytes, tick, True, pace)
                    mem_done = max(mem_done, rd, wr)
            for r in range(rows):
                copy_functional(st, g, sm, slot, dst + r * dst_stride, src + r * src_stride,
                                 row_bytes)
            if not is_smem(dst):
                notify_stores(st, g, dst, span_d, mem_done)
        work = rows * row_bytes

    elif sem == SEM_MMA:
        c_addr = operand(st, slot, row, 0, tick, cyc)
        a_addr = operand(st, slot, row, 1, tick, cyc)
        b_addr = operand(st, slot, row, 2, tick, cyc)
        m = operand(st, slot, row, 3, tick, cyc)
        n = operand(st, slot, row, 4, tick, cyc)
        k = operand(st, slot, row, 5, tick, cyc)
        lda = operand(st, slot, row, 6, tick, cyc)
        ldb = operand(st, slot, row, 7, tick, cyc)
        dt = row[DTYPE] & DTYPE_SRC_MASK
        es = 2 if dt == DT_BF16 else 4
        if m <= 0 or n <= 0 or k <= 0:
            raise_error(st, ERR_BAD_SIZE, slot, m * n * k)
            return
        a_t = sub == MMA_AT
        b_t = sub == MMA_BT_B_L2 or sub == MMA_BT
        # storage shapes: A [m][k] ([k][m] transposed), B [k][n] ([n][k] transposed); a row
        # stride (lda, ldb elements; 0 = dense) at least the stored row's length
        a_rows, a_cols = (k, m) if a_t else (m, k)
        b_rows, b_cols = (n, k) if b_t else (k, n)
        if lda == 0:
            lda = a_cols
        if ldb == 0:
            ldb = b_cols
        if lda < a_cols or ldb < b_cols:
            raise_error(st, ERR_BAD_SIZE, slot, lda if lda < a_cols else ldb)
            return
        a_span = ((a_rows - 1) * lda + a_cols) * es
        b_span = ((b_rows - 1) * ldb + b_cols) * es
        if (not check_range(st, slot, a_addr, a_span) or not check_range(st, slot, b_addr, b_span)
                or not check_range(st, slot, c_addr, m * n * 4)):
            return
        pace = pace_ticks(st, row, 2 * m * n * k)   # operands stream over the tensor work
        # global operands go through the L2 (components/l2.py): marked ones (a row tile several TBs
        # share, weights after their first touch) hit while resident, the others are cold reads. A
        # strided operand moves its m k (k n) elements; its residency is that of its whole span
        if sub == MMA_RA or sub == MMA_RA_B_L2:
            ra = tick   # the same A tile as the previous mma: already on chip (a fused mainloop)
        elif is_smem(a_addr):
            ra = mem_access_paced(st, g, a_addr, m * k * es, tick, False, pace)
        else:
            ra = l2_operand_read_span(st, g, a_addr, a_span, m * k * es, tick, pace,
                                      sub == MMA_L2 or sub == MMA_A_L2)
        if is_smem(b_addr):
            rb = mem_access_paced(st, g, b_addr, k * n * es, tick, False, pace)
        else:
            rb = l2_operand_read_span(st, g, b_addr, b_span, k * n * es, tick, pace,
                                      sub == MMA_B_L2 or sub == MMA_L2 or sub == MMA_RA_B_L2
                                      or sub == MMA_BT_B_L2)
        rc = mem_access_paced(st, g, c_addr, m * n * 4, tick, False, pace)
        wc = mem_access_paced(st, g, c_addr, m * n * 4, tick, True, pace)
        mem_done = max(ra, rb, rc, wc)
        va = tb_bytes(st, g, sm, a_addr, a_span)
        vb = tb_bytes(st, g, sm, b_addr, b_span)
        vc = tb_bytes(st, g, sm, c_addr, m * n * 4)
        if vc.shape[0] > 0:
            if va.shape[0] == 0 or vb.shape[0] == 0:
                raise_error(st, ERR_UNBACKED_WORD, slot, a_addr)
                return
            mma_functional(st, va, vb, vc, m, n, k, dt, a_t, b_t, lda, ldb)
        work = 2 * m * n * k

    elif sem == SEM_VEC:
        d_addr = operand(st, slot, row, 0, tick, cyc)
        a_addr = operand(st, slot, row, 1, tick, cyc)
        b_addr = operand(st, slot, row, 2, tick, cyc)
        n = operand(st, slot, row, 3, tick, cyc)
        cols = operand(st, slot, row, 4, tick, cyc)
        dt = row[DTYPE] & DTYPE_SRC_MASK          # the sources' element type
        dt_dst = (row[DTYPE] >> DTYPE_DST_SHIFT) & DTYPE_SRC_MASK   # the result's, if it differs
        if dt_dst == 0:
            dt_dst = dt
        es = 2 if dt == DT_BF16 else 4
        es_dst = 2 if dt_dst == DT_BF16 else 4
        if n < 0:
            raise_error(st, ERR_BAD_SIZE, slot, n)
            return
        rowwise = VEC_FIRST_ROWWISE <= sub <= VEC_LAST_ROWWISE
        if rowwise and (cols <= 0 or n % cols != 0):
            raise_error(st, ERR_BAD_SIZE, slot, cols)   # rows of `cols` elements must tile n
            return
        if not rowwise:
            cols = 1
        rows = n // cols
        reduce = sub == VEC_ROW_MAX or sub == VEC_ROW_SUM or sub == VEC_ROW_SUMSQ
        nb = n * es
        nb_dst = (rows if reduce else n) * es_dst
        # bytes of b read: n elements (element-wise), one per row or per column, or none
        if (sub == VEC_ADD or sub == VEC_MUL or sub == VEC_SILU_MUL or sub == VEC_SUB or sub == VEC_MAX
                or sub == VEC_DSILU_MUL):
            nb_b = nb
        elif sub == VEC_ROW_ADD or sub == VEC_ROW_SUB or sub == VEC_ROW_MUL or sub == VEC_ROW_DIV:
            nb_b = rows * es
        elif sub == VEC_COL_ADD or sub == VEC_COL_MUL:
            nb_b = cols * es
        else:
            nb_b = 0
        if not check_range(st, slot, d_addr, nb_dst):
            return
        pace = pace_ticks(st, row, n)
        mem_done = mem_access_paced(st, g, d_addr, nb_dst, tick, True, pace)
        uses_a = sub != VEC_ZERO
        if uses_a:
            if not check_range(st, slot, a_addr, nb):
                return
            mem_done = max(mem_done, mem_access_paced(st, g, a_addr, nb, tick, False, pace))
        if nb_b > 0:
            if not check_range(st, slot, b_addr, nb_b):
                return
            mem_done = max(mem_done, mem_access_paced(st, g, b_addr, nb_b, tick, False, pace))
        if sub == VEC_AXPY:
            if not check_range(st, slot, b_addr, es_dst):
                return
            mem_done = max(mem_done, mem_access_paced(st, g, d_addr, nb_dst, tick, False, pace),
                           mem_access(st, g, b_addr, es_dst, tick, False))
        vd = tb_bytes(st, g, sm, d_addr, nb_dst)
        if vd.shape[0] > 0 and n > 0:
            va = tb_bytes(st, g, sm, a_addr, nb) if uses_a else vd
            if nb_b > 0:
                vb = tb_bytes(st, g, sm, b_addr, nb_b)
            elif sub == VEC_AXPY:
                vb = tb_bytes(st, g, sm, b_addr, es_dst)
            else:
                vb = vd
            if (uses_a and va.shape[0] == 0) or vb.shape[0] == 0:
                raise_error(st, ERR_UNBACKED_WORD, slot, a_addr)
                return
            vec_functional(sub, vd, va, vb, n, dt, dt_dst, cols)
        if row[DTYPE] & DTYPE_LSU_LOADS:
            # the warps load the global sources into registers through the load/store unit
            # (DeepEP's combine receivers: ld.global of each BF16 row, then FP32 adds): the LSU
            # moves those bytes after what it already has queued, and the sum needs them
            lb = 0
            if uses_a and not is_smem(a_addr):
                lb += nb
            if nb_b > 0 and not is_smem(b_addr):
                lb += nb_b
            if lb > 0:
                mem_done = max(mem_done, occupy_lsu(st, sm, tick, lb))
        if not is_smem(d_addr):
            notify_stores(st, g, d_addr, nb_dst, mem_done)
        work = n

    elif (extension.SEMANTICS >> sem) & 1:
        # an instruction a block adds (declare.Semantic: MoE-Hub's stores, claim and notify,
        # multimem and dymultimem, CAIS, the switch counters): the chain to its block's handler
        # is generated (engine/extension.py)
        if not extension.execute(st, sem, g, sm, slot, row, tick, cyc):
            return

    elif sem == SEM_PUT or sem == SEM_GET or sem == SEM_SEND_HOME or sem == SEM_PUT_COUNTED:
        counter = -1   # put.counted (counted_write.py): the counter's address at the peer
        if sem == SEM_SEND_HOME:
            # combine: the completion record names the row's home GPU and slot
            rec = operand(st, slot, row, 0, tick, cyc)
            if not check_hbm_word(st, slot, rec) or not check_hbm_word(st, slot, rec + 8):
                return
            src = operand(st, slot, row, 1, tick, cyc)
            nb = operand(st, slot, row, 2, tick, cyc)
            peer = read_word(st, g, rec)
            dst = operand(st, slot, row, 3, tick, cyc) + read_word(st, g, rec + 8) * nb
        else:
            rec = 0
            peer = operand(st, slot, row, 0, tick, cyc)
            dst = operand(st, slot, row, 1, tick, cyc)
            src = operand(st, slot, row, 2, tick, cyc)
            nb = operand(st, slot, row, 3, tick, cyc)
        if peer < 0 or peer >= st.p[0].num_gpus:
            raise_error(st, ERR_BAD_GPU, slot, peer)
            return
        if sem == SEM_PUT_COUNTED:
            counter = operand(st, slot, row, 4, tick, cyc)
            if not counter_ok(st, slot, counter):
                return
            if rdma_message(st, g, peer):
                raise_error(st, ERR_CW_COUNTER, slot, peer)
                return
        if nb < 0 or is_smem(dst) or is_smem(src):
            raise_error(st, ERR_ADDR_RANGE if nb >= 0 else ERR_BAD_SIZE, slot, dst)
            return
        update = sem == SEM_PUT and sub == PUT_ADD_BF16   # near-memory add at the destination
        if update and nb % 2:
            raise_error(st, ERR_BAD_SIZE, slot, nb)         # whole bf16 elements only
            return
        if not check_range(st, slot, dst, nb) or not check_range(st, slot, src, nb):
            return
        if nb > 0 and (sem == SEM_PUT or sem == SEM_PUT_COUNTED) and sub == PUT_SM:
            # warp-level copy: the TB's warps load src through the LSU (paced over the unit's
            # occupancy) and wait for the loads; the stores are posted
            if peer != g and not hub_room_for(st, g, REQ_PUT, slot, peer):
                stall_on_hub(st, slot, g, tick)
                return
            work = 2 * nb                     # every byte loaded, then stored, through the LSU
            pace = pace_ticks(st, row, work)
            mem_done = hbm_access_paced(st, g, src, nb, tick, False, pace)
            st.tb[slot].outstanding += 1
            if peer == g:
                done = hbm_access_paced(st, g, dst, nb, mem_done, True, pace)
                move_bytes(st, g, src, g, dst, nb, slot)
                notify_stores(st, g, dst, nb, done)
                push(st, done, EV_LOCAL_DONE, slot, 0)
                if counter >= 0:
                    counted_local_put(st, g, nb)
                    notify_stores(st, g, counter, 8, counter_add(st, g, counter, nb, 1, done))
            else:
                # the hub carries the stores (store packets) from when the loads delivered them
                hub_submit(st, g, REQ_PUT, slot, peer, dst, src, nb, 0, 0, tick, mem_done)
                if counter >= 0:
                    counted_put_issued(st, g, st.free_reqs[g, st.gpu[g].free_top], counter, nb)
        elif nb > 0:
            if peer == g:
                # same GPU: an asynchronous copy through the memory system
                done = max(hbm_access(st, g, src, nb, tick, False), hbm_access(st, g, dst, nb, tick, True))
                if update:
                    # the memory adds the elements in place (T3's near-memory op-and-store): the
                    # channels see the write; the read of the old value stays in the DRAM
                    update_bytes_bf16(st, g, src, g, dst, nb, slot)
                else:
                    move_bytes(st, g, src, g, dst, nb, slot)
                notify_stores(st, g, dst, nb, done)
                st.tb[slot].outstanding += 1
                push(st, done, EV_LOCAL_DONE, slot, 0)
                if counter >= 0:
                    counted_local_put(st, g, nb)
                    notify_stores(st, g, counter, 8, counter_add(st, g, counter, nb, 1, done))
            else:
                kind = REQ_GET if sem == SEM_GET else REQ_PUT
                if not hub_submit(st, g, kind, slot, peer, dst, src, nb, 1 if update else 0, 0,
                                  tick, -1):
                    stall_on_hub(st, slot, g, tick)
                    return
                st.tb[slot].outstanding += 1
                if counter >= 0:
                    # the request hub_submit just took is the one on top of the free stack
                    counted_put_issued(st, g, st.free_reqs[g, st.gpu[g].free_top], counter, nb)
        if sem == SEM_SEND_HOME:
            mem_done = hbm_access(st, g, rec, 16, tick, False)  # the record was read
            st.gpu[g].combine_rows += 1

    elif sem == SEM_FLAG_SET or sem == SEM_ATOM:
        base = 1 if sem == SEM_ATOM else 0
        peer = operand(st, slot, row, base, tick, cyc)
        addr = operand(st, slot, row, base + 1, tick, cyc) + row[OP0 + base + 2]
        value = operand(st, slot, row, base + 3, tick, cyc)
        if peer < 0 or peer >= st.p[0].num_gpus:
            raise_error(st, ERR_BAD_GPU, slot, peer)
            return
        if not check_hbm_word(st, slot, addr):
            return
        if sem == SEM_ATOM and sub == ATOM_RED_ADD:
            if peer != g:
                raise_error(st, ERR_RED_REMOTE, slot, peer)
                return
            # posted reduction at memory: the TB goes on; later readers see it once it is done
            done_at = hbm_access(st, g, addr, 8, tick, True) + atomic_ticks(st)
            st.gpu[g].hbm_atomics += 1
            write_word(st, g, addr, read_word(st, g, addr) + value)
            notify_stores(st, g, addr, 8, done_at)
            if st.p[0].dy_recycle:
                dysharp_counter_added(st, g, addr, read_word(st, g, addr), done_at)
        elif peer == g:
            if sem == SEM_FLAG_SET:
                # the word's value before the store: only a ready queue asks
                old = read_word(st, g, addr) if st.p[0].dy_ready_queue else 0
                write_word(st, g, addr, value)
                done_at = hbm_access(st, g, addr, 8, tick, True)
                notify_stores(st, g, addr, 8, done_at)
                if st.p[0].dy_ready_queue:
                    # a token's ready word: the tracker may append it to its ready queue
                    dysharp_ready_word(st, g, addr, old, done_at)
            else:
                mem_done = hbm_access(st, g, addr, 8, tick, True) + atomic_ticks(st)
                st.gpu[g].hbm_atomics += 1
                old = read_word(st, g, addr)
                write_word(st, g, addr, old + value)
                st.regs[slot, row[OP0]] = old
                notify_stores(st, g, addr, 8, mem_done)
                if st.p[0].dy_recycle:
                    # a token-tracker tile's finished-job counter frees its entry (dysharp_tracker.py)
                    dysharp_counter_added(st, g, addr, old + value, mem_done)
        else:
            kind = REQ_STORE if sem == SEM_FLAG_SET else REQ_ATOM
            if not hub_submit(st, g, kind, slot, peer, addr, 0, 8, value, row[OP0], tick, -1):
                stall_on_hub(st, slot, g, tick)
                return
            if sem == SEM_FLAG_SET:
                st.tb[slot].outstanding += 1
            else:
                charge_unit(st, sm, row, tick, cyc, occ)
                st.sm[sm].insts += 1
                st.tb[slot].pc = next_pc
                tb_block(st, slot, TB_WAIT_REMOTE, tick)
                return

    elif (sem == SEM_WAIT or sem == SEM_WAIT_COUNT or sem == SEM_WAIT_ALL
          or sem == SEM_WAIT_LANES):
        addr = operand(st, slot, row, 0, tick, cyc) + row[OP0 + 1]
        value = operand(st, slot, row, 2, tick, cyc)
        # wait.all: `count` consecutive words, a warp's lanes (a block's threads) each loading one
        # in a single coalesced access and the block going on once every one satisfies the
        # comparison (a done-flag check over the GPUs); one word otherwise. wait.lanes: the same,
        # each lane comparing its word with its own expected value, word i of `ref` (value is
        # then ref's address: the lanes load their operands in one more coalesced access)
        n = 1
        ref = -1
        if sem == SEM_WAIT_ALL or sem == SEM_WAIT_LANES:
            n = operand(st, slot, row, 3, tick, cyc)
            if n < 1 or n > WAIT_ALL_MAX:
                raise_error(st, ERR_WAIT_COUNT, slot, n)
                return
        # wait.count (counted_write.py): until the counter holds at least the expected bytes
        cmp = CMP_GE if sem == SEM_WAIT_COUNT else sub
        if sem == SEM_WAIT_COUNT:
            if not counter_ok(st, slot, addr):
                return
        elif not check_hbm_word(st, slot, addr) or (
                n > 1 and not check_hbm_word(st, slot, addr + 8 * (n - 1))):
            return
        mem_done = 0
        if sem == SEM_WAIT_LANES:
            ref = value
            if not check_hbm_word(st, slot, ref) or (
                    n > 1 and not check_hbm_word(st, slot, ref + 8 * (n - 1))):
                return
            mem_done = hbm_access(st, g, ref, 8 * n, tick, False)
        mem_done = max(mem_done, hbm_access(st, g, addr, 8 * n, tick, False))
        # the first word that does not satisfy the comparison (n: every one does)
        k = 0
        while k < n:
            if ref >= 0:
                value = read_word(st, g, ref + 8 * k)
            if not compare(cmp, read_word(st, g, addr + 8 * k), value):
                break
            k += 1
        satisfied = k == n
        if sem == SEM_WAIT_COUNT:
            counted_wait_issued(st, g, slot, not satisfied)
        if not satisfied:
            # sleep on that word; a write that satisfies it checks the rest of the range in the
            # same poll (waiters.notify_stores) and wakes the block once all are satisfied
            charge_unit(st, sm, row, tick, cyc, occ)
            st.sm[sm].insts += 1
            st.tb[slot].pc = next_pc
            st.tb[slot].wait_addr = addr + 8 * k
            st.tb[slot].wait_end = addr + 8 * n
            st.tb[slot].wait_ref = ref + 8 * k if ref >= 0 else -1
            st.tb[slot].wait_cmp = cmp
            st.tb[slot].wait_value = value
            add_waiter(st, g, WAITLIST_FLAG, slot)
            tb_block(st, slot, TB_WAIT_FLAG, tick)
            return

    elif sem == SEM_FENCE:
        if st.tb[slot].outstanding > 0:
            charge_unit(st, sm, row, tick, cyc, occ)
            st.sm[sm].insts += 1
            st.tb[slot].pc = next_pc
            tb_block(st, slot, TB_WAIT_FENCE, tick)
            return

    elif sem == SEM_SLEEP:
        lat += max(0, operand(st, slot, row, 0, tick, cyc))
        # a sleeping TB waits for time, as others wait for a flag: livelock detection counts
        # from its wake-up
        st.tb[slot].progress = cycle_edge(cyc + occ + lat, P)

    elif sem == SEM_EXIT:
        if st.tb[slot].outstanding > 0:
            # exit implies a fence: wait, then execute exit again
            tb_block(st, slot, TB_WAIT_FENCE, tick)
            return
        st.sm[sm].insts += 1
        dam_block_exited(st, slot, tick)   # a DAM-started block counts its group down
        block_exit(st, slot, tick)
        return

    # SEM_NOP falls through
    thr = row[THR]
    if thr > 0 and work > 0:
        occ = max(occ, (work + thr - 1) // thr)
    charge_unit(st, sm, row, tick, cyc, occ)
    st.sm[sm].insts += 1
    st.tb[slot].pc = next_pc
    ready = cycle_edge(cyc + occ + lat, P)
    if mem_done > ready:
        ready = mem_done
    st.tb[slot].ready = ready


@compiled
def copy_functional(st, g, sm, slot, dst, src, nbytes):
    vd = tb_bytes(st, g, sm, dst, nbytes)
    if vd.shape[0] == 0:
        return
    vs = tb_bytes(st, g, sm, src, nbytes)
    if vs.shape[0] == 0:
        raise_error(st, ERR_UNBACKED_WORD, slot, src)
        return
    copy_overlapping(vd, vs, nbytes)


@compiled
def local_done(st, slot, tick):
    """EV_LOCAL_DONE: an asynchronous same-GPU put/get finished."""
    st.tb[slot].outstanding -= 1
    if st.tb[slot].outstanding == 0 and st.tb[slot].state == TB_WAIT_FENCE:
        tb_resume(st, slot, tick, WAIT_FENCE)
