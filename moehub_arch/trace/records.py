"""What the engine's trace records mean: categories, debug-flag names, and the names of the
hardware a record is about (the same dotted names as the stats: ``system.gpu0.sm5``).

The records themselves are written by the compiled hooks in ``components/trace.py``.
"""
import numpy as np

from ..components.trace import (ACT_COMM, ACT_COMPUTE, ACT_MEMORY, ACT_RUN, CAT_AAU, CAT_DAM,
                                CAT_HUB, CAT_LAUNCH, CAT_NVLINK, CAT_RPM, CAT_SM, CAT_SWITCH,
                                TR_AAU_ALLOC, TR_AAU_STALL, TR_DAM_CLAIM, TR_DAM_READY, TR_HUB_RX,
                                TR_HUB_TX, TR_LAUNCH_END, TR_LAUNCH_START, TR_LINK_TX, TR_RPM_TX,
                                TR_TB_ACT, TR_TB_EXIT, TR_TB_PLACE, TR_TB_RESUME, TR_TB_WAIT,
                                TR_XBAR)
from ..engine.state import (TB_WAIT_CLAIM, TB_WAIT_FENCE, TB_WAIT_FLAG, TB_WAIT_HUB,
                            TB_WAIT_REMOTE)

# debug flag -> record categories (config.schema.DEBUG_FLAGS lists the names)
FLAG_CATEGORIES = {
    "SM": CAT_SM, "Launch": CAT_LAUNCH, "NVLink": CAT_NVLINK, "Switch": CAT_SWITCH, "Hub": CAT_HUB,
    "RPM": CAT_RPM, "AAU": CAT_AAU, "DAM": CAT_DAM, "MoEHub": CAT_RPM | CAT_AAU | CAT_DAM,
}
FLAG_CATEGORIES["All"] = int(np.bitwise_or.reduce(list(FLAG_CATEGORIES.values())))

# record kind -> its category (index with the kind column)
KIND_CATEGORY = np.zeros(16, np.int64)
for _kinds, _cat in (((TR_TB_PLACE, TR_TB_ACT, TR_TB_WAIT, TR_TB_RESUME, TR_TB_EXIT), CAT_SM),
                     ((TR_LAUNCH_START, TR_LAUNCH_END), CAT_LAUNCH), ((TR_LINK_TX,), CAT_NVLINK),
                     ((TR_XBAR,), CAT_SWITCH), ((TR_HUB_TX, TR_HUB_RX), CAT_HUB),
                     ((TR_RPM_TX,), CAT_RPM), ((TR_AAU_ALLOC, TR_AAU_STALL), CAT_AAU),
                     ((TR_DAM_READY, TR_DAM_CLAIM), CAT_DAM)):
    KIND_CATEGORY[list(_kinds)] = _cat

ACTIVITY_NAMES = {ACT_RUN: "run", ACT_MEMORY: "memory", ACT_COMPUTE: "compute",
                  ACT_COMM: "communicate"}
WAIT_NAMES = {TB_WAIT_FLAG: "wait flag", TB_WAIT_FENCE: "wait fence",
              TB_WAIT_REMOTE: "wait remote result", TB_WAIT_HUB: "wait hub room",
              TB_WAIT_CLAIM: "wait claim (hub tile)"}


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
        self.launches = sim.launches
        # window index (gpu * local_experts + local slot) -> expert
        place = sim.state.moe_place
        self.window_expert = {int(place[e, 0]) * self.LE + int(place[e, 1]): e
                              for e in range(int(p.num_experts))}

    def slot(self, slot):
        sm = slot // self.T
        return f"system.gpu{sm // self.S}.sm{sm % self.S}.tb{slot % self.T}"

    def channel_gpu(self, c):
        return (c // 2) // self.L

    def channel(self, c):
        """Up channels are the GPU's link transmitters, down channels the switch port's."""
        link = c // 2
        if c % 2 == 0:
            return f"system.gpu{link // self.L}.nvlink{link % self.L}"
        return f"system.switch{self.ch_switch[c]}.port{self.ch_port[c]}"

    def kernel(self, launch):
        return self.launches[launch].kernel
