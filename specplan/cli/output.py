"""Terminal output shared by the commands: a console that never truncates or wraps when piped."""

from __future__ import annotations

import sys

from rich.console import Console

# Wide enough for any table; rich sizes a table to its content, so this only lifts the 80-column cap.
PIPE_WIDTH = 10_000


def console(stderr: bool = False) -> Console:
    """A rich console: the terminal's width on a TTY; piped, no width limit and no wrapping, so
    headers and cells reach a file or ``grep`` whole."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=PIPE_WIDTH, soft_wrap=True)
