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
``event()`` is the body of the ``match_over`` event as the relay publishes it (seats, before the
players' names are added).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Literal, Mapping, Sequence

#: A match's phase (``Match.status``, ``Snapshot.status``): waiting for its players, playing a game,
#: between two games, over.
MatchStatus = Literal["waiting", "playing", "between", "over"]
#: The phases of a running match: one whose seats are held, whose players' connections are watched.
RUNNING: tuple[MatchStatus, ...] = ("playing", "between")

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

    def event(self, wins: Sequence[int]) -> dict[str, object]:
        """The ``match_over`` event's body (seats; the relay adds the players' names)."""
        return {"winner": self.winner, "winners": list(self.winners), "reason": self.reason, "wins": list(wins)}


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
