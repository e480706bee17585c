"""The embedded MQTT broker (amqtt, MQTT 3.1.1) with blink's access rules, a relay secret and a size limit.

How this works
--------------
``blink serve`` without ``--broker`` (and ``blink match`` / ``blink play`` without ``--server``)
run an amqtt broker inside the same asyncio loop as the relay, so one command gives a working
server with nothing else installed. Before starting it we bind the port ourselves once, so that a
taken port is reported as a clear ``PortInUse`` (with a hint) rather than a traceback from deep
inside amqtt.

TLS: ``serve_tls(cert, key, port)`` before ``start`` adds a second listener, amqtt's TCP listener
with its own ``ssl.SSLContext`` (``certfile``/``keyfile``), on the same host: the same gate, rules
and limits behind it (``stream_connected`` is reached after the handshake). The plain listener
stays, for the relay in the same process and for loopback players.

Trust (the same rules as ``deploy/mosquitto.acl``, by MQTT client id):

- Every start makes a random relay secret. Only a CONNECT with user ``relay`` and that password is
  the relay; it may do anything under the topic prefix. ``relay_address`` (with the secret) is
  handed to the in-process relay only; ``address`` (what players get) has no credentials.
- Anyone else (anonymous, or any other user name) is a client ``C`` = its client id: it publishes
  only to ``lobby/req/C`` and ``m/+/+/act/C``; it reads (subscribes to and receives) only
  ``c/C`` and the public ``m/+/+/ev``, ``m/+/+/snap``, ``lobby/matches`` (and ``/+``, per shard), ``relay/+/status``.
  ``#`` and other clients' private topics give nothing. ``BlinkAccessPlugin`` (an amqtt auth and
  topic-checking plugin) enforces this on every publish, subscribe and delivery.
- Three holes amqtt leaves open are closed before amqtt sees a connection (``_GuardedBroker``):
  amqtt takes over (or wipes) a live session on any CONNECT under its client id *before* checking
  the password, so a CONNECT under an id that is connected right now is refused (only the relay,
  with its secret, may take over its own id); a last will is published without any topic check,
  so a client's will must be one of its own publish topics and not retained; and amqtt reads any
  packet whole, so a packet longer than ``max_payload`` plus a small header allowance ends the
  connection as soon as its length is read, before its body is. Only the relay may leave
  retained messages.

Rates (one flooding client must not hurt the others): a flood has to be stopped before
it costs this process -- which runs the relay too -- more than a sliver of its time, so amqtt never
sees it. The gate reads each client's packets whole, before amqtt does (``_LimitedReader`` and
``_Gate``): a PUBLISH over its sender's request or action rate (``relay.limits.Intake`` at the
relay core's own rates, per client id) is dropped there, undecoded (acknowledged if its QoS asks),
and the sender is told ``rate_limited`` on its private topic at most once a second (logged once per
burst); ``limited`` counts the drops. A sender that keeps on above its rate gets nothing more
through -- not a trickle at the rate -- until it slows down (the intake's ``StrictBucket``), so a
flood costs the relay its first burst and no more. Whatever a connection sends, its packets are read at most
``READ_RATE`` a second: beyond that the flood waits in the sender's own socket. The relay's
connection is not limited.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import time
from dataclasses import dataclass
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

from amqtt.adapters import BufferReader, StreamWriterAdapter
from amqtt.contexts import Action, BaseContext
from amqtt.mqtt.connack import BAD_USERNAME_PASSWORD, IDENTIFIER_REJECTED, NOT_AUTHORIZED, ConnackPacket
from amqtt.mqtt.connect import ConnectPacket

if TYPE_CHECKING:
    # amqtt is annotated but ships no ``py.typed`` marker, so a type checker takes its names as
    # untyped (and strict mode refuses to subclass them). These declare what this module uses of the
    # classes it extends and of a session, with amqtt 0.12's own signatures; at run time the real
    # classes stand here.
    class _SessionState(Protocol):
        state: str
        def is_connected(self) -> bool: ...

    class Session(Protocol):
        client_id: str | None
        username: str | None
        password: str | None
        transitions: _SessionState
        clean_session: bool | None
        is_anonymous: bool

    class ReaderAdapter:
        async def read(self, n: int = -1) -> bytes: ...
        def feed_eof(self) -> None: ...

    class BaseAuthPlugin:
        def __init__(self, context: BaseContext) -> None: ...
        async def authenticate(self, *, session: Session) -> bool | None: ...

    class BaseTopicPlugin:
        def __init__(self, context: BaseContext) -> None: ...
        async def topic_filtering(self, *, session: Session | None = None, topic: str | None = None,
                                  action: Action | None = None) -> bool | None: ...

    class _Retained(Protocol):
        topic: str
        data: bytes
        qos: int | None

    class _Handler(Protocol):
        async def mqtt_publish(self, topic: str, data: bytes, qos: int | None, retain: bool) -> object: ...

    class Broker:
        _subscriptions: dict[str, list[tuple[Session, int]]]
        _broadcast_queue: asyncio.Queue[dict[str, Any]]
        _retained_messages: dict[str, _Retained]
        def _matches(self, topic: str, a_filter: str) -> bool: ...
        def _get_handler(self, session: Session) -> _Handler | None: ...
        async def _retain_broadcast_message(self, broadcast: dict[str, Any], qos: int, target_session: Session) -> None: ...
        def __init__(self, config: dict[str, object] | None = None) -> None: ...
        @property
        def sessions(self) -> dict[str, tuple[Session, object]]: ...
        async def start(self) -> None: ...
        async def shutdown(self) -> None: ...
        async def stream_connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                                   listener_name: str) -> None: ...
        async def external_connected(self, reader: ReaderAdapter, writer: StreamWriterAdapter,
                                     listener_name: str) -> None: ...
        async def internal_message_broadcast(self, topic: str, data: bytes, qos: int | None = None) -> None: ...
        async def retain_message(self, source_session: Session | None, topic_name: str | None,
                                 data: bytes | bytearray | None, qos: int | None = None) -> None: ...
else:
    from amqtt.adapters import ReaderAdapter
    from amqtt.broker import Broker
    from amqtt.plugins.base import BaseAuthPlugin, BaseTopicPlugin
    from amqtt.session import Session

# Shared with the client in ``mqttkit``; re-exported because this is where the relay's side finds them.
from mqttkit import (DEFAULT_MAX_PAYLOAD, NODELAY, RELAY_USER, BadURL, BrokerAddress, PortInUse, TLSTrust,
                     check_port, free_port, parse_url, wait_event)
from protocol import messages as m
from protocol.codec import MAX_MESSAGE_BYTES, DecodeError, decode, encode
from protocol.topics import DEFAULT_PREFIX, Topics, valid_id
from relay.limits import Intake, TokenBucket
from relay.model import RelayConfig

__all__ = ["NODELAY", "BadURL", "BrokerAddress", "EmbeddedBroker", "PortInUse", "check_port", "free_port",
           "parse_url", "wait_event", "RELAY_USER", "Access", "BlinkAccessPlugin", "TLSListener"]

log = logging.getLogger("blink.broker")

#: Room for a PUBLISH's fixed header, topic and packet id on top of its payload.
HEADER_ALLOWANCE = 512
CONNECT_TYPE = 1
#: The relay's packets: up to what any client would still decode (protocol.codec.MAX_MESSAGE_BYTES).
RELAY_PACKET_LIMIT = MAX_MESSAGE_BYTES + HEADER_ALLOWANCE


class Access:
    """Who may do what, by client id: pure, so the rules read like the Mosquitto ACL they mirror."""

    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        p = prefix.split("/")
        self._prefix = p
        self._public = [p + ["m", "+", "+", "ev"], p + ["m", "+", "+", "snap"], p + ["lobby", "matches"],
                        p + ["lobby", "matches", "+"], p + ["relay", "+", "status"]]

    def may_publish(self, client: str, topic: str) -> bool:
        """A client writes only its own request topic and its own action topics."""
        if not valid_id(client):
            return False
        levels = topic.split("/")
        return levels == self._prefix + ["lobby", "req", client] \
            or _fits(levels, self._prefix + ["m", "+", "+", "act", client])

    def may_read(self, client: str, topic: str) -> bool:
        """Subscribe (``topic`` may be a filter) or receive: its own private topic, or a public one."""
        levels = topic.split("/")
        if "#" in levels:
            return False
        if valid_id(client) and levels == self._prefix + ["c", client]:
            return True
        return any(_fits(levels, pattern) for pattern in self._public)


def _fits(levels: list[str], pattern: list[str]) -> bool:
    """A topic (or a filter using ``+``) lies inside the pattern: same length, and every literal
    level of the pattern equal (a ``+`` in the pattern stands for one whole level)."""
    return len(levels) == len(pattern) and all(p == "+" or p == lv for lv, p in zip(levels, pattern))


def is_relay_login(username: str | None, password: str | None, secret: str) -> bool:
    return bool(secret) and username == RELAY_USER and password is not None \
        and hmac.compare_digest(password.encode(), secret.encode())


class BlinkAccessPlugin(BaseAuthPlugin, BaseTopicPlugin):
    """amqtt plugin: authenticates the relay by its secret and applies ``Access`` to everyone else."""

    @dataclass
    class Config:
        relay_secret: str = ""
        prefix: str = DEFAULT_PREFIX

    config: Config  # amqtt fills it in from the broker's "plugins" section

    def __init__(self, context: BaseContext) -> None:
        super().__init__(context)
        self.access = Access(self.config.prefix)
        self.secret: str = self.config.relay_secret

    def is_relay(self, session: Session | None) -> bool:
        return session is not None and is_relay_login(session.username, session.password, self.secret)

    async def authenticate(self, *, session: Session) -> bool:
        if session.username == RELAY_USER:
            return self.is_relay(session)
        return True  # anyone else is an ordinary client, confined by topic_filtering

    async def topic_filtering(self, *, session: Session | None = None, topic: str | None = None,
                              action: Action | None = None) -> bool:
        if session is None or not topic:
            return False
        if self.is_relay(session):
            return True
        client = session.client_id or ""
        if action == Action.PUBLISH:
            return self.access.may_publish(client, topic)
        return self.access.may_read(client, topic)  # SUBSCRIBE or RECEIVE


class PacketTooLarge(Exception):
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
PUBLISH_TYPE, PUBREL_TYPE = 3, 6


class _Gate:
    """One client connection's limits, applied to whole packets before amqtt reads them: every
    packet is paced (``READ_RATE``); a PUBLISH outside the client's own topics (which amqtt's ACL
    would refuse anyway) or over its rate (the broker's ``Intake``, shared by all connections and
    keyed by client id, so reconnecting buys nothing) is dropped here, undecoded, and acknowledged
    if its QoS asks for it; the sender is told ``rate_limited`` on its private topic at most once a
    second."""

    def __init__(self, broker: _GuardedBroker, client: str, writer: asyncio.StreamWriter) -> None:
        self.broker = broker
        self.client = client
        self.writer = writer
        self.pace = TokenBucket(READ_RATE, READ_BURST, time.monotonic_ns())
        self.unreleased: set[bytes] = set()  # packet ids of dropped QoS 2 publishes (PUBREC sent)
        self._topic = b""  # the last PUBLISH topic (raw, decoded) and whether the client may publish
        self._topic_str = ""  # to it: a flood repeats one topic, so the ACL is asked once
        self._topic_ok = False

    async def keep(self, first: int, body: bytes) -> bool:
        """Pass this packet (its first byte and its body) on to amqtt?"""
        now = time.monotonic_ns()
        pace = self.pace
        if not pace.take(now):
            # Sleep until a batch of tokens is back, not one: a paced flood then wakes this
            # connection ten times a second rather than READ_RATE times.
            await asyncio.sleep((PACE_BATCH - pace.tokens) / pace.rate)
            now = time.monotonic_ns()
            pace.take(now)
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
                await self._tell(topic, body[2 + n + (2 if qos else 0):])
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

    async def _tell(self, topic: str, payload: bytes) -> None:
        """``rate_limited`` to the sender's private topic (an action's refusal names the action)."""
        broker = self.broker
        act = broker.topics.parse_act(topic)
        what = "actions" if act else "requests"
        rate = broker.intake.act[0] if act else broker.intake.req[0]
        detail = f"too many {what}: at most {rate:g} a second; the rest are dropped"
        reply: m.ActionRejected | m.RequestRejected
        if act:
            action_id = -1
            try:
                msg = decode(payload)
                if isinstance(msg, m.Act):
                    action_id = msg.id
            except DecodeError:
                pass
            reply = m.ActionRejected(act[0][:16], action_id, "rate_limited", detail)
        else:
            reply = m.RequestRejected("rate_limited", detail)
        await broker.internal_message_broadcast(broker.topics.client(self.client), encode(reply))


class _LimitedReader(ReaderAdapter):
    """The client's byte stream as amqtt reads it: first the CONNECT we already read, then the
    socket, a whole packet at a time: a packet whose announced length is over the limit ends the
    connection before any of its body is read, and the gate (if any: not for the relay) may drop
    a packet before amqtt sees it."""

    def __init__(self, reader: asyncio.StreamReader, limit: int, replay: bytes, gate: _Gate | None = None) -> None:
        self._reader = reader
        self._limit = limit
        self._buf = replay
        self._pos = 0
        self._gate = gate

    async def read(self, n: int = -1) -> bytes:
        if self._pos >= len(self._buf):
            self._buf, self._pos = await self._next_packet(), 0
        end = len(self._buf) if n < 0 else self._pos + n
        out = self._buf[self._pos:end]
        self._pos += len(out)
        while n >= 0 and len(out) < n:  # amqtt reads within one packet; this is only for safety
            self._buf, self._pos = await self._next_packet(), 0
            more = self._buf[:n - len(out)]
            self._pos = len(more)
            out += more
        return out

    async def _next_packet(self) -> bytes:
        reader = self._reader
        while True:
            head = await reader.readexactly(2)  # the type and the first length byte
            length, b = head[1] & 0x7F, head[1]
            mult = 128
            while b & 0x80:
                if len(head) >= 5:
                    raise PacketTooLarge("bad remaining length")
                b = (await reader.readexactly(1))[0]
                head += bytes((b,))
                length += (b & 0x7F) * mult
                mult *= 128
            if length > self._limit:
                raise PacketTooLarge(f"packet of {length} bytes > {self._limit}")
            body = await reader.readexactly(length) if length else b""
            if self._gate is None or await self._gate.keep(head[0], body):
                return head + body

    def feed_eof(self) -> None:
        self._reader.feed_eof()


async def _ended(live: tuple[Session, object], within: float = 5.0) -> bool:
    """Whether a session still marked connected is only waiting for amqtt to finish closing it:
    its connection is already closed on this side (the broker dropped it, e.g. for a packet over
    the limit) or its reader has stopped (the peer went), and amqtt ends the session a few loop
    turns later -- many, on a busy broker. A client that reconnects at once under its id would
    otherwise be refused as a take-over; it waits for the close instead (at most ``within``
    seconds), and is refused if the old connection is really alive."""
    session, handler = live
    writer = getattr(handler, "writer", None)
    stopped = getattr(handler, "_reader_stopped", None)
    closing = (writer is None or getattr(writer, "is_closed", False) is True
               or (isinstance(stopped, asyncio.Event) and stopped.is_set()))
    if not closing:
        return False
    deadline = time.monotonic() + within
    while session.transitions.is_connected():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.005)  # amqtt announces the session's end to no one we can wait on
    return True


async def _read_first_packet(reader: asyncio.StreamReader, limit: int) -> bytes:
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


class _SubscriptionTable(dict[str, list[tuple[Session, int]]]):
    """amqtt's subscription table (filter -> subscribers), iterated over a copy: amqtt awaits inside
    ``for topic in self._subscriptions``, so a client subscribing or leaving meanwhile would raise
    "dictionary changed size during iteration". It also keeps apart the filters with wildcards, so a
    message finds its subscribers by one lookup of its topic plus a match against those few
    (``matching``) -- amqtt's own broadcast tries every filter of every client for every message,
    which at a few hundred players cost the broker most of its time."""

    def __init__(self) -> None:
        super().__init__()
        self.wildcards: dict[str, None] = {}  # an ordered set

    def __setitem__(self, key: str, value: list[tuple[Session, int]]) -> None:
        super().__setitem__(key, value)
        if "+" in key or "#" in key:
            self.wildcards[key] = None

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self.wildcards.pop(key, None)

    def clear(self) -> None:
        super().clear()
        self.wildcards.clear()

    def pop(self, key: str, *default: list[tuple[Session, int]]) -> list[tuple[Session, int]]:  # type: ignore[override]
        self.wildcards.pop(key, None)
        return super().pop(key, *default)

    def items(self) -> list[tuple[str, list[tuple[Session, int]]]]:  # type: ignore[override]
        return [(k, list(v)) for k, v in super().items()]

    def __iter__(self) -> Iterator[str]:
        return iter(list(super().keys()))

    def matching(self, topic: str, matches: Callable[[str, str], bool]) -> list[tuple[Session, int]]:
        """Every (subscriber, qos) whose filter takes ``topic`` (``matches``: amqtt's own filter
        test), once per matching filter, as amqtt delivers; a copy, safe across awaits."""
        found = list(self.get(topic, ()))
        for key in self.wildcards:
            if matches(topic, key):
                found.extend(self.get(key, ()))
        return found


class _GuardedBroker(Broker):
    """amqtt's broker with a gate in front of every TCP connection (see the module header)."""

    def __init__(self, config: dict[str, object], access: Access, secret: str, packet_limit: int,
                 intake: Intake, topics: Topics) -> None:
        super().__init__(config)
        self._subscriptions = _SubscriptionTable()
        self.access = access
        self.intake = intake
        self.topics = topics
        self.limited = 0  # publishes dropped for their sender's rate
        self._secret = secret
        self._packet_limit = packet_limit

    async def stream_connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                               listener_name: str) -> None:
        out = StreamWriterAdapter(writer)
        try:
            first = await asyncio.wait_for(_read_first_packet(reader, self._packet_limit), timeout=10)
            refusal, relay, client = await self._check_connect(first)
        except (PacketTooLarge, asyncio.IncompleteReadError, TimeoutError, ConnectionError, ValueError) as exc:
            log.info("connection refused before CONNECT: %s", exc)
            await _close(out)
            return
        except Exception as exc:  # noqa: BLE001 - a CONNECT amqtt cannot parse: nothing to serve
            log.info("unreadable CONNECT: %s", exc)
            await _close(out)
            return
        if refusal is not None:
            try:
                await ConnackPacket.build(0, refusal).to_stream(out)
            except Exception:  # noqa: BLE001 - the peer may be gone already
                pass
            await _close(out)
            return
        # The relay's own messages (a long match list) may be larger than a client's ever need be;
        # the relay is never rate limited.
        limit = RELAY_PACKET_LIMIT if relay else self._packet_limit
        gate = None if relay else _Gate(self, client, writer)
        await self.external_connected(_LimitedReader(reader, limit, first, gate), out, listener_name)

    async def _check_connect(self, first: bytes) -> tuple[int | None, bool, str]:
        """(None, relay?, client id) to let amqtt handle this CONNECT, else (the CONNACK code refusing it, _, _)."""
        if first[0] >> 4 != CONNECT_TYPE:
            raise ValueError("the first packet is not a CONNECT")
        connect = await ConnectPacket.from_stream(BufferReader(first))
        if connect.payload is None:
            raise ValueError("a CONNECT without payload")
        client = connect.payload.client_id or ""
        relay = is_relay_login(connect.username, connect.password, self._secret)
        if connect.username == RELAY_USER and not relay:
            return BAD_USERNAME_PASSWORD, False, client
        if not relay and not connect.payload.client_id_is_random and not valid_id(client):
            return IDENTIFIER_REJECTED, False, client
        live = self.sessions.get(client)
        if live is not None and live[0].transitions.is_connected() and not relay:
            if not await _ended(live):
                return IDENTIFIER_REJECTED, False, client  # someone is connected under this id: no take-over without the secret
        if connect.will_flag and not relay:
            if connect.will_retain_flag or not self.access.may_publish(client, connect.will_topic or ""):
                return NOT_AUTHORIZED, False, client
        return None, relay, client

    async def _run_broadcast(self, running_tasks: deque[asyncio.Task[object]]) -> None:
        """amqtt's broadcast step (amqtt 0.12), for every message queued by now rather than one: its
        loop makes a task and waits on it for each step, which under load cost more than the
        delivery itself."""
        queue = self._broadcast_queue
        await self._deliver(await queue.get(), running_tasks)
        while not queue.empty():
            await self._deliver(queue.get_nowait(), running_tasks)

    async def _deliver(self, broadcast: dict[str, Any], running_tasks: deque[asyncio.Task[object]]) -> None:
        """One message to its subscribers, as amqtt does, with the subscribers found by
        ``_SubscriptionTable.matching`` and the receive check asked of ``Access`` directly -- all
        our access plugin would answer (amqtt's plugin manager gathers a coroutine per plugin for
        every recipient of every message)."""
        topic: str = broadcast["topic"]
        subscriptions = self._subscriptions
        assert isinstance(subscriptions, _SubscriptionTable)
        for target, sub_qos in subscriptions.matching(topic, self._matches):
            if not (is_relay_login(target.username, target.password, self._secret)
                    or self.access.may_read(target.client_id or "", topic)):
                continue
            qos = broadcast.get("qos", sub_qos)
            connected = target.transitions.state == "connected"
            if not connected and not target.clean_session and qos in (1, 2) and not target.is_anonymous:
                await self._retain_broadcast_message(broadcast, qos, target)  # as amqtt: kept for its return
                continue
            if not connected:
                continue
            handler = self._get_handler(target)
            if handler:
                running_tasks.append(asyncio.ensure_future(handler.mqtt_publish(topic, broadcast["data"], qos,
                                                                                retain=False)))

    async def _publish_retained_messages_for_subscription(self, subscription: tuple[str, int],
                                                          session: Session) -> None:
        """The retained messages a new subscription takes, as amqtt sends them, but looked up by the
        filter itself when it has no wildcard: amqtt matches every retained message against every
        filter, and does so for every filter in the broker on each CONNECT."""
        topic_filter, qos = subscription
        retained = self._retained_messages
        if "+" in topic_filter or "#" in topic_filter:
            found = [r for t, r in list(retained.items()) if self._matches(t, topic_filter)]
        else:
            one = retained.get(topic_filter)
            found = [one] if one is not None else []
        handler = self._get_handler(session) if found else None
        if handler is None:
            return
        await asyncio.wait([asyncio.ensure_future(handler.mqtt_publish(r.topic, r.data, min(qos, r.qos or qos),
                                                                       retain=True)) for r in found])

    async def retain_message(self, source_session: Session | None, topic_name: str | None,
                             data: bytes | bytearray | None, qos: int | None = None) -> None:
        if source_session is not None and not is_relay_login(source_session.username, source_session.password,
                                                             self._secret):
            return  # only the relay leaves messages for newcomers (amqtt would hand them to every new client)
        await super().retain_message(source_session, topic_name, data, qos)


