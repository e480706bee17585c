"""Fair order's decisions in a relay's log: recomputed, and re-judged in arrival order (pure: no I/O).

How this works
--------------
In a match played in fair order (``relay/fair.py``), a play that races others is held and judged
when due; its ``applied`` or ``rejected`` line in the relay's log (``blink serve --log``) then
carries ``"order": "fair"`` and the whole decision: the state the player saw (``seen_seq``) and the
match's seq when the play arrived (``state_seq``), the race (``race_key``), when the play arrived
and when the state it saw was published (relay time, ns), the player's measured round trip, the
claimed reaction and the floor, the reaction used and the *virtual send time*, every rival that
could still race then with the round trip the hold allowed it (``considered``: measured, or
assumed for a rival not measured yet), the margin and the cap, the planned release and whether the
cap cut it short, when the play was judged (``released_ns``) and why (``why``), the rivals judged
with it and a tie's coin.

``check(events, decisions)`` recomputes each decision from its inputs with the
scheduler's own formulas (``used_reaction``, ``planned_release``) and checks it against the log:

- the reaction used is the claim clamped by the floor and by the relay's clock; the virtual send
  time is the publication time plus it; the planned release and ``capped`` follow from the rivals
  considered, the margin and the cap; the hold is the time from arrival to judging; every decision
  of one log has the same cap, floor and margin (one relay, one configuration);
- ``why``: ``hold_over`` -- judged at or after the planned release; ``rivals_played`` -- earlier,
  because every rival considered had a play in the same race by then (its decision says when it
  arrived); ``no_rival`` -- earlier, because no rival could race any more, which needs the state to
  have changed since the play arrived (an event of a later seq is logged before the decision);
  ``ahead`` -- judged with a play of a later virtual send time that was due (same release);
- the order within a race: a play judged before a rival's play of the same race that was already
  held at the time, or judged with it (``rivals``: the seats judged in the same batch for the same
  race), must not have the later virtual send time (equal times: the smaller coin first);
  a coin is drawn only for a tie (another play with the same virtual send time judged at once);
- the seats named are the match's, a rival is never the player itself.

The first decision that fails is reported as a ``Finding`` on its line. The coin's value itself
comes from the match's secret seed and is not recomputed; its use is.

``arrival_flips(events, decisions, stale_code)`` re-judges every race of the log in arrival order:
a *race* is the decisions of one match and game for one race key from two seats or more. Fair
order's winner is the seat of the first play of the race that was applied; in arrival order the
first play to arrive that the state it saw allowed (applied, or rejected only as stale) would have
won. The races whose winner differs are returned as ``{match, seq, pile, fair_winner,
arrival_winner}`` (``seq``: the event of fair order's winning play; winners by player name).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence, TypedDict

from protocol import ProtocolError

WHY = ("hold_over", "rivals_played", "no_rival", "ahead")
_INTS = ("seat", "seen_seq", "state_seq", "arrival_ns", "published_ns", "floor_ns", "reaction_used_ns", "virtual_ns",
         "margin_ns", "cap_ns", "release_ns", "released_ns", "hold_ns", "coin")


class FalseDecision(ProtocolError, ValueError):
    """A decision line that contradicts fair order's rules; ``line`` names it."""

    def __init__(self, line: int, problem: str) -> None:
        super().__init__(problem)
        self.line = line
        self.problem = problem


class LogLine(Protocol):
    """A numbered line of a log, as ``protocol.verify.Record`` holds it."""

    @property
    def line(self) -> int: ...

    @property
    def data(self) -> Mapping[str, object]: ...


class Flip(TypedDict):
    """A race that arrival order would have given to another seat (``arrival_flips``)."""

    match: str
    seq: object  # the first seq of the winning play's events, as its line has it
    pile: object  # the race's pile (its race key's first part)
    fair_winner: str
    arrival_winner: str


def is_decision(data: Mapping[str, object]) -> bool:
    """Is this relay log line a play judged in fair order (it carries the decision)?"""
    return data.get("kind") in ("applied", "rejected") and data.get("order") == "fair"


def used_reaction(claimed: int | None, floor_ns: int, arrival_ns: int, published_ns: int, rtt_ns: int | None) -> int:
    """The reaction a play is judged by: its claim, never below the floor, never above what the
    relay's own clock allows (``relay/fair.py`` uses this very function)."""
    bound = max(0, arrival_ns - published_ns - (rtt_ns or 0))
    return bound if claimed is None else min(max(claimed, floor_ns), bound)


