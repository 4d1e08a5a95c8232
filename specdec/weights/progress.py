"""How loading tells its caller what it is doing: a callback the CLI prints and the app shows.

The library never prints. Without a callback, a message that the user must see (a damaged cache
file being rebuilt) goes to the ``specdec`` logger, which Python's last-resort handler writes to
stderr where logging is not set up.
"""
from __future__ import annotations

import logging
from typing import Callable

Progress = Callable[[float, str], None]  # (fraction in [0, 1], message)


def report(progress: Progress | None, fraction: float, message: str, warning: bool = False) -> None:
    """Tell ``progress``; with none, only a ``warning`` is told, to the logger."""
    if progress:
        progress(fraction, message)
    elif warning:
        logging.getLogger("specdec").warning(message)
