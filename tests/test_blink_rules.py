"""BLINK rules (RULES.md section 1), clause by clause, plus properties of the pure engine."""

from __future__ import annotations

import random
from dataclasses import FrozenInstanceError, replace

import pytest
from hypothesis import given, settings, strategies as st

from protocol.rules import blink
from protocol.rules.base import SYSTEM, Accepted, FixedChance, Rejected
from tests.helpers import RandomChance, maps
from protocol.rules.blink import Card, DrawCard, PickCard, PickTimeout, PlayCard, ResolveStalemate, StartRace

C = Card.parse




def started(state: blink.State) -> blink.State:
    r = blink.apply(state, SYSTEM, StartRace())
    assert isinstance(r, Accepted)
    return r.state


def ok(result: Accepted[blink.State] | Rejected) -> blink.State:
    assert isinstance(result, Accepted), result
    return result.state


def made(hands: tuple[list[str], list[str]], tops: tuple[list[str], list[str]], draws: tuple[list[str], list[str]],
         **settings: object) -> blink.State:
    """A running state built by hand; the rest of the deck goes nowhere (tests of single clauses)."""
    s = blink.make_settings(dict(settings))
    return blink.State(
        settings=s,
        draw=(tuple(map(C, draws[0])), tuple(map(C, draws[1]))),
        hands=(tuple(map(C, hands[0])), tuple(map(C, hands[1]))),
        piles=(tuple(map(C, tops[0])), tuple(map(C, tops[1]))),
        phase="running",
    )


# --- the deck -----------------------------------------------------------------------------------


def test_standard_deck_has_60_unique_cards() -> None:
    deck = blink.standard_deck()
    assert len(deck) == 60 and len(set(deck)) == 60
    assert {c.colour for c in deck} == {"red", "yellow", "green", "blue"}
    assert {c.shape for c in deck} == {"star", "triangle", "moon"}
    assert {c.count for c in deck} == {1, 2, 3, 4, 5}


def test_card_text_round_trips() -> None:
    for card in blink.standard_deck():
        assert C(str(card)) == card
    assert str(C("4-yellow-star")) == "4-yellow-star"
    assert C("4-yellow-star") == Card(4, "yellow", "star")


@pytest.mark.parametrize("text", ["", "4-yellow", "4-yellow-star-x", "0-red-star", "6-red-star", "x-red-star",
                                  "4-purple-star", "4-yellow-square", "4 yellow star", "-1-red-star",
                                  "04-yellow-star-", "４-red-star", "4-Yellow-star"])
def test_malformed_card_text_raises_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        C(text)


def test_parse_refuses_non_strings() -> None:
    with pytest.raises(ValueError):
        Card.parse(4)  # type: ignore[arg-type]


def test_deck_is_data_another_deck_works() -> None:
    deck = blink.Deck(("a", "b", "c", "d", "e", "f"), ("p", "q", "r", "s", "t"), (1, 2))
    assert len(deck.cards()) == 60
    s = blink.make_settings({"deck": deck.to_wire()})
    state = blink.new_game(s, 2, RandomChance(1))
    assert blink.GAME.invariant_ok(state)
    assert C("2-f-t", deck) in deck.cards()
    with pytest.raises(ValueError):
        C("3-a-p", deck)


# --- matching: the seed's example ------------------------------------------------------------------


def test_seed_example_four_yellow_star() -> None:
    card = C("4-yellow-star")
    assert blink.cards_match(card, C("1-yellow-moon"))  # any yellow card
    assert blink.cards_match(card, C("2-red-star"))  # any star card
    assert blink.cards_match(card, C("4-blue-triangle"))  # any card with four symbols
    assert not blink.cards_match(card, C("3-green-moon"))


def test_matching_is_symmetric() -> None:
    deck = blink.standard_deck()
    for a in deck[::7]:
        for b in deck:
            assert blink.cards_match(a, b) == blink.cards_match(b, a)


# --- setup -----------------------------------------------------------------------------------------


