"""The relay's data: its configuration, its matches and seats, and what the core asks the runtime to do.

How this works
--------------
Plain data shared by the judging core (``relay/core.py``), the fair-order scheduler
(``relay/fair.py``) and the runtime (``relay/runtime.py``); it imports nothing from them, so the
relay's modules form no import circle. The core returns ``Out`` records -- ``Publish`` (a typed
message to a topic) or ``LogRecord`` (a line for the event log) -- and the runtime carries them out.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

from protocol.chance import SeededChance
from protocol.codec import fast_init
from protocol.match import MatchStatus, Order
from protocol.rules.base import Game

STATE_HISTORY = 256  # per match: states kept to tell a lost race from a plain mistake ...
#: ... but only those younger than this (a race is lost within a round trip; the last few always stay):
#: a BLINK match's memory would otherwise grow with its age, by a whole state a play.
HISTORY_NS = 10_000_000_000
HISTORY_MIN = 4


@fast_init  # several per play: see protocol.codec.fast_init
@dataclass(frozen=True)
class Publish:
    topic: str
    msg: object  # a protocol message, or b"" to clear a retained topic
    retain: bool = False
    qos: int = 0


@fast_init  # several per play: see protocol.codec.fast_init
@dataclass(frozen=True)
class LogRecord:
    record: dict[str, object]  # a line of the event log (JSON)


Out = Publish | LogRecord

#: The snapshot's codec of values (``relay/storage/snapshot.py``): what a part of the judge cannot write as
#: plain data itself (a game's state or action, a message) it hands to ``Encode`` when it writes its
#: record, and gets back from ``Decode`` when it reads it -- in the same order, since the codec
#: numbers the values it shares as they come.
Encode = Callable[[object], object]
Decode = Callable[[Any], Any]


@dataclass
class RelayConfig:
    relay_id: str = "relay-0"
    #: The default for matches that do not choose (a core refuses any other value when it is made).
    order: Order = "arrival"
    fair_cap_ns: int = 400_000_000  # fair mode: never hold a play longer than this
    fair_floor_ns: int = 100_000_000  # fair mode: no human reacts faster than this
    between_games_s: float = 3.0
    #: The retained public snapshot of a running match is rewritten at most this often (and at
    #: every game boundary): between, the public events carry every change.
    snapshot_interval_s: float = 1.0
    max_matches: int = 10_000
    # -- limits (relay/limits.py): far above what a person or the project's bots ever send, so only
    # -- a flood or an attacker meets them; every refusal is answered to its sender and logged once
    # -- per burst.
    #: Largest payload the core decodes, in bytes (the broker's cap is the same): larger is ``too_large``.
    max_payload: int = 8 * 1024
    act_rate: float = 100.0  # actions a second, per client (the bots play at most ~30)
    act_burst: int = 200
    req_rate: float = 20.0  # control requests a second, per client (pings, probe replies, lobby)
    req_burst: int = 60
    max_open_per_client: int = 3  # matches a client created that are not over yet: ``too_many_matches``
    max_waiting: int = 1_000  # matches waiting for players, relay-wide: ``relay_full``
    waiting_ttl_s: float = 600.0  # a match still waiting for its players after this expires
    linger_s: float = 120.0  # a finished match stays (rematch, resync) this long, then leaves memory
    client_idle_s: float = 300.0  # per-client state is dropped after this long without a message
    max_clients: int = 50_000  # clients remembered at once; the least recently heard from go first
    max_listed: int = 50  # waiting matches in the retained match list (it stays a few KiB)
    #: The games this relay offers, by name (default: the registry, ``protocol.rules.GAMES``). A test
    #: passes a variant here, e.g. BLINK dealing a fixed deck to force a race.
    games: Mapping[str, Game[Any, Any]] | None = None
    #: Scale-out (a relay of several shards, relay/runtime.py): how many shards the matches are spread over; 0 is the single
    #: relay (codes drawn freely, the one match list). With N >= 1 a shard's codes name the shard
    #: (relay/cluster/shards.py) and its match list is ``lobby/matches/{shard}``.
    shards_total: int = 0

    def to_record(self) -> dict[str, object]:
        """The settings as plain data (``games`` holds code, not data: a loader passes its own)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "games"}

    @classmethod
    def from_record(cls, record: Mapping[str, Any], games: Mapping[str, Game[Any, Any]] | None) -> RelayConfig:
        """The settings ``to_record`` wrote (a setting it does not hold has its default; one this
        version does not have is left out)."""
        known = {f.name for f in fields(cls)} - {"games"}
        return cls(**{k: v for k, v in record.items() if k in known}, games=games)

    def to_plain(self) -> dict[str, object]:
        """The settings as JSON-ready data for a child process: ``to_record`` and ``games`` by their
        registered names (a variant of a game is code, and cannot be named: ``ValueError``)."""
        from protocol.rules import GAMES

        if self.games is not None and any(GAMES.get(name) is not game for name, game in self.games.items()):
            raise ValueError("a relay offering a variant of a game cannot be started in another process")
        return {**self.to_record(), "games": None if self.games is None else sorted(self.games)}

    @classmethod
    def from_plain(cls, plain: Mapping[str, object]) -> RelayConfig:
        """The settings ``to_plain`` wrote; ``ValueError`` for a name or value they never hold."""
        from protocol.rules import GAMES

        defaults = cls()
        names = plain.get("games")
        if names is not None and (not isinstance(names, list) or any(n not in GAMES for n in names)):
            raise ValueError(f"unknown games {names!r}")
        values: dict[str, Any] = {}
        for key, value in plain.items():
            if key == "games":
                continue
            if key not in defaults.__dataclass_fields__:
                raise ValueError(f"unknown relay setting {key!r}")
            default = getattr(defaults, key)
            kind = (int, float) if isinstance(default, float) else type(default)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(f"relay setting {key!r} must be a {type(default).__name__}, not {value!r}")
            values[key] = value
        return cls(**values, games=None if names is None else {n: GAMES[n] for n in names})


