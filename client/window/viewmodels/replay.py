"""A recorded match as the sequence of states a spectator saw, and the replay's clock (pure: no pyglet).

How this works
--------------
``load_replay(lines)`` reads an event log (``blink match --log``, ``blink watch --json``, the
relay's ``blink serve --log``) with ``protocol.verify.parse_log`` and refuses it unless
``verify`` calls it true: a truncated, reordered or tampered log raises ``ReplayError`` with the
first false line, before any window opens. Of a true log it keeps one match (the first, or the
one asked for by code).

Each game of the match is re-simulated once, by the verifier itself: ``verify(..., keep_walks=True)``
keeps every game's ``GameWalk``, whose ``states()`` give for every logged event the state right
after the action that made it. Only
``game.view(state, None)`` is kept, i.e. what a spectator may see: hidden cards stay hidden, as
they did to anyone watching the match live. Around the games the relay's ``match_state`` (status,
wins, results, winner) is rebuilt from the match events, as ``relay/model.py`` keeps it. A game
that ended in a forfeit never revealed its seed: its events are shown over the state before it.

``Replay.model_at(i, ...)`` builds a spectator ``ClientModel`` standing at event ``i``: a
``Snapshot`` of the state there plus the current game's events (``m.Event`` messages), which is
exactly what a live spectator's model holds, so the game scenes draw it unchanged. Playing on
feeds one more event and one more snapshot to the same model (``advance_model``); going back is
seeking, i.e. a fresh model at the earlier index (every state is cached, so any index is O(events
of its game)).

``Playback`` is the replay's clock in *replay time*: log time with every quiet stretch longer than
``MAX_GAP_S`` cut to it (waiting for a player to join should not be watched), scaled by the speed
(1x/2x/4x), paused or running. Wall time comes in as an argument.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Awaitable, Iterable, Sequence, TypeVar

from protocol import messages as m
from protocol.events import TypedEvent, logged_event
from protocol.match import (MATCH_EVENTS, GameResult, GameStarted, MatchCreated, MatchOver, PlayerDropped,
                            RematchStarted, SeatLeft, SeatTaken)
from protocol.rules import game_for
from protocol.rules.base import Rejected
from protocol.verify import GameWalk, NotALog, Record, body, parse_log, verify
from client import ClientError
from client.matchstate import MatchState
from client.results import match_result_line

if TYPE_CHECKING:
    import asyncio

    from mqttkit import BrokerAddress
    from client.model import ClientModel
    from client.player import Player
    from client.window.session import SessionStatus

T = TypeVar("T")

NS = 1_000_000_000
MAX_GAP_S = 2.5  # a longer pause between two events plays as this long
SPEEDS = (1.0, 2.0, 4.0)


class ReplayError(ClientError, ValueError):
    """The log cannot be replayed: not a log, or a false one (the message names the first bad line)."""


@dataclass(frozen=True)
class Step:
    event: m.Event  # as logged
    state: object  # the spectator's view of the game after this event (None before the first game)
    game: int  # the game index the state belongs to
    match_state: dict[str, object]
    at_s: float  # replay time of the event (seconds from the first)


@dataclass
class Replay:
    code: str
    game_name: str
    players: tuple[str, ...]
    settings: dict[str, object]
    steps: list[Step]
    game_start: list[int] = field(default_factory=list)  # for each step, the index of its game's game_started

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def duration_s(self) -> float:
        return self.steps[-1].at_s if self.steps else 0.0

    def index_at(self, t_s: float) -> int:
        """The last step at or before replay time ``t_s`` (0 at the start)."""
        lo, hi = 0, len(self.steps) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.steps[mid].at_s <= t_s:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def blank_reason(self, i: int) -> str:
        """Why step ``i`` has no game to show ("" when it has one): the match has not started yet,
        or its game was left before its end -- a forfeit never reveals the game's seed, so a first
        game that ended in one has no state a spectator could be shown."""
        if not 0 <= i < len(self.steps) or self.steps[i].state is not None:
            return ""
        if any(st.state is not None for st in self.steps[i + 1:]):
            return "the match has not started yet"
        return "this game was left before its end: a forfeit never reveals its cards"

    def result_line(self) -> str:
        """'A beat B 2–1' (or the draw) -- for the list of replays and the results."""
        ms = dict(self.steps[-1].match_state) if self.steps else {}
        # why it ended and who left are in the events, not in the relay's match state
        for step in reversed(self.steps):
            match MATCH_EVENTS.read(step.event):
                case SeatLeft(player=seat) | PlayerDropped(player=seat) if "left" not in ms and "reason" in ms:
                    ms["left"] = self.players[seat] if 0 <= seat < len(self.players) else ""
                case MatchOver(reason=reason) if "reason" not in ms:
                    ms["reason"] = reason
                case RematchStarted():
                    break
        return match_result_line(list(self.players), ms)

    # ------------------------------------------------------------------ spectator models

    def _event(self, i: int, wall_ns: int, t_s: float, speed: float) -> m.Event:
        ev = self.steps[i].event
        # The scenes time countdowns and animations from an event's ts: give it the wall time at
        # which the replay reaches it (earlier events: as long ago as the replay says).
        ts = wall_ns - int(max(0.0, t_s - self.steps[i].at_s) / max(speed, 1e-9) * NS)
        return m.Event(ev.match, ev.seq, ts, ev.game_index, ev.type, ev.data)

    def _snapshot(self, i: int, ts: int) -> m.Snapshot | None:
        st = self.steps[i]
        if st.state is None:
            return None
        rules = game_for(self.game_name)
        ms = MatchState.read(st.match_state)
        return m.Snapshot(self.code, st.event.seq, ts, st.game, ms.status or "", ms.players or self.players,
                          rules.to_wire(st.state), dict(st.match_state), self.game_name)

    def model_at(self, i: int, wall_ns: int, t_s: float | None = None, speed: float = 1.0,
                 name: str = "replay") -> ClientModel:
        """A spectator ``ClientModel`` standing at step ``i`` (its game's events fed, then the snapshot)."""
        from client.model import ClientModel

        i = max(0, min(i, len(self.steps) - 1))
        t = self.steps[i].at_s if t_s is None else t_s
        model = ClientModel(client_id="replay", name=name, players=self.players, settings=dict(self.settings))
        model.spectate(self.code, self.game_name)
        first = max(self.game_start[i], i - 200)
        for j in range(first, i + 1):
            model.on_message(self._event(j, wall_ns, t, speed), wall_ns)
        self._confirm(model, i, wall_ns)
        return model

    def advance_model(self, model: ClientModel, i: int, wall_ns: int, t_s: float, speed: float) -> None:
        """Feed step ``i`` (the one after what ``model`` shows) to a model made by ``model_at``."""
        model.on_message(self._event(i, wall_ns, t_s, speed), wall_ns)
        self._confirm(model, i, wall_ns)

    def _confirm(self, model: ClientModel, i: int, wall_ns: int) -> None:
        st = self.steps[i]
        model.restate(dict(st.match_state), MatchState.read(st.match_state).players or self.players)
        snap = self._snapshot(i, wall_ns)
        if snap is not None:
            model.on_message(snap, wall_ns)


# --------------------------------------------------------------------------------------- building


def load_replay(lines: Iterable[str], match: str | None = None, cut_unfinished: bool = False) -> Replay:
    """A replay of a log's match (the first one, or ``match``). Raises ``ReplayError`` for a text
    that is not a log, a false log (the first bad line), or a log without that match.

    ``cut_unfinished`` (the window's own recordings): a log that is false only because it stops
    early -- the window was closed during a rematch -- is replayed up to its last ``match_over``,
    if that part is true. ``blink replay`` does not cut: a truncated log is refused."""
    try:
        records = parse_log(lines)
    except NotALog as exc:
        raise ReplayError(str(exc)) from None
    report = verify(records, keep_walks=True)
    stops_early = report.ok and report.running > 0  # true so far, but a game's seed is still to come
    if stops_early and not cut_unfinished:
        raise ReplayError(f"not a true log to replay, refused: line {records[-1].line}: the log ends while its match "
                          f"is still running (truncated): a replay needs every game's seed")
    if (stops_early or (not report.ok and report.first is not None and _cut_short(report.first.problem))) \
            and cut_unfinished:
        ends = [k for k, r in enumerate(records) if isinstance(_what(r), MatchOver)]
        cut = verify(records[:ends[-1] + 1], keep_walks=True) if ends else None
        if cut is not None and cut.ok:
            records, report = records[:ends[-1] + 1], cut
        else:
            raise ReplayError("the recording stops before the end of its first match: the seeds of its last "
                              "game were never revealed, so it cannot be replayed")
    if not report.ok:
        raise ReplayError(f"not a true log, refused: {report.first}")
    groups: dict[str, list[Record]] = {}
    order: list[str] = []
    for rec in records:
        code = str(rec.data.get("match"))
        if rec.seq == 1 and code in groups and isinstance(_what(rec), MatchCreated):
            code = f"{code}#{order.count(code) + 1}"  # the same code reused later in the log
        if code not in groups:
            groups[code] = []
            order.append(code)
        groups[code].append(rec)
    if match is not None:
        wanted = [c for c in order if c.split("#")[0].upper() == match.upper()]
        if not wanted:
            raise ReplayError(f"no match {match} in this log (it has {', '.join(order)})")
        code = wanted[0]
    else:
        code = order[0]
    return build(groups[code], report.walks)


def _what(rec: Record) -> TypedEvent:
    """A log record's match event as its class (any other event: an ``UnknownEvent``)."""
    return MATCH_EVENTS.read(logged_event(rec.data))


def _cut_short(problem: str) -> bool:
    """verify's words for a log that simply stops (``protocol/verify.py``)."""
    return "the log ends" in problem or "truncated" in problem


def build(recs: Sequence[Record], walks: Sequence[GameWalk[object, object]] | None = None) -> Replay:
    """The steps of one true match's records (see the module header), with the games' states from
    ``walks`` (the verifier's, by their ``game_started``; verified here when not given)."""
    if walks is None:
        walks = verify(recs, keep_walks=True).walks
    by_start = {w.start.line: w for w in walks if w.start is not None}
    head = recs[0].data
    game_name = str(head.get("game_name"))
    rules = game_for(game_name)
    seats = recs[0].integer("seats") or 2
    code = str(head.get("match"))
    names: list[str] = []
    # the relay's match state as it would have sent it at each step (``relay/model.py``)
    status, game_index, best_of = "waiting", -1, head.get("best_of", 1)
    wins: list[object] = []
    winner: object = None
    results: list[dict[str, object]] = []
    states: list[object] = [None] * len(recs)
    games: list[int] = [0] * len(recs)
    game_start: list[int] = [0] * len(recs)
    # Each game's states, as the verifier's walk re-derived them from its seed.
    whats = [_what(rec) for rec in recs]
    i = 0
    n = len(recs)
    while i < n:
        if isinstance(whats[i], GameStarted):
            j = i + 1
            while j < n and not isinstance(whats[j], (GameResult, SeatLeft, MatchOver, GameStarted)):
                j += 1
            end = recs[j] if j < n else None
            gidx = recs[i].integer("game")
            for k in range(i, min(j + 1, n)):
                game_start[k] = i
                games[k] = gidx
            walk = by_start.get(recs[i].line)
            if end is not None and isinstance(whats[j], GameResult) and walk is not None:
                # The walk explains the game's own events; a player's connection dropping and
                # returning falls between them and shows the state before it.
                after = {ev.line: st for ev, st in zip(walk.events, walk.states()[1:])}
                last = walk.initial
                states[i] = rules.view(last, None)
                for k in range(i + 1, j):
                    last = after.get(recs[k].line, last)
                    states[k] = rules.view(last, None)
                states[j] = states[j - 1]
            i = j
        i += 1
    steps: list[Step] = []
    last_state: object = None
    last_game = 0
    last_start = 0
    t = 0.0
    prev_ts: int | None = None
    for k, rec in enumerate(recs):
        d = rec.data
        match whats[k]:
            case SeatTaken(name=name):
                names.append(name)
            case SeatLeft(player=seat) if status == "waiting":
                if 0 <= seat < len(names):
                    names.pop(seat)
            case GameStarted():
                status = "playing"
                game_index = rec.integer("game")
                if not wins:
                    wins = [0] * seats
            case GameResult() as result:
                wins = list(result.wins or wins)
                results = results + [{"game_index": d.get("game"), "winners": list(result.winners),
                                      "reason": result.reason, "scores": list(result.scores)}]
                status = "between"
            case MatchOver() as over:
                status = "over"
                winner = over.winner
                wins = list(over.wins or wins)
            case RematchStarted():
                wins = [0] * seats
                results = []
                winner = None
        ms = {"status": status, "game_index": game_index, "best_of": best_of, "wins": wins, "players": list(names),
              "winner": winner, "results": results}
        if states[k] is not None:
            last_state, last_game, last_start = states[k], games[k], game_start[k]
        elif isinstance(whats[k], GameStarted) or game_start[k]:
            last_game, last_start = games[k], game_start[k]
        ts = d.get("ts")
        if type(ts) is int:
            if prev_ts is not None:
                t += min(MAX_GAP_S, max(0, ts - prev_ts) / NS)
            prev_ts = ts
        ev = m.Event(code, rec.integer("seq"), rec.integer("ts"), rec.integer("game"), rec.type,
                     {k2: v for k2, v in body(rec).items()})
        steps.append(Step(ev, last_state, last_game, json.loads(json.dumps(ms)), t))
        game_start[k] = last_start
    settings = head.get("settings")
    return Replay(code, game_name, tuple(names), dict(settings) if isinstance(settings, dict) else {}, steps, game_start)


# --------------------------------------------------------------------------------------- the clock


@dataclass
class Playback:
    """Where the replay stands: ``t_s`` in replay time, the step shown, speed and pause."""

    replay: Replay
    t_s: float = 0.0
    index: int = 0
    speed: float = 1.0
    paused: bool = False

    @property
    def at_end(self) -> bool:
        return self.index >= len(self.replay) - 1

    def tick(self, dt_s: float) -> list[int]:
        """Let ``dt_s`` of wall time pass; returns the steps reached, in order (to feed forward)."""
        if self.paused or self.at_end:
            return []
        self.t_s = min(self.replay.duration_s, self.t_s + dt_s * self.speed)
        target = self.replay.index_at(self.t_s)
        reached = list(range(self.index + 1, target + 1))
        self.index = max(self.index, target)
        if self.at_end:
            self.paused = True
        return reached

    def seek(self, index: int) -> int:
        """Stand at step ``index`` (clamped); returns it. Going back is always a seek."""
        self.index = max(0, min(index, len(self.replay) - 1))
        self.t_s = self.replay.steps[self.index].at_s
        return self.index

    def seek_fraction(self, f: float) -> int:
        """The scrub bar: the step at fraction ``f`` of the replay's time."""
        f = max(0.0, min(1.0, f))
        return self.seek(0 if f == 0.0 else self.replay.index_at(f * self.replay.duration_s))

    def set_speed(self, speed: float) -> None:
        self.speed = speed

    def toggle(self) -> None:
        if self.paused and self.at_end:
            self.seek(0)
        self.paused = not self.paused


# --------------------------------------------------------------------------------------- the session


class ReplaySession:
    """Stands in for the window's ``Session`` while a replay is shown: the scenes read ``model``
    (a spectator ``ClientModel`` at the replay's position), ``status`` and ``message`` as usual;
    nothing is sent anywhere. ``tick`` moves the playback on and feeds the model; ``seek`` makes a
    fresh model (and bumps ``epoch``, on which the window makes a fresh scene: a scene's animations
    only ever run forwards)."""

    def __init__(self, replay: Replay, name: str = "replay", speed: float = 1.0) -> None:
        from client.window.session import SessionConfig

        self.replay = replay
        self.config = SessionConfig(game=replay.game_name, name=name)
        self.playback = Playback(replay, speed=speed)
        self.status: SessionStatus = "playing"
        self.message = ""
        self.mode = "replay"
        self.player: Player | None = None  # nobody plays a replay
        self.address: BrokerAddress | None = None
        self.server: None = None
        self.server_url = ""
        self.join_command = ""  # nobody joins a replay
        self.local = False
        self.epoch = 0
        self.model: ClientModel | None = None
        self._tasks: set[asyncio.Task[object]] = set()
        self._wall_ns = 0

    def start_at(self, index: int, wall_ns: int) -> None:
        self.seek(index, wall_ns)

    def seek(self, index: int, wall_ns: int) -> None:
        i = self.playback.seek(index)
        self._wall_ns = wall_ns
        self.model = self.replay.model_at(i, wall_ns, self.playback.t_s, self.playback.speed, self.config.name)
        self.epoch += 1
        self._say()

    def _say(self) -> None:
        """What the scenes show where a game would be when there is none here (never "connecting…":
        a replay connects to nothing)."""
        self.message = self.replay.blank_reason(self.playback.index)

    def step(self, delta: int, wall_ns: int) -> None:
        """One event forward (fed, so its animation plays) or back (a seek)."""
        self.playback.paused = True
        i = self.playback.index + delta
        if delta == 1 and self.model is not None and i < len(self.replay):
            self.playback.seek(i)
            self.replay.advance_model(self.model, i, wall_ns, self.playback.t_s, self.playback.speed)
            self._say()
        else:
            self.seek(i, wall_ns)
        self._wall_ns = wall_ns

    def tick(self, wall_ns: int) -> None:
        if self.model is None:
            self.seek(0, wall_ns)
        model = self.model
        assert model is not None  # (made by ``seek``)
        dt = max(0.0, (wall_ns - self._wall_ns) / NS) if self._wall_ns else 0.0
        self._wall_ns = wall_ns
        moved = False
        for i in self.playback.tick(min(dt, 0.5)):  # a stalled frame does not skip half the match
            self.replay.advance_model(model, i, wall_ns, self.playback.t_s, self.playback.speed)
            moved = True
        if moved:
            self._say()

    # the Session surface the scenes use
    def spawn(self, coro: Awaitable[T], game: bool = False) -> asyncio.Task[T]:
        import asyncio

        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def act_now(self, action: object) -> m.Act | Rejected:
        return Rejected("spectator", "a replay is only watched")

    def rematch(self) -> None:
        pass

    async def start(self) -> None:
        pass

    async def leave(self) -> None:
        pass

    async def close(self) -> None:
        self.status = "closed"