def test_setup_deals_two_piles_face_down_centres_and_hands_of_three() -> None:
    state = blink.new_game({}, 2, RandomChance(7))
    assert state.phase == "countdown"
    assert [len(h) for h in state.hands] == [3, 3]
    assert [len(d) for d in state.draw] == [26, 26]  # 30 each: 1 to the centre, 3 to the hand
    assert [len(p) for p in state.piles] == [1, 1]
    assert blink.GAME.invariant_ok(state)


def test_deal_takes_centre_then_hand_from_own_pile() -> None:
    deck = blink.standard_deck()
    state = blink.deal(blink.Settings(), deck)
    assert state.piles[0] == (deck[0],) and state.hands[0] == deck[1:4] and state.draw[0] == deck[4:30]
    assert state.piles[1] == (deck[30],) and state.hands[1] == deck[31:34] and state.draw[1] == deck[34:60]


def test_centre_cards_face_down_until_start_then_both_revealed_together() -> None:
    state = blink.new_game({}, 2, RandomChance(3))
    for seat in (0, 1, None):
        assert all(c is None for p in blink.view(state, seat).piles for c in p)
    r = blink.apply(state, SYSTEM, StartRace())
    assert isinstance(r, Accepted)
    revealed = [e for e in maps(r.events) if e["type"] == "card_revealed"]
    assert [(e["player"], e["pile"]) for e in revealed] == [(0, 0), (1, 1)]
    assert [e["card"] for e in revealed] == [str(state.piles[0][0]), str(state.piles[1][0])]


def test_a_play_before_the_start_is_rejected() -> None:
    state = blink.new_game({}, 2, RandomChance(3))
    card = str(state.hands[0][0])
    r = blink.apply(state, 0, PlayCard(card, 0))
    assert isinstance(r, Rejected) and r.code == "not_running"


def test_shuffle_is_an_input_same_chance_same_game() -> None:
    a = blink.new_game({}, 2, FixedChance(list(range(100))))
    b = blink.new_game({}, 2, FixedChance(list(range(100))))
    c = blink.new_game({}, 2, FixedChance(list(range(1, 101))))
    assert a == b and a != c


# --- playing ---------------------------------------------------------------------------------------


def test_play_onto_either_pile_when_it_matches_and_refill_to_three() -> None:
    s = made((["4-yellow-star", "1-red-moon", "2-red-moon"], ["3-blue-triangle"] * 1),
             (["1-yellow-moon"], ["4-green-triangle"]), (["5-green-star", "5-blue-star"], []))
    r = blink.apply(s, 0, PlayCard("4-yellow-star", 1))  # matches the 4 on pile 1
    s2 = ok(r)
    assert s2.top(1) == C("4-yellow-star")
    assert s2.hands[0] == (C("1-red-moon"), C("2-red-moon"), C("5-green-star"))
    assert s2.draw[0] == (C("5-blue-star"),)
    assert [e["type"] for e in maps(r.events)][:2] == ["card_played", "hand_refilled"]
    assert maps(r.events)[0] == {"type": "card_played", "player": 0, "card": "4-yellow-star", "pile": 1}


def test_play_that_does_not_match_is_rejected_and_the_card_stays() -> None:
    s = made((["4-yellow-star"], ["1-red-moon"]), (["3-green-moon"], ["2-blue-triangle"]), (["1-red-star"], ["2-red-star"]))
    r = blink.apply(s, 0, PlayCard("4-yellow-star", 0))
    assert isinstance(r, Rejected) and r.code == "no_match"


def test_card_not_in_hand_is_rejected() -> None:
    s = made((["4-yellow-star"], ["1-red-moon"]), (["4-green-moon"], ["2-blue-triangle"]), (["1-red-star"], ["2-red-star"]))
    r = blink.apply(s, 0, PlayCard("1-red-moon", 0))
    assert isinstance(r, Rejected) and r.code == "not_in_hand"


