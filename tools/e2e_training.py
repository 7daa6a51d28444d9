#!/usr/bin/env python3
"""One training step of a whole MoE model: `python tools/e2e_training.py [options]` is
`moehub-sim e2e --training [options]` (moehub_arch/e2e/training.py)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the package of this checkout
from moehub_arch.e2e import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["--training"] + sys.argv[1:], prog="e2e --training"))
