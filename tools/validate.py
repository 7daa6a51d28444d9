#!/usr/bin/env python3
"""Hardware correlation: `python tools/validate.py [options]` is `moehub-sim validate [options]`
(moehub_arch/validation.py: the figures, the references, the table, `--json`)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the package of this checkout
from moehub_arch.validation import FIGURES_FILE, REFERENCE_DIR, load_figures, main  # noqa: E402

__all__ = ["main", "FIGURES_FILE", "REFERENCE_DIR", "load_figures"]   # what the tests read

if __name__ == "__main__":
    sys.exit(main())
