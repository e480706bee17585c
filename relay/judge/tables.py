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
from typing import Mapping, TypedDict, cast

from protocol.rules import AnyGame
from protocol.topics import Topics
from relay.fair import FairOrder
from relay.model import Decode, Encode, Match, RelayConfig

NS = 1_000_000_000
DETAIL_CHARS = 200  # a rejection's detail is cut to this: it may quote the (hostile) input
HOUSEKEEPING_PER_TICK = 1_000  # expiries and idle clients handled per tick at most (the rest next tick)


class LimitedStats(TypedDict):
    dropped: int  # messages dropped by a rate limit
    bursts: int  # times a client began to be refused


class RelayStats(TypedDict):
    """The judge's counters: plays accepted, rejections by code, what the rate limits dropped."""

    accepted: int
    rejected: dict[str, int]
    limited: LimitedStats


def new_stats() -> RelayStats:
    return {"accepted": 0, "rejected": {}, "limited": {"dropped": 0, "bursts": 0}}


class TablesRecord(TypedDict):
    """What ``Tables`` writes into a relay snapshot (``to_record``): each match's record, the
    indexes by code, who sits where, the counters (through the snapshot codec) and the clocks' offset."""

    wall_offset: int
    matches: list[dict[str, object]]
    client_match: dict[str, str]
    stats: object
    waiting: list[str]
    live: list[str]
    fair_live: list[str]


@dataclass
class Tables:
    topics: Topics
    config: RelayConfig
    seed: int
    games: Mapping[str, AnyGame]
    fair: FairOrder
    matches: dict[str, Match] = field(default_factory=dict)
    client_match: dict[str, str] = field(default_factory=dict)
    stats: RelayStats = field(default_factory=new_stats)
    waiting: dict[str, Match] = field(default_factory=dict)  # waiting for players, in creation order (the match list)
    live: dict[str, Match] = field(default_factory=dict)  # playing or between games
    fair_live: dict[str, None] = field(default_factory=dict)  # the live matches in fair order (they are probed)
    #: Wall clock minus monotonic clock, for the call being handled (it stamps events, snapshots, pongs).
    wall_offset: int = 0
    #: Set while a journal is replayed: outputs-only messages are not built (``relay/core.py``'s Recovery).
    replaying: bool = False

    def to_record(self, enc: Encode) -> TablesRecord:
        """The matches, their indexes and the counters as plain data (a relay snapshot's); each
        match's values go through ``enc``, then the counters."""
        return {
            "wall_offset": self.wall_offset,
            "matches": [x.to_record(enc) for x in self.matches.values()],
            "client_match": self.client_match,
            "stats": enc(self.stats),  # maps of counts: nothing in them is shared with another value
            "waiting": list(self.waiting), "live": list(self.live), "fair_live": list(self.fair_live),
        }

    def load_record(self, snapshot: Mapping[str, object], dec: Decode) -> None:
        """Take what ``to_record`` wrote (the snapshot holds it as written: it is not checked again);
        ValueError for a match of a game this relay does not offer."""
        record = cast(TablesRecord, snapshot)
        matches: dict[str, Match] = {}
        for r in record["matches"]:
            game, code = r["game"], r["code"]
            rules = self.games.get(game) if isinstance(game, str) else None
            if rules is None:
                raise ValueError(f"holds a match of a game this relay does not offer ({game!r})")
            matches[str(code)] = Match.from_record(r, dec, rules)
        self.matches = matches
        self.client_match = dict(record["client_match"])
        self.stats = cast(RelayStats, dec(record["stats"]))
        self.wall_offset = record["wall_offset"]
        self.waiting = {c: matches[c] for c in record["waiting"]}
        self.live = {c: matches[c] for c in record["live"]}
        self.fair_live = dict.fromkeys(record["fair_live"])
