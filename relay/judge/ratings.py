"""Ratings: every finished match between players who proved their keys, rated per game with OpenSkill.

How this works
--------------
A player is rated by its key, never by its name: a seat's key is the Ed25519 public key it proved it
holds when it joined (``protocol/identity.py``; the lobby checks the proof, through the verifier
this part is given). When a match ends (``Referee.end_match``) and every seat holds a key of its own
(a bot too: a bot without one leaves the match unrated), the match is rated with OpenSkill's
Plackett-Luce model, made for matches of several players (Glicko-2 rates pairs only): the winners
first, then the others by games won, then those who left, forfeited or were taken out of play -- a
forfeit is a loss. Each rated player gets ``RatingChanged`` (its rating before and after) on its
private topic. The rating people read is OpenSkill's *ordinal*, ``mu - 3 sigma``: a new player
stands at 0 and climbs as the relay grows sure of it.

The table (game -> key -> name, mu, sigma, matches) is part of the judge, so it lives where the
judge's state lives: derived from the journalled inputs, and written into every snapshot under
this part's own name (``ratings``), which the journal keeps when finished matches leave it; a
restart, and a takeover of a shard in a cluster, load it back with the rest of the judge. (In a
cluster each shard rates the matches it runs; quick matches of one game and settings all run on
one shard.) Each row of the record carries a check, a keyed hash over its values: a row that does
not hold together -- its check, or a value out of its kind -- is left out when the record is read,
said in one line (``refused``, which the shell logs), and that player is unrated from there on:
never an exception.

``leaderboard(game, limit)`` is the pure read of the table that the relay's answer to ``Ratings``
and the relay's web page share. Quick match asks ``rating_of`` to pair players of close ratings.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from dataclasses import dataclass
from typing import Callable, Collection, Mapping, TypedDict

from openskill.models import PlackettLuce

from protocol import messages as m
from protocol.identity import KEY_BYTES, fingerprint
from protocol.match import MatchEnd
from relay.judge.tables import Tables
from relay.model import Match, Out, Publish

#: Checks a signature: (public key, signature, message) -> does it hold (``protocol.identity.verify``).
Verifier = Callable[[bytes, bytes, bytes], bool]
NAME_CHARS = 24  # a seat's name is cut to this by the lobby


@dataclass
class Rated:
    """One player's standing in one game."""

    name: str  # the name it last played under
    mu: float
    sigma: float
    matches: int

    @property
    def rating(self) -> float:
        """What people read: OpenSkill's ordinal, ``mu - 3 sigma``."""
        return self.mu - 3 * self.sigma


class LeaderRow(TypedDict):
    """One row of a leaderboard, as ``RatingBoard`` carries it and the web page shows it."""

    name: str
    key: str  # the key's fingerprint (``protocol.identity.fingerprint``)
    rating: float
    mu: float
    sigma: float
    matches: int


class RatingsRecord(TypedDict):
    """The ratings in a relay snapshot: per game, rows ``[key, name, mu, sigma, matches, check]``."""

    ratings: dict[str, list[list[object]]]


