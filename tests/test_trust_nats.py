"""A NATS node with blink's authorization (``relay/natsauth.py``): what it stops, on a real nats-server.

The node is ``client/tools/templates/nats-node.conf.in`` rendered as ``blink cluster up`` renders it (one node:
JetStream, MQTT) plus ``include "auth.conf"`` written by ``write_nats_auth``. A real relay
(``LocalServer`` on the node's MQTT port, logged in as ``relay``) serves a bot match through it, so
the permissions are shown to be enough to play; an attacker (anonymous, i.e. user ``player``)
tries every attack the other brokers are tried with. What this configuration cannot stop (a player reading ``c/+``) is
said in ``relay/natsauth.py`` and not claimed here. "Nothing arrived" is checked after a barrier:
a Pong from the relay on a path the attacker may read, published after the forgeries.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import aiomqtt
import nats
import pytest

from client.tools.nats_cluster import TEMPLATE, Node, render
from client.matchrun import run_match
from client.net import Connection, new_client_id
from mqttkit import BrokerAddress, free_port
from protocol import messages as m
from protocol.codec import decode_all, encode
from protocol.topics import Topics
from relay.local import LocalServer
from relay.natsauth import auth_text, main as natsauth_main, secure_node_conf, write_nats_auth
from tests.conftest import ROOT, wait_port
from tests.helpers import collect_messages, quiet_error_cb, stop_process

pytestmark = pytest.mark.integration

T = Topics()
FAST = {"countdown_s": 0.3, "stalemate_pause_s": 0.2, "pick_time_s": 1.0}
DEADLINE_S = 60.0


def find_nats_server() -> str | None:
    return shutil.which("nats-server") or next((p for p in ("/usr/sbin/nats-server", "/usr/bin/nats-server")
                                                 if Path(p).exists()), None)


async def until(cond: Any, what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


class NatsNode:
    def __init__(self, mqtt: BrokerAddress, nats_port: int, secret: str) -> None:
        self.mqtt = mqtt  # the relay's MQTT login
        self.nats_port = nats_port
        self.secret = secret

    @property
    def players(self) -> BrokerAddress:
        return self.mqtt.public()


@pytest.fixture
def nats_node() -> Iterator[NatsNode]:
    binary = find_nats_server()
    if binary is None:
        pytest.fail("nats-server is not installed (.ci/run installs it)")
    d = Path(tempfile.mkdtemp(prefix="blink-nats-auth-"))
    ports = [free_port() for _ in range(4)]
    node = Node("n1", *ports)
    conf = secure_node_conf(render(TEMPLATE.read_text(), node, [node], str(d / "js")))
    secret = write_nats_auth(d / "auth.conf")
    (d / "n1.conf").write_text(conf)
    log = open(d / "n1.log", "wb")
    proc = subprocess.Popen([binary, "-c", str(d / "n1.conf")], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_port("127.0.0.1", node.mqtt, timeout=30)
        yield NatsNode(BrokerAddress("127.0.0.1", node.mqtt, "relay", secret), node.client, secret)
    finally:
        stop_process(proc)
        log.close()
        shutil.rmtree(d, ignore_errors=True)


def refused(codes: Any) -> bool:
    return all(int(getattr(c, "value", c)) >= 0x80 for c in codes)


def test_the_auth_block_names_the_prefix_and_refuses_prefixes_nats_cannot_say(tmp_path: Path) -> None:
    text = auth_text("HASH", "pw", "game/v2")
    assert '"game.v2.lobby.req.*"' in text and '"game.v2.c.*"' in text and "blink" not in text.split("authorization")[1]
    for bad in ("a.b", "a b", "", "a/#", "x*"):
        with pytest.raises(ValueError):
            auth_text("HASH", "pw", bad)
    secret = write_nats_auth(tmp_path / "auth.conf")
    written = (tmp_path / "auth.conf").read_text()
    assert len(secret) == 32 and secret not in written  # stored hashed
    assert (tmp_path / "auth.conf").stat().st_mode & 0o077 == 0
    assert natsauth_main([str(tmp_path / "x" / "auth.conf"), "--prefix", "a.b"]) == 2
    assert natsauth_main([str(tmp_path / "y" / "auth.conf"), str(tmp_path / "missing.conf")]) == 2
    assert not (tmp_path / "y" / "auth.conf").exists()  # nothing written when a node file is wrong
    node = (ROOT / "deploy" / "nats" / "node1.conf").read_text()
    secured = secure_node_conf(node)
    assert secure_node_conf(secured) == secured  # once only
    mqtt_block = secured.split("mqtt {", 1)[1].split("}", 1)[0]
    assert 'no_auth_user: "player"' in mqtt_block and secured.rstrip().endswith('include "auth.conf"')
    with pytest.raises(ValueError):
        secure_node_conf("listen: 1\n")


def test_on_nats_only_the_relay_with_its_password_is_relay(nats_node: NatsNode) -> None:
    async def main() -> None:
        for password in (None, "", "wrong"):
            with pytest.raises(aiomqtt.MqttError):
                async with aiomqtt.Client("127.0.0.1", nats_node.mqtt.port, identifier=new_client_id("x"),
                                          username="relay", password=password):
                    pass
        async with aiomqtt.Client("127.0.0.1", nats_node.mqtt.port, identifier=new_client_id("r"),
                                  username="relay", password=nats_node.secret):
            pass
        # Core NATS (the relays' leases and journals): only with the relay's password.
        for url in (f"nats://127.0.0.1:{nats_node.nats_port}", f"nats://relay:wrong@127.0.0.1:{nats_node.nats_port}"):
            with pytest.raises(Exception):
                await nats.connect(url, connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=0,
                                   error_cb=quiet_error_cb)  # refused: that is the point (nats-py would log a traceback)
        nc = await nats.connect(f"nats://relay:{nats_node.secret}@127.0.0.1:{nats_node.nats_port}", connect_timeout=5)
        try:  # ... with JetStream's API, as the relays' leases and journals use it
            js = nc.jetstream()
            await js.add_stream(name="authcheck", subjects=["authcheck.>"])
            ack = await js.publish("authcheck.x", b"1")
            assert ack.seq == 1
        finally:
            await nc.close()

    asyncio.run(main())


def test_on_nats_players_play_but_cannot_forge_the_relays_messages_or_read_requests(nats_node: NatsNode) -> None:
    async def main() -> None:
        async with LocalServer(nats_node.mqtt.login_url, seed=31) as server:
            assert server.relay is not None
            got: list[Any] = []
            victim = Connection(nats_node.players, on_message=lambda msg, now: got.append(msg), ping_interval_s=0)
            eve_id = new_client_id("eve")
            eve_got: list[tuple[str, bytes]] = []
            async with victim, aiomqtt.Client("127.0.0.1", nats_node.mqtt.port, identifier=eve_id) as eve:
                for t in ("#", f"{T.prefix}/#", f"{T.prefix}/lobby/req/+", f"{T.prefix}/m/+/+/act/+", "$MQTT/sub/#"):
                    assert refused(await eve.subscribe(t, qos=1)), t
                for t in (T.client(eve_id), T.match_list, f"{T.prefix}/m/+/+/ev", f"{T.prefix}/m/+/+/snap"):
                    assert not refused(await eve.subscribe(t, qos=1)), t
                reader = asyncio.create_task(collect_messages(eve, eve_got))
                # A bot match through the node: the permissions are enough to play.
                result = await run_match(nats_node.players, "blink", 2, FAST, 31, 0.03, 240)
                assert result.summary()["winner"] in result.summary()["players"]
                code = result.events[-1].match
                forged = m.Event(code, 100000, time.time_ns(), 0, "match_over", {"winner": "EVIL", "reason": "won"})
                snap = m.Snapshot(code, 100000, time.time_ns(), 0, "over", ("EVIL",), {}, {}, "blink")
                for topic, payload, retain in (
                        (T.ev(code), encode(forged), False), (T.snap(code), encode(snap), True),
                        (T.snap("FAKE1"), encode(snap), True),
                        (T.client(victim.client_id), encode(m.Pong(1, 2, 3)), False),
                        (T.relay_status("relay-0"), b"\x80", True), (T.match_list, encode(m.MatchList(())), True)):
                    try:  # nats-server may answer a refused QoS 1 publish, or just drop it
                        await asyncio.wait_for(eve.publish(topic, payload, qos=1, retain=retain), 10)
                    except (aiomqtt.MqttError, asyncio.TimeoutError):
                        pass
                # Barrier: Eve's own ping answered; then the victim's (it would have got the forged Pong first).
                await eve.publish(T.req(eve_id), encode(m.Ping(t0=7)), qos=1)
                await until(lambda: any(t == T.client(eve_id) for t, _ in eve_got), "eve's pong")
                t0 = time.time_ns()
                await victim.request(m.Ping(t0=t0))
                await until(lambda: any(isinstance(x, m.Pong) and x.t0 == t0 for x in got), "the victim's pong")
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
            assert not [x for x in got if isinstance(x, m.Pong) and x.t0 == 1]  # the forged private message
            mine = [(t, x) for t, p in eve_got if p for x in decode_all(p)]
            assert not [x for t, x in mine if isinstance(x, (m.Event, m.Snapshot)) and x.seq >= 100000]
            assert not [t for t, _ in eve_got if "/act/" in t or "/req/" in t]
            # A newcomer gets only the relay's retained messages.
            late_got: list[tuple[str, bytes]] = []
            async with aiomqtt.Client("127.0.0.1", nats_node.mqtt.port, identifier=new_client_id("late")) as late:
                for t in (T.snap("FAKE1"), T.snap(code), T.match_list):
                    await late.subscribe(t, qos=1)
                reader = asyncio.create_task(collect_messages(late, late_got))
                await until(lambda: any(t == T.snap(code) for t, _ in late_got), "the real retained snapshot")
                await until(lambda: any(t == T.match_list for t, _ in late_got), "the retained match list")
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
            snaps = [x for t, p in late_got if t.endswith("/snap") for x in decode_all(p)]
            assert snaps and all(isinstance(x, m.Snapshot) and x.match == code and x.seq < 100000 for x in snaps)
            assert all(isinstance(x, m.MatchList) for t, p in late_got if t == T.match_list for x in decode_all(p))

    asyncio.run(main())
