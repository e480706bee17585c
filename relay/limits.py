"""Limits the relay's core enforces on every client: rates, bursts, idleness -- pure, time as input.

How this works
--------------
``TokenBucket`` is the classic limiter: it refills at ``rate`` tokens a second up to ``burst``;
a message takes one token or is refused. The rate and burst are set far above what a person (or
the project's bots) ever sends, so only a flood meets them. A refused message starts a *burst of
refusals*: the first is answered (``rate_limited``) and logged, the rest are dropped silently and
only counted, until the sender has kept under the rate long enough for the bucket to fill up again
(a steady flood still gets its trickle of ``rate`` messages a second through, but no new answer). Refilling is computed from the time
passed between calls, so no timer is needed and a bucket that is not used costs nothing.

``Clients`` remembers when each client id was last heard from, in an ordered dict kept in
last-seen order (``touch`` moves a client to the end), so the idle ones are always at the front:
``idle(now_ns)`` pops exactly the clients idle for longer than ``idle_ns`` and stops at the first
that is not -- each client is visited once per idle period, never in a scan of everyone. The core
drops every piece of state it keeps for a client it is handed back (or re-touches one still seated
in a running match).

``Quiet`` decides which refusals are worth a log line: the first of a kind from one sender, and
then again only after that sender has been refused nothing of that kind for ``quiet_ns`` -- one
line per burst, not one per message; the others are counted.

``DeadlineHeap`` is a heap of (time, code, kind) for the core's own housekeeping (a waiting match
expiring, a finished match leaving memory). Entries are checked when they come due rather than
removed when they become moot, so scheduling is O(log n); when moot entries outnumber the meant
ones the core rebuilds the heap from its matches (amortised O(1) a change), so moot entries never
pile up for the length of a waiting match's lifetime.

``Intake`` is the same per-client limit applied *before* anything is decoded, where messages
enter: in the embedded broker (``relay/embedded/gate.py``, at the core's own rates: a flooder's excess
never reaches the relay) and in the relay's runtime as each message arrives from the broker
(``relay/runtime.py``; on Mosquitto, which cannot limit a client's rate, this is the first place
that can). A topic's last level is its sender's client id (``.../lobby/req/C``,
``.../m/G/CODE/act/C``; the broker's ACL makes sure of that), the level before it says whether it
is a request or an action, so ``admit`` costs a ``rpartition``, a dict lookup and a token bucket.
The intake's buckets are stricter than the core's (``StrictBucket``): a message refused for its rate costs its sender a
token all the same (down to ``-burst``), so a sender that keeps on above its rate gets *nothing*
through, not a trickle of ``rate`` a second, until it slows down below the rate long enough to
earn its tokens back (at most ``2 x burst / rate`` seconds once it stops). A flood then costs the
relay its first burst and nothing more -- the trickle was what still cost everyone else (each
admitted message is decoded, judged, answered and delivered); a client under its rate, as every
player is (a third of it at most, measured), never meets the difference.
A sender at the floor (``-burst``) cannot be owed a token for ``(burst + 1) / rate`` whatever it
sends: ``hold_ns`` says so after a refusal, and a reader may then drop that sender's messages
unread and charge them in one go (``refuse``; ``refuse_more`` for the rest of one read), exactly
as refusing them one by one would (the relay's connection on Mosquitto does: ``relay/runtime.py``).
It keeps at most about ``max_clients`` buckets: past that, the buckets that have refilled (their
clients are under the rate, so forgetting them changes nothing) are dropped, all at once, and the
next clean-up waits until the table has doubled again (amortised O(1) a message).

Nothing here reads a clock; every object writes its state as plain data and reads it back
(``to_record``/``from_record``: the journal's snapshot of the core, ``relay/storage/snapshot.py``).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence, TypedDict

from relay.model import RelayConfig

NS = 1_000_000_000
#: The relay's own intake lets a client through at this many times the core's rates, so that the
#: core still sees a flood begin and answers it (``rate_limited``, once per burst) while the bulk
#: of the flood is dropped undecoded before it.
RELAY_INTAKE_SLACK = 1.5


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up; starts full."""

    __slots__ = ("rate", "burst", "tokens", "at_ns", "refusing", "dropped")

    def __init__(self, rate: float, burst: float, now_ns: int) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.at_ns = now_ns
        self.refusing = False  # inside a burst of refusals (its first one has been answered)
        self.dropped = 0  # refused in the current burst

    def __getstate__(self) -> tuple[float, float, float, int, bool, int]:
        return (self.rate, self.burst, self.tokens, self.at_ns, self.refusing, self.dropped)

    def __setstate__(self, state: tuple[float, float, float, int, bool, int]) -> None:
        self.rate, self.burst, self.tokens, self.at_ns, self.refusing, self.dropped = state

    def take(self, now_ns: int) -> bool:
        """Take a token: True if the message may pass. Time going backwards refills nothing."""
        if now_ns > self.at_ns:
            self.tokens = min(self.burst, self.tokens + (now_ns - self.at_ns) * self.rate / NS)
            self.at_ns = now_ns
            if self.tokens >= self.burst:
                # Full again: the sender has kept under the rate long enough, the burst is over. (Not
                # on every passing message: a steady flood gets a token each 1/rate s, and would
                # otherwise start a new burst -- and a new answer -- each time.)
                self.refusing = False
                self.dropped = 0
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        self.dropped += 1
        return False

    def first_refusal(self) -> bool:
        """After a refused ``take``: is this the first refusal of its burst (answer and log it)?"""
        if self.refusing:
            return False
        self.refusing = True
        return True

    def to_record(self) -> list[object]:
        """The bucket as plain data (a relay snapshot's), whether it is strict included."""
        return [self.rate, self.burst, self.tokens, self.at_ns, self.refusing, self.dropped,
                type(self) is StrictBucket]

    @staticmethod
    def from_record(record: Sequence[Any]) -> TokenBucket:
        """The bucket ``to_record`` wrote (a ``StrictBucket`` if it was one)."""
        bucket = (StrictBucket if record[6] else TokenBucket)(record[0], record[1], 0)
        bucket.tokens, bucket.at_ns, bucket.refusing, bucket.dropped = record[2], record[3], record[4], record[5]
        return bucket


