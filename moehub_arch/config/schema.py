"""The configuration schema: frozen attrs classes, one per config section.

Each field carries metadata that the loader (loader.py) uses to convert and check the YAML value:
`kind` (int, int_or_expr, float, bool, str, choice, choice_tuple, time, frequency, size, bandwidth,
node, list, named, params, int_tuple, str_tuple, opt_int, opt_int_tuple), an optional lower bound `min`
and upper bound `max` (every integer is also bounded by the 64-bit range, every float must be
finite, every quantity must fit the engine: units.py), the `choices` of a
choice field, the nested class `cls` of node/list/named fields, and a one-line `doc`.

System fields have no defaults on purpose: every hardware number must come from a config file,
where it carries a comment naming its source. Workload and run fields have defaults.
Values are stored in base units: time in ps, frequency in Hz, size in bytes, bandwidth in B/s.

The sections live by subject, under this root (which re-exports them): the field vocabulary
(schema_fields.py), the machine (schema_system.py), the workload (schema_workload.py) and the MoE
schemes' options (schema_schemes.py); here are the run, the observation of a run (trace, debug,
stats), the root `Config` and the helpers over a whole config (key units, flat parameters).
"""
import attrs

from .schema_fields import BASE_UNITS, UNIT_KINDS, _f
from .schema_system import (AAU_OVERFLOW, AauConfig, CaisSwitchConfig, DamConfig, DysharpConfig,
                            GpuConfig, HUB_INTERNODE, HUB_INTERNODE_COMBINE, HbmConfig, HubConfig,
                            InfinibandConfig, L2Config, L2_LINK_WRITES, MEMORY_ARBITRATION,
                            MoeHubConfig, NicConfig, NodesConfig, NvlinkConfig, NvlsConfig,
                            PcieConfig, RPM_SCHEDULES, RpmConfig, SmConfig, SwitchConfig,
                            SystemConfig)
from .schema_schemes import (CcfuserSchemeConfig, CountedSchemeConfig, DeepepLlSchemeConfig,
                             DeepepSchemeConfig, DysharpSchemeConfig, FastermoeSchemeConfig,
                             HiermoeSchemeConfig, MegatronSchemeConfig, MoehubSchemeConfig,
                             NvlsSchemeConfig, OverlapSchemeConfig, TutelSchemeConfig)
from .schema_workload import (BlockConfig, BufferConfig, CaisGroupConfig, LaunchConfig,
                              LayerConfig, MoeWorkloadConfig, MulticastConfig, ReportConfig,
                              RoutingConfig, WorkloadConfig)

# the sections are defined by subject in the schema_* modules; this root hands them all out
__all__ = ["BASE_UNITS", "UNIT_KINDS", "AAU_OVERFLOW", "AauConfig", "CaisSwitchConfig",
           "DamConfig", "DysharpConfig", "GpuConfig", "HUB_INTERNODE", "HUB_INTERNODE_COMBINE",
           "HbmConfig", "HubConfig", "InfinibandConfig", "L2Config", "L2_LINK_WRITES",
           "MEMORY_ARBITRATION", "MoeHubConfig", "NicConfig", "NodesConfig", "NvlinkConfig",
           "NvlsConfig", "PcieConfig", "RPM_SCHEDULES", "RpmConfig", "SmConfig", "SwitchConfig",
           "SystemConfig", "CcfuserSchemeConfig", "CountedSchemeConfig", "DeepepLlSchemeConfig",
           "DeepepSchemeConfig", "DysharpSchemeConfig", "FastermoeSchemeConfig",
           "HiermoeSchemeConfig", "MegatronSchemeConfig", "MoehubSchemeConfig",
           "NvlsSchemeConfig", "OverlapSchemeConfig", "TutelSchemeConfig", "BlockConfig",
           "BufferConfig", "CaisGroupConfig", "LaunchConfig", "LayerConfig", "MoeWorkloadConfig",
           "MulticastConfig", "ReportConfig", "RoutingConfig", "WorkloadConfig", "SHORTCUTS",
           "RunConfig", "TRACE_COMPONENTS", "DEBUG_FLAGS", "TraceConfig", "DebugConfig",
           "OccupancyConfig", "StatsConfig", "Config", "key_units", "flat_params"]


