"""The relay's one MQTT connection: connect, subscribe, keep it up, move to the next node when it goes.

How this works
--------------
``BrokerLink.run`` holds a ``mqttkit.connection`` (a bare ``asyncio.Protocol`` client: paho's reader
under aiomqtt cost about 0.6 ms a message), whose parser hands every read's PUBLISHes to
``on_messages`` as one list. The connection goes to the relay (``on_client``) as soon as its CONNECT
is answered, since a request can come in the SUBACK's read; then the subscriptions, the retained
online status, and ``on_up(first)``. With several broker nodes, an unanswered CONNECT or a lost
connection moves to the next node at once (each once), then backs off 0.1 s doubling to 5 s; only
the very first connection may fail for good (a wrong URL or password). A subscription refused in its
SUBACK (NATS, without a JetStream consumer yet) is asked again in the background. A relay of a
cluster (``first_wait_s``) waits for nodes that do not answer yet at its very first connection,
saying so once, instead of failing: a cluster just started may take a while.

The relay asks only a ``Connector`` for its link and only a ``Connection`` of what it holds, so the
same runtime stands on a broker over a socket (``Remote``: ``BrokerLink`` and mqttkit's
``MqttConnection``) or inside the embedded broker's own process (``relay.embedded.inprocess``: no
socket, no packet parsed twice -- the broker hands the relay its plays and writes the relay's
outputs to the players' sockets).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol

from mqttkit import NODELAY, RELAY_USER, BrokerAddress
from mqttkit.connection import (ConnectRefused, MqttConnection, MqttError, NoConnack, OnDropped, OnMessages,
                                OnOversize, SubscribeRefused, Will)
from mqttkit.connection import connect as mqtt_connect

log = logging.getLogger("blink.relay")

RECONNECT_FIRST_S = 0.1
RECONNECT_MAX_S = 5.0
SUBSCRIBE_TIMEOUT_S = 6.0  # longer than NATS's own 4 s wait: a refusal is heard, not taken for death


class Connection(Protocol):
    """What the relay asks of the connection it holds (see the module header)."""

    @property
    def connected(self) -> bool: ...

    def write(self, data: bytes | bytearray) -> None:
        """Send packed PUBLISH packets (``mqttkit.packets.pack_publish``) as one; MqttError if down."""

    def publish(self, topic: str, payload: bytes | bytearray, qos: int = 0, retain: bool = False,
                wait: bool = False) -> asyncio.Future[bytes] | None:
        """One message; at QoS 1 with ``wait``, a future the broker's acknowledgement resolves."""

    async def subscribe(self, subscriptions: Iterable[tuple[str, int]], timeout: float = ...) -> list[int]: ...

    def set_topic_filter(self, drop_under: bytes | None, keep_under: tuple[bytes, ...] = ()) -> None:
        """Publishes whose topic starts with ``drop_under`` and none of ``keep_under`` are not delivered."""

    def drop_until(self, topic: bytes, until_ns: int, on_dropped: OnDropped) -> None:
        """Publishes on exactly ``topic`` are not delivered until then, only counted (``on_dropped``)."""

    async def disconnect(self, timeout: float = 2.0) -> None:
        """Leave cleanly: the last will is not published."""


#: Called with the connection when it is up (and may be written to), with None when it is gone.
OnClient = Callable[[Connection | None], None]


class Link(Protocol):
    """Keeps the relay's connection up (``run``); ``closing`` set: the relay is stopping, no new
    connection is made; ``address``: where it is connected (for the operator)."""

    closing: bool

    @property
    def address(self) -> BrokerAddress: ...

    async def run(self) -> None: ...


class Connector(Protocol):
    """Where the relay's connection goes: it makes the link that keeps it."""

    @property
    def several(self) -> bool:
        """Several broker nodes to move between (each CONNECT then waits less)."""

    @property
    def gated(self) -> bool:
        """Does the broker itself hold every client to the core's rates before the relay hears it
        (the embedded broker's gate)? Then the relay's own intake has nothing left to stop."""

    def link(self, login: Login, on_messages: OnMessages, on_oversize: OnOversize, on_client: OnClient,
             on_up: Callable[[bool], Awaitable[None]]) -> Link: ...


@dataclasses.dataclass(frozen=True)
class Login:
    """How the relay connects: ``groups`` one SUBSCRIBE each, ``status`` published ``online`` at
    each connection ("": none), ``topic_filter`` set before subscribing."""

    client_id: str
    will: Will
    groups: Sequence[Sequence[tuple[str, int]]]
    status: str
    online: bytes
    max_packet: int
    timeout: float
    topic_filter: Callable[[], tuple[bytes, tuple[bytes, ...]]] | None = None
    #: The first connection: nodes that do not answer yet are asked again for this long (a cluster
    #: just started: nats-server sets up its MQTT streams at the first MQTT connection), said once.
    first_wait_s: float = 0.0
    say: Callable[[str], None] | None = None


class Remote:
    """A broker over a socket, at one address or several nodes (``BrokerLink``)."""

    def __init__(self, addresses: Sequence[BrokerAddress]) -> None:
        if not addresses:
            raise ValueError("a relay needs a broker address")
        self.addresses = list(addresses)

    @property
    def several(self) -> bool:
        return len(self.addresses) > 1

    gated = False  # Mosquitto, NATS or any broker: none limits a client's rate

    def link(self, login: Login, on_messages: OnMessages, on_oversize: OnOversize, on_client: OnClient,
             on_up: Callable[[bool], Awaitable[None]]) -> BrokerLink:
        return BrokerLink(self.addresses, login, on_messages, on_oversize, on_client, on_up)


