"""A player's side of sealed play: its key, the relay's keys taken from the status the pin vouches for,
and the one line a refusal is said in.

How this works
--------------
A URL with ``?pin=PIN`` (``mqttkit.BrokerAddress.pin``, as ``blink serve --seal`` prints it) makes
every connection of a player sealed (``client/net.py``): ``new_seal(pin)`` draws the player's X25519
key (fresh per process; its client id is the key's hash) and ``relay_keys`` reads the relays'
retained statuses until one whose keys hash to the pin verifies -- from the URL, never from the
broker alone. Without one it says why in a line (``SealProblem``): no relay with that pin, a relay
that does not seal (no downgrade to plain play), or only relays whose keys are another pin's.

``Refusals`` words what the connection drops: one log line per reason and second, so a flood of
forgeries costs a line a second, and a count by reason.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter

from mqttkit import BrokerAddress
from protocol.seal import ClientSeal, SealError
from protocol.topics import Topics
from client import ClientError

log = logging.getLogger("blink.net")

#: How long a sealed connection waits for the relay's status before it says there is none: a
#: retained message comes at once; this is the broker with no relay (or the relay just restarting).
KEYS_WAIT_S = 10.0
QUIET_NS = 1_000_000_000


class SealProblem(ClientError, ConnectionError):
    """A sealed connection cannot start: one line that says why."""


def new_seal(pin: str) -> ClientSeal:
    """A fresh key for one player, trusting the relay with this pin."""
    return ClientSeal(os.urandom(32), pin)


class Refusals:
    """What a sealed connection dropped: counted by reason, said once a second per reason."""

    def __init__(self, who: str) -> None:
        self.who = who
        self.count: Counter[str] = Counter()
        self._said: dict[str, tuple[int, int]] = {}

    def drop(self, exc: SealError, topic: str) -> None:
        self.count[exc.reason] += 1
        now = time.monotonic_ns()
        last = self._said.get(exc.reason)
        if last is not None and now - last[0] < QUIET_NS:
            self._said[exc.reason] = (last[0], last[1] + 1)
            return
        self._said[exc.reason] = (now, 0)
        more = f" ({last[1]} more since the last line)" if last and last[1] else ""
        log.warning("%s: dropped a message on %s: %s%s", self.who, topic[:160], exc, more)


def is_status_topic(topic: str, topics: Topics) -> bool:
    """Is this a relay's status topic (``relay/ID/status``)?"""
    head = f"{topics.prefix}/relay/"
    return topic.startswith(head) and topic.endswith("/status") and topic.count("/") == head.count("/") + 1


async def relay_keys(address: BrokerAddress, topics: Topics, seal: ClientSeal, timeout: float = KEYS_WAIT_S) -> bytes:
    """Key ``seal`` from the status of the relay ``address.pin`` names, on a short connection of its
    own; the status's body. ``SealProblem`` if none comes within ``timeout``; what the network
    raises (``aiomqtt.MqttError``) if the broker is not there."""
    return (await pinned_status(address, topics, seal, timeout))[2]


async def pinned_status(address: BrokerAddress, topics: Topics, seal: ClientSeal,
                        timeout: float = KEYS_WAIT_S) -> tuple[str, bytes, bytes]:
    """``relay_keys``, giving the status as it came too: (topic, sealed payload, body) -- what keys
    other players' seals (``ClientSeal.open_status``) without each asking the broker."""
    import aiomqtt

    heard: Counter[str] = Counter()
    async with aiomqtt.Client(address.host, address.port, identifier=f"k{os.urandom(16).hex()}",
                              username=address.username, password=address.password,
                              tls_context=address.ssl_context()) as client:
        await client.subscribe(topics.relay_status("+"), qos=0)
        try:
            async with asyncio.timeout(timeout):
                async for message in client.messages:
                    payload = bytes(message.payload) if isinstance(message.payload, (bytes, bytearray)) else b""
                    if not payload:
                        continue
                    try:
                        body, _ = seal.open_status(message.topic.value, payload)
                    except SealError as exc:
                        heard[exc.reason] += 1
                        continue
                    return message.topic.value, payload, body
        except TimeoutError:
            pass
    raise SealProblem(no_relay_with_pin(address, topics, heard))


def no_relay_with_pin(address: BrokerAddress, topics: Topics, heard: Counter[str]) -> str:
    """Why no relay's status could be taken, in one line."""
    where = f"on {address.url}"
    if heard["wrong_pin"]:
        return (f"the relay {where} is not the one the pin names (its keys hash to another pin): check the URL "
                "`blink serve --seal` printed")
    if heard["unsealed"] or heard["cut"]:
        return (f"the relay {where} does not seal its messages (or someone overwrote its status), and the URL's pin "
                "asks for a sealed one: start it with `blink serve --seal`, or leave ?pin= out of the URL")
    if heard["forged"] or heard["stale"]:
        return f"no status {where} verifies with the pin's keys (a forged or an old one): the relay is not online"
    return (f"no relay is online {where} (none announced itself on {topics.relay_status('+')}): start one with "
            "`blink serve --seal --broker URL` and use the URL it prints")


__all__ = ["KEYS_WAIT_S", "Refusals", "SealProblem", "is_status_topic", "new_seal", "no_relay_with_pin", "pinned_status",
           "relay_keys"]
