"""Joining and watching a match by its code from the command line, while the match still waits for
its second player -- the normal case of joining a friend.

Everything is the real thing: a Mosquitto configured by ``blink broker-config``, ``blink serve`` on
it, ``blink bot --create`` or a ``blink play --host`` window as the host, and ``blink play --server
URL --match CODE`` / ``--watch CODE`` windows under the window tests' Xvfb. What shows the game was
played or watched: the host bot's own report of the match's end, and the recording the joining or
watching ``blink play`` writes of it (every match a window plays or watches is recorded), which must
hold the whole match, from ``match_created`` to ``match_over``, with the joiner's own plays in it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from mqttkit import BrokerAddress
from tests.test_window import LONG, SCENARIO_S, xdisplay  # noqa: F401 - the Xvfb fixture

pytestmark = [pytest.mark.integration, pytest.mark.timeout(SCENARIO_S)]

BLINK = [sys.executable, "-m", "client.cli"]
#: A short match: one game, short pauses.
FAST = json.dumps({"best_of": 1, "countdown_s": 0.3, "stalemate_pause_s": 0.2})


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = LONG,
             running: tuple[subprocess.Popen[str], ...] = ()) -> Any:
    """``predicate()`` once true; an error as soon as one of the ``running`` processes has ended."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        for proc in running:
            if proc.poll() is not None:
                raise AssertionError(f"{what}: {' '.join(proc.args[2:])} ended ({proc.returncode}): "  # type: ignore[index]
                                     f"{proc.communicate()[1].strip()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in {timeout:g} s: {what}")
        time.sleep(0.1)  # polling files and processes for a condition, with a deadline


