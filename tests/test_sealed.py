"""``blink serve --seal`` on a broker that enforces nothing (Mosquitto with ``allow_anonymous true``, no
access rules), as players reach it: the URL it prints (``?pin=``) is all ``blink match``, ``bot``
and ``watch`` need; the relay's identity stays in its data directory (mode
600) so the pin stays true across restarts, and a player seated across a restart takes the new
keys, seals its last will with them and plays on. A URL without the pin, with another relay's pin,
or a pin against a relay that does not seal is one line and exit status 1; ``--seal`` with a
cluster is exit status 2."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.attack_open import OpenMosquitto
from client import Bot, Player
from mqttkit import parse_url
from protocol import messages as m
from protocol.codec import encode
from protocol.topics import Topics
from relay.sealing import IDENTITY_FILE
from tests.helpers import eventually, stop_process

pytestmark = pytest.mark.integration("mosquitto")

BLINK = [sys.executable, "-m", "client.cli"]
QUICK_MATCH = ["match", "--game", "takeaway", "--seed", "3", "--reaction", "0.02", "--json", "--timeout", "90"]


def blink(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BLINK, *args], capture_output=True, text=True, timeout=timeout)


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


# ------------------------------------------------------------------------------------ on an open broker


@pytest.fixture
def open_broker() -> Iterator[OpenMosquitto]:
    broker = OpenMosquitto()
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


class Serve:
    """``blink serve --broker URL --seal`` as a person runs it; ``url``: what it printed for players."""

    def __init__(self, broker: str, *more: str) -> None:
        self.proc = subprocess.Popen([*BLINK, "serve", "--broker", broker, *more], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.url = ""
        self.lines: list[str] = []
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            if "players connect with" in line or (line.startswith("blink relay data") and "--seal" not in more):
                self.url = line.rsplit(" ", 1)[1].strip() if "players connect with" in line else broker
                return
        stop_process(self.proc)
        raise AssertionError(f"blink serve did not start: {self.lines} {self.proc.stderr.read() if self.proc.stderr else ''}")

    def stop(self) -> str:
        self.proc.send_signal(2)
        try:
            _, err = self.proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return err


def test_players_need_only_the_url_serve_prints_and_a_wrong_or_missing_pin_is_one_line(
        open_broker: OpenMosquitto, tmp_path: Path) -> None:
    serve = Serve(open_broker.url, "--seal", "--data", str(tmp_path / "data"), "--log", str(tmp_path / "relay.log"))
    try:
        url = serve.url
        address = parse_url(url)
        assert address.pin and url == f"{open_broker.url}/?pin={address.pin}"
        assert stat.S_IMODE((tmp_path / "data" / IDENTITY_FILE).stat().st_mode) == 0o600
        played = blink(*QUICK_MATCH, "--server", url, "--log", str(tmp_path / "match.log"))
        assert played.returncode == 0, played.stderr
        summary = json.loads(played.stdout.strip().splitlines()[-1])
        assert summary["winner"] and summary["accepted"] > 0, summary
        assert blink("verify", str(tmp_path / "match.log")).returncode == 0
        # Anyone may overwrite the relay's retained status on this broker: the relay states it again,
        # and players still find its keys (what follows connects anew).
        asyncio.run(overwrite_status(open_broker.url))
        # A bot creates a match and prints its code; a spectator watches it by code, both with the URL.
        creator = subprocess.Popen([*BLINK, "bot", "--server", url, "--create", "--game", "takeaway", "--reaction", "0.05"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert creator.stdout is not None
            code = ""
            deadline = time.monotonic() + 60
            while not code and time.monotonic() < deadline:
                line = creator.stdout.readline()  # "NAME in match CODE (seat 0)"
                found = re.search(r" in match ([A-Z0-9]+) ", line)
                code = found.group(1) if found else ""
                if not line:
                    break
            assert code, "no match code printed"
            joiner = subprocess.Popen([*BLINK, "bot", "--server", url, "--match", code, "--reaction", "0.05"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            watched = blink("watch", code, "--server", url)
            assert watched.returncode == 0, watched.stderr
            assert "won" in watched.stdout or "winner" in watched.stdout.lower(), watched.stdout
            joiner.wait(timeout=60)
            assert joiner.returncode == 0
        finally:
            stop_process(creator)
        # The same broker without the pin, with another relay's: one line, exit 1, nothing played.
        plain = blink(*QUICK_MATCH, "--server", open_broker.url)
        assert plain.returncode == 1 and "seals its messages" in one_line(plain) and "?pin=" in one_line(plain)
        other = blink(*QUICK_MATCH, "--server", f"{open_broker.url}/?pin={'a' * 26}")
        assert other.returncode == 1 and "not the one the pin names" in one_line(other)
        typo = blink(*QUICK_MATCH, "--server", f"{open_broker.url}/?pin=abc")
        assert typo.returncode == 2 and "not a relay pin" in one_line(typo)
    finally:
        err = serve.stop()
    assert "Traceback" not in err, err
    again = Serve(open_broker.url, "--seal", "--data", str(tmp_path / "data"))
    try:
        assert again.url == url  # the same identity: the pin players were given still holds
    finally:
        again.stop()


async def overwrite_status(url: str) -> None:
    import aiomqtt

    address = parse_url(url)
    async with aiomqtt.Client(address.host, address.port, identifier="overwriter") as client:
        await client.publish(Topics().relay_status("relay-0"), encode(m.RelayStatus("relay-0", False)), qos=1,
                             retain=True)


def test_a_pin_against_a_relay_that_does_not_seal_is_refused(open_broker: OpenMosquitto, tmp_path: Path) -> None:
    serve = Serve(open_broker.url, "--no-journal")
    try:
        assert serve.url == open_broker.url
        pinned = blink(*QUICK_MATCH, "--server", f"{open_broker.url}/?pin={'a' * 26}")
        assert pinned.returncode == 1 and "does not seal" in one_line(pinned)
    finally:
        serve.stop()


def test_latency_and_load_need_only_the_url_too(open_broker: OpenMosquitto) -> None:
    serve = Serve(open_broker.url, "--seal", "--no-journal")
    try:
        lat = blink("latency", "--server", serve.url, "--duration", "4", "--json")
        assert lat.returncode == 0, lat.stderr
        report = json.loads(lat.stdout)
        assert report["plays"] > 0 and report["log_gaps"] == 0, report
        load = blink("load", "--server", serve.url, "--matches", "3", "--duration", "4", "--json")
        assert load.returncode == 0, load.stderr
        loaded = json.loads(load.stdout)
        assert loaded["actions"] > 0 and loaded["unanswered"] == 0 and loaded["bad_messages"] == 0, loaded
    finally:
        err = serve.stop()
    assert "Traceback" not in err and "dropped" not in err, err  # nothing of theirs refused


def test_seal_is_for_a_single_relay_on_a_given_broker() -> None:
    for cluster in (["--cluster", "nats://127.0.0.1:1"], ["--shards", "0", "--shards-total", "2"]):
        refused = blink("serve", "--broker", "mqtt://127.0.0.1:1", "--seal", *cluster, timeout=30)
        assert refused.returncode == 2 and "--seal is for a single relay" in one_line(refused)
    lan = blink("serve", "--lan", "--seal", timeout=30)
    assert lan.returncode == 2 and "--seal is for a broker that keeps nobody apart" in one_line(lan)


def test_a_seated_player_plays_on_across_a_restart_with_the_relays_new_keys(open_broker: OpenMosquitto,
                                                                            tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    serve = Serve(open_broker.url, "--seal", "--data", data)

    async def play() -> None:
        nonlocal serve
        address = parse_url(serve.url)
        async with Player(address, "ann") as ann, Player(address, "bob") as bob:
            code = await ann.create("takeaway", {})
            await bob.join(code)
            await eventually(lambda: ann.model.state() is not None and bob.model.state() is not None)
            assert ann.conn.seal is not None and bob.conn.seal is not None
            epoch = ann.conn.seal.epoch
            err = serve.stop()
            assert "Traceback" not in err, err
            serve = Serve(open_broker.url, "--seal", "--data", data)
            assert serve.url == address.url
            # Both take the new start's keys from its status and connect again, their last wills
            # sealed under the new keys, and get their seats and views back.
            for p in (ann, bob):
                await eventually(lambda p=p: p.conn.seal is not None and p.conn.seal.epoch not in (None, epoch)
                                 and p.conn.reconnects >= 1 and p.model.connection == "connected", timeout=60)
            seen = len(ann.model.events)
            # bob's connection breaks without a DISCONNECT: the broker publishes his sealed last will,
            # and the relay takes it -- ann hears that his seat dropped.
            client = bob.conn._client
            assert client is not None
            client._client.socket().shutdown(socket.SHUT_RDWR)
            await eventually(lambda: any(e.type == "player_dropped" for e in list(ann.model.events)[seen:]), timeout=60)
            # And play goes on: the bots finish the match.
            await asyncio.wait_for(asyncio.gather(Bot(ann, 0.02, seed=1).run(), Bot(bob, 0.02, seed=2).run()), 120)
            assert ann.match_over() and bob.match_over()
    try:
        asyncio.run(play())
    finally:
        err = serve.stop()
    assert "Traceback" not in err, err
