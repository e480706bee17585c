"""``blink serve --web``: the spectator page in a real browser (Debian's chromium driven by
Playwright), against a real relay with bots playing -- the list shows the running match, its page
shows both players, changes as the match goes on and ends with the result, with no card of a hand
shown; a code the relay does not have is a 404 with words; a taken port is one line and exit 1.

Screenshots of what a viewer sees are left in the test's folder (``list.png``, ``match.png``,
``over.png``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mqttkit import free_port
from tests.conftest import in_ci
from tests.helpers import eventually, stop_process, wait_until

BLINK = [sys.executable, "-m", "client.cli"]
CHROMIUM = "/usr/bin/chromium"
#: A match short enough to end within the test, slow enough to be seen changing: one game, bots
#: that take a third of a second to play.
SETTINGS = json.dumps({"best_of": 1})
REACTION = "0.3"


def _playwright() -> Any:
    """Playwright's sync API, or a skip (a failure under CI, where everything must run)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if in_ci():
            pytest.fail("playwright is not installed, and under CI every integration test must run "
                        "(pip install -e '.[test]')", pytrace=False)
        pytest.skip("playwright is not installed (pip install -e '.[test]')")
    return sync_playwright


class Serve:
    """``blink serve --web`` on free ports (or those given), its lines read as they come; with
    ``data``, journalled there (a restart recovers its matches)."""

    def __init__(self, tmp: Path, data: Path | None = None, ports: tuple[int, int] | None = None) -> None:
        self.port, self.web = ports or (free_port(), free_port())
        self.out = open(tmp / "serve.out", "a+")  # noqa: SIM115 - closed in stop()
        self.err = open(tmp / "serve.err", "a+")  # noqa: SIM115
        self.start = Path(self.out.name).stat().st_size
        journal = ["--data", str(data)] if data is not None else ["--no-journal"]
        self.proc = subprocess.Popen([*BLINK, "serve", "--embedded", *journal, "--port", str(self.port),
                                      "--web", str(self.web)], stdout=self.out, stderr=self.err, text=True)
        self.url = f"http://127.0.0.1:{self.web}/"
        wait_until(lambda: f"page for spectators: {self.url}" in self.said() or self.proc.poll() is not None,
                   what="serve's page line")
        assert self.proc.poll() is None, self.said() + Path(self.err.name).read_text()

    def said(self) -> str:
        return Path(self.out.name).read_text()[self.start:]

    def stop(self) -> None:
        stop_process(self.proc)
        self.out.close()
        self.err.close()


def bot(server: int, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*BLINK, "bot", "--server", f"mqtt://127.0.0.1:{server}", "--reaction", REACTION, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    s = Serve(tmp_path)
    try:
        yield s
    finally:
        s.stop()


def _clock(meta: str) -> int:
    """The seconds of the "m:ss" a match's headline ends with."""
    found = re.search(r"(\d+):(\d\d)$", meta)
    assert found, meta
    return int(found[1]) * 60 + int(found[2])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - loopback, the test's own server
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.mark.integration("chromium")
def test_the_page_lists_a_bot_match_and_draws_it_live_to_its_result(serve: Serve, tmp_path: Path) -> None:
    sync_playwright = _playwright()
    first = bot(serve.port, "--create", "--name", "north", "--settings", SETTINGS)
    second: subprocess.Popen[str] | None = None
    try:
        assert first.stdout is not None
        line = first.stdout.readline()
        found = re.search(r"in match ([A-Z0-9]+) \(seat 0\)", line)
        assert found, line
        code = found.group(1)
        second = bot(serve.port, "--match", code, "--name", "south")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 860})
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.goto(serve.url)
                row = page.locator(f"tr[data-code='{code}']")
                row.wait_for(timeout=60_000)
                page.wait_for_function(
                    f"() => (document.querySelector(\"tr[data-code='{code}'] .players\") || {{}}).textContent"
                    " === 'north vs south'", timeout=60_000)
                assert row.locator("td").nth(1).text_content() == "BLINK"
                page.screenshot(path=str(tmp_path / "list.png"))

                row.locator("a").click()
                page.wait_for_url(f"**/m/{code}")
                page.wait_for_function("() => document.getElementById('players').textContent === 'north vs south'",
                                       timeout=60_000)
                page.wait_for_function("() => Number(document.getElementById('board').dataset.seq || 0) > 0",
                                       timeout=60_000)
                seen = int(page.locator("#board").get_attribute("data-seq") or 0)
                page.wait_for_function(f"() => Number(document.getElementById('board').dataset.seq) > {seen} + 3",
                                       timeout=60_000)  # the match goes on, and the page with it
                names = page.locator("svg .seat-name").all_text_contents()
                assert sorted(names) == ["north", "south"]
                page.wait_for_function("() => document.querySelectorAll('#board g.card[data-card]').length > 0")
                cards = page.locator("#board g.card").evaluate_all("els => els.map(e => e.dataset.card)")
                faces = [c for c in cards if c != "back"]
                assert len(faces) <= 6, cards  # the centre piles' top cards, never a hand's
                assert all(re.fullmatch(r"\d-[a-z]+-[a-z]+", c) for c in faces), faces
                assert page.locator("#plays li").count() > 0
                # each player's panel: what the relay measured of their plays (a round trip once a play named
                # the state the relay last published), and in the table the races each has lost
                page.wait_for_function("() => [...document.querySelectorAll('#seats .figures')]"
                                       ".some(e => /round trip [0-9]/.test(e.textContent))", timeout=60_000)
                races = page.locator("svg .races").all_text_contents()
                assert len(races) == 2 and all(re.fullmatch(r"races lost \d+", t) for t in races), races
                page.screenshot(path=str(tmp_path / "match.png"))

                page.locator("#result").wait_for(state="visible", timeout=240_000)
                result = page.locator("#result").text_content() or ""
                assert re.match(r"Match over: (north|south) won \(|Match over: no winner", result), result
                page.screenshot(path=str(tmp_path / "over.png"))
                assert errors == []
            finally:
                browser.close()
        listed = json.loads(_get(serve.url + "matches.json")[1])["matches"]
        assert [(x["code"], x["live"]) for x in listed] == [(code, False)]
    finally:
        for b in (first, second):
            if b is not None:
                stop_process(b)
                if b.stdout is not None:
                    b.stdout.close()


