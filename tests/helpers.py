"""Small helpers the tests share: a seeded chance and an accepted result for the rule engines, and
waits on a condition with a generous deadline for everything that talks to a broker or a process."""

from __future__ import annotations

import asyncio
import random
import subprocess
import time
from typing import Any, Awaitable, Callable, TypeVar

from protocol.events import TypedEvent, event_data, wire_name
from protocol.records import plain
from protocol.rules.base import Accepted


class RandomChance:
    """Chance from a seeded ``random.Random``: the tests' stand-in for the relay's generator."""

    def __init__(self, seed: int) -> None:
        self._r = random.Random(seed)

    def randbelow(self, n: int) -> int:
        return self._r.randrange(n)


def ok(result: Any) -> Any:
    """The accepted result of an engine call (the test fails with the rejection otherwise)."""
    assert isinstance(result, Accepted), result
    return result


def maps(events: "tuple[TypedEvent, ...] | list[TypedEvent]") -> tuple[dict[str, Any], ...]:
    """Engine events as the maps the relay's wire carries them in (seats as ints, the wire name under
    ``type``): what the rule tests compare, so they hold the wire form too."""
    return tuple({"type": wire_name(e), **plain(event_data(e))} for e in events)


# --- waiting on a condition -------------------------------------------------------------------------
# Tests wait for what they need, never for a fixed time: a busy machine makes everything slower,
# so deadlines are generous (they only bound a hang) and the poll is short.

T = TypeVar("T")

DEADLINE_S = 60.0


def wait_until(predicate: Callable[[], T], timeout: float = DEADLINE_S, what: str | None = None,
               poll_s: float = 0.02) -> T:
    """The first true value of ``predicate()``; fails the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or predicate}")
        time.sleep(poll_s)


async def eventually(predicate: Callable[[], T], timeout: float = DEADLINE_S, what: str | None = None,
                     changed: Callable[[float], Awaitable[Any]] | None = None, poll_s: float = 0.02) -> T:
    """The async ``wait_until``: between checks it awaits ``changed(seconds)`` (e.g. a player's
    ``wait_change``, which returns early when a message arrives), or a short poll."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or predicate}")
        if changed is not None:
            await changed(min(left, 0.25))
        else:
            await asyncio.sleep(min(left, poll_s))


def stop_process(proc: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """Terminate a process a test started, killing it if it does not go within ``timeout``."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def quiet_error_cb(_exc: Exception) -> None:
    """nats-py's ``error_cb`` for a connection a test expects to be refused."""


async def collect_messages(client: Any, into: list[tuple[str, bytes]]) -> None:
    """Append every (topic, payload) an aiomqtt client receives until its connection ends."""
    import aiomqtt

    try:
        async for msg in client.messages:
            payload = msg.payload if isinstance(msg.payload, (bytes, bytearray)) else b""
            into.append((msg.topic.value, bytes(payload)))
    except aiomqtt.MqttError:
        pass
