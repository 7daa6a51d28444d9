"""A finished run's output directory: its stats (stats.json), resolved config (config.json) and,
when it was traced, its timeline (trace.json)."""
import json
from pathlib import Path

from ..inputs import InputFileError, read_text
from . import AnalysisError


def _read_json(path, what):
    try:
        return json.loads(read_text(path, what))
    except InputFileError as e:
        raise AnalysisError(str(e)) from None
    except ValueError as e:
        raise AnalysisError(f"{path}: not valid JSON ({e})") from None


class RunData:
    def __init__(self, outdir):
        self.dir = Path(outdir)
        path = self.dir / "stats.json"
        if not path.is_file():
            raise AnalysisError(f"{outdir}: not a run output directory (no stats.json); run "
                                f"`moehub-sim run CONFIG -o {outdir}` first")
        self.stats = _read_json(path, "stats file")
        cfg_path = self.dir / "config.json"
        self.config = _read_json(cfg_path, "config file") if cfg_path.is_file() else {}
        if not isinstance(self.stats, dict) or not isinstance(self.config, dict):
            raise AnalysisError(f"{outdir}: stats.json and config.json must hold JSON objects "
                                f"(written by moehub-sim run)")
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
            data = _read_json(path, "trace file")
            try:
                self._trace, self._info = data["traceEvents"], data.get("otherData", {})
            except (TypeError, KeyError, AttributeError) as e:
                raise AnalysisError(f"{path}: not a Chrome trace-event file ({e})") from None
        return self._trace

    def trace_info(self):
        """The trace's otherData: window_ps, counter_period_ps, gpus, components, events."""
        self.trace()
        return self._info
