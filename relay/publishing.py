"""What the relay publishes and how: a step's outputs in one buffer, and the resync in chunks.

How this works
--------------
``send_publishes`` packs a step's PUBLISH packets back to back into one buffer, one write (an awaited
publish cost a loop turn a message, and a loopback ``send`` 0.3-0.9 ms on a busy 2-core machine); a
QoS-1 one goes through the connection's ``publish`` in its place, keeping the order.

``wire_messages`` first puts what a step says to one topic into one payload (a bundle,
``protocol.codec.pack_bundle``), in the order said, at the place of the topic's first message: a
play's events go out as one message on the match's ``ev`` and its verdict with the cards it drew as
one on the player's topic, so subscribers receive and the broker routes about half as many
messages. A bundle never exceeds the broker's payload limit (the relay's ``max_payload``): a
broker drops a larger PUBLISH without a word, and with it every message inside. A message moves earlier only past messages of its own class -- events past other
matches' events, a player's messages past other players' -- never across the other class: a
client must have a private update before the events after its ``seq`` (it holds an early one until
its event, and cannot place a late one), and a view that ends a game after that game's events.
Retained and QoS-1 messages stay single (a retained topic keeps one message; a QoS-1 one marks a
point in the stream) and nothing moves across them either.

``Republisher``: after every (re)connect and every shard gained, each shard's status and match list, then
every match's views and retained snapshot, so clients catch up on what they missed. At ~0.25 ms of
CPU a match, that goes ``chunk`` matches a step (running ones first) behind the step's requests; a
chunk's last message is QoS 1 and the next waits for its acknowledgement (at most
``RESYNC_ACK_WAIT_S``), so a slower broker (the embedded one, on the same loop) is not still reading
the resync when an answer comes behind it. A chunk is built from the state as it is then.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence

from mqttkit.connection import MqttError
from mqttkit.packets import pack_publish
from protocol import messages as m
from protocol.codec import MAX_BUNDLE_ITEMS, MAX_MESSAGE_BYTES, Encoder, evolve, pack_bundle
from protocol.seal import OVERHEAD as SEAL_OVERHEAD
from relay.link import Connection
from relay.model import Out, Publish
from relay.shard import Shard

log = logging.getLogger("blink.relay")

RESYNC_CHUNK = 50  # matches republished per step (about 0.25 ms of CPU each)
RESYNC_ACK_WAIT_S = 1.0
RESYNC_IN_FLIGHT = 2  # chunks sent and not yet acknowledged, at most
#: Writes the log lines of each (shard, outputs) and publishes all the outputs at once.
Emit = Callable[[Sequence[tuple[Shard | None, list[Out]]]], None]


class Republisher:
    """Every served match's views and snapshot, republished a chunk per step (see the header)."""

    def __init__(self, emit: Emit, wake: Callable[[], None]) -> None:
        self.emit = emit
        self.wake = wake
        self.left: deque[tuple[Shard, str]] = deque()
        self.chunk = RESYNC_CHUNK
        self.acks: deque[tuple[asyncio.Future[bytes], float]] = deque()  # unacknowledged chunks' last
        self._last_qos1: asyncio.Future[bytes] | None = None
        self.done = asyncio.Event()  # set when every match has been republished
        self.began = 0.0
        self.sent = 0
        self.matches = 0  # matches republished by the last complete resync
        self.seconds = 0.0  # how long after coming online that took

    def start(self, fresh: list[Shard], restart: bool, mono: int) -> None:
        """Announce ``fresh`` shards (they serve requests from here on) and queue their matches;
        ``restart``: after a (re)connect, everything."""
        self.emit([(srv, srv.core.startup(mono + srv.mono_offset)) for srv in fresh])
        if restart:
            self.left.clear()
            self.acks.clear()
        if restart or not self.left:
            self.began, self.sent = time.monotonic(), 0
        for srv in fresh:
            if srv.recovered is not None or srv.core.matches:
                log.info("shard %s: announced (status online, %d match(es))", srv.name, len(srv.core.matches))
            self.left.extend((srv, c) for c in sorted(srv.core.matches, key=lambda c: srv.core.matches[c].status
                                                      not in ("playing", "between")))
        self.done.clear()
        self._finish_if_empty()

    def may_send(self) -> bool:
        """Is a chunk left, and may it go (the broker acknowledged the last, or it waited long enough)?"""
        if not self.left:
            return False
        acks = self.acks
        while acks and (acks[0][0].done() or time.monotonic() - acks[0][1] >= RESYNC_ACK_WAIT_S):
            acks.popleft()
        return len(acks) < RESYNC_IN_FLIGHT

    def send_chunk(self, servers: Mapping[str, Shard], mono: int, wall: int) -> None:
        """The next ``chunk`` matches' views and snapshots (a shard lost meanwhile is skipped)."""
        left = self.left
        out: list[Out] = []
        for _ in range(min(self.chunk, len(left))):
            srv, code = left.popleft()
            if servers.get(srv.name) is not srv:
                continue  # lost meanwhile
            part = srv.core.resync(code, mono + srv.mono_offset, wall)
            if part:
                out.extend(part)
                self.sent += 1
        if left and out and isinstance(out[-1], Publish):
            out[-1] = dataclasses.replace(out[-1], qos=1)  # acknowledged: the next chunk waits for it
        self._last_qos1 = None
        self.emit([(None, out)])
        if self._last_qos1 is not None:
            self.acks.append((self._last_qos1, time.monotonic()))
        self._finish_if_empty()

    def _finish_if_empty(self) -> None:
        if not self.left and not self.done.is_set():
            self.seconds = time.monotonic() - self.began
            self.matches = self.sent
            self.done.set()
            log.info("resynced %d match(es) in %.2f s after coming online", self.sent, self.seconds)

    def on_qos1(self, future: asyncio.Future[bytes]) -> None:
        # A broker's acknowledgement wakes the stepper: the resync's next chunk waits for one.
        future.add_done_callback(lambda _: self.wake())
        self._last_qos1 = future


