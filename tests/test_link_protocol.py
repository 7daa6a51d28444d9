"""NVLink packet protocol (components/packet.py, hub.py): store-sized packets, header flits,
header-only read requests and write responses on the reverse path, counted exactly on a tiny
system (2 GPUs, one link each, one switch).

The workload is configs/examples/put_get_exchange.yaml with 2 GPUs: each GPU puts B bytes to its
peer, fences, raises a flag (an 8-byte store) on it, waits for the peer's flag and gets the B
bytes back. Every GPU's single up-link therefore carries, with P = ceil(B / 128) data packets:
  its put                 P data packets
  its flag store          1 packet of 8 B
  its get's requests      P header-only read requests
  responses to the peer   P write responses to the peer's put (per_packet; 1 with per_request)
                          + 1 to the peer's flag store
  the peer's get data     P data packets
The expected counts below are worked out by hand from that list, not from the engine's formulas.
"""
import pytest

from conftest import mini_system, simulate

BYTES = 5000          # 39 full 128 B packets + one of 8 B
CFG = "examples/put_get_exchange.yaml"


def _run(*extra):
    return simulate(CFG, *mini_system(num_gpus=2, num_sms=1, links=1), *extra)


def _up(sim, g, what):
    return sim.stats[f"system.gpu{g}.nvlink0.tx_{what}"]


def test_store_packets_headers_and_per_packet_responses_exact():
    sim = _run()
    nv = sim.cfg.system.nvlink
    assert (nv.store_packet_bytes, nv.header_bytes, nv.flit_bytes) == (128, 16, 16)
    assert nv.write_responses == "per_packet"
    # a data packet of 128 B: header flit + 8 payload flits; the last one (8 B): 1 + 1 flits
    data_flits = 39 * 9 + 2                                   # 353 per put or per get's data
    for g in range(2):
        assert _up(sim, g, "packets") == 40 + 1 + 40 + (40 + 1) + 40        # 162
        assert _up(sim, g, "wire_bytes") == 16 * (data_flits + 2 + 40 + 41 + data_flits)
        assert _up(sim, g, "payload_bytes") == BYTES + 8 + BYTES
        # the requester counts one response per write packet: its put's 40 + its flag's 1
        assert sim.stats[f"system.gpu{g}.hub.acks_received"] == 41
    # functional result unchanged: every byte arrived both ways
    for g in range(2):
        p = 1 - g
        recv = sim.read_buffer(g, "recv", "u8").reshape(-1, BYTES)   # [4][B]: sized for 4 GPUs
        pulled = sim.read_buffer(g, "pulled", "u8").reshape(-1, BYTES)
        assert (recv[p] == sim.read_buffer(p, "src", "u8")).all()
        assert (pulled[p] == sim.read_buffer(g, "src", "u8")).all()


def test_per_request_responses_send_one_response_per_put():
    sim = _run("system.nvlink.write_responses=per_request")
    data_flits = 39 * 9 + 2
    for g in range(2):
        assert _up(sim, g, "packets") == 40 + 1 + 40 + (1 + 1) + 40         # 123
        assert _up(sim, g, "wire_bytes") == 16 * (data_flits + 2 + 40 + 2 + data_flits)
        assert sim.stats[f"system.gpu{g}.hub.acks_received"] == 2


def test_store_packet_size_is_capped_by_the_link_payload():
    # 256 B store packets on a link whose packets carry at most 64 B: 64 B packets (5 flits)
    sim = _run("system.nvlink.store_packet_bytes=256B", "system.nvlink.max_payload_bytes=64B",
               "system.gpu.hub.moe.rpm.packet_bytes=64B")   # the RPM may not exceed the link either
    P = -(-BYTES // 64)                                         # 79: 78 x 64 B + one of 8 B
    data_flits = 78 * 5 + 2
    for g in range(2):
        assert _up(sim, g, "packets") == P + 1 + P + (P + 1) + P
        assert _up(sim, g, "wire_bytes") == 16 * (data_flits + 2 + P + (P + 1) + data_flits)


@pytest.mark.parametrize("train", [2, 3])
def test_packet_trains_carry_the_same_responses(train):
    """Trains (run.packet_train) change how many records the engine simulates, not what the wire
    carries: the same packets, bytes and responses as train 1."""
    exact = _run()
    sim = _run(f"run.packet_train={train}")
    for g in range(2):
        for what in ("packets", "wire_bytes", "payload_bytes"):
            assert _up(sim, g, what) == _up(exact, g, what), what
        assert sim.stats[f"system.gpu{g}.hub.acks_received"] == 41


def _link_totals(sim):
    G, L = sim.cfg.system.num_gpus, sim.cfg.system.nvlink.links_per_gpu
    sent = sum(sim.stats[f"system.gpu{g}.nvlink{l}.tx_packets"] for g in range(G) for l in range(L))
    acks = sum(sim.stats[f"system.gpu{g}.hub.acks_received"] for g in range(G))
    return sent, acks


def test_moehub_stream_packets_are_answered_like_every_link_write():
    """MoE-Hub's RPM packets (send_to_expert) and the combine's send_home puts are all link
    writes: with per_packet responses every one of them is answered once, so the GPUs' links
    carry exactly twice the write packets (no reads or atomics in this workload), and the write
    packets are the same as with per_request responses (one per put)."""
    from conftest import assert_rows_home
    hub = simulate("hub/dispatch_combine.yaml")
    sent, acks = _link_totals(hub)
    assert acks > 0 and sent == 2 * acks
    assert_rows_home(hub, 4, 32, 2, 1000)
    per_request = simulate("hub/dispatch_combine.yaml", "system.nvlink.write_responses=per_request")
    sent_r, acks_r = _link_totals(per_request)
    assert sent_r - acks_r == sent - acks          # the same write packets
    assert acks_r < acks