def planned_release(arrival_ns: int, virtual_ns: int, rival_rtts: Sequence[int], margin_ns: int,
                    cap_ns: int) -> tuple[int, bool]:
    """When a held play is due at the latest, and whether the cap cut its hold short: once each
    rival's faster play could have arrived (the virtual send time plus the rival's round trip and
    the margin), never later than the cap after arrival."""
    release = max([arrival_ns, *(virtual_ns + r + margin_ns for r in rival_rtts)])
    capped = release > arrival_ns + cap_ns
    return (arrival_ns + cap_ns if capped else release), capped


@dataclass(frozen=True)
class Decision:
    line: int
    data: dict[str, Any]
    match: int  # which match of the log (a code's every ``match_created`` at seq 1 starts one)
    game: int  # its game (the latest ``game_started`` before the line)

    def __getitem__(self, name: str) -> Any:
        return self.data[name]

    @property
    def race(self) -> tuple[int, int, str]:
        return (self.match, self.game, repr(self.data["race_key"]))


@dataclass
class _Match:
    code: str
    created_line: int
    seats: int = 2
    names: list[str] | None = None
    game_lines: list[int] | None = None  # lines of its game_started events
    events: list[tuple[int, int]] | None = None  # (line, seq) in log order
    game_name: str = ""


def _matches(events: Sequence[LogLine]) -> list[_Match]:
    """Each match of the log (events as ``protocol.verify.Record``: ``line`` and ``data``)."""
    out: list[_Match] = []
    current: dict[str, _Match] = {}
    for rec in events:
        d = rec.data
        code = str(d.get("match"))
        mt: _Match | None
        if d.get("type") == "match_created" and d.get("seq") == 1:
            seats = d.get("seats")
            mt = current[code] = _Match(code, rec.line, seats if type(seats) is int else 2, None, [], [],
                                        str(d.get("game_name")))
            out.append(mt)
        mt = current.get(code)
        if mt is None:  # (a log taken over mid-match is written whole: this is a damaged log, verify says so)
            mt = current[code] = _Match(code, 0, 2, None, [], [])
            out.append(mt)
        assert mt.events is not None and mt.game_lines is not None
        seq = d.get("seq")
        if type(seq) is int:
            mt.events.append((rec.line, seq))
        if d.get("type") == "game_started":
            mt.game_lines.append(rec.line)
            players = d.get("players")
            if isinstance(players, list):
                mt.names = [str(p) for p in players]
    return out


def decisions_of(events: Sequence[LogLine], lines: Sequence[LogLine]) -> tuple[list[Decision], list[_Match]]:
    """The decision lines (``Record``s of the relay's own log lines) placed in their match and game."""
    matches = _matches(events)
    by_code: dict[str, list[tuple[int, int]]] = {}
    for i, mt in enumerate(matches):
        by_code.setdefault(mt.code, []).append((mt.created_line, i))
    out = []
    for rec in lines:
        if not is_decision(rec.data):
            continue
        starts = [i for created, i in by_code.get(str(rec.data.get("match")), []) if created < rec.line]
        if not starts:
            raise FalseDecision(rec.line, f"a decision of match {rec.data.get('match')!r}, which the log never created")
        mt = matches[starts[-1]]
        assert mt.game_lines is not None
        game = sum(1 for g in mt.game_lines if g < rec.line) - 1
        out.append(Decision(rec.line, dict(rec.data), starts[-1], game))
    return out, matches