class Ratings:
    def __init__(self, t: Tables, verify: Verifier) -> None:
        self.t = t
        self.verify = verify
        self.model = PlackettLuce()
        self.games: dict[str, dict[bytes, Rated]] = {}
        #: One line for each part of a record that was not taken (the shell logs them after loading).
        self.refused: list[str] = []
        self._holders: dict[str, bytes] | None = None  # name -> the key first rated under it (derived)

    # ------------------------------------------------------------------ reading

    def of(self, game: str, key: bytes) -> Rated | None:
        return self.games.get(game, {}).get(key) if key else None

    def rating_of(self, game: str, key: bytes) -> float | None:
        """A key's rating in a game, None for a key the relay has not rated there (or no key)."""
        r = self.of(game, key)
        return None if r is None else r.rating

    def holder(self, name: str) -> bytes | None:
        """The key that holds a name on this relay: the first in the table rated under it, if any."""
        if self._holders is None:
            holders: dict[str, bytes] = {}
            for table in self.games.values():
                for key, r in table.items():
                    holders.setdefault(r.name, key)
            self._holders = holders
        return self._holders.get(name)

    def leaderboard(self, game: str, limit: int) -> list[LeaderRow]:
        """The ``limit`` best of a game, best first (rating, then more matches, then the fingerprint)."""
        table = self.games.get(game, {})
        ranked = sorted(table.items(), key=lambda kv: (-kv[1].rating, -kv[1].matches, fingerprint(kv[0])))
        return [{"name": r.name, "key": fingerprint(k), "rating": round(r.rating, 2), "mu": round(r.mu, 3),
                 "sigma": round(r.sigma, 3), "matches": r.matches} for k, r in ranked[:max(0, limit)]]

    def players(self, game: str) -> int:
        return len(self.games.get(game, {}))

    # ------------------------------------------------------------------ rating a match

    def rate(self, match: Match, end: MatchEnd, losers: Collection[int], now_ns: int, out: list[Out]) -> None:
        """Rate a match that just ended, if every seat holds a key of its own (see the header)."""
        keys = [s.key for s in match.players]
        if len(keys) < 2 or not all(keys) or len(set(keys)) != len(keys):
            return
        table = self.games.setdefault(match.game, {})
        olds = [table.get(k) for k in keys]
        teams = [[self.model.rating(mu=None if r is None else r.mu, sigma=None if r is None else r.sigma)]
                 for r in olds]
        new = self.model.rate(teams, ranks=[float(r) for r in self.ranks(match, end, losers)])
        for seat, (s, old, team) in enumerate(zip(match.players, olds, new)):
            before = self.model.rating().ordinal() if old is None else old.rating
            matches = 1 if old is None else old.matches + 1
            rated = Rated(name=s.name, mu=float(team[0].mu), sigma=float(team[0].sigma), matches=matches)
            table[s.key] = rated
            if not self.t.replaying:
                out.append(Publish(self.t.topics.client(s.client), m.RatingChanged(
                    match=match.code, game=match.game, before=round(before, 2), after=round(rated.rating, 2),
                    matches=matches)))
        self._holders = None

    @staticmethod
    def ranks(match: Match, end: MatchEnd, losers: Collection[int]) -> list[int]:
        """Each seat's place (0 best, ties share one): the winners, then the others by games won, then
        those who left or were taken out of play."""
        out_of_play = set(match.out_of_play()) | set(losers)
        winners = set(end.winners)
        wins = match.wins if len(match.wins) == len(match.players) else [0] * len(match.players)
        keys = [(0 if i in winners else 2 if i in out_of_play else 1, -wins[i]) for i in range(len(match.players))]
        order = sorted(set(keys))
        return [order.index(k) for k in keys]

    # ------------------------------------------------------------------ its record (a snapshot's)

    def _check(self, game: str, key: bytes, name: str, mu: float, sigma: float, matches: int) -> str:
        text = f"{game}\x00{key.hex()}\x00{name}\x00{mu!r}\x00{sigma!r}\x00{matches}".encode("utf-8", "replace")
        return hmac.new(f"blink ratings {self.t.seed}".encode(), text, hashlib.sha256).hexdigest()[:24]

    def to_record(self) -> RatingsRecord:
        return {"ratings": {game: [[k, r.name, r.mu, r.sigma, r.matches,
                                    self._check(game, k, r.name, r.mu, r.sigma, r.matches)]
                                   for k, r in table.items()]
                            for game, table in self.games.items()}}

    def load_record(self, snapshot: Mapping[str, object]) -> None:
        """Take what ``to_record`` wrote, row by row: a row that does not hold together is left out,
        with one line in ``refused``. Never raises: a record that is no map of games is all refused."""
        self.games, self._holders = {}, None
        record = snapshot.get("ratings", {})  # (a snapshot of a relay that rated nothing yet)
        if not isinstance(record, dict):
            self.refused.append(f"the ratings record is not a table ({type(record).__name__}): nobody is rated")
            return
        for game, rows in record.items():
            if not isinstance(game, str) or not isinstance(rows, list):
                self.refused.append(f"the ratings record of {str(game)[:24]!r} is not a list of rows: nobody is "
                                    "rated in it")
                continue
            table: dict[bytes, Rated] = {}
            for row in rows:
                problem = self._problem(game, row)
                if problem is not None:
                    key = row[0] if isinstance(row, list) and row and isinstance(row[0], bytes) else b""
                    who = fingerprint(key) if key else "a player"
                    self.refused.append(f"a ratings record of {game} ({who}) was refused ({problem}): that player "
                                        "is unrated from here")
                    continue
                k, name, mu, sigma, matches = row[0], row[1], float(row[2]), float(row[3]), row[4]
                table[k] = Rated(name=name, mu=mu, sigma=sigma, matches=matches)
            self.games[game] = table

    def _problem(self, game: str, row: object) -> str | None:
        """Why a record's row cannot be taken, or None."""
        if not isinstance(row, list) or len(row) != 6:
            return "not a row of six values"
        key, name, mu, sigma, matches, check = row
        if not isinstance(key, bytes) or len(key) != KEY_BYTES:
            return "no key"
        if not isinstance(name, str) or len(name) > NAME_CHARS:
            return "no name"
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in (mu, sigma)):
            return "its rating is not a number"
        if sigma <= 0:
            return "its uncertainty is not positive"
        if isinstance(matches, bool) or not isinstance(matches, int) or matches < 1:
            return "its count of matches is not a positive whole number"
        if not isinstance(check, str) or not hmac.compare_digest(
                check, self._check(game, key, name, float(mu), float(sigma), matches)):
            return "its check does not match its values"
        return None
