"""The spectator page's one MQTT connection: the public stream into the ``Book``.

How this works
--------------
The page's server reads the relay's matches as any spectator does: a client of the broker with a
random client id and no login, so the broker's own rules (the embedded broker's, Mosquitto's ACL,
a NATS node's callout) let it read only the public topics. It subscribes to every match's retained
snapshot (``{prefix}/m/+/+/snap``: a match's state at each game boundary and at most once a second
while a game runs, so the list costs the relay's process about one small message a second per
match) and, only while a page is open on a match, to that match's events (``.../ev``): the hot
stream of plays is read for the matches someone watches, not for every match. It also asks, as
any client may, for each game's leaderboard (``Ratings``: the rated players by their OpenSkill
rating), answered on its own private topic.

Each read's messages are decoded (a bundle of events is one message) and handed to the book; the
frames a change makes go to ``on_frames``. A connection that drops is made again with a backoff
(a relay restarting, a broker child replaced), its subscriptions with it; the retained snapshots
that come back with them bring every watched view up to date.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable

from mqttkit import BrokerAddress
from mqttkit.connection import MqttConnection, MqttError, connect
from mqttkit.packets import Message
from protocol import messages as m
from protocol.codec import DecodeError, decode_all, encode
from relay.web.book import Book, FrameData

log = logging.getLogger("blink.web")

RETRY_FIRST_S = 0.2
RETRY_MAX_S = 3.0
KEEPALIVE_S = 15
LEADERBOARD_ROWS = 10

OnFrames = Callable[[str, list[FrameData]], None]


class Feed:
    """Reads the public topics into ``book`` (see the module header)."""

    def __init__(self, address: BrokerAddress, prefix: str, book: Book, on_frames: OnFrames) -> None:
        self.address = address.public()  # never the relay's login: a spectator's rights only
        self.prefix = prefix
        self.book = book
        self.on_frames = on_frames
        self.client_id = f"web{secrets.token_hex(16)}"
        self.connected = asyncio.Event()
        self._conn: MqttConnection | None = None
        self._shards: dict[str, str] = {}  # match code -> its shard (from its topics)
        self._subscribed: set[str] = set()  # event topics subscribed on the current connection
        self.decode_errors = 0
        self._chores: set[asyncio.Task[None]] = set()

    def _ev_topic(self, code: str) -> str | None:
        shard = self._shards.get(code)
        return None if shard is None else f"{self.prefix}/m/{shard}/{code}/ev"

    async def run(self) -> None:
        """Connect, subscribe, read; again after every drop, until cancelled."""
        wait = RETRY_FIRST_S
        while True:
            try:
                conn = await connect(self.address.host, self.address.port, client_id=self.client_id,
                                     on_messages=self._on_messages, keepalive=KEEPALIVE_S,
                                     tls=self.address.ssl_context())
            except MqttError as exc:
                log.debug("spectator connection to %s: %s", self.address.url, exc)
                await asyncio.sleep(wait)
                wait = min(RETRY_MAX_S, wait * 2)
                continue
            wait = RETRY_FIRST_S
            self._conn, self._subscribed = conn, set()
            try:
                await conn.subscribe([(f"{self.prefix}/m/+/+/snap", 0), (f"{self.prefix}/c/{self.client_id}", 0)])
                await self._sync_subscriptions()
                self.connected.set()
                why = await conn.wait_closed()
                log.info("spectator connection to %s dropped (%s); connecting again", self.address.url, why)
            except MqttError as exc:
                log.info("spectator connection to %s: %s; connecting again", self.address.url, exc)
                conn.abort()
            finally:
                self.connected.clear()
                self._conn = None
            await asyncio.sleep(wait)

    async def close(self) -> None:
        conn = self._conn
        if conn is not None and conn.connected:
            await conn.disconnect()

    async def _sync_subscriptions(self) -> None:
        """Subscribe to the events of every watched match whose shard is known, and only those."""
        conn = self._conn
        if conn is None or not conn.connected:
            return
        wanted = {t for code in self.book.watched() if (t := self._ev_topic(code)) is not None}
        gone, new = self._subscribed - wanted, wanted - self._subscribed
        self._subscribed = wanted
        if new:
            await conn.subscribe([(t, 0) for t in sorted(new)])
        if gone:
            await conn.unsubscribe(sorted(gone))

    async def resubscribe(self) -> None:
        """After a page opened or closed: the event subscriptions to match (a drop mid-way is the
        reconnection's to mend)."""
        try:
            await self._sync_subscriptions()
        except MqttError as exc:
            log.debug("subscriptions not changed: %s", exc)

    def ask_ratings(self, games: list[str]) -> None:
        """Ask the relay for each game's leaderboard (any client may: ``Ratings``); the boards come
        back on this client's own topic, into the book."""
        conn = self._conn
        if conn is None or not conn.connected:
            return
        topic = f"{self.prefix}/lobby/req/{self.client_id}"
        try:
            for game in games:
                conn.publish(topic, encode(m.Ratings(game=game, limit=LEADERBOARD_ROWS)))
        except MqttError as exc:
            log.debug("leaderboards not asked for: %s", exc)

    def _on_messages(self, messages: list[Message]) -> None:
        now = time.time_ns()
        own = f"{self.prefix}/c/{self.client_id}"
        for msg in messages:
            topic = msg.topic
            if topic is None:
                continue
            if topic == own:
                try:
                    answers = decode_all(msg.payload)
                except DecodeError:
                    self.decode_errors += 1
                    continue
                for item in answers:
                    if isinstance(item, m.RatingBoard):
                        self.book.on_ratings(item)
                continue
            parts = topic[len(self.prefix) + 1:].split("/") if topic.startswith(self.prefix + "/") else []
            if len(parts) != 4 or parts[0] != "m":
                continue
            shard, code, kind = parts[1], parts[2], parts[3]
            known = code in self._shards
            self._shards[code] = shard
            if kind == "snap" and not msg.payload:
                self.book.on_cleared(code, now)
                self._tell(code, [self.book.frame(code, now_ns=now)])
                if len(self._shards) > 2 * len(self.book.matches) + 64:  # the book forgot old matches
                    self._shards = {c: s for c, s in self._shards.items() if self.book.knows(c)}
                continue
            try:
                decoded = decode_all(msg.payload)
            except DecodeError:
                self.decode_errors += 1
                continue
            frames: list[FrameData] = []
            for item in decoded:
                if kind == "snap" and isinstance(item, m.Snapshot) and item.match == code:
                    frames.extend(self.book.on_snapshot(item))
                elif kind == "ev" and isinstance(item, m.Event) and item.match == code:
                    frames.extend(self.book.on_event(item))
            if frames:
                self._tell(code, frames)
            if not known and code in self.book.watched():
                task = asyncio.get_running_loop().create_task(self.resubscribe())
                self._chores.add(task)
                task.add_done_callback(self._chores.discard)

    def _tell(self, code: str, frames: list[FrameData]) -> None:
        try:
            self.on_frames(code, frames)
        except Exception:  # noqa: BLE001 - a page's trouble never stops the feed
            log.exception("the pages of %s could not be told", code)


__all__ = ["Feed"]
