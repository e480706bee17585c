"""The relay's judging core: sans-I/O, the single judge of order and of the rules.

How this works
--------------
``RelayCore`` is the judge's one face to the runtime; behind it the judge is in parts, each a
module of ``relay/judge/`` that reads alone: the lobby (``lobby.py``: create, join, quick match,
leave, rejoin, rematch), the referee (``referee.py``: judging a play, fair order, a game's timers,
start and end), the remembered answers (``answers.py``), the gate (``gate.py``: rate limits, sizes,
quiet logging), the deadlines (``deadlines.py``: the wake-up and housekeeping heaps), housekeeping
(``housekeeping.py``: what ``tick`` does), events (``events.py``: seqs, views, snapshots, the
match list) and ratings (``ratings.py``: players' keys rated per game with OpenSkill, the
leaderboard), sharing only ``Tables`` (``tables.py``). The core composes them and routes each input;
each part writes and reads its own record (``to_record``/``load_record``), which the core composes
(``RelayCore.to_record``/``from_record``) and ``relay/storage/snapshot.py`` turns into a blob.

``RelayCore.handle(topic, payload, now_ns)`` takes one incoming MQTT message and the relay's time
and returns what to do: ``Publish`` records (topic, typed message, retain) and ``LogRecord``s for
the event log on disk. ``tick(now_ns)`` does what timers ask for (the start countdown, a
stalemate pause, a pick time limit, dice rolls, turn timers, the pause between games) and
``next_deadline()`` tells the shell when to call it next. Nothing here reads a clock, touches a
socket or draws a random number: time arrives as ``now_ns``, chance comes from ``SeededChance``
seeded by the shell, so a core fed the same inputs produces the same outputs.

Ordering. In ``arrival`` mode actions are judged one at a time in the order ``handle`` sees them,
each against the state as it is then, and stamped with ``now_ns``. In ``fair`` mode a race (for a
BLINK pile: the game's ``RaceRule`` says which plays race) is decided by reaction time, not by
network speed: the core computes a play's race key from the state its player saw and submits it to
the scheduler (``relay/fair.py``), which holds it; the core asks the scheduler which held plays are
due, judges them in its order, and includes its deadline (hold ends, probes) in ``next_deadline``.

The games come from the registry (``protocol.rules.GAMES``) or ``RelayConfig.games``; the core asks
a match's ``Game`` for everything game-specific and never compares a game's name.

Every public event gets the match's next ``seq`` (gap-free) and goes to ``.../ev``. Sending less:
for a game with an event applier (``Game.apply_event``/``private_delta``/``apply_private``, e.g.
BLINK) a change publishes only its public events and, to a player whose private part changed beyond
what those say (cards drawn into their hand), a small ``PrivateUpdate`` after them; clients apply
both with the engine's own code, and a player's whole view (``ViewUpdated``) goes out only when a
game starts or ends, on joining and on ``Resync``. A game without an applier still sends every
player their whole view after each change. The retained public snapshot is coalesced: rewritten at
game boundaries at once, otherwise at most once per ``snapshot_interval_s`` (from ``tick``).

Time. ``now_ns`` must be monotonic (it orders, holds and times everything); ``wall_ns`` (default
``now_ns``) only stamps events, snapshots, pongs and log records. Every live match's earliest
deadline (its game timers, a held play's release, the next game, a coalesced snapshot) sits on one
heap (``Match.wake_at``; moot entries are skipped when popped), so ``tick`` and ``next_deadline``
visit only the matches that are due, never all of them. An action is answered to its sender only (``ActionAccepted`` /
``ActionRejected`` with a reason code). Answers are remembered per client and action id, so a
duplicate (QoS 1 redelivery, a resend) gets the same answer again and is never applied twice.

A spectator arriving late asks ``Resync(match, from_seq=1)``: the match's past public events (the
last ``PAST_EVENTS`` of the match, its rematches included, at most once a second per client
and match) go to its private topic before the snapshot, so ``blink watch`` starts from the beginning.

Seats survive a dropped connection. Joining gives a seat a secret token (in ``MatchJoined``, on
the player's private topic only). A client's MQTT last will is ``Leave(dropped=True)``: in a
running match it does not forfeit but marks the seat dropped (``player_dropped``) and puts the end
of the match's ``grace_s`` on the housekeeping heap; ``Rejoin(match, token)`` from any client id
within it gives the seat to that id (``player_returned``, ``MatchJoined`` and its view); when the
grace runs out the match ends ``abandoned`` for those still there. A wrong token is ``bad_token``.
In a game that plays on without a player (``Game.leave``: a dice match of three or more), a leave
or a grace running out instead takes that seat out of play through the game's own action (its
``player_left`` event); the game goes on, and ends as a forfeit to the last side standing.

Bad input never raises out of ``handle``: undecodable bytes, unknown types, unknown matches or
players, actions out of phase all become a rejection to the sender (when the topic names one)
and a ``bad_input`` log record.

Limits (``relay/limits.py``, settings in ``RelayConfig``). Before a payload is decoded, its sender
(named by the topic) takes a token from its action or request bucket; a flood is answered once
(``rate_limited``), then dropped and counted until the bucket refills. A payload over
``max_payload`` is answered ``too_large`` undecoded. A client has at most ``max_open_per_client``
matches it created open (``too_many_matches``); the relay holds at most ``max_waiting`` waiting
matches (``relay_full``). Limit refusals are logged once per burst. Housekeeping runs in ``tick``
from a heap of deadlines: a match waiting longer than ``waiting_ttl_s`` expires (a ``match_expired``
event), a finished match leaves memory ``linger_s`` after its end (its log stays on disk; a late
Resync or Join gets ``no_such_match``), and a client not heard from for ``client_idle_s`` (or the
least recent beyond ``max_clients``) loses everything the core keeps for it, unless it is seated
in a match still open. The waiting matches and the running ones are kept in their own indexes, so
the match list, quick match and ``tick`` never walk every match.

Recovery (the shell's journal). Replaying a journal feeds the same inputs into a fresh core and
throws its outputs away, so while ``replaying`` is set the core skips building the messages that
carry nothing but outputs -- whole views, the coalesced snapshots, players' private updates --
and still does everything that changes its state (the snapshot schedule, events kept for
``Resync(from_seq)``, remembered answers, log records); a test checks the replayed core equals
the live one. ``resync(code, ...)`` then builds, without changing anything, what a restarted or
reconnected relay republishes for one match so that its clients catch up: every player's view,
then the retained snapshot.
"""

