"""What the spectator page knows of the relay's matches, from their public messages only.

How this works
--------------
A ``Book`` is fed the public stream as it arrives -- each match's retained snapshot (``.../snap``,
published at every game boundary and at most once a second while a game runs, cleared when the
match is closed) and, for the matches a page is open on, their events (``.../ev``) -- and holds
three things, with time as an argument (no clock, no I/O: tested in memory):

- each game's leaderboard, as the relay last answered a ``Ratings`` request (``RatingBoard``: the
  players rated by their keys, best first);
- a ``Summary`` per match for the list: game, players, status, games won, when it was first and last
  seen and, once over, its result in words. Matches closed or over stay listed as recent
  (``RECENT_KEPT``, the newest) after their snapshot is cleared.
- for a watched match, the public view as the page draws it: the last snapshot's state, advanced
  by each event in ``seq`` order with the game's own ``apply_event`` (a spectator's view: seat
  None). An event that does not follow the view (a gap, a new game whose first state only a
  snapshot gives, or one that does not fit) is kept until a snapshot catches the view up; the
  events after that snapshot's ``seq`` are then applied. So a lost message costs the page at
  most the second until the next snapshot, never a wrong table.

What it hands a page (``Frame``) is plain JSON-ready data: the summary, the view in the game's
wire form, and the event that made it (its wire name and public map), so the page animates each
play as it lands. Nothing here can see more than a spectator: its inputs are the public topics
and the leaderboards any client may ask for.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TypedDict

from protocol import messages as m
from protocol.events import TypedEvent
from protocol.match import MATCH_EVENTS, GameStarted, MatchOver, RematchStarted
from protocol.rules import AnyGame, GAMES, canonical

RECENT_KEPT = 20  # matches over (or closed) still listed, the newest
PENDING_KEPT = 512  # events held for a view that a snapshot has yet to catch up


class SummaryData(TypedDict):
    """One match in the list, as ``/matches.json`` gives it."""

    code: str
    game: str
    title: str
    players: list[str]
    status: str
    live: bool
    wins: list[int]
    best_of: int
    seconds: float
    result: str
    latency: list[dict[str, object]]


class BoardData(TypedDict):
    """One game's leaderboard as the list page shows it (the relay's ``RatingBoard``)."""

    game: str
    title: str
    players: int
    rows: list[dict[str, object]]


class FrameData(TypedDict):
    """What a page is sent after each change of a watched match."""

    summary: SummaryData
    seq: int
    view: dict[str, object] | None
    event: dict[str, object] | None


@dataclass
class Summary:
    """One match as the list shows it (see the module header)."""

    code: str
    game: str = ""
    players: tuple[str, ...] = ()
    status: str = "waiting"
    wins: tuple[int, ...] = ()
    best_of: int = 1
    first_ns: int = 0  # relay wall time of the first snapshot seen
    last_ns: int = 0  # ... and of the latest
    closed: bool = False  # its retained snapshot was cleared: the relay let it go
    result: str = ""
    seats: tuple[dict[str, object], ...] = ()  # the relay's figures per seat (``Snapshot.seats``)
    snapshot: m.Snapshot | None = None  # the latest: a page opened on the match starts from it

    @property
    def live(self) -> bool:
        return not self.closed and self.status != "over"

    def data(self, now_ns: int) -> SummaryData:
        game = GAMES.get(canonical(self.game))
        end = now_ns if self.live else self.last_ns
        return SummaryData(code=self.code, game=self.game, title=game.title if game is not None else self.game,
                           players=list(self.players), status="closed" if self.closed and self.status != "over"
                           else self.status, live=self.live, wins=list(self.wins), best_of=self.best_of,
                           seconds=max(0.0, (end - self.first_ns) / 1e9) if self.first_ns else 0.0,
                           result=self.result, latency=_latency(self.seats, len(self.players)))


def _latency(given: tuple[dict[str, object], ...], seats: int) -> list[dict[str, object]]:
    """Each seat's figures as the relay's snapshot publishes them (what it measured of that
    player's plays), an empty entry for a seat it has none of."""
    return [dict(given[i]) if i < len(given) else {} for i in range(seats)]


def result_words(over: MatchOver, players: tuple[str, ...], game: AnyGame | None) -> str:
    """The match's result as a page says it: who won, why, the games won."""

    def name(seat: int) -> str:
        return players[seat] if 0 <= seat < len(players) else f"seat {seat + 1}"

    winners = [name(w) for w in over.winners] or ([name(over.winner)] if over.winner is not None else [])
    who = (f"{winners[0]} won" if len(winners) == 1 else f"{' and '.join(winners)} share the win" if winners
           else "no winner")
    why = game.reason_label(over.reason) if game is not None else over.reason.replace("_", " ")
    score = ", ".join(f"{name(i)} {w}" for i, w in enumerate(over.wins))
    return f"{who} ({why}); games won: {score}" if score else f"{who} ({why})"


def _snapshot_result(winner: int | None, players: tuple[str, ...], wins: tuple[int, ...]) -> str:
    """A finished match's result from its last snapshot (which names the winner, not why)."""
    who = (players[winner] if winner < len(players) else f"seat {winner + 1}") + " won" if winner is not None \
        else "no single winner"
    score = ", ".join(f"{name} {w}" for name, w in zip(players, wins))
    return f"{who}; games won: {score}" if score else who


@dataclass
class _Watched:
    """A match a page is open on: its public view and the events it has yet to apply."""

    game: AnyGame | None = None
    seq: int = 0  # the last seq the view holds
    view: object = None  # the game's state type (a spectator's view), None before the first snapshot
    pending: dict[int, m.Event] = field(default_factory=dict)
    waiting_for_snapshot: bool = True


class Book:
    """The matches of the relay as a spectator sees them (see the module header)."""

    def __init__(self, recent_kept: int = RECENT_KEPT) -> None:
        self.matches: OrderedDict[str, Summary] = OrderedDict()
        self.recent_kept = recent_kept
        self._watched: dict[str, _Watched] = {}
        self.boards: dict[str, BoardData] = {}  # each game's leaderboard, as the relay last gave it

    # -- the list ---------------------------------------------------------------------------------

    def summaries(self, now_ns: int) -> list[SummaryData]:
        """Live matches first (oldest first), then recent ones (newest first)."""
        live = [s.data(now_ns) for s in self.matches.values() if s.live]
        gone = [s.data(now_ns) for s in reversed(self.matches.values()) if not s.live]
        return live + gone

    def on_ratings(self, board: m.RatingBoard) -> None:
        """A game's leaderboard, as the relay answered ``Ratings``."""
        game = GAMES.get(canonical(board.game))
        if game is None:
            return
        rows: list[dict[str, object]] = [
            {"name": str(r.get("name", "")), "key": str(r.get("key", ""))[:12], "rating": r.get("rating"),
             "matches": r.get("matches")} for r in board.rows]
        self.boards[game.name] = BoardData(game=game.name, title=game.title, players=board.players, rows=rows)

    def leaderboards(self) -> list[BoardData]:
        """The games' leaderboards that have a rated player, in the registry's order."""
        return [b for name in GAMES if (b := self.boards.get(name)) is not None and b["rows"]]

    def knows(self, code: str) -> bool:
        return code in self.matches

    def summary(self, code: str) -> Summary | None:
        return self.matches.get(code)

    def _forget_old(self) -> None:
        gone = [code for code, s in self.matches.items() if not s.live]
        for code in gone[:max(0, len(gone) - self.recent_kept)]:
            if code not in self._watched:
                del self.matches[code]

    # -- what arrives -----------------------------------------------------------------------------

    def on_snapshot(self, snap: m.Snapshot) -> list[FrameData]:
        """A match's retained snapshot; the frames for its pages when it is watched (it moved the view)."""
        s = self.matches.get(snap.match)
        if s is None:
            s = self.matches[snap.match] = Summary(snap.match, first_ns=snap.ts)
        s.closed = False
        s.game = snap.game or s.game
        s.players = tuple(snap.players) or s.players
        s.status = snap.status
        s.last_ns = max(s.last_ns, snap.ts)
        # how long: since its creation, as the relay says (a page's server started later, or again after
        # a restart of the relay, saw it first long after), else since its first snapshot here
        s.first_ns = snap.since or (min(s.first_ns, snap.ts) if s.first_ns else snap.ts)
        s.seats = snap.seats
        wins = snap.match_state.get("wins")
        if isinstance(wins, list) and all(type(w) is int for w in wins):
            s.wins = tuple(wins)
        best_of = snap.match_state.get("best_of")
        if type(best_of) is int:
            s.best_of = best_of
        if snap.status != "over":
            s.result = ""
        elif not s.result:  # over, and its match_over unread (nobody watched it): the snapshot says who won
            winner = snap.match_state.get("winner")
            s.result = _snapshot_result(winner if type(winner) is int else None, s.players, s.wins)
        s.snapshot = snap
        self._forget_old()
        w = self._watched.get(snap.match)
        if w is None or snap.seq < w.seq:
            return []
        return self._load(snap, w)

    def _load(self, snap: m.Snapshot, w: _Watched) -> list[FrameData]:
        """A snapshot as the watched view, then the pending events after it: its frame first."""
        game = GAMES.get(canonical(snap.game))
        w.game = game
        w.view = None
        if game is not None and snap.state:
            try:
                w.view = game.from_wire(snap.state)
            except ValueError:
                w.view = None
        w.seq, w.waiting_for_snapshot = snap.seq, False
        for seq in [q for q in w.pending if q <= snap.seq]:
            del w.pending[seq]
        return [self.frame(snap.match), *self._catch_up(snap.match, w)]

    def on_cleared(self, code: str, now_ns: int) -> None:
        """The match's retained snapshot was cleared: the relay closed it."""
        s = self.matches.get(code)
        if s is None:
            return
        s.closed = True
        s.last_ns = max(s.last_ns, now_ns)
        self.matches.move_to_end(code)
        self._forget_old()

    def on_event(self, ev: m.Event) -> list[FrameData]:
        """An event of a watched match: the frames it made (none while the view waits for a snapshot)."""
        s = self.matches.get(ev.match)
        if s is None:
            s = self.matches[ev.match] = Summary(ev.match, first_ns=ev.ts, last_ns=ev.ts)
        s.last_ns = max(s.last_ns, ev.ts)
        typed = MATCH_EVENTS.read(ev)
        if isinstance(typed, MatchOver):
            s.status = "over"
            s.wins = typed.wins
            game = GAMES.get(canonical(s.game))
            s.result = result_words(typed, s.players, game)
            self.matches.move_to_end(ev.match)
        elif isinstance(typed, GameStarted):
            s.players = typed.players or s.players
            s.status = "playing"
        w = self._watched.get(ev.match)
        if w is None or ev.seq <= w.seq:
            return []
        if len(w.pending) < PENDING_KEPT:
            w.pending[ev.seq] = ev
        return self._catch_up(ev.match, w)

    def _catch_up(self, code: str, w: _Watched) -> list[FrameData]:
        """Apply the pending events that follow the view, in order; stop at a gap or at what only a
        snapshot can say."""
        frames: list[FrameData] = []
        while not w.waiting_for_snapshot and (w.seq + 1) in w.pending:
            ev = w.pending.pop(w.seq + 1)
            typed = MATCH_EVENTS.read(ev)
            if isinstance(typed, (GameStarted, RematchStarted)):
                # A new game's first state comes whole in the snapshot of the same step.
                w.waiting_for_snapshot = True
                w.seq = ev.seq
                frames.append(self.frame(code, ev))
                break
            if w.game is not None and w.view is not None and w.game.apply_event is not None:
                try:
                    w.view = w.game.apply_event(w.view, None, _typed(w.game, ev))
                except ValueError:
                    w.waiting_for_snapshot = True  # the next snapshot puts the view right
            w.seq = ev.seq
            frames.append(self.frame(code, ev))
        return frames

    # -- pages ------------------------------------------------------------------------------------

    def watch(self, code: str) -> None:
        """A page opened on ``code``: keep its view, from the latest snapshot on."""
        if code in self._watched:
            return
        w = self._watched[code] = _Watched()
        s = self.matches.get(code)
        if s is not None and s.snapshot is not None:
            self._load(s.snapshot, w)

    def unwatch(self, code: str) -> None:
        self._watched.pop(code, None)

    def watched(self) -> list[str]:
        return list(self._watched)

    def frame(self, code: str, ev: m.Event | None = None, now_ns: int | None = None) -> FrameData:
        """What a page of ``code`` draws now (with the event that made it, if one did)."""
        s = self.matches.get(code) or Summary(code)
        w = self._watched.get(code)
        view = None
        if w is not None and w.game is not None and w.view is not None:
            view = w.game.to_wire(w.view)
        return FrameData(summary=s.data(now_ns if now_ns is not None else s.last_ns), seq=w.seq if w else 0,
                         view=view, event=None if ev is None else {"seq": ev.seq, "type": ev.type, **ev.data})


def _typed(game: AnyGame, ev: m.Event) -> TypedEvent:
    return game.decode_event(ev)


__all__ = ["BoardData", "Book", "FrameData", "RECENT_KEPT", "Summary", "SummaryData", "result_words"]

