"""Loaded by every Python process a test starts (the relay guard puts this folder on PYTHONPATH):
reports the child's relay problems and tracebacks to the test (see blink_guard.py). Does nothing
unless BLINK_TEST_GUARD_DIR is set; then runs the sitecustomize this one shadows, if there is one."""

from __future__ import annotations

import os
import sys


def _guard() -> None:
    directory = os.environ.get("BLINK_TEST_GUARD_DIR")
    if not directory or not os.path.isdir(directory):
        return
    import blink_guard

    blink_guard.install_in_child(directory)


def _chain() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_guard()
_chain()
