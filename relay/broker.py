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

The fast path (what a busy broker spends its time on): amqtt handles every packet with a task, a
decoded packet object, plugin calls, a queue hop and a task per recipient, and saturated a core
between 100 and 200 human-pace matches. Here each connection is read by a ``_Pump`` of its own, in
chunks, and split into whole packets; a QoS 0 or QoS 1 PUBLISH that is not retained, on a topic
amqtt would take, is routed at once (``_Fast``, ``_GuardedBroker.route``): its subscribers found by
one lookup of its topic (plus the few wildcard filters), each checked against the same access
rules, and the packet -- built once, the same bytes for everyone -- written straight to each QoS 0
subscriber's socket, all that one read routes to a subscriber in one write (``cork``/``flush``; a
socket far behind gets QoS 0 dropped, ``MAX_BEHIND``); a QoS 1 PUBLISH is
acknowledged there; PINGREQ is answered there. A delivery at QoS 1, and everything else (CONNECT,
SUBSCRIBE, retained and QoS 2 messages, wills, anything malformed) goes to amqtt, in
order behind the packets before it. The gate and the size limit below come first, for both paths.
amqtt's own bookkeeping tried every filter in the broker at each CONNECT and each disconnect, and
logged the whole subscription table at each SUBSCRIBE (set-up time that grew with the number of
clients); each client's filters are indexed instead, and the table's repr is its size.

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
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Iterator, Protocol

from amqtt.adapters import BufferReader, StreamWriterAdapter
from amqtt.contexts import Action, BaseContext
from amqtt.mqtt.connack import BAD_USERNAME_PASSWORD, IDENTIFIER_REJECTED, NOT_AUTHORIZED, ConnackPacket
from amqtt.mqtt.connect import ConnectPacket
from amqtt.errors import BrokerError
from amqtt.events import BrokerEvents
from transitions import MachineError

if TYPE_CHECKING:
    # amqtt is annotated but ships no ``py.typed`` marker, so a type checker takes its names as
    # untyped (and strict mode refuses to subclass them). These declare what this module uses of the
    # classes it extends and of a session, with amqtt 0.12's own signatures; at run time the real
    # classes stand here.
    class _SessionState(Protocol):
        state: str
        def is_connected(self) -> bool: ...
        def connect(self) -> None: ...

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
        _sessions: dict[str, tuple[Session, Any]]
        listeners_config: dict[str, Any]
        plugins_manager: Any
        async def add_subscription(self, subscription: tuple[str, int], session: Session) -> int: ...
        def _del_subscription(self, a_filter: str, session: Session) -> int: ...
        async def _del_all_subscriptions(self, session: Session) -> None: ...
        async def _authenticate(self, session: Session, listener: Any) -> bool: ...
        async def _publish_session_retained_messages(self, session: Session) -> None: ...
        async def _client_message_loop(self, client_session: Session, handler: Any) -> None: ...
        async def _handle_subscription(self, client_session: Session, handler: Any, waiter: Any) -> None: ...
        async def _handle_unsubscription(self, client_session: Session, handler: Any, waiter: Any) -> None: ...
        async def _publish_retained_messages_for_subscription(self, subscription: tuple[str, int],
                                                              session: Session) -> None: ...
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
from mqttkit.packets import pack_publish
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
        packet = bytearray()
        to = broker.topics.client(self.client)
        pack_publish(packet, to, encode(reply))
        broker.route(to, bytes(packet), 0)


#: Topics whose "public?" answer, and whose wildcard filters, the broker remembers (then it starts again).
PUBLIC_CACHE = WILD_CACHE = 1 << 16
#: How far behind a subscriber's socket may fall (bytes written and not yet sent) before the fast
#: path drops QoS 0 messages to it rather than buffer more: MQTT lets a broker drop QoS 0, and a
#: reader this far behind is gone or stuck (Mosquitto likewise caps what it queues per client).
MAX_BEHIND = 4 << 20
#: Bytes asked of a connection's socket a read, and packets waiting for amqtt before the reading
#: of that connection waits for it (its socket then pushes back on the sender).
READ_CHUNK = 1 << 16
AMQTT_QUEUE = 64
PINGREQ_FIRST, PINGRESP_PACKET = 0xC0, b"\xd0\x00"
SUBSCRIBE_TYPE, UNSUBSCRIBE_TYPE = 8, 10
#: How long a PUBLISH waits for the (UN)SUBSCRIBEs its connection sent before it to take effect.
SETTLE_S = 2.0


