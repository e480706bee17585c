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

``Deadlines`` is a heap of (time, code, kind) for the core's own housekeeping (a waiting match
expiring, a finished match leaving memory). Entries are checked when they come due rather than
removed when they become moot, so scheduling is O(log n); when moot entries outnumber the meant
ones the core rebuilds the heap from its matches (amortised O(1) a change), so moot entries never
pile up for the length of a waiting match's lifetime.

Nothing here reads a clock; every object pickles (the journal snapshots the core).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass, field

NS = 1_000_000_000


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


class Deadlines:
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