@dataclass(slots=True)
class SeatFigures:
    """What the relay measured of one seat's plays, public in the match's snapshot (``seats``: the
    spectator page's panel per player): its races lost (a play legal in the state its player
    saw, refused with the game's stale code because another landed first), its latest round trip
    (a play's arrival less the publication of the state it names less the reaction it claims: the
    way down and back, taken when the relay still knows that publication), and, in fair order, how
    long its latest judged play was held (arrival order holds none)."""

    races_lost: int = 0
    rtt_ns: int | None = None
    held_ns: int | None = None

    def public(self, realtime: bool) -> dict[str, object]:
        out: dict[str, object] = {"rtt_ms": None if self.rtt_ns is None else round(self.rtt_ns / 1e6, 1),
                                  "held_ms": None if self.held_ns is None else round(self.held_ns / 1e6, 1)}
        if realtime:  # only a race has races to lose
            out["races_lost"] = self.races_lost
        return out


@dataclass
class Seat:
    client: str
    name: str
    rematch: bool = False
    token: str = ""  # secret: ``Rejoin(match, token)`` gives the seat to a new client id
    dropped_at: int | None = None  # relay time its connection dropped (last will); None: present
    left: bool = False  # taken out of a game that plays on without it (a leave, or its grace ran out)
    key: bytes = b""  # the public key it proved it holds when it joined (``protocol/identity.py``); b"": unrated
    #: What the relay measured of its plays (``SeatFigures``); None before its first. On the seat, not
    #: the match: a ``Match`` holds 29 attributes, the most whose instances still share one table of
    #: keys (CPython); one more costs every match about 1.3 kB.
    figures: SeatFigures | None = None


