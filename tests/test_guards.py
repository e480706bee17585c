"""The relay guard (tests/guards.py) catches what it is there to catch: a bug planted in a game
engine shows up as the relay's ``internal_error`` -- in this process and in a ``blink serve``
subprocess -- and a test that meets one fails."""

from __future__ import annotations

import asyncio
import signal
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from protocol import messages as m
from protocol.rules import GAMES
from mqttkit import BrokerAddress, free_port
from client import Connection
from tests.conftest import ROOT
from tests.guards import ENV_FAULT, BrokenGame, RelayGuard, child_env, problems_in
from tests.helpers import eventually
from tests.test_relay_core import T, Harness

BLINK = [sys.executable, "-m", "client.cli"]


def internal_errors(problems: list[dict]) -> list[dict]:
    return [p["record"] for p in problems if p.get("source") == "relay" and p["record"].get("code") == "internal_error"]


def test_the_check_finds_internal_errors_and_tracebacks_and_nothing_else() -> None:
    records = [
        {"kind": "relay_started", "seed": 1, "ts": 1},
        {"kind": "bad_input", "code": "malformed", "ts": 2, "detail": "not msgpack"},
        {"kind": "bad_input", "code": "internal_error", "ts": 3, "detail": "KeyError: 'x'"},
        {"kind": "applied", "ts": 4, "note": {"deep": ["Traceback (most recent call last):\n  File ..."]}},
        {"kind": "event", "ts": 5, "type": "card_played", "detail": "a traceback-free line"},
    ]
    assert problems_in(records) == [records[2], records[3]]


def test_a_bug_in_a_game_engine_reaches_the_guard_in_this_process(relay_guard: RelayGuard,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness()
    h.send(T.req("a"), m.CreateMatch(name="ann"))
    assert relay_guard.problems() == []  # the control: a sound engine, nothing to report
    monkeypatch.setitem(GAMES, "blink", BrokenGame("blink"))
    out = h.send(T.req("b"), m.CreateMatch(name="bob"))
    (record,) = [o.record for o in out if getattr(o, "record", {}).get("code") == "internal_error"]
    (seen,) = internal_errors(relay_guard.take())
    assert seen == record and "InjectedFault" in seen["detail"]
    assert relay_guard.problems() == []  # taken: this test owns them and passes


@pytest.mark.integration
def test_a_bug_in_a_subprocess_relay_reaches_the_guard(relay_guard: RelayGuard) -> None:
    port = free_port()
    serve = subprocess.Popen([*BLINK, "serve", "--port", str(port)], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env={**child_env(relay_guard.directory),
                                                                     ENV_FAULT: "blink"})
    try:
        assert "running" in (serve.stdout.readline() if serve.stdout else "")  # subscribed and ready

        async def create() -> list[object]:
            got: list[object] = []
            async with Connection(BrokerAddress("127.0.0.1", port), "guard1", on_message=lambda msg, now: got.append(msg),
                                  ping_interval_s=0) as conn:
                await conn.request(m.Ping(t0=1))
                await eventually(lambda: any(isinstance(x, m.Pong) for x in got), what="the relay's pong")
                await conn.request(m.CreateMatch(name="ann", game="blink"))
                await eventually(lambda: internal_errors(relay_guard.problems()), what="the child's internal_error")
            return got

        got = asyncio.run(create())
        assert not any(isinstance(x, m.MatchJoined) for x in got)
    finally:
        serve.send_signal(signal.SIGINT)
        out, err = serve.communicate(timeout=60)
    assert serve.returncode == 130, err
    (seen,) = internal_errors(relay_guard.take())
    assert "InjectedFault" in seen["detail"] and seen["topic"] == T.req("guard1")
    reports = relay_guard.children()
    assert any(r.get("watching") == "relay.core" and r["pid"] == serve.pid for r in reports)
    assert any(r.get("faults") == ["blink"] and r["pid"] == serve.pid for r in reports)


INNER = '''
import logging

from protocol import messages as m
from protocol.rules import GAMES
from tests.guards import BrokenGame
from tests.test_relay_core import T, Harness


def test_sound():
    Harness().send(T.req("a"), m.CreateMatch(name="ann"))


def test_engine_bug(monkeypatch):
    monkeypatch.setitem(GAMES, "blink", BrokenGame("blink"))
    Harness().send(T.req("a"), m.CreateMatch(name="ann"))  # the relay catches it; the test would pass


def test_logged_traceback():
    try:
        {}["missing"]
    except KeyError:
        logging.getLogger("blink.somewhere").exception("handler failed")
'''


def test_a_test_that_meets_a_relay_bug_fails(tmp_path: Path) -> None:
    inner = tmp_path / "test_inner.py"
    inner.write_text(textwrap.dedent(INNER))
    # A pytest of its own, unguarded by this test's guard (its engine bug is not ours).
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "tests.guards", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(inner)],
                          cwd=ROOT, capture_output=True, text=True, timeout=240, env=child_env(None))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    outcomes = {name: outcome for outcome, name in re.findall(r"^(PASSED|FAILED|ERROR) \S*::(\w+)", proc.stdout, re.M)}
    assert outcomes == {"test_sound": "PASSED", "test_engine_bug": "FAILED", "test_logged_traceback": "FAILED"}, \
        proc.stdout
    assert "internal_error" in proc.stdout and "InjectedFault" in proc.stdout
    assert "handler failed" in proc.stdout and "KeyError" in proc.stdout
