"""``blink cluster up`` with authorization (its default) and ``blink serve --password-file``, through real processes.

A 3-node cluster is started by the command; the relay's password must reach the relay through the
file the JSON names, never through the command's output or the relay's. Then, on free ports and
loopback only: a relay without the password (and one with a wrong one) is refused in one line with
a non-zero exit; a relay with ``--password-file`` serves a bot match (``blink match`` on another
node) to a valid end; an anonymous client on a third node cannot subscribe to ``#``, cannot get a
forged event through to a subscriber, and cannot open a core-NATS connection. "Nothing arrived" is
checked after a barrier: the attacker's own Ping answered by the relay, published after the forgery
on the same connection (so a forged event that got through would have been delivered first).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from client.tools import nats_cluster
from client import new_client_id
from protocol import messages as m
from protocol.codec import decode_all, encode
from protocol.topics import Topics
from protocol.verify import parse_log, verify
from tests.helpers import collect_messages
from tests.test_trust_nats import core_nats_refused
from tests.test_cluster_cli import BLINK, ROOT, blink, one_line

pytestmark = pytest.mark.integration("nats-server")

T = Topics()
FAST = {"countdown_s": 0.3, "stalemate_pause_s": 0.2, "pick_time_s": 1.0}
DEADLINE_S = 120.0


def hostport(url: str) -> tuple[str, int]:
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    return host, int(port)


def wait_for(predicate: Any, what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.timeout(900)
def test_cluster_up_enforces_auth_and_only_a_relay_with_the_password_file_serves(tmp_path: Path) -> None:
    directory = tmp_path / "c"
    relay: subprocess.Popen[bytes] | None = None
    out, err = tmp_path / "relay.out", tmp_path / "relay.err"
    password = "not read yet"
    try:
        up = blink("cluster", "up", "--nodes", "3", "--dir", str(directory))
        assert up.returncode == 0, up.stderr
        info = json.loads(up.stdout)
        assert info["auth"] is True and info["relay_user"] == "relay"
        pw_file = Path(info["password_file"])
        assert pw_file == directory.resolve() / "relay-password"
        assert pw_file.stat().st_mode & 0o077 == 0 and (directory / "auth.conf").stat().st_mode & 0o077 == 0
        password = pw_file.read_text().strip()
        assert len(password) == 32
        # The secret is in its file only: not in the output, the state file, the nodes' configurations or logs.
        assert password not in up.stdout + up.stderr
        for f in directory.iterdir():
            if f.is_file() and f.name != "relay-password" and not (f.name == "auth.conf" and "$2" not in f.read_text()):
                assert password not in f.read_text(errors="replace"), f.name
        assert info["serve"].endswith(f"--password-file {pw_file}")
        mqtt, nats_urls = info["mqtt"], info["nats"]
        assert all("@" not in u for u in mqtt + nats_urls)  # what players connect with: no credentials

        # A relay without the password, or with a wrong one: one line, status 1, the secret never echoed.
        bare = blink("serve", "--broker", mqtt[0], "--cluster", nats_urls[0], "--data", str(tmp_path / "bare"))
        assert bare.returncode == 1
        line = one_line(bare)
        assert "refused the relay's login" in line and "no password" in line and "relay-password" in line
        wrong = tmp_path / "wrong-password"
        wrong.write_text("0" * 32 + "\n")
        bad = blink("serve", "--broker", mqtt[0], "--cluster", nats_urls[0], "--data", str(tmp_path / "bad"),
                    "--password-file", str(wrong))
        assert bad.returncode == 1
        line = one_line(bad)
        assert "refused the relay's login" in line and "wrong password" in line and "0" * 32 not in line
        missing = blink("serve", "--broker", mqtt[0], "--cluster", nats_urls[0], "--password-file",
                        str(tmp_path / "nope"))
        assert missing.returncode == 2 and "cannot read the password file" in one_line(missing)

        # A relay with the password file (on node 1, failing over to the others) serves a match played on node 2.
        relay = subprocess.Popen([*BLINK, "serve", "--broker", ",".join(mqtt), "--cluster", ",".join(nats_urls),
                                  "--password-file", str(pw_file), "--data", str(tmp_path / "r")],
                                 stdout=open(out, "wb"), stderr=open(err, "wb"), cwd=ROOT)
        wait_for(lambda: relay.poll() is not None or "running on broker" in out.read_text(errors="replace"),
                 "the relay's running line")
        assert relay.poll() is None, err.read_text()
        log = tmp_path / "match.jsonl"
        match = blink("match", "--server", mqtt[1], "--bots", "2", "--game", "blink", "--settings", json.dumps(FAST),
                      "--reaction", "0.03", "--timeout", "240", "--json", "--log", str(log), timeout=300)
        assert match.returncode == 0, match.stderr
        summary = json.loads(match.stdout)
        assert summary["winner"] in summary["players"]
        lines = log.read_text().splitlines()
        assert json.loads(lines[-1])["type"] == "match_over"
        checked = verify(parse_log(lines))
        assert checked.ok, checked.summary()
        code = summary["match"]

        # An anonymous client (user "player") on node 3.
        asyncio.run(attack(mqtt[2], nats_urls[0], code))
        assert relay.poll() is None, err.read_text()
    finally:
        if relay is not None:
            relay.terminate()
            try:
                relay.wait(timeout=30)
            except subprocess.TimeoutExpired:
                relay.kill()
                relay.wait()
        nats_cluster.stop_cluster(directory)
    # Neither the relay's output nor its errors carry the password.
    assert relay is not None and password not in out.read_text(errors="replace") + err.read_text(errors="replace")


def refused(codes: Any) -> bool:
    return all(int(getattr(c, "value", c)) >= 0x80 for c in codes)


async def attack(mqtt_url: str, nats_url: str, code: str) -> None:
    host, port = hostport(mqtt_url)
    eve_id = new_client_id("eve")
    got: list[tuple[str, bytes]] = []
    async with aiomqtt.Client(host, port, identifier=eve_id) as eve:
        for topic in ("#", f"{T.prefix}/#", f"{T.prefix}/lobby/req/+", f"{T.prefix}/m/+/+/act/+"):
            assert refused(await eve.subscribe(topic, qos=1)), topic
        for topic in (T.client(eve_id), T.ev(code)):  # what a player may read: granted
            assert not refused(await eve.subscribe(topic, qos=1)), topic
        reader = asyncio.create_task(collect_messages(eve, got))
        forged = m.Event(code, 100000, time.time_ns(), 0, "match_over", {"winner": "EVIL", "reason": "won"})
        try:  # nats-server may answer a refused QoS 1 publish, or just drop it
            await asyncio.wait_for(eve.publish(T.ev(code), encode(forged), qos=1), 10)
        except (aiomqtt.MqttError, asyncio.TimeoutError):
            pass
        # Barrier: Eve's Ping, sent after the forgery, answered by the relay on her private topic.
        await eve.publish(T.req(eve_id), encode(m.Ping(t0=7)), qos=1)
        deadline = time.monotonic() + DEADLINE_S
        while not any(t == T.client(eve_id) for t, _ in got):
            assert time.monotonic() < deadline, "the relay never answered eve's ping"
            await asyncio.sleep(0.02)
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
    assert any(isinstance(x, m.Pong) for t, p in got if t == T.client(eve_id) for x in decode_all(p))
    assert not [t for t, p in got if t == T.ev(code)]  # the forged event reached nobody (the match is over)
    # Core NATS (leases, journals) without the relay's password: refused outright (by the relay's callout).
    assert await core_nats_refused(hostport(nats_url)[1])


def test_the_password_goes_into_urls_without_one_and_urls_are_shown_without_it() -> None:
    from relay.hosting.serve import with_password
    from relay.cluster import shown
    from relay.hosting import public_nats

    assert with_password("mqtt://127.0.0.1:1,mqtt://h:2", "relay", "pw") == "mqtt://relay:pw@127.0.0.1:1,mqtt://relay:pw@h:2"
    assert with_password("nats://me@h:3", "relay", "pw") == "nats://me:pw@h:3"  # its own user name is kept
    assert with_password("nats://me:own@h:3,h:4", "relay", "pw") == "nats://me:own@h:3,relay:pw@h:4"
    assert shown(["nats://relay:secret@h:1", "nats://h:2", "relay:secret@h:3"]) == "nats://h:1, nats://h:2, h:3"
    assert public_nats("nats://relay:secret@h:1,nats://h:2") == "nats://h:1,nats://h:2"
