"""Configuration: YAML files (with `extends:` and `--set` overrides) -> a validated, frozen Config.

    from moehub_arch.config import load_config
    cfg = load_config("configs/systems/dgx_h100.yaml", ["run.seed=7"])
    cfg.system.nvlink.bandwidth   # 25e9 (B/s)

Units: units.py; schema: schema.py; loading and error reporting: loader.py.
"""
from .loader import ConfigError, config_from_dict, load_config, locate
from .schema import (BufferConfig, Config, GpuConfig, HbmConfig, HubConfig, LaunchConfig,
                     NvlinkConfig, ReportConfig, RunConfig, SmConfig, SwitchConfig, SystemConfig,
                     WorkloadConfig, flat_params)
from .units import UnitError, parse_quantity

__all__ = ["load_config", "config_from_dict", "locate", "ConfigError", "Config", "flat_params", "parse_quantity", "UnitError",
           "SystemConfig", "GpuConfig", "SmConfig", "HbmConfig", "HubConfig", "NvlinkConfig",
           "SwitchConfig", "WorkloadConfig", "BufferConfig", "LaunchConfig", "ReportConfig",
           "RunConfig"]
