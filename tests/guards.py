"""The relay guard: every test fails when the relay records an ``internal_error`` or anything
shows a traceback -- in the test's own process or in any Python process it starts.

How this works
--------------
A pytest plugin (registered by ``pytest_plugins`` in ``tests/conftest.py``). Its autouse fixture
``relay_guard``, for each test:

- wraps the relay core's entry points (``RelayCore.handle``/``tick``/...) so every record they
  return is checked, and adds a logging handler that catches every logged traceback -- this
  covers ``LocalServer``, the unit tests' ``Harness`` and anything else in this process;
- sets ``BLINK_TEST_GUARD_DIR`` and puts ``tests/guard_site`` first on ``PYTHONPATH``, so each
  Python subprocess (``blink serve``, ``blink match``, ``blink latency``, ``blink play``) installs
  the same checks at start-up and reports to that folder (``tests/guard_site/blink_guard.py``).

After the test's body the problems are collected; any makes the test fail with the records in
the message (problems that appear later, during fixture teardown, fail its teardown). A test
that plants a bug on purpose takes the problems it expects with ``relay_guard.take()``.

Every event log a relay wrote during the test -- in this process or a child, ``blink serve --log``
as well as ``blink match --log`` (each writer reports its path: ``blink_guard.log_hooks``) -- is
checked by ``blink verify``'s checker once the test's fixtures are torn down (every relay has
stopped, so a log is as complete as its relay left it): a log that is not true fails the test's
teardown, naming the log and its first false line. A test that leaves a false log on purpose says
so with ``relay_guard.expect_false_log(path)``: that log must then be false (or unreadable).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.guard_site import blink_guard
from tests.guard_site.blink_guard import (ENV_DIR, ENV_FAULT, BrokenGame, InjectedFault, is_problem,  # noqa: F401
                                          problems_in)

SITE_DIR = Path(blink_guard.__file__).resolve().parent
CODE_ROOT = Path(__file__).resolve().parent.parent  # where this process imports blink from
GUARD_KEY = pytest.StashKey["RelayGuard"]()


class RelayGuard:
    """The problems seen during one test, here and in the processes it started."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._local: list[dict[str, Any]] = []
        self._done: set[str] = set()  # ids of problems taken by the test or already reported
        self._expect_false: set[str] = set()  # logs the test leaves false on purpose (absolute paths)
        self._said: set[tuple[str, str]] = set()  # (log, problem) reported already: once each

    def sink(self, report: dict[str, Any]) -> None:
        self._local.append(report)

    def reports(self) -> list[tuple[str, dict[str, Any]]]:
        """Everything reported so far: here, then by each child (in pid order)."""
        here = [(f"here:{i}", r) for i, r in enumerate(self._local)]
        return here + blink_guard.read_reports(self.directory)

    def problems(self) -> list[dict[str, Any]]:
        return [r for i, r in self._pending()]

    def _pending(self) -> list[tuple[str, dict[str, Any]]]:
        return [(i, r) for i, r in self.reports() if i not in self._done and blink_guard.is_report_of_problem(r)]

    def take(self) -> list[dict[str, Any]]:
        """The problems so far, which the test then owns: they no longer fail it."""
        pending = self._pending()
        self._done.update(i for i, _ in pending)
        return [r for _, r in pending]

    def children(self) -> list[dict[str, Any]]:
        """The guard's own reports from children (one ``ready`` per child, ``watching`` once its
        relay core is hooked, ``faults`` when a fault was planted)."""
        return [r for i, r in self.reports() if not i.startswith("here:") and r.get("source") == "guard"
                and "problem" not in r]

    def event_logs(self) -> list[str]:
        """The absolute path of every event log written so far, here or by a child, in order."""
        return list(self._writers())

    def _writers(self) -> dict[str, str | None]:
        """Each event log written so far, and the folder its writer imported blink from."""
        seen: dict[str, str | None] = {}
        for _, r in self.reports():
            path = r.get("event_log")
            if r.get("source") == "guard" and isinstance(path, str):
                seen.setdefault(path, r.get("code_root"))
        return seen

    def expect_false_log(self, path: str | Path) -> None:
        """The test leaves the log at ``path`` false on purpose (a relay killed for good mid-match,
        a log cut by hand): the guard checks that it is indeed not true, instead of that it is."""
        self._expect_false.add(os.path.abspath(path))

    def verify_logs(self) -> None:
        """Check every event log written so far (see the module header); each that is not what the
        test expects becomes a problem."""
        for path, root in self._writers().items():
            if not os.path.exists(path):
                continue  # named, never created (a relay that failed at its start)
            verdict = check_log(path, root)
            problem = None
            if path in self._expect_false:
                if verdict is None:
                    problem = f"blink verify {path}: true, but the test said it leaves it false"
            elif verdict is not None:
                problem = f"blink verify {path}: {verdict}"
            if problem is not None and (path, problem) not in self._said:
                self._said.add((path, problem))
                self._local.append({"source": "guard", "event_log": path, "problem": problem})

    def message(self, problems: list[dict[str, Any]]) -> str:
        lines = [f"the relay guard saw {len(problems)} problem(s) (tests/guards.py):"]
        for p in problems[:10]:
            where = " ".join(str(x) for x in (p.get("source"), p.get("pid") and f"pid {p['pid']}", p.get("logger"),
                                                p.get("message") and repr(p["message"])) if x)
            text = p.get("traceback") or p.get("record") or p.get("problem") or p
            lines.append(f"- [{where}] {text}")
        return "\n".join(lines)

    def check(self) -> None:
        """Fails (once per problem) if anything went wrong that the test did not take."""
        pending = self._pending()
        if pending:
            self._done.update(i for i, _ in pending)
            raise AssertionError(self.message([r for _, r in pending]))


