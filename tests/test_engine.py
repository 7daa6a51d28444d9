"""Engine properties: Numba == pure-Python engine, determinism, conservation, clean end state."""
import re

import numpy as np
import pytest

from moehub_arch.engine.state import TB_EMPTY
from moehub_arch.components.packet import packets_in_use

from conftest import (check_timer_wheel, cli_stats_per_engine, load, mini_system, model_stats,
                      simulate)

# A 4-GPU all-to-all small enough for the pure-Python engine (~18 k events; its comparison runs half).
ALLTOALL_SMALL = mini_system(num_gpus=4, num_sms=4, links=2) + [
    "workload.buffers.send.bytes=64KB", "workload.buffers.recv.bytes=64KB",
    "workload.launches.0.params.bytes_per_peer=16384", "workload.launches.0.params.chunk=4096"]

# A larger all-to-all for conservation checks (Numba only).
ALLTOALL_MEDIUM = mini_system(num_gpus=4, num_sms=8, links=4) + [
    "workload.buffers.send.bytes=1MB", "workload.buffers.recv.bytes=1MB",
    "workload.launches.0.params.bytes_per_peer=262144", "workload.launches.0.params.chunk=16384"]


@pytest.fixture(scope="module")
def medium():
    return simulate("ubench/alltoall.yaml", *ALLTOALL_MEDIUM)


def test_numba_and_python_engines_give_identical_stats(tmp_path):
    # two chunks per peer (~9 k events) rather than ALLTOALL_SMALL's four
    sets = [f"--set={s}" for s in ALLTOALL_SMALL + ["workload.launches.0.params.bytes_per_peer=8192"]]
    out = cli_stats_per_engine("configs/ubench/alltoall.yaml", tmp_path, *sets)
    assert out["numba"]["simEvents"] > 1000
    assert out["numba"] == out["python"]


def test_same_seed_gives_identical_stats_and_seed_drives_random_data():
    runs = [simulate("ubench/alltoall.yaml", *ALLTOALL_SMALL, "workload.mode=functional",
                     "workload.buffers.send.init=random", f"run.seed={seed}") for seed in (5, 5, 6)]
    a, b, c = runs
    assert model_stats(a.stats) == model_stats(b.stats)
    assert np.array_equal(a.read_buffer(1, "recv"), b.read_buffer(1, "recv"))
    assert not np.array_equal(a.read_buffer(1, "recv"), c.read_buffer(1, "recv"))


def test_alltoall_moves_exactly_the_right_data_in_functional_mode():
    sim = simulate("ubench/alltoall.yaml", *ALLTOALL_SMALL, "workload.mode=functional",
                   "workload.buffers.send.init=random", "workload.buffers.send.dtype=u8")
    G, B = 4, 16384
    for dst in range(G):
        recv = sim.buffer_bytes(dst, "recv")
        for src in range(G):
            sent = sim.buffer_bytes(src, "send")[dst * B:(dst + 1) * B]
            assert np.array_equal(recv[src * B:(src + 1) * B], sent), (src, dst)


