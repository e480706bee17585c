"""The client's networking shell: one MQTT connection, clock-sync pings while idle, requests and
actions out, events and private messages in.

How this works
--------------
``Connection`` owns an aiomqtt client whose MQTT client id is the player's id, subscribes to the
player's private topic, and (once in a match) to the match's public events and retained snapshot.
Incoming payloads are decoded (bad ones are counted and dropped: a client never crashes on what a
broker hands it) and passed to ``on_message(msg, recv_ns)`` together with the receive time.
The last will is ``Leave(dropped=True)`` on the client's own request topic, so the relay learns of
a client that vanished without saying goodbye -- and keeps its seat for the match's grace period.

Clock pings. A play answered is a clock sample already (its verdict carries the relay's receive
and send times: ``protocol/clock.py``), so the pinger sends a ``Ping`` only while idle: a quick
burst on connecting, then one each ``ping_interval_s`` in which no verdict with the relay's stamps
came (``answered_ns``; ``ping_due``). A player that plays sends no pings at all.

The connection heals itself: when the broker connection drops, the reader tells the application
(``Reconnecting``), then reconnects with backoff (``RECONNECT_FIRST_S`` doubling to
``RECONNECT_MAX_S``), subscribes again to everything it had (private topic, relay status, watched
matches) and says ``Reconnected`` -- the model then asks for its seat and view back. Only after
``give_up_s`` without a connection does it deliver ``ConnectionLost``. Publishing while
disconnected drops the message quietly: actions are resent by the model, requests re-asked.

Shards (several relays on one broker, ``relay/cluster/shards.py``): a match lives in one shard, named in
its topics. ``MatchJoined`` says which; the connection remembers it per match and uses it for the
match's action, event and snapshot topics (a match watched by code before that -- a spectator --
is followed on every shard, ``m/+/{code}/...``). ``watch_lobby`` follows the match list: the single
relay's ``lobby/matches`` and every shard's ``lobby/matches/{shard}``, delivered merged as one
``MatchList``.

Sealed play (an address with a pin, ``client/sealing.py``): the client id is the hash of the
player's key, and the MQTT client id is another secret (never on a topic, so a reader cannot take
the session over). Before the first connection the relay's keys are taken from its status, checked
against the pin; every message out is sealed (the last will too, numbered by connection) and every
message in is opened or verified before it is decoded. What does not open -- unsealed (no
downgrade), cut, altered, replayed, another client's, a status of another relay -- is dropped with
one log line a reason and second (``refused``), and the application is told (``Tampered``) so the
model asks for its view again. A status of a new start of the relay keys the session afresh and
the connection reconnects once, so its last will is sealed under the new keys.

``Impairment`` (added delay, jitter, loss and reordering, each direction) sits between the
connection and the application, so latency experiments work on any OS and any broker.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable, Protocol

import aiomqtt

from mqttkit import NODELAY, BrokerAddress, connect_problem, stop_task, subscribe_granted
from protocol import messages as m
from protocol.clock import ping_due
from protocol.codec import DecodeError, decode_all, encode
from protocol.seal import ClientSeal, SealError
from protocol.topics import Topics
from client.model import ConnectionLost, Reconnected, Reconnecting, Tampered
from client.sealing import Refusals, is_status_topic, new_seal, relay_keys

if TYPE_CHECKING:
    import paho.mqtt.client as mqtt
    from aiomqtt.types import PahoSocket
    from paho.mqtt.properties import Properties
    from paho.mqtt.reasoncodes import ReasonCode

log = logging.getLogger("blink.net")

#: Where a connection hands what arrives: a decoded message (a wire message, or one of the model's
#: notices: ``Reconnecting``, ``Reconnected``, ``ConnectionLost``, ``Tampered``) and its arrival time.
OnMessage = Callable[[object, int], None]

RECONNECT_FIRST_S = 0.25
RECONNECT_MAX_S = 4.0
GIVE_UP_S = 120.0  # without a broker this long, the connection is lost for good


class _Client(aiomqtt.Client):
    """aiomqtt's client, with one race closed: paho asks for a write (a publish, a ping) just as the
    broker drops the socket, and aiomqtt schedules ``add_writer`` on a descriptor that is closed --
    or already reused by the reconnect -- by the time it runs (a logged traceback on every drop).
    Here the socket is asked for its descriptor when the callback runs: a closed one is skipped."""

    def _on_disconnect(self, client: mqtt.Client, userdata: object, flags: mqtt.DisconnectFlags,
                       reason_code: ReasonCode, properties: Properties | None = None) -> None:
        super()._on_disconnect(client, userdata, flags, reason_code, properties)
        # aiomqtt keeps an unexpected drop as an exception on a future that only ``__aexit__``
        # reads; our reader reports the drop itself (and reconnects), so mark it read: otherwise
        # asyncio logs "Future exception was never retrieved" when the future is dropped.
        fut = self._disconnected
        if fut.done() and not fut.cancelled():
            fut.exception()

    def _on_socket_register_write(self, client: mqtt.Client, userdata: object, sock: PahoSocket) -> None:
        def callback() -> None:
            try:
                client.loop_write()
            except Exception as exc:  # noqa: BLE001 - a broken connection: the reader reports it
                if not self._disconnected.done():
                    self._disconnected.set_exception(exc)

        def add() -> None:
            fd = sock.fileno()
            if fd < 0:
                return
            try:
                self._loop.add_writer(fd, callback)
            except (OSError, ValueError):
                pass  # closed meanwhile: the reader sees the drop and reconnects

        self._loop.call_soon_threadsafe(add)


def reconnect_delay(attempt: int, first_s: float = RECONNECT_FIRST_S, max_s: float = RECONNECT_MAX_S) -> float:
    """Seconds to wait before reconnect attempt ``attempt`` (0, 1, ...): doubling, capped."""
    return min(max_s, first_s * 2.0 ** min(attempt, 30))


def new_client_id(prefix: str = "p") -> str:
    """A fresh MQTT client id: 128 random bits. The id is the client's only key to its seat and
    its private topic, so it is never published (the relay names players by name and seat)."""
    return f"{prefix}{os.urandom(16).hex()}"


@dataclass
class Impairment:
    """Network impairment for one player, applied to each direction separately."""

    delay_s: float = 0.0  # added one-way delay
    jitter_s: float = 0.0  # uniform +- jitter on top of the delay
    loss: float = 0.0  # probability a message is dropped
    reorder: float = 0.0  # probability a message gets an extra delay of (delay + jitter) so it overtakes
    seed: int | None = None

    def __post_init__(self) -> None:
        for name in ("delay_s", "jitter_s"):
            v = getattr(self, name)
            if not 0.0 <= v <= 10.0:
                raise ValueError(f"{name.removesuffix('_s')} must be between 0 and 10 s, not {v}")
        for name in ("loss", "reorder"):
            v = getattr(self, name)
            if not 0.0 <= v < 1.0:
                raise ValueError(f"{name} must be a fraction from 0 up to (not including) 1, not {v}")
        self._rng = random.Random(self.seed)

    @property
    def active(self) -> bool:
        return bool(self.delay_s or self.jitter_s or self.loss or self.reorder)

    def plan(self, direction: str = "up") -> float | None:
        """Delay for one message in seconds, or None to drop it (``direction``: "up" to the broker,
        "down" from it; a subclass may treat them apart)."""
        if self.loss and self._rng.random() < self.loss:
            return None
        d = self.delay_s
        if self.jitter_s:
            d += self._rng.uniform(-self.jitter_s, self.jitter_s)
        if self.reorder and self._rng.random() < self.reorder:
            d += self.delay_s + self.jitter_s + 0.005
        return max(0.0, d)


class Link(Protocol):
    """What a player asks of its broker connection, wherever that runs: ``Connection`` on the
    caller's own loop, or ``client.netthread.ThreadedConnection`` on the window's network thread.
    ``on_message(msg, recv_ns)`` runs on the caller's thread either way."""

    client_id: str
    topics: Topics
    on_message: OnMessage

    @property
    def impairment(self) -> Impairment | None: ...

    @impairment.setter
    def impairment(self, value: Impairment | None) -> None: ...

    @property
    def lost(self) -> str | None: ...

    @property
    def reconnects(self) -> int: ...

    @property
    def bad_messages(self) -> int: ...

    async def __aenter__(self) -> Link: ...

    async def __aexit__(self, *exc: object) -> None: ...

    async def close(self, leave: bool = True) -> None: ...

    def shard_of(self, match: str) -> str | None: ...

    async def watch(self, match: str) -> None: ...

    async def watch_all(self) -> None: ...

    async def watch_lobby(self) -> None: ...

    async def request(self, msg: object) -> None: ...

    async def act(self, match: str, act: m.Act) -> None: ...

    def post_act(self, match: str, act: m.Act) -> None:
        """Send an action without awaiting: the caller (a key handler) may not await."""

    async def send_raw(self, topic: str, payload: bytes) -> None: ...


