"""What every byte a client sends to the embedded broker goes through before amqtt sees it: a
reader of whole packets, with a size limit, a pace and a rate gate, that hands each packet to the
fast path or on to amqtt.

How this works
--------------
Each connection, once its CONNECT is read (``read_first_packet``) and accepted, is read by a
``Pump`` of its own, in a task of its own, in chunks split into whole packets. A packet whose
announced length is over the limit (the broker's ``max_payload`` plus a header allowance; more for
the relay) ends the connection as soon as its length is read, before its body is: amqtt reads any
packet whole. Each packet then meets the connection's ``ConnectionGate`` (not the relay's), then the
connection's fast path (``relay.embedded.route.FastPath``); what neither takes waits, in order, for
amqtt's reader, which reads it through ``LimitedReader``. The pump has its own task because amqtt
reads under a keep-alive timeout that cancels the read in progress, which must never cut a packet
in two.

Rates (one flooding client must not hurt the others): a flood has to be stopped before it costs this
process -- which runs the relay too -- more than a sliver of its time, so amqtt never sees it. A
PUBLISH over its sender's request or action rate (``relay.limits.Intake`` at the relay core's own
rates, per client id) is dropped at the gate, undecoded (acknowledged if its QoS asks), and the
sender is told ``rate_limited`` on its private topic at most once a second (logged once per burst);
the broker's ``limited`` counts the drops. A sender that keeps on above its rate gets nothing more
through -- not a trickle at the rate -- until it slows down (the intake's ``StrictBucket``), so a
flood costs the relay its first burst and no more. Whatever a connection sends, its packets are read
at most ``READ_RATE`` a second: beyond that the flood waits in the sender's own socket. The relay's
connection is not limited.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from mqttkit.packets import pack_publish
from protocol import messages as m
from protocol.codec import encode
from protocol.topics import Topics
from relay.embedded.amqttapi import ReaderAdapter
from relay.embedded.access import Access
from relay.embedded.route import PUBLISH_TYPE, FastPath
from relay.limits import Intake, TokenBucket
from relay import RelayError

__all__ = ["ConnectionGate", "GatedBroker", "LimitedReader", "PacketTooLarge", "Pump", "read_first_packet",
           "GATE_BURST_S", "GATE_MIN_BURST", "READ_RATE"]

log = logging.getLogger("blink.broker")


class PacketTooLarge(RelayError):
    """Raised inside amqtt's reader loop: ends the connection (a MQTTError would only skip a packet)."""


#: Packets one client connection may have read a second (burst: as many), whatever they are. Well
#: above what a player sends (its publishes are limited to the core's ``act_rate + req_rate``, 120/s
#: by default, plus a ping or two; the project's bots at full speed send ~40/s) and above those
#: limits, so the excess still meets them and its sender is told; a connection sending faster is
#: simply read more slowly, so its excess waits in its own socket (TCP pushes back on the sender)
#: instead of costing this process -- which also runs the relay -- time to read and drop it (~20 us
#: a dropped packet; a connection flooding at full speed costs about 1.5 % of a core when paced).
#: The gate's bursts (see ``EmbeddedBroker.intake``): a quarter of a second at the rate, at least
#: 20 -- far above what a client sends at once (a player's resends after a reconnect are a few; the
#: project's bots at full speed send one action per decision, at most 32 a second).
GATE_BURST_S = 0.25
GATE_MIN_BURST = 20.0
READ_RATE = 300.0
READ_BURST = 300.0
PACE_BATCH = READ_RATE / 10
#: Bytes asked of a connection's socket a read, and packets waiting for amqtt before the reading
#: of that connection waits for it (its socket then pushes back on the sender).
READ_CHUNK = 1 << 16
AMQTT_QUEUE = 64
#: Packet types (the high half of a packet's first byte) the gate and the pump look at besides PUBLISH.
PUBREL_TYPE, SUBSCRIBE_TYPE, UNSUBSCRIBE_TYPE = 6, 8, 10


class GatedBroker(Protocol):
    """What a gate needs of its broker: the rules, the intake, the topics, the count of drops, and
    the fast path's delivery (for its ``rate_limited`` notices)."""

    access: Access
    intake: Intake
    topics: Topics
    limited: int  # publishes dropped for their sender's rate

    def route(self, topic: str, packet: bytes, qos: int) -> None: ...