async def _close(writer: StreamWriterAdapter) -> None:
    try:
        await writer.close()
    except Exception:  # noqa: BLE001 - closing a socket the peer may have closed
        pass


@dataclass(frozen=True)
class TLSListener:
    """Where and with what the embedded broker speaks TLS."""

    cert: str
    key: str
    port: int


class EmbeddedBroker:
    """An amqtt broker listening on host:port inside the running event loop, with blink's access
    rules; ``relay_address`` carries this start's relay secret (give it to the relay only)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 1883, prefix: str = DEFAULT_PREFIX,
                 max_payload: int = DEFAULT_MAX_PAYLOAD, config: RelayConfig | None = None) -> None:
        self.host = host
        self.port = port
        self.prefix = prefix
        self.max_payload = max_payload
        #: Each client's publishes are limited here at the relay core's own rates (``config``):
        #: the core then never has to see a flood, and nobody under the rates is ever affected.
        #: The bursts are smaller than the core's (``GATE_BURST_S`` of the rate, at least
        #: ``GATE_MIN_BURST``): a flood's first burst is all of it that passes, and at the
        #: default 200 actions it cost the relay's process most of a second of CPU at once.
        self.intake = Intake.for_config(config or RelayConfig(), burst_s=GATE_BURST_S, min_burst=GATE_MIN_BURST)
        self._secret = secrets.token_hex(16)
        self._broker: _GuardedBroker | None = None
        self.tls: TLSListener | None = None

    def serve_tls(self, cert: str, key: str, port: int) -> None:
        """Also listen with TLS on ``port`` (see the module header); call before ``start``."""
        self.tls = TLSListener(cert, key, port)

    @property
    def tls_address(self) -> BrokerAddress | None:
        """Where players connect over TLS (None without ``serve_tls``)."""
        return None if self.tls is None else BrokerAddress(self.host, self.tls.port, tls=TLSTrust())

    @property
    def address(self) -> BrokerAddress:
        """Where players connect: no credentials."""
        return BrokerAddress(self.host, self.port)

    @property
    def relay_address(self) -> BrokerAddress:
        """The relay's login: user ``relay`` with this start's secret."""
        return BrokerAddress(self.host, self.port, RELAY_USER, self._secret)

    async def start(self) -> None:
        check_port(self.host, self.port)
        listeners: dict[str, dict[str, object]] = {
            "default": {"type": "tcp", "bind": f"{self.host}:{self.port}", "max_connections": 1000}}
        if self.tls is not None:
            check_port(self.host, self.tls.port)
            listeners["tls"] = {"type": "tcp", "bind": f"{self.host}:{self.tls.port}", "max_connections": 1000,
                                "ssl": True, "certfile": self.tls.cert, "keyfile": self.tls.key}
        for name in ("amqtt", "transitions"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        config = {
            "listeners": listeners,
            "plugins": {f"{__name__}.BlinkAccessPlugin": {"relay_secret": self._secret, "prefix": self.prefix}},
        }
        broker = _GuardedBroker(config, Access(self.prefix), self._secret, self.max_payload + HEADER_ALLOWANCE,
                                self.intake, Topics(self.prefix))
        try:
            await broker.start()
        except Exception as exc:  # noqa: BLE001 - amqtt wraps bind errors in BrokerError
            if "address already in use" in str(exc).lower():
                raise PortInUse(f"port {self.port} on {self.host} is already in use; use --broker") from exc
            raise
        self._broker = broker

    async def stop(self) -> None:
        if self._broker is not None:
            broker, self._broker = self._broker, None
            try:
                await broker.shutdown()
            except Exception:  # noqa: BLE001 - shutting down: nothing left to protect
                pass