# the engine's exact shortcuts (run.shortcuts), bit i of the engine's `shortcuts` parameter each
# (engine/events.py SHORTCUT_*)
SHORTCUTS = ("tx_wake", "idle_output", "sm_fold", "back_to_back", "credit_wake", "arrival_hub",
             "hub_again")


@attrs.frozen
class RunConfig:
    seed: int = _f("int", "random seed", 1, min=0)
    engine: str = _f("choice", "compiled (numba) or reference (python) loop", "numba",
                     choices=("numba", "python"))
    max_events: int = _f("int", "stop after this many events (0 = unlimited)", 0, min=0)
    batch_events: int = _f("int", "events per compiled-loop call between progress reports",
                           2_000_000, min=1)
    packet_train: int = _f("int", "simulate up to this many consecutive full link packets of one "
                           "transfer as one train (one event per hop): bandwidth, header and flit "
                           "overhead, credits and packet statistics stay exact; store-and-forward "
                           "and arbitration per train are an approximation (tools/bench.py "
                           "measures its error). 1 = every packet simulated (exact)", 1, min=1,
                           unit="packets")
    shortcuts: tuple = _f("choice_tuple", "the engine's exact shortcuts (docs/engine_order.md): "
                          "tx_wake (a link transmitter sleeps straight to its head packet's ready "
                          "tick), idle_output (a switch input's packet is sent on an idle output "
                          "link in its arrival event), sm_fold (register-only instructions that "
                          "nothing else can observe issue in the SM's issue event before them), "
                          "back_to_back (an NVLink channel sends its next queued packet, due "
                          "right after the one it sends, in the same event), credit_wake (a link "
                          "transmitter short of credits sleeps straight to the credit return that "
                          "gives its head packet enough), arrival_hub (a GPU's hub packetizer "
                          "armed for the tick of a packet's arrival at the GPU runs in the "
                          "arrival event when it is certain to be the next event), hub_again (a "
                          "hub packetizer that armed itself again for the same tick runs again in "
                          "the same event when it is certain to be the next event). "
                          "Each gives the same model stats with fewer events; [] runs every event "
                          "of the reference path (the tests compare both)", SHORTCUTS,
                          choices=SHORTCUTS)
    # robustness (docs/robustness.md): watchdog, limits, end-of-run invariants
    watchdog_interval: int = _f("time", "stop the run (exit status 3, with a report of who waits on "
                                "what) when no instruction issues for this much simulated time; "
                                "0ps disables the watchdog", 1_000_000_000, min=0)
    livelock_interval: int = _f("time", "stop the run (exit status 3, with the kernel, line and loop "
                                "of each spinning thread block) when a thread block keeps issuing "
                                "instructions without touching memory, the hub or the links or "
                                "exiting for this much simulated time; 0ps disables the check. "
                                "assumption: 1 ms, as the watchdog, is far longer than any "
                                "register-only stretch of a real kernel (thousands of cycles)",
                                1_000_000_000, min=0)
    max_ticks: int = _f("time", "stop the run cleanly at this simulated time, stats dumped (0ps: no "
                        "limit)", 0, min=0)
    max_wall: int = _f("time", "stop the run cleanly after this much host wall-clock time, checked "
                       "between batches of batch_events events (0ps: no limit; a host time, "
                       "so not bounded by the simulated-time range)", 0, min=0,
                       max=2 ** 63 - 1)
    check_invariants: bool = _f("bool", "check conservation invariants at the end of the run "
                                "(bytes per link, packets, credits, thread blocks, hub queues, MoE "
                                "token accounting); a violation is exit status 4", True)


# ------------------------------------------------------------------- observing a run
TRACE_COMPONENTS = ("sm", "launches", "phases", "nvlink", "hub", "switch")
# debug flags, gem5 style (moehub_arch/trace/records.py maps them to record categories)
DEBUG_FLAGS = ("SM", "Launch", "NVLink", "Switch", "Hub", "RPM", "AAU", "DAM", "MoEHub", "All")