class StrictBucket(TokenBucket):
    """A ``TokenBucket`` where a refused message costs a token too (down to ``-burst``): a sender
    above its rate gets nothing through until it has kept under the rate long enough to be owed
    a token again (the intake's buckets; see the module doc)."""

    __slots__ = ()

    def take(self, now_ns: int) -> bool:
        if super().take(now_ns):
            return True
        self.tokens = max(-self.burst, self.tokens - 1.0)
        return False


class QuietRecord(TypedDict):
    """A ``Quiet`` as plain data (a relay snapshot's): its ``last`` with each pair as a list."""

    quiet_ns: int
    last: dict[str, dict[str, list[int]]]


@dataclass
class Quiet:
    """One log line per burst of refusals of one kind from one sender (see the module doc)."""

    quiet_ns: int = NS
    #: sender -> kind -> (time of the last refusal, refusals silenced since the last line)
    last: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)

    def log(self, sender: str, kind: str, now_ns: int) -> int | None:
        """A refusal happened: None to stay silent, or the number of refusals of this kind from
        this sender that were silenced since the last line (0 for a new burst) -- log one line."""
        kinds = self.last.setdefault(sender, {})
        before = kinds.get(kind)
        if before is not None and now_ns - before[0] < self.quiet_ns:
            kinds[kind] = (now_ns, before[1] + 1)
            return None
        kinds[kind] = (now_ns, 0)
        return before[1] if before is not None else 0

    def forget(self, sender: str) -> None:
        self.last.pop(sender, None)

    def to_record(self) -> QuietRecord:
        return {"quiet_ns": self.quiet_ns,
                "last": {s: {k: list(v) for k, v in kinds.items()} for s, kinds in self.last.items()}}

    @classmethod
    def from_record(cls, record: QuietRecord) -> Quiet:
        return cls(record["quiet_ns"], {s: {k: (v[0], v[1]) for k, v in kinds.items()}
                                        for s, kinds in record["last"].items()})


