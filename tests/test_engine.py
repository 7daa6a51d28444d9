"""Engine properties: Numba == pure-Python engine, determinism, conservation, clean end state."""
import re

import numpy as np
import pytest

from moehub_arch.engine.state import TB_EMPTY

from conftest import cli_stats_per_engine, load, mini_system, model_stats, simulate

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
    assert int(st.sys[0].pk_top) == st.pk_free.shape[0]
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
    assert int(st.sys[0].pk_top) == st.pk_free.shape[0]


def test_packet_train_of_one_is_the_exact_model(medium):
    again = simulate("ubench/alltoall.yaml", *ALLTOALL_MEDIUM, "run.packet_train=1")
    assert model_stats(again.stats) == model_stats(medium.stats)


def test_packet_train_longer_than_the_receive_buffer_is_an_input_error():
    from moehub_arch.config import ConfigError
    with pytest.raises(ConfigError, match=r"run\.packet_train.*at most \d+, found 64"):
        load("ubench/alltoall.yaml", "run.packet_train=64")


def test_timer_tree_root_is_the_earliest_armed_timer_after_any_sets_and_clears(monkeypatch):
    """The tournament tree keeps a copy of each winner's (tick, seq) in its nodes (engine.events):
    after every set or clear its root must be the armed timer with the smallest (tick, seq), as a
    scan of State.timer finds it, and every node must carry its winner's current key. Runs the
    Python functions (no compile); the run loop uses the same code compiled."""
    from types import SimpleNamespace
    from moehub_arch.engine import events as ev
    monkeypatch.setattr(ev, "_timer_update", ev._timer_update.py_func)
    set_, clear = ev.timer_set.py_func, ev.timer_clear.py_func
    timer, tree = ev.new_timers(37)
    # q_now -1: no timer is set for the current tick (the FIFO's test is below)
    sy = np.zeros(1, [("q_next_seq", np.int64), ("q_now", np.int64), ("tn_head", np.int64),
                      ("tn_count", np.int64)]).view(np.recarray)
    sy[0].q_now = -1
    st = SimpleNamespace(sys=sy, timer=timer, timer_tree=tree, timer_now=np.zeros((74, 2), np.int64))
    rng = np.random.default_rng(23)
    leaves = timer.shape[0]
    for step in range(3000):
        i = int(rng.integers(37))
        if rng.random() < 0.3:
            clear(st, i)
        else:
            set_(st, i, int(rng.integers(50)))    # few distinct ticks: ties broken by seq
        armed = [(int(timer[k, 0]), int(timer[k, 1]), k) for k in range(leaves)
                 if timer[k, 0] != ev.TIMER_OFF]
        root = tree[1]
        if armed:
            tick, seq, k = min(armed)
            assert (root[ev.TT_INDEX], root[ev.TT_TICK], root[ev.TT_SEQ]) == (k, tick, seq), step
        else:
            assert root[ev.TT_TICK] == ev.TIMER_OFF
        w = tree[1:, ev.TT_INDEX]
        assert np.array_equal(tree[1:, ev.TT_TICK], timer[w, ev.TM_TICK]), step
        on = tree[1:, ev.TT_TICK] != ev.TIMER_OFF   # (a disarmed leaf's sequence is 0)
        assert np.array_equal(tree[1:, ev.TT_SEQ][on], timer[w, ev.TM_SEQ][on]), step


def test_the_earliest_timer_is_the_fifo_head_or_the_tree_root_after_any_sets_and_clears(monkeypatch):
    """Timers set for the current tick wait in a FIFO instead of the tree (engine.events): after
    every set, clear or take, the earlier by (tick, seq) of the FIFO's head (entries of timers
    cleared or set again dropped) and the tree's root - what the run loop takes - must be the armed
    timer with the smallest (tick, seq), as a scan of State.timer finds it. The current tick
    advances as the loop's would: to the tick of the timer taken. Python functions, no compile."""
    from types import SimpleNamespace
    from moehub_arch.engine import events as ev
    monkeypatch.setattr(ev, "_timer_update", ev._timer_update.py_func)
    set_, clear = ev.timer_set.py_func, ev.timer_clear.py_func
    head, take = ev.timer_now_head.py_func, ev.timer_now_take.py_func
    n = 37
    timer, tree = ev.new_timers(n)
    sy = np.zeros(1, [("q_next_seq", np.int64), ("q_now", np.int64), ("tn_head", np.int64),
                      ("tn_count", np.int64)]).view(np.recarray)
    st = SimpleNamespace(sys=sy, timer=timer, timer_tree=tree,
                         timer_now=np.zeros((2 * n, 2), np.int64))
    rng = np.random.default_rng(29)
    leaves = timer.shape[0]
    through_fifo = 0
    for step in range(4000):
        now = int(sy[0].q_now)
        i = int(rng.integers(n))
        r = rng.random()
        if r < 0.2:
            clear(st, i)
        elif r < 0.5:
            through_fifo += int(sy[0].tn_count < st.timer_now.shape[0])
            set_(st, i, now)                             # for the tick being processed
        elif r < 0.8:
            set_(st, i, now + int(rng.integers(1, 6)))    # later: few distinct ticks, ties by seq
        armed = [(int(timer[k, 0]), int(timer[k, 1]), k) for k in range(leaves)
                 if timer[k, 0] != ev.TIMER_OFF]
        f = head(st)
        cands = [] if f < 0 else [(int(timer[f, 0]), int(timer[f, 1]), f)]
        if tree[1, ev.TT_TICK] != ev.TIMER_OFF:
            cands.append((int(tree[1, ev.TT_TICK]), int(tree[1, ev.TT_SEQ]), int(tree[1, ev.TT_INDEX])))
        assert (min(cands) if cands else None) == (min(armed) if armed else None), step
        if cands and r >= 0.8:                      # the loop takes the earliest
            tick, _, k = min(cands)
            if f >= 0 and k == f:
                take(st)
            else:
                clear(st, k)
            assert tick >= now
            sy[0].q_now = tick
    assert through_fifo > 500
