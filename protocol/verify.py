"""Checking a recorded event log against the seeds it reveals and the rules (pure: no I/O, no clock).

How this works
--------------
A log is a list of JSON objects: the public events of ``blink match --log`` / ``blink watch
--json``, or the relay's own ``blink serve --log`` (whose ``kind: "event"`` records are the same
events; its other records are ignored). ``parse_log(lines)`` turns the text into numbered records;
``verify(records)`` checks them and returns a ``Report`` with the first false line, if any.

Per match (records grouped by match code; a new ``match_created`` at seq 1 starts a new one):

- the envelope: ``seq`` gap-free from 1, ``ts`` never going back, ``game`` the game's index;
- the match frame: ``match_created`` with settings the game accepts, the seats taken in order, a
  ``game_started`` when the seats are full, ``game_result`` / ``match_over`` / rematches as the
  relay makes them (``relay/core.py`` is the reference; this module mirrors its frame, it does not
  import it -- the two share the rules that end a match, ``protocol/match.py``, and the events'
  public form, ``protocol/records.py``); a player's
  connection dropping and returning (``player_dropped`` / ``player_returned``, anywhere in a running
  match) names a seated player in order, and a ``match_over`` for ``abandoned`` comes only after a
  dropped player's ``grace_s`` has run out (the others win);
- each game, from the seed revealed in its ``game_result``: the seed must hash to the commitment
  published in ``game_started``; then the game is re-created with ``new_game(settings, seats,
  SeededChance(seed))`` -- the very chance the relay also uses for every later roll -- and the
  logged events are explained one group at a time. A group is what the relay publishes for one
  action: the candidates are every seat's ``legal_actions`` and the actions of the timers the
  relay has armed (mirroring its arming: a timer keeps its first deadline while its name is
  wanted). Each candidate goes through ``complete`` on a *copy* of the chance and ``apply``; a
  candidate whose events equal the next logged events (in their public form: names for seats, as
  the relay writes them) and share one timestamp, no earlier than the timer's deadline, explains
  them. Hidden choices (a BLINK pick, a secret die) can leave several candidates that explain the
  same events, so the walk keeps every distinct consistent state (a small breadth-first frontier)
  until later events tell them apart. When no state explains an event, that event is false.
- when the rules say the game is over, the next event must be ``game_result`` with the rules'
  winners, reason, scores and the seed; whether that ends the match, and how, is
  ``protocol/match.py``'s ``after_game`` (a game the others all left ends it ``forfeit``, any other
  result that decides it ``won``, the cap on games ``game_limit``).
- a player leaving a game that plays on without them (a game with ``leave``, three or more
  seats) is the relay's action ``leave(seat)``, a candidate like a timer's: its events (the
  engine's ``player_left`` and what follows) are explained by the rules like any other, so a
  leaver who plays on, a turn not passed, or a leaver named a winner is false. A later
  ``seat_left`` ending the match as a forfeit gives it to those who had not left.
- a waiting match closes when its last seat is left or it expires (``match_expired``): nothing of it follows.
- a log may end while a match runs (its relay stopped, was killed, or handed its shard to another):
  a log is what its relay had published so far, so that is true; what it holds is checked as
  usual, and the events of a game in progress wait for its seed (``Report.pending``).

- a relay's log of matches played in fair order: every decision a held play's line carries is
  recomputed (``protocol/fairlog.py``; ``parse_log(lines, relay_lines)`` collects those lines and
  ``verify(..., relay_lines=...)`` checks them); the first false one is a finding on its line.

The walk of one game is public (``walk_game`` -> ``GameWalk``): each surviving ``Hypothesis``
keeps its parent and the action that made it, so the explanation of a true game can be read back
as ``WalkStep``s (``GameWalk.steps()``) or as the state after every event (``GameWalk.states()``).
The replay viewer asks ``verify(..., keep_walks=True)`` for them instead of walking a second time.

A game's chance is not needed by a toy or future game in any special way: everything goes through
the registry's engine surface (``new_game``, ``apply``, ``complete``, ``legal_actions``,
``timers``, ``outcome``), and where a player's choice is secret and too large to enumerate (a
Roll Your Own die), the game's own ``secret_choice`` reads the later reveal to propose the action.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Hashable, Iterable, Iterator, Literal, Mapping, Sequence, TypeVar, cast

from protocol.chance import SeededChance, commitment
from protocol.fairlog import check as check_decisions
from protocol.fairlog import is_decision
from protocol.events import ENVELOPE, PublicEvent, TypedEvent, public_data, wire_name
from protocol.match import (MATCH_EVENTS, RUNNING, GameResult, MatchEnd, MatchStatus, PlayerDropped, PlayerReturned,
                            abandoned, after_game, left)
from protocol.records import plain
from protocol.rules import AnyGame, game_for
from protocol.rules.base import SYSTEM, Accepted, Game
from protocol import ProtocolError

S = TypeVar("S")
A = TypeVar("A")

#: The relay's own log says so on its first line: a relay's log may hold no match at all.
RELAY_STARTED = "relay_started"
#: ``blink latency --log`` puts the impairment it measured under before its local relay's log.
IMPAIRMENT = "impairment"
ORDERS = ("arrival", "fair")
#: A player's connection dropping and coming back during a running match: they may fall anywhere in
#: a game, so they are checked on their own (a seated player, dropped before returned) and taken out
#: of the game's events before those are replayed.
PRESENCE_TYPES = frozenset({PlayerDropped.TYPE, PlayerReturned.TYPE})
#: Events the relay makes itself around the games (everything else comes from a rule engine), but
#: those of a player's presence.
MATCH_TYPES = frozenset(MATCH_EVENTS) - PRESENCE_TYPES
MAX_GRACE_S = 600.0
NS = 1_000_000_000
#: Distinct consistent states kept while hidden choices are still open; more means the log is
#: hopelessly ambiguous, and the walk keeps the first ones.
FRONTIER_CAP = 256


class NotALog(ProtocolError, ValueError):
    """The text is not an event log at all (exit status 2 on the command line)."""


@dataclass(frozen=True)
class Record:
    line: int  # 1-based line in the file
    data: dict[str, object]

    @property
    def seq(self) -> object:
        return self.data.get("seq")

    @property
    def type(self) -> str:
        """The event's type ("" for a damaged line, which has none): a record is a ``PublicEvent``."""
        t = self.data.get("type")
        return t if isinstance(t, str) else ""

    def integer(self, key: str, default: int = 0) -> int:
        """The line's integer ``key`` (``seq``, ``ts``, ``game``...), or ``default`` where it has none."""
        value = self.data.get(key)
        return value if type(value) is int else default


