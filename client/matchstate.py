"""The relay's match state, read once into typed fields (pure).

How this works
--------------
The relay sends a match's state beside each view and snapshot as a plain map
(``ViewUpdated.match_state``: ``status``, ``game_index``, ``best_of``, ``wins``, ``players``,
``winner``, and the ``results`` of the games played); a replay builds the same map from a log, with
the ``reason`` the match ended for and who ``left``. The model keeps the map as it came (it is the
wire's); whoever reads it reads it through ``MatchState.read``, which checks every value's type and
puts a missing or malformed one at its default -- a value the relay did not send reads as absent,
never as a crash in a frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from protocol.match import MatchStatus

STATUSES: tuple[MatchStatus, ...] = ("waiting", "playing", "between", "over")


def _int(value: object) -> int | None:
    return value if type(value) is int else None


def _ints(value: object) -> tuple[int, ...]:
    """A list of seats or counts: its integers (anything else is not one of them)."""
    return tuple(v for v in value if type(v) is int) if isinstance(value, (list, tuple)) else ()


@dataclass(frozen=True)
class GameResult:
    """One game of the match, as the relay's ``results`` list it."""

    winners: tuple[int, ...] = ()
    reason: str = ""
    scores: tuple[object, ...] = ()  # each seat's score as sent (``client.results.points_text`` reads numbers)

    @classmethod
    def read(cls, data: object) -> GameResult:
        if not isinstance(data, Mapping):
            return cls()
        scores = data.get("scores")
        return cls(_ints(data.get("winners")), str(data.get("reason", "")),
                   tuple(scores) if isinstance(scores, (list, tuple)) else ())


@dataclass(frozen=True)
class MatchState:
    status: MatchStatus | None = None  # None: no match state heard yet
    game_index: int | None = None
    best_of: int | None = None
    wins: tuple[int, ...] = ()
    players: tuple[str, ...] = ()
    winner: int | None = None
    #: the games played; None when the map has no list of them (an older sender)
    results: tuple[GameResult, ...] | None = None
    reason: str = ""  # why the match ended, where it is known (a replay's log says)
    left: str = ""  # who left or was gone too long, where it is known

    @classmethod
    def read(cls, data: Mapping[str, object]) -> MatchState:
        status = data.get("status")
        players = data.get("players")
        results = data.get("results")
        return cls(
            next((s for s in STATUSES if s == status), None),
            _int(data.get("game_index")),
            _int(data.get("best_of")),
            tuple(w if type(w) is int else 0 for w in wins) if isinstance(wins := data.get("wins"), (list, tuple))
            else (),
            tuple(str(p) for p in players) if isinstance(players, (list, tuple)) else (),
            _int(data.get("winner")),
            tuple(GameResult.read(r) for r in results) if isinstance(results, list) else None,
            str(data.get("reason") or ""),
            str(data.get("left") or ""),
        )

    @property
    def over(self) -> bool:
        return self.status == "over"

    @property
    def decided(self) -> bool:
        """A game of the match has ended: between two games, or the match is over."""
        return self.status in ("between", "over")

    def game_number(self, fallback_index: int) -> int:
        """The number of the game being played, or just played, in the current match: counted from
        the match's own results, which a rematch starts again (the relay's game index runs on)."""
        if self.results is None:
            return fallback_index + 1
        return len(self.results) + 1 if self.status == "playing" else max(1, len(self.results))
