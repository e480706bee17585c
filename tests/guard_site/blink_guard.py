"""The relay guard's watching half: what counts as a problem, and the hooks that report one.

How this works
--------------
A *problem* is a relay record with ``"code": "internal_error"`` (the core caught an exception of
its own: a bug, never bad input), anything that carries a traceback, a traceback logged by any
logger (``log.exception``, asyncio's "Task exception was never retrieved"), or an uncaught
exception. ``watch_relay_core`` wraps ``RelayCore.handle``/``tick``/``startup``/``shutdown`` so every
record the core returns passes the check -- the core's entry points, not the shell's, so the same
hook sees the in-process relays of ``LocalServer``, the core-only ``Harness`` of the unit tests and
the relays of ``blink serve``/``match``/``latency``/``play`` subprocesses.

Event logs: ``log_hooks`` wraps what writes one -- the relay's ``EventLog`` (``blink serve --log``,
any in-process relay given a log path; recovery completes the same file) and ``client.matchrun.
write_log`` (``blink match --log``) -- so each log's path is reported (``{"event_log": path}``, with
the folder its writer imports blink from) when it is first named. The plugin runs ``blink verify``'s checker on every reported log once the test
and its fixtures are done (the relays have stopped): a log the relay wrote that is not true is a
problem like an internal error.

In this pytest process the plugin ``tests/guards.py`` installs the hooks for one test and keeps
the problems in memory. For subprocesses it sets ``BLINK_TEST_GUARD_DIR`` and puts this folder on
``PYTHONPATH``: Python then imports ``sitecustomize`` from here at start-up, which calls
``install_in_child``: the same checks, reported as JSON lines to ``<dir>/<pid>.jsonl``. The child
installs its ``RelayCore`` hook only when (and if) ``relay.core`` is imported, so a child that
never imports the relay keeps exactly its own set of imported modules.

This module imports no pytest and nothing from blink at import time: every Python child loads it.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import json
import logging
import os
import sys
import threading
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Sequence

ENV_DIR = "BLINK_TEST_GUARD_DIR"
#: ``game`` or ``game,game``: in a guarded child, these games are replaced by ``BrokenGame``s.
ENV_FAULT = "BLINK_TEST_FAULT"
#: The core's entry points whose outputs are checked.
CORE_ENTRY_POINTS = ("handle", "tick", "startup", "shutdown")
RELAY_CORE_MODULE = "relay.core"
#: The modules that write event logs (see ``log_hooks``).
EVENT_LOG_MODULES = ("relay.storage.eventlog", "client.matchrun")

Sink = Callable[[dict[str, Any]], None]


# ------------------------------------------------------------------------------------------ the check


def _mentions_traceback(value: Any) -> bool:
    if isinstance(value, str):
        return "Traceback (most recent call last)" in value
    if isinstance(value, dict):
        return any(_mentions_traceback(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_mentions_traceback(v) for v in value)
    return False


def is_problem(record: dict[str, Any]) -> bool:
    """Does this relay record show a bug (an internal error or a traceback)?"""
    return record.get("code") == "internal_error" or _mentions_traceback(record)


def problems_in(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of a relay's log (``blink serve --log`` lines, ``LogRecord.record``s) that are bugs."""
    return [r for r in records if is_problem(r)]


# ------------------------------------------------------------------------------------------ the hooks


def watched(method: Callable[..., Any], sink: Sink) -> Callable[..., Any]:
    """``method`` of the relay core, reporting every problem record it returns to ``sink``."""

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = method(self, *args, **kwargs)
        if not isinstance(out, (list, tuple)):
            # The guard reads the list the core returns; a core that returns something else
            # (a generator would be consumed here) needs the guard updated, loudly.
            sink({"source": "guard", "problem": f"RelayCore.{method.__name__} returned {type(out).__name__}, "
                                                f"not a list: tests/guard_site/blink_guard.py needs updating"})
            return out
        for o in out:
            record = getattr(o, "record", None)
            if isinstance(record, dict) and is_problem(record):
                sink({"source": "relay", "record": record})
        return out

    run.__blink_guard__ = True  # type: ignore[attr-defined]
    return run