@dataclass(frozen=True)
class Finding:
    line: int
    seq: object
    type: object
    problem: str

    def __str__(self) -> str:
        return f"line {self.line} (seq {self.seq}, {self.type}): {self.problem}"

    @classmethod
    def at(cls, rec: Record, problem: str) -> Finding:
        """A finding about ``rec``, naming its seq and type as the line has them."""
        return cls(rec.line, rec.seq, rec.data.get("type"), problem)


@dataclass
class Report:
    matches: int = 0  # every match: each code's first and each of its rematches
    rematches: int = 0
    games: int = 0  # games whose events were re-derived from their seed
    events: int = 0  # events checked (all of a true match's, less ``unchecked``)
    unchecked: int = 0  # events of games that ended without revealing their seed (a forfeit)
    running: int = 0  # matches still running where the log ends
    pending: int = 0  # events of games still running where the log ends (their seed not yet revealed)
    cut: int | None = None  # the log's last line, cut short (its writer was stopped mid-line)
    decisions: int = 0  # fair-order decisions recomputed (``protocol/fairlog.py``)
    first: Finding | None = None
    #: With ``verify(..., keep_walks=True)``: the walk of every game whose events were re-derived,
    #: in log order (the replay viewer reads each game's states from them instead of walking again).
    keep_walks: bool = False
    walks: list[GameWalk[Any, Any]] = field(default_factory=list)  # games of every kind: see AnyGame

    @property
    def ok(self) -> bool:
        return self.first is None

    def summary(self) -> str:
        if self.first is not None:
            return f"false: {self.first}"
        cut = f"; its last line ({self.cut}) was cut short" if self.cut is not None else ""
        if not self.matches:
            return f"true: no matches{cut}"
        rematches = f" ({self.rematches} rematch{'es' if self.rematches != 1 else ''})" if self.rematches else ""
        text = (f"true: {matches_phrase(self.matches)}{rematches}, {self.games} "
                f"game{'s' if self.games != 1 else ''}, {self.events} events checked")
        if self.decisions:
            text += f", {self.decisions} fair-order decision{'s' if self.decisions != 1 else ''} recomputed"
        if self.unchecked:
            text += f" ({self.unchecked} events of forfeited games not checkable: their seed was never revealed)"
        if self.running:
            text += (f"; {matches_phrase(self.running)} still running where the log ends"
                     + (f" ({self.pending} events of a game in progress not checkable yet: its seed is revealed "
                        f"at its end)" if self.pending else ""))
        return text + cut


def matches_phrase(count: int) -> str:
    """"1 match", "3 matches": a rematch is a match of its own (the replay list counts them so too)."""
    return f"{count} match{'es' if count != 1 else ''}"


# --------------------------------------------------------------------------------------- parsing


