"""MoE-Hub's instructions as the SM issues them: what each checks and hands to the hub.

The SM-side half of the MoE-Hub ISA (isa/moehub.yaml): `send_to_expert(s)`, `rowsp.malloc`,
`st.rowsp[.nop|.experts]` validate their operands and give the row to the runtime packet manager
(rpm.py), `claim` asks the data availability manager (dam.py) for a tile of landed rows, and
`notify` releases a tile (its rows leave the AAU's row table, aau.py) or ends a stream. The
SM's interpreter (components/sm_interpreter.py) calls one function per instruction (declared
``Semantic`` by the RPM and the DAM, whose hardware they reach; the call is generated); each
returns True when the instruction completed its issue and False when it raised an error or
blocked the thread block (which then re-executes it).
"""
from ...engine.jit import compiled
from ...engine.state import (ERR_ADDR_RANGE, ERR_MOE_AFTER_EOS, ERR_MOE_CLAIM_LAUNCH,
                             ERR_MOE_EXPERT, ERR_MOE_RELEASE, ERR_MOE_REOPEN, ERR_MOE_ROW_SIZE, ERR_MULTI_EMPTY,
                             ERR_MULTI_GPUS, ERR_MULTI_MANY, ERR_ROWSP_ID, ERR_ROWSP_REGISTER,
                             ERR_ROWSP_ROW, TB_WAIT_CLAIM)
from ...isa.encoding import (NOTIFY_EOS, NOTIFY_REOPEN, NUM_GENERAL_REGS, OP0, ROWSP_NOP, SEM,
                             SEM_ST_ROWSP_EXPERTS, SUBOP)
from ..hbm import raise_error
from ..sm_operands import check_range, is_smem, operand, stall_on_hub, tb_block
from .aau import aau_retry
from .aau_records import record_address, slot_address
from .dam import CLAIM_WAIT, dam_claim, dam_release, dam_reopen
from .rat import aau_release_entries
from .rpm import rpm_end_of_stream, rpm_reopen, rpm_reopen_ready, stream_target
from .rpm_accept import rpm_accept, rpm_accept_experts, rpm_accept_rowsp


@compiled
def claim(st, g, sm, slot, row, tick, cyc):
    """claim rows, slot_addr, record_addr, expert: a tile of the local expert's landed rows from
    the DAM, or the thread block waits for one (it re-executes the claim when the DAM wakes it)."""
    expert = operand(st, slot, row, 3, tick, cyc)
    if not local_expert(st, slot, g, expert):
        return False
    if st.p[0].dam_launch_mode and not st.gpu[g].dam_round:
        raise_error(st, ERR_MOE_CLAIM_LAUNCH, slot, expert)
        return False
    status, rows, first = dam_claim(st, g, slot, expert, tick)
    if status == CLAIM_WAIT:
        tb_block(st, slot, TB_WAIT_CLAIM, tick)
        return False  # re-executed when the DAM wakes this TB
    st.regs[slot, row[OP0]] = rows
    st.regs[slot, row[OP0 + 1]] = slot_address(st, g, expert, first) if rows else 0
    st.regs[slot, row[OP0 + 2]] = record_address(st, g, expert, first) if rows else 0
    return True