def _shape(d: Decision, seats: int) -> None:
    data = d.data
    for name in _INTS:
        if type(data.get(name)) is not int:
            raise FalseDecision(d.line, f"a fair decision without a whole number {name} (got {data.get(name)!r})")
    for name in ("rtt_ns", "reaction_claimed_ns"):
        if data.get(name) is not None and type(data.get(name)) is not int:
            raise FalseDecision(d.line, f"a fair decision whose {name} is {data.get(name)!r}, not a whole number or null")
    if data.get("why") not in WHY:
        raise FalseDecision(d.line, f"why {data.get('why')!r} is not one of {', '.join(WHY)}")
    if type(data.get("capped")) is not bool or not isinstance(data.get("race_key"), list):
        raise FalseDecision(d.line, "a fair decision without capped (true or false) or race_key (a list)")
    if not isinstance(data.get("rivals"), list) or not all(type(s) is int for s in data["rivals"]):
        raise FalseDecision(d.line, "a fair decision without rivals (the seats judged with it, a list)")
    considered = data.get("considered")
    if not isinstance(considered, list) or not all(
            isinstance(c, dict) and type(c.get("seat")) is int and type(c.get("rtt_ns")) is int
            and type(c.get("measured")) is bool for c in considered):
        raise FalseDecision(d.line, "considered is not a list of {seat, rtt_ns, measured}")
    if not 0 <= data["seat"] < seats:
        raise FalseDecision(d.line, f"seat {data['seat']} is not a seat of this {seats}-seat match")
    rivals = [c["seat"] for c in considered]
    if any(not 0 <= s < seats or s == data["seat"] for s in rivals) or len(set(rivals)) != len(rivals):
        raise FalseDecision(d.line, f"the rivals considered {rivals} are not other seats of the match, each once")


def _recompute(d: Decision) -> None:
    x = d.data
    reaction = used_reaction(x["reaction_claimed_ns"], x["floor_ns"], x["arrival_ns"], x["published_ns"], x["rtt_ns"])
    if x["reaction_used_ns"] != reaction:
        raise FalseDecision(d.line, f"reaction_used_ns {x['reaction_used_ns']} is not the claim "
                                    f"{x['reaction_claimed_ns']} clamped by the floor and the relay's clock ({reaction})")
    if x["virtual_ns"] != x["published_ns"] + reaction:
        raise FalseDecision(d.line, f"virtual_ns {x['virtual_ns']} is not published_ns + reaction_used_ns "
                                    f"({x['published_ns'] + reaction})")
    release, capped = planned_release(x["arrival_ns"], x["virtual_ns"], [c["rtt_ns"] for c in x["considered"]],
                                      x["margin_ns"], x["cap_ns"])
    if (x["release_ns"], x["capped"]) != (release, capped):
        raise FalseDecision(d.line, f"release_ns {x['release_ns']} (capped {str(x['capped']).lower()}) is not what the "
                                    f"rivals considered, the margin and the cap give: {release} "
                                    f"(capped {str(capped).lower()})")
    if x["released_ns"] < x["arrival_ns"] or x["hold_ns"] != x["released_ns"] - x["arrival_ns"]:
        raise FalseDecision(d.line, f"hold_ns {x['hold_ns']} is not the time from arrival to judging "
                                    f"({x['released_ns'] - x['arrival_ns']})")
    if x["seen_seq"] > x["state_seq"]:
        raise FalseDecision(d.line, f"seen_seq {x['seen_seq']} is later than the match's seq {x['state_seq']} "
                                    f"when the play arrived")


def _why(d: Decision, same_match: list[Decision], matches: list[_Match]) -> None:
    x = d.data
    why = x["why"]
    if why == "hold_over":
        if x["released_ns"] < x["release_ns"]:
            raise FalseDecision(d.line, f"judged at {x['released_ns']} as its hold being over, before its release "
                                        f"at {x['release_ns']}")
        return
    if x["released_ns"] >= x["release_ns"]:
        raise FalseDecision(d.line, f"why {why!r}, but it was judged when its hold was over (hold_over)")
    def held_then(seat: int) -> bool:  # did ``seat`` have a play in this race held when this one was judged?
        return any(o.race == d.race and o["seat"] == seat and o["arrival_ns"] <= x["released_ns"] <= o["released_ns"]
                   for o in same_match if o.data is not x)

    if why == "rivals_played":
        for c in x["considered"]:
            if not held_then(c["seat"]):
                raise FalseDecision(d.line, f"judged early as every rival had played, but seat {c['seat']} "
                                            f"had no play in this race then")
    elif why == "no_rival":
        mt = matches[d.match]
        assert mt.events is not None
        own_first = x["seq"][0] if x.get("kind") == "applied" and isinstance(x.get("seq"), list) and x["seq"] else None
        if x["considered"] and all(held_then(c["seat"]) for c in x["considered"]):
            raise FalseDecision(d.line, "judged early as no rival could race any more, but every rival considered "
                                        "had played (rivals_played)")
        if not x["considered"] or not any(
                line < d.line and seq > x["state_seq"] and (own_first is None or seq < own_first)
                for line, seq in mt.events):
            raise FalseDecision(d.line, "judged early as no rival could race any more, but nothing happened in the "
                                        "match since the play arrived")
    else:  # ahead: a play with a later virtual send time was due and this one goes first
        if not any(o.data is not x and o["released_ns"] == x["released_ns"] and o["virtual_ns"] >= x["virtual_ns"]
                   and o["why"] != "ahead" for o in same_match):
            raise FalseDecision(d.line, "judged early ahead of a later play, but no later play was due with it")