@dataclass
class Match:
    code: str
    game: str  # the game's canonical name
    rules: Game[Any, Any]
    settings: dict[str, Any]
    seats: int
    quick: bool
    seed: int
    players: list[Seat] = field(default_factory=list)
    status: MatchStatus = "waiting"  # its phase (protocol/match.py)
    seq: int = 0
    game_index: int = -1
    wins: list[int] = field(default_factory=list)
    best_of: int = 1
    state: Any = None
    chance: SeededChance | None = None
    history: deque[tuple[int, Any]] = field(default_factory=lambda: deque(maxlen=STATE_HISTORY))
    history_at: deque[int] = field(default_factory=lambda: deque(maxlen=STATE_HISTORY))  # when each was kept
    timers: dict[str, tuple[int, Any]] = field(default_factory=dict)
    next_game_at: int | None = None
    game_seed: int = 0
    winner: int | None = None
    results: list[dict[str, Any]] = field(default_factory=list)
    order: Order = "arrival"  # the relay's default, or chosen per match
    creator: str = ""  # the client that created it (its open matches are capped)
    #: When the core's housekeeping deadline for this match falls (waiting: it expires; over: it
    #: leaves memory); None: none pending. A deadline on the heap that differs from this is moot.
    housekeep_at: int | None = None
    #: How long a dropped player's seat is kept in a running match before it is forfeited
    #: (``abandoned``); a match setting, ``grace_s``.
    grace_s: float = 30.0
    #: The match's entry on the core's deadline heap (its earliest timer, hold, next game or due
    #: snapshot; monotonic ns); an entry on the heap that differs from this is moot.
    wake_at: int | None = None
    snapshot_at: int | None = None  # when its retained snapshot was last published
    snapshot_due: int | None = None  # a coalesced snapshot is owed at this time

    def figures_of(self, seat: int) -> SeatFigures:
        s = self.players[seat]
        if s.figures is None:
            s.figures = SeatFigures()
        return s.figures

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

    def out_of_play(self) -> tuple[int, ...]:
        """The seats taken out of a game that plays on without them (never a winner)."""
        return tuple(i for i, s in enumerate(self.players) if s.left)

    def grace_deadline(self) -> int | None:
        """When the earliest dropped seat's grace runs out (relay ns), or None if nobody is away."""
        dropped = [s.dropped_at for s in self.players if s.dropped_at is not None]
        return min(dropped) + int(self.grace_s * 1_000_000_000) if dropped else None

    def remember(self, now_ns: int) -> None:
        """Keep the current state for ``state_at``; forget those older than ``HISTORY_NS``."""
        history, at = self.history, self.history_at
        history.append((self.seq, self.state))
        at.append(now_ns)
        old = now_ns - HISTORY_NS
        while len(at) > HISTORY_MIN and at[0] < old:
            at.popleft()
            history.popleft()

    def forget(self) -> None:
        """A new game: only a running game is judged against its earlier states."""
        self.history.clear()
        self.history_at = deque(maxlen=STATE_HISTORY)

    def published_at(self, seq: int) -> int | None:
        """When the change that made ``seq`` was committed (and its events published), if it is
        still in the kept history: the change whose last seq is the first at or after ``seq``."""
        found = None
        for (s, _), at in zip(reversed(self.history), reversed(self.history_at)):  # a play names a recent one
            if s < seq:
                break
            found = at
        return found

    def state_at(self, seq: int) -> Any:
        """The state as it was right after ``seq`` (None if it is older than the kept history)."""
        found = None
        for s, state in self.history:
            if s <= seq:
                found = state
            else:
                break
        return found

    def to_record(self, enc: Encode) -> dict[str, object]:
        """The match as plain data, its settings, states and results through ``enc`` (in this order)."""
        return {
            "code": self.code, "game": self.game, "settings": enc(self.settings), "seats": self.seats,
            "quick": self.quick, "seed": self.seed,
            # a sixth item only for a seat taken out of play, a seventh for a rated one's key: others keep their form
            "players": [[s.client, s.name, s.rematch, s.token, s.dropped_at,
                         *([s.left, s.key] if s.key else [True] if s.left else [])]
                        for s in self.players],
            "status": self.status, "seq": self.seq, "game_index": self.game_index, "wins": list(self.wins),
            "best_of": self.best_of,
            # One value, in this order: the history's newest state is the current one (one object).
            "states": enc((self.state, [[s, st] for s, st in self.history], self.timers)),
            "history_at": list(self.history_at),
            "chance": None if self.chance is None else self.chance.to_record(),
            "next_game_at": self.next_game_at, "game_seed": self.game_seed, "winner": self.winner,
            "results": enc(self.results), "order": self.order, "creator": self.creator,
            "housekeep_at": self.housekeep_at, "grace_s": self.grace_s, "wake_at": self.wake_at,
            "snapshot_at": self.snapshot_at, "snapshot_due": self.snapshot_due,
            "figures": [[seat, f.races_lost, f.rtt_ns, f.held_ns] for seat, s in enumerate(self.players)
                        if (f := s.figures) is not None],
        }

    @classmethod
    def from_record(cls, r: Mapping[str, Any], dec: Decode, rules: Game[Any, Any]) -> Match:
        """The match ``to_record`` wrote, played by ``rules`` (its game, as this relay offers it)."""
        settings = dec(r["settings"])  # (decoded in the order they were encoded)
        state, history, timers = dec(r["states"])
        # (each game's index: ``game_index``, which a record may also name ``game``)
        results = [{("game_index" if k == "game" else k): v for k, v in x.items()} for x in dec(r["results"])]
        return cls(
            code=r["code"], game=r["game"], rules=rules, settings=settings, seats=r["seats"],
            quick=r["quick"], seed=r["seed"],
            players=[Seat(client=p[0], name=p[1], rematch=p[2], token=p[3], dropped_at=p[4],
                          left=len(p) > 5 and p[5] is True, key=p[6] if len(p) > 6 else b"")
                     for p in r["players"]],
            status=r["status"], seq=r["seq"], game_index=r["game_index"], wins=list(r["wins"]),
            best_of=r["best_of"], state=state,
            chance=None if r["chance"] is None else SeededChance.from_record(r["chance"]),
            history=deque(((s, st) for s, st in history), maxlen=STATE_HISTORY),
            history_at=deque(r["history_at"], maxlen=STATE_HISTORY), timers=timers,
            next_game_at=r["next_game_at"], game_seed=r["game_seed"], winner=r["winner"], results=results,
            order=r["order"], creator=r["creator"], housekeep_at=r["housekeep_at"], grace_s=r["grace_s"],
            wake_at=r["wake_at"], snapshot_at=r["snapshot_at"], snapshot_due=r["snapshot_due"],
            ).with_figures(r.get("figures", ()))

    def with_figures(self, figures: Iterable[Sequence[Any]]) -> Match:
        """This match with its seats' figures as ``to_record`` wrote them (``[seat, lost, rtt, held]``)."""
        for seat, lost, rtt, held in figures:
            self.players[seat].figures = SeatFigures(lost, rtt, held)
        return self

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

    def seat_figures(self) -> tuple[dict[str, object], ...]:
        """Each seat's figures as the snapshot publishes them (``SeatFigures``; none measured before its first play)."""
        realtime, none = self.rules.realtime, SeatFigures()
        return tuple((s.figures or none).public(realtime) for s in self.players)
