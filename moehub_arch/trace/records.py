"""What the engine's trace records mean: categories, debug-flag names, and the names of the
hardware a record is about (the same dotted names as the stats: ``system.gpu0.sm5``).

The records themselves are written by the compiled hooks in ``components/trace.py``.
"""
import numpy as np

# debug flag -> record categories, record kind -> category: declared by the blocks
# (components/*.py BLOCK debug), composed in moehub_arch/composition.py
from ..composition import FLAG_CATEGORIES, KIND_CATEGORY, PACKET_KIND_NAMES  # noqa: E402,F401


def flags_mask(flags):
    mask = 0
    for f in flags:
        mask |= FLAG_CATEGORIES[f]
    return mask


def select(records, mask):
    """The records of the categories in `mask` (a copy)."""
    return records[(KIND_CATEGORY[records[:, 1]] & mask) != 0]


class Names:
    """Index arithmetic of a built system (engine/state.py conventions) and its dotted names."""

    def __init__(self, sim):
        p = sim.state.p[0]
        self.G, self.S, self.T = int(p.num_gpus), int(p.sms_per_gpu), int(p.slots_per_sm)
        self.L, self.LE = int(p.links_per_gpu), int(p.local_experts)
        ch = sim.state.ch
        self.ch_switch, self.ch_port = ch.switch.copy(), ch.port.copy()
        self.ch_gpu = ch.gpu.copy()
        # fabric channels (PCIe, InfiniBand: after the NVLink ones) are named by their ends
        self.nvlink_channels = 2 * self.G * self.L
        self.ch_src = [(int(ch.src_kind[c]), int(ch.src_index[c]), int(ch.src_port[c]))
                       for c in range(ch.shape[0])]
        self.launches = sim.launches
        # window index (gpu * local_experts + local slot) -> expert
        place = sim.state.moe_place
        self.window_expert = {int(place[e, 0]) * self.LE + int(place[e, 1]): e
                              for e in range(int(p.num_experts))}

    @staticmethod
    def packet_kind(kind):
        """A packet kind's name (declare.Packet, composed over every block)."""
        return PACKET_KIND_NAMES[kind]

    def slot(self, slot):
        sm = slot // self.T
        return f"system.gpu{sm // self.S}.sm{sm % self.S}.tb{slot % self.T}"

    def channel_gpu(self, c):
        if c >= self.nvlink_channels:
            return int(self.ch_gpu[c])
        return (c // 2) // self.L

    def channel(self, c):
        """Up channels are the GPU's link transmitters, down channels the switch port's; a
        fabric channel is named by the end that transmits it ('system.nic0.ib')."""
        if c >= self.nvlink_channels:
            from ..topology import end_name
            return end_name(*self.ch_src[c])
        link = c // 2
        if c % 2 == 0:
            return f"system.gpu{link // self.L}.nvlink{link % self.L}"
        return f"system.switch{self.ch_switch[c]}.port{self.ch_port[c]}"

    def kernel(self, launch):
        return self.launches[launch].kernel