def core_hooks(module: ModuleType, sink: Sink) -> list[tuple[Any, str, Callable[..., Any]]]:
    """(class, name, wrapped method) for each core entry point in ``module`` (``relay.core``).

    A relay core without the expected class or entry points is reported as a problem: the guard
    must never go quiet because the code it watches moved."""
    core = getattr(module, "RelayCore", None)
    missing = [n for n in CORE_ENTRY_POINTS[:2] if not callable(getattr(core, n, None))]
    if core is None or missing:
        sink({"source": "guard", "problem": f"{module.__name__}.RelayCore.{'/'.join(missing or ['*'])} not found: "
                                            f"tests/guard_site/blink_guard.py needs updating"})
        return []
    hooks = []
    for name in CORE_ENTRY_POINTS:
        method = getattr(core, name, None)  # defined on RelayCore or inherited
        if callable(method) and not getattr(method, "__blink_guard__", False):
            hooks.append((core, name, watched(method, sink)))
    return hooks


def code_root() -> str | None:
    """The folder this process imports blink's ``protocol`` package from (a test may put a changed
    copy first on a child's path: its logs are verified by that copy)."""
    protocol = sys.modules.get("protocol")
    where = getattr(protocol, "__file__", None)
    return os.path.dirname(os.path.dirname(os.path.abspath(where))) if where else None


