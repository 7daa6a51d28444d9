#!/usr/bin/env python3
"""Hardware correlation: `python tools/validate.py [options]` is `moehub-sim validate [options]`
(moehub_arch/validation.py: the figures, the references, the table, `--json`)."""
import sys

from moehub_arch.validation import FIGURES_FILE, REFERENCE_DIR, load_figures, main  # noqa: F401

if __name__ == "__main__":
    sys.exit(main())
