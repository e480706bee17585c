"""Logging to stderr for the ``blink`` processes (the command line and the relay's child process).

``logging.basicConfig`` does nothing at all once the root logger has a handler -- not even set the
level. A test guard (``tests/guard_site``) or anything imported early may have added one, and then
a relay's warnings would go nowhere. So the stderr handler is added unless one is already there,
and the root level is set either way."""

from __future__ import annotations

import logging
import sys

FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


def log_to_stderr(level: int = logging.WARNING, fmt: str = FORMAT) -> logging.Handler | None:
    """Send records of ``level`` and above to stderr; returns the handler added (None if one was there)."""
    root = logging.getLogger()
    root.setLevel(level)
    for h in root.handlers:
        if isinstance(h, logging.StreamHandler) and getattr(h, "stream", None) in (sys.stderr, sys.__stderr__):
            return None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(fmt))
    root.addHandler(handler)
    return handler


__all__ = ["FORMAT", "log_to_stderr"]