@compiled
def notify(st, g, sm, slot, row, tick, cyc):
    """notify.eos peer (the stream to peer ends) / notify expert, addr: the tile at addr of the
    local expert's window is consumed and released / notify.reopen: this GPU's streams and
    windows begin a new round (rpm_reopen, dam_reopen)."""
    if row[SUBOP] == NOTIFY_REOPEN:
        # the DAM first: it refuses before anything changed (its launch not ended)
        if not (rpm_reopen_ready(st, g) and dam_reopen(st, g)):
            raise_error(st, ERR_MOE_REOPEN, slot, g)
            return False
        rpm_reopen(st, g)
        return True
    a = operand(st, slot, row, 0, tick, cyc)
    if row[SUBOP] == NOTIFY_EOS:
        rpm_end_of_stream(st, g, a, tick)
        return True
    if not local_expert(st, slot, g, a):
        return False
    p = st.p[0]
    off = operand(st, slot, row, 1, tick, cyc) - p.win_addr \
        - st.moe_place[a, 1] * p.window_rows * p.row_bytes
    tile = dam_release(st, g, a, off // p.row_bytes) if off >= 0 and off % p.row_bytes == 0 \
        else -1
    if tile < 0:
        raise_error(st, ERR_MOE_RELEASE, slot, off)
        return False
    # the released rows' entries leave the AAU's row table (overflow: spill)
    aau_release_entries(st, g, a, tile * p.tile_rows, p.tile_rows)
    aau_retry(st, g, tick)
    return True


@compiled
def local_expert(st, slot, g, expert):
    if expert < 0 or expert >= st.p[0].num_experts or st.moe_place[expert, 0] != g:
        raise_error(st, ERR_MOE_EXPERT, slot, expert)
        return False
    return True


@compiled
def expert_row(st, slot, expert, nb):
    """send_to_expert(s): the expert exists and the row fits a window slot (False: error raised)."""
    p = st.p[0]
    if expert < 0 or expert >= p.num_experts:
        raise_error(st, ERR_MOE_EXPERT, slot, expert)
        return False
    if nb <= 0 or nb > p.row_bytes:
        raise_error(st, ERR_MOE_ROW_SIZE, slot, nb)
        return False
    return True


@compiled
def send_to_expert(st, g, sm, slot, row, tick, cyc):
    """send_to_expert: validate, then hand the row to the RPM (False: error or stalled)."""
    p = st.p[0]
    expert = operand(st, slot, row, 0, tick, cyc)
    src = operand(st, slot, row, 1, tick, cyc)
    nb = operand(st, slot, row, 2, tick, cyc)
    if not expert_row(st, slot, expert, nb):
        return False
    if is_smem(src) or not check_range(st, slot, src, nb):
        raise_error(st, ERR_ADDR_RANGE, slot, src)
        return False
    sr = st.stream[g * p.num_gpus + st.moe_place[expert, 0]]
    if sr.eos_pending:
        raise_error(st, ERR_MOE_AFTER_EOS, slot, expert)
        return False
    home = operand(st, slot, row, 3, tick, cyc)
    aux = operand(st, slot, row, 4, tick, cyc)
    if not rpm_accept(st, g, slot, expert, src, nb, home, aux, tick):
        stall_on_hub(st, slot, g, tick)
        return False
    return True


@compiled
def rowsp_malloc(st, g, sm, slot, row, tick, cyc):
    """rowsp.malloc id, expert, row_bytes: register allocation `id` in this GPU's hub (the
    MMIO write of a rowspMalloc call): its logical destination (the expert; the placement table
    gives its GPU, the TLB's part) and its row size. The rows land in the expert's receive window
    on that GPU (the base the AAU holds). Re-registering an id overwrites it."""
    p = st.p[0]
    rid = operand(st, slot, row, 0, tick, cyc)
    expert = operand(st, slot, row, 1, tick, cyc)
    nb = operand(st, slot, row, 2, tick, cyc)
    if rid < 0 or rid >= st.rowsp_table.shape[1]:
        raise_error(st, ERR_ROWSP_ID, slot, rid)
        return False
    if expert < 0 or expert >= p.num_experts or nb <= 0 or nb > p.row_bytes:
        raise_error(st, ERR_ROWSP_REGISTER, slot, expert if nb > 0 and nb <= p.row_bytes else nb)
        return False
    st.rowsp_table[g, rid, 0] = expert
    st.rowsp_table[g, rid, 1] = nb
    return True


@compiled
def st_rowsp(st, g, sm, slot, row, tick, cyc):
    """st.rowsp[.nop] id, row, offset, src, bytes: validate, then hand the bytes to the RPM as
    part of row `row` of allocation `id`, .nop marking them non-critical (False: error or
    stalled)."""
    p = st.p[0]
    rid = operand(st, slot, row, 0, tick, cyc)
    if rid < 0 or rid >= st.rowsp_table.shape[1] or st.rowsp_table[g, rid, 0] < 0:
        raise_error(st, ERR_ROWSP_ID, slot, rid)
        return False
    expert = st.rowsp_table[g, rid, 0]
    size = st.rowsp_table[g, rid, 1]
    rowid = operand(st, slot, row, 1, tick, cyc)
    off = operand(st, slot, row, 2, tick, cyc)
    src = operand(st, slot, row, 3, tick, cyc)
    nb = operand(st, slot, row, 4, tick, cyc)
    if rowid < 0 or off < 0 or nb <= 0 or off + nb > size:
        raise_error(st, ERR_ROWSP_ROW, slot, off + nb)
        return False
    if is_smem(src) or not check_range(st, slot, src, nb):
        raise_error(st, ERR_ADDR_RANGE, slot, src)
        return False
    if st.stream[g * p.num_gpus + st.moe_place[expert, 0]].eos_pending:
        raise_error(st, ERR_MOE_AFTER_EOS, slot, expert)
        return False
    status = rpm_accept_rowsp(st, g, slot, rid, expert, size, rowid, off, src, nb,
                              row[SUBOP] == ROWSP_NOP, tick)
    if status < 0:
        raise_error(st, ERR_ROWSP_ROW, slot, off + nb)
        return False
    if status == 0:
        stall_on_hub(st, slot, g, tick)
        return False
    return True


@compiled
def store_experts(st, g, sm, slot, row, tick, cyc):
    """send_to_experts first, mask, src, bytes, home, aux / st.rowsp.experts first, mask, row,
    src, bytes: validate the named experts (bit j of mask: register first + j holds an expert, or
    for rowsp an allocation id), then hand the row to the RPM once (False: error or stalled)."""
    p = st.p[0]
    rowsp = row[SEM] == SEM_ST_ROWSP_EXPERTS
    first = row[OP0]
    mask = operand(st, slot, row, 1, tick, cyc)
    if rowsp:
        home = operand(st, slot, row, 2, tick, cyc)    # the row of the first id (j = 0)
        src = operand(st, slot, row, 3, tick, cyc)
        nb = operand(st, slot, row, 4, tick, cyc)
        aux = 0
    else:
        src = operand(st, slot, row, 2, tick, cyc)
        nb = operand(st, slot, row, 3, tick, cyc)
        home = operand(st, slot, row, 4, tick, cyc)
        aux = operand(st, slot, row, 5, tick, cyc)
    if mask == 0:
        raise_error(st, ERR_MULTI_EMPTY, slot, mask)
        return False
    n = 0
    top = 0
    for j in range(8):
        if (mask >> j) & 1:
            n += 1
            top = j
    if mask < 0 or mask >= 256 or first + top >= NUM_GENERAL_REGS or n > p.rpm_ring:
        raise_error(st, ERR_MULTI_MANY, slot, mask)
        return False
    d = -1
    for j in range(8):
        if not (mask >> j) & 1:
            continue
        v = st.regs[slot, first + j]
        if rowsp:
            if v < 0 or v >= st.rowsp_table.shape[1] or st.rowsp_table[g, v, 0] < 0:
                raise_error(st, ERR_ROWSP_ID, slot, v)
                return False
            if home < 0 or st.rowsp_table[g, v, 1] != nb:
                # whole rows only: rows of several stores are st.rowsp's
                raise_error(st, ERR_ROWSP_ROW, slot, nb)
                return False
            expert = st.rowsp_table[g, v, 0]
        else:
            expert = v
            if not expert_row(st, slot, expert, nb):
                return False
        for i in range(j):
            # one expert named twice (rowsp: also through two ids of one expert): the AAU checks
            # each named expert's window for one free slot
            if (mask >> i) & 1:
                u = st.regs[slot, first + i]
                if (st.rowsp_table[g, u, 0] if rowsp else u) == expert:
                    raise_error(st, ERR_MULTI_GPUS, slot, v)
                    return False
        # one GPU, or with internode per_node one other node (one stream: its forwarding hub's)
        if d < 0:
            d = stream_target(st, g, st.moe_place[expert, 0])
        elif stream_target(st, g, st.moe_place[expert, 0]) != d:
            raise_error(st, ERR_MULTI_GPUS, slot, v)
            return False
    if is_smem(src) or not check_range(st, slot, src, nb):
        raise_error(st, ERR_ADDR_RANGE, slot, src)
        return False
    if st.stream[g * p.num_gpus + d].eos_pending:
        raise_error(st, ERR_MOE_AFTER_EOS, slot, d)
        return False
    status = rpm_accept_experts(st, g, slot, first, mask, src, nb, home, aux, rowsp, tick)
    if status < 0:
        raise_error(st, ERR_ROWSP_ROW, slot, nb)
        return False
    if status == 0:
        stall_on_hub(st, slot, g, tick)
        return False
    return True
