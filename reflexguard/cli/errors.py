"""The command line's one error: a user mistake, printed as one line."""

from __future__ import annotations

EXIT_USAGE = 2


class CliError(Exception):
    """A user mistake: printed as one line, exit status 2."""