def log_hooks(module: ModuleType, sink: Sink) -> list[tuple[Any, str, Callable[..., Any]]]:
    """(owner, name, wrapped) for the event-log writer of ``module`` (one of ``EVENT_LOG_MODULES``):
    each reports the absolute path of the log it writes. A writer that moved is reported as a problem."""
    def report(path: Any) -> None:
        if path is not None and str(path):
            sink({"source": "guard", "event_log": os.path.abspath(os.fspath(path)), "code_root": code_root()})

    if module.__name__ == "relay.storage.eventlog":
        owner: Any = getattr(module, "EventLog", None)
        name = "__init__"
        real = getattr(owner, name, None) if owner is not None else None

        def replacement(self: Any, path: Any, *args: Any, **kwargs: Any) -> None:
            assert real is not None
            real(self, path, *args, **kwargs)
            report(path)
    elif module.__name__ == "client.matchrun":
        owner, name = module, "write_log"
        real = getattr(module, name, None)

        def replacement(path: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            assert real is not None
            report(path)
            return real(path, *args, **kwargs)
    else:
        return []
    if not callable(real):
        sink({"source": "guard", "problem": f"{module.__name__}'s event-log writer not found: "
                                            f"tests/guard_site/blink_guard.py needs updating"})
        return []
    if getattr(real, "__blink_guard__", False):
        return []
    functools.update_wrapper(replacement, real)
    replacement.__blink_guard__ = True  # type: ignore[attr-defined]
    return [(owner, name, replacement)]


class TracebackLogHandler(logging.Handler):
    """Reports every log record that carries an exception (``log.exception``, asyncio's
    "exception was never retrieved", ...), whatever its logger."""

    def __init__(self, sink: Sink) -> None:
        super().__init__(logging.NOTSET)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        if not record.exc_info or record.exc_info[0] is None:
            return
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string must not hide the traceback
            message = str(record.msg)
        self.sink({"source": "log", "logger": record.name, "message": message,
                   "traceback": "".join(traceback.format_exception(*record.exc_info))})


# ------------------------------------------------------------------------------------------ faults


class InjectedFault(RuntimeError):
    """Raised by a ``BrokenGame``: a bug planted by a test, to show the guard catches bugs."""


class BrokenGame:
    """A game engine where every use raises ``InjectedFault`` (whatever the engine's attributes
    are called: the fault does not depend on the engine's shape)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise InjectedFault(f"injected fault: game {self._name!r}, attribute {attr!r}")


def games_registry() -> dict[str, Any]:
    from protocol import rules  # the one registry every consumer asks

    return rules.GAMES


# ------------------------------------------------------------------------------------------ children


class FileSink:
    """Appends one JSON line per report to ``<directory>/<pid>.jsonl`` (flushed at once: a child
    may be killed at any moment)."""

    def __init__(self, directory: str) -> None:
        self.path = Path(directory) / f"{os.getpid()}.jsonl"
        self._lock = threading.Lock()

    def __call__(self, report: dict[str, Any]) -> None:
        line = json.dumps({"pid": os.getpid(), **report}, default=str) + "\n"
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line)


class _ThenHook(importlib.abc.Loader):
    """Loads a module with its real loader, then calls ``after(module)``."""

    def __init__(self, real: importlib.abc.Loader, after: Callable[[ModuleType], None]) -> None:
        self.real = real
        self.after = after

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.real.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.real.exec_module(module)
        self.after(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ... for tracebacks
        return getattr(self.real, name)


class _WhenImported(importlib.abc.MetaPathFinder):
    """Calls ``after(module)`` once ``name`` has been imported, without importing it early."""

    def __init__(self, name: str, after: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.after = after

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _ThenHook(spec.loader, self.after)
                return spec
        return None


def install_in_child(directory: str) -> None:
    """Everything a guarded child reports, to ``directory``. Called by ``sitecustomize``."""
    sink = FileSink(directory)
    sink({"source": "guard", "ready": sys.argv})

    def hook_core(module: ModuleType) -> None:
        hooks = core_hooks(module, sink)
        for cls, name, method in hooks:
            setattr(cls, name, method)
        if hooks:
            sink({"source": "guard", "watching": module.__name__})
        faults = [g for g in os.environ.get(ENV_FAULT, "").split(",") if g]
        if faults:
            registry = games_registry()
            for game in faults:
                registry[game] = BrokenGame(game)
            sink({"source": "guard", "faults": faults})

    if RELAY_CORE_MODULE in sys.modules:
        hook_core(sys.modules[RELAY_CORE_MODULE])
    else:
        sys.meta_path.insert(0, _WhenImported(RELAY_CORE_MODULE, hook_core))

    def hook_log(module: ModuleType) -> None:
        for owner, name, method in log_hooks(module, sink):
            setattr(owner, name, method)

    for name in EVENT_LOG_MODULES:
        if name in sys.modules:
            hook_log(sys.modules[name])
        else:
            sys.meta_path.insert(0, _WhenImported(name, hook_log))

    logging.getLogger().addHandler(TracebackLogHandler(sink))

    previous = sys.excepthook

    def excepthook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        sink({"source": "uncaught", "traceback": "".join(traceback.format_exception(kind, exc, tb))})
        previous(kind, exc, tb)

    sys.excepthook = excepthook
    previous_thread_hook = threading.excepthook

    def thread_hook(args: Any) -> None:
        if args.exc_type is not SystemExit:
            sink({"source": "uncaught", "thread": getattr(args.thread, "name", None),
                  "traceback": "".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback))})
        previous_thread_hook(args)

    threading.excepthook = thread_hook


def read_reports(directory: str | Path) -> list[tuple[str, dict[str, Any]]]:
    """Every child's reports, as (an id unique in ``directory``, report)."""
    out = []
    for path in sorted(Path(directory).glob("*.jsonl")):
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            if line.strip():
                try:
                    out.append((f"{path.name}:{i}", json.loads(line)))
                except ValueError:  # a child killed mid-line
                    out.append((f"{path.name}:{i}", {"source": "guard", "unreadable": line}))
    return out


def is_report_of_problem(report: dict[str, Any]) -> bool:
    return report.get("source") in ("relay", "log", "uncaught") or "problem" in report