@pytest.mark.parametrize("pile", [2, -1])
def test_bad_pile_is_rejected(pile: int) -> None:
    s = made((["4-yellow-star"], ["1-red-moon"]), (["4-green-moon"], ["2-blue-triangle"]), (["1-red-star"], ["2-red-star"]))
    r = blink.apply(s, 0, PlayCard("4-yellow-star", pile))
    assert isinstance(r, Rejected) and r.code == "bad_pile"


def test_malformed_card_in_a_play_is_rejected() -> None:
    s = made((["4-yellow-star"], ["1-red-moon"]), (["4-green-moon"], ["2-blue-triangle"]), (["1-red-star"], ["2-red-star"]))
    r = blink.apply(s, 0, PlayCard("9-red-star", 0))
    assert isinstance(r, Rejected) and r.code == "malformed"


def test_a_player_plays_on_the_opponents_pile_too() -> None:
    s = made((["4-yellow-star", "1-red-star"], ["1-red-moon"]), (["3-green-moon"], ["4-blue-triangle"]),
             (["1-blue-star"], ["2-red-star"]))
    assert ok(blink.apply(s, 0, PlayCard("4-yellow-star", 1))).top(1) == C("4-yellow-star")


def test_race_for_one_pile_first_lands_second_checked_against_new_top() -> None:
    # Both players can play on pile 0 (top 3-green-moon). Whoever the relay takes first lands;
    # the second is checked against the new top: it lands only if it still matches.
    s = made((["3-red-star", "1-blue-star"], ["5-green-triangle", "2-blue-moon"]),
             (["3-green-moon"], ["1-blue-triangle"]), (["1-yellow-star"], ["1-red-triangle"]))
    first = ok(blink.apply(s, 0, PlayCard("3-red-star", 0)))
    second = blink.apply(first, 1, PlayCard("5-green-triangle", 0))  # no colour, shape or count of 3-red-star
    assert isinstance(second, Rejected) and second.code == "no_match"
    assert C("5-green-triangle") in first.hands[1]
    still = ok(blink.apply(first, 1, PlayCard("2-blue-moon", 1)))  # other pile still fine
    assert still.top(1) == C("2-blue-moon")
    # ... and a second play that still matches the new top lands too.
    s2 = replace(s, hands=(s.hands[0], (C("3-green-triangle"), C("2-blue-moon"))))
    first2 = ok(blink.apply(s2, 0, PlayCard("3-red-star", 0)))
    assert ok(blink.apply(first2, 1, PlayCard("3-green-triangle", 0))).top(0) == C("3-green-triangle")


def test_explicit_draw_setting() -> None:
    s = made((["4-yellow-star", "1-red-moon", "2-red-moon"], ["3-blue-triangle"]),
             (["1-yellow-moon"], ["4-green-triangle"]), (["5-green-star"], ["1-blue-moon"]), auto_refill=False)
    s2 = ok(blink.apply(s, 0, PlayCard("4-yellow-star", 0)))
    assert len(s2.hands[0]) == 2 and len(s2.draw[0]) == 1  # no automatic refill
    s3 = ok(blink.apply(s2, 0, DrawCard()))
    assert s3.hands[0][-1] == C("5-green-star") and not s3.draw[0]
    r = blink.apply(s3, 0, DrawCard())
    assert isinstance(r, Rejected) and r.code == "hand_full"
    auto = made((["4-yellow-star"], ["1-red-moon"]), (["4-green-moon"], ["2-blue-triangle"]), (["1-red-star"], ["2-red-star"]))
    r2 = blink.apply(auto, 0, DrawCard())
    assert isinstance(r2, Rejected) and r2.code == "auto_refill"


# --- winning ---------------------------------------------------------------------------------------


