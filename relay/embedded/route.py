"""The embedded broker's fast path: QoS 0/1 PUBLISHes routed by the broker itself, and the
subscription index it (and amqtt's own delivery) finds subscribers with.

How this works
--------------
amqtt handles every packet with a task, a decoded packet object, plugin calls, a queue hop and a
task per recipient, and saturated a core between 100 and 200 human-pace matches. Here, once amqtt has
accepted a connection, each whole packet its reader (``relay.embedded.gate.Pump``) has split off is
offered to the connection's ``FastPath`` first: a QoS 0 or QoS 1 PUBLISH that is not retained, on a
topic amqtt would take, is routed at once (``RoutingBroker.route``): its subscribers found by one
lookup of its topic (plus the few wildcard filters, ``SubscriptionTable``), each checked against the
same access rules (``relay.embedded.access.Access``), and the packet -- built once, the same bytes for
everyone -- written straight to each QoS 0 subscriber's socket (``ClientWriter``). All that one read routes
to a subscriber goes out in one write (``cork``/``flush``); a socket far behind gets QoS 0 dropped
(``MAX_BEHIND``). A QoS 1 PUBLISH is acknowledged here; PINGREQ is answered here. A delivery at QoS
1, or one kept for an offline persistent session, goes through amqtt's own handler. Everything else
(CONNECT, SUBSCRIBE, retained and QoS 2 messages, wills, anything malformed) goes on to amqtt, in
order behind the packets before it; a PUBLISH read after a SUBSCRIBE waits for amqtt to have
handled it (``FastPath.settled``), so a client is served in its own order.

The subscription index: amqtt's bookkeeping tried every filter in the broker at each CONNECT and
each disconnect, tried every filter of every client for every message it delivered, and logged the
whole subscription table at each SUBSCRIBE (time that grew with the number of clients). Here the
table keeps its wildcard filters apart and remembers which of them take a topic, each client's
filters are indexed (``RoutingBroker.filters_of``), retained messages of a filter without wildcards
are found by one lookup, and the table's repr is its size. ``RoutingBroker`` is amqtt's ``Broker``
with these parts; ``relay.embedded.broker`` adds the connection gate and the checks at CONNECT on top of it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Awaitable, Callable, Iterator, Protocol

from amqtt.adapters import StreamWriterAdapter

from relay.embedded.amqttapi import Broadcast, Broker, Handler, RetainedApplicationMessage, Session
from relay.embedded.access import Access, is_relay_login

__all__ = ["FastPath", "ClientWriter", "Inlet", "RoutingBroker", "SubscriptionTable", "MAX_BEHIND", "PUBLISH_TYPE"]

log = logging.getLogger("blink.broker")

#: Topics whose "public?" answer, and whose wildcard filters, the broker remembers (then it starts again).
PUBLIC_CACHE = WILD_CACHE = 1 << 16
#: How far behind a subscriber's socket may fall (bytes written and not yet sent) before the fast
#: path drops QoS 0 messages to it rather than buffer more: MQTT lets a broker drop QoS 0, and a
#: reader this far behind is gone or stuck (Mosquitto likewise caps what it queues per client).
MAX_BEHIND = 4 << 20
#: A PUBLISH packet's type (the high half of its first byte), and a PINGREQ and its answer whole.
PUBLISH_TYPE = 3
PINGREQ_FIRST, PINGRESP_PACKET = 0xC0, b"\xd0\x00"
#: SUBACK's and UNSUBACK's packet types: written, their (UN)SUBSCRIBE is in effect.
ACK_TYPES = (9, 11)
#: How long a PUBLISH waits for the (UN)SUBSCRIBEs its connection sent before it to take effect.
SETTLE_S = 2.0


class Inlet(Protocol):
    """The relay of this very process, as the broker delivers to it (``relay.embedded.inprocess``):
    what one read routes to it is collected (``take``) and handed over as one list (``hand``) once
    the read's writes are out."""

    pending: bool  # something taken and not yet handed over

    def takes(self, topic: str) -> bool:
        """Is ``topic`` one the relay subscribed to?"""

    def take(self, topic: str, payload: bytes, qos: int) -> None: ...

    def hand(self) -> None: ...


