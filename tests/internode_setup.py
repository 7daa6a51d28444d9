"""Set-ups shared by the inter-node tests (test_multinode.py, test_internode_nic.py): the 2 x 2
system (configs/systems/tiny_2x2.yaml: 2 nodes x 2 HGX H800 GPUs, NVSwitch inside a node, one
ConnectX-7 per GPU on PCIe 5.0, a rail-optimised NDR fabric), a simulation or a bare state on it,
a small all-to-all across both nodes, and the hub's put packets read back from a debug trace."""
import re

from conftest import CONFIGS

TINY = "systems/tiny_2x2.yaml"

A2A = """extends: {configs}/ubench/alltoall.yaml
system: {configs}/{tiny}
workload:
  buffers:
    send: {{bytes: {total}B, region: data}}
    recv: {{bytes: {total}B, region: data}}
  launches:
    - kernel: alltoall
      grid: "ngpu"
      params: {{send: "@send", recv: "@recv", bytes_per_peer: {per_peer}, chunk: {chunk}}}
"""


def alltoall_on_tiny(tmp_path, per_peer, chunk, name="a2a.yaml"):
    """A config file (in tmp_path) of every GPU of 2 x 2 putting `per_peer` bytes to each of the
    4 GPUs' slots in puts of `chunk` bytes (the alltoall microbenchmark)."""
    cfg = tmp_path / name
    cfg.write_text(A2A.format(configs=CONFIGS, tiny=TINY, total=4 * per_peer,
                              per_peer=per_peer, chunk=chunk))
    return cfg


STREAM_PUTS = """extends: [{configs}/ubench/p2p_bandwidth.yaml, {configs}/{tiny}]
workload:
  buffers:
    src: {{bytes: {total}B, region: data}}
    dst: {{bytes: {total}B, region: data}}
  launches:
    - kernel: stream_puts
      grid: {blocks}
      gpus: [0]
      params: {{peer: {peer}, dst: "@dst", src: "@src", chunk: {chunk}, chunks_per_tb: 1}}
  report:
    p2p_bandwidth_GBps:
      expr: "stat('system.gpu{peer}.hub.rx_payload_bytes')"
    p2p_kernel_bandwidth_GBps:
      expr: "stat('system.gpu{peer}.hub.rx_payload_bytes')"
"""


def puts_on_tiny(tmp_path, peer, blocks, chunk, name="puts.yaml"):
    """A config file (in tmp_path) of `blocks` thread blocks of GPU 0 on 2 x 2 each putting one
    message of `chunk` bytes to GPU `peer` (the stream_puts microbenchmark)."""
    cfg = tmp_path / name
    cfg.write_text(STREAM_PUTS.format(configs=CONFIGS, tiny=TINY, total=blocks * chunk,
                                      blocks=blocks, peer=peer, chunk=chunk))
    return cfg


def tiny_state(config="ubench/alltoall.yaml", *extra):
    """(config, the built simulation's state) of `config` on 2 x 2, not run."""
    from moehub_arch.config import load_config
    from moehub_arch.simulation import Simulation
    cfg = load_config(CONFIGS / config, list(extra), system_file=CONFIGS / TINY)
    return cfg, Simulation(cfg).state


def simulate_on_tiny(config, *extra):
    """The finished simulation of `config` (relative to configs/) on 2 x 2 with overrides."""
    from moehub_arch.config import load_config
    from moehub_arch.simulation import Simulation
    cfg = load_config(CONFIGS / config, list(extra), system_file=CONFIGS / TINY)
    sim = Simulation(cfg)
    sim.run()
    return sim


def hub_put_sends(debug_file, g):
    """(tick, destination GPU) of each put packet GPU g's hub sent, in order (a run with
    --debug-flags Hub)."""
    out = []
    for line in debug_file.read_text().splitlines():
        m = re.match(rf"\s*(\d+): system\.gpu{g}\.hub: sends put to GPU (\d+)", line)
        if m:
            out.append((int(m.group(1)), int(m.group(2))))
    return out
