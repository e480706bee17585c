"""The relay's data: its configuration, its matches and seats, and what the core asks the shell to do.

How this works
--------------
Plain data shared by the judging core (``relay/core.py``), the fair-order scheduler
(``relay/fair.py``) and the shell (``relay/shell.py``); it imports nothing from them, so the
relay's modules form no import circle. The core returns ``Out`` records -- ``Publish`` (a typed
message to a topic) or ``LogRecord`` (a line for the event log) -- and the shell carries them out.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Mapping

from protocol.chance import SeededChance
from protocol.rules.base import Game

STATE_HISTORY = 256  # per match: states kept to tell a lost race from a plain mistake


@dataclass(frozen=True)
class Publish:
    topic: str
    msg: Any  # a protocol message, or b"" to clear a retained topic
    retain: bool = False
    qos: int = 0


@dataclass(frozen=True)
class LogRecord:
    record: dict[str, Any]


Out = Publish | LogRecord


@dataclass
class RelayConfig:
    relay_id: str = "relay-0"
    order: str = "arrival"  # arrival | fair
    fair_cap_ns: int = 150_000_000  # fair mode: never hold a play longer than this
    fair_floor_ns: int = 100_000_000  # fair mode: no human reacts faster than this
    between_games_s: float = 3.0
    max_matches: int = 10_000
    #: The games this relay offers, by name (default: the registry, ``protocol.rules.GAMES``). A test
    #: passes a variant here, e.g. BLINK dealing a fixed deck to force a race.
    games: Mapping[str, Game[Any]] | None = None


@dataclass
class Seat:
    client: str
    name: str
    rematch: bool = False


@dataclass
class Match:
    code: str
    game: str  # the game's canonical name
    rules: Game[Any]
    settings: dict[str, Any]
    seats: int
    quick: bool
    seed: int
    players: list[Seat] = field(default_factory=list)
    status: str = "waiting"  # waiting | playing | between | over
    seq: int = 0
    game_index: int = -1
    wins: list[int] = field(default_factory=list)
    best_of: int = 1
    state: Any = None
    chance: SeededChance | None = None
    history: deque[tuple[int, Any]] = field(default_factory=lambda: deque(maxlen=STATE_HISTORY))
    timers: dict[str, tuple[int, Any]] = field(default_factory=dict)
    next_game_at: int | None = None
    game_seed: int = 0
    winner: int | None = None
    results: list[dict[str, Any]] = field(default_factory=list)
    order: str = "arrival"  # arrival | fair (relay default, or chosen per match)

    def seat_of(self, client: str) -> int | None:
        for i, s in enumerate(self.players):
            if s.client == client:
                return i
        return None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.players)

    @property
    def clients(self) -> tuple[str, ...]:
        return tuple(s.client for s in self.players)

    def state_at(self, seq: int) -> Any:
        """The state as it was right after ``seq`` (None if it is older than the kept history)."""
        found = None
        for s, state in self.history:
            if s <= seq:
                found = state
            else:
                break
        return found

    def match_state(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "game_index": self.game_index,
            "best_of": self.best_of,
            "wins": list(self.wins),
            "players": list(self.names),
            "winner": self.winner,
            "results": list(self.results),
        }
