"""The relay inside the embedded broker's process (relay/embedded/inprocess.py): what the broker's
routing hands the relay and what the relay publishes through it, without a socket between them.

Pure: the topic filters, and the session against a recording broker (what one read routes is
handed over as one list, a flood's topic dropped and counted, a topic filter, the will published
when the relay did not leave cleanly and not when it did). Through a real ``EmbeddedBroker``: a
``LocalServer``'s relay stands in its broker (no relay connection on a socket), serves a bot match,
keeps its retained messages for a newcomer, and hears a player's last will."""

from __future__ import annotations

import asyncio

import aiomqtt
import pytest


from mqttkit.connection import MqttError
from mqttkit.packets import Message, pack_connect, pack_publish
from protocol import messages as m
from protocol.codec import decode_all, encode
from protocol.topics import Topics
from relay.embedded.inprocess import LocalSession, topic_matches
from relay.embedded.route import Inlet

T = Topics()


@pytest.mark.parametrize("topic_filter, topic, takes", [
    ("blink/v1/lobby/req/+", "blink/v1/lobby/req/abc", True),
    ("blink/v1/lobby/req/+", "blink/v1/lobby/req/abc/x", False),
    ("blink/v1/lobby/req/+", "blink/v1/lobby/req", False),
    ("blink/v1/m/+/+/act/+", "blink/v1/m/0/ABCD/act/c1", True),
    ("blink/v1/m/+/+/act/+", "blink/v1/m/0/ABCD/ev", False),
    ("blink/v1/#", "blink/v1/m/0/ABCD/ev", True),
    ("blink/v1/#", "blink/v1", True),
    ("#", "$SYS/x", False),
    ("a/b", "a/b", True),
    ("a/b", "a/c", False),
])
def test_topic_filters_take_what_mqtt_says(topic_filter: str, topic: str, takes: bool) -> None:
    assert topic_matches(topic, topic_filter) is takes


class Recording:
    """A broker that keeps what the relay publishes (whole packets) and asks nothing else."""

    def __init__(self) -> None:
        self.inlet: Inlet | None = None
        self.published: list[bytes] = []

    def relay_publish(self, data: bytes | bytearray) -> None:
        self.published.append(bytes(data))


async def _session(broker: Recording, heard: list[list[Message]]) -> LocalSession:
    session = LocalSession(broker, heard.append, ("blink/v1/relay/r/status", b"offline", True))
    await session.subscribe([(T.req_all, 1), (T.act_all, 1)])
    return session


def test_what_one_read_routes_reaches_the_relay_as_one_list() -> None:
    async def run() -> None:
        broker, heard = Recording(), list[list[Message]]()
        session = await _session(broker, heard)
        assert session.takes(T.req("c1")) and not session.takes(T.client("c1"))
        session.take(T.req("c1"), b"a", 1)
        session.take(T.req("c2"), b"b", 0)
        assert heard == [] and session.pending
        session.hand()
        assert [(x.topic, x.payload) for x in heard[0]] == [(T.req("c1"), b"a"), (T.req("c2"), b"b")]
        assert not session.pending
        session.hand()
        assert len(heard) == 1  # nothing new: nothing handed
    asyncio.run(run())


def test_a_flooders_topic_is_dropped_and_counted_and_a_topic_filter_skips_shards_served_elsewhere() -> None:
    async def run() -> None:
        broker, heard = Recording(), list[list[Message]]()
        session = await _session(broker, heard)
        counted: list[tuple[bytes, int]] = []
        flood = T.req("flood")
        session.drop_until(flood.encode(), 1 << 62, lambda topic, n: counted.append((topic, n)))
        for _ in range(3):
            session.take(flood, b"x", 0)
        session.take(T.req("c1"), b"ok", 0)
        session.hand()
        assert counted == [(flood.encode(), 3)] and [x.payload for x in heard[0]] == [b"ok"]
        session.take(flood, b"x", 0)  # counted, then the hold ends within the same read
        session.drop_until(flood.encode(), 0, lambda topic, n: counted.append((topic, n)))
        session.take(flood, b"y", 0)
        session.hand()
        assert counted[-1] == (flood.encode(), 1) and [x.payload for x in heard[-1]] == [b"y"]
        session.set_topic_filter(b"blink/v1/m/", (b"blink/v1/m/2/",))
        session.take("blink/v1/m/1/ABCD/act/c1", b"elsewhere", 0)
        session.take("blink/v1/m/2/ABCD/act/c1", b"here", 0)
        session.hand()
        assert [x.payload for x in heard[-1]] == [b"here"] and session.filtered == 1
    asyncio.run(run())


def test_the_will_is_published_when_the_relay_did_not_leave_and_not_when_it_did() -> None:
    async def run() -> None:
        broker = Recording()
        session = await _session(broker, [])
        session.close(MqttError("the relay stopped"))
        will = bytearray()
        pack_publish(will, "blink/v1/relay/r/status", b"offline", True)
        assert broker.published == [bytes(will)] and not session.connected
        with pytest.raises(MqttError):
            session.write(b"")
        broker = Recording()
        session = await _session(broker, [])
        await session.disconnect()
        assert broker.published == [] and not session.connected
    asyncio.run(run())


@pytest.mark.integration
def test_a_local_servers_relay_stands_in_its_broker_and_serves_through_it() -> None:
    from relay.hosting import LocalServer
    from tests.test_broker_trust import bot_match

    async def run() -> None:
        async with LocalServer(seed=5) as server:
            assert server.broker is not None
            routing = server.broker._routes()
            assert routing.inlet is not None  # the relay stands inside the broker...
            assert server.relay is not None and server.relay.client_id not in routing.sessions  # (no socket)
            result = await bot_match(server.address, 5)  # ...and serves a whole match through it
            assert result.summary()["winner"] in result.summary()["players"]
            # A newcomer reads the relay's retained online status, kept by the broker for it.
            async with aiomqtt.Client(server.address.host, server.address.port, identifier="late-1") as late:
                await late.subscribe(T.relay_status(server.relay.relay_id if server.relay else ""))
                async with asyncio.timeout(30):
                    async for msg in late.messages:
                        status = decode_all(bytes(msg.payload))[0]
                        assert isinstance(status, m.RelayStatus) and status.online
                        break
    asyncio.run(run())


@pytest.mark.integration
def test_a_players_last_will_reaches_the_relay_in_the_broker() -> None:
    """A player whose connection drops mid-match: amqtt publishes its will, and the relay (no
    subscriber on a socket) hears it -- the seat is marked dropped to the other player."""
    from relay.hosting import LocalServer

    async def run() -> None:
        async with LocalServer(seed=5) as server:
            relay = server.relay
            assert relay is not None
            heard: list[str] = []
            relay_on_messages = relay._on_messages

            def spy(messages: list[Message]) -> None:
                heard.extend(x.topic or "" for x in messages)
                relay_on_messages(messages)
            assert server.broker is not None
            inlet = server.broker._routes().inlet
            assert isinstance(inlet, LocalSession)
            inlet.on_messages = spy
            reader, writer = await asyncio.open_connection(server.address.host, server.address.port)
            writer.write(pack_connect("gone-1", 30, will=(T.req("gone-1"), encode(m.Leave(dropped=True)), 1, False)))
            assert (await reader.readexactly(4))[3] == 0  # CONNACK: accepted
            writer.transport.abort()  # the connection drops without a DISCONNECT
            async with asyncio.timeout(30):
                while T.req("gone-1") not in heard:
                    await asyncio.sleep(0.05)
    asyncio.run(run())
