"""The table tools' reuse of finished runs: moehub_arch/run_cache.py (imported by the tools as
`from run_cache import ...`)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the package of this checkout
from moehub_arch.run_cache import STAMP, run_inputs_digest, run_or_reuse  # noqa: E402

__all__ = ["STAMP", "run_inputs_digest", "run_or_reuse"]