def check(events: Sequence[LogLine], lines: Sequence[LogLine]) -> FalseDecision | None:
    """The first decision line of the log that fair order's rules do not give (None: all true).
    ``events``: the log's events; ``lines``: its other records (``protocol.verify.Record``)."""
    try:
        decisions, matches = decisions_of(events, lines)
        config: tuple[int, int, int] | None = None
        by_match: dict[int, list[Decision]] = {}
        for d in decisions:
            _shape(d, matches[d.match].seats)
            by_match.setdefault(d.match, []).append(d)
        for d in decisions:
            x = d.data
            here = (x["cap_ns"], x["floor_ns"], x["margin_ns"])
            if config is None:
                config = here
            elif here != config:
                raise FalseDecision(d.line, f"cap, floor and margin {list(here)} differ from the log's first "
                                            f"decision's {list(config)} (one relay, one configuration)")
            _recompute(d)
            _why(d, by_match[d.match], matches)
            if x["coin"] and not any(o.data is not x and o["released_ns"] == x["released_ns"]
                                     and o["virtual_ns"] == x["virtual_ns"] for o in by_match[d.match]):
                raise FalseDecision(d.line, f"coin {x['coin']} drawn, but no play tied with this one")
        for ds in by_match.values():
            _order(ds)
    except FalseDecision as exc:
        return exc
    return None


def _order(ds: list[Decision]) -> None:
    """Within a race, no play goes before a held rival that reacted earlier (see the header)."""
    races: dict[tuple[int, int, str], list[Decision]] = {}
    for d in ds:
        races.setdefault(d.race, []).append(d)
    for race in races.values():
        for i, first in enumerate(race):
            for later in race[i + 1:]:
                together = (later["released_ns"] == first["released_ns"] and later["seat"] in first["rivals"]
                            and first["seat"] in later["rivals"])  # judged in one batch
                if (later["arrival_ns"] < first["released_ns"] or together) and \
                        (later["virtual_ns"], later["coin"]) < (first["virtual_ns"], first["coin"]):
                    raise FalseDecision(first.line, f"judged before seat {later['seat']}'s play (line {later.line}), "
                                                    f"which was already held and reacted earlier "
                                                    f"(virtual_ns {later['virtual_ns']} < {first['virtual_ns']})")


def arrival_flips(events: Sequence[LogLine], lines: Sequence[LogLine],
                  stale_code: Callable[[str], str]) -> tuple[int, list[Flip]]:
    """(races, flips): how many races the log's decisions hold, and those arrival order would give
    to another seat (see the header). ``stale_code``: a game's code for a play that lost a race, by
    the game's name. The decisions must be true (``check``) first."""
    decisions, matches = decisions_of(events, lines)
    races: dict[tuple[int, int, str], list[Decision]] = {}
    for d in decisions:
        races.setdefault(d.race, []).append(d)
    count = 0
    flips: list[Flip] = []
    for race in races.values():
        if len({d["seat"] for d in race}) < 2:
            continue
        stale = stale_code(matches[race[0].match].game_name)
        applied = [d for d in race if d.data.get("kind") == "applied"]
        allowed = [d for d in race if d.data.get("kind") == "applied" or d.data.get("code") == stale]
        if not applied or not allowed:
            continue  # nobody took this top: the race decided nothing
        count += 1
        fair = applied[0]
        first = min(allowed, key=lambda d: (d["arrival_ns"], d.line))
        if first["seat"] == fair["seat"]:
            continue
        mt = matches[fair.match]
        names = mt.names or []

        def name(seat: int) -> str:
            return names[seat] if seat < len(names) else f"seat {seat}"

        seq = fair.data.get("seq")
        flips.append({"match": mt.code, "seq": seq[0] if isinstance(seq, list) and seq else seq,
                      "pile": fair["race_key"][0], "fair_winner": name(fair["seat"]),
                      "arrival_winner": name(first["seat"])})
    return count, flips