def test_bytes_and_packets_are_conserved_on_every_link(medium):
    sim, s = medium, medium.stats
    st = sim.state
    L = 4
    for c in range(st.ch.shape[0]):
        ch = st.ch[c]
        if not ch.to_switch:
            continue
        g, link = int(ch.gpu), (c // 2) % L
        sw, port = int(ch.switch), int(ch.port)
        for what in ("packets", "wire_bytes", "payload_bytes"):
            # GPU -> switch direction, then switch -> GPU
            assert s[f"system.gpu{g}.nvlink{link}.tx_{what}"] == s[f"system.switch{sw}.port{port}.rx_{what}"]
            assert s[f"system.switch{sw}.port{port}.tx_{what}"] == s[f"system.gpu{g}.nvlink{link}.rx_{what}"]
    G, B = 4, 262144
    hub_tx = sum(s[f"system.gpu{g}.hub.tx_payload_bytes"] for g in range(G))
    hub_rx = sum(s[f"system.gpu{g}.hub.rx_payload_bytes"] for g in range(G))
    assert hub_tx == hub_rx == G * (G - 1) * B
    for g in range(G):
        assert s[f"system.gpu{g}.hub.rx_payload_bytes"] == (G - 1) * B
    # wire bytes: every data packet carries 128 B (SM-store packets) + a 16 B header flit, and
    # is answered by a one-flit write response (system.nvlink.write_responses: per_packet)
    data_pkts = G * (G - 1) * B // 128
    acks = data_pkts
    wire = sum(s[f"system.gpu{g}.nvlink{l}.tx_wire_bytes"] for g in range(G) for l in range(L))
    assert wire == data_pkts * 144 + acks * 16


def test_end_state_is_clean(medium):
    """Every credit returned, every packet and request entry freed, every TB gone."""
    st = medium.state
    assert (st.ch.credits == medium.cfg.system.nvlink.rx_buffer_flits).all()
    assert (st.ch.txq_count == 0).all() and (st.ch.rxq_count == 0).all()
    assert packets_in_use(st) == 0
    assert (st.gpu.free_top == medium.cfg.system.gpu.hub.max_outstanding_requests).all()
    assert (st.gpu.reqq_count == 0).all() and (st.gpu.respq_count == 0).all()
    assert (st.tb.state == TB_EMPTY).all()
    assert (st.tb.outstanding == 0).all()


def test_compiled_code_lives_where_the_cache_key_looks():
    """The Numba cache is keyed on engine/, components/ and isa/encoding.py (moehub_arch/__init__):
    @njit code anywhere else could run stale after an edit."""
    from conftest import REPO
    pkg = REPO / "moehub_arch"
    decorated = re.compile(r"^\s*@(numba\.)?njit", re.M)
    outside = [str(p.relative_to(pkg)) for p in pkg.rglob("*.py")
               if decorated.search(p.read_text()) and p.relative_to(pkg).parts[0] not in ("engine", "components")]
    assert outside == []


def test_streams_order_launches_and_let_other_streams_run_concurrently():
    one = "{kernel: mma_loop, grid: 4, gpus: [0], params: {iters: 20}}"
    other = "{kernel: mma_loop, grid: 4, gpus: [0], stream: 1, params: {iters: 20}}"
    sim = simulate("ubench/mma_peak.yaml", "system.gpu.num_sms=2",
                   f"workload.launches=[{one}, {one}, {other}]")
    s = sim.stats
    lat = sim.cfg.system.gpu.kernel_launch_latency
    start = [s[f"system.gpu0.launch{i}.start_tick"] for i in range(3)]
    end = [s[f"system.gpu0.launch{i}.end_tick"] for i in range(3)]
    assert start[0] == start[2] == lat                 # stream heads start after one launch latency
    assert start[1] == end[0] + lat                    # same stream: after its predecessor
    assert start[2] < end[0]                           # other stream: concurrently
    assert sum(s[f"system.gpu0.sm{i}.tbs_launched"] for i in range(2)) == 12
    # 8 TBs compete for 2 SMs x 4 slots while launches 0 and 2 overlap: the tensor units are shared
    assert end[0] - start[0] > s["system.gpu0.launch1.ticks"]


def test_packet_trains_conserve_bytes_and_packets_and_deliver_the_same_data(medium):
    """run.packet_train = 4 simulates four full packets as one record: the hubs and every GPU's
    links together count the same packets and bytes as the exact run (trains carry their packet
    count; a train may take another link than its packets would), both ends of every link agree,
    the data lands intact and the end state is clean."""
    sets = ALLTOALL_MEDIUM + ["workload.mode=functional", "workload.buffers.send.init=random",
                              "workload.buffers.send.dtype=u8", "run.packet_train=4"]
    sim = simulate("ubench/alltoall.yaml", *sets)
    s, exact = sim.stats, medium.stats
    G, L, B = 4, 4, 262144
    counts = ("packets", "wire_bytes", "payload_bytes")

    def per_gpu(t):
        return [(sum(t[f"system.gpu{g}.nvlink{l}.{d}_{w}"] for l in range(L)),
                 t[f"system.gpu{g}.hub.{d}_payload_bytes"])
                for g in range(G) for d in ("tx", "rx") for w in counts]
    assert per_gpu(s) == per_gpu(exact)
    for c in range(sim.state.ch.shape[0]):
        ch = sim.state.ch[c]
        if ch.to_switch:
            g, link, sw, port = int(ch.gpu), (c // 2) % L, int(ch.switch), int(ch.port)
            for w in counts:
                assert s[f"system.gpu{g}.nvlink{link}.tx_{w}"] == s[f"system.switch{sw}.port{port}.rx_{w}"]
                assert s[f"system.switch{sw}.port{port}.tx_{w}"] == s[f"system.gpu{g}.nvlink{link}.rx_{w}"]
    assert s["simEvents"] < exact["simEvents"] / 2
    for dst in range(G):
        recv = sim.buffer_bytes(dst, "recv")
        for src in range(G):
            assert np.array_equal(recv[src * B:(src + 1) * B],
                                  sim.buffer_bytes(src, "send")[dst * B:(dst + 1) * B]), (src, dst)
    st = sim.state
    assert (st.ch.credits == sim.cfg.system.nvlink.rx_buffer_flits).all()
    assert packets_in_use(st) == 0


def test_packet_train_of_one_is_the_exact_model(medium):
    again = simulate("ubench/alltoall.yaml", *ALLTOALL_MEDIUM, "run.packet_train=1")
    assert model_stats(again.stats) == model_stats(medium.stats)


def test_packet_train_longer_than_the_receive_buffer_is_an_input_error():
    from moehub_arch.config import ConfigError
    with pytest.raises(ConfigError, match=r"run\.packet_train.*at most \d+, found 64"):
        load("ubench/alltoall.yaml", "run.packet_train=64")


def _python_wheel(monkeypatch, count):
    """The timers' wheel (engine.events) as Python functions on a State-like namespace (no
    compile; the run loop uses the same code compiled)."""
    from types import SimpleNamespace
    from moehub_arch.engine import bitset
    from moehub_arch.engine import events as ev
    for name in ("_wheel_level", "_wheel_link", "_wheel_append", "_wheel_unlink",
                 "_wheel_advance", "_now_add", "_now_remove", "_now_first", "_timer_unlink",
                 "_u"):
        monkeypatch.setattr(ev, name, getattr(ev, name).py_func)
    # the compiled lowest-bit is an LLVM intrinsic; its Python form gives the same values
    monkeypatch.setattr(ev, "_lowest_bit", bitset.lowest_bit_float)
    monkeypatch.setattr(bitset, "_lowest_bit", bitset.lowest_bit_float)
    timer, level = ev.new_timers(count)
    sy = np.zeros(1, [("tw_base", np.int64), ("tw_now", np.int64)]).view(np.recarray)
    return ev, SimpleNamespace(sys=sy, timer=timer, timer_level=level)


@pytest.mark.parametrize("n, steps, check_every", [(37, 8000, 1), (40_000, 3000, 500)])
def test_the_timer_wheel_gives_the_earliest_timer_after_any_sets_clears_and_takes(
        monkeypatch, n, steps, check_every):
    """After every set, clear or take, timer_peek must return the armed timer with the smallest
    (tick, row) - the canonical order, whenever and in whatever order the timers were armed - as a
    scan of State.timer finds it, or -1 exactly when none is armed at or before the tick it is
    given (the heap's top); and the wheel's lists and the current tick's set must hold exactly the
    armed timers, each once, in its place (conftest.check_timer_wheel). Ticks are set at the
    current tick (a quarter), a few ticks ahead (ties broken by row), across the wheel's
    levels and far ahead (above 2**52, where the level is computed from a shifted value); timers
    are set again while armed (they leave their old slot) and cleared armed or not; the current
    tick advances to the tick of the timer taken, or to a "heap event" at or before the earliest
    timer. The larger case spreads its timers over every level of the current tick's set."""
    ev, st = _python_wheel(monkeypatch, n)
    set_, clear = ev.timer_set.py_func, ev.timer_clear.py_func
    peek, take = ev.timer_peek.py_func, ev.timer_take.py_func
    hint = ev.timer_next_hint.py_func
    rng = np.random.default_rng(23)
    now = 0
    taken = reset = 0
    pool = rng.choice(n, size=min(n, 37), replace=False)   # the timers this run arms
    for step in range(steps):
        i = int(rng.choice(pool))
        r = rng.random()
        reset += r < 0.67 and st.timer[i, ev.TM_TICK] != ev.TIMER_OFF
        if r < 0.1:
            clear(st, i)
        elif r < 0.35:
            set_(st, i, now)
        elif r < 0.55:
            set_(st, i, now + int(rng.integers(0, 4)))
        elif r < 0.65:
            set_(st, i, now + int(2 ** rng.uniform(0, 40)))
        elif r < 0.67:
            set_(st, i, now + 2 ** 53 + int(rng.integers(0, 2 ** 40)))
        ticks = st.timer[:n, ev.TM_TICK]
        armed = sorted((int(ticks[k]), int(k)) for k in np.nonzero(ticks != ev.TIMER_OFF)[0])
        if r < 0.67:
            pass
        elif r < 0.85:   # the next event is a timer (or none): the wheel's head is the earliest
            e = peek(st, ev.TIMER_OFF)
            got = None if e < 0 else (int(st.timer[e, ev.TM_TICK]), int(e))
            assert got == (armed[0] if armed else None), step
            if armed:
                assert take(st, e) == armed[0][1]
                now = armed[0][0]
                taken += 1
        else:          # a heap event at `before`: is a timer due by then?
            before = now + int(rng.integers(0, 2 ** int(rng.integers(1, 20))))
            if armed:
                before = min(before, armed[0][0] + 1)
            e = peek(st, before)
            due = [a for a in armed if a[0] <= before]
            assert (e >= 0) == bool(due), step
            if e >= 0:
                assert int(e) == due[0][1], step
            now = min(before, armed[0][0]) if armed else before
        assert st.sys[0].tw_base <= now and st.sys[0].tw_now <= now
        _check_next_hint(ev, st, n, hint)
        if step % check_every == 0:
            check_timer_wheel(st)
    assert taken > steps // 8 and reset > steps // 8


def _check_next_hint(ev, st, n, hint):
    """timer_next_hint (the run loop prefetches its records) changes nothing and names a timer
    that runs soon: the current tick's set's lowest row while the set holds one (the timer
    timer_peek returns next), else an armed timer of the base's 32-tick block (the earliest
    occupied level-0 slot), else none (-1)."""
    before = (st.timer.copy(), st.timer_level.copy(), st.sys.copy())
    h = hint(st)
    assert (st.timer == before[0]).all() and (st.timer_level == before[1]).all()
    assert (st.sys == before[2]).all()
    ticks = st.timer[:n, ev.TM_TICK]
    in_now = (st.timer[:n, ev.TM_NEXT] == ev.IN_NOW) & (ticks != ev.TIMER_OFF)   # in the set
    if in_now.any():
        assert h == np.nonzero(in_now)[0][0]
    elif st.timer_level[0] != 0:
        block = int(st.sys[0].tw_base) >> ev.WHEEL_BITS
        level0 = ticks[(ticks != ev.TIMER_OFF) & (ticks >> ev.WHEEL_BITS == block)]
        assert 0 <= h < n and ticks[h] != ev.TIMER_OFF and ticks[h] == level0.min()
    else:
        assert h == -1


def test_wheel_levels_of_tick_differences():
    """The level of a tick is its highest differing 5-bit digit, also above 2**52 (where a float
    no longer holds every integer) and up to the largest tick below TIMER_OFF."""
    from moehub_arch.engine import events as ev
    for x in [0, 1, 31, 32, 1023, 1024, 2 ** 15 - 1, 2 ** 15, 2 ** 20 - 1, 2 ** 20, 2 ** 25,
              2 ** 52 - 1, 2 ** 52, 2 ** 53 - 1, 2 ** 53 + 1,
              2 ** 60 + 12345, ev.TIMER_OFF - 1]:
        want = 0 if x == 0 else (x.bit_length() - 1) // ev.WHEEL_BITS
        assert ev._wheel_level.py_func(np.int64(x)) == want, x
        assert want < ev.WHEEL_LEVELS
