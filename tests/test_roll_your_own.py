"""Roll Your Own (RULES.md section 4): every clause as a test, plus properties of whole matches."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from fractions import Fraction
from itertools import product

import pytest
from hypothesis import given, settings, strategies as st

from protocol.rules import roll_your_own as R
from protocol.rules.base import SYSTEM, FixedChance, Rejected
from tests.helpers import RandomChance, maps, ok




def built(dice, settings=None):
    """A match with the given dice built and revealed: phase rolling."""
    state = R.new_game(settings, len(dice), None)
    for p, d in enumerate(dice):
        state = ok(R.apply(state, p, R.BuildDie(tuple(d)))).state
    return state


def roll(state, *values):
    """Apply a roll whose face indices are ``values`` (one per rolling seat)."""
    return ok(R.apply(state, SYSTEM, R.RyoRoll(state.rolls, tuple(values))))


def face_of(die, value):
    return die.index(value)


def win_rolls(state, seat, n):
    """Make ``seat`` win ``n`` rolls in a row (dice must allow it: seat shows its max, others min)."""
    events = []
    for _ in range(n):
        vals = []
        for p in state.rolling:
            d = state.dice[p]
            vals.append(face_of(d, max(d)) if p == seat else face_of(d, min(d)))
        res = roll(state, *vals)
        events.extend(maps(res.events))
        state = res.state
    return state, events


def fire_zero_timers(state, chance, log=None):
    while True:
        due = [t for t in R.timers(state) if t.delay_ns == 0]
        if not due or R.outcome(state) is not None:
            return state
        res = ok(R.apply(state, SYSTEM, R.complete(state, SYSTEM, due[0].action, chance)))
        if log is not None:
            log.extend(maps(res.events))
        state = res.state


def play(state, chance, policy, check=None, max_steps=50000):
    log = []
    for _ in range(max_steps):
        state = fire_zero_timers(state, chance, log)
        if check:
            check(state)
        if R.outcome(state) is not None:
            return state, log
        acted = False
        for p in range(state.players):
            action = policy(R.view(state, p), p)
            if action is None:
                continue
            res = R.apply(state, p, R.complete(state, p, action, chance))
            if isinstance(res, Rejected) and res.code == "pool_short" and policy is not R.bot_action:
                continue  # a view does not show a finite pool: a random build may find it short
            res = ok(res)
            log.extend(maps(res.events))
            state = res.state
            acted = True
            break
        assert acted, f"nobody can act in phase {state.phase}"
    raise AssertionError("match did not finish")


def random_policy(seed):
    rng = random.Random(seed)

    def policy(view, p):
        acts = R.legal_actions(view, p)
        return rng.choice(acts) if acts else None

    return policy


SHORT = {"rolls_per_round": 2, "rounds_per_game": 2, "games_per_match": 2}

# --- building ---------------------------------------------------------------------------------------


def test_is_valid_build():
    assert R.is_valid_build([1, 2, 3, 4, 5, 6])
    assert R.is_valid_build((0, 0, 0, 0, 0, 0))
    assert R.is_valid_build([9, 9, 3, 0, 0, 0])
    assert R.is_valid_build([0, 0, 0, 0, 1, 9])
    assert not R.is_valid_build([1, 2, 3, 4, 5, 7])  # 22 pips
    assert not R.is_valid_build([10, 0, 0, 0, 0, 0])  # above max_face
    assert not R.is_valid_build([-1, 2, 3, 4, 5, 6])
    assert not R.is_valid_build([1, 2, 3, 4, 5])  # five faces
    assert not R.is_valid_build([1, 2, 3, 4, 5, 1, 0])
    assert not R.is_valid_build([True, 2, 3, 4, 5, 1])
    assert not R.is_valid_build([1.0, 2, 3, 4, 5, 1])
    assert not R.is_valid_build("123456")
    assert not R.is_valid_build(None)
    assert R.is_valid_build([5, 5, 5, 5, 5, 5], budget=30)
    assert not R.is_valid_build([5, 5, 5, 5, 5, 5])
    assert R.is_valid_build([12, 0, 0, 0, 0, 0], budget=21, max_face=12)
    assert not R.is_valid_build([12, 0, 0, 0, 0, 0])


def test_beat_probability_is_exact():
    std = [1, 2, 3, 4, 5, 6]
    assert R.beat_probability(std, std) == pytest.approx(15 / 36, abs=1e-15)
    assert R.beat_probability([3, 3, 3, 4, 4, 4], std) == float(Fraction(3 * 2 + 3 * 3, 36))
    assert R.beat_probability([0] * 6, std) == 0.0
    assert R.beat_probability([9] * 6, std) == 1.0
    # Custom dice are not transitive.
    a, b, c = [2, 2, 4, 4, 9, 9], [1, 1, 6, 6, 8, 8], [3, 3, 5, 5, 7, 7]
    assert R.beat_probability(a, b) > 0.5 and R.beat_probability(b, c) > 0.5 and R.beat_probability(c, a) > 0.5


@given(st.lists(st.integers(0, 9), min_size=6, max_size=6), st.lists(st.integers(0, 9), min_size=6, max_size=6))
@settings(max_examples=100, deadline=None)
def test_beat_probability_matches_enumeration(a, b):
    wins = sum(1 for x, y in product(a, b) if x > y)
    assert abs(R.beat_probability(a, b) - wins / 36) < 1e-12
    ties = sum(1 for x, y in product(a, b) if x == y)
    assert abs(R.beat_probability(a, b) + R.beat_probability(b, a) + ties / 36 - 1) < 1e-12


def test_settings_defaults_and_validation():
    d = R.GAME.default_settings()
    assert (d["budget"], d["max_face"], d["rolls_per_round"], d["rounds_per_game"], d["games_per_match"]) == \
        (21, 9, 6, 6, 3)
    assert d["tile_pool"] is None and d["turn_timer_s"] == 0
    for bad in ({"budget": -1}, {"max_face": 0}, {"rolls_per_round": 0}, {"games_per_match": "3"},
                {"x": 1}, {"tile_pool": [1, 2]}, {"tile_pool": [-1] * 10}, {"rounds_per_game": True}):
        with pytest.raises(ValueError):
            R.GAME.check_settings(bad, 2)
    with pytest.raises(ValueError):
        R.GAME.check_settings({}, 1)
    for n in (2, 3, 4, 8):
        R.GAME.check_settings({}, n)
    # A finite pool must let every player build within the budget whatever the others took.
    assert R.GAME.check_settings({"tile_pool": 4}, 2)["tile_pool"] == [4] * 10
    with pytest.raises(ValueError):
        R.GAME.check_settings({"tile_pool": 2}, 2)  # 0,0,1,1,2,2 taken: the rest costs 24 > 21
    with pytest.raises(ValueError):
        R.GAME.check_settings({"tile_pool": [6] + [0] * 8 + [50]}, 2)  # the second builder gets only 9s
    with pytest.raises(ValueError):
        R.GAME.check_settings({"tile_pool": [1] * 10}, 2)  # 10 tiles, 12 needed
    assert R.GAME.best_of({}) == 1 and R.GAME.realtime is False


def test_builds_are_secret_until_all_have_built_then_revealed_together():
    state = R.new_game({}, 3, None)
    res = ok(R.apply(state, 1, R.BuildDie((0, 0, 5, 5, 5, 6))))
    assert maps(res.events) == ({"type": "die_built", "player": 1, "timeout": False},)
    s = res.state
    assert R.view(s, 0).dice == (None, None, None)
    assert R.view(s, 1).dice == (None, (0, 0, 5, 5, 5, 6), None)
    assert R.view(s, None).dice == (None, None, None)
    assert "0, 0, 5" not in json.dumps(R.to_wire(R.view(s, 2)))
    assert R.view(s, 0).built == (False, True, False)
    assert R.apply(s, 1, R.BuildDie((3, 3, 3, 4, 4, 4))).code == "already_built"
    s = ok(R.apply(s, 0, R.BuildDie((3, 3, 3, 4, 4, 4)))).state
    res = ok(R.apply(s, 2, R.BuildDie((1, 2, 3, 4, 5, 6))))
    assert [e["type"] for e in maps(res.events)] == ["die_built", "dice_revealed", "round_started"]
    assert maps(res.events)[1]["dice"] == [[3, 3, 3, 4, 4, 4], [0, 0, 5, 5, 5, 6], [1, 2, 3, 4, 5, 6]]
    assert R.view(res.state, 0).dice == res.state.dice  # revealed to everyone
    assert res.state.phase == "rolling" and res.state.rolling == (0, 1, 2)


def test_bad_builds_are_rejected():
    state = R.new_game({"budget": 12, "max_face": 4}, 2, None)
    assert R.apply(state, 0, R.BuildDie((4, 4, 4, 1, 0, 0))).code == "bad_build"  # 13 > 12
    assert R.apply(state, 0, R.BuildDie((5, 0, 0, 0, 0, 0))).code == "bad_build"  # 5 > max_face
    assert R.apply(state, 0, R.BuildDie((1, 1, 1))).code == "bad_build"
    ok(R.apply(state, 0, R.BuildDie((4, 4, 4, 0, 0, 0))))
    assert R.apply(state, 0, R.RaiseFace(0)).code == "wrong_phase"
    with pytest.raises(ValueError):
        R.action_from_wire({"t": "BuildDie", "v": 1, "faces": [1, 2, True, 4, 5, 6]})
    assert R.action_from_wire(R.action_to_wire(R.BuildDie((1, 2, 3, 4, 5, 6)))) == R.BuildDie((1, 2, 3, 4, 5, 6))


# --- rolls -------------------------------------------------------------------------------------------


def test_highest_face_wins_the_roll():
    state = built([(1, 2, 3, 4, 5, 6), (3, 3, 3, 4, 4, 4)])
    (timer,) = R.timers(state)
    assert timer.name == "roll-0" and timer.delay_ns == 0
    res = roll(state, 5, 0)  # 6 vs 3
    assert maps(res.events)[0] == {"type": "dice_rolled", "kind": "roll", "roll": 0,
                             "rolls": [{"player": 0, "face": 5, "value": 6}, {"player": 1, "face": 0, "value": 3}]}
    assert maps(res.events)[1] == {"type": "roll_won", "player": 0, "wins": [1, 0]}
    assert res.state.roll_wins == (1, 0) and res.state.rolls == 1
    assert R.timers(res.state)[0].name == "roll-1"


def test_two_players_a_tie_is_ignored():
    state = built([(1, 2, 3, 4, 5, 6), (3, 3, 3, 4, 4, 4)])
    res = roll(state, 2, 0)  # 3 vs 3
    assert maps(res.events)[1] == {"type": "roll_tied", "players": [0, 1], "ignored": True, "rerolling": [0, 1]}
    assert res.state.roll_wins == (0, 0) and res.state.rolling == (0, 1)


def test_more_players_the_tied_highest_roll_again_alone():
    state = built([(1, 2, 3, 4, 5, 6), (3, 3, 3, 4, 4, 4), (0, 0, 5, 5, 5, 6)])
    res = roll(state, 4, 0, 2)  # 5, 3, 5
    assert maps(res.events)[1]["type"] == "roll_tied" and maps(res.events)[1]["rerolling"] == [0, 2]
    s = res.state
    assert s.rolling == (0, 2) and s.roll_wins == (0, 0, 0)
    assert R.apply(s, SYSTEM, R.RyoRoll(s.rolls, (0, 0, 0))).code == "malformed"
    res = roll(s, 0, 5)  # 1 vs 6
    assert maps(res.events)[0]["rolls"] == [{"player": 0, "face": 0, "value": 1}, {"player": 2, "face": 5, "value": 6}]
    assert res.state.roll_wins == (0, 0, 1) and res.state.rolling == (0, 1, 2)


def test_rolls_come_from_the_relay_only():
    state = built([(1, 2, 3, 4, 5, 6), (3, 3, 3, 4, 4, 4)])
    assert R.apply(state, 0, R.RyoRoll(0, (5, 0))).code == "not_allowed"
    assert R.apply(state, SYSTEM, R.RyoRoll(0)).code == "incomplete"
    assert R.apply(state, SYSTEM, R.RyoRoll(1, (5, 0))).code == "wrong_phase"
    assert R.apply(state, SYSTEM, R.RyoRoll(0, (6, 0))).code == "malformed"
    with pytest.raises(ValueError):
        R.action_from_wire(R.action_to_wire(R.RyoRoll(0, (5, 0))))
    assert R.complete(state, SYSTEM, R.RyoRoll(0), FixedChance([4, 1])) == R.RyoRoll(0, (4, 1))
    assert R.complete(state, 0, R.LowerWinner(), FixedChance([])) == R.LowerWinner()


def test_dice_that_can_never_differ_are_separated_by_lot():
    state = built([(3, 3, 3, 3, 3, 3), (3, 3, 3, 3, 3, 3)])
    action = R.complete(state, SYSTEM, R.timers(state)[0].action, FixedChance([1]))
    assert action == R.RyoRoll(0, None, 1)
    assert R.apply(state, SYSTEM, R.RyoRoll(0, (0, 0))).code == "incomplete"
    res = ok(R.apply(state, SYSTEM, action))
    assert maps(res.events)[0]["type"] == "lot_drawn" and maps(res.events)[0]["player"] == 1
    assert res.state.roll_wins == (0, 1)
    # Different dice are rolled normally, even if they tie sometimes.
    s2 = built([(3, 3, 3, 3, 3, 3), (3, 3, 3, 3, 3, 4)])
    assert R.complete(s2, SYSTEM, R.RyoRoll(0), FixedChance([0, 0])).values == (0, 0)


# --- rounds, choices --------------------------------------------------------------------------------


def _round_won():
    state = built([(1, 2, 3, 4, 5, 6), (3, 3, 3, 4, 4, 4)])
    s, events = win_rolls(state, 0, 5)
    assert s.phase == "rolling" and s.roll_wins == (5, 0)
    s, events = win_rolls(s, 0, 1)
    types = [e["type"] for e in events]
    assert types == ["dice_rolled", "roll_won", "round_won", "choice_started"]
    assert events[2] == {"type": "round_won", "player": 0, "ryo_game": 1, "round": 1, "rounds": [1, 0]}
    assert events[3] == {"type": "choice_started", "player": 1, "winner": 0, "can_raise": True, "can_lower": True}
    assert s.phase == "choice" and s.chooser == 1 and s.round_winner == 0 and R.timers(s) == ()
    assert R.apply(s, 0, R.RaiseFace(0)).code == "not_your_turn"
    assert R.apply(s, 1, R.LowerFace(0)).code == "wrong_phase"
    assert set(R.legal_actions(s, 1)) == {R.RaiseFace(i) for i in range(6)} | {R.LowerWinner()}
    assert R.legal_actions(s, 0) == []
    return s


def test_a_round_ends_at_rolls_per_round_and_the_loser_chooses():
    _round_won()


def test_option_a_raise_one_face_by_one():
    s = _round_won()
    res = ok(R.apply(s, 1, R.RaiseFace(3)))
    assert res.state.dice[1] == (3, 3, 3, 5, 4, 4)
    assert maps(res.events)[0] == {"type": "face_raised", "player": 1, "face": 3, "value": 5, "die": [3, 3, 3, 5, 4, 4],
                             "timeout": False}
    assert maps(res.events)[1] == {"type": "round_started", "ryo_game": 1, "round": 2}
    assert res.state.phase == "rolling" and res.state.roll_wins == (0, 0) and res.state.round == 2
    assert R.apply(s, 1, R.RaiseFace(6)).code == "malformed"


def test_option_b_the_winner_lowers_a_face_of_their_choice():
    s = _round_won()
    res = ok(R.apply(s, 1, R.LowerWinner()))
    assert maps(res.events) == ({"type": "lower_chosen", "player": 1, "winner": 0, "timeout": False},)
    s = res.state
    assert s.phase == "lower"
    assert R.legal_actions(s, 0) == [R.LowerFace(i) for i in range(6)]
    assert R.apply(s, 1, R.LowerFace(0)).code == "not_your_turn"
    res = ok(R.apply(s, 0, R.LowerFace(5)))
    assert res.state.dice[0] == (1, 2, 3, 4, 5, 5)
    assert maps(res.events)[0]["type"] == "face_lowered" and maps(res.events)[0]["player"] == 0
    assert res.state.phase == "rolling"


def _choice_state(loser_die, winner_die, settings=None):
    state = built([winner_die, loser_die], settings)
    n = R.make_settings(settings).rolls_per_round
    s, _ = win_rolls(state, 0, n)
    assert s.phase == "choice"
    return s


def test_impossible_options_cannot_be_chosen():
    # Loser's faces all at max_face: no raise. Winner's faces all 0 except one: only that face can drop.
    # (The winner has shown a face above one of the loser's, so with an unlimited pool the loser can
    # always raise; set the dice by hand to test the rule itself.)
    s = _choice_state((1, 2, 3, 3, 3, 3), (0, 0, 0, 0, 0, 3), {"max_face": 3, "rolls_per_round": 1})
    s = replace(s, dice=((0, 0, 0, 0, 0, 3), (3, 3, 3, 3, 3, 3)))
    assert R.legal_actions(s, 1) == [R.LowerWinner()]
    assert R.apply(s, 1, R.RaiseFace(0)).code == "not_allowed"
    s = ok(R.apply(s, 1, R.LowerWinner())).state
    assert R.legal_actions(s, 0) == [R.LowerFace(5)]
    assert R.apply(s, 0, R.LowerFace(0)).code == "not_allowed"  # not below 0


def test_no_option_possible_means_no_choice():
    # With a finite pool an option can be impossible for want of a tile: here both are.
    st_ = {"max_face": 2, "budget": 12, "tile_pool": [0, 6, 6], "rolls_per_round": 1}
    state = built([(2, 2, 2, 2, 2, 2), (1, 1, 1, 1, 1, 1)], st_)
    assert state.pool == (0, 0, 0)
    res = roll(state, 0, 0)
    types = [e["type"] for e in maps(res.events)]
    assert types == ["dice_rolled", "roll_won", "round_won", "no_choice", "round_started"]
    assert maps(res.events)[3] == {"type": "no_choice", "player": 1, "winner": 0}
    assert res.state.phase == "rolling" and res.state.round == 2


def test_multiplayer_losers_roll_off_and_the_lowest_chooses():
    dice = [(1, 2, 3, 4, 5, 6), (0, 1, 2, 3, 4, 5), (2, 2, 3, 3, 4, 4), (0, 0, 5, 5, 5, 6)]
    state = built(dice, {"rolls_per_round": 1})
    res = roll(state, 5, 0, 0, 0)  # seat 0 shows 6 and wins the round
    assert [e["type"] for e in maps(res.events)][-1] == "rolloff_started"
    assert maps(res.events)[-1] == {"type": "rolloff_started", "players": [1, 2, 3], "winner": 0}
    s = res.state
    assert s.phase == "rolloff" and s.rolling == (1, 2, 3)
    # Ties for lowest roll again, alone.
    res = roll(s, 2, 0, 0)  # 2, 2, 0 -> seat 3 lowest
    assert maps(res.events)[0]["kind"] == "rolloff"
    assert maps(res.events)[1] == {"type": "rolloff_won", "player": 3}
    assert res.state.phase == "choice" and res.state.chooser == 3
    res = roll(s, 2, 0, 5)  # 2, 2, 6 -> seats 1 and 2 tie for lowest
    assert maps(res.events)[1] == {"type": "rolloff_tied", "players": [1, 2], "rerolling": [1, 2]}
    s = res.state
    assert s.rolling == (1, 2)
    res = roll(s, 5, 0)  # 5 vs 2: seat 2 is lowest
    assert res.state.chooser == 2 and res.state.round_winner == 0
    assert R.apply(res.state, 1, R.LowerWinner()).code == "not_your_turn"
    ok(R.apply(res.state, 2, R.LowerWinner()))


def test_game_ends_at_rounds_per_game_then_new_builds_and_the_match_ends():
    st_ = {"rolls_per_round": 1, "rounds_per_game": 2, "games_per_match": 2}
    state = built([(1, 2, 3, 4, 5, 6), (3, 3, 3, 4, 4, 4)], st_)
    s, ev = win_rolls(state, 0, 1)
    s = ok(R.apply(s, 1, R.RaiseFace(0))).state
    s, ev = win_rolls(s, 0, 1)
    types = [e["type"] for e in ev]
    assert types == ["dice_rolled", "roll_won", "round_won", "game_won", "build_started"]  # no choice after a game
    assert ev[3] == {"type": "game_won", "player": 0, "ryo_game": 1, "games": [1, 0]}
    assert s.phase == "build" and s.game == 2 and s.round == 1 and s.dice == (None, None)
    assert s.built == (False, False) and s.round_wins == (0, 0) and s.game_wins == (1, 0)
    assert s.previous == ((1, 2, 3, 4, 5, 6), (4, 3, 3, 4, 4, 4))  # the old dice stay public
    assert R.legal_actions(s, 0) and all(isinstance(a, R.BuildDie) for a in R.legal_actions(s, 0))
    s = ok(R.apply(s, 0, R.BuildDie((0, 0, 0, 3, 9, 9)))).state
    s = ok(R.apply(s, 1, R.BuildDie((3, 3, 3, 4, 4, 4)))).state
    s, _ = win_rolls(s, 1, 1)
    s = ok(R.apply(s, 0, R.LowerWinner())).state
    s = ok(R.apply(s, 1, R.LowerFace(0))).state
    s, ev = win_rolls(s, 1, 1)
    s = ok(R.apply(s, 0, R.BuildDie((3, 3, 3, 4, 4, 4)))).state
    s = ok(R.apply(s, 1, R.BuildDie((1, 2, 3, 4, 5, 6)))).state
    s, ev = win_rolls(s, 0, 1)
    s = ok(R.apply(s, 1, R.RaiseFace(0))).state
    s, ev = win_rolls(s, 0, 1)
    assert ev[-1] == {"type": "game_over", "winner": 0, "winners": [0], "scores": [2, 1], "rounds": [4, 2],
                      "reason": "match_won"}
    out = R.outcome(s)
    assert out.winners == (0,) and out.scores == (2, 1) and out.extra == {"games": [2, 1], "rounds": [4, 2]}
    assert R.apply(s, 0, R.BuildDie((1, 1, 1, 1, 1, 1))).code == "game_over"
    assert R.timers(s) == () and R.legal_actions(s, 1) == []


# --- finite pool ------------------------------------------------------------------------------------


def test_finite_pool_first_come_first_served():
    pool = [6, 2, 2, 2, 2, 2, 2, 2, 2, 2]
    state = R.new_game({"tile_pool": pool}, 2, None)
    s = ok(R.apply(state, 0, R.BuildDie((4, 4, 3, 3, 2, 2)))).state
    assert s.pool == (6, 2, 0, 0, 0, 2, 2, 2, 2, 2)
    assert R.view(s, 1).pool is None  # would give the build away
    assert R.apply(s, 1, R.BuildDie((4, 4, 3, 3, 2, 2))).code == "pool_short"
    assert R.apply(s, 1, R.BuildDie((0, 0, 5, 5, 5, 6))).code == "pool_short"  # two 5s only
    s = ok(R.apply(s, 1, R.BuildDie((1, 1, 5, 5, 6, 0)))).state
    assert s.pool == (5, 0, 0, 0, 0, 0, 1, 2, 2, 2) and R.view(s, 1).pool == s.pool
    # Raising needs a tile one higher: 4->5, 3->4, 2->3 -- none left.
    s2, _ = win_rolls(s, 1, 6)
    assert s2.chooser == 0
    assert R.raisable(s2, 0) == []
    assert R.legal_actions(s2, 0) == [R.LowerWinner()]
    s3 = ok(R.apply(s2, 0, R.LowerWinner())).state
    assert R.lowerable(s3, 1) == [0, 1]  # only the 1s can drop (0s are left; no 4s or 5s)
    s4 = ok(R.apply(s3, 1, R.LowerFace(0))).state
    assert s4.dice[1] == (0, 1, 5, 5, 6, 0) and s4.pool == (4, 1, 0, 0, 0, 0, 1, 2, 2, 2)
    res = R.apply(s3, 1, R.LowerFace(2))
    assert isinstance(res, Rejected) and res.code == "pool_short"


def test_pool_default_build_fits_the_pool():
    pool = (30, 0, 0, 0, 0, 0, 0, 0, 0, 9)
    s = R.make_settings({"tile_pool": list(pool)})
    d = R.default_build(s, pool)
    assert R.is_valid_build(d) and R._pool_short(pool, d) is None and sum(d) == 18


# --- turn timer --------------------------------------------------------------------------------------


def test_turn_timer_builds_and_chooses_by_default():
    st_ = {"turn_timer_s": 10, "rolls_per_round": 1}
    state = R.new_game(st_, 3, None)
    state = ok(R.apply(state, 1, R.BuildDie((0, 0, 0, 0, 0, 9)))).state
    (timer,) = R.timers(state)
    assert timer.name == "build-1" and timer.delay_ns == 10 * 10**9
    res = ok(R.apply(state, SYSTEM, timer.action))
    types = [e["type"] for e in maps(res.events)]
    assert types == ["turn_timeout", "die_built", "turn_timeout", "die_built", "dice_revealed", "round_started"]
    assert res.state.dice[0] == res.state.dice[2] == (3, 3, 3, 4, 4, 4)
    assert all(e.get("timeout") for e in maps(res.events) if e["type"] == "die_built")
    assert R.apply(res.state, SYSTEM, timer.action).code == "wrong_phase"
    s = res.state
    s = roll(s, 0, 5, 0).state  # seat 1 (a 9) wins the round
    s = roll(s, 0, 5).state  # roll-off between 0 and 2: seat 0 lowest
    assert s.phase == "choice" and s.chooser == 0
    (timer,) = R.timers(s)
    assert timer.name == "choice-1"
    res = ok(R.apply(s, SYSTEM, timer.action))
    assert maps(res.events)[0] == {"type": "turn_timeout", "player": 0, "phase": "choice"}
    assert maps(res.events)[1]["type"] == "face_raised" and maps(res.events)[1]["face"] == 0 and maps(res.events)[1]["timeout"]


def test_turn_timer_lower_default_drops_the_winners_highest_face():
    s = _choice_state((9, 9, 3, 0, 0, 0), (1, 2, 3, 4, 5, 6), {"turn_timer_s": 5, "rolls_per_round": 1})
    s = replace(s, dice=((1, 2, 3, 4, 5, 6), (9, 9, 3, 0, 0, 0)))
    s = replace(s, dice=(s.dice[0], (9, 9, 9, 9, 9, 9)), settings=R.make_settings({"turn_timer_s": 5, "budget": 60}))
    (timer,) = R.timers(s)
    res = ok(R.apply(s, SYSTEM, timer.action))  # the loser cannot raise: lower chosen
    assert maps(res.events)[-1]["type"] == "lower_chosen" and maps(res.events)[-1]["timeout"] is True
    (timer,) = R.timers(res.state)
    assert timer.name == "lower-1"
    res = ok(R.apply(res.state, SYSTEM, timer.action))
    assert maps(res.events)[1]["type"] == "face_lowered" and maps(res.events)[1]["face"] == 5
    assert res.state.dice[0] == (1, 2, 3, 4, 5, 5)


# --- the bot ----------------------------------------------------------------------------------------


def test_bot_builds_a_strong_full_budget_die():
    state = R.new_game({}, 2, None)
    action = R.bot_action(R.view(state, 0), 0)
    assert isinstance(action, R.BuildDie) and R.is_valid_build(action.faces) and sum(action.faces) == 21
    assert R.beat_probability(action.faces, (1, 2, 3, 4, 5, 6)) >= R.beat_probability((1, 2, 3, 4, 5, 6),
                                                                                      action.faces)
    assert R.beat_probability(action.faces, (0, 0, 0, 3, 9, 9)) > R.beat_probability((0, 0, 0, 3, 9, 9),
                                                                                     action.faces)
    s = ok(R.apply(state, 0, action)).state
    assert R.bot_action(R.view(s, 0), 0) is None
    assert R.bot_action(R.view(s, 1), 1) is not None


def test_bot_chooses_options_well():
    s = _round_won()
    a = R.bot_action(s, 1)
    assert a in R.legal_actions(s, 1)
    if isinstance(a, R.RaiseFace):
        before = R.advantage(s.dice[1], s.dice[0])
        after = R.advantage(R._set(s.dice[1], a.face, s.dice[1][a.face] + 1), s.dice[0])
        assert after >= before
    s = ok(R.apply(s, 1, R.LowerWinner())).state
    a = R.bot_action(s, 0)
    assert a in R.legal_actions(s, 0)
    # the winner drops a face that costs least: never the 1 when a less useful one exists
    best = max(R.legal_actions(s, 0), key=lambda x: R.advantage(R._set(s.dice[0], x.face, s.dice[0][x.face] - 1),
                                                                 s.dice[1]))
    assert R.advantage(R._set(s.dice[0], a.face, s.dice[0][a.face] - 1), s.dice[1]) == \
        R.advantage(R._set(s.dice[0], best.face, s.dice[0][best.face] - 1), s.dice[1])


# --- whole matches ------------------------------------------------------------------------------------


def _bounds(state):
    s = state.settings
    for d in state.dice:
        if d is not None:
            assert len(d) == 6 and all(0 <= f <= s.max_face for f in d)
    if state.pool is not None:
        assert all(n >= 0 for n in state.pool)
        on_dice = [f for d in state.dice if d is not None for f in d]
        for v in range(s.max_face + 1):
            assert state.pool[v] + on_dice.count(v) == s.tile_pool[v]


@given(st.integers(2, 4), st.integers(0, 10**6), st.booleans())
@settings(max_examples=40, deadline=None)
def test_random_matches_keep_dice_within_bounds_and_finish(players, seed, pool):
    chance = RandomChance(seed)
    st_ = dict(SHORT, max_face=4, budget=14)
    if pool:
        st_["tile_pool"] = [12] * 5
    state = R.new_game(st_, players, chance)
    last = {}

    def check(s):
        _bounds(s)
        # Every option changes exactly one face by exactly one pip.
        if last.get("dice") and last["game"] == s.game and all(d is not None for d in s.dice):
            diffs = [(a, b) for d0, d1 in zip(last["dice"], s.dice) for a, b in zip(d0, d1) if a != b]
            assert len(diffs) <= 1 and all(abs(a - b) == 1 for a, b in diffs)
        last["dice"], last["game"] = (s.dice if all(d is not None for d in s.dice) else None), s.game

    final, log = play(state, chance, random_policy(seed), check=check)
    out = R.outcome(final)
    assert out is not None and out.scores[out.winners[0]] == 2
    # No event before the reveal carries a die.
    for i, e in enumerate(log):
        if e["type"] == "die_built":
            assert set(e) == {"type", "player", "timeout"}


@given(st.integers(2, 4), st.integers(0, 10**6))
@settings(max_examples=12, deadline=None)
def test_bot_matches_finish(players, seed):
    chance = RandomChance(seed)
    state = R.new_game(dict(SHORT, rolls_per_round=3), players, chance)
    final, log = play(state, chance, R.bot_action, check=_bounds)
    assert R.outcome(final) is not None and log[-1]["type"] == "game_over"


@pytest.mark.parametrize("players", [2, 3, 4])
def test_bots_share_a_finite_pool_without_refusals(players):
    chance = RandomChance(players)
    state = R.new_game(dict(SHORT, tile_pool=6), players, chance)
    final, log = play(state, chance, R.bot_action, check=_bounds)
    assert R.outcome(final) is not None


def test_rules_objects():
    for mod in (R,):
        rules = mod.GAME
        assert rules.name == "ryo" and rules.min_players == 2 and rules.max_players >= 4
        assert rules.realtime is False and isinstance(rules.stale_code, str)
        for f in ("new_game", "apply", "complete", "view", "legal_actions", "outcome", "timers", "to_wire",
                  "from_wire", "action_from_wire", "action_to_wire", "bot_action"):
            assert callable(getattr(rules, f))


def test_a_full_default_match_between_bots_finishes():
    chance = RandomChance(2)
    final, log = play(R.new_game({}, 2, chance), chance, R.bot_action, check=_bounds)
    out = R.outcome(final)
    assert max(out.scores) == 3


@given(st.integers(0, 10**6), st.integers(0, 80))
@settings(max_examples=30, deadline=None)
def test_rejected_actions_change_nothing(seed, steps):
    chance = RandomChance(seed)
    rng = random.Random(seed)
    state = R.new_game(dict(SHORT, rolls_per_round=2), 3, chance)
    policy = random_policy(seed)
    for _ in range(steps):
        state = fire_zero_timers(state, chance)
        if R.outcome(state) is not None:
            break
        before = R.to_wire(state)
        probes = [R.BuildDie((rng.randint(0, 10),) * 6), R.RaiseFace(rng.randint(-1, 6)), R.LowerWinner(),
                  R.LowerFace(rng.randint(0, 5)), R.RyoRoll(state.rolls + 1, (0, 0, 0)), R.RyoTimeout("x")]
        for p in (0, 1, 2, SYSTEM):
            for a in probes:
                if isinstance(R.apply(state, p, a), Rejected):
                    assert R.to_wire(state) == before
        for p in range(3):
            a = policy(R.view(state, p), p)
            if a is not None:
                state = ok(R.apply(state, p, a)).state
                break
        assert R.from_wire(json.loads(json.dumps(R.to_wire(state)))) == state
        for p in (0, 1, 2, None):
            v = R.view(state, p)
            assert R.from_wire(R.to_wire(v)) == v


def test_same_seed_same_match():
    def run(seed):
        chance = RandomChance(seed)
        return play(R.new_game(SHORT, 3, chance), chance, R.bot_action)[1]

    assert run(5) == run(5)
    assert run(5) != run(6)
