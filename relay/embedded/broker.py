"""The embedded MQTT broker (amqtt, MQTT 3.1.1) with blink's access rules, a relay secret and a size limit.

How this works
--------------
``blink serve`` without ``--broker`` (and ``blink match`` / ``blink play`` without ``--server``)
run an amqtt broker inside the same asyncio loop as the relay, so one command gives a working
server with nothing else installed. Before starting it we bind the port ourselves once, so that a
taken port is reported as a clear ``PortInUse`` (with a hint) rather than a traceback from deep
inside amqtt.

TLS: ``serve_tls(cert, key, port, host)`` before ``start`` adds a second listener, amqtt's TCP
listener with its own ``ssl.SSLContext`` (``certfile``/``keyfile``), on ``host`` (default: the
plain listener's): the same gate, rules and limits behind it (``stream_connected`` is reached after
the handshake). The plain listener stays, for the relay in the same process and for loopback
players; with the TLS listener on its own address (``0.0.0.0``) and the plain one on loopback, a
host faces the internet with TLS only.

Trust: every start makes a random relay secret; ``relay_address`` (with the secret) is handed to the
in-process relay only, ``address`` (what players get) has no credentials. Who may publish and read
what is ``relay.embedded.access`` (the rules of ``deploy/mosquitto.acl``, enforced by an amqtt plugin).
Three holes amqtt leaves open are closed before amqtt sees a connection (``_GuardedBroker``):
amqtt takes over (or wipes) a live session on any CONNECT under its client id *before* checking
the password, so a CONNECT under an id that is connected right now is refused (only the relay,
with its secret, may take over its own id); a last will is published without any topic check,
so a client's will must be one of its own publish topics and not retained; and amqtt reads any
packet whole, so a packet longer than ``max_payload`` plus a small header allowance ends the
connection as soon as its length is read, before its body is (``relay.embedded.gate``). Only the relay
may leave retained messages.

The parts behind each connection: ``relay.embedded.gate`` reads it in whole packets and applies the
size limit, the pace and the per-client rate gate; ``relay.embedded.route`` routes QoS 0/1 PUBLISHes
straight to their subscribers' sockets and keeps the subscription index (``RoutingBroker``, the
amqtt broker this module's ``_GuardedBroker`` extends); amqtt handles the rest (sessions,
subscriptions, retained messages, wills, QoS 2).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from dataclasses import dataclass

from amqtt.adapters import BufferReader, StreamWriterAdapter
from amqtt.mqtt.connack import BAD_USERNAME_PASSWORD, IDENTIFIER_REJECTED, NOT_AUTHORIZED, ConnackPacket
from amqtt.mqtt.connect import ConnectPacket
from amqtt.errors import BrokerError
from amqtt.events import BrokerEvents
from transitions import MachineError

from mqttkit import DEFAULT_MAX_PAYLOAD, RELAY_USER, BrokerAddress, PortInUse, check_port, check_tls_port
from mqttkit.connection import MqttError
from protocol.codec import MAX_MESSAGE_BYTES
from protocol.topics import DEFAULT_PREFIX, Topics, valid_id
from relay.embedded.amqttapi import Handler, ReaderAdapter, Session
from relay.embedded.access import Access, BlinkAccessPlugin, is_relay_login
from relay.embedded.gate import GATE_BURST_S, GATE_MIN_BURST, ConnectionGate, LimitedReader, PacketTooLarge, read_first_packet
from relay.embedded.inprocess import InProcess
from relay.embedded.route import FastPath, ClientWriter, RoutingBroker
from relay.limits import Intake
from relay.model import RelayConfig

__all__ = ["EmbeddedBroker", "TLSListener"]

log = logging.getLogger("blink.broker")

#: Room for a PUBLISH's fixed header, topic and packet id on top of its payload.
HEADER_ALLOWANCE = 512
CONNECT_TYPE = 1
#: The relay's packets: up to what any client would still decode (protocol.codec.MAX_MESSAGE_BYTES).
RELAY_PACKET_LIMIT = MAX_MESSAGE_BYTES + HEADER_ALLOWANCE


class _GuardedBroker(RoutingBroker):
    """amqtt's broker (with the fast path's routing) behind a gate on every TCP connection and the
    checks at CONNECT (see the module header)."""

    def __init__(self, config: dict[str, object], access: Access, secret: str, packet_limit: int,
                 intake: Intake, topics: Topics) -> None:
        super().__init__(config, access, secret)
        self.intake = intake
        self.topics = topics
        self.limited = 0  # publishes dropped for their sender's rate
        self._packet_limit = packet_limit

    async def stream_connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                               listener_name: str) -> None:
        out: StreamWriterAdapter = StreamWriterAdapter(writer)
        try:
            first = await asyncio.wait_for(read_first_packet(reader, self._packet_limit), timeout=10)
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
        out = ClientWriter(writer, relay, self.topics.client(client) if valid_id(client) else None)
        gate = None if relay else ConnectionGate(self, client, writer)
        out.fast = FastPath(self, out, client)
        reader_ = LimitedReader(reader, limit, first, gate, out.fast)
        try:
            await self.external_connected(reader_, out, listener_name)
        finally:
            reader_.pump.stop()

    async def _handle_client_session(self, reader: ReaderAdapter, writer: StreamWriterAdapter, client_session: Session,
                                     handler: Handler, server: object, listener_name: str) -> None:
        """amqtt's (0.12), except that the retained messages of a returning session's subscriptions
        are looked up by its own filters (``filters_of``), not by trying every filter in the broker
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
        for a_filter in list(self.filters_of.get(client_session.client_id, ())):
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
        relay = is_relay_login(connect.username, connect.password, self.secret)
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

    async def retain_message(self, source_session: Session | None, topic_name: str | None,
                             data: bytes | bytearray | None, qos: int | None = None) -> None:
        if source_session is not None and not is_relay_login(source_session.username, source_session.password,
                                                             self.secret):
            return  # only the relay leaves messages for newcomers (amqtt would hand them to every new client)
        await super().retain_message(source_session, topic_name, data, qos)


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
    host: str


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

    def serve_tls(self, cert: str, key: str, port: int, host: str | None = None) -> None:
        """Also listen with TLS on ``host``:``port`` (host: the plain listener's unless given; see the
        module header); call before ``start``."""
        self.tls = TLSListener(cert, key, port, self.host if host is None else host)

    @property
    def address(self) -> BrokerAddress:
        """Where players connect: no credentials."""
        return BrokerAddress(self.host, self.port)

    @property
    def relay_address(self) -> BrokerAddress:
        """The relay's login: user ``relay`` with this start's secret."""
        return BrokerAddress(self.host, self.port, RELAY_USER, self._secret)

    def connector(self) -> InProcess:
        """The way to this broker for a relay of the same process (``relay.embedded.inprocess``): no
        socket, no login; valid once the broker is started."""
        return InProcess(self._routes, self.relay_address)

    def _routes(self) -> _GuardedBroker:
        if self._broker is None:
            raise MqttError("the embedded broker is not running")
        return self._broker

    async def start(self) -> None:
        check_port(self.host, self.port)
        listeners: dict[str, dict[str, object]] = {
            "default": {"type": "tcp", "bind": f"{self.host}:{self.port}", "max_connections": 1000}}
        if self.tls is not None:
            check_tls_port(self.tls.host, self.tls.port)
            listeners["tls"] = {"type": "tcp", "bind": f"{self.tls.host}:{self.tls.port}", "max_connections": 1000,
                                "ssl": True, "certfile": self.tls.cert, "keyfile": self.tls.key}
        for name in ("amqtt", "transitions"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        config = {
            "listeners": listeners,
            "plugins": {f"{BlinkAccessPlugin.__module__}.BlinkAccessPlugin": {"relay_secret": self._secret,
                                                                            "prefix": self.prefix}},
        }
        broker = _GuardedBroker(config, Access(self.prefix), self._secret, self.max_payload + HEADER_ALLOWANCE,
                                self.intake, Topics(self.prefix))
        try:
            await broker.start()
        except Exception as exc:  # noqa: BLE001 - amqtt wraps bind errors in BrokerError
            if "address already in use" in str(exc).lower():
                which = f"port {self.port} on {self.host}" + (
                    "" if self.tls is None else f" or TLS port {self.tls.port} on {self.tls.host}")
                raise PortInUse(f"{which} is already in use: pick another port") from exc
            raise
        self._broker = broker

    async def stop(self) -> None:
        if self._broker is not None:
            broker, self._broker = self._broker, None
            try:
                await broker.shutdown()
            except Exception:  # noqa: BLE001 - shutting down: nothing left to protect
                pass