class Clients:
    """Client ids by last time heard from, oldest first."""

    def __init__(self, idle_ns: int) -> None:
        self.idle_ns = idle_ns
        self.seen: OrderedDict[str, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self.seen)

    def touch(self, client: str, now_ns: int) -> None:
        self.seen[client] = now_ns
        self.seen.move_to_end(client)

    def forget(self, client: str) -> None:
        self.seen.pop(client, None)

    def idle(self, now_ns: int, limit: int = 1_000) -> list[str]:
        """Pop and return the clients idle for longer than ``idle_ns`` (at most ``limit`` a call,
        so one call stays short; the rest come out on the next)."""
        gone: list[str] = []
        while self.seen and len(gone) < limit:
            client, at = next(iter(self.seen.items()))
            if now_ns - at <= self.idle_ns:
                break
            del self.seen[client]
            gone.append(client)
        return gone

    def to_record(self) -> dict[str, object]:
        return {"idle_ns": self.idle_ns, "seen": [[c, t] for c, t in self.seen.items()]}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Clients:
        clients = cls(record["idle_ns"])
        clients.seen = OrderedDict((c, t) for c, t in record["seen"])
        return clients


class DeadlineHeap:
    """A heap of housekeeping deadlines: (time, match code, kind)."""

    def __init__(self) -> None:
        self.heap: list[tuple[int, str, str]] = []

    def __len__(self) -> int:
        return len(self.heap)

    def add(self, at_ns: int, code: str, kind: str) -> None:
        heapq.heappush(self.heap, (at_ns, code, kind))

    def rebuild(self, entries: list[tuple[int, str, str]]) -> None:
        """Replace the heap by ``entries`` (the ones still meant): drops the moot ones at once."""
        self.heap = list(entries)
        heapq.heapify(self.heap)

    def next(self) -> int | None:
        return self.heap[0][0] if self.heap else None

    def due(self, now_ns: int, limit: int = 1_000) -> list[tuple[int, str, str]]:
        """Pop the entries due by ``now_ns`` (at most ``limit`` a call), earliest first."""
        out: list[tuple[int, str, str]] = []
        while self.heap and self.heap[0][0] <= now_ns and len(out) < limit:
            out.append(heapq.heappop(self.heap))
        return out

    def to_record(self) -> list[list[object]]:
        return [list(e) for e in self.heap]

    @classmethod
    def from_record(cls, record: Sequence[Sequence[Any]]) -> DeadlineHeap:
        heap = cls()
        heap.heap = [(e[0], e[1], e[2]) for e in record]  # (already a heap: written in its order)
        return heap