def parse_log(lines: Iterable[str], relay_lines: list[Record] | None = None) -> list[Record]:
    """Numbered event records of a log's lines. Raises ``NotALog`` when the text is not an event
    log (the first record is not JSON, or nothing in it is an event). A later line that is not a
    JSON object becomes a record with ``{"__bad__": reason}`` -- a damaged line, reported as false.
    An empty file, or a relay's own log that holds no match (a relay that served none), is a log of
    no matches: no records. ``relay_lines``, when given, receives the relay's own records that carry
    a fair-order decision (``protocol/fairlog.py``), numbered the same way."""
    records: list[Record] = []
    seen_any = False
    relay_log = False
    for number, text in enumerate(lines, 1):
        text = text.strip()
        if not text:
            continue
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            data = None
            reason = f"not JSON ({exc.msg})"
        except ValueError:  # e.g. a number too long to read
            data = None
            reason = "not JSON"
        else:
            reason = "not a JSON object"
        if not isinstance(data, dict):
            if not seen_any:
                raise NotALog(f"line {number} is {reason}: not an event log")
            # A JSON object cut short is a write its writer never finished (killed): if nothing follows
            # it, the log simply ends there (``__cut__``); anywhere else it is a damaged line.
            cut = data is None and text.startswith("{")
            records.append(Record(number, {"__cut__" if cut else "__bad__": reason}))
            continue
        if not seen_any and data.get("kind") in (RELAY_STARTED, IMPAIRMENT) and "type" not in data:
            relay_log = True
        seen_any = True
        if "type" not in data and "kind" in data:
            # the relay's own log: plays, rejections, bad input -- not events
            if relay_lines is not None and is_decision(data):
                relay_lines.append(Record(number, data))
            continue
        if data.get("kind") == "event":
            # The relay's log marks its events so; an event's own "kind" (a Roll Your Own roll)
            # overwrites the mark, and is kept.
            del data["kind"]
        if not isinstance(data.get("type"), str) or "seq" not in data:
            if not records:
                raise NotALog(f"line {number} is not an event (no seq or type): not an event log")
            records.append(Record(number, {"__bad__": "not an event (no seq or type)"}))
            continue
        records.append(Record(number, data))
    for k, rec in enumerate(records[:-1]):
        if "__cut__" in rec.data:
            records[k] = Record(rec.line, {"__bad__": rec.data["__cut__"]})
    if seen_any and not relay_log and not any("__bad__" not in r.data and "__cut__" not in r.data for r in records):
        raise NotALog("no events in it: not an event log")
    return records


# --------------------------------------------------------------------------------------- public form


# ``plain``/``with_names`` are the relay's own shaping of events (protocol/records.py): the expected
# events are built exactly as the relay writes them.


def same(a: object, b: object) -> bool:
    """Equal as JSON values: ``true`` is not ``1`` and ``1.0`` is not ``1`` (Python's ``==`` would
    say they are)."""
    return a == b and json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def body(rec: Record) -> dict[str, object]:
    return {k: v for k, v in rec.data.items() if k not in ENVELOPE}


_ABSENT = object()


def _differences(expected: object, logged: object, path: str = "") -> str:
    """Where two values first differ, as ``field[i] is X, the rules give Y`` (up to 3 fields)."""
    if isinstance(expected, dict) and isinstance(logged, dict):
        parts = []
        for k in sorted(set(expected) | set(logged)):
            a, b = expected.get(k, _ABSENT), logged.get(k, _ABSENT)
            if not same(a, b):
                parts.append(_differences(a, b, f"{path}.{k}" if path else k))
        return "; ".join(parts[:3])
    if isinstance(expected, list) and isinstance(logged, list) and len(expected) == len(logged):
        for i, (a, b) in enumerate(zip(expected, logged)):
            if not same(a, b):
                return _differences(a, b, f"{path}[{i}]")
    if logged is _ABSENT:
        return f"{path} is missing, the rules give {_short(expected)}"
    if expected is _ABSENT:
        return f"{path} should not be there"
    return f"{path} is {_short(logged)}, the rules give {_short(expected)}"