@attrs.frozen
class TraceConfig:
    enabled: bool = _f("bool", "write trace.json, a timeline in Chrome trace-event format for "
                       "ui.perfetto.dev (`moehub-sim run --trace`)", False)
    start: int = _f("time", "timeline window: first simulated time shown", 0, min=0)
    stop: int = _f("time", "timeline window: last simulated time shown (0 = end of the run)", 0,
                   min=0)
    gpus: tuple | None = _f("opt_int_tuple", "GPUs shown (default: every GPU); switches are shown "
                            "when the component list has switch", None, min=0)
    components: tuple = _f("choice_tuple", "what the timeline shows: sm (thread-block residency "
                           "and activity per TB slot, SM occupancy counters), launches (kernel "
                           "spans per stream), phases (MoE layer phases), nvlink (utilisation "
                           "per link direction), hub (queue and window occupancy), switch (port "
                           "queues)", TRACE_COMPONENTS, choices=TRACE_COMPONENTS)
    counter_period: int = _f("time", "sampling period of the counters (link utilisation over the "
                             "period, occupancies at the sampled instant)", 100_000, min=1)
    max_events: int = _f("int", "most trace events written (bounds the file at roughly 100 B per "
                         "event); the rest is dropped with a warning", 2_000_000, min=1)


@attrs.frozen
class DebugConfig:
    flags: tuple = _f("choice_tuple", "components whose events are printed, one line each "
                      "(`--debug-flags Hub,NVLink`; MoEHub = RPM,AAU,DAM)", (), choices=DEBUG_FLAGS)
    start: int = _f("time", "first simulated time printed (`--debug-start`)", 0, min=0)
    file: str = _f("str", "where the lines go: a file name (relative to the output directory, as "
                   "gem5's --debug-file) or '' for standard error", "")


@attrs.frozen
class OccupancyConfig:
    period: int = _f("time", "occupancy monitor (components/occupancy.py): sample every GPU's hub "
                     "request FIFO and link transmit backlog every period (0 = off)", 0, min=0)


@attrs.frozen
class StatsConfig:
    dump_period: int = _f("time", "gem5-style periodic stat dumps: every period the stats as they "
                          "are then go to stats_dumps.txt / stats_dumps.csv (0 = off)", 0, min=0)
    occupancy: OccupancyConfig = _f("node", "queue-occupancy monitor", OccupancyConfig(),
                                    cls=OccupancyConfig)


# ---------------------------------------------------------------------------------- root
@attrs.frozen
class Config:
    system: SystemConfig = _f("node", "the simulated machine", cls=SystemConfig)
    scheme: str = _f("choice", "how the MoE layer (workload.layer) moves tokens: none (the "
                     "workload's own launches), deepep, overlap, moehub, megatron, tutel, "
                     "deepep_ll, hiermoe, nvls, dysharp, counted, fastermoe, ccfuser", "none",
                     choices=("none", "deepep", "overlap", "moehub", "megatron", "tutel",
                              "deepep_ll", "hiermoe", "nvls", "dysharp", "counted", "fastermoe",
                              "ccfuser"))
    workload: WorkloadConfig = _f("node", "what runs on it", WorkloadConfig(), cls=WorkloadConfig)
    run: RunConfig = _f("node", "how the simulation runs", RunConfig(), cls=RunConfig)
    stats: StatsConfig = _f("node", "statistics output", StatsConfig(), cls=StatsConfig)
    trace: TraceConfig = _f("node", "timeline of the run (trace.json)", TraceConfig(), cls=TraceConfig)
    debug: DebugConfig = _f("node", "debug output per component", DebugConfig(), cls=DebugConfig)
    source_files: tuple = attrs.field(default=(), metadata={"kind": "internal"})
    # which file (or --set) set each key: ((key path tuple, label), ...), for errors found after
    # loading (builder, MoE layer) so they can name the file as loading errors do
    key_sources: tuple = attrs.field(default=(), eq=False, repr=False, metadata={"kind": "internal"})
    # warnings of the loader (an extends entry overriding keys an earlier one set), for the user
    load_warnings: tuple = attrs.field(default=(), eq=False, repr=False,
                                       metadata={"kind": "internal"})

    def to_dict(self) -> dict:
        """Every resolved value as a JSON-serialisable nested dict (base units), with beside the
        sections: `units` (base unit of each kind), `key_units` (the unit of every quantity key,
        e.g. system.gpu.hub.moe.rpm.flush_timeout: ps), `source_files`, `value_sources` (the file
        or --set that set each key) and `load_warnings`."""
        out = {"units": dict(BASE_UNITS)}
        for a in attrs.fields(Config):
            if a.metadata.get("kind") != "internal":
                out[a.name] = _to_plain(getattr(self, a.name))
        out["key_units"] = key_units(self)
        out["source_files"] = list(self.source_files)
        out["value_sources"] = {_dotted(k): label for k, label in self.key_sources if k}
        out["load_warnings"] = list(self.load_warnings)
        return out

    def where(self, path=()) -> str:
        """The file (or `--set ...`) that set the key `path` (a tuple, or a dotted string such as
        'workload.launches[0].grid'); the main config file if none set it."""
        if isinstance(path, str):
            path = tuple(int(k) if k.isdigit() else k
                         for k in path.replace("[", ".").replace("]", "").split(".") if k)
        best, label = -1, ""
        for key, src in self.key_sources:
            if len(key) > best and tuple(path[:len(key)]) == tuple(key):
                best, label = len(key), src
        return label


