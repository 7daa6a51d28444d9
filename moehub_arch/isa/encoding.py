"""Binary encoding of assembled instructions, shared by the assembler and the engine.

An assembled program is one ``int64`` array ``code[n_instructions, ROW_WIDTH]``. Each row is one
TB-level instruction. The engine never sees mnemonics: it dispatches on the *semantic* id (what the
instruction does, implemented once in the engine) and the *sub-operation* (which variant), while the
ISA data file (``isa/*.yaml``) binds mnemonics to a semantic, a functional unit and costs. That is
what lets a user add an instruction (a new mnemonic with its own costs bound to an existing
semantic) or change a latency without touching the engine.

Row layout (column constants below):

    SEM      semantic id (SEM_*)
    SUBOP    variant of the semantic (ALU_*, CMP_*, VEC_*, ...)
    UNIT     functional unit (UNIT_*)
    LAT      latency in SM cycles, added after the unit's occupancy
    II       initiation interval in SM cycles: minimum occupancy of the unit
    THR      throughput in work units per cycle for size-dependent instructions (bytes/cycle for
             copies, FLOP/cycle for mma, elements/cycle for vector ops); 0 if not size-dependent
    IMM      bit i set => operand slot i holds an immediate value, else a register index
    DTYPE    element type for tensor/vector instructions (DT_*); vector instructions whose result
             type differs from their inputs' carry it shifted: src | dst << DTYPE_DST_SHIFT;
             DTYPE_LSU_LOADS marks a vector instruction whose global sources go through the LSU
    LINE     source line number (for error messages raised by the engine)
    OP0..OP7 operand slots (register index, immediate value, or branch target pc)

Registers: each thread block has NUM_REGS int64 registers. r0..r31 are general purpose; the special
registers (read-only) and the kernel parameters (read-only, set at launch) follow.
"""

ROW_WIDTH = 17
SEM, SUBOP, UNIT, LAT, II, THR, IMM, DTYPE, LINE = range(9)
OP0 = 9
MAX_OPERANDS = ROW_WIDTH - OP0  # 8 (the mma's row strides are its 7th and 8th)

# ---- registers -------------------------------------------------------------------------------
NUM_GENERAL_REGS = 32
REG_GPU = 32       # %gpu    this GPU's index
REG_NGPU = 33      # %ngpu   number of GPUs in the system
REG_SM = 34        # %sm     SM index within the GPU
REG_NSM = 35       # %nsm    SMs per GPU
REG_TB = 36        # %tb     thread-block index within the grid
REG_NTB = 37       # %ntb    grid size (thread blocks per GPU for this launch)
REG_SMEM = 38      # %smem   base address of this TB's shared-memory allocation
REG_CLOCK = 39     # %clock  current SM cycle (read at issue)
REG_TICK = 40      # %tick   current simulated time in ps (read at issue)
SPECIAL_REGS = {
    "gpu": REG_GPU, "ngpu": REG_NGPU, "sm": REG_SM, "nsm": REG_NSM, "tb": REG_TB,
    "ntb": REG_NTB, "smem": REG_SMEM, "clock": REG_CLOCK, "tick": REG_TICK,
}
FIRST_PARAM_REG = 48
MAX_PARAMS = 24     # a persistent MoE kernel takes ~20 buffers and shapes
NUM_REGS = FIRST_PARAM_REG + MAX_PARAMS  # 72

# Shared memory lives in its own address window: an address with this bit set is an offset into
# the issuing SM's shared memory; any other address is a byte address in this GPU's HBM.
SMEM_ADDR_BIT = 1 << 40

# ---- functional units ------------------------------------------------------------------------
UNIT_ALU, UNIT_CTRL, UNIT_LSU, UNIT_TENSOR, UNIT_VECTOR, UNIT_COMM = range(6)
NUM_UNITS = 6
UNIT_NAMES = ("alu", "ctrl", "lsu", "tensor", "vector", "comm")