def check_log(path: str, root: str | None = None) -> str | None:
    """What ``blink verify PATH`` says of a log when it is not true (None when it is). A log written
    by a copy of blink other than this one (``root``: a test that adds a game to a copy) is checked
    by that copy's ``blink verify``, in a process of its own."""
    from protocol.verify import NotALog, parse_log, verify

    if root is not None and Path(root).resolve() != CODE_ROOT:
        env = child_env(None)
        env["PYTHONPATH"] = os.pathsep.join([root, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
        done = subprocess.run([sys.executable, "-m", "client.cli", "verify", path], capture_output=True, text=True,
                              env=env, cwd=root, timeout=600)
        return None if done.returncode == 0 else (done.stdout + done.stderr).strip()

    try:
        with open(path, encoding="utf-8") as f:
            report = verify(parse_log(f))
    except (OSError, UnicodeDecodeError, NotALog) as exc:
        return f"not a readable event log: {exc}"
    return None if report.ok else report.summary()


def install_here(guard: RelayGuard, monkeypatch: pytest.MonkeyPatch) -> logging.Handler:
    """The checks in this process: the core's and the log writers' hooks until the test's
    monkeypatch is undone; the returned log handler until the caller removes it from the root logger."""
    import client.matchrun
    import relay.core
    import relay.storage.eventlog

    hooks = blink_guard.core_hooks(relay.core, guard.sink)
    if not hooks:
        raise AssertionError(guard.message(guard.problems()))
    for module in (relay.storage.eventlog, client.matchrun):
        hooks += blink_guard.log_hooks(module, guard.sink)
    for cls, name, method in hooks:
        monkeypatch.setattr(cls, name, method)
    handler = blink_guard.TracebackLogHandler(guard.sink)
    logging.getLogger().addHandler(handler)
    return handler


def child_env(directory: Path | None) -> dict[str, str]:
    """``os.environ`` for a child: guarded (reporting to ``directory``) or, with ``None``, not."""
    env = dict(os.environ)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != SITE_DIR]
    env.pop(ENV_FAULT, None)
    if directory is None:
        env.pop(ENV_DIR, None)
    else:
        env[ENV_DIR] = str(directory)
        parts.insert(0, str(SITE_DIR))
    if parts:
        env["PYTHONPATH"] = os.pathsep.join(parts)
    else:
        env.pop("PYTHONPATH", None)
    return env


@pytest.fixture(autouse=True)
def relay_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayGuard]:
    guard = RelayGuard(tmp_path_factory.mktemp("guard", numbered=True))
    handler = install_here(guard, monkeypatch)
    for key, value in child_env(guard.directory).items():
        if os.environ.get(key) != value:
            monkeypatch.setenv(key, value)
    request.node.stash[GUARD_KEY] = guard
    try:
        yield guard
        guard.verify_logs()  # the test's other fixtures are torn down: its relays have stopped
        guard.check()  # what came after the test's body (fixture teardowns)
    finally:
        logging.getLogger().removeHandler(handler)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    try:
        result = yield
    except BaseException as exc:
        guard = item.stash.get(GUARD_KEY, None)
        if guard is not None and guard.problems():
            exc.add_note(guard.message(guard.problems()))
        raise
    guard = item.stash.get(GUARD_KEY, None)
    if guard is not None:
        guard.check()  # the test itself fails, not its teardown
    return result