class Connection:
    def __init__(self, address: BrokerAddress, client_id: str | None = None, topics: Topics | None = None,
                 on_message: OnMessage | None = None, impairment: Impairment | None = None,
                 ping_interval_s: float = 1.0, give_up_s: float = GIVE_UP_S, relay_status: bool = False,
                 seal: ClientSeal | None = None) -> None:
        self.address = address
        self.topics = topics or Topics()
        #: Sealed play (an address with a pin): the player's key; its hash is the client id.
        self.seal = seal or (new_seal(address.pin) if address.pin else None)
        self.client_id = self.seal.client_id if self.seal is not None else client_id or new_client_id()
        #: The MQTT session's id: the client id, or when sealed a secret of its own.
        self._mqtt_id = new_client_id("m") if self.seal is not None else self.client_id
        self.refused = Refusals(f"sealed connection to {address.url}")
        self._wills = 0  # connections made (a sealed last will is numbered by its connection)
        self._rekeyed = False
        self.on_message = on_message or (lambda msg, now: None)
        self.impairment = impairment if impairment and impairment.active else None
        self.ping_interval_s = ping_interval_s
        #: When the latest verdict carrying the relay's stamps arrived (a clock sample: no ping needed).
        self.answered_ns: int | None = None
        self.bad_messages = 0
        self.lost: str | None = None  # why the broker connection ended, if it did
        self._client: aiomqtt.Client | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._watching: set[str] = set()
        self._shards: dict[str, str] = {}  # match -> its shard, from MatchJoined
        self._lobby: dict[str, tuple[dict[str, object], ...]] | None = None  # match list topic -> its entries
        self._all = False  # watch_all was asked for
        self.connected = asyncio.Event()
        self.give_up_s = give_up_s
        self.relay_status = relay_status  # also subscribe to the relays' retained status (a Player does)
        self.reconnects = 0

    async def _connect(self) -> aiomqtt.Client:
        topic, leave = self.topics.req(self.client_id), encode(m.Leave(dropped=True))
        if self.seal is not None:
            if not self.seal.keyed:
                await relay_keys(self.address, self.topics, self.seal)  # before the will: it is sealed
            self._wills += 1
            leave = self.seal.will(topic, leave, self._wills)
        will = aiomqtt.Will(topic, leave, qos=1)
        client = _Client(self.address.host, self.address.port, identifier=self._mqtt_id, will=will,
                                username=self.address.username, password=self.address.password,
                                socket_options=NODELAY, keepalive=15, max_queued_outgoing_messages=0,
                                tls_context=self.address.ssl_context())
        await client.__aenter__()
        try:
            await subscribe_granted(client, self.topics.client(self.client_id), 1)
            if self.relay_status or self.seal is not None:  # (sealed: a new start's keys come there)
                await subscribe_granted(client, self.topics.relay_status("+"), 1)
            if self._all:
                await subscribe_granted(client, f"{self.topics.prefix}/m/+/+/ev", 0)
            for match in self._watching:
                await subscribe_granted(client, self._match_topic(match, "ev"), 0)
                await subscribe_granted(client, self._match_topic(match, "snap"), 0)
            if self._lobby is not None:
                await subscribe_granted(client, self.topics.match_list, 1)
                await subscribe_granted(client, f"{self.topics.match_list}/+", 1)
        except aiomqtt.MqttError:
            await _quietly_close(client)
            raise
        return client

    async def __aenter__(self) -> Connection:
        try:
            self._client = await self._connect()
        except aiomqtt.MqttError as exc:
            why = connect_problem(exc, self.address)  # a refused certificate, a scheme that does not match
            raise ConnectionError(f"cannot reach the MQTT broker at {self.address.url}: {why}") from exc
        self._tasks.append(asyncio.create_task(self._reader()))
        if self.ping_interval_s > 0:
            self._tasks.append(asyncio.create_task(self._pinger()))
        self.connected.set()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self, leave: bool = True) -> None:
        self.connected.clear()
        for t in list(self._tasks):
            await stop_task(t)
        self._tasks.clear()
        client, self._client = self._client, None
        if client is not None:
            try:
                payload = self._sealed(self.topics.req(self.client_id), encode(m.Leave())) if leave else None
                if payload is not None:
                    await client.publish(self.topics.req(self.client_id), payload, qos=0)
                await asyncio.wait_for(client.__aexit__(None, None, None), timeout=5)
            except Exception:  # noqa: BLE001 - closing; the broker may be gone
                pass

    def shard_of(self, match: str) -> str | None:
        """The shard a match lives in, once ``MatchJoined`` said so."""
        return self._shards.get(match)

    def _match_topic(self, match: str, kind: str) -> str:
        # A match whose shard is not known yet (watched by code) is followed on every shard.
        return f"{self.topics.prefix}/m/{self._shards.get(match, '+')}/{match}/{kind}"

    async def watch(self, match: str) -> None:
        """Subscribe to a match's public events and retained snapshot."""
        if match in self._watching:
            return
        self._watching.add(match)  # also subscribed again after every reconnect
        if self._client is None or not self.connected.is_set():
            return
        try:
            await subscribe_granted(self._client, self._match_topic(match, "ev"), 0)
            await subscribe_granted(self._client, self._match_topic(match, "snap"), 0)
        except aiomqtt.MqttError as exc:
            log.debug("subscribe failed (the reconnect subscribes again): %s", exc)

    async def watch_all(self) -> None:
        """Subscribe to every match's events, on every shard (a logger that must not miss the first ones)."""
        self._all = True
        if self._client is not None:
            await self._client.subscribe(f"{self.topics.prefix}/m/+/+/ev", qos=0)

    async def watch_lobby(self) -> None:
        """Follow the waiting matches: every shard's list, delivered merged as one ``MatchList``."""
        if self._lobby is not None:
            return
        self._lobby = {}
        if self._client is not None:
            await self._client.subscribe(self.topics.match_list, qos=1)
            await self._client.subscribe(f"{self.topics.match_list}/+", qos=1)

    async def request(self, msg: object) -> None:
        await self._send(self.topics.req(self.client_id), encode(msg))

    def act_topic(self, match: str) -> str:
        """Where this client's actions in ``match`` go: the match's shard, once ``MatchJoined`` said it."""
        shard = self._shards.get(match, self.topics.shard)
        return f"{self.topics.prefix}/m/{shard}/{match}/act/{self.client_id}"

    async def act(self, match: str, act: m.Act) -> None:
        await self._send(self.act_topic(match), encode(act))

    def post_act(self, match: str, act: m.Act) -> None:
        """Send an action without awaiting (a key handler): the publish runs in a task of this
        connection's, which ``close`` ends."""
        self._track(asyncio.create_task(self.act(match, act)))

    async def send_raw(self, topic: str, payload: bytes) -> None:
        await self._send(topic, payload)

    async def _send(self, topic: str, payload: bytes) -> None:
        if self.impairment is None:
            await self._publish(topic, payload)
            return
        delay = self.impairment.plan("up")
        if delay is None:
            return
        self._later(delay, lambda: self._publish(topic, payload))

    def _later(self, delay: float, make: Callable[[], Awaitable[object]]) -> None:
        # The coroutine is made only when it is due, so a connection closed in between leaves
        # nothing un-awaited behind.
        async def run() -> None:
            await asyncio.sleep(delay)
            await make()

        self._track(asyncio.create_task(run()))

    def _track(self, task: asyncio.Task[None]) -> None:
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    async def _publish(self, topic: str, payload: bytes) -> None:
        if self._client is None or not self.connected.is_set():
            return  # reconnecting: the model resends what matters once the connection is back
        sealed = self._sealed(topic, payload)  # sealed as it leaves: under the relay's latest keys
        if sealed is None:
            return
        try:
            await self._client.publish(topic, sealed, qos=0)
        except aiomqtt.MqttError as exc:
            log.debug("publish failed: %s", exc)

    def _sealed(self, topic: str, payload: bytes) -> bytes | None:
        if self.seal is None:
            return payload
        try:
            return self.seal.seal(topic, payload)
        except SealError as exc:  # no keys (never, once connected): dropped as while reconnecting
            log.debug("not sent: %s", exc)
            return None

    def _open(self, topic: str, payload: bytes) -> bytes | None:
        """A sealed connection's incoming payload, opened or verified; None if dropped (said once a
        second a reason; the application is told, so it can ask for what it lost)."""
        assert self.seal is not None
        status = is_status_topic(topic, self.topics)
        try:
            if status:
                body, fresh = self.seal.open_status(topic, payload)
                self._rekeyed = self._rekeyed or fresh
                return body if self.relay_status else None  # (only read for the keys)
            return self.seal.open(topic, payload)
        except SealError as exc:
            self.bad_messages += 1
            self.refused.drop(exc, topic)
            if not status:
                self._deliver(Tampered(topic, exc.reason))
            return None

    async def _reader(self) -> None:
        while True:
            try:
                reason = await self._read() or "the broker ended the message stream"
            except aiomqtt.MqttError as exc:
                reason = str(exc) or type(exc).__name__
            # The broker went away (or closed us): say so once, then try to get back.
            self.connected.clear()
            old, self._client = self._client, None
            if old is not None:
                await _quietly_close(old)
            log.warning("connection to %s lost (%s): reconnecting", self.address.url, reason)
            self._deliver(Reconnecting(reason))
            if not await self._reconnect():
                self.lost = reason
                log.warning("gave up reconnecting to %s after %g s", self.address.url, self.give_up_s)
                self._deliver(ConnectionLost(reason))
                return
            self.reconnects += 1
            self.connected.set()
            log.info("reconnected to %s", self.address.url)
            self._deliver(Reconnected())

    async def _reconnect(self) -> bool:
        deadline = time.monotonic() + self.give_up_s
        attempt = 0
        while time.monotonic() < deadline:
            await asyncio.sleep(reconnect_delay(attempt))
            attempt += 1
            try:
                self._client = await self._connect()
                return True
            except (aiomqtt.MqttError, ConnectionError) as exc:  # (a sealed one: no relay status yet)
                log.debug("reconnect attempt %d failed: %s", attempt, exc)
        return False

    async def _read(self) -> str | None:
        """Deliver what arrives until the stream ends (None), or a sealed connection must connect
        again (why: its last will was sealed under keys a new start of the relay voided)."""
        assert self._client is not None
        async for msg in self._client.messages:
            payload = msg.payload if isinstance(msg.payload, (bytes, bytearray)) else b""
            if not payload:  # a cleared retained message
                if self._lobby is not None and self._lobby.pop(msg.topic.value, None) is not None:
                    self._deliver(m.MatchList(merge_match_lists(self._lobby)))
                continue
            if self.seal is not None:
                opened = self._open(msg.topic.value, bytes(payload))
                if self._rekeyed:
                    self._rekeyed = False
                    return "the relay started again with new keys: connecting again to seal the last will with them"
                if opened is None:
                    continue
                payload = opened
            try:
                decoded = decode_all(payload)  # one message, or a bundle of a step's for this topic
            except DecodeError:
                self.bad_messages += 1
                continue
            for i, one in enumerate(decoded):
                if isinstance(one, (m.ActionAccepted, m.ActionRejected)):
                    if one.recv_ns and one.sent_ns:
                        self.answered_ns = time.time_ns()
                elif isinstance(one, m.MatchJoined):
                    self._shards[one.match] = one.shard  # before anyone watches or acts on it
                elif isinstance(one, m.MatchList) and self._lobby is not None:
                    self._lobby[msg.topic.value] = one.matches
                    decoded[i] = m.MatchList(merge_match_lists(self._lobby))
            if self.impairment is None:
                for one in decoded:
                    self._deliver(one)
            else:
                delay = self.impairment.plan("down")  # one network message: one fate for all it holds
                if delay is not None:
                    self._later(delay, functools.partial(self._deliver_async, decoded))
        return None

    async def _deliver_async(self, msgs: list[object]) -> None:
        for msg in msgs:
            self._deliver(msg)

    def _deliver(self, msg: object) -> None:
        try:
            self.on_message(msg, time.time_ns())
        except Exception:  # noqa: BLE001 - a bug in a handler must not kill the reader
            log.exception("handler failed for %s", type(msg).__name__)

    async def _pinger(self) -> None:
        await self.connected.wait()
        # A quick burst first so the round-trip time is known at once, then a steady beat.
        for i in range(5):
            await self.request(m.Ping(t0=time.time_ns()))
            await asyncio.sleep(0.05)
        period_ns = int(self.ping_interval_s * 1e9)
        while True:
            await asyncio.sleep(self.ping_interval_s)
            now = time.time_ns()
            if self.connected.is_set() and ping_due(self.answered_ns, now, period_ns):
                await self.request(m.Ping(t0=now))


def merge_match_lists(lists: dict[str, tuple[dict[str, object], ...]]) -> tuple[dict[str, object], ...]:
    """One list of the waiting matches from each list topic's latest (each relay writes only its
    own shard's): by topic, codes once each."""
    seen: set[object] = set()
    merged: list[dict[str, object]] = []
    for topic in sorted(lists):
        for entry in lists[topic]:
            code = entry.get("code") if isinstance(entry, dict) else None
            if code in seen:
                continue
            seen.add(code)
            merged.append(entry)
    return tuple(merged)


async def _quietly_close(client: aiomqtt.Client) -> None:
    try:
        await asyncio.wait_for(client.__aexit__(None, None, None), timeout=2)
    except Exception:  # noqa: BLE001 - the connection is already broken
        pass