class ClientWriter(StreamWriterAdapter):  # type: ignore[misc]  # amqtt is untyped (see relay.embedded.amqttapi)
    """A connection's writer, as amqtt writes to it, with what the fast path needs to write to it
    directly: its transport, whether it is the relay, and the one private topic it may read."""

    def __init__(self, writer: asyncio.StreamWriter, relay: bool, own: str | None) -> None:
        super().__init__(writer)
        self.transport = writer.transport
        self.relay = relay
        self.own = own  # PREFIX/c/CLIENT, or None (an id that is not a client's)
        self.dropped = 0  # QoS 0 messages dropped for a socket MAX_BEHIND behind
        self.fast: FastPath | None = None
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

    def write(self, data: bytes) -> None:
        """amqtt's write of one whole packet. A SUBACK or UNSUBACK going out means its (UN)SUBSCRIBE
        is in effect: a PUBLISH of this connection held behind it may go on now, not after amqtt's
        retained deliveries -- a retained message at QoS 1 waits for the PUBACK, which the pump
        reads only once that PUBLISH has gone on."""
        super().write(data)
        if data and data[0] >> 4 in ACK_TYPES and self.fast is not None:
            self.fast.acknowledged()


class FastPath:
    """The fast path of one connection: its QoS 0 and QoS 1 PUBLISHes (not retained, on a topic
    amqtt would accept) and its PINGREQs are served here, as soon as the pump has read them, without
    amqtt's per-packet machinery (a task, a decoded packet object, its plugin calls, a queue and a
    task per recipient). A QoS 1 PUBLISH is acknowledged here; each subscriber gets the message at
    the lower of the two QoS (``RoutingBroker.route``). Everything else -- CONNECT, SUBSCRIBE,
    retained or QoS 2 messages, malformed ones -- goes on to amqtt, and so does
    everything until amqtt has accepted the connection (its session connected on this writer)."""

    def __init__(self, broker: RoutingBroker, out: ClientWriter, client: str) -> None:
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
        self.acked = 0  # SUBACKs and UNSUBACKs written (``ClientWriter.write``): each settled one

    def held(self) -> None:
        self.hold += 1

    def settle(self) -> None:
        if self.hold:
            self.hold -= 1
        self._settled.set()

    def acknowledged(self) -> None:
        """A SUBACK or UNSUBACK of this connection went out: that (UN)SUBSCRIBE is in effect."""
        self.acked += 1
        self.settle()

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


class SubscriptionTable(dict[str, list[tuple[Session, int]]]):
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


