"""The relay's asyncio shell: moves bytes between MQTT and ``RelayCore``, keeps time, writes the log.

How this works
--------------
One aiomqtt connection subscribes to every client's request topic and every match's action
topics. Each incoming message is handed to ``core.handle(topic, payload, time.time_ns())`` in the
order it arrives (the relay is the only sequencer); a second task sleeps until the core's next
deadline and calls ``core.tick``. Both run on one event loop, so the core is never entered
concurrently. Outbound messages are encoded and published at QoS 0: every public event carries a
gap-free ``seq``, so a client that misses one asks for a resync instead of relying on broker
redelivery. The relay's status topic is retained and set to offline by the MQTT last will.

The relay logs in as user ``relay`` with the password in its broker URL (the embedded broker's
secret, or the one ``blink broker-config`` made) under a client id that is random per start and
never published. A payload over ``max_payload`` is not handed to the core: its sender (known from
the topic) is told ``too_large`` and it is logged, at most once a second per sender.

The shell is the only place that reads the clock or the OS's randomness (for the seed and the
client id).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import time
from pathlib import Path
from typing import IO, Any

import aiomqtt

from mqttkit import DEFAULT_MAX_PAYLOAD, NODELAY, RELAY_USER, BrokerAddress, wait_event
from protocol import messages as m
from protocol.codec import encode
from protocol.topics import Topics, valid_id
from relay.core import LogRecord, Publish, RelayConfig, RelayCore

log = logging.getLogger("blink.relay")

MAX_SLEEP_S = 0.05
TOO_LARGE_QUIET_NS = 1_000_000_000


class RelayShell:
    def __init__(self, address: BrokerAddress, topics: Topics | None = None, config: RelayConfig | None = None,
                 seed: int | None = None, log_path: str | Path | None = None,
                 max_payload: int = DEFAULT_MAX_PAYLOAD) -> None:
        self.address = address
        self.topics = topics or Topics()
        self.config = config or RelayConfig()
        self.max_payload = max_payload
        # Unique per start and never published (the status topic names relay_id, not this): nobody
        # can knock the relay off its broker by connecting under its client id.
        self.client_id = f"blink-{self.config.relay_id}-{secrets.token_hex(8)}"
        self._refused: dict[str, int] = {}  # sender -> when it was last told ``too_large`` (ns)
        self.seed = seed if seed is not None else int.from_bytes(os.urandom(8), "big")
        self.core = RelayCore(self.topics, self.config, self.seed)
        self.log_path = Path(log_path) if log_path else None
        self._log_file: IO[str] | None = None
        self._client: aiomqtt.Client | None = None
        self._wake = asyncio.Event()
        self.ready = asyncio.Event()
        self.records: list[dict[str, Any]] | None = None  # set to a list to keep records in memory (tests)

    async def run(self) -> None:
        will = aiomqtt.Will(self.topics.relay_status(self.config.relay_id),
                            encode(m.RelayStatus(self.config.relay_id, False)), qos=1, retain=True)
        if self.log_path:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_file = open(self.log_path, "a", encoding="utf-8")
        try:
            # The relay logs in as "relay" unless the URL names a user: the shipped Mosquitto ACL
            # gives that user the right to publish events and private messages.
            async with aiomqtt.Client(self.address.host, self.address.port, identifier=self.client_id,
                                      username=self.address.username or RELAY_USER, password=self.address.password,
                                      socket_options=NODELAY,
                                      will=will, keepalive=30, max_queued_outgoing_messages=0) as client:
                self._client = client
                for t in self.core.subscriptions():
                    await client.subscribe(t, qos=1)
                now = time.time_ns()
                self._write([LogRecord({"kind": "relay_started", "seed": self.seed, "ts": now,
                                        "order": self.config.order, "relay": self.config.relay_id})])
                await self._emit(self.core.startup(now))
                self.ready.set()
                timer = asyncio.create_task(self._timer_loop())
                try:
                    async for msg in client.messages:
                        payload = msg.payload if isinstance(msg.payload, (bytes, bytearray)) else b""
                        if len(payload) > self.max_payload:
                            out = self._too_large(msg.topic.value, len(payload), time.time_ns())
                        else:
                            out = self.core.handle(msg.topic.value, bytes(payload), time.time_ns())
                        await self._emit(out)
                        self._wake.set()
                finally:
                    timer.cancel()
                    try:
                        await self._emit(self.core.shutdown())
                    except Exception:  # noqa: BLE001 - broker may be gone already
                        pass
        finally:
            if self._log_file:
                self._log_file.close()
                self._log_file = None

    def _too_large(self, topic: str, size: int, now_ns: int) -> list[Any]:
        """A payload over the limit is not decoded. Its sender (known from the topic) is told
        ``too_large`` and it is logged, once a second per sender at most: a flood costs one line."""
        act = self.topics.parse_act(topic)
        client = act[1] if act else self.topics.parse_req(topic)
        key = client or "?"
        if now_ns - self._refused.get(key, -TOO_LARGE_QUIET_NS) < TOO_LARGE_QUIET_NS:
            return []
        if len(self._refused) > 10_000:
            self._refused.clear()
        self._refused[key] = now_ns
        detail = f"{size} bytes > {self.max_payload}"
        out: list[Any] = [LogRecord({"kind": "bad_input", "code": "too_large", "ts": now_ns,
                                     "client": key[:80], "detail": detail})]
        if client and valid_id(client):
            reply = m.ActionRejected(act[0][:16], -1, "too_large", detail) if act else m.RequestRejected("too_large", detail)
            out.append(Publish(self.topics.client(client), reply))
        return out

    async def _timer_loop(self) -> None:
        while True:
            deadline = self.core.next_deadline()
            now = time.time_ns()
            delay = MAX_SLEEP_S if deadline is None else min(MAX_SLEEP_S, max(0.0, (deadline - now) / 1e9))
            self._wake.clear()
            await wait_event(self._wake, delay)
            out = self.core.tick(time.time_ns())
            if out:
                await self._emit(out)

    async def _emit(self, out: list[Any]) -> None:
        client = self._client
        records = []
        for o in out:
            if isinstance(o, Publish):
                if client is None:
                    continue
                payload = o.msg if isinstance(o.msg, (bytes, bytearray)) else encode(o.msg)
                await client.publish(o.topic, payload, qos=o.qos, retain=o.retain)
            elif isinstance(o, LogRecord):
                records.append(o)
        if records:
            self._write(records)

    def _write(self, records: list[LogRecord]) -> None:
        if self.records is not None:
            self.records.extend(r.record for r in records)
        if self._log_file is not None:
            for r in records:
                self._log_file.write(json.dumps(r.record, default=str) + "\n")
            self._log_file.flush()
        for r in records:
            if r.record.get("kind") == "bad_input":
                log.info("bad input: %s", r.record)
