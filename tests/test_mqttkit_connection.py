"""The relay's own MQTT client (mqttkit/packets.py, mqttkit/connection.py), at the protocol level.

The parser on its own (several packets in one read, packets cut anywhere, oversized publishes
skipped unbuffered, malformed framing refused with its own error -- hypothesis fuzzes that it never
raises anything else), the connection against a scripted broker on a loopback port (login, SUBACK,
QoS 1/2 acknowledgements, a malformed packet dropping the connection with one logged line, a
silent broker noticed by the keep-alive), against a real Mosquitto (will, retained status,
clean disconnect), and the relay shell riding out a malformed packet by reconnecting.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any, Awaitable, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqttkit import BrokerAddress, free_port
from mqttkit.connection import ConnectRefused, MqttConnection, MqttError, SubscribeRefused, Will, connect
from mqttkit.packets import (PUBACK, PUBCOMP, PUBREC, PUBREL, SUBACK, Control, Message, Oversize, Parser,
                             PacketError, pack_ack, pack_connect, pack_publish)

# ------------------------------------------------------------------------------------ helpers


def publish(topic: str, payload: bytes, qos: int = 0, pid: int = 0, retain: bool = False, dup: bool = False) -> bytes:
    buf = bytearray()
    pack_publish(buf, topic, payload, retain, qos=qos, pid=pid)
    if dup:
        buf[0] |= 0x08
    return bytes(buf)


CONNACK_OK = b"\x20\x02\x00\x00"
PINGRESP = b"\xd0\x00"


def suback(pid: int, *codes: int) -> bytes:
    return bytes((0x90, 2 + len(codes))) + pid.to_bytes(2, "big") + bytes(codes)


def stream() -> tuple[bytes, list[Any]]:
    """A broker's stream of mixed packets and what parsing it must give."""
    parts = [
        (publish("blink/v1/lobby/req/a", b"\x81\xa1t\xa4Ping"), Message("blink/v1/lobby/req/a", b"\x81\xa1t\xa4Ping", 0, 0, False, False)),
        (suback(1, 1, 1), Control(SUBACK, 0, b"\x00\x01\x01\x01")),
        (publish("m/0/ABCDE/act/b", b"x" * 300, qos=1, pid=7), Message("m/0/ABCDE/act/b", b"x" * 300, 1, 7, False, False)),
        (PINGRESP, Control(13, 0, b"")),
        (publish("t/é", b"", retain=True), Message("t/é", b"", 0, 0, True, False)),
        (pack_ack(PUBACK, 258), Control(PUBACK, 0, b"\x01\x02")),
        (publish("big", b"y" * 20_000, qos=2, pid=65535, dup=True), Message("big", b"y" * 20_000, 2, 65535, False, True)),
        (pack_ack(PUBREL, 9), Control(PUBREL, 2, b"\x00\x09")),
    ]
    return b"".join(p for p, _ in parts), [want for _, want in parts]


def feed_in_pieces(parser: Parser, data: bytes, cuts: list[int]) -> list[Any]:
    out: list[Any] = []
    last = 0
    for cut in sorted(set(c for c in cuts if 0 < c < len(data))) + [len(data)]:
        out += parser.feed(data[last:cut])
        last = cut
    return out


# ------------------------------------------------------------------------------------ the parser


def test_several_packets_in_one_read_come_out_in_order() -> None:
    data, want = stream()
    parser = Parser()
    assert parser.feed(data) == want
    assert parser.buffered == 0


def test_packets_cut_at_every_byte_come_out_whole() -> None:
    data, want = stream()
    parser = Parser()
    out: list[Any] = []
    for i in range(len(data)):
        out += parser.feed(data[i:i + 1])
    assert out == want and parser.buffered == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=21_000), max_size=40))
def test_packets_cut_anywhere_come_out_whole(cuts: list[int]) -> None:
    data, want = stream()
    parser = Parser()
    assert feed_in_pieces(parser, data, cuts) == want
    assert parser.buffered == 0


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=60).filter(lambda t: not set(t) & {"+", "#", "\0"}), st.binary(max_size=3000),
       st.sampled_from([0, 1, 2]), st.booleans(), st.integers(min_value=1, max_value=65535))
