"""Values a config requests that the modelled hardware cannot take as given: each one is a warning
(printed by `moehub-sim`, a Python warning in the API, and kept in config.json's `load_warnings`),
naming the key, the file that set it, the value that is used instead and why - never a silent cap.

The caps themselves are the blocks' (components/moehub/rpm.py `rpm_packet_bytes`,
components/nvlink.py's store packets): a packet never carries more than one link packet's payload.
"""
from .units import format_quantity


def _size(v):
    return format_quantity(v, "size")


def effective_value_warnings(cfg) -> list[str]:
    """One sentence per requested value that the hardware caps (see the module docstring)."""
    out = []
    nv = cfg.system.nvlink
    link_cap = (f"system.nvlink.max_payload_bytes = {_size(nv.max_payload_bytes)} (set in "
                f"{cfg.where('system.nvlink.max_payload_bytes')}): a packet carries at most one "
                f"link packet's payload")
    rpm = cfg.system.gpu.hub.moe.rpm
    if rpm.packet_bytes > nv.max_payload_bytes:
        out.append(f"system.gpu.hub.moe.rpm.packet_bytes = {_size(rpm.packet_bytes)} (set in "
                   f"{cfg.where('system.gpu.hub.moe.rpm.packet_bytes')}) is used as "
                   f"{_size(min(nv.max_payload_bytes, rpm.merge_buffer_bytes))}, capped by "
                   f"{link_cap}")
    if nv.store_packet_bytes > nv.max_payload_bytes:
        out.append(f"system.nvlink.store_packet_bytes = {_size(nv.store_packet_bytes)} (set in "
                   f"{cfg.where('system.nvlink.store_packet_bytes')}) is used as "
                   f"{_size(nv.max_payload_bytes)}, capped by {link_cap}")
    return out
