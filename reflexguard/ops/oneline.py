"""argparse whose usage mistakes are one line: shared by `reflexguard` and the bench's
commands, so it lives below both."""

from __future__ import annotations

import argparse
from typing import NoReturn

EXIT_USAGE = 2


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (`--help` still shows the usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")