#: A bundle is closed at this size, its header included, unless the broker takes less: every broker
#: drops a PUBLISH over its payload limit (``message_size_limit``, the relay's ``max_payload``)
#: without a word, so a bundle over it would lose all its messages for every subscriber.
BUNDLE_BYTES = MAX_MESSAGE_BYTES // 4
BUNDLE_HEAD = 3  # an array header of up to ``MAX_BUNDLE_ITEMS`` items
EVENTS = "/ev"  # how a match's public event stream's topic ends (protocol.topics.Topics.ev)


@dataclasses.dataclass(frozen=True, slots=True)
class Wire:
    """One PUBLISH as it goes out: the topic, the payload (a message or a bundle), retain and QoS."""

    topic: str
    payload: bytes
    retain: bool = False
    qos: int = 0


def wire_messages(publishes: Sequence[Publish], encode: Callable[[object], bytes],
                  max_bytes: int = BUNDLE_BYTES) -> list[Wire]:
    """The step's publishes as PUBLISHes, a topic's plain messages bundled (see the header) into
    payloads of at most ``max_bytes`` (a message larger than that alone goes out as it is)."""
    room = min(max_bytes, BUNDLE_BYTES) - BUNDLE_HEAD
    slots: list[Wire | list[bytes]] = []  # a list: a topic's run of plain messages, bundled at the end
    topics: list[str] = []
    runs: dict[str, tuple[list[bytes], int]] = {}  # topic -> (its open run, the run's bytes)
    public = False  # the class of the open runs: a match's event stream, or a player's own topic
    for o in publishes:
        plain = not (o.retain or o.qos or isinstance(o.msg, (bytes, bytearray)))
        payload = bytes(o.msg) if isinstance(o.msg, (bytes, bytearray)) else encode(o.msg)
        if not plain:
            slots.append(Wire(o.topic, payload, o.retain, o.qos))
            topics.append(o.topic)
            runs.clear()  # nothing moves across it
            continue
        if o.topic.endswith(EVENTS) != public:
            public = not public
            runs.clear()  # nor across a message of the other class
        run = runs.get(o.topic)
        if run is not None and run[1] + len(payload) <= room and len(run[0]) < MAX_BUNDLE_ITEMS:
            run[0].append(payload)
            runs[o.topic] = (run[0], run[1] + len(payload))
            continue
        items = [payload]
        runs[o.topic] = (items, len(payload))
        slots.append(items)
        topics.append(o.topic)
    return [slot if isinstance(slot, Wire) else Wire(topic, slot[0] if len(slot) == 1 else pack_bundle(slot))
            for slot, topic in zip(slots, topics)]


def send_publishes(client: Connection, out: Sequence[Out],
                   on_qos1: Callable[[asyncio.Future[bytes]], None] | None = None,
                   max_bytes: int = BUNDLE_BYTES, seal: Callable[[str, bytes], bytes | None] | None = None,
                   ) -> tuple[int, str]:
    """Write the ``Publish``es of ``out`` to ``client`` (see the header; ``on_qos1`` is given each
    QoS-1 acknowledgement's future; ``max_bytes``: the broker's payload limit; ``seal``: sealed play's
    ``relay.sealing.Sealing.wire``, applied to each payload -- a bundle sealed or signed once --
    None for one that cannot be sealed, which is not sent). Never raises for a dropped connection:
    how many could not be written, and why."""
    publishes = [o for o in out if isinstance(o, Publish)]
    if not publishes:
        return 0, ""
    sent = time.time_ns()  # a verdict says when it left (its player's time in parts: judging, downlink)
    publishes = [Publish(o.topic, evolve(o.msg, sent_ns=sent), o.retain, o.qos)
                 if type(o.msg) is m.ActionAccepted or type(o.msg) is m.ActionRejected else o for o in publishes]
    if not client.connected:
        return len(publishes), "not connected"
    buf = bytearray()
    failed, why = 0, ""
    # One Packer for the step's messages (this runs in the loop's thread).
    for o in wire_messages(publishes, Encoder(), max_bytes - SEAL_OVERHEAD if seal is not None else max_bytes):
        payload = o.payload
        if seal is not None:
            sealed = seal(o.topic, payload)
            if sealed is None:
                continue
            payload = sealed
        if len(payload) > max_bytes:  # the broker will drop it: say so, it is a bug or a wrong limit
            log.warning("a %d-byte message on %s is over the broker's payload limit (%d)", len(payload), o.topic,
                        max_bytes)
        try:
            if o.qos == 0:
                pack_publish(buf, o.topic, payload, o.retain)
                continue
            if buf:
                client.write(buf)
                buf = bytearray()
            if on_qos1 is None:
                client.publish(o.topic, payload, o.qos, o.retain)
            else:
                future = client.publish(o.topic, payload, o.qos, o.retain, wait=True)
                if future is not None:
                    on_qos1(future)
        except (ValueError, MqttError) as exc:  # a bad topic; the connection dropped under it
            why = f"{type(exc).__name__}: {exc}"
            failed += 1
    if buf:
        try:
            client.write(buf)
        except MqttError as exc:  # the connection broke under it
            why = f"{type(exc).__name__}: {exc}"
            failed += sum(1 for o in publishes if o.qos == 0)  # an upper bound: what this step said
    return failed, why


__all__ = ["BUNDLE_BYTES", "Emit", "Republisher", "Wire", "send_publishes", "wire_messages"]