def test_a_packed_publish_parses_back(topic: str, payload: bytes, qos: int, retain: bool, pid: int) -> None:
    assert Parser().feed(publish(topic, payload, qos, pid if qos else 0, retain)) == [
        Message(topic, payload, qos, pid if qos else 0, retain, False)]


def test_an_oversized_publish_is_reported_and_skipped_without_buffering_it() -> None:
    parser = Parser(max_packet=1000)
    big = publish("blink/v1/lobby/req/z", b"z" * 200_000, qos=1, pid=5)
    after = publish("blink/v1/lobby/req/a", b"ok")
    data = publish("small", b"s") + big + after
    out: list[Any] = []
    most = 0
    for i in range(0, len(data), 4096):
        out += parser.feed(data[i:i + 4096])
        most = max(most, parser.buffered)
    assert out == [Message("small", b"s", 0, 0, False, False), Oversize("blink/v1/lobby/req/z", 200_000, 1, 5),
                   Message("blink/v1/lobby/req/a", b"ok", 0, 0, False, False)]
    assert most < 4096  # the 200 kB were never held


def test_the_topic_filter_skips_qos0_messages_under_a_head_unless_kept_and_can_change_between_reads() -> None:
    parser = Parser(max_packet=1000)
    parser.drop_under, parser.keep_under = b"p/m/", (b"p/m/1/", b"p/m/3/")
    data = (publish("p/m/0/AB/act/x", b"a") + publish("p/m/1/AB/act/x", b"b") + publish("p/lobby/req/x", b"c")
            + publish("p/m/2/AB/act/y", b"d", qos=1, pid=4)  # QoS 1: never filtered (acknowledged)
            + publish("p/m/2/AB/act/y", b"z" * 5000)  # an oversized one of a shard not kept: skipped too
            + publish("p/m/3/CD/act/z", b"e") + publish("p/m/11/CD/act/z", b"f"))
    want = [Message("p/m/1/AB/act/x", b"b", 0, 0, False, False), Message("p/lobby/req/x", b"c", 0, 0, False, False),
            Message("p/m/2/AB/act/y", b"d", 1, 4, False, False), Message("p/m/3/CD/act/z", b"e", 0, 0, False, False)]
    assert parser.feed(data) == want
    assert parser.filtered == 3
    again = Parser(max_packet=1000)  # cut at every byte: the same
    again.drop_under, again.keep_under = parser.drop_under, parser.keep_under
    assert feed_in_pieces(again, data, list(range(len(data)))) == want and again.buffered == 0
    parser.keep_under = ()  # nothing kept under the head
    assert parser.feed(publish("p/m/1/AB/act/x", b"b") + publish("p/lobby/req/x", b"c")) == [
        Message("p/lobby/req/x", b"c", 0, 0, False, False)]
    parser.drop_under = None  # no filter
    assert len(parser.feed(publish("p/m/0/AB/act/x", b"a"))) == 1


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=21_000), max_size=40))
def test_qos0_publishes_on_the_drop_topic_are_counted_not_built_and_the_rest_comes_out_in_order(
        cuts: list[int]) -> None:
    flood = "blink/v1/m/blink/ABCDE/act/f"
    data, want = stream()
    first = len(publish("blink/v1/lobby/req/a", b"\x81\xa1t\xa4Ping"))  # the stream's first packet
    mixed = publish(flood, b"a") * 3 + data[:first] + publish(flood, b"b") + data[first:] \
        + publish(flood, b"c", qos=1, pid=4) + publish(flood + "x", b"d") + publish(flood, b"e") * 2
    parser = Parser()
    out: list[Any] = []
    last = 0
    for cut in sorted(set(c for c in cuts if 0 < c < len(mixed))) + [len(mixed)]:
        out += parser.feed(mixed[last:cut], flood.encode())
        last = cut
    # Only whole QoS-0 PUBLISHes on exactly that topic go (a QoS-1 one must still be acknowledged).
    assert out == want + [Message(flood, b"c", 1, 4, False, False), Message(flood + "x", b"d", 0, 0, False, False)]
    assert parser.skipped == 6 and parser.buffered == 0
    assert Parser().feed(mixed)[:3] == [Message(flood, b"a", 0, 0, False, False)] * 3  # no drop topic: all built


