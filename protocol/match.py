"""The life of a match: its phases, and the rules that end it (pure: no I/O, no clock).

How this works
--------------
A match is a best-of-``best_of`` of one game between its seats. It is ``waiting`` until its seats
are full, then ``playing`` a game, ``between`` two games (the relay's pause), and finally ``over``
(a rematch starts it again). The relay's judge (``relay/judge/referee.py`` and the lobby) runs
matches by these rules; the log checker (``protocol/verify.py``) re-judges a recorded match by the
very same functions, so the two cannot come to different verdicts.

How a match ends (``MatchReason``, the reason in ``match_over``):

- ``won``: after a game, a seat (or several at once: a shared win) has won the majority of the
  ``best_of`` games (``wins_needed``);
- ``forfeit``: a game ended because all but one side left it (the game's own outcome reason
  ``FORFEIT``), or a player left a running match that cannot play on without them;
- ``game_limit``: ties can go on for ever, so after ``game_cap`` games the seats with the most
  wins share the match;
- ``abandoned``: a dropped player's grace ran out, and those still there win.

Each rule returns a ``MatchEnd`` (winner, winners, reason) or None when the match goes on; its
``event()`` is the ``match_over`` event the relay publishes.

The match's own events (``MATCH_EVENTS``) are typed classes like a game's (``protocol/events.py``):
the relay makes them around the games -- a match created, its seats taken and left, a player's
connection dropping and returning, each game started and its result, the match over, a rematch --
and every reader, whatever the game, decodes them with this one registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Collection, Literal, Mapping, Sequence

from protocol.events import SPREAD, EventTypes, TypedEvent, event

#: A match's phase (``Match.status``, ``Snapshot.status``): waiting for its players, playing a game,
#: between two games, over.
MatchStatus = Literal["waiting", "playing", "between", "over"]
#: The phases of a running match: one whose seats are held, whose players' connections are watched.
RUNNING: tuple[MatchStatus, ...] = ("playing", "between")

#: How a match orders plays that arrive at about the same time: as they arrive, or fairly (``relay/fair.py``).
Order = Literal["arrival", "fair"]
ORDERS: tuple[Order, ...] = ("arrival", "fair")

#: Why a match ended (``match_over``'s reason), whatever the game: see the module header.
MatchReason = Literal["won", "game_limit", "forfeit", "abandoned"]
#: The match reasons in the few words a player reads (the window's results).
MATCH_REASON_LABELS: Mapping[str, str] = {
    "won": "match won", "game_limit": "game limit", "forfeit": "forfeit", "abandoned": "abandoned",
}

#: The outcome reason of a game that ended because all but one side left it (a game's ``Outcome``):
#: the match then ends ``forfeit``, not ``won``, so a forfeit reads the same whether it came from a
#: leave in a two-player match or from the last opponent of several leaving.
FORFEIT: Literal["forfeit"] = "forfeit"


def wins_needed(best_of: int) -> int:
    """Games a seat must win to win a best-of-``best_of`` match: a majority."""
    return best_of // 2 + 1


def game_cap(best_of: int) -> int:
    """The most games a match plays: ties could otherwise go on for ever."""
    return best_of * 3


def _only(seats: Sequence[int]) -> int | None:
    return seats[0] if len(seats) == 1 else None


@dataclass(frozen=True)
class MatchEnd:
    """How a match ended: its single ``winner`` (None for a shared or no win), every seat that
    shares the win, and why."""

    winner: int | None
    winners: tuple[int, ...]
    reason: MatchReason

    def event(self, wins: Sequence[int]) -> MatchOver:
        """The ``match_over`` event, with each seat's games won."""
        return MatchOver(winner=self.winner, winners=self.winners, reason=self.reason, wins=tuple(wins))


def after_game(wins: Sequence[int], games_played: int, best_of: int, game_reason: str) -> MatchEnd | None:
    """Does the match end after a game? ``wins``: each seat's games won, that one counted;
    ``games_played``: games of the match so far, that one included; ``game_reason``: that game's
    outcome reason. None: the match goes on to its next game."""
    leaders = tuple(s for s, w in enumerate(wins) if w >= wins_needed(best_of))
    if leaders:
        # Several leaders at once: a shared win (Sequence teams, Takeaway ties), no single winner.
        return MatchEnd(_only(leaders), leaders, "forfeit" if game_reason == FORFEIT else "won")
    if games_played >= game_cap(best_of):
        best = max(wins)
        top = tuple(s for s, w in enumerate(wins) if w == best)
        return MatchEnd(_only(top), top, "game_limit")
    return None


