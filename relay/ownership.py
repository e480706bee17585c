"""Which shards a relay serves: the seam between the relay and whatever hands out shards.

How this works
--------------
Matches live in shards (the shard is a level of every match topic). A relay process serves the shards
it *owns*; each owned shard comes with a **fence**, an integer that only grows from one owner to the
next (a lease's revision in NATS JetStream). The journal of a shard refuses appends carrying a fence
older than the newest it has seen, so a relay that lost a shard cannot write behind its successor's
back.

``Ownership`` is the interface the relay programs against:

- ``start()`` begins taking part (for leases: acquiring and renewing); ``close()`` gives up every
  shard promptly (a clean shutdown hands shards over without waiting for a lease to run out).
- ``owned()`` is what this relay holds right now: ``{shard: fence}``.
- ``subscribe(on_gain, on_loss)``: ``on_gain(shard, fence)`` is awaited when a shard is acquired (the
  relay replays the shard's journal and starts serving it); ``on_loss(shard)`` is awaited when it is
  lost or released (the relay stops serving it at once, without publishing anything more for it).

``StaticOwnership`` is the single-relay (and test) implementation: a fixed set of shards, fence 0,
never lost. The cluster implementation (leases in JetStream's key-value store) lives beside the NATS
code.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Protocol

OnGain = Callable[[str, int], Awaitable[None]]
OnLoss = Callable[[str], Awaitable[None]]


class Ownership(Protocol):
    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def owned(self) -> Mapping[str, int]: ...

    def subscribe(self, on_gain: OnGain, on_loss: OnLoss) -> None: ...


class StaticOwnership:
    """A fixed set of shards, held from ``start`` to ``close`` (fence 0: nobody else can take them)."""

    def __init__(self, shards: Iterable[str]) -> None:
        self._shards = list(dict.fromkeys(shards))
        self._held: dict[str, int] = {}
        self._gain: list[OnGain] = []
        self._loss: list[OnLoss] = []

    def subscribe(self, on_gain: OnGain, on_loss: OnLoss) -> None:
        self._gain.append(on_gain)
        self._loss.append(on_loss)

    def owned(self) -> Mapping[str, int]:
        return dict(self._held)

    async def start(self) -> None:
        for shard in self._shards:
            if shard in self._held:
                continue
            self._held[shard] = 0
            for cb in self._gain:
                await cb(shard, 0)

    async def close(self) -> None:
        for shard in list(self._held):
            del self._held[shard]
            for cb in self._loss:
                await cb(shard)


__all__ = ["OnGain", "OnLoss", "Ownership", "StaticOwnership"]