class Procs:
    """The processes a test starts, each with its own data directory; all stopped at the end."""

    def __init__(self, tmp: Path, display: str) -> None:
        self.tmp, self.display = tmp, display
        self.started: list[subprocess.Popen[str]] = []

    def data(self, name: str) -> Path:
        return self.tmp / name

    def start(self, name: str, *argv: str) -> subprocess.Popen[str]:
        env = {**os.environ, "DISPLAY": self.display, "XDG_DATA_HOME": str(self.data(name)), "PYTHONUNBUFFERED": "1"}
        windowed = argv[:1] == ("play",)  # (a window's sound: none in a test)
        proc = subprocess.Popen([*BLINK, *argv, *(["--mute"] if windowed else [])], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.started.append(proc)
        return proc

    def recording(self, name: str, code: str) -> list[dict[str, Any]]:
        """The events of ``code`` that ``name``'s ``blink play`` recorded (header line left out)."""
        files = sorted((self.data(name) / "blink" / "replays").glob(f"*-{code}.jsonl"))
        lines: list[dict[str, Any]] = []
        for f in files:
            for line in f.read_text().splitlines():
                try:
                    lines.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line being written
        return [r for r in lines if r.get("match") == code and "seq" in r]

    def stop(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=LONG)


@pytest.fixture
def relay(mosquitto: BrokerAddress) -> Iterator[str]:
    """``blink serve`` on a Mosquitto of its own; yields the URL players use."""
    serve = subprocess.Popen([*BLINK, "serve", "--broker", mosquitto.login_url, "--no-journal"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "running" in (serve.stdout.readline() if serve.stdout else ""), serve.stderr
        yield mosquitto.url
    finally:
        serve.send_signal(signal.SIGINT)
        serve.communicate(timeout=LONG)


@pytest.fixture
def procs(tmp_path: Path, xdisplay: str) -> Iterator[Procs]:  # noqa: F811 - the fixture from test_window
    p = Procs(tmp_path, xdisplay)
    try:
        yield p
    finally:
        p.stop()


def bot_create(procs: Procs, url: str) -> tuple[subprocess.Popen[str], str]:
    """``blink bot --create``: the bot and the code of its match, waiting for a second player."""
    host = procs.start("host", "bot", "--server", url, "--create", "--name", "hostbot", "--settings", FAST,
                       "--seed", "3")
    first = host.stdout.readline() if host.stdout else ""
    assert " in match " in first, (first, host.stderr.read() if host.stderr else "")
    return host, first.split(" in match ")[1].split()[0]


def played_to_the_end(events: list[dict[str, Any]]) -> bool:
    return any(e["type"] == "match_over" for e in events)


def end_window(proc: subprocess.Popen[str]) -> tuple[int, str]:
    """SIGTERM (a normal quit) and the window's exit status and stderr."""
    assert proc.poll() is None, f"the window ended early ({proc.returncode}): {proc.communicate()[1]}"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=LONG)
    return proc.returncode, err


def test_blink_play_joins_by_code_a_match_a_bot_created(relay: str, procs: Procs) -> None:
    host, code = bot_create(procs, relay)
    stats = procs.tmp / "frames.json"
    joiner = procs.start("joiner", "play", "--server", relay, "--match", code, "--autoplay", "--name", "friend",
                         "--quit-after", str(int(SCENARIO_S)), "--frame-stats", str(stats))
    events = wait_for(lambda: (lambda ev: ev if played_to_the_end(ev) else None)(procs.recording("joiner", code)),
                      "the joining window recorded the match to its end", running=(joiner,))
    out, err = host.communicate(timeout=LONG)  # the bot played the match to its end, then stopped
    assert host.returncode == 0 and "match over: winner " in out, (out, err)
    status, err = end_window(joiner)
    assert status == 0 and "no match" not in err, err
    assert events[0]["type"] == "match_created" and events[0]["seq"] == 1
    assert any(e["type"] == "seat_taken" and e.get("seat") == 1 and e.get("name") == "friend" for e in events)
    assert any(e["type"] == "card_played" and e.get("seat") == 1 for e in events), "the joiner played"
    assert json.loads(stats.read_text())["scene"] == "table"


def test_blink_play_joins_by_code_a_match_a_host_window_created(relay: str, procs: Procs) -> None:
    host = procs.start("host", "play", "--server", relay, "--host", "--autoplay", "--name", "hoster",
                       "--settings", FAST, "--quit-after", str(int(SCENARIO_S)))
    seat = procs.data("host") / "blink" / "seats" / "last-play.json"
    code = json.loads(wait_for(lambda: seat.exists() and seat.read_text(), "the host window saved its seat",
                                 running=(host,)))["match"]
    joiner = procs.start("joiner", "play", "--server", relay, "--match", code, "--autoplay", "--name", "friend",
                         "--quit-after", str(int(SCENARIO_S)))
    events = wait_for(lambda: (lambda ev: ev if played_to_the_end(ev) else None)(procs.recording("joiner", code)),
                      "the joining window recorded the match to its end", running=(joiner, host))
    for window in (joiner, host):
        status, err = end_window(window)
        assert status == 0 and "no match" not in err, err
    players = {e.get("seat"): e.get("name") for e in events if e["type"] == "seat_taken"}
    assert players == {0: "hoster", 1: "friend"}
    assert {e.get("seat") for e in events if e["type"] == "card_played"} == {0, 1}, "both windows played"


def test_blink_play_watches_by_code_a_match_that_waits_for_its_players(relay: str, procs: Procs) -> None:
    host, code = bot_create(procs, relay)
    stats = procs.tmp / "frames.json"
    watcher = procs.start("watcher", "play", "--server", relay, "--watch", code,
                          "--quit-after", str(int(SCENARIO_S)), "--frame-stats", str(stats))
    # The window records what it watches once it is open, past the server check: the match still waits.
    wait_for(lambda: procs.recording("watcher", code), "the watching window opened and began recording",
             running=(watcher,))
    assert host.poll() is None
    joiner = procs.start("joiner", "bot", "--server", relay, "--match", code, "--name", "joiner", "--seed", "4")
    for bot in (host, joiner):
        out, err = bot.communicate(timeout=LONG)
        assert bot.returncode == 0 and "match over: winner " in out, (out, err)
    events = wait_for(lambda: (lambda ev: ev if played_to_the_end(ev) else None)(procs.recording("watcher", code)),
                      "the watching window saw the match to its end", running=(watcher,))
    status, err = end_window(watcher)
    assert status == 0 and "no match" not in err, err
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(seqs) + 1)), "watched from the first event, none missing"
    assert {e.get("seat") for e in events if e["type"] == "card_played"} == {0, 1}
    assert json.loads(stats.read_text())["scene"] == "table"
