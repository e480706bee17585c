"""What the relay publishes and how: a step's outputs in one buffer, and the resync in chunks.

How this works
--------------
``send_publishes`` packs a step's PUBLISH packets back to back into one buffer, one write (an awaited
publish cost a loop turn a message, and a loopback ``send`` 0.3-0.9 ms on a busy 2-core machine); a
QoS-1 one goes through the connection's ``publish`` in its place, keeping the order.

``Resync``: after every (re)connect and every shard gained, each shard's status and match list, then
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

from mqttkit.connection import MqttConnection, MqttError
from mqttkit.packets import pack_publish
from protocol.codec import Encoder
from relay.model import Out, Publish
from relay.shard import Shard

log = logging.getLogger("blink.relay")

RESYNC_CHUNK = 50  # matches republished per step (about 0.25 ms of CPU each)
RESYNC_ACK_WAIT_S = 1.0
RESYNC_IN_FLIGHT = 2  # chunks sent and not yet acknowledged, at most
#: Writes the log lines of each (shard, outputs) and publishes all the outputs at once.
Emit = Callable[[Sequence[tuple[Shard | None, list[Out]]]], None]


class Resync:
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


def send_publishes(client: MqttConnection, out: Sequence[Out],
                   on_qos1: Callable[[asyncio.Future[bytes]], None] | None = None) -> tuple[int, str]:
    """Write the ``Publish``es of ``out`` to ``client`` (see the header; ``on_qos1`` is given each
    QoS-1 acknowledgement's future). Never raises for a dropped connection: how many could not be
    written, and why."""
    publishes = [o for o in out if isinstance(o, Publish)]
    if not publishes:
        return 0, ""
    if not client.connected:
        return len(publishes), "not connected"
    buf = bytearray()
    failed, why = 0, ""
    encode_one = Encoder()  # one Packer for the step's messages (this runs in the loop's thread)
    for o in publishes:
        payload = o.msg if isinstance(o.msg, (bytes, bytearray)) else encode_one(o.msg)
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
            failed += sum(1 for o in publishes if o.qos == 0)  # an upper bound: what this step sent
    return failed, why


__all__ = ["Emit", "Resync", "send_publishes"]
