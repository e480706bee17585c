"""Events as typed classes (protocol/events.py): every event an engine or the judge makes is one of
its registry's classes, and its public form -- as the relay publishes and logs it, through JSON --
decodes back into an equal instance; a wire name no registry knows is an ``UnknownEvent``, a map
that does not fit its class is refused (``decode``) or passed over (``read``)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from protocol.events import (BadEvent, TypedEvent, UnknownEvent, WireEvent, event_data, logged_event, public_data,
                             wire_name)
from protocol.match import (MATCH_EVENTS, GameResult, GameStarted, MatchCreated, MatchExpired, MatchOver, PlayerDropped,
                            PlayerReturned, RematchRequested, RematchStarted, SeatLeft, SeatTaken)
from protocol.rules import GAME_NAMES, AnyGame, events_of, game_for
from protocol.rules.base import SYSTEM, Accepted
from tests.helpers import RandomChance

NAMES = ("ann", "bob", "cy", "di")


def _through_the_wire(ev: TypedEvent, names: tuple[str, ...]) -> WireEvent:
    """The event as a reader gets it: its public map, sent as JSON."""
    return WireEvent(wire_name(ev), json.loads(json.dumps(public_data(ev, names))))


#: Settings that take random play everywhere: BLINK's stalemates and picks come with one-card
#: hands, its draws without refills; the dice games' timeouts with a turn timer.
SETTINGS: dict[str, list[dict[str, object]]] = {
    "blink": [{}, {"hand_size": 1}, {"hand_size": 1, "auto_refill": False}],
    "takeaway": [{}, {"turn_timer_s": 5}], "sequence": [{}, {"turn_timer_s": 5}], "ryo": [{}, {"turn_timer_s": 5}],
}
#: Events random play reaches too rarely to wait for (Roll Your Own's dice that can never differ,
#: and a round with nothing to change): made by hand below.
RARE = {"ryo": {"lot_drawn", "no_choice"}}


def _play(rules: AnyGame, seats: int, seed: int, settings: dict[str, object]) -> list[TypedEvent]:
    """The events of one game played at random (a seat leaving now and then, where the game plays on)."""
    rng = random.Random(seed)
    chance = RandomChance(seed)
    state = rules.new_game(rules.check_settings({**rules.quick_settings, **settings}, seats), seats, chance)
    events: list[TypedEvent] = []
    left: set[int] = set()
    for _ in range(20_000):
        if rules.outcome(state) is not None:
            return events
        timers = rules.timers(state)
        options: list[tuple[int | None, Any]] = [(p, a) for p in range(seats) if p not in left
                                                 for a in rules.legal_actions(state, p)]
        if rules.leave is not None and seats >= 3 and len(left) < seats - 1 and rng.random() < 0.03:
            seat = rng.choice([p for p in range(seats) if p not in left])
            options = [(SYSTEM, rules.leave(seat))]
            left.add(seat)
        elif timers and (not options or any(t.delay_ns == 0 for t in timers) or rng.random() < 0.2):
            options = [(SYSTEM, timers[0].action)]
        player, action = rng.choice(options)
        result = rules.apply(state, player, rules.complete(state, player, action, chance))
        if isinstance(result, Accepted):
            state = result.state
            events.extend(result.events)
    raise AssertionError(f"{rules.name}: the game did not end")


@pytest.mark.parametrize("name", GAME_NAMES)
def test_every_event_of_an_engine_is_its_class_and_reads_back_equal(name: str) -> None:
    rules = game_for(name)
    seen: set[str] = set()
    for seats, settings, seed in [(n, x, seed) for n in sorted({rules.min_players, min(rules.max_players, 4)})
                                  for x in SETTINGS[name] for seed in range(20 if rules.realtime else 6)]:
        names = NAMES[:seats]
        for ev in _play(rules, seats, seed, settings):
            assert rules.events.get(ev.TYPE) is type(ev), ev  # the game's registry holds its class
            back = rules.decode_event(_through_the_wire(ev, names))
            assert back == ev, (back, ev)
            assert public_data(back, names) == public_data(ev, names)
            seen.add(ev.TYPE)
    assert seen >= set(rules.events) - RARE.get(name, set()), sorted(set(rules.events) - seen)


def test_the_rare_dice_events_read_back_equal() -> None:
    from protocol.rules import roll_your_own as ryo

    rules = game_for("ryo")
    for ev in (ryo.LotDrawn(kind="rolloff", roll=12, players=(1, 2), player=2, reason="identical_one_valued_dice"),
               ryo.NoChoice(player=1, winner=0)):
        assert rules.decode_event(_through_the_wire(ev, NAMES[:3])) == ev


def test_the_match_events_read_back_equal_with_names_beside_seats() -> None:
    names = ("ann", "bob")
    made: list[TypedEvent] = [
        MatchCreated(game_name="blink", seats=2, settings={"best_of": 3, "deck": {"counts": [1, 2]}}, best_of=3,
                     order="fair"),
        SeatTaken(player=0, name="ann"), SeatLeft(player=1), PlayerDropped(player=1, grace_s=30),
        PlayerReturned(player=1), MatchExpired(after_s=600.0),
        GameStarted(players=names, seed_commitment="ab" * 32),
        GameResult(winner=None, winners=(0, 1), reason="shared_win", scores=(3, 3), wins=(1, 1), seed=2**63,
                   extra={"claimed": [[1, 2], [3]]}),
        MatchOver(winner=0, winners=(0,), reason="won", wins=(2, 1)), RematchRequested(player=0), RematchStarted(),
    ]
    assert {type(ev) for ev in made} == set(MATCH_EVENTS.values())
    for ev in made:
        assert MATCH_EVENTS.decode(ev.TYPE, _through_the_wire(ev, names).data) == ev
    over = public_data(MatchOver(winner=0, winners=(0,), reason="won", wins=(2, 1)), names)
    assert over == {"winner": "ann", "winners": ["ann"], "reason": "won", "wins": [2, 1], "winner_seat": 0,
                    "winner_seats": [0]}
    # a game's extras are the result's own keys on the wire, in the order the engine gave them
    result = GameResult(winner=1, winners=(1,), reason="sequence", scores=(0, 5), wins=(0, 1), seed=7,
                        extra={"line": [[0, 0], [1, 1]], "colour": "blue"})
    assert list(event_data(result)) == ["winner", "winners", "reason", "scores", "wins", "seed", "line", "colour"]


def test_a_log_line_reads_without_its_envelope() -> None:
    line = {"winner": "bob", "winners": ["bob"], "reason": "out_of_cards", "scores": [], "wins": [0, 1], "seed": 9,
            "winner_seat": 1, "winner_seats": [1], "seq": 40, "ts": 1, "type": "game_result", "game": 0, "match": "ABCDE"}
    assert MATCH_EVENTS.read(logged_event(line)) == GameResult(winner=1, winners=(1,), reason="out_of_cards", scores=(),
                                                              wins=(0, 1), seed=9)


def test_an_unknown_name_is_passed_over_and_a_map_that_does_not_fit_is_refused() -> None:
    blink = events_of("blink")
    assert blink.read(WireEvent("card_dealt", {"x": 1})) == UnknownEvent("card_dealt", {"x": 1})
    assert events_of("no such game") is MATCH_EVENTS  # a game this side does not know: its events are unknown
    bad = WireEvent("card_played", {"player": "ann", "seat": "zero", "card": "1-red-moon", "pile": 0})
    with pytest.raises(BadEvent, match="card_played.player"):
        blink.decode(bad.type, bad.data)
    assert isinstance(blink.read(bad), UnknownEvent)
    with pytest.raises(BadEvent, match="no pile"):
        blink.decode("card_played", {"player": "ann", "seat": 0, "card": "1-red-moon"})
    with pytest.raises(BadEvent):  # a Literal holds its values only
        blink.decode("stalemate", {"resolution": "shrug", "stalemate": 1})
    # a key a later relay adds is not this side's business
    assert blink.decode("race_resumed", {"why": "later"}) == blink["race_resumed"]()


def test_a_wire_name_is_one_class_per_registry() -> None:
    from protocol.events import EventTypes
    from protocol.rules.blink import CardPlayed

    with pytest.raises(TypeError, match="two event classes"):
        EventTypes(CardPlayed) | EventTypes(type("Other", (TypedEvent,), {"TYPE": "card_played"}))
    for name in GAME_NAMES:  # no game reuses a wire name of the match's own events
        assert not set(game_for(name).events) & set(MATCH_EVENTS)
