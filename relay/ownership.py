"""Which shards a relay serves, and how its game space is cut into them: the seams between the relay
runtime and whatever hands out shards.

How this works
--------------
Matches live in shards (the shard is a level of every match topic). A relay process serves the shards
it *owns*; each owned shard comes with a **fence**, an integer that only grows from one owner to the
next (a lease's revision in NATS JetStream). The journal of a shard refuses appends carrying a fence
older than the newest it has seen, so a relay that lost a shard cannot write behind its successor's
back.

Two questions are asked of two objects, and the runtime (``relay/runtime.py``) never asks which
kind of relay it is:

**Who holds which shard** -- ``Ownership``:

- ``start()`` begins taking part (for leases: acquiring and renewing); ``close()`` gives up every
  shard promptly (a clean shutdown hands shards over without waiting for a lease to run out).
  ``before_connecting``: a fixed set of shards is taken before the relay connects (each recovered
  first, and a conflict ends the relay before it says anything); leases once it is connected (a
  shard gained is served at once, and its replay runs beside the renewals, never in their way).
- ``owned()`` is what this relay holds right now: ``{shard: fence}``.
- ``subscribe(on_gain, on_loss)``: ``on_gain(shard, fence)`` is awaited when a shard is acquired (the
  relay replays the shard's journal and starts serving it); ``on_loss(shard)`` is awaited when it is
  lost or released (the relay stops serving it at once, without publishing anything more for it).
- ``why_lost(shard)``: the latest reason a shard went, for the operator (None: none recorded).

``StaticOwnership`` is the fixed-set implementation: its shards, fence 0, never lost. The leases in
JetStream's key-value store live beside the NATS code (``relay.cluster``). This module knows no
implementation but the single relay's: the cluster's import it, never the reverse.

**How the game space is cut** -- ``Space``, one of two:

- ``WholeSpace``: a single relay. One shard (``WHOLE``, "0") is the whole game space; it speaks
  under the relay's own id, its core publishes the relay's status, its journal is the caller's (or
  none: in memory). That shard is made with the relay (``ahead``), so that it can be recovered and
  stepped before the relay runs (tests, benchmarks, a host that attaches its journal first).
- ``ShardedSpace`` (``relay/cluster/space.py``, beside the routing it asks): a relay of a cluster.
  ``total`` shards, each speaking as ``shard-{n}`` with its
  own match list and codes that name it (``relay/cluster/shards.py`` routes every request to one); each
  journalled apart, opened when gained and written under the owner's fence. The relay has a status
  of its own beside its shards', and subscribes once to every shard's actions: the connection skips
  the actions of shards it does not serve by their topic bytes (``filtered``).

A shard made ahead journals in its caller's journal: unfenced (its directory lock fences it), never
closed or opened again by the relay, and an error writing it ends the relay. A shard opened when
gained is fenced, closed when lost, and opened again (rebuilt from its journal) after an error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, NotRequired, Protocol, TypedDict

from protocol.match import Order
from protocol.topics import Topics
from relay.core import RelayConfig, RelayCore
from relay.storage import Journal

OnGain = Callable[[str, int], Awaitable[None]]
OnLoss = Callable[[str], Awaitable[None]]
#: Opens the journal of one shard (called in a worker thread).
JournalOpener = Callable[[str], Journal]
WHOLE: Final = "0"  # the shard a single relay serves: every topic of its prefix
#: A broker subscription group: (topic filter, QoS) pairs sent in one SUBSCRIBE.
Group = Sequence[tuple[str, int]]


class Ownership(Protocol):
    @property
    def before_connecting(self) -> bool: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def owned(self) -> Mapping[str, int]: ...

    def subscribe(self, on_gain: OnGain, on_loss: OnLoss) -> None: ...

    def why_lost(self, shard: str) -> str | None: ...


class StaticOwnership:
    """A fixed set of shards, held from ``start`` to ``close`` (fence 0: nobody else can take them)."""

    before_connecting = True  # see the module header

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

    def why_lost(self, shard: str) -> str | None:
        return None  # given up only at close

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


class RelayStarted(TypedDict):
    """The event log's first line of a run: a single relay names its seed, a cluster relay its shard count."""

    kind: Literal["relay_started"]
    ts: int  # wall clock, ns
    relay: str
    order: Order
    seed: NotRequired[int]
    shards_total: NotRequired[int]


