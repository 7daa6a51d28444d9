"""A finished run's output directory: its stats (stats.json), resolved config (config.json) and,
when it was traced, its timeline (trace.json)."""
import json
from pathlib import Path

from . import AnalysisError


class RunData:
    def __init__(self, outdir):
        self.dir = Path(outdir)
        path = self.dir / "stats.json"
        if not path.is_file():
            raise AnalysisError(f"{outdir}: not a run output directory (no stats.json); run "
                                f"`moehub-sim run CONFIG -o {outdir}` first")
        try:
            self.stats = json.loads(path.read_text())
            cfg_path = self.dir / "config.json"
            self.config = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
        except json.JSONDecodeError as e:
            raise AnalysisError(f"{path}: not valid JSON ({e})") from None
        self.name = self.dir.name
        self._trace = None

    @property
    def label(self):
        """Directory name, with the scheme when the run is an MoE layer."""
        scheme = self.config.get("scheme", "none")
        return self.name if scheme in ("none", None) or scheme in self.name else f"{self.name} ({scheme})"

    def value(self, name, default=None):
        s = self.stats.get(name)
        return default if s is None else s["value"]

    @property
    def has_trace(self):
        return (self.dir / "trace.json").is_file()

    def trace(self):
        """The trace events (list of dicts); AnalysisError if the run was not traced."""
        if self._trace is None:
            path = self.dir / "trace.json"
            if not path.is_file():
                raise AnalysisError(f"{self.dir}: no trace.json; run with --trace to get the "
                                    f"timeline figures")
            try:
                data = json.loads(path.read_text())
                self._trace, self._info = data["traceEvents"], data.get("otherData", {})
            except (json.JSONDecodeError, KeyError) as e:
                raise AnalysisError(f"{path}: not a Chrome trace-event file ({e})") from None
        return self._trace

    def trace_info(self):
        """The trace's otherData: window_ps, counter_period_ps, gpus, components, events."""
        self.trace()
        return self._info