def test_first_player_with_empty_hand_and_draw_pile_wins() -> None:
    s = made((["4-yellow-star"], ["1-red-moon", "2-red-moon"]), (["4-green-moon"], ["2-blue-triangle"]), ([], ["1-red-star"]))
    r = blink.apply(s, 0, PlayCard("4-yellow-star", 0))
    s2 = ok(r)
    assert s2.phase == "over" and s2.winner == 0
    assert maps(r.events)[-1] == {"type": "game_over", "winner": 0, "reason": "out_of_cards"}
    assert blink.outcome(s2) is not None and blink.outcome(s2).winners == (0,)  # type: ignore[union-attr]
    r2 = blink.apply(s2, 1, PlayCard("2-red-moon", 1))
    assert isinstance(r2, Rejected) and r2.code == "game_over"


# --- stalemates ------------------------------------------------------------------------------------


def stalled_state(draws: tuple[list[str], list[str]], hands: tuple[list[str], list[str]] | None = None) -> blink.State:
    # Piles 1-red-star / 2-red-star; hands of blue/green moons and triangles with counts 3-5: nothing matches.
    hands = hands or (["3-blue-moon", "4-green-triangle", "5-blue-triangle"], ["4-blue-moon", "5-green-moon", "3-green-triangle"])
    s = made(hands, (["1-red-star"], ["2-red-star"]), draws)
    return s


def after(state: blink.State, player: int | None, action: object) -> tuple[blink.State, tuple[dict, ...]]:
    r = blink.apply(state, player, action)
    assert isinstance(r, Accepted), r
    return r.state, maps(r.events)


def test_stalemate_is_detected_and_play_pauses() -> None:
    s = made((["3-blue-moon", "1-yellow-star"], ["4-blue-moon"]), (["1-red-star"], ["2-red-star"]),
             (["5-blue-moon", "4-green-moon", "3-blue-triangle"], ["3-green-triangle"]))
    s2, events = after(s, 0, PlayCard("1-yellow-star", 0))  # now nobody can play on 1-yellow-star / 2-red-star
    assert s2.phase == "stalled" and s2.resolution == "flip"
    assert events[-1]["type"] == "stalemate" and events[-1]["resolution"] == "flip"
    r = blink.apply(s2, 1, PlayCard("4-blue-moon", 0))
    assert isinstance(r, Rejected) and r.code == "stalemate"  # plays during the pause are rejected
    (timer,) = blink.timers(s2)
    assert timer.delay_ns == 1_000_000_000  # the default pause: 1 s


def test_stalemate_with_both_draw_piles_flips_each_onto_own_pile() -> None:
    s = stalled_state((["1-blue-star", "2-yellow-star"], ["3-red-star"]))
    s = blink._after_change(s, [])  # the engine's own detection
    assert s.phase == "stalled"
    s2, events = after(s, SYSTEM, ResolveStalemate(s.stalemates))
    flips = [e for e in events if e["type"] == "card_flipped"]
    assert flips == [{"type": "card_flipped", "player": 0, "card": "1-blue-star", "pile": 0},
                     {"type": "card_flipped", "player": 1, "card": "3-red-star", "pile": 1}]
    assert s2.phase == "running" and s2.draw == ((C("2-yellow-star"),), ())


def cards_in_play(state: blink.State) -> list[str]:
    """Every card of a state: draw piles, hands and centre piles (picks land on the piles)."""
    return sorted(str(c) for group in (state.draw, state.hands, state.piles) for part in group for c in part)


def test_stalemate_with_an_empty_draw_pile_each_chooses_a_card_for_own_pile() -> None:
    s = blink._after_change(stalled_state((["1-blue-star"], [])), [])
    before = cards_in_play(s)
    assert s.resolution == "pick"
    s, events = after(s, SYSTEM, ResolveStalemate(s.stalemates))
    assert s.phase == "picking" and events[0]["type"] == "pick_started"
    s, events = after(s, 0, PickCard("5-blue-triangle"))
    assert events == ({"type": "pick_made", "player": 0},)  # the choice stays secret until both chose
    assert blink.view(s, 1).picks == (None, None)
    r = blink.apply(s, 0, PickCard("3-blue-moon"))
    assert isinstance(r, Rejected) and r.code == "already_picked"
    s, events = after(s, 1, PickCard("3-green-triangle"))
    picked = [e for e in events if e["type"] == "card_picked"]
    assert [(e["player"], e["card"], e["pile"]) for e in picked] == [(0, "5-blue-triangle", 0), (1, "3-green-triangle", 1)]
    assert s.top(0) == C("5-blue-triangle") and s.top(1) == C("3-green-triangle")
    # refilled where a draw pile allows: player 0 draws 1-blue-star, player 1 cannot
    assert len(s.hands[0]) == 3 and len(s.hands[1]) == 2
    # A hand-built state holds only part of the deck, so RULES.invariant_ok (the whole deck,
    # exactly partitioned) does not apply; what it guards does: no card lost, none made, none twice.
    assert len(set(before)) == len(before) == 9  # 2 piles, 6 in hands, 1 to draw
    assert cards_in_play(s) == before


