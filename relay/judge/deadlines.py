"""Deadlines: one heap of every live match's earliest deadline, one of housekeeping's; when to tick next.

How this works
--------------
Every live match's earliest deadline (its game timers, a held play's release, the next game, a
coalesced snapshot) sits on one heap (``Match.wake_at``; an entry that differs from it is moot and
skipped when popped), so ``tick`` and ``next_deadline`` visit only the matches that are due, never
all of them. Housekeeping's deadlines (a waiting match expires, a finished one leaves memory, a
dropped seat's grace ends) sit on another (``Match.housekeep_at``). Both heaps are rebuilt from the
matches when the moot entries are the majority.
"""

from __future__ import annotations

import heapq
from typing import Mapping, TypedDict, cast

from relay.judge.tables import Tables
from relay.limits import DeadlineHeap
from relay.model import Match


class DeadlinesRecord(TypedDict):
    """Both heaps in a relay snapshot, each as its entries in heap order."""

    wake: list[list[object]]
    housekeeping: list[list[object]]


class Deadlines:
    def __init__(self, t: Tables) -> None:
        self.t = t
        #: Every live match's earliest deadline (``Match.wake_at``), keyed by the monotonic clock.
        self.wake = DeadlineHeap()
        self.housekeeping = DeadlineHeap()

    def wake_up(self, match: Match) -> None:
        """Put the match's earliest deadline (its timers, the next game, a held play's release, a
        coalesced snapshot) on the heap, if it changed. One live entry per match: ``wake_at``."""
        at: int | None = None
        if match.status in ("playing", "between"):
            times = [d for d, _ in match.timers.values()] if match.timers else []
            if match.next_game_at is not None:
                times.append(match.next_game_at)
            if match.snapshot_due is not None:
                times.append(match.snapshot_due)
            if self.t.fair.held.get(match.code):  # (an arrival-order match never holds a play)
                held = self.t.fair.deadline(match.code, probing=False)
                if held is not None:
                    times.append(held)
            at = min(times) if times else None
        if at is not None and at != match.wake_at:
            self.wake.add(at, match.code, "wake")
            if len(self.wake) > 2 * len(self.t.live) + 64:
                self.wake.rebuild([(x.wake_at, x.code, "wake") for x in self.t.live.values()
                                    if x.wake_at is not None and x is not match] + [(at, match.code, "wake")])
        match.wake_at = at

    def to_record(self) -> DeadlinesRecord:
        """Both heaps as plain data (a relay snapshot's)."""
        return {"wake": self.wake.to_record(), "housekeeping": self.housekeeping.to_record()}

    def load_record(self, snapshot: Mapping[str, object]) -> None:
        """Take the heaps ``to_record`` wrote (the snapshot holds them as written)."""
        record = cast(DeadlinesRecord, snapshot)
        self.wake = DeadlineHeap.from_record(record["wake"])
        self.housekeeping = DeadlineHeap.from_record(record["housekeeping"])

    def schedule(self, match: Match, at_ns: int) -> None:
        match.housekeep_at = at_ns
        self.housekeeping.add(at_ns, match.code, match.status)
        self.compact_housekeeping()

    def compact_housekeeping(self) -> None:
        """Drop the moot deadlines (started, closed, rematched matches) once they are the majority."""
        if len(self.housekeeping) > 2 * len(self.t.matches) + 64:
            self.housekeeping.rebuild([(x.housekeep_at, x.code, x.status) for x in self.t.matches.values()
                                        if x.housekeep_at is not None])

    def next_deadline(self) -> int | None:
        """When ``tick`` should run next (monotonic ns), or None. O(1) but for dropping moot heap tops."""
        deadlines: list[int] = []
        housekeeping = self.housekeeping.next()
        if housekeeping is not None:
            deadlines.append(housekeeping)
        heap = self.wake.heap
        while heap:
            at, code, _ = heap[0]
            match = self.t.live.get(code)
            if match is not None and match.wake_at == at:
                deadlines.append(at)
                break
            heapq.heappop(heap)  # moot
        if self.t.fair_live:
            deadlines.append(self.t.fair.next_probe_ns())
        return min(deadlines) if deadlines else None