from __future__ import annotations

from typing import Any, Mapping

from protocol import identity
from protocol import messages as m
from protocol.rules import GAMES, AnyGame, canonical
from protocol.topics import Topics, valid_id
from relay.fair import FairOrder
from relay.judge import (ACCEPTED_SEQ_BITS, ORDERS, PAST_EVENTS, REMEMBERED_ANSWERS, Answers, Deadlines, Events, Gate,
                         Housekeeping, LeaderRow, Lobby, Ratings, Referee, RelayStats, Tables, Verifier, new_stats)
from relay.model import STATE_HISTORY, Decode, Encode, LogRecord, Match, Out, Publish, RelayConfig, Seat

__all__ = ["ACCEPTED_SEQ_BITS", "LogRecord", "Match", "ORDERS", "Out", "PAST_EVENTS", "Publish",
           "REMEMBERED_ANSWERS", "RelayConfig", "RelayCore", "STATE_HISTORY", "Seat"]


class RelayCore:
    #: The ``now_ns`` of the latest ``handle``/``tick`` (with the wall offset: its wall clock). It
    #: travels in snapshots, so a restarted shell can continue the core's monotonic time.
    last_now_ns = 0

    def __init__(self, topics: Topics | None = None, config: RelayConfig | None = None, seed: int = 0,
                 verify: Verifier = identity.verify) -> None:
        config = config or RelayConfig()
        if config.order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}, not {config.order!r}")
        games: Mapping[str, AnyGame] = GAMES if config.games is None else config.games
        # Idle for arrival-order matches; a match may choose fair order itself.
        fair = FairOrder(config.fair_cap_ns, config.fair_floor_ns)
        t = self.tables = Tables(topics=topics or Topics(), config=config, seed=seed, games=games, fair=fair)
        t.stats = new_stats()
        self.events = Events(t)
        self.answers = Answers()
        self.gate = Gate(t, self.events)
        self.deadlines = Deadlines(t)
        self.ratings = Ratings(t, verify)
        self.referee = Referee(t, self.events, self.gate, self.deadlines, self.answers, self.ratings)
        self.lobby = Lobby(t, self.events, self.gate, self.deadlines, self.referee, self.ratings)
        self.housekeeping = Housekeeping(t, self.events, self.gate, self.deadlines, self.answers, self.referee,
                                         self.lobby)

    # ------------------------------------------------------------------ what the runtime reads

    @property
    def topics(self) -> Topics:
        return self.tables.topics

    @property
    def config(self) -> RelayConfig:
        return self.tables.config

    @property
    def seed(self) -> int:
        return self.tables.seed

    @property
    def games(self) -> Mapping[str, AnyGame]:
        return self.tables.games

    @property
    def fair(self) -> FairOrder:
        return self.tables.fair

    @property
    def matches(self) -> dict[str, Match]:
        return self.tables.matches

    @property
    def client_match(self) -> dict[str, str]:
        return self.tables.client_match

    @property
    def stats(self) -> RelayStats:
        return self.tables.stats

    @property
    def replaying(self) -> bool:
        """Set while a journal is replayed into this core: outputs-only messages are not built (see
        the header's Recovery). The runtime clears it before it snapshots or serves."""
        return self.tables.replaying

    @replaying.setter
    def replaying(self, value: bool) -> None:
        self.tables.replaying = value

    @replaying.deleter
    def replaying(self) -> None:
        self.tables.replaying = False

    # ------------------------------------------------------------------ entry points

    def startup(self, now_ns: int) -> list[Out]:
        """What to publish when the relay comes online (status, empty match list)."""
        return [
            Publish(self.topics.relay_status(self.config.relay_id), m.RelayStatus(self.config.relay_id, True), retain=True),
            self.events.match_list(),
        ]

    def resync(self, code: str, now_ns: int, wall_ns: int) -> list[Out]:
        """What a (re)connected relay publishes for match ``code`` so that its clients resync: each
        player's whole view, then the retained snapshot (stamped ``wall_ns``), in that order, so
        a snapshot seen means the views went out before it. Read-only: not an input, not journalled,
        it changes nothing here (the coalesced snapshot's schedule included)."""
        match = self.matches.get(code)
        if match is None:
            return []
        out: list[Out] = []
        self.events.send_views(match, out)
        out.append(self.events.snapshot_of(match, wall_ns))
        return out

    def last_clock(self) -> tuple[int, int]:
        """(monotonic, wall) ns of the latest input: where a restarted shell continues the clock."""
        return self.last_now_ns, self.last_now_ns + self.tables.wall_offset

    def subscriptions(self) -> list[str]:
        return [self.topics.req_all, self.topics.act_all]

    def handle(self, topic: str, payload: bytes, now_ns: int, wall_ns: int | None = None) -> list[Out]:
        """One incoming message. ``now_ns`` is the relay's *monotonic* clock (it orders, holds and
        times everything and must never go backwards); ``wall_ns`` (default: ``now_ns``) is the wall
        clock, used only to stamp events, snapshots, pongs and log records."""
        self.tables.wall_offset = 0 if wall_ns is None else wall_ns - now_ns
        self.last_now_ns = now_ns
        return self._stamped(self._handle(topic, payload, now_ns))

    def _handle(self, topic: str, payload: bytes, now_ns: int) -> list[Out]:
        out: list[Out] = []
        try:
            act_addr = self.topics.parse_act(topic)
            if act_addr is not None:
                code, client = act_addr
                ids_ok = valid_id(client) and valid_id(code)
                if ids_ok and not self.gate.admit(client, code, payload, now_ns, out):
                    return out
                self.referee.on_act(code, client, payload, now_ns, out, ids_ok)
                return out
            requester = self.topics.parse_req(topic)
            if requester is not None:
                if valid_id(requester) and not self.gate.admit(requester, None, payload, now_ns, out):
                    return out
                self.lobby.on_req(requester, payload, now_ns, out)
                return out
            self.gate.bad_quietly(now_ns, out, "unknown_topic", topic=topic[:200])
        except Exception as exc:  # noqa: BLE001 - the relay never stops for bad input
            out.append(self.events.bad(now_ns, "internal_error", topic=topic, detail=f"{type(exc).__name__}: {exc}"))
        return out

    def _stamped(self, out: list[Out]) -> list[Out]:
        """Log records carry the wall clock: shift their monotonic stamps (events are stamped as made)."""
        if self.tables.wall_offset:
            for o in out:
                if isinstance(o, LogRecord):
                    ts = o.record.get("ts")
                    if isinstance(ts, int):
                        o.record["ts"] = ts + self.tables.wall_offset
        return out

    def tick(self, now_ns: int, wall_ns: int | None = None) -> list[Out]:
        """Do what is due by ``now_ns`` (monotonic; ``wall_ns`` as in ``handle``): housekeeping,
        probes, and the matches whose deadline has come (``relay/judge/housekeeping.py``)."""
        self.tables.wall_offset = 0 if wall_ns is None else wall_ns - now_ns
        self.last_now_ns = now_ns
        out: list[Out] = []
        self.housekeeping.tick(now_ns, out)
        return self._stamped(out)

    def next_deadline(self) -> int | None:
        """When ``tick`` should run next (monotonic ns), or None. O(1) but for dropping moot heap tops."""
        return self.deadlines.next_deadline()

    def shutdown(self) -> list[Out]:
        return [Publish(self.topics.relay_status(self.config.relay_id), m.RelayStatus(self.config.relay_id, False), retain=True)]

    # ------------------------------------------------------------------ its record (a snapshot's)

    def to_record(self, enc: Encode) -> dict[str, object]:
        """The whole judge as plain data: its own settings and each part's record under the part's
        names. What a part cannot write as plain data goes through ``enc`` (``relay/storage/snapshot.py``'s
        codec), in an order ``from_record`` keeps: the matches, the counters, the answers, the
        scheduler."""
        return {
            "seed": self.seed,
            "topics": {"prefix": self.topics.prefix, "shard": self.topics.shard},
            "config": self.config.to_record(),
            "last_now_ns": self.last_now_ns,
            **self.lobby.to_record(),
            **self.tables.to_record(enc),
            **self.answers.to_record(enc),
            **self.events.to_record(),
            "fair": self.fair.to_record(enc),
            **self.deadlines.to_record(),
            **self.gate.to_record(),
            **self.ratings.to_record(),
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any], dec: Decode,
                    games: Mapping[str, AnyGame] | None = None) -> RelayCore:
        """The judge ``to_record`` wrote, offering ``games`` (default: the registry). Raises
        ValueError for a record it cannot take (a match of a game not offered)."""
        config = RelayConfig.from_record(record["config"], games)
        topics = Topics(prefix=record["topics"]["prefix"], shard=record["topics"]["shard"])
        core = cls(topics, config, record["seed"])
        core.last_now_ns = record["last_now_ns"]
        core.lobby.load_record(record)
        core.tables.load_record(record, dec)
        core.answers.load_record(record, dec)
        core.tables.fair = FairOrder.from_record(record["fair"], dec)
        core.events.load_record(record)
        core.deadlines.load_record(record)
        core.gate.load_record(record)
        core.ratings.load_record(record)
        return core

    # ------------------------------------------------------------------ what others read

    def leaderboard(self, game: str, limit: int = 20) -> list[LeaderRow]:
        """A game's ``limit`` best rated players, best first (``relay/judge/ratings.py``): the
        rows the relay's answer to ``Ratings`` carries; pure, so a page may read it between steps."""
        return self.ratings.leaderboard(canonical(game), limit)

    def refused_on_load(self) -> list[str]:
        """One line for each part of its record this core did not take when it was loaded (a
        tampered ratings row): the shell says them; the core goes on without them."""
        return list(self.ratings.refused)

    # ------------------------------------------------------------------ for the runtime's recovery

    def publish_snapshot(self, match: Match, now_ns: int, out: list[Out]) -> None:
        """Publish ``match``'s retained snapshot now (and reset its coalescing schedule)."""
        self.events.publish_snapshot(match, now_ns, out)

    def send_views(self, match: Match, out: list[Out]) -> None:
        """Every player's whole view of ``match`` (none while replaying)."""
        self.events.send_views(match, out)
