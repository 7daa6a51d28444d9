"""wait.all (isa/base.yaml; components/sm_interpreter.py, waiters.py): the warp-wide done-flag
check - one instruction and one coalesced access for a range of flags, sleeping on the first one
not yet set and woken once when all are - pinned on a tiny system: 4 GPUs of one SM each, a
barrier whose arrivals are staggered (GPU g sets its flag on every GPU g x 400 cycles late)."""

import pytest

from conftest import cli_stats_per_engine, mini_system_yaml, run_cli, simulate

KERNEL = """\
.kernel staggered_barrier
.param flags
.param style
    mul r1, %gpu, 400
    sleep r1                          # GPU g arrives g x 400 SM cycles late
    shl r2, %gpu, 3
    add r2, r2, %flags                # &flags[gpu], the same address on every GPU
    mov r3, 0
tell:
    flag.set r3, [r2], 1
    add r3, r3, 1
    blt r3, %ngpu, tell
    bne %style, 0, loop
    wait.all.eq [%flags], 1, %count   # style 0: one warp-wide check of every GPU's flag
    exit
loop:                                 # style 1: the per-flag loop wait.all replaces
    mov r3, 0
each:
    shl r4, r3, 3
    add r4, r4, %flags
    wait.eq [r4], 1
    add r3, r3, 1
    blt r3, %ngpu, each
    exit
"""
GPUS = 4


def _config(tmp_path, style=0, count="%ngpu", kernel=KERNEL, name="staggered_barrier",
            buffers=("flags",)):
    """The barrier kernel `name` (source `kernel`, `%count` replaced by `count`) on one block
    per GPU of the tiny system, with 64-byte i64 control buffers `buffers` as its params."""
    (tmp_path / "k.s").write_text(kernel.replace("%count", str(count)))
    path = tmp_path / "barrier.yaml"
    bufs = "".join(f"    {b}: {{bytes: 64B, region: control, dtype: i64}}\n" for b in buffers)
    params = ", ".join([f'{b}: "@{b}"' for b in buffers] + [f"style: {style}"])
    path.write_text(mini_system_yaml(num_gpus=GPUS, num_sms=1, links=1)
                    + f"workload:\n  mode: timing\n  kernel_files: [{tmp_path / 'k.s'}]\n"
                    + "  buffers:\n" + bufs
                    + f"  launches:\n    - kernel: {name}\n      grid: 1\n"
                    + f"      params: {{{params}}}\n")
    return path


def _ends(sim):
    """Each GPU's kernel end tick (launch stats are numbered over the GPUs)."""
    out = []
    for g in range(GPUS):
        (t,) = [s.value for s in sim.stats
                if s.name.startswith(f"system.gpu{g}.launch") and s.name.endswith(".end_tick")]
        out.append(t)
    return out


def test_one_check_for_the_range_exact_on_a_staggered_barrier(tmp_path):
    """The wait.all block issues 20 instructions (5, 4 x 3 for the flag stores, bne, wait.all,
    exit) and sleeps once, on the first flag not yet set, until the write that completes its
    range; the per-flag loop it replaces issues 5 more per flag and pays one dependent memory
    access for each flag it finds set, one after the other - so every GPU leaves later with the
    loop, by one to two such accesses per GPU here."""
    one = simulate(_config(tmp_path, 0))
    loop = simulate(_config(tmp_path, 1))
    for g in range(GPUS):
        assert one.stats[f"system.gpu{g}.sm0.insts_issued"] == 20
        assert loop.stats[f"system.gpu{g}.sm0.insts_issued"] == 20 + 5 * GPUS
    ends_one, ends_loop = _ends(one), _ends(loop)
    assert ends_one == [4_579_780, 4_637_157, 4_855_736, 5_067_212]
    assert all(a < b for a, b in zip(ends_one, ends_loop))
    # (123 events: the hubs' packetizer runs in the event before it where it is next,
    # run.shortcuts arrival_hub and hub_again; 129 without them, the same stats otherwise)
    assert one.stats["simEvents"] == 123 < loop.stats["simEvents"]


def test_both_engines_give_identical_stats(tmp_path):
    got = cli_stats_per_engine(_config(tmp_path, 0), tmp_path / "out")
    assert got["numba"] == got["python"]


@pytest.mark.parametrize("count", [0, 1025, -1])
def test_a_flag_count_outside_a_block_is_a_clear_error(tmp_path, count):
    r = run_cli("run", _config(tmp_path, 0, count), "-o", tmp_path / "o")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "k.s:" in r.stderr and "wait.all flag count outside 1 .. 1024" in r.stderr
    assert str(count) in r.stderr