def _dotted(path) -> str:
    out = ""
    for k in path:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    return out


def key_units(obj, prefix="") -> dict:
    """Dotted key -> base unit (ps, Hz, B, B/s) of every quantity in a config node."""
    out = {}
    for a in attrs.fields(type(obj)):
        kind = a.metadata.get("kind")
        name = f"{prefix}.{a.name}" if prefix else a.name
        v = getattr(obj, a.name)
        if kind in UNIT_KINDS:
            out[name] = BASE_UNITS[kind]
        elif kind == "node":
            out.update(key_units(v, name))
        elif kind in ("list", "named"):
            for i, item in enumerate(v):
                out.update(key_units(item, f"{name}.{item.name}" if kind == "named"
                                     else f"{name}[{i}]"))
    return out


def _to_plain(obj):
    if attrs.has(type(obj)):
        out = {}
        for a in attrs.fields(type(obj)):
            v = getattr(obj, a.name)
            kind = a.metadata.get("kind")
            if kind == "named":
                out[a.name] = {item.name: {k: w for k, w in _to_plain(item).items() if k != "name"}
                               for item in v}
            elif kind == "params":
                out[a.name] = {k: w for k, w in v}
            else:
                out[a.name] = _to_plain(v)
        return out
    if isinstance(obj, tuple):
        return [_to_plain(v) for v in obj]
    return obj


_FLAT_SECTIONS = ("sm", "hbm", "l2", "hub", "nvlink", "switch")


def flat_params(cfg: Config) -> dict:
    """Numeric system parameters in one flat namespace for ISA cost expressions.

    Keys: gpu.num_sms, gpu.sm_clock, gpu.kernel_launch_latency, sm.<field>, hbm.<field>,
    hub.<field> (and hub.moe.<block>.<field>), nvlink.<field>, switch.<field>, system.num_gpus.
    Values in base units.
    """
    s = cfg.system
    out = {"system.num_gpus": s.num_gpus, "gpu.num_sms": s.gpu.num_sms,
           "gpu.sm_clock": s.gpu.sm_clock, "gpu.kernel_launch_latency": s.gpu.kernel_launch_latency}
    sections = {"sm": s.gpu.sm, "hbm": s.gpu.hbm, "l2": s.gpu.l2, "hub": s.gpu.hub, "nvlink": s.nvlink,
                "switch": s.switch}
    for prefix in _FLAT_SECTIONS:
        _flatten(sections[prefix], prefix, out)
    return out


def _flatten(node, prefix, out):
    for a in attrs.fields(type(node)):
        v = getattr(node, a.name)
        if attrs.has(type(v)):
            _flatten(v, f"{prefix}.{a.name}", out)   # e.g. hub.moe.rpm.row_header_bytes
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[f"{prefix}.{a.name}"] = v