class ConnectionGate:
    """One client connection's limits, applied to whole packets before amqtt reads them: every
    packet is paced (``READ_RATE``); a PUBLISH outside the client's own topics (which amqtt's ACL
    would refuse anyway) or over its rate (the broker's ``Intake``, shared by all connections and
    keyed by client id, so reconnecting buys nothing) is dropped here, undecoded, and acknowledged
    if its QoS asks for it; the sender is told ``rate_limited`` on its private topic at most once a
    second."""

    def __init__(self, broker: GatedBroker, client: str, writer: asyncio.StreamWriter) -> None:
        self.broker = broker
        self.client = client
        self.writer = writer
        self.pace = TokenBucket(READ_RATE, READ_BURST, time.monotonic_ns())
        self.unreleased: set[bytes] = set()  # packet ids of dropped QoS 2 publishes (PUBREC sent)
        self._topic = b""  # the last PUBLISH topic (raw, decoded) and whether the client may publish
        self._topic_str = ""  # to it: a flood repeats one topic, so the ACL is asked once
        self._topic_ok = False

    async def paced(self) -> None:
        """Wait for the pace's tokens and take one. Sleep until a batch of tokens is back, not one:
        a paced flood then wakes this connection ten times a second rather than READ_RATE times."""
        pace = self.pace
        await asyncio.sleep((PACE_BATCH - pace.tokens) / pace.rate)
        pace.take(time.monotonic_ns())

    def admit(self, first: int, body: bytes, now: int) -> bool:
        """Pass this packet (its first byte and its body) on, once its pace token is taken (``paced``)?"""
        kind = first >> 4
        if kind != PUBLISH_TYPE:
            if kind == PUBREL_TYPE and body[:2] in self.unreleased:
                self.unreleased.discard(body[:2])  # the release of a publish dropped here: complete it here
                self._send(0x70, body[:2])
                return False
            return True
        qos = (first >> 1) & 3
        n = int.from_bytes(body[:2], "big")
        raw = body[2:2 + n]
        if raw != self._topic:
            self._topic, self._topic_str = raw, raw.decode("utf-8", "replace")
            self._topic_ok = self.broker.access.may_publish(self.client, self._topic_str)
        if self._topic_ok:
            intake = self.broker.intake
            topic = self._topic_str
            if intake.admit(topic, now):
                return True
            self.broker.limited += 1
            if intake.first_refusal():
                log.info("client %s over its rate on %s: the excess is dropped at the broker", self.client, topic)
            if intake.tell(now):
                self._tell(topic, body[2 + n + (2 if qos else 0):])
        if qos == 1:
            self._send(0x40, body[2 + n:4 + n])  # PUBACK: the sender may go on; nobody gets it
        elif qos == 2:
            pid = body[2 + n:4 + n]
            self.unreleased.add(pid)
            self._send(0x50, pid)  # PUBREC
        return False

    def _send(self, first: int, pid: bytes) -> None:
        try:
            self.writer.write(bytes((first, 2)) + pid)  # one write: never inside another packet
        except Exception:  # noqa: BLE001 - the connection is going away
            pass

    def _tell(self, topic: str, payload: bytes) -> None:
        """``rate_limited`` to the sender's private topic (an action's refusal names the action)."""
        broker = self.broker
        act = broker.topics.parse_act(topic)
        what = "actions" if act else "requests"
        rate = broker.intake.act[0] if act else broker.intake.req[0]
        detail = f"too many {what}: at most {rate:g} a second; the rest are dropped"
        reply: m.ActionRejected | m.RequestRejected
        if act:
            reply = m.ActionRejected(act[0][:16], m.act_id(payload), "rate_limited", detail)
        else:
            reply = m.RequestRejected("rate_limited", detail)
        packet = bytearray()
        to = broker.topics.client(self.client)
        pack_publish(packet, to, encode(reply))
        broker.route(to, bytes(packet), 0)