# ---- element types ---------------------------------------------------------------------------
DT_NONE, DT_F32, DT_BF16, DT_I64 = range(4)
DTYPE_NAMES = ("none", "f32", "bf16", "i64")
DTYPE_BYTES = (0, 4, 2, 8)
DTYPE_DST_SHIFT = 4   # DTYPE column: source type in the low 4 bits, result type above (0 = same)
DTYPE_SRC_MASK = (1 << DTYPE_DST_SHIFT) - 1
# DTYPE column flag of vector instructions whose global (HBM) sources the thread block's warps
# load through the SM's load/store unit (ISA field `lsu_loads`): besides the vector unit, the LSU is
# busy for those bytes (components/sm.py)
DTYPE_LSU_LOADS = 1 << 8

# ---- semantics (what the engine implements) --------------------------------------------------
# The comment after each semantic lists its operands (see SEMANTIC_OPERANDS below).
SEM_NOP = 0       # ()
SEM_EXIT = 1      # ()
SEM_ALU = 2       # (dst, src a, src b)      subop ALU_*; mov uses (dst, src a) and b = 0
SEM_BRANCH = 3    # (src a, src b, label)    subop CMP_*; CMP_ALWAYS uses (label) only
SEM_LD = 4        # (dst, addr)              8-byte word load
SEM_ST = 5        # (addr, src value)        8-byte word store
SEM_COPY = 6      # (src dst_addr, src src_addr, src bytes)       bulk copy within this GPU
SEM_COPY2D = 7    # (dst_addr, src_addr, rows, row_bytes, dst_stride, src_stride)
SEM_MMA = 8       # (c_addr, a_addr, b_addr, m, n, k)  C[m,n] (f32) += A[m,k] @ B[k,n], row-major
SEM_VEC = 9       # (dst_addr, a_addr, b_addr, n, cols) subop VEC_*, element type in DTYPE
SEM_PUT = 10      # (gpu, dst_addr, src_addr, bytes)   async remote write; completes at `fence`
SEM_GET = 11      # (gpu, dst_addr, src_addr, bytes)   async remote read into local dst
SEM_ATOM = 12     # (dst, gpu, addr, value)            blocking fetch-and-op at memory, subop ATOM_*
SEM_FLAG_SET = 13  # (gpu, addr, value)                async 8-byte store of value (local or remote)
SEM_WAIT = 14     # (addr, value)                      sleep until local word CMP value, subop CMP_*
SEM_FENCE = 15    # ()                                 wait until all async ops of this TB completed
SEM_SLEEP = 16    # (cycles)
# MoE-Hub control plane (destination-agnostic communication; components/moehub)
SEM_SEND_EXPERT = 17  # (expert, src_addr, bytes, home, aux)   hand a row to the RPM
SEM_CLAIM = 18        # (rows, base, records, expert)          next ready tile of a local expert
SEM_NOTIFY = 19       # (a, b)  subop NOTIFY_EOS: a = producers; NOTIFY_RELEASE: a = expert, b = base; NOTIFY_REOPEN: none
SEM_SEND_HOME = 20    # (record, src_addr, bytes, base)        combine: row back to its home slot
# NVLink SHARP (in-switch multicast and reduction; components/nvls.py)
SEM_MULTIMEM = 21     # (dst, src, bytes, targets, count)  subop MM_*; the multimem address is dst
#                       (st, red) or src (ld_reduce); targets/count: dymultimem only
# MoE-Hub row-sparse stores (the published ISA, arXiv 2605.05888; components/moehub/rpm.py)
SEM_ROWSP_MALLOC = 22  # (id, expert, row_bytes)                register allocation id -> expert, row size
SEM_ST_ROWSP = 23      # (id, row, offset, src_addr, bytes)    store bytes into row `row` of allocation id
# Multi-expert stores (an ISA experiment beyond the paper; components/moehub/rpm.py): one store names
# several experts on one GPU (bit j of mask: the expert, or allocation id, in register first + j)
SEM_SEND_EXPERTS = 24     # (first, mask, src_addr, bytes, home, aux)  send_to_expert to each named expert
SEM_ST_ROWSP_EXPERTS = 25  # (first, mask, row, src_addr, bytes)       st.rowsp of a whole row to each id
# CAIS compute-aware in-switch loads and reductions (arXiv 2605.05628; components/cais/)
SEM_CAIS = 26          # (gpu, dst, src, bytes, value)  subop CAIS_*; the address at home GPU `gpu` is src (ld) or dst (red); sync: dst = flag, value = sequence
# Counted writes (Blackwell SM100: NVSHMEM counted puts / NCCL's Compute Fabric Transport;
# components/counted_write.py)
SEM_PUT_COUNTED = 27   # (gpu, dst, src, bytes, counter)  put whose landed bytes add to counter at gpu
SEM_WAIT_COUNT = 28    # (counter, expected)               sleep until the local counter >= expected
SEM_WAIT_ALL = 29      # (addr, value, count)   sleep until `count` consecutive local words CMP value
SEM_WAIT_LANES = 30    # (addr, ref, count)  sleep until each of `count` consecutive local words CMP
#                        the word at the same index from ref (a lane per word, its own expected value)
NUM_SEMANTICS = 31
# A block may add semantics of its own, numbered from NUM_SEMANTICS up (below 63): its ISA file
# declares each one's name, number and operands (`semantics:`, isa/loader.py) and its module
# the number and handler (declare.Semantic), as components/switch_counter.py does for ctr.add
# (40: room for the base ISA to grow without renumbering it).
WAIT_ALL_MAX = 1024    # wait.all: one flag per thread (lane) of a block: at most 1024 threads
SEMANTIC_NAMES = (
    "nop", "exit", "alu", "branch", "ld", "st", "copy", "copy2d", "mma", "vec", "put", "get",
    "atom", "flag_set", "wait", "fence", "sleep", "send_to_expert", "claim", "notify", "send_home",
    "multimem", "rowsp_malloc", "st_rowsp", "send_to_experts", "st_rowsp_experts", "cais",
    "put_counted", "wait_count", "wait_all", "wait_lanes",
)
# Named operands of each semantic, in slot order, as (name, kind). Kinds: "reg" (a general
# register written by the instruction), "src" (register, special register, parameter or
# immediate), "addr" (memory operand [base+offset]: TWO slots, base then immediate offset), "label"
# (an immediate pc). An ISA instruction lists the names it takes in assembly order; the others
# are immediate 0 (e.g. `mov` takes (dst, a); `bra` takes (target); `vzero` takes (dst, n)).
SEMANTIC_OPERANDS = {
    SEM_NOP: (), SEM_EXIT: (), SEM_FENCE: (),
    SEM_ALU: (("dst", "reg"), ("a", "src"), ("b", "src")),
    SEM_BRANCH: (("a", "src"), ("b", "src"), ("target", "label")),
    SEM_LD: (("dst", "reg"), ("addr", "addr")),
    SEM_ST: (("addr", "addr"), ("value", "src")),
    SEM_COPY: (("dst", "src"), ("src", "src"), ("bytes", "src")),
    SEM_COPY2D: (("dst", "src"), ("src", "src"), ("rows", "src"), ("row_bytes", "src"),
                 ("dst_stride", "src"), ("src_stride", "src")),
    # lda / ldb: elements between consecutive rows of A's / B's storage (BLAS leading dimension;
    # 0 = dense: the tile's own row length), so that a tile of a wider row-major matrix is one mma
    SEM_MMA: (("c", "src"), ("a", "src"), ("b", "src"), ("m", "src"), ("n", "src"), ("k", "src"),
              ("lda", "src"), ("ldb", "src")),
    SEM_VEC: (("dst", "src"), ("a", "src"), ("b", "src"), ("n", "src"), ("cols", "src")),
    SEM_PUT: (("gpu", "src"), ("dst", "src"), ("src", "src"), ("bytes", "src")),
    SEM_GET: (("gpu", "src"), ("dst", "src"), ("src", "src"), ("bytes", "src")),
    SEM_ATOM: (("dst", "reg"), ("gpu", "src"), ("addr", "addr"), ("value", "src")),
    SEM_FLAG_SET: (("gpu", "src"), ("addr", "addr"), ("value", "src")),
    SEM_WAIT: (("addr", "addr"), ("value", "src")),
    SEM_SLEEP: (("cycles", "src"),),
    SEM_SEND_EXPERT: (("expert", "src"), ("src", "src"), ("bytes", "src"), ("home", "src"),
                      ("aux", "src")),
    SEM_CLAIM: (("rows", "reg"), ("base", "reg"), ("records", "reg"), ("expert", "src")),
    SEM_NOTIFY: (("a", "src"), ("b", "src")),
    SEM_SEND_HOME: (("record", "src"), ("src", "src"), ("bytes", "src"), ("base", "src")),
    SEM_MULTIMEM: (("dst", "src"), ("src", "src"), ("bytes", "src"), ("targets", "src"),
                   ("count", "src")),
    SEM_ROWSP_MALLOC: (("id", "src"), ("expert", "src"), ("row_bytes", "src")),
    SEM_ST_ROWSP: (("id", "src"), ("row", "src"), ("offset", "src"), ("src", "src"),
                   ("bytes", "src")),
    # "reg" here names the first of the registers the store reads (as ld.v8 names the first it writes)
    SEM_SEND_EXPERTS: (("experts", "reg"), ("mask", "src"), ("src", "src"), ("bytes", "src"),
                       ("home", "src"), ("aux", "src")),
    SEM_ST_ROWSP_EXPERTS: (("ids", "reg"), ("mask", "src"), ("row", "src"), ("src", "src"),
                           ("bytes", "src")),
    SEM_CAIS: (("gpu", "src"), ("dst", "src"), ("src", "src"), ("bytes", "src"), ("value", "src")),
    SEM_PUT_COUNTED: (("gpu", "src"), ("dst", "src"), ("src", "src"), ("bytes", "src"),
                      ("counter", "src")),
    SEM_WAIT_COUNT: (("counter", "addr"), ("expected", "src")),
    SEM_WAIT_ALL: (("addr", "addr"), ("value", "src"), ("count", "src")),
    SEM_WAIT_LANES: (("addr", "addr"), ("ref", "src"), ("count", "src")),
}