class _Out(StreamWriterAdapter):  # type: ignore[misc]  # amqtt is untyped (see the TYPE_CHECKING block)
    """A connection's writer, as amqtt writes to it, with what the fast path needs to write to it
    directly: its transport, whether it is the relay, and the one private topic it may read."""

    def __init__(self, writer: asyncio.StreamWriter, relay: bool, own: str | None) -> None:
        super().__init__(writer)
        self.transport = writer.transport
        self.relay = relay
        self.own = own  # PREFIX/c/CLIENT, or None (an id that is not a client's)
        self.dropped = 0  # QoS 0 messages dropped for a socket MAX_BEHIND behind
        self.fast: _Fast | None = None
        self.queued: list[bytes] = []  # packets routed to it while the broker is corked

    def send(self, packet: bytes) -> None:
        """Write one whole packet (amqtt's writes are whole packets too: never one inside another)."""
        transport = self.transport
        if self.is_closed or transport.is_closing():
            return
        if transport.get_write_buffer_size() > MAX_BEHIND:
            if not self.dropped:
                log.warning("a subscriber is %d bytes behind: QoS 0 messages to it are dropped",
                            transport.get_write_buffer_size())
            self.dropped += 1
            return
        transport.write(packet)


class _Fast:
    """The fast path of one connection: its QoS 0 and QoS 1 PUBLISHes (not retained, on a topic
    amqtt would accept) and its PINGREQs are served here, as soon as the pump has read them, without
    amqtt's per-packet machinery (a task, a decoded packet object, its plugin calls, a queue and a
    task per recipient). A QoS 1 PUBLISH is acknowledged here; each subscriber gets the message at
    the lower of the two QoS (``_GuardedBroker.route``). Everything else -- CONNECT, SUBSCRIBE,
    retained or QoS 2 messages, malformed ones -- goes on to amqtt, and so does
    everything until amqtt has accepted the connection (its session connected on this writer)."""

    def __init__(self, broker: _GuardedBroker, out: _Out, client: str) -> None:
        self.broker = broker
        self.out = out
        self.client = client
        self.ready = False
        #: SUBSCRIBEs and UNSUBSCRIBEs of this connection handed to amqtt and not yet in effect: a
        #: PUBLISH read after them waits (``settled``), so that a client that subscribes and then
        #: publishes -- a request whose answer comes on the topic it just subscribed to -- is
        #: served in its own order, as amqtt alone would.
        self.hold = 0
        self._settled = asyncio.Event()

    def held(self) -> None:
        self.hold += 1

    def settle(self) -> None:
        if self.hold:
            self.hold -= 1
        self._settled.set()

    async def settled(self) -> None:
        """Until amqtt has handled every (UN)SUBSCRIBE handed to it, or ``SETTLE_S`` (a packet amqtt
        could not read is never handled: its sender then waits that long, once)."""
        deadline = time.monotonic() + SETTLE_S
        while self.hold:
            self._settled.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                self.hold = 0
                return
            try:
                await asyncio.wait_for(self._settled.wait(), left)
            except TimeoutError:
                pass

    def _check_ready(self) -> bool:
        live = self.broker.sessions.get(self.client)
        if live is None:
            return False
        session, handler = live
        if getattr(handler, "writer", None) is not self.out or session.transitions.state != "connected":
            return False
        self.ready = True
        return True

    def __call__(self, first: int, body: bytes, packet: bytes) -> bool:
        """Served here (True), or for amqtt (False)? ``packet``: the whole packet (``first``, its
        length and ``body``)."""
        if not self.ready and not self._check_ready():
            return False
        kind = first >> 4
        if kind == PUBLISH_TYPE:
            qos = (first >> 1) & 3
            if qos >= 2 or first & 0x01:  # QoS 2 (3: malformed) and retained messages: amqtt's
                return False
            n = len(body)
            if n < 2:
                return False
            tl = (body[0] << 8) | body[1]
            if n < 2 + tl + (2 if qos else 0):
                return False
            try:
                topic = body[2:2 + tl].decode()
            except UnicodeDecodeError:
                return False
            if not topic or topic[0] == "$" or "+" in topic or "#" in topic:
                return False  # amqtt ends such a connection: let it
            if qos:
                self.out.send(b"\x40\x02" + body[2 + tl:4 + tl])  # PUBACK
                packet = _publish0(body[:2 + tl], body[4 + tl:])
            elif first != 0x30:  # a DUP flag on QoS 0 (meaningless): send it on without
                packet = _publish0(body[:2 + tl], body[2 + tl:])
            self.broker.route(topic, packet, qos)
            return True
        if first == PINGREQ_FIRST and not body:
            self.out.send(PINGRESP_PACKET)
            return True
        return False