def left(seats: int, leaver: int, out_of_play: Collection[int] = ()) -> MatchEnd:
    """A player left a running match that does not play on without them: it is forfeited to the
    seats still in play (a single one of them is its winner; several share nothing)."""
    others = [s for s in range(seats) if s != leaver and s not in out_of_play]
    winner = _only(others)
    return MatchEnd(winner, () if winner is None else (winner,), "forfeit")


def abandoned(seats: int, late: Collection[int], out_of_play: Collection[int] = ()) -> MatchEnd:
    """Dropped players' grace ran out (``late``): the match ends for those still there, who share it."""
    others = tuple(s for s in range(seats) if s not in late and s not in out_of_play)
    return MatchEnd(_only(others), others, "abandoned")


# --- the match's own events (the players' seats as ints: see protocol/events.py) -------------------


@event("match_created")
@dataclass(frozen=True, kw_only=True)
class MatchCreated(TypedEvent):
    """A match was created: its game, seats, checked settings, games to play and order of plays."""

    game_name: str
    seats: int
    settings: Mapping[str, object]
    best_of: int
    order: Order


@event("seat_taken")
@dataclass(frozen=True, kw_only=True)
class SeatTaken(TypedEvent):
    player: int  # the seat
    name: str


@event("seat_left")
@dataclass(frozen=True, kw_only=True)
class SeatLeft(TypedEvent):
    """A player left a waiting match (their seat is freed) or a running one (it ends as a forfeit)."""

    player: int


@event("player_dropped")
@dataclass(frozen=True, kw_only=True)
class PlayerDropped(TypedEvent):
    """A player's connection dropped in a running match: their seat waits ``grace_s`` for them."""

    player: int
    grace_s: float


@event("player_returned")
@dataclass(frozen=True, kw_only=True)
class PlayerReturned(TypedEvent):
    player: int


@event("match_expired")
@dataclass(frozen=True, kw_only=True)
class MatchExpired(TypedEvent):
    """A waiting match was closed: its seats were not filled within ``after_s``."""

    after_s: float


@event("game_started")
@dataclass(frozen=True, kw_only=True)
class GameStarted(TypedEvent):
    """A game of the match started: the players' names, and the hash of the game's secret seed."""

    players: tuple[str, ...]
    seed_commitment: str


@event("game_result")
@dataclass(frozen=True, kw_only=True)
class GameResult(TypedEvent):
    """A game ended: its engine's outcome, each seat's games won so far, the game's seed (revealed
    now: it hashes to ``game_started``'s commitment), and the game's own extras (``Outcome.extra``)."""

    winner: int | None
    winners: tuple[int, ...]
    reason: str
    scores: tuple[int, ...]
    wins: tuple[int, ...]
    seed: int
    extra: Mapping[str, object] = field(default_factory=dict, metadata=SPREAD)


@event("match_over")
@dataclass(frozen=True, kw_only=True)
class MatchOver(TypedEvent):
    """The match ended (``MatchEnd``): its single winner, if any, every seat that shares the win,
    why, and each seat's games won."""

    winner: int | None
    winners: tuple[int, ...]
    reason: MatchReason
    wins: tuple[int, ...]


@event("rematch_requested")
@dataclass(frozen=True, kw_only=True)
class RematchRequested(TypedEvent):
    player: int


@event("rematch_started")
@dataclass(frozen=True, kw_only=True)
class RematchStarted(TypedEvent):
    """Every seat asked for a rematch: the match starts again (its ``game_started`` follows)."""


#: The match's own events, by wire name: the same for every game.
MATCH_EVENTS = EventTypes(MatchCreated, SeatTaken, SeatLeft, PlayerDropped, PlayerReturned, MatchExpired,
                          GameStarted, GameResult, MatchOver, RematchRequested, RematchStarted)