class RoutingBroker(Broker):
    """amqtt's broker with the fast path's routing and the subscription index (see the module header)."""

    def __init__(self, config: dict[str, object], access: Access, secret: str) -> None:
        super().__init__(config)
        self._subscriptions = SubscriptionTable()
        self.access = access
        self.secret = secret  # the relay's password: a session logged in with it is the relay
        self.routed = 0  # publishes the fast path delivered
        #: Whether a topic is one everybody may read (``Access.may_read`` without the private topic),
        #: by topic: a match's topics repeat for all its messages.
        self._public: dict[str, bool] = {}
        #: Each client's subscription filters, by client id: amqtt finds them by trying every filter
        #: in the broker, at every CONNECT and every disconnect -- time that grew with the number of
        #: clients at each (quadratic over a broker's set-up).
        self.filters_of: dict[str, set[str]] = {}
        self._side_tasks: set[asyncio.Task[object]] = set()
        self._corked = False
        self._dirty: list[ClientWriter] = []  # writers with packets queued while corked
        #: The relay of this process, when it stands here rather than on a socket (``relay_publish``).
        self.inlet: Inlet | None = None

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
        inlet = self.inlet
        if inlet is not None and inlet.pending:
            inlet.hand()

    def relay_publish(self, data: bytes | bytearray) -> None:
        """What the relay of this process publishes: PUBLISH packets back to back, as it would write
        them to a socket, routed at once (one write per subscriber): a retained one is also kept
        for newcomers (and cleared by an empty one); a QoS 1 one is taken as acknowledged."""
        view = bytes(data)
        n = len(view)
        i = 0
        corked = self._corked
        self._corked = True
        try:
            while i < n:
                first = view[i]
                j = i + 1
                rl = shift = 0
                while True:  # the remaining length: 7 bits a byte, least significant first
                    b = view[j]
                    j += 1
                    rl |= (b & 0x7F) << shift
                    if b < 0x80:
                        break
                    shift += 7
                end = j + rl
                tl = (view[j] << 8) | view[j + 1]
                topic = view[j + 2:j + 2 + tl].decode()
                qos = (first >> 1) & 3
                if first == 0x30:
                    packet = view[i:end] if i or end < n else view
                else:  # sent on as a plain QoS 0 PUBLISH: not retained (it is live), no packet id
                    payload = view[j + 2 + tl + (2 if qos else 0):end]
                    packet = _publish0(view[j:j + 2 + tl], payload)
                    if first & 0x01:
                        if payload:
                            self._retained_messages[topic] = RetainedApplicationMessage(None, topic, payload, qos)
                        else:
                            self._retained_messages.pop(topic, None)
                self.route(topic, packet, qos)
                i = end
        finally:
            if not corked:
                self.flush()

    def route(self, topic: str, packet: bytes, qos: int) -> None:
        """The fast path's delivery: ``packet`` (a QoS 0 PUBLISH of ``topic``, published at ``qos``)
        to every subscriber the access rules let read it, at the lower of the two QoS: written
        straight to a QoS 0 subscriber's socket, the same bytes for each; a QoS 1 delivery, or one
        kept for an offline persistent session, goes through amqtt's own handler."""
        self.routed += 1
        inlet = self.inlet
        if inlet is not None and inlet.takes(topic):
            inlet.take(topic, _payload0(packet), qos)
            if not self._corked:
                inlet.hand()
        found = self._subscriptions
        assert isinstance(found, SubscriptionTable)
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
            out = live[1].writer if live is not None else None
            if isinstance(out, ClientWriter) and live is not None and live[0] is target:
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
        return is_relay_login(target.username, target.password, self.secret) \
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

    def _side(self, work: Awaitable[object]) -> None:
        task: asyncio.Task[object] = asyncio.ensure_future(work)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_done)

    def _side_done(self, task: asyncio.Task[object]) -> None:
        self._side_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.info("a delivery failed: %r", task.exception())

    async def _handle_subscription(self, client_session: Session, handler: Handler,
                                   waiter: asyncio.Future[object]) -> None:
        acked = _acked(handler)
        try:
            await super()._handle_subscription(client_session, handler, waiter)
        finally:
            if _acked(handler) == acked:  # ended before its SUBACK went out (which settles it)
                _settle(handler)

    async def _handle_unsubscription(self, client_session: Session, handler: Handler,
                                     waiter: asyncio.Future[object]) -> None:
        acked = _acked(handler)
        try:
            await super()._handle_unsubscription(client_session, handler, waiter)
        finally:
            if _acked(handler) == acked:
                _settle(handler)

    async def add_subscription(self, subscription: tuple[str, int], session: Session) -> int:
        code = await super().add_subscription(subscription, session)
        if code != 0x80 and session.client_id:
            self.filters_of.setdefault(session.client_id, set()).add(subscription[0])
        return code

    def _del_subscription(self, a_filter: str, session: Session) -> int:
        deleted = super()._del_subscription(a_filter, session)
        if deleted:
            mine = self.filters_of.get(session.client_id or "")
            if mine is not None:
                mine.discard(a_filter)
                if not mine:
                    del self.filters_of[session.client_id or ""]
            if not self._subscriptions.get(a_filter, True):
                del self._subscriptions[a_filter]  # amqtt leaves a filter nobody holds after an UNSUBSCRIBE
        return deleted

    async def _del_all_subscriptions(self, session: Session) -> None:
        """amqtt's, over this session's own filters rather than every filter in the broker."""
        for a_filter in list(self.filters_of.get(session.client_id or "", ())):
            self._del_subscription(a_filter, session)

    async def _run_broadcast(self, running_tasks: deque[asyncio.Task[object]]) -> None:
        """amqtt's broadcast step (amqtt 0.12), for every message queued by now rather than one: its
        loop makes a task and waits on it for each step, which under load cost more than the
        delivery itself."""
        queue = self._broadcast_queue
        await self._deliver(await queue.get(), running_tasks)
        while not queue.empty():
            await self._deliver(queue.get_nowait(), running_tasks)

    async def _deliver(self, broadcast: Broadcast, running_tasks: deque[asyncio.Task[object]]) -> None:
        """One message to its subscribers, as amqtt does, with the subscribers found by
        ``SubscriptionTable.matching`` and the receive check asked of ``Access`` directly -- all
        our access plugin would answer (amqtt's plugin manager gathers a coroutine per plugin for
        every recipient of every message)."""
        topic: str = broadcast["topic"]
        inlet = self.inlet
        if inlet is not None and inlet.takes(topic):  # (a player's last will, among others)
            inlet.take(topic, bytes(broadcast["data"]), broadcast.get("qos", 0))
            inlet.hand()
        subscriptions = self._subscriptions
        assert isinstance(subscriptions, SubscriptionTable)
        for target, sub_qos in subscriptions.matching(topic, self._matches):
            if not (is_relay_login(target.username, target.password, self.secret)
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


def _acked(handler: Handler) -> int:
    """The SUBACKs and UNSUBACKs the handler's connection has written (0 without a fast path)."""
    out = handler.writer
    return out.fast.acked if isinstance(out, ClientWriter) and out.fast is not None else 0


def _settle(handler: Handler) -> None:
    """A (UN)SUBSCRIBE of the handler's connection is in effect: its fast path may go on."""
    out = handler.writer
    if isinstance(out, ClientWriter) and out.fast is not None:
        out.fast.settle()