def operand_slots(semantic, operands=SEMANTIC_OPERANDS):
    """{operand name: (first slot, kind)} for a semantic (`operands`: the table it is in: the base
    ISA's, or a loaded ISA's with the semantics its files add); an addr operand takes two slots."""
    out, slot = {}, 0
    for name, kind in operands[semantic]:
        out[name] = (slot, kind)
        slot += 2 if kind == "addr" else 1
    return out


# ALU sub-operations
(ALU_MOV, ALU_ADD, ALU_SUB, ALU_MUL, ALU_DIV, ALU_REM, ALU_AND, ALU_OR, ALU_XOR, ALU_SHL,
 ALU_SHR, ALU_MIN, ALU_MAX, ALU_SETLT, ALU_SETLE, ALU_SETEQ, ALU_SETNE, ALU_SETGT,
 ALU_SETGE) = range(19)
ALU_NAMES = ("mov", "add", "sub", "mul", "div", "rem", "and", "or", "xor", "shl", "shr", "min",
             "max", "setlt", "setle", "seteq", "setne", "setgt", "setge")

# comparison sub-operations (branches and waits)
CMP_ALWAYS, CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE = range(7)
CMP_NAMES = ("always", "eq", "ne", "lt", "le", "gt", "ge")

# vector sub-operations: dst[i] = f(a[i], b[i]); computed in fp32, stored in DTYPE
VEC_ADD = 0    # dst = a + b
VEC_MUL = 1    # dst = a * b
VEC_AXPY = 2   # dst = dst + b[0] * a       (b addresses one scalar of DTYPE: e.g. a router weight)
VEC_SILU_MUL = 3  # dst = silu(a) * b       (SwiGLU activation)
VEC_ZERO = 4   # dst = 0                    (a, b ignored)
VEC_CVT = 5    # dst = a                    (b ignored): converts a's type to the result type
VEC_SUB = 6    # dst = a - b
VEC_MAX = 7    # dst = max(a, b)            (online softmax: the running row maximum)
VEC_EXP = 8    # dst = exp(a)               (b ignored; special-function unit)
VEC_RSQRT = 9  # dst = 1 / sqrt(a)          (b ignored; special-function unit)
# Row and column operations see a and dst as n / cols rows of `cols` elements (operand cols):
VEC_ROW_MAX = 10    # dst[r] = max over c of a[r, c]        (dst holds n / cols elements)
VEC_ROW_SUM = 11    # dst[r] = sum over c of a[r, c]        (fp32, in increasing c)
VEC_ROW_SUMSQ = 12  # dst[r] = sum over c of a[r, c]^2      (fp32, in increasing c)
VEC_ROW_ADD = 13    # dst[r, c] = a[r, c] + b[r]            (b: one element per row)
VEC_ROW_SUB = 14    # dst[r, c] = a[r, c] - b[r]
VEC_ROW_MUL = 15    # dst[r, c] = a[r, c] * b[r]
VEC_ROW_DIV = 16    # dst[r, c] = a[r, c] / b[r]
VEC_COL_ADD = 17    # dst[r, c] = a[r, c] + b[c]            (b: one element per column)
VEC_COL_MUL = 18    # dst[r, c] = a[r, c] * b[c]
VEC_DSILU_MUL = 19  # dst = silu'(a) * b      (SwiGLU backward: the gate's gradient; element-wise)
VEC_NAMES = ("add", "mul", "axpy", "silu_mul", "zero", "cvt", "sub", "max", "exp", "rsqrt",
             "row_max", "row_sum", "row_sumsq", "row_add", "row_sub", "row_mul", "row_div",
             "col_add", "col_mul", "dsilu_mul")