def _publish0(topic_field: bytes, payload: bytes) -> bytes:
    """A QoS 0 PUBLISH of ``payload`` on the topic field (its length and bytes) as read."""
    n = len(topic_field) + len(payload)
    head = bytearray(b"\x30")
    while True:  # the remaining length: 7 bits a byte, least significant first
        byte, n = n & 0x7F, n >> 7
        head.append(byte | 0x80 if n else byte)
        if not n:
            break
    return bytes(head) + topic_field + payload


def _payload0(packet: bytes) -> bytes:
    """The payload of a QoS 0 PUBLISH packet (for the rare deliveries amqtt's path makes)."""
    j = 1
    while packet[j] & 0x80:
        j += 1
    j += 1
    tl = (packet[j] << 8) | packet[j + 1]
    return packet[j + 2 + tl:]


class _Pump:
    """Reads one connection's socket in chunks, in a task of its own, and splits it into whole
    packets: a packet whose announced length is over the limit ends the connection before any of its
    body is read; the gate (if any: not for the relay) may drop or delay a packet; the fast path (if
    any) serves what it can; the rest waits, in order, for amqtt's reader (``next``). Its own task:
    amqtt reads under a keep-alive timeout that cancels the read in progress, which must never cut
    a packet in two (here it can only cancel the wait for the next whole packet)."""

    def __init__(self, reader: asyncio.StreamReader, limit: int, gate: _Gate | None, fast: _Fast | None) -> None:
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
        # What one chunk routes goes out as one write per subscriber (``_GuardedBroker.cork``): a
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