@pytest.mark.integration("chromium")
def test_the_match_page_follows_its_match_through_a_relay_restart(tmp_path: Path) -> None:
    """The relay dies (SIGKILL) and starts again on its journal: the page reconnects by itself, to
    the new process, and goes on drawing the same match as its players carry on."""
    sync_playwright = _playwright()
    data = tmp_path / "data"
    serve = Serve(tmp_path, data)
    bots: list[subprocess.Popen[str]] = []
    try:
        bots.append(bot(serve.port, "--create", "--name", "north", "--settings", json.dumps({"best_of": 3})))
        assert bots[0].stdout is not None
        code = re.search(r"in match ([A-Z0-9]+)", bots[0].stdout.readline()).group(1)  # type: ignore[union-attr]
        bots.append(bot(serve.port, "--match", code, "--name", "south"))
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 860})
                page.goto(f"{serve.url}m/{code}")
                page.wait_for_function("() => Number(document.getElementById('board').dataset.seq || 0) > 12"
                                       " && /0:(0[6-9]|[1-5][0-9])$/.test(document.getElementById('meta').textContent)",
                                       timeout=60_000)  # it has run 6 s or more
                serve.proc.kill()
                serve.proc.wait(timeout=30)
                page.wait_for_function("() => document.getElementById('connection').textContent !== 'live'",
                                       timeout=60_000)
                before = int(page.locator("#board").get_attribute("data-seq") or 0)
                serve.stop()
                serve = Serve(tmp_path, data, (serve.port, serve.web))
                page.wait_for_function(f"() => Number(document.getElementById('board').dataset.seq) > {before} + 4"
                                       " && document.getElementById('connection').textContent === 'live'",
                                       timeout=120_000)
                assert page.locator("#players").text_content() == "north vs south"
                # how long: since its creation, not since the new process first saw it (the page's own
                # clock may have run a second ahead of the relay's while it waited)
                assert _clock(page.locator("#meta").text_content() or "") >= 5
                page.screenshot(path=str(tmp_path / "after-restart.png"))
            finally:
                browser.close()
    finally:
        for b in bots:
            stop_process(b)
            if b.stdout is not None:
                b.stdout.close()
        serve.stop()


async def _rated_forfeit(port: int) -> str:
    """Two players with keys start a match and the first leaves it: a rated forfeit (a loss for it)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    from client import Player
    from client.identity import Identity
    from mqttkit import BrokerAddress

    def key() -> Identity:
        return Identity(Ed25519PrivateKey.generate().private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()))

    address = BrokerAddress("127.0.0.1", port)
    async with Player(address, "quitter", identity=key()) as a, Player(address, "stayer", identity=key()) as b:
        code = await a.create(settings={"best_of": 1})
        await b.join(code)
        await eventually(lambda: b.model.match_state.get("status") == "playing", changed=b.wait_change,
                         what="the match playing")
        await a.close(leave=True)
        await eventually(b.match_over, changed=b.wait_change, what="the forfeit")
    return code


@pytest.mark.integration("chromium")
def test_the_list_shows_each_games_leaderboard(serve: Serve, tmp_path: Path) -> None:
    sync_playwright = _playwright()
    asyncio.run(_rated_forfeit(serve.port))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 700})
            page.goto(serve.url)
            board = page.locator("#leaderboard table.board-blink")
            board.wait_for(timeout=60_000)  # asked of the relay while the list is read
            names = board.locator("td.players").all_text_contents()
            assert names == ["stayer", "quitter"], names  # the winner of the forfeit first
            assert "BLINK (2 rated)" in (page.locator("#leaderboard h2").first.text_content() or "")
            page.screenshot(path=str(tmp_path / "leaderboard.png"))
        finally:
            browser.close()


@pytest.mark.integration
def test_a_code_the_relay_does_not_have_is_a_404_with_words(serve: Serve) -> None:
    status, body = _get(serve.url + "m/NOPE7")
    assert status == 404 and "No match NOPE7 on this relay" in body, body
    assert _get(serve.url + "m/NOPE7/events")[0] == 404
    status, body = _get(serve.url + "nothing/here")
    assert status == 404 and "Nothing here" in body
    status, body = _get(serve.url)
    assert status == 200 and "<table id=\"matches\"" in body
    assert json.loads(_get(serve.url + "matches.json")[1]) == {"matches": [], "leaderboards": []}


@pytest.mark.integration
def test_web_on_a_port_in_use_is_one_line_naming_it_and_exit_1() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([*BLINK, "serve", "--embedded", "--no-journal", "--port", str(free_port()),
                               "--web", str(port)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"port {port}" in lines[0] and "--web" in lines[0], done.stderr
    assert "running" not in done.stdout


@pytest.mark.parametrize("value", ["http", "70000", ":80"])
@pytest.mark.integration  # it starts the command line
def test_web_with_no_port_is_a_usage_error(value: str) -> None:
    done = subprocess.run([*BLINK, "serve", "--web", value], capture_output=True, text=True, timeout=60,
                          env={**os.environ})
    assert done.returncode == 2 and "--web" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done
