"""The relay inside the embedded broker's process: no socket between them, no packet parsed twice.

How this works
--------------
Over a socket, every play crosses the broker twice: player -> broker -> relay -> broker -> players,
each hop a write, a read and a parse on each side. When the relay and the embedded broker share a
process (``blink serve`` by default, and every server a command starts for itself), the relay's
``Connector`` is ``InProcess``: the relay holds a ``LocalSession`` instead of an MQTT connection.

- In: the broker's routing (``relay.embedded.route.RoutingBroker.route``, the path every player's
  QoS 0/1 PUBLISH takes, and amqtt's own delivery of the rest -- players' last wills) offers each
  message to the session first (``takes``: one of the relay's subscriptions, answered once per
  topic). What one read of a player's socket routes to the relay is collected and handed to the
  relay as one list when that read's writes are out (``hand``), just as a socket read gives the
  relay one list: the relay stamps them once and its stepper judges them on the next loop turn.
- Out: the relay packs a step's PUBLISHes into one buffer as it would for a socket, and the session
  hands that buffer to the broker (``RoutingBroker.relay_publish``), which routes each packet as it
  is -- the same bytes written to every subscriber, one write per subscriber for the whole step. A
  retained message is kept for newcomers (an empty one clears it); QoS 1 is taken as acknowledged
  at once (nothing is in flight between the two).

The relay's last will: a relay that stops without leaving (its task cancelled, its run failing)
has its will published by the session, as a broker would when a connection drops; a clean stop
(``disconnect``) drops it. A single relay stands here; a relay of a cluster stays on its sockets.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from mqttkit import BrokerAddress
from mqttkit.connection import MqttError, OnDropped, OnMessages, OnOversize
from mqttkit.packets import Message, pack_publish
from relay.embedded.route import Inlet
from relay.link import Login, OnClient

__all__ = ["InProcess", "LocalLink", "LocalSession", "topic_matches"]

#: Topics whose answer to "one of the relay's subscriptions?" is remembered (then it starts again).
TAKES_CACHE = 1 << 16


class Routes(Protocol):
    """What the session needs of the broker it stands in (``relay.embedded.route.RoutingBroker``)."""

    inlet: Inlet | None

    def relay_publish(self, data: bytes | bytearray) -> None: ...


def topic_matches(topic: str, topic_filter: str) -> bool:
    """Whether an MQTT topic filter (``+`` a level, ``#`` the rest) takes ``topic``."""
    if topic_filter == topic:
        return True
    levels = topic.split("/")
    parts = topic_filter.split("/")
    for k, part in enumerate(parts):
        if part == "#":
            return not (k == 0 and topic.startswith("$"))
        if k >= len(levels):
            return False
        if part != "+" and part != levels[k]:
            return False
    return len(levels) == len(parts)


class LocalSession:
    """The relay's connection when it stands inside the broker (see the module header)."""

    def __init__(self, broker: Routes, on_messages: OnMessages, will: tuple[str, bytes, bool]) -> None:
        self.broker = broker
        self.on_messages = on_messages
        self.will: tuple[str, bytes, bool] | None = will
        self.filters: list[str] = []
        self._takes: dict[str, bool] = {}
        self._taken: list[Message] = []
        self.pending = False
        self._closed: asyncio.Future[MqttError] = asyncio.get_running_loop().create_future()
        self._drop_under: str | None = None
        self._keep_under: tuple[str, ...] = ()
        self.filtered = 0
        self._drop = ""
        self._drop_until = 0
        self._on_dropped: OnDropped | None = None
        self._dropped = 0  # messages on ``_dropped_topic`` dropped since the last ``hand``
        self._dropped_topic = ""

    # ------------------------------------------------------------------ what the relay asks (relay.link.Connection)

    @property
    def connected(self) -> bool:
        return not self._closed.done()

    def write(self, data: bytes | bytearray) -> None:
        if self._closed.done():
            raise MqttError("not connected")
        self.broker.relay_publish(data)

    def publish(self, topic: str, payload: bytes | bytearray, qos: int = 0, retain: bool = False,
                wait: bool = False) -> asyncio.Future[bytes] | None:
        if qos not in (0, 1):
            raise ValueError("this client publishes at QoS 0 or 1")
        buf = bytearray()
        pack_publish(buf, topic, payload, retain, qos=qos, pid=1 if qos else 0)
        self.write(buf)
        if not (qos and wait):
            return None
        done: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        done.set_result(b"")  # nothing is in flight between the relay and its own broker
        return done

    async def subscribe(self, subscriptions: Iterable[tuple[str, int]], timeout: float = 0.0) -> list[int]:
        subs = list(subscriptions)
        if self._closed.done():
            raise MqttError("not connected")
        for topic_filter, _ in subs:
            if topic_filter not in self.filters:
                self.filters.append(topic_filter)
        self._takes.clear()
        return [min(qos, 1) for _, qos in subs]

    def set_topic_filter(self, drop_under: bytes | None, keep_under: tuple[bytes, ...] = ()) -> None:
        self._drop_under = drop_under.decode() if drop_under is not None else None
        self._keep_under = tuple(k.decode() for k in keep_under)

    def drop_until(self, topic: bytes, until_ns: int, on_dropped: OnDropped) -> None:
        self._drop, self._drop_until, self._on_dropped = topic.decode("utf-8", "replace"), until_ns, on_dropped

    async def disconnect(self, timeout: float = 2.0) -> None:
        """Leave cleanly: the last will is dropped."""
        self.will = None
        self.close(MqttError("disconnected"))

    # ------------------------------------------------------------------ what the broker asks (route.Inlet)

    def takes(self, topic: str) -> bool:
        known = self._takes.get(topic)
        if known is None:
            if len(self._takes) >= TAKES_CACHE:
                self._takes.clear()
            known = self._takes[topic] = any(topic_matches(topic, f) for f in self.filters)
        return known

    def take(self, topic: str, payload: bytes, qos: int) -> None:
        if self._drop_under is not None and topic.startswith(self._drop_under) \
                and not topic.startswith(self._keep_under):
            self.filtered += 1
            return
        if self._drop and topic == self._drop:
            if time.monotonic_ns() < self._drop_until:
                self._dropped += 1
                self._dropped_topic = topic
                return
            self._drop = ""
        self._taken.append(Message(topic, payload, qos, 0, False, False))
        self.pending = True

    def hand(self) -> None:
        if self._dropped and self._on_dropped is not None:
            n, self._dropped = self._dropped, 0
            self._on_dropped(self._dropped_topic.encode(), n)
        taken, self._taken = self._taken, []
        self.pending = False
        if taken and not self._closed.done():
            self.on_messages(taken)

    # ------------------------------------------------------------------ its end

    def close(self, reason: MqttError) -> None:
        """End the session; a will still held is published (the relay did not leave cleanly)."""
        if self._closed.done():
            return
        will, self.will = self.will, None
        if will is not None:
            topic, payload, retain = will
            buf = bytearray()
            pack_publish(buf, topic, payload, retain)
            try:
                self.broker.relay_publish(buf)
            except Exception:  # noqa: BLE001 - a broker shutting down: nobody left to tell
                pass
        self._closed.set_result(reason)

    async def wait_closed(self) -> MqttError:
        return await asyncio.shield(self._closed)


class LocalLink:
    """The relay's link to the broker of its own process (``relay.link.Link``): one session, up at
    once, ending when the relay leaves or the broker stops."""

    def __init__(self, broker: Callable[[], Routes], address: BrokerAddress, login: Login, on_messages: OnMessages,
                 on_client: OnClient, on_up: Callable[[bool], Awaitable[None]]) -> None:
        self.routes = broker
        self._address = address
        self.login = login
        self.on_messages = on_messages
        self.on_client, self.on_up = on_client, on_up
        self.closing = False
        self.session: LocalSession | None = None

    @property
    def address(self) -> BrokerAddress:
        return self._address

    async def run(self) -> None:
        login = self.login
        will = login.will
        broker = self.routes()
        if broker.inlet is not None:
            raise MqttError("another relay already stands in this broker")
        session = self.session = LocalSession(broker, self.on_messages, (will.topic, will.payload, will.retain))
        broker.inlet = session
        try:
            self.on_client(session)
            for group in login.groups:
                await session.subscribe(group)
            if login.status:
                session.publish(login.status, login.online, qos=0, retain=True)
            await self.on_up(True)
            reason = await session.wait_closed()
            if not self.closing:
                raise reason
        finally:
            self.on_client(None)
            session.close(MqttError("the relay stopped"))
            if broker.inlet is session:
                broker.inlet = None


class InProcess:
    """The relay's ``relay.link.Connector`` to the embedded broker of its own process."""

    several = False
    gated = True  # every player's connection passes the broker's rate gate (relay.embedded.gate) first

    def __init__(self, broker: Callable[[], Routes], address: BrokerAddress) -> None:
        self.broker = broker  # the started broker (asked when the relay connects)
        self.address = address

    def link(self, login: Login, on_messages: OnMessages, on_oversize: OnOversize, on_client: OnClient,
             on_up: Callable[[bool], Awaitable[None]]) -> LocalLink:
        # (``on_oversize`` is never called: the broker ends a connection whose packet is over its limit)
        return LocalLink(self.broker, self.address, login, on_messages, on_client, on_up)