def _short(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --------------------------------------------------------------------------------------- one game


#: A game's ``secret_choice`` as the walk calls it (see ``Game.secret_choice``).
Hint = Callable[[S, int, Sequence[PublicEvent], int], "list[A] | None"]


@dataclass(frozen=True)
class Hypothesis(Generic[S, A]):
    """One consistent explanation of a game's events so far: the state the rules reached, the
    relay's chance at that point, the timers it has armed, and how it got here (``parent``, the
    ``action`` of ``player`` that produced the group of events ending at ``pos``). Following
    ``parent`` from a final hypothesis reads the whole explanation back."""

    state: S
    chance: SeededChance
    armed: Mapping[str, tuple[int, A]]  # timer name -> (deadline ns, action), as the relay keeps them
    pos: int = 0  # events explained so far
    parent: Hypothesis[S, A] | None = None
    player: int | None = SYSTEM
    action: A | None = None  # None for the game's start

    def key(self) -> Hashable:
        """Hypotheses with equal keys explain the future the same way: the walk keeps one of them."""
        try:
            k = (self.state, self.chance.position(), tuple(sorted((n, d) for n, (d, _) in self.armed.items())))
            hash(k)
            return k
        except TypeError:  # an unhashable state: each hypothesis stands alone
            return id(self)


@dataclass(frozen=True)
class WalkStep(Generic[S, A]):
    """One action of a game's explanation: ``player``'s ``action`` (``SYSTEM``: a relay timer or
    the relay's own move) made the logged ``events`` and led to ``state``."""

    player: int | None
    action: A
    events: tuple[Record, ...]
    state: S


@dataclass(frozen=True)
class GameWalk(Generic[S, A]):
    """What the walk of one game found: the first false event (``finding``), or the hypotheses
    that explain every event (several only if hidden choices were never told apart)."""

    start: Record | None  # the game's game_started (None for a walk of bare events)
    initial: S  # the state ``new_game`` made from the seed
    events: tuple[Record, ...]
    finals: tuple[Hypothesis[S, A], ...]
    finding: Finding | None

    @property
    def ok(self) -> bool:
        return self.finding is None and bool(self.finals)

    def steps(self) -> Iterator[WalkStep[S, A]]:
        """The actions of the first explanation, in order."""
        chain: list[Hypothesis[S, A]] = []
        h: Hypothesis[S, A] | None = self.finals[0] if self.finals else None
        while h is not None and h.parent is not None:
            chain.append(h)
            h = h.parent
        for h in reversed(chain):
            assert h.parent is not None and h.action is not None  # only the start has neither
            yield WalkStep(h.player, h.action, self.events[h.parent.pos:h.pos], h.state)

    def states(self) -> list[S]:
        """The initial state, then for each event the state after the action that made it (the
        events of one action share that state). For a false walk: the initial state throughout."""
        out = [self.initial]
        for step in self.steps():
            out.extend([step.state] * len(step.events))
        return out + [out[-1]] * (len(self.events) + 1 - len(out))


def arm(rules: Game[S, A], state: S, armed: Mapping[str, tuple[int, A]], now: int) -> dict[str, tuple[int, A]]:
    """The relay's timers after a change: a timer keeps its first deadline while its name is
    wanted, a new one is due ``delay_ns`` from ``now``, one no longer wanted is gone."""
    wanted = {t.name: t for t in rules.timers(state)}
    out = {n: v for n, v in armed.items() if n in wanted}
    for n, t in wanted.items():
        if n not in out:
            out[n] = (now + max(0, t.delay_ns), t.action)
    return out


@dataclass
class _Miss:
    """The furthest any candidate got, and how near the nearest ones came: for the message
    about the false event."""

    pos: int = -1
    notes: list[tuple[int, str]] = field(default_factory=list)  # (distance, text)

    def note(self, pos: int, text: str | None, distance: int = 50) -> None:
        if pos > self.pos:
            self.pos, self.notes = pos, []
        if pos == self.pos and text and all(t != text for _, t in self.notes):
            self.notes.append((distance, text))
            self.notes.sort(key=lambda n: n[0])
            del self.notes[3:]

    def nearest(self) -> list[str]:
        if not self.notes:
            return []
        best = self.notes[0][0]
        return [t for d, t in self.notes if d == best][:2]


def walk_game(rules: Game[S, A], settings: Mapping[str, object], seats: int, names: Sequence[str], seed: int,
              start_ts: int, events: Sequence[Record], end: Record | None = None,
              start: Record | None = None) -> GameWalk[S, A]:
    """Explain ``events`` (a game's events between ``game_started`` -- ``start`` -- and
    ``game_result``, which is ``end``) from the seed: the breadth-first walk of the module header.
    The verifier judges a game by it, and the replay viewer reads the states of a true game from it."""
    chance = SeededChance(seed)
    state0 = rules.new_game(settings, seats, chance)
    hyp0: Hypothesis[S, A] = Hypothesis(state0, chance, {} if rules.outcome(state0) is not None
                                        else arm(rules, state0, {}, start_ts))
    evs = tuple(events)
    logged = [body(r) for r in evs]
    hint = rules.secret_choice
    buckets: dict[int, dict[Hashable, Hypothesis[S, A]]] = {0: {hyp0.key(): hyp0}}
    miss = _Miss()
    n = len(evs)
    for pos in range(n):
        hyps = buckets.pop(pos, None)
        if not hyps:
            continue
        miss.note(pos, None)
        ts = evs[pos].data.get("ts")
        for hyp in hyps.values():
            if rules.outcome(hyp.state) is not None:
                miss.note(pos, "by the rules the game was already over (a game_result was due)")
                continue
            for player, action, deadline, timer in _candidates(rules, hint, hyp, seats, evs, pos):
                ch = hyp.chance.copy()
                try:
                    done = rules.complete(hyp.state, player, action, ch)
                    result = rules.apply(hyp.state, player, done)
                except Exception:  # noqa: BLE001 - a candidate the engine chokes on explains nothing
                    continue
                if not isinstance(result, Accepted) or not result.events:
                    continue
                k = _match_group(result.events, names, logged, evs, pos, miss)
                if k == 0:
                    continue
                if deadline is not None and type(ts) is int and ts < deadline:
                    miss.note(pos, f"the relay's timer {timer} makes this event, but not before ts {deadline}: "
                                   f"it is {deadline - ts} ns early", 0)
                    continue
                armed = {nm: v for nm, v in hyp.armed.items() if nm != timer}  # a fired timer is gone
                if rules.outcome(result.state) is None:
                    armed = arm(rules, result.state, armed, ts if type(ts) is int else 0)
                else:
                    armed = {}
                new = Hypothesis(result.state, ch, armed, pos + k, hyp, player, done)
                bucket = buckets.setdefault(pos + k, {})
                if len(bucket) < FRONTIER_CAP:
                    bucket.setdefault(new.key(), new)
    finals = buckets.get(n)
    if finals:
        return GameWalk(start, state0, evs, tuple(finals.values()), None)
    if 0 <= miss.pos < n:
        where = evs[miss.pos]
    else:  # every explanation needs more events before the game's end
        where = end if end is not None else evs[-1]
    problem = "no action of any player and no timer of the relay produces this event here"
    if miss.notes:
        problem += " (nearest: " + " | or: ".join(miss.nearest()) + ")"
    return GameWalk(start, state0, evs, (), Finding.at(where, problem))


def replay_game(game_name: str, rules: Game[S, A], settings: Mapping[str, object], seats: int, names: Sequence[str],
                seed: int, start_ts: int, events: Sequence[Record],
                end: Record | None = None) -> tuple[list[S], Finding | None]:
    """``walk_game``'s final states (several only if hidden choices were never told apart) or the
    first false event."""
    walk = walk_game(rules, settings, seats, names, seed, start_ts, events, end)
    return [h.state for h in walk.finals], walk.finding


def _candidates(rules: Game[S, A], hint: Hint[S, A] | None, hyp: Hypothesis[S, A], seats: int,
                events: Sequence[Record], pos: int) -> Iterator[tuple[int | None, A, int | None, str | None]]:
    for name, (deadline, action) in sorted(hyp.armed.items(), key=lambda kv: (kv[1][0], kv[0])):
        yield SYSTEM, action, deadline, name
    leave = rules.leave
    if leave is not None and seats >= 3 and events[pos].type == "player_left":
        for seat in range(seats):  # the relay's own action for a leaver, only where one is logged
            yield SYSTEM, leave(seat), None, None
    for seat in range(seats):
        proposed = hint(hyp.state, seat, events, pos) if hint is not None else None
        for action in (proposed if proposed is not None else rules.legal_actions(hyp.state, seat)):
            yield seat, action, None, None

def _match_group(produced: Sequence[TypedEvent], names: Sequence[str], logged: list[dict[str, object]],
                 events: Sequence[Record], pos: int, miss: _Miss) -> int:
    """How many logged events from ``pos`` this group explains: all of them, or 0."""
    ts = events[pos].data.get("ts")
    for i, ev in enumerate(produced):
        at = pos + i
        if at >= len(events):
            miss.note(at, f"the rules give {wire_name(ev)} here", 100)
            return 0
        etype = wire_name(ev)
        expected = public_data(ev, names)
        rec = events[at]
        if rec.type != etype:
            miss.note(at, f"the rules give {etype} here", 100)
            return 0
        if not same(expected, logged[at]):
            diff = [k for k in set(expected) | set(logged[at]) if not same(expected.get(k), logged[at].get(k))]
            miss.note(at, _differences(expected, logged[at]), len(diff))
            return 0
        if i > 0 and rec.data.get("ts") != ts:
            miss.note(at, "one action's events must share one timestamp")
            return 0
    return len(produced)


# --------------------------------------------------------------------------------------- a match


class _False(ProtocolError):
    def __init__(self, finding: Finding) -> None:
        super().__init__(str(finding))
        self.finding = finding


def _fail(rec: Record, problem: str) -> _False:
    return _False(Finding.at(rec, problem))


def _envelope(recs: Sequence[Record]) -> Finding | None:
    """The first record whose seq, ts or kind of line is wrong."""
    last_ts: int | None = None
    shard = recs[0].data.get("shard") if recs else None
    for i, rec in enumerate(recs):
        if "__bad__" in rec.data:
            return Finding(rec.line, None, None, f"a damaged line: {rec.data['__bad__']}")
        want = i + 1
        if i == 0 and type(rec.seq) is int and rec.seq > 1:
            return Finding.at(rec, f"the match's log starts at seq {rec.seq}: its first "
                                                        f"{rec.seq - 1} events are missing")
        if type(rec.seq) is not int or rec.seq != want:
            after = f"after seq {recs[i - 1].seq}" if i else "at the start"
            why = "an event is missing" if type(rec.seq) is int and rec.seq > want else "out of order or repeated"
            return Finding.at(rec, f"seq {rec.seq} {after}, expected {want} ({why})")
        ts = rec.data.get("ts")
        if type(ts) is not int:
            return Finding.at(rec, "no integer ts")
        if last_ts is not None and ts < last_ts:
            return Finding.at(rec, f"ts {ts} is earlier than the event before ({last_ts})")
        last_ts = ts
        if type(rec.data.get("game")) is not int:
            return Finding.at(rec, "no integer game index")
        if not same(rec.data.get("shard"), shard) or not (shard is None or isinstance(shard, str)):
            return Finding.at(rec, f"shard {_short(rec.data.get('shard'))}: every line of a match names the "
                                   f"one shard that judged it ({_short(shard)})")
    return None


def _check_match(recs: Sequence[Record], lookup: Callable[[str], AnyGame], report: Report) -> Finding | None:
    first_env = _envelope(recs)
    try:
        _walk(recs, lookup, report)
        first_rule = None
    except _False as exc:
        first_rule = exc.finding
    except Exception as exc:  # noqa: BLE001 - an engine that chokes on forged input: false, never a crash
        head = recs[0]
        first_rule = Finding.at(head, f"this match cannot be checked: {type(exc).__name__}: {exc}")
    found = [f for f in (first_env, first_rule) if f is not None]
    return min(found, key=lambda f: f.line) if found else None  # min keeps the envelope's on a tie


def _expect(rec: Record, etype: str, game: int, fields: Mapping[str, object]) -> None:
    if rec.type != etype:
        raise _fail(rec, f"the relay publishes {etype} here, not {rec.type}")
    if rec.data.get("game") != game:
        raise _fail(rec, f"game index {rec.data.get('game')}, expected {game}")
    if not same(body(rec), fields):
        raise _fail(rec, _differences(fields, body(rec)) or f"{etype} differs from what the relay publishes")


def _presence(rec: Record, names: Sequence[str], away: dict[int, tuple[int, float]], game: int) -> None:
    """Check a player_dropped / player_returned against who is away; update ``away``."""
    seat = rec.data.get("seat")
    if type(seat) is not int or not 0 <= seat < len(names) or rec.data.get("player") != names[seat]:
        raise _fail(rec, f"{rec.type} names no seated player")
    if rec.type == "player_dropped":
        grace = rec.data.get("grace_s")
        if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 <= grace <= MAX_GRACE_S:
            raise _fail(rec, f"grace_s {grace!r} is not a number of seconds from 0 to {MAX_GRACE_S:g}")
        if seat in away:
            raise _fail(rec, f"{names[seat]} dropped again without returning")
        _expect(rec, rec.type, game, {"player": names[seat], "seat": seat, "grace_s": grace})
        ts = rec.data.get("ts")
        away[seat] = (ts if type(ts) is int else 0, float(grace))
    else:
        if seat not in away:
            raise _fail(rec, f"{names[seat]} returned without having dropped")
        _expect(rec, rec.type, game, {"player": names[seat], "seat": seat})
        del away[seat]


def _abandoned(rec: Record, names: Sequence[str], away: dict[int, tuple[int, float]], seats: int,
               wins: list[int], game: int, gone: set[int]) -> None:
    """A match_over for ``abandoned``: some dropped player's grace had run out by then; the others win."""
    ts = rec.data.get("ts")
    now = ts if type(ts) is int else 0
    late = [s for s, (at, grace) in away.items() if at + int(grace * NS) <= now and s not in gone]
    if not late:
        raise _fail(rec, "match_over abandoned, but no dropped player's grace period had run out")
    _expect(rec, "match_over", game, public_data(abandoned(seats, late, gone).event(wins), names))


def _walk(recs: Sequence[Record], lookup: Callable[[str], AnyGame], report: Report) -> None:
    head = recs[0]
    if head.type != "match_created":
        raise _fail(head, "a match's log starts with match_created")
    d = head.data
    game_name, seats, settings = d.get("game_name"), d.get("seats"), d.get("settings")
    try:
        rules = lookup(str(game_name))
    except (ValueError, KeyError) as exc:
        raise _fail(head, f"unknown game: {exc}") from None
    if type(seats) is not int or not getattr(rules, "min_players", 1) <= seats <= getattr(rules, "max_players", 64):
        raise _fail(head, f"{seats!r} seats is not a number of players for {game_name}")
    try:
        # A value that is not a map goes to the game as it is: the game's own check refuses it in
        # the game's words (and takes a missing one, None, for the defaults).
        checked = rules.check_settings(dict(settings) if isinstance(settings, dict) else cast(Mapping[str, object], settings),
                                       seats)
    except (ValueError, TypeError) as exc:
        raise _fail(head, f"settings the game refuses: {exc}") from None
    if not same(plain(checked), settings):
        raise _fail(head, "settings are not in the game's own complete form")
    best_of = rules.best_of(checked) if hasattr(rules, "best_of") else 1
    if not same(d.get("best_of"), best_of):
        raise _fail(head, f"best_of {d.get('best_of')!r}, the settings give {best_of}")
    if type(d.get("game")) is not int or d.get("game") != 0:
        raise _fail(head, f"game index {d.get('game')!r}, expected 0")
    if d.get("order") not in ORDERS:
        raise _fail(head, f"order {d.get('order')!r} is not one of {', '.join(ORDERS)}")

    names: list[str] = []
    # The match's phase as the relay's, or closed (it expired or was left empty: nothing follows).
    status: MatchStatus | Literal["closed"] = "waiting"
    rematches = 0
    # The log may end while the match runs (its relay stopped, was killed, or handed its shard on):
    # what it holds is checked; the events of a game whose seed is not revealed yet are ``pending``.
    running = False
    pending = 0
    game_index = -1
    wins: list[int] = []
    rematch: set[int] = set()
    away: dict[int, tuple[int, float]] = {}  # seats whose player dropped: (relay ns then, grace s)
    gone: set[int] = set()  # seats taken out of the running game (its player_left events)
    i = 1
    n = len(recs)
    unchecked = 0

    def gi() -> int:
        return max(game_index, 0)

    while i < n:
        rec = recs[i]
        t = rec.type
        if "__bad__" in rec.data:
            raise _fail(rec, f"a damaged line: {rec.data['__bad__']}")
        if status == "closed":
            raise _fail(rec, "the relay had closed this match (it expired or every seat was left): "
                             "it publishes nothing more of it")
        if t == "seat_taken":
            if status != "waiting" or len(names) >= seats:
                raise _fail(rec, "a seat is taken after the seats are full")
            name = rec.data.get("name")
            if not isinstance(name, str) or not name or name in names:
                raise _fail(rec, f"name {name!r} is empty or already taken")
            _expect(rec, t, gi(), {"player": name, "seat": len(names), "name": name})
            names.append(name)
        elif t == "seat_left":
            seat = rec.data.get("seat")
            if type(seat) is not int or not 0 <= seat < len(names) or rec.data.get("player") != names[seat]:
                raise _fail(rec, "seat_left names no seated player")
            _expect(rec, t, gi(), {"player": names[seat], "seat": seat})
            if status == "over":
                raise _fail(rec, "the relay publishes no seat_left once the match is over")
            if seat in gone:
                raise _fail(rec, f"{names[seat]} had left the game already")
            if status == "waiting":
                names.pop(seat)
                if not names:
                    status = "closed"  # the relay closes a waiting match its last player left
            elif status in RUNNING:
                # The relay makes this only outside a game (a game ends in its game_result): see the
                # forfeit handling in the game branch below.
                i += 1
                if i >= n:
                    running = True  # the log ends within the step that ends the match
                    break
                _expect(recs[i], "match_over", gi(), public_data(left(seats, seat, gone).event(wins), names))
                status = "over"
        elif t == "match_expired":
            after = rec.data.get("after_s")
            if status != "waiting":
                raise _fail(rec, f"match_expired while the match is {status} (only a waiting match expires)")
            if isinstance(after, bool) or not isinstance(after, (int, float)) or after < 0:
                raise _fail(rec, f"after_s {after!r} is not a number of seconds")
            _expect(rec, t, gi(), {"after_s": after})
            status = "closed"
        elif t in PRESENCE_TYPES:
            if status not in RUNNING:
                raise _fail(rec, f"{t} while the match is {status} (only a running match keeps a seat)")
            _presence(rec, names, away, gi())
        elif t == "match_over" and rec.data.get("reason") == "abandoned" and status in RUNNING:
            _abandoned(rec, names, away, seats, wins, gi(), gone)
            status = "over"
        elif t == "game_started":
            if not ((status == "waiting" and len(names) == seats) or status == "between"):
                raise _fail(rec, "a game starts before the seats are full or while another game runs")
            game_index += 1
            if status == "waiting":
                wins = [0] * seats
            commit = rec.data.get("seed_commitment")
            if not (isinstance(commit, str) and len(commit) == 64 and all(c in "0123456789abcdef" for c in commit)):
                raise _fail(rec, f"seed_commitment {_short(commit)} is not a SHA-256 hex digest")
            _expect(rec, t, game_index, {"players": list(names), "seed_commitment": commit})
            status = "playing"
            j = i + 1
            while j < n and recs[j].type not in MATCH_TYPES and "__bad__" not in recs[j].data:
                j += 1
            for ev in recs[i + 1:j]:
                if ev.data.get("game") != game_index:
                    raise _fail(ev, f"game index {ev.data.get('game')}, expected {game_index}")
                if ev.type in PRESENCE_TYPES:
                    _presence(ev, names, away, game_index)
            game_events = [ev for ev in recs[i + 1:j] if ev.type not in PRESENCE_TYPES]
            gone = {ev.integer("seat") for ev in game_events
                    if ev.type == "player_left" and type(ev.data.get("seat")) is int}
            for ev in game_events:
                if ev.type == "player_left" and (seats < 3 or getattr(rules, "leave", None) is None):
                    # Whatever the seed: the relay ends such a match instead (a seat_left, a forfeit).
                    raise _fail(ev, f"player_left, but the relay takes no player out of a game of {game_name} "
                                    f"for {seats}: it ends the match")
            if j >= n:
                pending = len(game_events)  # its seed is revealed only at its end
                running = True
                break
            end = recs[j]
            if end.type == "seat_left" or (end.type == "match_over" and end.data.get("reason") == "abandoned"):
                unchecked += len(game_events)  # a forfeit: the seed stays secret
                i = j
                continue
            if end.type != "game_result":
                # A game_result whose type was changed still carries its seed: find it, replay up to
                # it, and name that line if the rules say the game was over there.
                for k, cand in enumerate(game_events):
                    seed = cand.data.get("seed")
                    if type(seed) is int and 0 <= seed < 1 << 64 and commitment(seed) == commit:
                        finals, finding = replay_game(str(game_name), rules, checked, seats, names, seed,
                                                      rec.integer("ts"), game_events[:k])
                        if finding is not None:
                            raise _False(finding)
                        if any(rules.outcome(f) is not None for f in finals):
                            raise _fail(cand, f"by the rules the game is over here: a game_result was due, "
                                              f"not {cand.type}")
                raise _fail(end, f"{end.type} during game {game_index}, before its game_result")
            seed = end.data.get("seed")
            if type(seed) is not int or not 0 <= seed < 1 << 64:
                raise _fail(end, f"seed {seed!r} is not a 64-bit seed")
            if commitment(seed) != commit:
                raise _fail(end, f"the revealed seed does not match the seed_commitment of game_started "
                                 f"(line {rec.line}): the shuffle and dice were not the ones committed to")
            walk = walk_game(rules, checked, seats, names, seed, rec.integer("ts"), game_events, end,
                             start=rec)
            if walk.finding is not None:
                raise _False(walk.finding)
            report.games += 1
            if report.keep_walks:
                report.walks.append(walk)
            outcomes = [o for o in (rules.outcome(h.state) for h in walk.finals) if o is not None]
            if not outcomes:
                raise _fail(end, "game_result, but by the rules the game is not over")
            expected = []
            for o in outcomes:
                ws = list(o.winners)
                new_wins = [w + (1 if s in ws else 0) for s, w in enumerate(wins)]
                expected.append((new_wins, ws, o.reason, public_data(GameResult(
                    winner=ws[0] if len(ws) == 1 else None, winners=tuple(ws), reason=o.reason, scores=o.scores,
                    wins=tuple(new_wins), seed=seed, extra=plain(o.extra)), names)))
            got = body(end)
            hit = next((e for e in expected if same(e[3], got)), None)
            if end.data.get("game") != game_index:
                raise _fail(end, f"game index {end.data.get('game')}, expected {game_index}")
            if hit is None:
                raise _fail(end, _differences(expected[0][3], got) or "game_result differs from the rules' outcome")
            wins = hit[0]
            i = j
            # What the relay does after a result: end the match, or wait for the next game.
            over: MatchEnd | None = after_game(wins, game_index + 1, best_of, hit[2])
            if over is not None:
                i += 1
                if i >= n:
                    running = True
                    break
                _expect(recs[i], "match_over", game_index, public_data(over.event(wins), names))
                status = "over"
            else:
                status = "between"
        elif t == "rematch_requested":
            seat = rec.data.get("seat")
            if status != "over":
                raise _fail(rec, "a rematch is asked for before the match is over")
            if type(seat) is not int or not 0 <= seat < len(names):
                raise _fail(rec, "rematch_requested names no seated player")
            _expect(rec, t, gi(), {"player": names[seat], "seat": seat})
            rematch.add(seat)
            if len(rematch) == seats:
                i += 1
                if i >= n:
                    running = True
                    break
                _expect(recs[i], "rematch_started", gi(), {})
                rematches += 1
                rematch = set()
                away = {}
                wins = [0] * seats
                status = "between"  # the next record must be its game_started
                if i + 1 < n and recs[i + 1].type != "game_started":
                    raise _fail(recs[i + 1], "a rematch_started must be followed by its game_started")
        elif t in MATCH_TYPES:
            raise _fail(rec, f"{t} where the relay would not publish it (the match is {status})")
        else:
            raise _fail(rec, f"a game event while no game is running (the match is {status})")
        i += 1
    if status == "between":
        running = True
    report.matches += 1 + rematches
    report.rematches += rematches
    report.running += running
    report.events += n - unchecked - pending
    report.unchecked += unchecked
    report.pending += pending


# --------------------------------------------------------------------------------------- entry


def verify(records: Sequence[Record], lookup: Callable[[str], AnyGame] = game_for,
           keep_walks: bool = False, relay_lines: Sequence[Record] = ()) -> Report:
    """Check every match in ``records`` (see the module header). ``lookup`` finds a game's engine
    by name (the registry by default; a test may pass its own). ``keep_walks``: keep each game's
    ``GameWalk`` in ``Report.walks`` (every state of every game: memory a plain check does not need).
    ``relay_lines``: the fair-order decisions ``parse_log`` collected; each is recomputed
    (``protocol/fairlog.py``) and the first false one is a finding like a false event."""
    report = Report(keep_walks=keep_walks)
    report.decisions = len(relay_lines)
    matches: list[list[Record]] = []
    open_by_code: dict[str, list[Record]] = {}
    pending_bad: list[Record] = []
    for rec in records:
        if "__cut__" in rec.data:
            report.cut = rec.line
            continue
        if "__bad__" in rec.data:
            pending_bad.append(rec)
            continue
        code = str(rec.data.get("match"))
        recs = open_by_code.get(code)
        if recs is None or (rec.type == "match_created" and rec.seq == 1):
            recs = open_by_code[code] = []
            matches.append(recs)
        for bad in pending_bad:  # a damaged line belongs to the match being read around it
            recs.append(bad)
        pending_bad = []
        recs.append(rec)
    if pending_bad:
        report.first = Finding(pending_bad[0].line, None, None, f"a damaged line: {pending_bad[0].data['__bad__']}")
    findings = []
    for recs in matches:
        f = _check_match(recs, lookup, report)
        if f is not None:
            findings.append(f)
    if report.first is not None:
        findings.append(report.first)
    if relay_lines:
        wrong = check_decisions([r for r in records if "__bad__" not in r.data and "__cut__" not in r.data], relay_lines)
        if wrong is not None:
            data = next(r.data for r in relay_lines if r.line == wrong.line)
            seq = data.get("seq")
            findings.append(Finding(wrong.line, seq[0] if isinstance(seq, list) and seq else None,
                                    f"fair decision, {data.get('kind')}", wrong.problem))
    report.first = min(findings, key=lambda f: f.line) if findings else None
    return report
