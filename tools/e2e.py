#!/usr/bin/env python3
"""A whole MoE model's step composed from simulated layers: `python tools/e2e.py [options]` is
`moehub-sim e2e [options]` (moehub_arch/e2e/: the forward step, and with --training the training
step)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the package of this checkout
from moehub_arch.e2e import main  # noqa: E402
from moehub_arch.e2e.layers import DENSE, QUICK_TOKENS, block_model_file  # noqa: E402

__all__ = ["main", "DENSE", "QUICK_TOKENS", "block_model_file"]   # what the tests read

if __name__ == "__main__":
    sys.exit(main())
