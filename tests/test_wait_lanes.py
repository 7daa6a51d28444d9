"""wait.lanes (isa/base.yaml; components/sm_interpreter.py, waiters.py): the warp-wide flag check
with an expected value per flag - a lane per flag loads its own operand and its flag, and the block
goes on once every lane's comparison holds (DeepEP's combine receiver: a lane per rank, one vote
per token). Pinned on a tiny system: 4 GPUs of one SM each; GPU g publishes the value g + 1 in its
flag on every GPU, g x 2000 cycles late; lane i expects i + 1, except the last GPU's lane, which
expects -1 (nothing to wait for: DeepEP's expected head of a rank without the token)."""
import pytest

from conftest import cli_stats_per_engine, run_cli, simulate
from test_wait_all import GPUS, _config as wait_all_config, _ends

KERNEL = """\
.kernel lanes_barrier
.param flags
.param ref
.param style
    mov r3, 0
fill:
    shl r4, r3, 3
    add r4, r4, %ref
    add r5, r3, 1                     # lane i expects GPU i's value, i + 1 ...
    sub r6, %ngpu, 1
    bne r3, r6, store
    mov r5, -1                        # ... but the last GPU's lane has nothing to wait for
store:
    st [r4], r5
    add r3, r3, 1
    blt r3, %ngpu, fill
    mul r1, %gpu, 2000
    sleep r1                          # GPU g publishes g x 2000 SM cycles late
    shl r2, %gpu, 3
    add r2, r2, %flags                # &flags[gpu], the same address on every GPU
    add r7, %gpu, 1
    mov r3, 0
tell:
    flag.set r3, [r2], r7
    add r3, r3, 1
    blt r3, %ngpu, tell
    fence                             # its own flags are everywhere: the end tick is the wait's
    beq %style, 1, loop
    beq %style, 2, every
    wait.lanes.ge [%flags], %ref, %count   # style 0: one check, each lane its own value
    exit
loop:                                 # style 1: the per-flag loop wait.lanes replaces
    mov r3, 0
each:
    shl r4, r3, 3
    add r5, r4, %ref
    ld r5, [r5]
    add r4, r4, %flags
    wait.ge [r4], r5
    add r3, r3, 1
    blt r3, %ngpu, each
    exit
every:                                # style 2: every flag set, the last GPU's included
    wait.all.ge [%flags], 1, %ngpu
    exit
"""


def _config(tmp_path, style=0, count="%ngpu"):
    return wait_all_config(tmp_path, style, count, KERNEL, "lanes_barrier", ("flags", "ref"))


def test_each_lane_waits_for_its_own_value(tmp_path):
    """The wait.lanes block issues 57 instructions and leaves once GPUs 0-2 have published (GPU
    2's flags land at about 6.2 us; GPU 2 itself and GPU 3 leave when their own flags are
    everywhere) - the last GPU's lane (-1) waits for nothing, so GPUs 0-2 leave before a wait.all
    over every flag lets them (GPU 3's flags land at about 7.3 us). The per-flag loop it replaces
    waits for the same values but issues 27 more instructions and pays two dependent accesses
    per flag (its operand, then the flag), so every GPU leaves later with it."""
    lanes = simulate(_config(tmp_path, 0))
    loop = simulate(_config(tmp_path, 1))
    every = simulate(_config(tmp_path, 2))
    for g in range(GPUS):
        assert lanes.stats[f"system.gpu{g}.sm0.insts_issued"] == 57
        assert loop.stats[f"system.gpu{g}.sm0.insts_issued"] == 57 + 27
    ends_lanes, ends_loop, ends_every = _ends(lanes), _ends(loop), _ends(every)
    assert ends_lanes == [6_196_720, 6_203_824, 7_080_326, 8_166_118]
    assert all(a < b for a, b in zip(ends_lanes, ends_loop))
    assert all(a < b for a, b in zip(ends_lanes[:GPUS - 1], ends_every[:GPUS - 1]))
    assert ends_lanes[GPUS - 1] == ends_every[GPUS - 1]
    assert lanes.stats["simEvents"] == 141 < loop.stats["simEvents"]


def test_both_engines_give_identical_stats(tmp_path):
    got = cli_stats_per_engine(_config(tmp_path, 0), tmp_path / "out")
    assert got["numba"] == got["python"]


@pytest.mark.parametrize("count", [0, 1025])
def test_a_flag_count_outside_a_block_is_a_clear_error(tmp_path, count):
    r = run_cli("run", _config(tmp_path, 0, count), "-o", tmp_path / "o")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "k.s:" in r.stderr and "flag count outside 1 .. 1024" in r.stderr
    assert str(count) in r.stderr