VEC_FIRST_ROWWISE = VEC_ROW_MAX   # subops from here to VEC_LAST_ROWWISE use the cols operand
VEC_LAST_ROWWISE = VEC_COL_MUL
# Sources read in the input type, dst written (and, for axpy, read together with the scalar b[0])
# in the result type: e.g. vaxpy.f32.bf16 accumulates bf16 rows into an fp32 row.

# mma sub-operations: which global-memory operands are read through the GPU's L2 instead of the
# HBM channel model (the kernel asserts they are L2-resident: expert weights shared by every tile
# after the first touch, a row tile that several thread blocks work on)
MMA_PLAIN = 0  # A and B from HBM
MMA_B_L2 = 1   # B through the L2
MMA_L2 = 2     # A and B through the L2
MMA_A_L2 = 3   # A through the L2, B from HBM (e.g. the first touch of an expert's weights)
MMA_RA = 4     # A reused from the previous mma (already on chip: no memory traffic), B from HBM
MMA_RA_B_L2 = 5  # A reused, B through the L2
MMA_BT_B_L2 = 6  # B given transposed, an [n][k] row-major tile (C += A B^T: attention's Q K^T with
                 # K as stored), read through the L2
MMA_AT = 7       # A given transposed, a [k][m] row-major tile (C += A^T B: a weight gradient X^T dY
                 # with X as stored), A and B through the L2 model unmarked