class _LimitedReader(ReaderAdapter):
    """The client's byte stream as amqtt reads it: first the CONNECT we already read, then whole
    packets from the connection's ``_Pump`` (which enforces the size limit and the gate, and serves
    the fast path)."""

    def __init__(self, reader: asyncio.StreamReader, limit: int, replay: bytes, gate: _Gate | None = None,
                 fast: _Fast | None = None) -> None:
        self._reader = reader
        self.pump = _Pump(reader, limit, gate, fast)
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
        #: The wildcard filters that take a topic, by topic (a match's topics repeat for all its
        #: messages); forgotten whenever the set of wildcard filters changes.
        self._wild_of: dict[str, tuple[str, ...]] = {}

    def __setitem__(self, key: str, value: list[tuple[Session, int]]) -> None:
        super().__setitem__(key, value)
        if ("+" in key or "#" in key) and key not in self.wildcards:
            self.wildcards[key] = None
            self._wild_of.clear()

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        if self.wildcards.pop(key, 0) is None:
            self._wild_of.clear()

    def clear(self) -> None:
        super().clear()
        self.wildcards.clear()
        self._wild_of.clear()

    def pop(self, key: str, *default: list[tuple[Session, int]]) -> list[tuple[Session, int]]:  # type: ignore[override]
        if self.wildcards.pop(key, 0) is None:
            self._wild_of.clear()
        return super().pop(key, *default)

    def items(self) -> list[tuple[str, list[tuple[Session, int]]]]:  # type: ignore[override]
        return [(k, list(v)) for k, v in super().items()]

    def __iter__(self) -> Iterator[str]:
        return iter(list(super().keys()))

    def __repr__(self) -> str:
        # amqtt logs repr(self._subscriptions) at debug level after every SUBSCRIBE, building the
        # string whatever the level: every session of the broker each time (quadratic over set-up).
        return f"<{len(self)} subscription filters>"

    def matching(self, topic: str, matches: Callable[[str, str], bool]) -> list[tuple[Session, int]]:
        """Every (subscriber, qos) whose filter takes ``topic`` (``matches``: amqtt's own filter
        test), once per matching filter, as amqtt delivers; a copy, safe across awaits."""
        found = list(self.get(topic, ()))
        wild = self._wild_of.get(topic)
        if wild is None:
            if len(self._wild_of) >= WILD_CACHE:
                self._wild_of.clear()
            wild = self._wild_of[topic] = tuple(key for key in self.wildcards if matches(topic, key))
        for key in wild:
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
        self.routed = 0  # publishes the fast path delivered
        self._secret = secret
        self._packet_limit = packet_limit
        #: Whether a topic is one everybody may read (``Access.may_read`` without the private topic),
        #: by topic: a match's topics repeat for all its messages.
        self._public: dict[str, bool] = {}
        #: Each client's subscription filters, by client id: amqtt finds them by trying every filter
        #: in the broker, at every CONNECT and every disconnect -- time that grew with the number of
        #: clients at each (quadratic over a broker's set-up).
        self._filters_of: dict[str, set[str]] = {}
        self._side_tasks: set[asyncio.Task[object]] = set()
        self._corked = False
        self._dirty: list[_Out] = []  # writers with packets queued while corked

    def cork(self) -> None:
        """Until ``flush``, packets the fast path routes are queued per subscriber, not written."""
        self._corked = True

    def flush(self) -> None:
        """Write what was queued since ``cork``: one write per subscriber, in the order routed."""
        self._corked = False
        dirty = self._dirty
        if dirty:
            self._dirty = []
            for out in dirty:
                queued, out.queued = out.queued, []
                out.send(queued[0] if len(queued) == 1 else b"".join(queued))

    def route(self, topic: str, packet: bytes, qos: int) -> None:
        """The fast path's delivery: ``packet`` (a QoS 0 PUBLISH of ``topic``, published at ``qos``)
        to every subscriber the access rules let read it, at the lower of the two QoS: written
        straight to a QoS 0 subscriber's socket, the same bytes for each; a QoS 1 delivery, or one
        kept for an offline persistent session, goes through amqtt's own handler."""
        self.routed += 1
        found = self._subscriptions
        assert isinstance(found, _SubscriptionTable)
        subs = found.matching(topic, self._matches)
        if not subs:
            return
        public = self._public.get(topic)
        if public is None:
            if len(self._public) >= PUBLIC_CACHE:
                self._public.clear()
            public = self._public[topic] = self.access.may_read("", topic)
        sessions = self._sessions
        for target, sub_qos in subs:
            live = sessions.get(target.client_id or "")
            out = getattr(live[1], "writer", None) if live is not None else None
            if isinstance(out, _Out) and live is not None and live[0] is target:
                if not (out.relay or public or topic == out.own):
                    continue
                if (not qos or not sub_qos) and target.transitions.state == "connected":
                    if not self._corked:
                        out.send(packet)
                    else:
                        if not out.queued:
                            self._dirty.append(out)
                        out.queued.append(packet)
                    continue
            elif not (public or self._may_receive(target, topic)):
                continue
            self._slow_delivery(target, topic, _payload0(packet), min(qos, sub_qos))

    def _may_receive(self, target: Session, topic: str) -> bool:
        return is_relay_login(target.username, target.password, self._secret) \
            or self.access.may_read(target.client_id or "", topic)

    def _slow_delivery(self, target: Session, topic: str, data: bytes, qos: int) -> None:
        """One delivery the way amqtt's broadcast makes it (a QoS 1 one, or a message kept for a
        persistent session that is offline)."""
        if target.transitions.state != "connected":
            if not target.clean_session and qos in (1, 2) and not target.is_anonymous:
                self._side(self._retain_broadcast_message({"session": None, "topic": topic, "data": data}, qos,
                                                          target))
            return
        handler = self._get_handler(target)
        if handler is not None:
            self._side(handler.mqtt_publish(topic, data, qos, retain=False))

    def _side(self, work: Coroutine[Any, Any, object]) -> None:
        task: asyncio.Task[object] = asyncio.ensure_future(work)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_done)

    def _side_done(self, task: asyncio.Task[object]) -> None:
        self._side_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.info("a delivery failed: %r", task.exception())

    async def _handle_subscription(self, client_session: Session, handler: Any, waiter: Any) -> None:
        try:
            await super()._handle_subscription(client_session, handler, waiter)
        finally:
            _settle(handler)

    async def _handle_unsubscription(self, client_session: Session, handler: Any, waiter: Any) -> None:
        try:
            await super()._handle_unsubscription(client_session, handler, waiter)
        finally:
            _settle(handler)

    async def add_subscription(self, subscription: tuple[str, int], session: Session) -> int:
        code = await super().add_subscription(subscription, session)
        if code != 0x80 and session.client_id:
            self._filters_of.setdefault(session.client_id, set()).add(subscription[0])
        return code

    def _del_subscription(self, a_filter: str, session: Session) -> int:
        deleted = super()._del_subscription(a_filter, session)
        if deleted:
            mine = self._filters_of.get(session.client_id or "")
            if mine is not None:
                mine.discard(a_filter)
                if not mine:
                    del self._filters_of[session.client_id or ""]
            if not self._subscriptions.get(a_filter, True):
                del self._subscriptions[a_filter]  # amqtt leaves a filter nobody holds after an UNSUBSCRIBE
        return deleted

    async def _del_all_subscriptions(self, session: Session) -> None:
        """amqtt's, over this session's own filters rather than every filter in the broker."""
        for a_filter in list(self._filters_of.get(session.client_id or "", ())):
            self._del_subscription(a_filter, session)

    async def stream_connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                               listener_name: str) -> None:
        out: StreamWriterAdapter = StreamWriterAdapter(writer)
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
        out = _Out(writer, relay, self.topics.client(client) if valid_id(client) else None)
        gate = None if relay else _Gate(self, client, writer)
        out.fast = _Fast(self, out, client)
        reader_ = _LimitedReader(reader, limit, first, gate, out.fast)
        try:
            await self.external_connected(reader_, out, listener_name)
        finally:
            reader_.pump.stop()

    async def _handle_client_session(self, reader: ReaderAdapter, writer: StreamWriterAdapter, client_session: Session,
                                     handler: Any, server: Any, listener_name: str) -> None:
        """amqtt's (0.12), except that the retained messages of a returning session's subscriptions
        are looked up by its own filters (``_filters_of``), not by trying every filter in the broker
        at every CONNECT."""
        authenticated = await self._authenticate(client_session, self.listeners_config[listener_name])
        if client_session.client_id is None:
            raise BrokerError("Client ID was not correctly created/set.")
        while True:
            try:
                client_session.transitions.connect()
                break
            except (MachineError, ValueError):
                if client_session.transitions.is_connected():
                    log.info("client %s is already connected: take-over", client_session.client_id)
                    old_session = self._sessions[client_session.client_id]
                    await old_session[1].handle_connection_closed()
                    await old_session[1].stop()
                    break
                await asyncio.sleep(1)  # as amqtt: reconnecting too quickly, make it wait
        handler.attach(client_session, reader, writer)
        self._sessions[client_session.client_id] = (client_session, handler)
        await handler.mqtt_connack_authorize(authenticated)
        if not authenticated:
            await writer.close()
            return
        await self.plugins_manager.fire_event(BrokerEvents.CLIENT_CONNECTED, client_id=client_session.client_id,
                                              client_session=client_session)
        await handler.start()
        await self._publish_session_retained_messages(client_session)
        for a_filter in list(self._filters_of.get(client_session.client_id, ())):
            await self._publish_retained_messages_for_subscription((a_filter, 0), client_session)
        await self._client_message_loop(client_session, handler)

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


def _settle(handler: Any) -> None:
    """A (UN)SUBSCRIBE of the handler's connection is in effect: its fast path may go on."""
    out = getattr(handler, "writer", None)
    if isinstance(out, _Out) and out.fast is not None:
        out.fast.settle()


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
