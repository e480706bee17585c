"""The embedded MQTT broker (amqtt, MQTT 3.1.1) with blink's access rules, a relay secret and a size limit.

How this works
--------------
``blink serve`` without ``--broker`` (and ``blink match`` / ``blink play`` without ``--server``)
run an amqtt broker inside the same asyncio loop as the relay, so one command gives a working
server with nothing else installed. Before starting it we bind the port ourselves once, so that a
taken port is reported as a clear ``PortInUse`` (with a hint) rather than a traceback from deep
inside amqtt.

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
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
from dataclasses import dataclass
from typing import Any, Iterator

from amqtt.adapters import BufferReader, ReaderAdapter, StreamWriterAdapter
from amqtt.broker import Broker
from amqtt.contexts import Action, BaseContext
from amqtt.mqtt.connack import BAD_USERNAME_PASSWORD, IDENTIFIER_REJECTED, NOT_AUTHORIZED, ConnackPacket
from amqtt.mqtt.connect import ConnectPacket
from amqtt.plugins.base import BaseAuthPlugin, BaseTopicPlugin
from amqtt.session import Session

# The helpers below moved to ``mqttkit`` (shared with the client); re-exported for older importers.
from mqttkit import (DEFAULT_MAX_PAYLOAD, NODELAY, RELAY_USER, BadURL, BrokerAddress, PortInUse, check_port,
                     free_port, parse_url, wait_event)
from protocol.codec import MAX_MESSAGE_BYTES
from protocol.topics import DEFAULT_PREFIX, valid_id

__all__ = ["NODELAY", "BadURL", "BrokerAddress", "EmbeddedBroker", "PortInUse", "check_port", "free_port",
           "parse_url", "wait_event", "RELAY_USER", "Access", "BlinkAccessPlugin"]

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


class _LimitedReader(ReaderAdapter):
    """The client's byte stream as amqtt reads it: first the CONNECT we already read, then the
    socket, following MQTT framing so that a packet whose announced length is over the limit ends
    the connection before any of its body is read."""

    def __init__(self, reader: asyncio.StreamReader, limit: int, replay: bytes) -> None:
        self._reader = reader
        self._limit = limit
        self._replay = replay
        self._state = "type"  # type -> length -> body
        self._length = 0
        self._mult = 1
        self._left = 0

    async def read(self, n: int = -1) -> bytes:
        head = b""
        if self._replay:
            head, self._replay = (self._replay, b"") if n < 0 else (self._replay[:n], self._replay[n:])
            if n < 0 or len(head) == n:
                return head
            n -= len(head)
        data = await (self._reader.read(n) if n == -1 else self._reader.readexactly(n))
        self._follow(data)
        return head + data

    def _follow(self, data: bytes) -> None:
        i = 0
        while i < len(data):
            if self._state == "body":
                take = min(self._left, len(data) - i)
                self._left -= take
                i += take
                if self._left == 0:
                    self._state = "type"
                continue
            byte = data[i]
            i += 1
            if self._state == "type":
                self._state, self._length, self._mult = "length", 0, 1
                continue
            self._length += (byte & 0x7F) * self._mult
            self._mult *= 128
            if not byte & 0x80:
                if self._length > self._limit:
                    raise PacketTooLarge(f"packet of {self._length} bytes > {self._limit}")
                self._left = self._length
                self._state = "body" if self._length else "type"

    def feed_eof(self) -> None:
        self._reader.feed_eof()


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
    """amqtt's subscription table, iterated over a copy: its broadcast loop awaits the topic check
    (our access plugin) inside ``for ... in self._subscriptions.items()``, so a client subscribing or
    leaving meanwhile raised "dictionary changed size during iteration" and the message was lost."""

    def items(self) -> list[tuple[str, list[tuple[Session, int]]]]:  # type: ignore[override]
        return [(k, list(v)) for k, v in super().items()]

    def __iter__(self) -> Iterator[str]:  # amqtt also awaits inside ``for topic in self._subscriptions``
        return iter(list(super().keys()))


class _GuardedBroker(Broker):
    """amqtt's broker with a gate in front of every TCP connection (see the module header)."""

    def __init__(self, config: dict[str, Any], access: Access, secret: str, packet_limit: int) -> None:
        super().__init__(config)
        self._subscriptions = _SubscriptionTable()
        self._access = access
        self._secret = secret
        self._packet_limit = packet_limit

    async def stream_connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                               listener_name: str) -> None:
        out = StreamWriterAdapter(writer)
        try:
            first = await asyncio.wait_for(_read_first_packet(reader, self._packet_limit), timeout=10)
            refusal, relay = await self._check_connect(first)
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
        # The relay's own messages (a long match list) may be larger than a client's ever need be.
        limit = RELAY_PACKET_LIMIT if relay else self._packet_limit
        await self.external_connected(_LimitedReader(reader, limit, first), out, listener_name)

    async def _check_connect(self, first: bytes) -> tuple[int | None, bool]:
        """(None, relay?) to let amqtt handle this CONNECT, else (the CONNACK code refusing it, _)."""
        if first[0] >> 4 != CONNECT_TYPE:
            raise ValueError("the first packet is not a CONNECT")
        connect = await ConnectPacket.from_stream(BufferReader(first))
        if connect.payload is None:
            raise ValueError("a CONNECT without payload")
        client = connect.payload.client_id or ""
        relay = is_relay_login(connect.username, connect.password, self._secret)
        if connect.username == RELAY_USER and not relay:
            return BAD_USERNAME_PASSWORD, False
        if not relay and not connect.payload.client_id_is_random and not valid_id(client):
            return IDENTIFIER_REJECTED, False
        live = self.sessions.get(client)
        if live is not None and live[0].transitions.is_connected() and not relay:
            return IDENTIFIER_REJECTED, False  # someone is connected under this id: no take-over without the secret
        if connect.will_flag and not relay:
            if connect.will_retain_flag or not self._access.may_publish(client, connect.will_topic or ""):
                return NOT_AUTHORIZED, False
        return None, relay

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


class EmbeddedBroker:
    """An amqtt broker listening on host:port inside the running event loop, with blink's access
    rules; ``relay_address`` carries this start's relay secret (give it to the relay only)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 1883, prefix: str = DEFAULT_PREFIX,
                 max_payload: int = DEFAULT_MAX_PAYLOAD) -> None:
        self.host = host
        self.port = port
        self.prefix = prefix
        self.max_payload = max_payload
        self._secret = secrets.token_hex(16)
        self._broker: _GuardedBroker | None = None

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
        for name in ("amqtt", "transitions"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        config = {
            "listeners": {"default": {"type": "tcp", "bind": f"{self.host}:{self.port}", "max_connections": 1000}},
            "plugins": {f"{__name__}.BlinkAccessPlugin": {"relay_secret": self._secret, "prefix": self.prefix}},
        }
        broker = _GuardedBroker(config, Access(self.prefix), self._secret, self.max_payload + HEADER_ALLOWANCE)
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