MMA_BT = 8       # B given transposed (as MMA_BT_B_L2), B unmarked (a weight read for the first time)
MMA_NAMES = ("plain", "b_l2", "l2", "a_l2", "ra", "ra_b_l2", "bt_b_l2", "at", "bt")

# atomic sub-operations
ATOM_ADD = 0       # fetch-and-add: the TB waits for the old value
ATOM_RED_ADD = 1   # posted reduction (PTX red.add): no result, the TB does not wait; local GPU only
ATOM_NAMES = ("add", "red_add")

# load sub-operations: words loaded into consecutive registers dst, dst+1, ... (one access)
LD_NAMES = ("w1", "v2", "v4", "v8")   # 1 << subop words

# put sub-operations: who moves the bytes
PUT_HUB = 0   # the hub reads the source from HBM as it packetizes (a bulk / copy-engine-like put)
PUT_SM = 1    # a warp-level copy: the SM loads the source through its LSU (the TB waits for the
              # loads) and stores it to the destination (posted; completes at fence), DeepEP-style
PUT_ADD_BF16 = 2  # as PUT_HUB, but the destination's memory adds the bf16 elements into what it
                  # holds instead of overwriting (a near-memory update, T3's op-and-store)
PUT_NAMES = ("hub", "sm", "add_bf16")