def test_pick_time_limit_relay_chooses_first_card() -> None:
    s = blink._after_change(stalled_state((["1-blue-star"], [])), [])
    s, _ = after(s, SYSTEM, ResolveStalemate(s.stalemates))
    (timer,) = blink.timers(s)
    assert timer.delay_ns == 5_000_000_000 and isinstance(timer.action, PickTimeout)
    s, _ = after(s, 1, PickCard("5-green-moon"))
    s, events = after(s, SYSTEM, timer.action)
    picked = {e["player"]: e for e in events if e["type"] == "card_picked"}
    assert picked[0]["card"] == "3-blue-moon" and picked[0]["auto"] is True  # first card of the hand
    assert picked[1]["card"] == "5-green-moon" and picked[1]["auto"] is False


def test_one_card_each_no_draw_and_no_play_is_a_tie() -> None:
    s = made((["3-blue-moon", "1-yellow-star"], ["4-green-triangle"]), (["1-red-star"], ["2-red-star"]), ([], []))
    s2, events = after(s, 0, PlayCard("1-yellow-star", 0))
    assert s2.phase == "over" and s2.tie and s2.winner is None
    assert [e["type"] for e in events][-2:] == ["stalemate", "game_over"]
    assert events[-1]["winner"] is None
    assert blink.outcome(s2).winners == ()  # type: ignore[union-attr]


def test_emptying_the_hand_by_a_stalemate_placement_wins() -> None:
    s = blink._after_change(stalled_state(([], ["1-blue-star"]), (["3-blue-moon"], ["4-blue-moon", "5-green-moon"])), [])
    assert s.resolution == "pick"
    s, _ = after(s, SYSTEM, ResolveStalemate(s.stalemates))
    s, _ = after(s, 1, PickCard("5-green-moon"))
    s, events = after(s, 0, PickCard("3-blue-moon"))
    assert s.phase == "over" and s.winner == 0
    assert events[-1] == {"type": "game_over", "winner": 0, "reason": "out_of_cards"}


def test_stale_stalemate_actions_are_refused() -> None:
    s = blink._after_change(stalled_state((["1-blue-star"], ["2-blue-star"])), [])
    r = blink.apply(s, SYSTEM, ResolveStalemate(s.stalemates + 5))
    assert isinstance(r, Rejected)
    r = blink.apply(s, 0, ResolveStalemate(s.stalemates))
    assert isinstance(r, Rejected) and r.code == "not_allowed"  # only the relay resolves


# --- views: hidden information ---------------------------------------------------------------------


def test_view_hides_opponent_hand_and_all_draw_order() -> None:
    state = started(blink.new_game({}, 2, RandomChance(11)))
    v0 = blink.view(state, 0)
    assert v0.hands[0] == state.hands[0]
    assert all(c is None for c in v0.hands[1]) and len(v0.hands[1]) == 3
    assert all(c is None for d in v0.draw for c in d) and [len(d) for d in v0.draw] == [26, 26]
    spectator = blink.view(state, None)
    assert all(c is None for h in spectator.hands for c in h)
    wire = blink.to_wire(v0)
    text = repr(wire)
    for card in state.hands[1] + state.draw[0] + state.draw[1]:
        assert str(card) not in text
    assert blink.from_wire(wire) == v0


