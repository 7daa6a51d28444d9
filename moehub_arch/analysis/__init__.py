"""Looking at finished runs: loading their output directories, comparing stats, plotting."""

from ..errors import UserError


class AnalysisError(UserError):
    """An output directory or option that cannot be used (exit status 2)."""

    exit_code = 2