class BrokerLink:
    """The connection loop (see the module header)."""

    def __init__(self, addresses: Sequence[BrokerAddress], login: Login, on_messages: OnMessages,
                 on_oversize: OnOversize, on_client: OnClient,
                 on_up: Callable[[bool], Awaitable[None]]) -> None:
        self.addresses = list(addresses)
        self._address = self.addresses[0]
        self.login = login
        self.on_messages, self.on_oversize = on_messages, on_oversize
        self.on_client, self.on_up = on_client, on_up
        self.client: MqttConnection | None = None
        self.closing = False
        self._chores: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> BrokerAddress:
        return self._address

    def _hand(self, conn: MqttConnection | None) -> None:
        self.client = conn
        self.on_client(conn)

    async def run(self) -> None:
        login = self.login
        delay = RECONNECT_FIRST_S
        first = True
        node = attempts = 0
        lost_at: float | None = None
        began = time.monotonic()
        told = False
        while True:
            self._address = address = self.addresses[node % len(self.addresses)]
            attempts += 1
            conn: MqttConnection | None = None
            try:
                conn = await mqtt_connect(address.host, address.port, client_id=login.client_id,
                                          on_messages=self.on_messages, on_oversize=self.on_oversize,
                                          username=address.username or RELAY_USER, password=address.password,
                                          will=login.will, keepalive=30, max_packet=login.max_packet,
                                          socket_options=NODELAY, timeout=login.timeout, tls=address.ssl_context())
                if login.topic_filter is not None:  # before any SUBSCRIBE: from the first read on
                    conn.set_topic_filter(*login.topic_filter())
                self._hand(conn)
                try:
                    for group in login.groups:
                        await self._subscribe(conn, list(group))
                    if login.status:  # QoS 0: a retained PUBACK waits on JetStream on NATS
                        conn.publish(login.status, login.online, qos=0, retain=True)
                    if lost_at is not None:
                        log.warning("reconnected to the broker %s %.2f s after losing it (%d attempt(s))",
                                    address.url, time.monotonic() - lost_at, attempts)
                    lost_at = None
                    attempts = 0
                    await self.on_up(first)
                    first = False
                    delay = RECONNECT_FIRST_S
                    raise await conn.wait_closed()  # nothing to do here until the connection ends
                finally:
                    if self.client is conn:
                        self._hand(None)
            except MqttError as exc:
                if self.client is not None:
                    self._hand(None)
                if self.closing:
                    return  # the last words were said: no new connection
                node += 1  # the next node (it comes round again last)
                if first and node % len(self.addresses) == 0:
                    if not _not_ready(exc) or time.monotonic() - began + delay > login.first_wait_s:
                        if login.first_wait_s and _not_ready(exc):
                            raise MqttError(f"{exc} (still after {login.first_wait_s:.0f} s)") from exc
                        raise
                    if not told and login.say is not None:
                        login.say(f"waiting for the MQTT broker at {address.url} to answer ({exc}); "
                                  f"giving up after {login.first_wait_s:.0f} s")
                        told = True
                    await asyncio.sleep(delay)
                    delay = min(RECONNECT_MAX_S, delay * 2)
                    continue
                if first:
                    continue
                if lost_at is None:
                    lost_at = time.monotonic()
                    delay = RECONNECT_FIRST_S
                    log.warning("lost the broker %s (%s); reconnecting", address.url, exc)
                else:
                    log.warning("broker %s: %s; next try in %.1f s", address.url, exc, delay)
                if attempts >= len(self.addresses):  # each node once without waiting, then backing off
                    await asyncio.sleep(delay)
                    delay = min(RECONNECT_MAX_S, delay * 2)
            finally:
                if conn is not None:
                    conn.abort()  # a no-op once it has ended (a clean stop disconnected it first)

    async def _subscribe(self, client: MqttConnection, topics: list[tuple[str, int]]) -> None:
        try:
            await client.subscribe(topics, timeout=SUBSCRIBE_TIMEOUT_S)
            return
        except SubscribeRefused:
            pass
        log.warning("the broker refused the subscription to %s; asking again", topics)

        async def again() -> None:
            delay = 0.25
            while self.client is client:
                await asyncio.sleep(delay)
                delay = min(RECONNECT_MAX_S, delay * 2)
                try:
                    await client.subscribe(topics, timeout=SUBSCRIBE_TIMEOUT_S)
                except SubscribeRefused:
                    continue
                except MqttError:
                    return  # the connection is gone: the reconnect subscribes again
                log.warning("subscribed to %s at last", topics)
                return
        task = asyncio.create_task(again())
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)


def _not_ready(exc: MqttError) -> bool:
    """A broker that is not up yet (nothing listening, no CONNACK in time, or the connection closed
    before its CONNACK: a nats-server whose JetStream cannot hold its MQTT streams yet), rather than
    one that refused the login: worth asking again while a cluster starts. (A TLS listener given a
    plain CONNECT looks the same; after the wait, its error says to use mqtts://.)"""
    if isinstance(exc, ConnectRefused):
        return False
    return (isinstance(exc, NoConnack) or isinstance(exc.__cause__, ConnectionRefusedError)
            or str(exc).startswith("no answer from the broker"))


__all__ = ["BrokerLink", "Connection", "Connector", "Link", "Login", "OnClient", "RECONNECT_FIRST_S", "RECONNECT_MAX_S",
           "Remote"]
