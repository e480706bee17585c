"""What every part of the judge shares: the matches, their indexes, the settings, the clocks' offset.

How this works
--------------
The judge is one object to the outside (``relay.core.RelayCore``) and six parts inside (lobby,
referee, remembered answers, gate, deadlines, events; housekeeping ties them together). The
parts keep their own state and share only what is here: the matches by code and the two indexes
kept up to date at every change of status (waiting, live; the live ones in fair order), who sits
where, the counters, the fair-order scheduler, and the offset of the wall clock for the call being
handled. A ``Tables`` is plain data: it imports nothing of the parts, so they form no import circle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from protocol.rules import AnyGame
from protocol.topics import Topics
from relay.fair import FairOrder
from relay.model import Match, Order, RelayConfig

ORDERS: tuple[Order, ...] = ("arrival", "fair")
NS = 1_000_000_000
DETAIL_CHARS = 200  # a rejection's detail is cut to this: it may quote the (hostile) input
HOUSEKEEPING_PER_TICK = 1_000  # expiries and idle clients handled per tick at most (the rest next tick)


@dataclass
class Tables:
    topics: Topics
    config: RelayConfig
    seed: int
    games: Mapping[str, AnyGame]
    fair: FairOrder
    matches: dict[str, Match] = field(default_factory=dict)
    client_match: dict[str, str] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    waiting: dict[str, Match] = field(default_factory=dict)  # waiting for players, in creation order (the match list)
    live: dict[str, Match] = field(default_factory=dict)  # playing or between games
    fair_live: dict[str, None] = field(default_factory=dict)  # the live matches in fair order (they are probed)
    #: Wall clock minus monotonic clock, for the call being handled (it stamps events, snapshots, pongs).
    wall_offset: int = 0
    #: Set while a journal is replayed: outputs-only messages are not built (``relay/core.py``'s Recovery).
    replaying: bool = False