def test_a_topic_that_is_not_utf8_is_reported_as_none_and_the_stream_goes_on() -> None:
    raw = bytearray(publish("ab", b"p", qos=1, pid=3))
    raw[4:6] = b"\xff\xfe"
    assert Parser().feed(bytes(raw) + PINGRESP) == [Message(None, b"p", 1, 3, False, False), Control(13, 0, b"")]


@pytest.mark.parametrize("bad, why", [
    (b"\x30\xff\xff\xff\xff\x01", "longer than four bytes"),
    (b"\x30\x03\x00\x05abc", "runs past"),
    (b"\x36\x05\x00\x01a\x00\x01", "QoS 3"),
    (b"\x10\x00", "CONNECT"),
    (b"\x82\x05\x00\x01\x00\x01a", "SUBSCRIBE"),
    (b"\xe0\x00", "DISCONNECT"),
    (b"\x00\x00", "reserved"),
    (b"\xd0\x01\x00", "PINGRESP of 1 bytes"),
    (b"\x20\x03\x00\x00\x00", "CONNACK of 3"),
    (b"\x62\x03\x00\x01\x00", "PUBREL of 3"),
    (b"\x60\x02\x00\x01", "PUBREL with flags 0x0"),
    (b"\x41\x02\x00\x01", "PUBACK with flags 0x1"),
    (b"\x90\xff\xff\x03", "SUBACK of"),
    (b"\x32\x03\x00\x00\x01", "cannot hold its topic"),
])
def test_malformed_framing_raises_the_parsers_own_error_with_the_packets_before_it(bad: bytes, why: str) -> None:
    good = publish("t", b"before")
    with pytest.raises(PacketError, match=why) as caught:
        Parser().feed(good + PINGRESP + bad + publish("t", b"after"))
    assert caught.value.packets == [Message("t", b"before", 0, 0, False, False), Control(13, 0, b"")]


def test_a_bogus_control_length_is_refused_before_its_body_arrives() -> None:
    parser = Parser()
    with pytest.raises(PacketError):
        parser.feed(b"\xd0\xff\xff\xff\x7f")  # a 256 MB PINGRESP: refused at its header


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=400), st.lists(st.integers(min_value=1, max_value=400), max_size=8))
def test_fuzz_random_bytes_raise_only_protocol_error(data: bytes, cuts: list[int]) -> None:
    parser = Parser(max_packet=256)
    try:
        feed_in_pieces(parser, data, cuts)
    except PacketError:
        pass
    assert parser.buffered <= max(len(data), 0)


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_fuzz_mutated_streams_raise_only_protocol_error_and_buffer_little(data: st.DataObject) -> None:
    raw, _ = stream()
    raw = bytearray(raw[:600])  # the first packets, cut short
    for _ in range(data.draw(st.integers(min_value=1, max_value=6))):
        i = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
        raw[i] = data.draw(st.integers(min_value=0, max_value=255))
    cuts = data.draw(st.lists(st.integers(min_value=1, max_value=len(raw)), max_size=6))
    parser = Parser(max_packet=1024)
    try:
        for p in feed_in_pieces(parser, bytes(raw), cuts):
            assert isinstance(p, (Message, Oversize, Control))
    except PacketError as exc:
        assert all(isinstance(p, (Message, Oversize, Control)) for p in exc.packets)
    assert parser.buffered <= len(raw)


# ------------------------------------------------------------------------------------ a scripted broker


class FakeBroker:
    """A loopback TCP server that plays a broker from a script: ``on_connect(session)`` runs for
    each connection; a session reads whole packets and writes raw bytes."""

    def __init__(self, script: Callable[[Session], Awaitable[None]]) -> None:
        self.script = script
        self.sessions: list[Session] = []
        self.port = free_port()
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> FakeBroker:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        assert self.server is not None
        self.server.close()
        for s in self.sessions:
            s.writer.close()
            if s.task is not None:
                s.task.cancel()
        await asyncio.gather(*(s.task for s in self.sessions if s.task is not None), return_exceptions=True)
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session = Session(reader, writer)
        self.sessions.append(session)
        try:
            await self.script(session)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client went away, or the test is over (the script is cut short there)


