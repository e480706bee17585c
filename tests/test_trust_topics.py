"""A client cannot speak on another client's topics, on every broker the relay runs with.

The worst case is assumed: the attacker knows its victim's client id (ids are 128-bit secrets that
are never published, but say one leaked). It then publishes, under its *own* connection, on the
victim's request topic and on the victim's action topic of the victim's match -- a ``Leave`` that
would cost the victim its seat, an ``Act`` that would be judged as the victim's, a ``CreateMatch``
that would be answered on the victim's private topic. The broker must drop all of them: the relay
never hears them, so the victim is never answered, keeps its seat, and the relay logs nothing.
A client id that is itself a wildcard (``+``, ``#``) must not widen what the ACL lets it read.

Real brokers, started by the tests: the embedded one (``LocalServer``) and Mosquitto with the
configuration ``blink broker-config`` writes (the shipped ACL). "Nothing arrived" is checked after
a barrier: the attacker publishes at QoS 1 (the broker has routed -- or dropped -- each message
before it acknowledges), and only then does the victim ask for a Pong; the relay handles its
subscription's messages in order, so the victim's Pong comes after anything the attacker's
messages would have caused.
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
import pytest

from client import Connection, new_client_id
from mqttkit import BrokerAddress, free_port
from protocol import messages as m
from protocol.codec import decode_all, encode
from protocol.topics import Topics
from relay.hosting import LocalServer
from relay.hosting import write_mosquitto_config
from tests.conftest import find_mosquitto, wait_port
from tests.helpers import stop_process

pytestmark = pytest.mark.integration

T = Topics()
DEADLINE_S = 60.0


async def until(cond: Any, what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


@pytest.fixture(params=["embedded", pytest.param("mosquitto", marks=pytest.mark.integration("mosquitto"))])
def relay_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None: ``LocalServer`` starts the embedded broker; else the relay's login to a Mosquitto run
    as ``blink broker-config`` sets it up."""
    if request.param == "embedded":
        yield None
        return
    binary = find_mosquitto()
    if binary is None:
        pytest.fail("mosquitto is not installed (.ci/run installs it)")
    port = free_port()
    d = Path(tempfile.mkdtemp(prefix="blink-trust-topics-"))
    d.chmod(0o755)  # Mosquitto started as root reads it after dropping to its own user
    login = write_mosquitto_config(d, "127.0.0.1", port)
    proc = subprocess.Popen([binary, "-c", str(d / "mosquitto.conf")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_port("127.0.0.1", port)
        yield login.login_url
    finally:
        stop_process(proc, 5)
        shutil.rmtree(d, ignore_errors=True)


class Victim:
    """A real client (``client.net.Connection``) keeping every message it is sent."""

    def __init__(self, address: BrokerAddress) -> None:
        self.got: list[Any] = []
        self.conn = Connection(address, on_message=lambda msg, now: self.got.append(msg), ping_interval_s=0)

    @property
    def id(self) -> str:
        return self.conn.client_id

    async def pong(self) -> None:
        """Ask the relay for a Pong and wait for it (the barrier)."""
        t0 = time.time_ns()
        await self.conn.request(m.Ping(t0=t0))
        await until(lambda: any(isinstance(x, m.Pong) and x.t0 == t0 for x in self.got), "the victim's pong")


def test_a_client_cannot_publish_on_another_clients_request_or_action_topics(relay_url: str | None) -> None:
    async def main() -> None:
        async with LocalServer(relay_url, seed=21) as server:
            assert server.relay is not None
            server.relay.eventlog.records = []
            victim = Victim(server.address)
            async with victim.conn:
                await victim.conn.request(m.CreateMatch(name="victim"))
                await until(lambda: any(isinstance(x, m.MatchJoined) for x in victim.got), "the victim's match")
                code = next(x for x in victim.got if isinstance(x, m.MatchJoined)).match
                await victim.pong()
                before = len(victim.got)
                eve_id = new_client_id("eve")
                async with aiomqtt.Client(server.address.host, server.address.port, identifier=eve_id) as eve:
                    forged = [
                        (T.req(victim.id), m.Leave(match=code)),
                        (T.req(victim.id), m.CreateMatch(name="evil")),
                        (T.req(victim.id), m.Ping(t0=1)),
                        (T.act(code, victim.id), m.Act(id=1, seq=1, action={"t": "PlayCard", "v": 1,
                                                                             "card": "1-red-moon", "pile": 0})),
                    ]
                    for topic, msg in forged:
                        # QoS 1: acknowledged once the broker has routed (or dropped) it.
                        await asyncio.wait_for(eve.publish(topic, encode(msg), qos=1), 30)
                    # Eve's own request topic does work (the relay answers Eve, not the victim).
                    eve_got: list[Any] = []
                    await eve.subscribe(T.client(eve_id), qos=1)
                    reader = asyncio.create_task(_collect(eve, eve_got))
                    try:
                        await eve.publish(T.req(eve_id), encode(m.Ping(t0=2)), qos=1)
                        await until(lambda: any(isinstance(x, m.Pong) and x.t0 == 2 for x in eve_got), "eve's pong")
                    finally:
                        reader.cancel()
                        await asyncio.gather(reader, return_exceptions=True)
                await victim.pong()
                after = victim.got[before:]
                # Only the victim's own Pong: no Pong(t0=1), no answer to the Leave, Create or Act.
                assert [type(x).__name__ for x in after] == ["Pong"], after
                match = server.relay.core.matches[code]
                assert [s.client for s in match.players] == [victim.id]  # still seated
                assert match.status == "waiting"
                assert len(server.relay.core.matches) == 1  # no "evil" match was made for the victim
            # The relay never heard the forged messages: nothing about them in its log.
            assert not [r for r in server.relay.eventlog.records if r.get("kind") == "bad_input"]

    asyncio.run(main())


async def _collect(client: aiomqtt.Client, into: list[Any]) -> None:
    try:
        async for msg in client.messages:
            payload = msg.payload if isinstance(msg.payload, (bytes, bytearray)) else b""
            try:
                into.extend(decode_all(bytes(payload)))
            except Exception:  # noqa: BLE001 - not ours to judge here
                pass
    except aiomqtt.MqttError:
        pass  # the broker closed the connection


@pytest.mark.parametrize("wild", ["+", "#"])
def test_a_wildcard_client_id_reads_and_writes_nothing_of_anyone_elses(relay_url: str | None, wild: str) -> None:
    """The ACL's patterns put the client id into topics (``c/%c``): an id ``+`` or ``#`` must not
    turn them into wildcards. The embedded broker refuses such an id at CONNECT; Mosquitto lets it
    in but denies it every pattern rule."""

    async def main() -> None:
        async with LocalServer(relay_url, seed=22) as server:
            assert server.relay is not None
            victim = Victim(server.address)
            async with victim.conn:
                await victim.pong()
                got: list[tuple[str, bytes]] = []
                try:
                    eve = aiomqtt.Client(server.address.host, server.address.port, identifier=wild)
                    await eve.__aenter__()
                except aiomqtt.MqttError:
                    assert relay_url is None, "Mosquitto accepts any client id; its ACL must confine it"
                    return  # the embedded broker refused the id outright
                try:
                    for t in (f"{T.prefix}/c/{wild}", f"{T.prefix}/c/+", f"{T.prefix}/#"):
                        await eve.subscribe(t, qos=1)
                    reader = asyncio.create_task(_raw(eve, got))
                    # (A topic with a wildcard in it cannot be published to at all: MQTT forbids it.)
                    await asyncio.wait_for(eve.publish(T.req(victim.id), encode(m.Ping(t0=4)), qos=1), 30)
                    before = len(victim.got)
                    await victim.pong()
                    # The relay's answer to the victim was published after anything Eve could read
                    # of it; one more round trip through the relay lets Eve's copy arrive.
                    await victim.pong()
                    reader.cancel()
                    await asyncio.gather(reader, return_exceptions=True)
                finally:
                    try:
                        await asyncio.wait_for(eve.__aexit__(None, None, None), 5)
                    except Exception:  # noqa: BLE001 - the broker may have closed it
                        pass
                assert not [t for t, _ in got if "/c/" in t or "/req/" in t or "/act/" in t], got
                assert [type(x).__name__ for x in victim.got[before:]] == ["Pong", "Pong"]

    asyncio.run(main())


async def _raw(client: aiomqtt.Client, into: list[tuple[str, bytes]]) -> None:
    try:
        async for msg in client.messages:
            payload = msg.payload if isinstance(msg.payload, (bytes, bytearray)) else b""
            into.append((msg.topic.value, bytes(payload)))
    except aiomqtt.MqttError:
        pass  # the broker closed the connection: what it had sent is in ``into``
