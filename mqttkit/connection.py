"""A lean MQTT 3.1.1 client connection on ``asyncio.Protocol``, for a process that moves many small messages.

How this works
--------------
``connect()`` opens the TCP connection (over TLS when given a context: ``mqttkit.tls_context``, the
one place that decides what to believe), sends CONNECT (client id, user and password, a last will,
keep-alive) and waits for CONNACK: a refusal raises ``ConnectRefused`` (with the broker's return
code), anything else that stops it ``MqttError`` -- so a caller's retry loop catches one type.

Receiving: ``data_received`` hands each read to ``packets.Parser``, which returns every complete
packet in it; the PUBLISHes of one read go to the ``on_messages`` callback as ONE list (no task, no
queue, no loop turn per message: the caller stamps them once and queues them). QoS 1 and 2
deliveries are acknowledged here, all the acknowledgements of one read in one write (QoS 2 is
delivered when it arrives and remembered by packet id until its PUBREL, so a resent one is not
delivered twice). A PUBLISH over ``max_packet`` is not buffered: ``on_oversize(topic, size)`` is
told and its bytes are skipped. ``drop_until(topic, until_ns, on_dropped)`` has the parser count,
not build, the QoS-0 PUBLISHes on one topic until then (a reader that knows it would refuse them
all: a flood's excess), and after a read with many of them the socket is left unread for a few
ms (``COALESCE_S``) so that a flood is read in large chunks rather than a few packets a read. A
packet that breaks the framing (``packets.PacketError``) drops the connection with one logged
line, after the packets before it in the same read are delivered.

Sending: ``write(data)`` puts bytes already packed (one or many PUBLISH packets,
``packets.pack_publish``) on the transport, which sends them at once when nothing is waiting, in
one system call. ``publish`` packs one message; at QoS 1 it numbers it and, if asked, returns a
future the PUBACK resolves. Writing to a connection that is down raises ``MqttError``; a broker that
stops reading (more than ``max_write_buffer`` bytes waiting) gets the connection dropped rather
than the process's memory.

Keep-alive: a timer every ``keepalive / 2`` sends PINGREQ (unless one is still unanswered), and
drops the connection when one has gone unanswered for ``keepalive`` seconds (a broker or network
that went silent without closing the socket). ``subscribe`` waits for its SUBACK and
raises ``SubscribeRefused`` if the broker refused a subscription (the connection stays up: the
caller may ask again). ``set_topic_filter`` has messages the reader does not listen to skipped
undecoded by the parser (``packets.Parser``'s "Filtering"). ``wait_closed()`` returns (not raises)
why the connection ended, and ``on_close(callback)`` is told the same without a task;
``disconnect()`` sends DISCONNECT (the broker then drops the last will) and waits for what was
written to be flushed.

Reconnecting is the caller's business (it knows what to resubscribe and resend).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from dataclasses import dataclass
from typing import Callable, Iterable, TypeVarTuple, cast

from mqttkit import MqttkitError, tls_refusal
from mqttkit.packets import (CONNACK, DISCONNECT_PACKET, PINGREQ_PACKET, PINGRESP, PUBACK, PUBCOMP, PUBREC, PUBREL,
                             SUBACK, UNSUBACK, Control, Message, Oversize, Parser, PacketError, pack_ack,
                             pack_connect, pack_publish, pack_subscribe, pack_unsubscribe)

log = logging.getLogger("blink.mqtt")
Ts = TypeVarTuple("Ts")

CONNECT_TIMEOUT_S = 10.0
#: After a read that held at least ``COALESCE_MIN`` dropped messages (a flood: see ``drop_until``),
#: the socket is left unread for ``COALESCE_S``, so that the next read takes what came meanwhile
#: in one go: a flood arrives a few packets per read otherwise (Mosquitto writes each message as
#: it comes), and each read costs more than dropping its packets (measured: ~8 packets and ~12 us
#: a read). The other messages of that time wait at most that long, in the kernel's buffer: during
#: a Mosquitto flood of ~80k messages/s the players' median play -> verdict is about 2 ms with 1 ms
#: here and 3.5 ms with 3 ms, which would save only 2-3 % of a core in the relay.
COALESCE_MIN = 16
COALESCE_S = 0.001
#: Bytes the transport may hold unsent before the broker is deemed not to read any more.
MAX_WRITE_BUFFER = 64 * 1024 * 1024
CONNACK_REASONS = {1: "unacceptable protocol version", 2: "identifier rejected", 3: "server unavailable",
                   4: "bad user name or password", 5: "not authorized"}


class MqttError(MqttkitError):
    """The connection could not be made, or it ended."""


class ConnectRefused(MqttError):
    """The broker answered CONNECT with a non-zero return code (``rc``: 4 bad login, 5 not authorized)."""

    def __init__(self, rc: int) -> None:
        super().__init__(f"the broker refused the connection: {CONNACK_REASONS.get(rc, 'return code')} ({rc})")
        self.rc = rc


class NoConnack(MqttError):
    """The connection ended before the broker answered CONNECT: a TLS listener given a plain CONNECT,
    or a broker not ready to take clients yet (nats-server setting up its MQTT streams)."""


class SubscribeRefused(MqttError):
    """The broker's SUBACK refused a subscription (0x80); ``codes``: its return codes, one a topic."""

    def __init__(self, subscriptions: list[tuple[str, int]], codes: list[int]) -> None:
        super().__init__(f"the broker refused a subscription: {subscriptions} -> {codes}")
        self.codes = codes