class Session:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.task = asyncio.current_task()
        self.got: list[tuple[int, bytes]] = []  # (first byte, body) of every packet read

    async def read(self) -> tuple[int, bytes]:
        first = (await self.reader.readexactly(1))[0]
        n, shift = 0, 0
        while True:
            b = (await self.reader.readexactly(1))[0]
            n |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        body = await self.reader.readexactly(n)
        self.got.append((first, body))
        return first, body

    async def read_until(self, kind: int) -> bytes:
        while True:
            first, body = await self.read()
            if first >> 4 == kind:
                return body

    def write(self, data: bytes) -> None:
        self.writer.write(data)

    async def handshake(self) -> None:
        """CONNECT -> CONNACK, SUBSCRIBE -> SUBACK (every subscription granted QoS 1)."""
        await self.read_until(1)
        self.write(CONNACK_OK)
        body = await self.read_until(8)
        count = 0
        i = 2
        while i < len(body):
            i += 2 + int.from_bytes(body[i:i + 2], "big") + 1
            count += 1
        self.write(suback(int.from_bytes(body[:2], "big"), *([1] * count)))


async def until(cond: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def run(coro: Awaitable[None]) -> None:
    """Run a test's coroutine; any exception the loop's handler would only log fails the test."""
    errors: list[dict[str, Any]] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: errors.append(ctx))
        await coro

    asyncio.run(main())
    assert not errors, errors


# ------------------------------------------------------------------------------------ the connection


@pytest.mark.integration
def test_login_subscribe_and_batches_of_messages_acknowledged_in_one_write() -> None:
    batches: list[list[Message]] = []
    login: dict[str, Any] = {}

    async def script(s: Session) -> None:
        first, body = await s.read()
        login["connect"] = (first, body)
        s.write(CONNACK_OK)
        pid_body = await s.read_until(8)
        s.write(suback(int.from_bytes(pid_body[:2], "big"), 1, 1))
        # Three publishes in one write, then one cut in three writes.
        s.write(publish("a/1", b"one") + publish("a/2", b"two", qos=1, pid=11) + publish("a/3", b"three", qos=1, pid=12))
        cut = publish("a/4", b"four" * 100, qos=1, pid=13)
        for piece in (cut[:1], cut[1:10], cut[10:]):
            await s.writer.drain()
            await asyncio.sleep(0.05)  # separate reads on the other side (not asserted: any cut is fine)
            s.write(piece)
        while len([g for g in s.got if g[0] >> 4 == 4]) < 3:
            await s.read()
        await s.read_until(14)  # DISCONNECT

    async def main() -> None:
        async with FakeBroker(script) as broker:
            conn = await connect("127.0.0.1", broker.port, client_id="blink-x", on_messages=batches.append,
                                 username="relay", password="s3cret", will=Will("st/relay", b"off", 1, True),
                                 keepalive=30)
            assert conn.connected
            assert await conn.subscribe([("req/+", 1), ("act/#", 1)]) == [1, 1]
            await until(lambda: sum(len(b) for b in batches) == 4, "four messages")
            session = broker.sessions[0]
            await until(lambda: len([g for g in session.got if g[0] >> 4 == 4]) == 3, "three PUBACKs")
            await conn.disconnect()
            assert not conn.connected
            await until(lambda: bool(session.got) and session.got[-1][0] == 0xE0, "DISCONNECT")
            # The PUBACKs of one read went out together, in order.
            assert [int.from_bytes(b, "big") for f, b in session.got if f >> 4 == 4] == [11, 12, 13]

    run(main())
    assert [m.topic for b in batches for m in b] == ["a/1", "a/2", "a/3", "a/4"]
    assert len(batches[0]) == 3  # the first three came in one read: one batch
    assert batches[-1][-1].payload == b"four" * 100
    first, body = login["connect"]
    assert first == 0x10 and body == pack_connect("blink-x", 30, "relay", "s3cret", ("st/relay", b"off", 1, True))[2:]
    assert body[7] == 0x80 | 0x40 | 0x20 | 0x08 | 0x04 | 0x02  # user, password, will retain, will QoS 1, will, clean