def test_a_client_predicts_on_its_view_with_the_same_engine() -> None:
    state = started(blink.new_game({}, 2, RandomChance(5)))
    v = blink.view(state, 0)
    for action in blink.legal_actions(state, 0):
        real, predicted = blink.apply(state, 0, action), blink.apply(v, 0, action)
        assert isinstance(real, Accepted) and isinstance(predicted, Accepted)
        assert predicted.state.piles == real.state.piles
        assert [c for c in predicted.state.hands[0] if c is not None] == \
            [c for c in real.state.hands[0][:2]]  # the refilled card is unknown until the relay says
        assert predicted.state.hands[0][-1] is None
        break


# --- properties ------------------------------------------------------------------------------------


def random_walk(seed: int, steps: int) -> list[tuple[blink.State, object, Accepted[blink.State] | Rejected]]:
    rng = random.Random(seed)
    state = blink.new_game({"best_of": 1}, 2, RandomChance(seed))
    trail = []
    for _ in range(steps):
        options: list[tuple[int | None, object]] = []
        for p in (0, 1):
            options += [(p, a) for a in blink.legal_actions(state, p)]
            hand = [c for c in state.hands[p] if c is not None]
            if hand:
                options.append((p, PlayCard(str(rng.choice(hand)), rng.randrange(3))))  # maybe illegal
                options.append((p, PickCard(str(rng.choice(hand)))))
            options.append((p, PlayCard(str(rng.choice(blink.standard_deck())), rng.randrange(2))))
        options += [(SYSTEM, t.action) for t in blink.timers(state)]
        if not options:
            break
        player, action = rng.choice(options)
        before = state
        wire_before = blink.to_wire(before)
        result = blink.apply(state, player, action)
        # Nothing the engine does may change the state it was given (rejected or not).
        assert blink.to_wire(before) == wire_before
        trail.append((before, action, result))
        if isinstance(result, Accepted):
            state = result.state
        if state.phase == "over":
            break
    return trail


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=10_000))
def test_cards_are_always_exactly_partitioned(seed: int) -> None:
    for before, _action, result in random_walk(seed, 400):
        assert blink.GAME.invariant_ok(before)
        if isinstance(result, Accepted):
            assert blink.GAME.invariant_ok(result.state)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=10_000))
def test_a_rejected_action_leaves_the_state_unchanged(seed: int) -> None:
    rejections = 0
    for before, action, result in random_walk(seed, 300):
        if isinstance(result, Rejected):
            rejections += 1
            assert result.code and result.code.replace("_", "").isalpha()  # a short stable reason code
    assert rejections > 0  # the walk does try illegal actions
    # immutability: the frozen dataclass refuses mutation outright
    state = blink.new_game({}, 2, RandomChance(seed))
    with pytest.raises(FrozenInstanceError):
        state.phase = "over"  # type: ignore[misc]


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=0, max_value=10_000))
def test_same_seed_and_actions_give_the_same_game(seed: int) -> None:
    a = random_walk(seed, 200)
    b = random_walk(seed, 200)
    assert [(x[0], x[1]) for x in a] == [(y[0], y[1]) for y in b]
    assert [getattr(x[2], "events", x[2]) for x in a] == [getattr(y[2], "events", y[2]) for y in b]


def test_random_games_always_end() -> None:
    for seed in range(30):
        state = blink.new_game({}, 2, RandomChance(seed))
        rng = random.Random(seed)
        for _ in range(2000):
            if state.phase == "over":
                break
            timers = blink.timers(state)
            acts = [(p, a) for p in (0, 1) for a in blink.legal_actions(state, p)]
            if acts and state.phase != "stalled":
                p, a = rng.choice(acts)
            else:
                p, a = SYSTEM, timers[0].action
            state = ok(blink.apply(state, p, a))
            assert blink.GAME.invariant_ok(state)
        assert state.phase == "over", seed