class Intake:
    """Per-client request and action buckets, keyed by the client id a topic ends with, checked
    before a message is decoded (see the module doc)."""

    def __init__(self, act_rate: float, act_burst: float, req_rate: float, req_burst: float,
                 max_clients: int = 50_000, tell_ns: int = NS) -> None:
        self.act = (act_rate, act_burst)
        self.req = (req_rate, req_burst)
        self.max_clients = max_clients
        self.tell_ns = tell_ns
        self.buckets: dict[str, TokenBucket] = {}  # "a/C" or "r/C" -> bucket (a StrictBucket)
        self.told: dict[str, int] = {}  # same keys -> when the sender was last told it is limited
        self.admitted = 0
        self.dropped = 0
        self._prune_at = max_clients
        self._refused: tuple[str, TokenBucket] = ("", TokenBucket(0.0, 0.0, 0))  # the last refusal's key, bucket

    @classmethod
    def for_config(cls, config: RelayConfig, slack: float = 1.0, burst_s: float | None = None,
                   min_burst: float = 0.0) -> Intake:
        """The core's rates (``config``), times ``slack``. With ``burst_s``, each burst is at most
        what the rate gives in ``burst_s`` seconds (but at least ``min_burst``, and never more than
        the core's): the embedded broker's gate lets a flooder's first burst through smaller."""

        def burst(rate: float, core: float) -> float:
            if burst_s is None:
                return core
            return min(core, max(min_burst, rate * burst_s))

        act_rate, req_rate = config.act_rate * slack, config.req_rate * slack
        return cls(act_rate, burst(act_rate, config.act_burst * slack), req_rate,
                   burst(req_rate, config.req_burst * slack), config.max_clients)

    @staticmethod
    def key(topic: str) -> str | None:
        """"a/C" for an action topic, "r/C" for a request topic, None for any other."""
        head, _, client = topic.rpartition("/")
        if head.endswith("/act"):
            return "a/" + client
        if head.endswith("/req"):
            return "r/" + client
        return None

    def admit(self, topic: str, now_ns: int) -> bool:
        """May this message go on to be decoded? Topics that are neither a request nor an action
        pass (whoever reads them refuses them). After a refusal, ``first_refusal`` and ``tell``
        are about the refused sender and kind."""
        key = self.key(topic)
        if key is None:
            return True
        bucket = self.buckets.get(key)
        if bucket is None:
            if len(self.buckets) >= self._prune_at:
                self._prune(now_ns)
            rate, burst = self.act if key[0] == "a" else self.req
            bucket = self.buckets[key] = StrictBucket(rate, burst, now_ns)
        if bucket.take(now_ns):
            self.admitted += 1
            return True
        self.dropped += 1
        self._refused = (key, bucket)
        return False

    def first_refusal(self) -> bool:
        """After a refused ``admit``: the first refusal of this sender's burst (log it)?"""
        return self._refused[1].first_refusal()

    def refuse_more(self, n: int) -> None:
        """After a refused ``admit``: ``n`` more messages of the same sender and kind arrived at
        the same instant -- refused too (no time has passed, so nothing has refilled), counted and
        charged as ``n`` refused ``admit`` calls would be, in one go."""
        if n <= 0:
            return
        bucket = self._refused[1]
        bucket.tokens = max(-bucket.burst, bucket.tokens - n)
        bucket.dropped += n
        self.dropped += n

    def hold_ns(self) -> int:
        """After a refused ``admit``: how long from then every message of the refused sender and
        kind will be refused whatever it sends (0: its bucket is not at its floor, ``-burst``).
        At the floor, only refilling can give it a token back, and that takes ``(1 + burst) /
        rate``: until then a reader may drop its messages without asking (``refuse``)."""
        bucket = self._refused[1]
        if bucket.rate <= 0 or bucket.tokens > -bucket.burst + 1e-9:
            return 0
        return int((bucket.burst + 0.5) / bucket.rate * NS)  # (+ 0.5, not 1: a margin for the reader's clock)

    def refuse(self, topic: str, n: int, now_ns: int) -> int:
        """``n`` messages on ``topic`` arrived by ``now_ns`` within a ``hold_ns`` its bucket was
        given: refused (they would have been), charged and counted as ``n`` refused ``admit``
        calls; returns the bucket's new ``hold_ns`` (0: let the next ones be admitted one by one)."""
        key = self.key(topic)
        bucket = self.buckets.get(key) if key is not None else None
        if key is None or bucket is None or n <= 0:
            return 0
        if now_ns > bucket.at_ns:
            bucket.tokens = min(bucket.burst, bucket.tokens + (now_ns - bucket.at_ns) * bucket.rate / NS)
            bucket.at_ns = now_ns
        self._refused = (key, bucket)
        self.refuse_more(n)
        return self.hold_ns()

    def tell(self, now_ns: int) -> bool:
        """After a refused ``admit``: should its sender be told now (at most once per ``tell_ns``)?"""
        key = self._refused[0]
        last = self.told.get(key)
        if last is not None and now_ns - last < self.tell_ns:
            return False
        self.told[key] = now_ns
        return True

    def _prune(self, now_ns: int) -> None:
        keep: dict[str, TokenBucket] = {}
        for key, b in self.buckets.items():
            if b.tokens + max(0, now_ns - b.at_ns) * b.rate / NS < b.burst:
                keep[key] = b  # still being limited: forgetting it would hand the sender a fresh burst
        self.buckets = keep
        self.told = {k: v for k, v in self.told.items() if k in keep}
        self._prune_at = max(self.max_clients, 2 * len(keep))