@pytest.mark.integration
def test_a_refused_subscription_raises_subscribe_refused_and_the_connection_stays_up() -> None:
    async def script(s: Session) -> None:
        await s.read_until(1)
        s.write(CONNACK_OK)
        body = await s.read_until(8)
        s.write(suback(int.from_bytes(body[:2], "big"), 0x80))
        body = await s.read_until(8)
        s.write(suback(int.from_bytes(body[:2], "big"), 0))
        await s.read_until(14)

    async def main() -> None:
        async with FakeBroker(script) as broker:
            conn = await connect("127.0.0.1", broker.port, client_id="x", on_messages=lambda b: None)
            with pytest.raises(SubscribeRefused) as caught:
                await conn.subscribe([("a/+", 0)])
            assert caught.value.codes == [0x80] and conn.connected
            assert await conn.subscribe([("a/+", 0)]) == [0]  # asked again on the same connection
            await conn.disconnect()

    run(main())


@pytest.mark.integration
def test_a_refused_login_raises_connect_refused_with_its_code() -> None:
    async def script(s: Session) -> None:
        await s.read()
        s.write(b"\x20\x02\x00\x05")

    async def main() -> None:
        async with FakeBroker(script) as broker:
            with pytest.raises(ConnectRefused, match="not authorized") as caught:
                await connect("127.0.0.1", broker.port, client_id="x", on_messages=lambda b: None)
            assert caught.value.rc == 5

    run(main())


@pytest.mark.integration
def test_nothing_listening_and_a_silent_broker_are_mqtt_errors() -> None:
    async def silent(s: Session) -> None:
        await s.read()
        await asyncio.sleep(30)

    async def main() -> None:
        with pytest.raises(MqttError):
            await connect("127.0.0.1", free_port(), client_id="x", on_messages=lambda b: None)
        async with FakeBroker(silent) as broker:
            with pytest.raises(MqttError, match="no answer"):
                await connect("127.0.0.1", broker.port, client_id="x", on_messages=lambda b: None, timeout=0.5)

    run(main())


@pytest.mark.integration
def test_a_malformed_packet_drops_the_connection_with_one_logged_line_after_the_good_ones(
        caplog: pytest.LogCaptureFixture) -> None:
    got: list[Message] = []

    async def script(s: Session) -> None:
        await s.handshake()
        s.write(publish("a/ok", b"fine") + b"\x30\x03\x00\x09xyz" + publish("a/never", b""))
        await asyncio.sleep(30)

    async def main() -> None:
        async with FakeBroker(script) as broker:
            conn = await connect("127.0.0.1", broker.port, client_id="x", on_messages=got.extend)
            await conn.subscribe([("a/+", 1)])
            reason = await asyncio.wait_for(conn.wait_closed(), 20)
            assert "malformed packet" in str(reason) and not conn.connected
            with pytest.raises(MqttError):
                conn.write(publish("a/x", b""))

    with caplog.at_level(logging.WARNING, logger="blink.mqtt"):
        run(main())
    assert [m.topic for m in got] == ["a/ok"]
    lines = [r for r in caplog.records if r.name == "blink.mqtt"]
    assert len(lines) == 1 and "malformed packet" in lines[0].getMessage() and lines[0].exc_info is None


@pytest.mark.integration
def test_oversized_and_qos2_messages_are_acknowledged_and_delivered_once() -> None:
    got: list[Message] = []
    oversize: list[tuple[str, int]] = []

    async def script(s: Session) -> None:
        await s.handshake()
        s.write(publish("a/big", b"B" * 300_000, qos=1, pid=21) + publish("a/q2", b"two", qos=2, pid=22))
        s.write(publish("a/q2", b"two", qos=2, pid=22, dup=True))  # resent before its PUBREL: not again
        s.write(pack_ack(PUBREL, 22) + publish("a/q2", b"two again", qos=2, pid=22))  # a new message, same id
        while True:
            await s.read()  # the acknowledgements

    async def main() -> None:
        async with FakeBroker(script) as broker:
            conn = await connect("127.0.0.1", broker.port, client_id="x", on_messages=got.extend,
                                 on_oversize=lambda t, n: oversize.append((t, n)), max_packet=64 * 1024)
            await conn.subscribe([("a/+", 1)])
            s = broker.sessions[0]

            def acks() -> list[tuple[int, int]]:
                return [(f >> 4, int.from_bytes(b, "big")) for f, b in s.got if f >> 4 in (PUBACK, PUBREC, PUBCOMP)]

            await until(lambda: len(acks()) == 5, "five acknowledgements")
            assert acks() == [(PUBACK, 21), (PUBREC, 22), (PUBREC, 22), (PUBCOMP, 22), (PUBREC, 22)]
            assert conn.parser.buffered < 64 * 1024
            conn.abort()

    run(main())
    assert oversize == [("a/big", 300_000)]
    assert [(m.topic, m.payload) for m in got] == [("a/q2", b"two"), ("a/q2", b"two again")]