class Pump:
    """Reads one connection's socket in chunks, in a task of its own, and splits it into whole
    packets: a packet whose announced length is over the limit ends the connection before any of its
    body is read; the gate (if any: not for the relay) may drop or delay a packet; the fast path (if
    any) serves what it can; the rest waits, in order, for amqtt's reader (``next``). Its own task:
    amqtt reads under a keep-alive timeout that cancels the read in progress, which must never cut
    a packet in two (here it can only cancel the wait for the next whole packet)."""

    def __init__(self, reader: asyncio.StreamReader, limit: int, gate: ConnectionGate | None, fast: FastPath | None) -> None:
        self.reader = reader
        self.limit = limit
        self.gate = gate
        self.fast = fast
        self.queue: asyncio.Queue[bytes | BaseException] = asyncio.Queue(AMQTT_QUEUE)
        self.task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None

    async def next(self) -> bytes:
        """The next whole packet for amqtt; raises what ended the stream (EOF: IncompleteReadError)."""
        if self._error is not None:
            raise self._error
        if self.task is None:
            self.task = asyncio.ensure_future(self._run())
        item = await self.queue.get()
        if isinstance(item, BaseException):
            self._error = item
            raise item
        return item

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    async def _run(self) -> None:
        try:
            await self._pump()
        except asyncio.CancelledError:
            raise
        except (ConnectionError, OSError):
            await self.queue.put(asyncio.IncompleteReadError(b"", 2))
        except Exception as exc:  # noqa: BLE001 - PacketTooLarge, or a failure ending the connection
            await self.queue.put(exc)

    async def _pump(self) -> None:
        reader, limit, gate, fast, queue = self.reader, self.limit, self.gate, self.fast, self.queue
        # What one chunk routes goes out as one write per subscriber (``RoutingBroker.cork``): a
        # relay's step is many messages to the same few players. Flushed before every wait, so no
        # other write -- amqtt's, or another connection's -- ever comes between.
        broker = fast.broker if fast is not None else None
        buf = b""
        while True:
            data = await reader.read(READ_CHUNK)
            if not data:
                await queue.put(asyncio.IncompleteReadError(buf, None))
                return
            buf = buf + data if buf else data
            n = len(buf)
            i = 0
            if broker is not None:
                broker.cork()
            try:
                while i < n:
                    first = buf[i]
                    j = i + 1
                    rl = shift = 0
                    while True:  # the remaining length: 7 bits a byte, least significant first, at most 4
                        if j >= n:
                            break
                        b = buf[j]
                        j += 1
                        rl |= (b & 0x7F) << shift
                        if b < 0x80:
                            shift = -1
                            break
                        shift += 7
                        if shift >= 28:
                            raise PacketTooLarge("bad remaining length")
                    if shift != -1:
                        break  # the length is not all here yet
                    if rl > limit:
                        raise PacketTooLarge(f"packet of {rl} bytes > {limit}")
                    end = j + rl
                    if end > n:
                        break
                    body = buf[j:end]
                    start, i = i, end
                    if gate is not None:
                        now = time.monotonic_ns()
                        if not gate.pace.take(now):
                            if broker is not None:
                                broker.flush()
                            await gate.paced()
                            now = time.monotonic_ns()
                        if not gate.admit(first, body, now):
                            continue
                    packet = buf[start:end]
                    if fast is not None:
                        kind = first >> 4
                        if kind == PUBLISH_TYPE:
                            if fast.hold:
                                fast.broker.flush()
                                await fast.settled()
                        elif kind == SUBSCRIBE_TYPE or kind == UNSUBSCRIBE_TYPE:
                            fast.held()
                        if fast(first, body, packet):
                            continue
                    if queue.full():
                        if broker is not None:
                            broker.flush()
                    await queue.put(packet)
            finally:
                if broker is not None:
                    broker.flush()
            buf = buf[i:]


class LimitedReader(ReaderAdapter):
    """The client's byte stream as amqtt reads it: first the CONNECT we already read, then whole
    packets from the connection's ``Pump`` (which enforces the size limit and the gate, and serves
    the fast path)."""

    def __init__(self, reader: asyncio.StreamReader, limit: int, replay: bytes, gate: ConnectionGate | None = None,
                 fast: FastPath | None = None) -> None:
        self._reader = reader
        self.pump = Pump(reader, limit, gate, fast)
        self._buf = replay
        self._pos = 0

    async def read(self, n: int = -1) -> bytes:
        if self._pos >= len(self._buf):
            self._buf, self._pos = await self.pump.next(), 0
        end = len(self._buf) if n < 0 else self._pos + n
        out = self._buf[self._pos:end]
        self._pos += len(out)
        while n >= 0 and len(out) < n:  # amqtt reads within one packet; this is only for safety
            self._buf, self._pos = await self.pump.next(), 0
            more = self._buf[:n - len(out)]
            self._pos = len(more)
            out += more
        return out

    def feed_eof(self) -> None:
        self._reader.feed_eof()


async def read_first_packet(reader: asyncio.StreamReader, limit: int) -> bytes:
    """A connection's first packet, whole (its CONNECT, for the broker to check before amqtt sees it)."""
    head = await reader.readexactly(1)
    length, mult, raw = 0, 1, bytearray()
    while True:
        b = (await reader.readexactly(1))[0]
        raw.append(b)
        length += (b & 0x7F) * mult
        mult *= 128
        if not b & 0x80:
            break
        if len(raw) >= 4:
            raise PacketTooLarge("bad remaining length")
    if length > limit:
        raise PacketTooLarge(f"first packet of {length} bytes > {limit}")
    return head + bytes(raw) + await reader.readexactly(length)