@dataclass(frozen=True)
class Presence:
    """How a relay stands on the broker: ``status`` is the retained topic of its online status (its
    last will says it offline there); ``own_status`` the same topic when the relay publishes it
    itself, "" when its one core does; ``groups`` its subscriptions, one SUBSCRIBE a group;
    ``filtered``: the actions of shards it does not serve are dropped unparsed; ``patient``: its
    broker may be a cluster (each CONNECT waits less, and nodes still starting are waited for)."""

    status: str
    own_status: str
    groups: Sequence[Group]
    filtered: bool
    patient: bool


class Space(Protocol):
    """How the game space is cut into shards (see the module header)."""

    #: How many shards the space is cut into (0: not cut, the single relay's whole space).
    @property
    def total(self) -> int: ...

    #: The shards made with the relay, in their caller's journal (see the module header).
    @property
    def ahead(self) -> Sequence[str]: ...

    def refuse(self, shard: str) -> str | None:
        """Why a shard handed over is not one of this space's (None: it is)."""

    def core(self, shard: str, topics: Topics, config: RelayConfig, seed: int) -> RelayCore:
        """A fresh core for ``shard`` of a relay with these topics and configuration (``seed``: the
        relay's for a shard made ahead, a fresh one for a shard gained)."""

    def open(self, shard: str) -> Journal | None:
        """The shard's journal (blocking: called in a worker thread; None: in memory)."""

    def check(self, shard: str, prefix: str) -> Callable[[RelayCore], None] | None:
        """What refuses the shard's recovered core before anything is replayed (None: nothing)."""

    def route(self, topic: str, payload: bytes, prefix: str) -> str:
        """The shard a message on a topic of ``prefix`` is for: a shard's name, ``shards.KNOWN`` (each shard whose core knows
        the client) or "" (none)."""

    def tag(self, shard: str) -> str | None:
        """The shard's name in the event log and to the operator (None: unnamed, the whole space)."""

    def presence(self, relay_id: str, topics: Topics) -> Presence:
        """How the relay with this id and topics stands on the broker."""

    def started(self, relay_id: str, seed: int, order: Order, ts: int) -> RelayStarted:
        """The event log's first line of a run."""


class WholeSpace:
    """A single relay's space: one shard, the whole of it, journalled in ``journal`` (None: in memory)."""

    total = 0
    ahead: Sequence[str] = (WHOLE,)

    def __init__(self, journal: Journal | None = None) -> None:
        self.journal = journal

    def refuse(self, shard: str) -> str | None:
        return None if shard == WHOLE else f"a single relay serves shard {WHOLE} alone, not {shard!r}"

    def core(self, shard: str, topics: Topics, config: RelayConfig, seed: int) -> RelayCore:
        return RelayCore(topics, config, seed)

    def open(self, shard: str) -> Journal | None:
        return self.journal

    def check(self, shard: str, prefix: str) -> Callable[[RelayCore], None] | None:
        return None  # the journal's seed and configuration win: its matches were made with them

    def route(self, topic: str, payload: bytes, prefix: str) -> str:
        return WHOLE

    def tag(self, shard: str) -> str | None:
        return None

    def presence(self, relay_id: str, topics: Topics) -> Presence:
        # QoS 1, one SUBSCRIBE: the core's subscriptions (``RelayCore.subscriptions``).
        return Presence(topics.relay_status(relay_id), "", [[(topics.req_all, 1), (topics.act_all, 1)]],
                        filtered=False, patient=False)

    def started(self, relay_id: str, seed: int, order: Order, ts: int) -> RelayStarted:
        return {"kind": "relay_started", "seed": seed, "ts": ts, "order": order, "relay": relay_id}


__all__ = ["Group", "JournalOpener", "OnGain", "OnLoss", "Ownership", "Presence", "RelayStarted", "Space",
           "StaticOwnership", "WHOLE", "WholeSpace"]