# notify_ready sub-operations
NOTIFY_EOS = 0       # this producer is done; the GPU's streams end once `a` producers said so
NOTIFY_RELEASE = 1   # the claimed tile of expert `a` at base address `b` may be reused
NOTIFY_REOPEN = 2    # this GPU's streams (both ways) and windows begin a new round (a backward)
NOTIFY_NAMES = ("eos", "release", "reopen")

# multimem sub-operations (PTX multimem.*; the multimem address lies in a multicast object)
MM_ST = 0          # multimem.st: local src -> every member's dst (one packet up, copies down)
MM_RED = 1         # multimem.red.add: every member's dst += local src (element type in DTYPE)
MM_LD_REDUCE = 2   # multimem.ld_reduce.add: local dst = sum over the members of their src
# DySHARP's dynamic multimem (arXiv 2605.05607; components/dysharp.py): the operation also names a
# target list (`count` expert ids, i64 words at `targets`) instead of a static group of GPUs
MM_DY_ST = 3          # dymultimem.st: local src -> the layout row of each target expert
MM_DY_LD_REDUCE = 4   # dymultimem.ld_reduce.add: local dst = sum over the targets of their rows
MM_NAMES = ("st", "red", "ld_reduce", "dy_st", "dy_ld_reduce")

# CAIS sub-operations (ld.cais / red.cais: a flag on a load or reduction request; the switch's merge
# unit merges the same request from the GPUs of a registered group)
CAIS_LD = 0        # ld.cais: local dst = bytes at src on GPU `gpu` (one memory read for the group)
CAIS_RED = 1       # red.cais.add: GPU `gpu`'s dst += local src (merged into one partial sum)
CAIS_SYNC = 2      # sync.cais: pre-access sync of a group of matching thread blocks (the switch's group
                   # sync table writes `value` to the flag dst on every member once all have arrived)
CAIS_NAMES = ("ld", "red", "sync")

# st.rowsp variants (MoE-Hub, arXiv 2605.05888): a `.nop` suffix marks a row non-critical
ROWSP_CRITICAL = 0   # st.rowsp: a critical row
ROWSP_NOP = 1        # st.rowsp.nop: a non-critical row (rpm.schedule paper sends it after critical ones)
ROWSP_NAMES = ("critical", "nop")

SUBOP_NAMES = {
    SEM_ALU: ALU_NAMES, SEM_BRANCH: CMP_NAMES, SEM_WAIT: CMP_NAMES, SEM_WAIT_ALL: CMP_NAMES,
    SEM_WAIT_LANES: CMP_NAMES,
    SEM_VEC: VEC_NAMES,
    SEM_ATOM: ATOM_NAMES, SEM_NOTIFY: NOTIFY_NAMES, SEM_MMA: MMA_NAMES, SEM_LD: LD_NAMES,
    SEM_MULTIMEM: MM_NAMES,
    SEM_PUT: PUT_NAMES,
    SEM_PUT_COUNTED: PUT_NAMES[:2],   # hub or sm (a counted near-memory add is not modelled)
    SEM_CAIS: CAIS_NAMES,
    SEM_ST_ROWSP: ROWSP_NAMES,
}
# Semantics whose subop may be left out of an ISA entry (it then means the first variant).
SUBOP_OPTIONAL = (SEM_MMA, SEM_LD, SEM_PUT, SEM_ST_ROWSP, SEM_PUT_COUNTED)