@dataclass(frozen=True)
class Will:
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False


OnMessages = Callable[[list[Message]], None]
OnOversize = Callable[[str, int], None]
OnDropped = Callable[[bytes, int], None]


class MqttConnection(asyncio.Protocol):
    """One client connection (see the module header). Made by ``connect()``."""

    def __init__(self, on_messages: OnMessages, on_oversize: OnOversize | None = None, *,
                 max_packet: int = 1 << 20, keepalive: float = 30.0, max_write_buffer: int = MAX_WRITE_BUFFER,
                 name: str = "") -> None:
        self.on_messages = on_messages
        self.on_oversize = on_oversize
        self.parser = Parser(max_packet)
        self.keepalive = keepalive
        self.max_write_buffer = max_write_buffer
        self.name = name  # for log lines: where this connection goes
        self.transport: asyncio.Transport | None = None
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.connack: asyncio.Future[int] = loop.create_future()
        self._closed: asyncio.Future[MqttError] = loop.create_future()
        self._acked = False
        self._pending: dict[int, asyncio.Future[bytes]] = {}  # packet id -> its SUBACK/UNSUBACK/PUBACK body
        self._next_pid = 0
        self._qos2: set[int] = set()  # QoS-2 packet ids delivered, awaiting their PUBREL
        self._last_out = time.monotonic()
        self._ping_sent: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.received = 0  # PUBLISHes delivered
        self.dropped_topics = 0  # PUBLISHes whose topic was not UTF-8
        self._drop: bytes | None = None  # see drop_until
        self._drop_until = 0
        self._on_dropped: OnDropped | None = None
        self._resume: asyncio.TimerHandle | None = None  # reading paused after a flood's read (COALESCE_S)

    def drop_until(self, topic: bytes, until_ns: int, on_dropped: OnDropped) -> None:
        """Until ``time.monotonic_ns()`` reaches ``until_ns``, QoS-0 PUBLISHes on exactly ``topic``
        are not delivered: the parser counts them without building them, and after each read
        ``on_dropped(topic, n)`` is told how many (before ``on_messages`` gets the rest of that
        read). One topic at a time: a new call replaces the last. For a reader that knows a
        sender's messages will all be refused until then (a flood's excess: ``relay/runtime.py``)."""
        self._drop, self._drop_until, self._on_dropped = topic, until_ns, on_dropped

    # ------------------------------------------------------------------ state

    @property
    def connected(self) -> bool:
        """CONNACK accepted and the connection not ended."""
        return self._acked and not self._closed.done()

    def on_close(self, callback: Callable[[MqttError], None]) -> None:
        """Have ``callback(reason)`` called (from the loop) once the connection ends: no task needed,
        for a process that holds thousands of connections."""
        self._closed.add_done_callback(lambda future: callback(future.result()))

    async def wait_closed(self) -> MqttError:
        """Wait for the connection to end; return why."""
        return await asyncio.shield(self._closed)

    def abort(self, reason: MqttError | None = None) -> None:
        """Drop the connection now (nothing more is sent)."""
        self._end(reason or MqttError("the connection was dropped"))
        if self.transport is not None:
            self.transport.abort()

    async def disconnect(self, timeout: float = 2.0) -> None:
        """Say DISCONNECT (the broker drops the last will), flush what was written, close."""
        transport = self.transport
        if transport is None or self._closed.done():
            return
        try:
            transport.write(DISCONNECT_PACKET)
        except (OSError, RuntimeError):
            pass
        self._end(MqttError("disconnected"))
        transport.close()  # flushes the buffer first
        deadline = time.monotonic() + timeout
        while not transport.is_closing() or transport.get_write_buffer_size():
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.01)
        if transport.get_write_buffer_size():
            transport.abort()

    # ------------------------------------------------------------------ sending

    def write(self, data: bytes | bytearray) -> None:
        """Send packed packets (one write; sent at once when nothing is waiting). MqttError if down."""
        transport = self.transport
        if transport is None or not self._acked or self._closed.done():
            raise MqttError("not connected")
        transport.write(data)
        self._last_out = time.monotonic()
        if transport.get_write_buffer_size() > self.max_write_buffer:
            size = transport.get_write_buffer_size()
            log.warning("dropping the connection to %s: the broker does not read (%d bytes waiting)", self.name, size)
            self.abort(MqttError(f"the broker does not read ({size} bytes waiting)"))
            raise MqttError("the broker does not read")

    def publish(self, topic: str, payload: bytes | bytearray, qos: int = 0, retain: bool = False,
                wait: bool = False) -> asyncio.Future[bytes] | None:
        """Pack and send one message; at QoS 1 with ``wait``, a future its PUBACK resolves."""
        if qos not in (0, 1):
            raise ValueError("this client publishes at QoS 0 or 1")
        buf = bytearray()
        pid = self._new_pid() if qos else 0
        pack_publish(buf, topic, payload, retain, qos=qos, pid=pid)
        future = self._expect(pid) if qos and wait else None
        self.write(buf)
        return future

    async def subscribe(self, subscriptions: Iterable[tuple[str, int]], timeout: float = CONNECT_TIMEOUT_S) -> list[int]:
        """Subscribe and wait for the SUBACK; MqttError if one was refused (0x80) or none came."""
        subs = list(subscriptions)
        pid = self._new_pid()
        future = self._expect(pid)
        self.write(pack_subscribe(pid, subs))
        body = await self._answer(future, timeout, "SUBACK")
        codes = list(body)
        if len(codes) != len(subs) or any(c == 0x80 or c > 2 for c in codes):
            raise SubscribeRefused(subs, codes)
        return codes

    def set_topic_filter(self, drop_under: bytes | None, keep_under: tuple[bytes, ...] = ()) -> None:
        """From the next read on, QoS-0 PUBLISHes whose topic starts with ``drop_under`` and with
        none of ``keep_under`` are skipped undecoded (``None``: deliver everything)."""
        self.parser.drop_under = drop_under
        self.parser.keep_under = tuple(keep_under)

    @property
    def filtered(self) -> int:
        """PUBLISHes skipped by the topic filter."""
        return self.parser.filtered

    async def unsubscribe(self, topics: Iterable[str], timeout: float = CONNECT_TIMEOUT_S) -> None:
        pid = self._new_pid()
        future = self._expect(pid)
        self.write(pack_unsubscribe(pid, list(topics)))
        await self._answer(future, timeout, "UNSUBACK")

    def _new_pid(self) -> int:
        for _ in range(0xFFFF):
            self._next_pid = self._next_pid % 0xFFFF + 1
            if self._next_pid not in self._pending:
                return self._next_pid
        raise MqttError("no packet id free: 65,535 acknowledgements outstanding")

    def _expect(self, pid: int) -> asyncio.Future[bytes]:
        future: asyncio.Future[bytes] = self._loop.create_future()
        self._pending[pid] = future
        return future

    async def _answer(self, future: asyncio.Future[bytes], timeout: float, what: str) -> bytes:
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(future)
        except TimeoutError:
            self.abort(MqttError(f"no {what} within {timeout:g} s"))
            raise MqttError(f"no {what} within {timeout:g} s") from None

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport: asyncio's own, or uvloop's (which does not derive from asyncio's classes).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        drop = self._drop
        if drop is not None and time.monotonic_ns() >= self._drop_until:
            drop = self._drop = None
        parser = self.parser
        try:
            packets = parser.feed(data, drop)
            error = None
        except PacketError as exc:
            packets, error = exc.packets, exc
        if parser.skipped:
            dropped, parser.skipped = parser.skipped, 0
            if drop is not None and self._on_dropped is not None:
                self._deliver(self._on_dropped, drop, dropped)
            if dropped >= COALESCE_MIN:
                self._coalesce()
        messages: list[Message] = []
        acks = bytearray()
        for p in packets:
            if type(p) is Message:
                if p.qos:
                    if p.qos == 1:
                        acks += pack_ack(PUBACK, p.pid)
                    else:
                        acks += pack_ack(PUBREC, p.pid)
                        if p.pid in self._qos2:
                            continue  # a resend of one delivered already
                        self._qos2.add(p.pid)
                if p.topic is None:
                    self.dropped_topics += 1
                    continue
                messages.append(p)
            elif type(p) is Control:
                self._control(p, acks)
            elif type(p) is Oversize:
                if p.qos == 1:
                    acks += pack_ack(PUBACK, p.pid)
                elif p.qos == 2:
                    acks += pack_ack(PUBREC, p.pid)
                if p.topic is not None and self.on_oversize is not None:
                    self._deliver(self.on_oversize, p.topic, p.size)
        if acks and self.transport is not None and not self.transport.is_closing():
            self.transport.write(acks)
            self._last_out = time.monotonic()
        if messages:
            self.received += len(messages)
            self._deliver(self.on_messages, messages)
        if error is not None:
            log.warning("dropping the connection to %s: malformed packet from the broker (%s)", self.name, error)
            self.abort(MqttError(f"malformed packet from the broker: {error}"))

    def _coalesce(self) -> None:
        """Leave the socket unread for ``COALESCE_S`` (see there); always resumed by a timer."""
        transport = self.transport
        if self._resume is not None or transport is None or transport.is_closing() or not transport.is_reading():
            return
        transport.pause_reading()
        self._resume = self._loop.call_later(COALESCE_S, self._resume_reading)

    def _resume_reading(self) -> None:
        self._resume = None
        transport = self.transport
        if transport is not None and not transport.is_closing() and not transport.is_reading():
            transport.resume_reading()

    def _deliver(self, callback: Callable[[*Ts], None], *args: *Ts) -> None:
        try:
            callback(*args)
        except Exception as exc:  # noqa: BLE001 - a bug in the callback: say so, do not lose the connection's loop
            log.exception("an MQTT message callback failed")
            self.abort(MqttError(f"the message callback failed: {exc!r}"))

    def _control(self, p: Control, acks: bytearray) -> None:
        kind = p.kind
        if kind == PINGRESP:
            self._ping_sent = None
            return
        if kind == CONNACK:
            rc = p.body[1]
            if not self.connack.done():
                self.connack.set_result(rc)
            if rc == 0:
                self._acked = True
                self._arm()
            return
        pid = (p.body[0] << 8) | p.body[1]
        if kind == PUBREL:
            acks += pack_ack(PUBCOMP, pid)
            self._qos2.discard(pid)
        elif kind in (SUBACK, UNSUBACK, PUBACK):
            future = self._pending.pop(pid, None)
            if future is not None and not future.done():
                future.set_result(p.body[2:])
        elif kind == PUBREC:  # we never publish at QoS 2; answer as the protocol says all the same
            acks += pack_ack(PUBREL, pid)
        # PUBCOMP: nothing to do.

    def eof_received(self) -> bool | None:
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(MqttError(f"connection lost: {exc}" if exc else "the broker closed the connection"))
        self.transport = None

    def _end(self, reason: MqttError) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
        if not self._closed.done():
            self._closed.set_result(reason)
        if not self.connack.done():
            self.connack.set_exception(reason)
            self.connack.exception()  # retrieved: connect() reads _closed
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(reason)
                future.exception()  # a QoS-1 publish nobody waits for must not log "never retrieved"

    # ------------------------------------------------------------------ keep-alive

    def _arm(self) -> None:
        if self.keepalive > 0 and not self._closed.done():
            self._timer = self._loop.call_later(self.keepalive / 2, self._keepalive_tick)

    def _keepalive_tick(self) -> None:
        self._timer = None
        transport = self.transport
        if transport is None or self._closed.done():
            return
        now = time.monotonic()
        if self._ping_sent is not None and now - self._ping_sent > self.keepalive:
            log.warning("dropping the connection to %s: no PINGRESP for %.0f s", self.name, now - self._ping_sent)
            self.abort(MqttError(f"the broker did not answer a PINGREQ within {self.keepalive:g} s"))
            return
        if self._ping_sent is None:
            # Every keepalive/2 whatever else was written: a broker that went silent (its socket
            # still open) is noticed within 1.5 keep-alives even while the relay writes a lot.
            transport.write(PINGREQ_PACKET)
            self._last_out = self._ping_sent = now
        self._arm()


async def connect(host: str, port: int, *, client_id: str, on_messages: OnMessages,
                  on_oversize: OnOversize | None = None, username: str | None = None, password: str | None = None,
                  will: Will | None = None, keepalive: int = 30, max_packet: int = 1 << 20,
                  socket_options: Iterable[tuple[int, int, int]] = (), timeout: float = CONNECT_TIMEOUT_S,
                  max_write_buffer: int = MAX_WRITE_BUFFER, tls: ssl.SSLContext | None = None) -> MqttConnection:
    """Connect and log in (see the module header), over TLS with ``tls`` (the host name is the one
    checked against the certificate); ``ConnectRefused`` or ``MqttError`` if not."""
    loop = asyncio.get_running_loop()
    name = f"{'mqtt' if tls is None else 'mqtts'}://{host}:{port}"
    packet = pack_connect(client_id, keepalive, username, password,
                          None if will is None else (will.topic, will.payload, will.qos, will.retain))
    transport: asyncio.BaseTransport | None = None
    try:
        async with asyncio.timeout(timeout):
            transport, proto = await loop.create_connection(
                lambda: MqttConnection(on_messages, on_oversize, max_packet=max_packet, keepalive=keepalive,
                                       max_write_buffer=max_write_buffer, name=name), host, port, ssl=tls)
            sock = transport.get_extra_info("socket")
            if sock is not None:
                for option in socket_options:
                    sock.setsockopt(*option)
            transport.write(packet)
            proto._last_out = time.monotonic()  # noqa: SLF001
            try:
                # _end() fails connack too when the connection ends first.
                rc = await asyncio.shield(proto.connack)
            except MqttError:
                why = proto._closed.result() if proto._closed.done() else MqttError("no CONNACK")  # noqa: SLF001
                if tls is None:  # a TLS listener ends a plain CONNECT without a word
                    raise NoConnack(f"{why} before the broker's CONNACK (if it speaks TLS, use mqtts://)") from None
                raise NoConnack(str(why)) from None
            if rc != 0:
                raise ConnectRefused(rc)
            return proto
    except TimeoutError:
        _drop(transport)
        raise MqttError(f"no answer from the broker at {name} within {timeout:g} s") from None
    except OSError as exc:
        _drop(transport)
        raise MqttError(tls_refusal(exc) or str(exc) or type(exc).__name__) from exc
    except BaseException:
        _drop(transport)
        raise


def _drop(transport: asyncio.BaseTransport | None) -> None:
    if transport is not None:
        transport.abort()  # type: ignore[attr-defined]


__all__ = ["ConnectRefused", "MqttConnection", "MqttError", "NoConnack", "SubscribeRefused", "Will", "connect"]
