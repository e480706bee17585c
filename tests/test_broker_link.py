"""The relay's broker link at its first connection: a node that drops the CONNECT unanswered is asked
again while a cluster relay is patient (a nats-server not yet able to hold its MQTT streams does
exactly that), and fails at once otherwise."""

from __future__ import annotations

import asyncio
import time

import pytest

from mqttkit import BrokerAddress
from mqttkit.connection import MqttError, Will
from relay.link import BrokerLink, Login

pytestmark = pytest.mark.integration  # sockets on loopback


async def _dropping_server() -> tuple[asyncio.Server, list[int]]:
    """A listener that reads the CONNECT and hangs up without a word, counting the tries."""
    tries: list[int] = []

    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tries.append(1)
        await reader.read(1)
        writer.close()

    server = await asyncio.start_server(drop, "127.0.0.1", 0)
    return server, tries


def _link(port: int, first_wait_s: float, said: list[str]) -> BrokerLink:
    login = Login(client_id="relay-test", will=Will("s", b"offline"), groups=(), status="", online=b"",
                  max_packet=1 << 20, timeout=5.0, first_wait_s=first_wait_s, say=said.append)

    async def up(first: bool) -> None:
        raise AssertionError("no CONNACK was ever sent")

    return BrokerLink([BrokerAddress("127.0.0.1", port)], login, lambda msgs: None, lambda topic, size: None,
                      lambda conn: None, up)


def test_a_patient_relay_asks_again_a_node_that_drops_its_connect_then_gives_up_in_one_line() -> None:
    async def scenario() -> tuple[str, int, list[str]]:
        server, tries = await _dropping_server()
        said: list[str] = []
        port = server.sockets[0].getsockname()[1]
        try:
            with pytest.raises(MqttError) as err:
                await asyncio.wait_for(_link(port, 1.0, said).run(), 60)
        finally:
            server.close()
        return str(err.value), len(tries), said

    text, tries, said = asyncio.run(scenario())
    assert tries >= 2, "asked once only"
    assert "still after 1 s" in text and "mqtts://" in text, text
    assert len(said) == 1 and "waiting for the MQTT broker" in said[0], said


def test_an_impatient_relay_fails_at_the_first_dropped_connect() -> None:
    async def scenario() -> tuple[str, int, float]:
        server, tries = await _dropping_server()
        port = server.sockets[0].getsockname()[1]
        t0 = time.monotonic()
        try:
            with pytest.raises(MqttError) as err:
                await asyncio.wait_for(_link(port, 0.0, []).run(), 60)
        finally:
            server.close()
        return str(err.value), len(tries), time.monotonic() - t0

    text, tries, _ = asyncio.run(scenario())
    assert tries == 1
    assert "before the broker's CONNACK" in text and "still after" not in text, text
