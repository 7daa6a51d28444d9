"""The packet pool (components/packet.py) hands out the entries a stack holding every entry, lowest
on top, would - the freed one last in first, then the lowest never used - without filling its free
stack up front; check_pool counts what is still allocated."""
import numpy as np

from moehub_arch.components.packet import packet_alloc, packet_free, packets_in_use
from moehub_arch.engine.stateref import state_ref
from moehub_arch.simulation import Simulation

from conftest import load, mini_system


def test_alloc_and_free_follow_a_full_stack_and_write_no_free_entry_up_front():
    sim = Simulation(load("ubench/alltoall.yaml", *mini_system(num_gpus=4)))
    st = sim.state
    pool = st.pk_free.shape[0]
    assert not st.pk_free.any() and packets_in_use(st) == 0
    ref = state_ref(st)
    stack = list(range(pool))[::-1]     # the pool before: every entry on the stack, 0 on top
    held, peak = [], 0
    rng = np.random.default_rng(7)
    for step in range(3000):
        if held and (rng.random() < 0.45 or len(held) > 200):
            pkt = held.pop(int(rng.integers(len(held))))
            packet_free(ref, pkt)
            stack.append(pkt)
        else:
            got = packet_alloc(ref)
            assert got == stack.pop(), step
            held.append(got)
            peak = max(peak, len(held))
        assert packets_in_use(st) == len(held)
    assert int(st.sys[0].pk_peak) == peak
    # only as deep as packets were freed at once has the free stack been written
    assert not st.pk_free[peak:].any()
    for pkt in held:
        packet_free(ref, pkt)
    assert packets_in_use(st) == 0