@pytest.mark.integration
def test_a_broker_that_stops_answering_pings_is_dropped_by_the_keepalive() -> None:
    async def script(s: Session) -> None:
        await s.handshake()
        while True:
            await s.read()  # reads PINGREQs, never answers

    async def main() -> None:
        async with FakeBroker(script) as broker:
            conn = await connect("127.0.0.1", broker.port, client_id="x", on_messages=lambda b: None, keepalive=1)
            told: list[Exception] = []
            conn.on_close(told.append)  # what blink load's players use instead of a task each
            await conn.subscribe([("a/+", 1)])
            reason = await asyncio.wait_for(conn.wait_closed(), 30)
            assert "PINGREQ" in str(reason)
            await until(lambda: bool(told), "on_close was told")
            assert told == [reason]
            assert any(f == 0xC0 for f, _ in broker.sessions[0].got)

    run(main())


@pytest.mark.integration
def test_a_broker_that_answers_pings_keeps_the_connection() -> None:
    pings = [0]

    async def script(s: Session) -> None:
        await s.handshake()
        while True:
            first, _ = await s.read()
            if first == 0xC0:
                pings[0] += 1
                s.write(PINGRESP)

    async def main() -> None:
        async with FakeBroker(script) as broker:
            conn = await connect("127.0.0.1", broker.port, client_id="x", on_messages=lambda b: None, keepalive=1)
            await conn.subscribe([("a/+", 1)])
            await until(lambda: pings[0] >= 4, "four pings answered")
            assert conn.connected
            await conn.disconnect()

    run(main())


@pytest.mark.integration
def test_a_callback_that_raises_is_logged_and_drops_the_connection(relay_guard: Any) -> None:
    """A bug in the caller's callback is a bug: logged with its traceback (the guard sees it), and
    the connection is dropped rather than left half-read."""
    async def script(s: Session) -> None:
        await s.handshake()
        s.write(publish("a/1", b""))
        await asyncio.sleep(30)

    def boom(_: list[Message]) -> None:
        raise RuntimeError("planted")

    async def main() -> None:
        async with FakeBroker(script) as broker:
            conn = await connect("127.0.0.1", broker.port, client_id="x", on_messages=boom)
            await conn.subscribe([("a/+", 1)])
            reason = await asyncio.wait_for(conn.wait_closed(), 20)
            assert "planted" in str(reason)

    run(main())
    problems = relay_guard.take()
    assert len(problems) == 1 and "planted" in str(problems[0])


# ------------------------------------------------------------------------------------ a real Mosquitto


def test_on_mosquitto_messages_the_will_and_a_clean_disconnect(mosquitto: BrokerAddress) -> None:
    """QoS 0 and 1 both ways, a burst of many messages arriving whole and in order, the retained
    last will published when the connection drops, and none after a clean DISCONNECT."""
    prefix = "blink/v1/relay"

    async def main() -> None:
        got: list[Message] = []
        watch: list[Message] = []
        common: dict[str, Any] = {"username": mosquitto.username, "password": mosquitto.password}
        watcher = await connect(mosquitto.host, mosquitto.port, client_id=f"w-{random.getrandbits(64):x}",
                                on_messages=watch.extend, **common)
        await watcher.subscribe([(f"{prefix}/+/status", 1)])
        a = await connect(mosquitto.host, mosquitto.port, client_id=f"a-{random.getrandbits(64):x}",
                          on_messages=got.extend, will=Will(f"{prefix}/a/status", b"gone", 1, True), **common)
        await a.subscribe([(f"{prefix}/a/in/+", 1)])
        buf = bytearray()
        for i in range(500):
            pack_publish(buf, f"{prefix}/a/in/{i % 7}", i.to_bytes(2, "big") * 20)
        a.write(buf)
        done = a.publish(f"{prefix}/a/in/q1", b"qos1", qos=1, wait=True)
        assert done is not None
        await asyncio.wait_for(done, 20)
        await until(lambda: len(got) == 501, "501 messages back")
        assert [int.from_bytes(msg.payload[:2], "big") for msg in got[:500]] == list(range(500))
        assert got[500].payload == b"qos1" and got[500].qos == 1
        a.abort()  # no DISCONNECT: the broker publishes the will
        await until(lambda: any(msg.payload == b"gone" for msg in watch), "the last will")
        b = await connect(mosquitto.host, mosquitto.port, client_id=f"b-{random.getrandbits(64):x}",
                          on_messages=lambda m: None, will=Will(f"{prefix}/b/status", b"b gone", 1, True), **common)
        await b.disconnect()
        # A fresh subscriber sees a's retained will, and b left none (a barrier: a ping through the broker).
        seen: list[Message] = []
        late = await connect(mosquitto.host, mosquitto.port, client_id=f"l-{random.getrandbits(64):x}",
                             on_messages=seen.extend, **common)
        await late.subscribe([(f"{prefix}/+/status", 1), (f"{prefix}/late/barrier", 0)])
        late.publish(f"{prefix}/late/barrier", b"!")
        await until(lambda: any(msg.topic.endswith("barrier") for msg in seen if msg.topic), "the barrier")
        assert [(msg.topic, msg.payload, msg.retain) for msg in seen if msg.topic and msg.topic.endswith("status")] == [
            (f"{prefix}/a/status", b"gone", True)]
        late.publish(f"{prefix}/a/status", b"", retain=True)  # clean up the retained will
        await late.disconnect()
        await watcher.disconnect()

    run(main())


# ------------------------------------------------------------------------------------ the relay shell


@pytest.mark.integration
def test_the_relay_shell_rides_out_a_malformed_packet_by_reconnecting_and_resubscribing(
        caplog: pytest.LogCaptureFixture) -> None:
    """The broker's stream breaks: the shell's connection is dropped with a logged line (no
    traceback, no crash), the shell reconnects with its backoff, subscribes again and answers."""
    from protocol import messages as m
    from protocol.codec import decode_all, encode
    from protocol.topics import Topics
    from relay.runtime import Relay, RelaySettings

    topics = Topics()
    answered: list[Any] = []

    async def script(s: Session) -> None:
        await s.handshake()
        if len(broker.sessions) == 1:
            s.write(b"\x30\x7f\x00")  # then garbage: a PUBLISH whose topic runs past its packet
            s.write(b"\xff" * 200)
            await asyncio.sleep(30)
            return
        s.write(publish(topics.req("cli1"), encode(m.Ping(t0=5))))
        while True:
            first, body = await s.read()
            if first >> 4 == 3:
                tl = int.from_bytes(body[:2], "big")
                if body[2:2 + tl].decode() == topics.client("cli1"):
                    answered.extend(decode_all(body[2 + tl:]))

    broker = FakeBroker(script)

    async def main() -> None:
        async with broker:
            shell = Relay(BrokerAddress("127.0.0.1", broker.port, "relay", "pw"), RelaySettings(topics, seed=3))
            task = asyncio.create_task(shell.run())
            try:
                await until(lambda: bool(answered), "the relay's Pong after reconnecting", timeout=30)
                assert shell.reconnects == 1
                assert isinstance(answered[0], m.Pong)
                assert len(broker.sessions) == 2 and all(any(f >> 4 == 8 for f, _ in s.got) for s in broker.sessions)
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    # (blink.relay's own level too: an in-process ``blink`` command earlier in the run turns it down)
    with caplog.at_level(logging.WARNING), caplog.at_level(logging.WARNING, logger="blink.relay"):
        run(main())
    mqtt_lines = [r.getMessage() for r in caplog.records if r.name == "blink.mqtt"]
    assert len(mqtt_lines) == 1 and "malformed packet" in mqtt_lines[0]
    assert any("lost the broker" in r.getMessage() and "malformed" in r.getMessage() for r in caplog.records)
    assert all(r.exc_info is None for r in caplog.records)
