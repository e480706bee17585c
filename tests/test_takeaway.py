"""Takeaway Dice (RULES.md section 2): every clause as a test, plus properties of whole games."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from protocol.rules import takeaway as T
from protocol.rules.base import SYSTEM, FixedChance, Rejected
from tests.helpers import RandomChance, maps, ok




def started(settings=None, players=2, seed=1, faces=None, order=None):
    """A game past its StartTakeaway, with given faces (in (q, r) order) or random ones."""
    chance = RandomChance(seed)
    state = T.new_game(settings, players, chance)
    action = T.complete(state, SYSTEM, T.StartTakeaway(), chance)
    if faces is not None or order is not None:
        action = T.StartTakeaway(order=tuple(order) if order else action.order,
                                 faces=tuple(faces) if faces else action.faces)
    return ok(T.apply(state, SYSTEM, action)).state


def fire_zero_timers(state, chance, events=None):
    while True:
        due = [t for t in T.timers(state) if t.delay_ns == 0]
        if not due:
            return state
        action = T.complete(state, SYSTEM, due[0].action, chance)
        res = ok(T.apply(state, SYSTEM, action))
        if events is not None:
            events.extend(maps(res.events))
        state = res.state


def play(state, chance, policy, check=None, max_steps=2000):
    """Drive a game: zero-delay timers first, then the current player's policy."""
    log = []
    for _ in range(max_steps):
        state = fire_zero_timers(state, chance, log)
        if T.outcome(state) is not None:
            return state, log
        p = state.current
        action = policy(T.view(state, p), p)
        assert action is not None
        action = T.complete(state, p, action, chance)
        res = ok(T.apply(state, p, action))
        log.extend(maps(res.events))
        state = res.state
        if check:
            check(state)
    raise AssertionError("game did not finish")


def random_policy(seed):
    rng = random.Random(seed)
    return lambda view, p: rng.choice(T.legal_actions(view, p))


# --- scoring (the seed's examples) -----------------------------------------------------------------


def test_score_examples_from_the_seed():
    assert T.score([4, 5, 6]) == 15
    assert T.score([4, 4, 4]) == 24  # 4 + 10 + 10


def test_score_more_cases():
    assert T.score([]) == 0
    assert T.score([6]) == 6
    assert T.score([1, 1, 2, 2]) == 1 + 10 + 2 + 10
    assert T.score([6, 6]) == 16
    assert T.score((3, 1, 3)) == 3 + 1 + 10


# --- geometry and locking ----------------------------------------------------------------------------


def test_face_order_and_opposing_faces():
    assert T.DIRECTIONS == ((1, 0), (1, -1), (0, -1), (-1, 0), (-1, 1), (0, 1))
    for i in range(6):
        a, b = T.DIRECTIONS[i], T.DIRECTIONS[(i + 3) % 6]
        assert (a[0] + b[0], a[1] + b[1]) == (0, 0)


@pytest.mark.parametrize("i", range(3))
def test_locked_by_neighbours_on_both_faces_of_an_opposing_pair(i):
    d = T.DIRECTIONS[i]
    cells = {(0, 0), d, (-d[0], -d[1])}
    assert T.is_locked(cells, (0, 0))
    assert not T.is_locked(cells, d)  # an end of the line is free


@pytest.mark.parametrize("i", range(6))
def test_neighbours_on_adjacent_faces_do_not_lock(i):
    a, b = T.DIRECTIONS[i], T.DIRECTIONS[(i + 1) % 6]
    assert not T.is_locked({(0, 0), a, b}, (0, 0))


def test_split_into_two_pieces_is_allowed_more_than_two_is_locked():
    two = {(0, 0), (1, 0), (0, -1)}  # neighbours on faces 0 and 2: not opposing, not touching each other
    assert not T.is_locked(two, (0, 0))
    three = two | {(-1, 1)}  # a third arm on face 4: removing the centre leaves three pieces
    assert T.is_locked(three, (0, 0))


def test_pieces_count_everything_on_the_table():
    # Already two pieces; splitting one of them again would make three: locked.
    cells = {(0, 0), (1, 0), (0, -1), (5, 5)}
    assert T.is_locked(cells, (0, 0))
    assert not T.is_locked(cells, (5, 5))  # removing a whole piece leaves fewer pieces


def test_is_locked_accepts_lists_and_tuples():
    assert T.is_locked([[0, 0], [1, 0], [-1, 0]], [0, 0])
    assert T.is_locked(frozenset({(0, 0), (1, 0), (-1, 0)}), (0, 0))


def test_hex19_free_cells_are_the_corners():
    assert T.free_cells(T.LAYOUTS["hex19"]) == [(-2, 0), (-2, 2), (0, -2), (0, 2), (2, -2), (2, 0)]


# --- layouts and settings ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(T.LAYOUTS))
def test_named_layouts_are_connected_and_big_enough(name):
    cells = T.LAYOUTS[name]
    assert len(cells) >= T.MIN_CELLS
    assert T.is_connected(cells)
    state = T.new_game({"layout": name}, 2, RandomChance(0))
    assert {(q, r) for q, r, _ in state.cells} == set(cells)


@given(st.integers(12, 60), st.integers(0, 10**6))
@settings(max_examples=40, deadline=None)
def test_random_layout_is_connected_of_the_given_size_and_replays(size, seed):
    a = T.random_layout(size, RandomChance(seed))
    assert len(a) == size == len(set(a))
    assert T.is_connected(a)
    assert a == T.random_layout(size, RandomChance(seed))
    state = T.new_game({"layout": "random", "size": size}, 3, RandomChance(seed))
    assert [(q, r) for q, r, _ in state.cells] == list(a)


def test_settings_defaults_and_validation():
    assert T.GAME.default_settings()["layout"] == "hex19"
    assert T.GAME.default_settings()["reroll_once_per_game"] is False
    assert T.GAME.default_settings()["turn_timer_s"] == 0
    assert T.GAME.check_settings({}, 2) == T.GAME.default_settings()
    bad = [{"nope": 1}, {"layout": "moon"}, {"layout": "random", "size": 11}, {"size": "12"},
           {"reroll_once_per_game": 1}, {"turn_timer_s": -1}, {"layout": "custom"},
           {"layout": "custom", "cells": [[0, 0], [5, 5]] + [[i, 0] for i in range(1, 11)]},  # not connected
           {"layout": "custom", "cells": [[i, 0] for i in range(11)]},  # too few
           {"cells": [[i, 0] for i in range(12)]}]  # cells without layout custom
    for s in bad:
        with pytest.raises(ValueError):
            T.GAME.check_settings(s, 2)
    for n in (1, 7, 0):
        with pytest.raises(ValueError):
            T.GAME.check_settings({}, n)
    for n in range(2, 7):
        T.GAME.check_settings({}, n)
    custom = {"layout": "custom", "cells": [[i, 0] for i in range(12)]}
    assert T.new_game(custom, 2, None).players == 2
    assert T.GAME.best_of({}) == 1 and T.GAME.realtime is False


# --- setup ------------------------------------------------------------------------------------------


def test_setup_random_order_announced_and_all_dice_rolled():
    chance = RandomChance(5)
    state = T.new_game({}, 3, chance)
    assert state.phase == "setup" and all(f is None for _, _, f in state.cells)
    (timer,) = T.timers(state)
    assert timer.delay_ns == 0
    action = T.complete(state, SYSTEM, timer.action, chance)
    assert sorted(action.order) == [0, 1, 2]
    res = ok(T.apply(state, SYSTEM, action))
    types = [e["type"] for e in maps(res.events)]
    assert types == ["order_decided", "dice_rolled", "turn_started"]
    assert maps(res.events)[0]["order"] == list(action.order)
    assert all(1 <= f <= 6 for _, _, f in res.state.cells)
    assert [c[2] for c in maps(res.events)[1]["cells"]] == list(action.faces)
    assert res.state.current == action.order[0]
    # Orders vary with chance.
    orders = {T.complete(state, SYSTEM, T.StartTakeaway(), RandomChance(s)).order for s in range(40)}
    assert len(orders) > 1


def test_start_needs_completed_and_valid_values():
    state = T.new_game({}, 2, None)
    assert T.apply(state, SYSTEM, T.StartTakeaway()).code == "incomplete"
    n = len(state.cells)
    assert T.apply(state, SYSTEM, T.StartTakeaway((0, 0), (1,) * n)).code == "malformed"
    assert T.apply(state, SYSTEM, T.StartTakeaway((0, 1), (7,) * n)).code == "malformed"
    assert T.apply(state, SYSTEM, T.StartTakeaway((0, 1), (1,) * (n - 1))).code == "malformed"
    assert T.apply(state, 0, T.ClaimBlink(2, 0)).code == "wrong_phase"


# --- a turn -----------------------------------------------------------------------------------------


def test_claim_removes_the_blink_and_scores_its_face():
    state = started(order=(0, 1))
    face = state.face_at((2, 0))
    res = ok(T.apply(state, 0, T.ClaimBlink(2, 0)))
    s2 = res.state
    assert (2, 0) not in s2.coords() and s2.claimed(0) == (face,)
    assert maps(res.events)[0] == {"type": "blink_claimed", "player": 0, "q": 2, "r": 0, "face": face, "turn": 0,
                             "timeout": False}
    assert maps(res.events)[-1] == {"type": "turn_started", "player": 1, "turn": 1}
    assert s2.current == 1


def test_locked_missing_and_out_of_turn_claims_are_rejected():
    state = started(order=(1, 0))
    assert T.apply(state, 1, T.ClaimBlink(0, 0)).code == "locked"
    assert T.apply(state, 1, T.ClaimBlink(9, 9)).code == "no_such_cell"
    assert T.apply(state, 0, T.ClaimBlink(2, 0)).code == "not_your_turn"
    assert T.apply(state, 5, T.ClaimBlink(2, 0)).code == "not_a_player"
    assert T.apply(state, 1, T.ClaimBlink("a", 0)).code == "malformed"  # type: ignore[arg-type]


def test_reroll_rolls_every_remaining_die_then_the_player_must_claim():
    chance = RandomChance(3)
    state = started(order=(0, 1))
    state = ok(T.apply(state, 0, T.ClaimBlink(2, 0))).state
    state = ok(T.apply(state, 1, T.ClaimBlink(-2, 0))).state
    res = ok(T.apply(state, 0, T.Reroll()))
    assert maps(res.events) == ({"type": "reroll_requested", "player": 0, "turn": 2},)
    rolling = res.state
    assert rolling.phase == "rolling" and T.legal_actions(rolling, 0) == []
    assert T.apply(rolling, 0, T.ClaimBlink(0, 2)).code == "wrong_phase"
    (timer,) = T.timers(rolling)
    assert timer.name == "reroll-2" and timer.delay_ns == 0
    action = T.complete(rolling, SYSTEM, timer.action, chance)
    assert len(action.faces) == len(rolling.cells) == 17
    res = ok(T.apply(rolling, SYSTEM, action))
    ev = maps(res.events)[0]
    assert ev["type"] == "dice_rolled" and ev["reason"] == "reroll" and ev["player"] == 0
    assert [c[2] for c in ev["cells"]] == list(action.faces)
    after = res.state
    assert after.phase == "turn" and after.current == 0
    # One re-roll per turn: now a claim is due.
    assert T.apply(after, 0, T.Reroll()).code == "already_rerolled"
    assert T.Reroll() not in T.legal_actions(after, 0)
    assert all(isinstance(a, T.ClaimBlink) for a in T.legal_actions(after, 0))
    # Next turn the re-roll is available again (the default rule).
    after = ok(T.apply(after, 0, T.ClaimBlink(2, -2))).state
    assert T.Reroll() in T.legal_actions(after, 1)
    after = ok(T.apply(after, 1, T.ClaimBlink(-2, 2))).state
    assert ok(T.apply(after, 0, T.Reroll()))


def test_reroll_is_optional():
    state = started(order=(0, 1))
    assert T.Reroll() in T.legal_actions(state, 0)
    ok(T.apply(state, 0, T.ClaimBlink(2, 0)))


def test_reroll_once_per_game_setting():
    chance = RandomChance(1)
    state = started({"reroll_once_per_game": True}, order=(0, 1))
    state = ok(T.apply(state, 0, T.Reroll())).state
    state = fire_zero_timers(state, chance)
    state = ok(T.apply(state, 0, T.ClaimBlink(2, 0))).state
    state = ok(T.apply(state, 1, T.Reroll())).state  # seat 1 still has theirs
    state = fire_zero_timers(state, chance)
    state = ok(T.apply(state, 1, T.ClaimBlink(-2, 0))).state
    assert T.apply(state, 0, T.Reroll()).code == "reroll_used"
    assert T.Reroll() not in T.legal_actions(state, 0)
    assert state.rerolls_used == (1, 1)


def test_clients_cannot_roll_or_choose_dice():
    state = started(order=(0, 1))
    n = len(state.cells)
    assert T.apply(state, 0, T.RollCluster(0, (6,) * n)).code == "not_allowed"
    assert T.apply(state, 0, T.StartTakeaway((0, 1), (6,) * n)).code == "not_allowed"
    assert T.apply(state, 0, T.TakeawayTimeout(0)).code == "not_allowed"
    with pytest.raises(ValueError):
        T.action_from_wire(T.action_to_wire(T.RollCluster(0, (6,) * n)))
    with pytest.raises(ValueError):
        T.action_from_wire({"t": "Reroll", "v": 1, "faces": [6] * n})
    assert T.action_from_wire(T.action_to_wire(T.ClaimBlink(1, -2))) == T.ClaimBlink(1, -2)
    assert T.action_from_wire(T.action_to_wire(T.Reroll())) == T.Reroll()
    a = T.RollCluster(3, (1, 2, 3))
    assert T.action_from_wire(T.action_to_wire(a), system=True) == a
    for bad in ({}, {"t": "ClaimBlink", "v": 1, "q": 1}, {"t": "ClaimBlink", "v": 1, "q": True, "r": 0}, "x"):
        with pytest.raises(ValueError):
            T.action_from_wire(bad)  # type: ignore[arg-type]
    # A stale roll (an old turn) is refused.
    state = ok(T.apply(state, 0, T.Reroll())).state
    assert T.apply(state, SYSTEM, T.RollCluster(5, (1,) * n)).code == "wrong_phase"
    assert T.apply(state, SYSTEM, T.RollCluster(0)).code == "incomplete"


# --- the end ----------------------------------------------------------------------------------------


def _claim_all(state, policy):
    chance = RandomChance(0)
    return play(state, chance, policy)


def test_game_ends_when_the_last_blink_is_claimed_and_highest_total_wins():
    faces = [1] * 19
    state = started(order=(0, 1), faces=faces)
    # Everyone always takes the first free cell: all faces are 1, so the scores are 1 + 10*(k-1).
    final, log = _claim_all(state, lambda v, p: T.ClaimBlink(*T.free_cells(v.coords())[0]))
    out = T.outcome(final)
    assert out is not None and not final.cells
    assert out.scores == (1 + 10 * 9, 1 + 10 * 8)  # 10 and 9 Blinks
    assert out.winners == (0,)
    last = log[-1]
    assert last == {"type": "game_over", "winner": 0, "winners": [0], "scores": [91, 81], "reason": "all_claimed"}


def test_equal_highest_totals_share_the_win():
    chance = RandomChance(0)
    s = {"layout": "custom", "cells": [[i, 0] for i in range(12)]}
    state = started(s, players=3, order=(0, 1, 2), faces=[1, 2, 3, 4, 5, 6, 6, 5, 4, 3, 2, 1])
    # A bar of 12: each turn one end is taken. Make seats 0 and 1 tie: take always the left end.
    final, log = play(state, chance, lambda v, p: T.ClaimBlink(*T.free_cells(v.coords())[0]))
    out = T.outcome(final)
    # seat 0: 1,4,6,3 = 14; seat 1: 2,5,5,2 = 2+5+10+10 = 27; seat 2: 3,6,4,1 = 14
    assert out.scores == (14, 27, 14)
    assert out.winners == (1,)
    # Now a tie at the top.
    state = started(s, players=2, order=(0, 1), faces=[1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6])
    final, log = play(state, chance, lambda v, p: T.ClaimBlink(*T.free_cells(v.coords())[0]))
    out = T.outcome(final)
    assert out.scores[0] == out.scores[1] == 21
    assert out.winners == (0, 1) and out.reason == "shared_win"
    assert log[-1]["winner"] is None and log[-1]["winners"] == [0, 1]


def test_apply_after_the_end_is_refused():
    state = started(order=(0, 1))
    final, _ = _claim_all(state, T.bot_action)
    assert T.apply(final, 0, T.ClaimBlink(0, 0)).code == "game_over"
    assert T.legal_actions(final, 0) == [] and T.timers(final) == ()


# --- turn timer -------------------------------------------------------------------------------------


def test_turn_timer_makes_a_legal_default_move_and_says_so():
    state = started({"turn_timer_s": 2.5}, order=(0, 1), faces=[6] * 19)
    (timer,) = T.timers(state)
    assert timer.name == "turn-0" and timer.delay_ns == 2_500_000_000
    res = ok(T.apply(state, SYSTEM, timer.action))
    assert maps(res.events)[0] == {"type": "turn_timeout", "player": 0, "turn": 0}
    assert maps(res.events)[1]["type"] == "blink_claimed" and maps(res.events)[1]["timeout"] is True
    assert res.state.current == 1
    assert [t.name for t in T.timers(res.state)] == ["turn-1"]
    assert T.apply(res.state, SYSTEM, timer.action).code == "wrong_phase"  # a stale timer does nothing
    # During a re-roll the turn timer keeps its name (the relay keeps its deadline).
    rolling = ok(T.apply(res.state, 1, T.Reroll())).state
    assert [t.name for t in T.timers(rolling)] == ["reroll-1", "turn-1"]


def test_default_move_takes_the_best_gain():
    state = started(order=(0, 1))
    cells = tuple((q, r, 2) for q, r, _ in state.cells)
    state = replace(state, cells=cells, claims=((0, 9, 9, 2),))
    assert T.default_claim(state, 0) in T.free_cells(state.coords())
    # A duplicate 2 is worth 10 to seat 0.
    c = T.default_claim(state, 0)
    assert T.gain(state.claimed(0), state.face_at(c)) == 10


def test_no_timer_by_default():
    state = started(order=(0, 1))
    assert T.timers(state) == ()


# --- the bot ---------------------------------------------------------------------------------------


def test_bot_prefers_a_duplicate_over_a_six():
    state = started(order=(0, 1))
    free = T.free_cells(state.coords())
    cells = tuple((q, r, 3 if (q, r) == free[1] else (6 if (q, r) in free else 1)) for q, r, _ in state.cells)
    state = replace(state, cells=cells, claims=((0, 9, 9, 3),))
    assert T.bot_action(state, 0) == T.ClaimBlink(*free[1])
    assert T.bot_action(state, 1) is None


def test_bot_rerolls_a_poor_choice_once():
    state = started(order=(0, 1), faces=[1] * 19)
    assert T.bot_action(state, 0) == T.Reroll()
    state = replace(state, rerolled=True)
    assert isinstance(T.bot_action(state, 0), T.ClaimBlink)


def test_bot_games_finish():
    for players in (2, 3, 4):
        state = started(players=players, seed=players)
        final, _ = play(state, RandomChance(players), T.bot_action)
        assert T.outcome(final) is not None


# --- whole-game properties ---------------------------------------------------------------------------


@given(st.integers(12, 40), st.integers(2, 6), st.integers(0, 10**6), st.booleans())
@settings(max_examples=40, deadline=None)
def test_random_games_always_have_a_free_blink_and_scores_add_up(size, players, seed, once):
    chance = RandomChance(seed)
    state = T.new_game({"layout": "random", "size": size, "reroll_once_per_game": once}, players, chance)
    initial = len(state.cells)

    def check(s):
        if s.phase == "turn":
            assert T.free_cells(s.coords()), "a cluster always has a Blink that is not locked"

    check(fire_zero_timers(state, chance))
    final, log = play(state, chance, random_policy(seed), check=check)
    out = T.outcome(final)
    assert out is not None
    assert len(final.claims) == initial
    for p in range(players):
        assert out.scores[p] == T.score(final.claimed(p))
    assert sum(len(final.claimed(p)) for p in range(players)) == initial
    assert set(out.winners) == {p for p in range(players) if out.scores[p] == max(out.scores)}
    # Every claim in the log is a face that the log had shown for that cell.
    shown = {}
    for e in log:
        if e["type"] == "dice_rolled":
            shown = {(q, r): f for q, r, f in e["cells"]}
        if e["type"] == "blink_claimed":
            assert shown[(e["q"], e["r"])] == e["face"]


@given(st.integers(12, 40), st.integers(0, 10**6), st.floats(0.1, 6.2))
@settings(max_examples=60, deadline=None)
def test_the_farthest_cell_in_a_generic_direction_is_never_locked(size, seed, angle):
    import math

    cells = T.random_layout(size, RandomChance(seed))
    dx, dy = math.cos(angle), math.sin(angle)

    def pos(c):  # axial -> plane
        q, r = c
        return (q + r / 2, r * math.sqrt(3) / 2)

    far = max(cells, key=lambda c: (pos(c)[0] * dx + pos(c)[1] * dy, c))
    assert not T.is_locked(set(cells), far)


@given(st.integers(0, 10**6), st.integers(0, 40))
@settings(max_examples=40, deadline=None)
def test_rejected_actions_change_nothing(seed, steps):
    chance = RandomChance(seed)
    rng = random.Random(seed)
    state = fire_zero_timers(T.new_game({}, 3, chance), chance)
    for _ in range(steps):
        if T.outcome(state) is not None:
            break
        before = T.to_wire(state)
        probes = [T.ClaimBlink(rng.randint(-3, 3), rng.randint(-3, 3)), T.Reroll(),
                  T.RollCluster(state.turn, (1,) * len(state.cells))]
        for p in (0, 1, 2, SYSTEM):
            for a in probes:
                res = T.apply(state, p, a)
                if isinstance(res, Rejected):
                    assert T.to_wire(state) == before
        action = rng.choice(T.legal_actions(state, state.current))
        state = fire_zero_timers(ok(T.apply(state, state.current, action)).state, chance)
        assert T.from_wire(T.to_wire(state)) == state


def test_same_seed_same_game():
    def run(seed):
        chance = RandomChance(seed)
        state = T.new_game({"layout": "random", "size": 20}, 3, chance)
        return play(state, chance, T.bot_action)[1]

    assert run(11) == run(11)
    assert run(11) != run(12)


def test_replay_from_the_logged_values():
    """The events carry every die: re-applying them with FixedChance-free actions gives the same end."""
    chance = RandomChance(4)
    state0 = T.new_game({}, 2, chance)
    actions = []
    state = state0
    while T.outcome(state) is None:
        due = [t for t in T.timers(state) if t.delay_ns == 0]
        if due:
            a, p = T.complete(state, SYSTEM, due[0].action, chance), SYSTEM
        else:
            p = state.current
            a = T.bot_action(state, p)
        actions.append((p, T.action_to_wire(a)))
        state = ok(T.apply(state, p, a)).state
    replay = state0
    for p, wire in actions:
        replay = ok(T.apply(replay, p, T.action_from_wire(wire, system=True))).state
    assert replay == state


def test_wire_round_trip_and_view():
    state = started({"layout": "random", "size": 15, "reroll_once_per_game": True}, players=4, seed=9)
    assert T.from_wire(T.to_wire(state)) == state
    assert T.view(state, 0) == state and T.view(state, None) == state
    import json

    assert T.from_wire(json.loads(json.dumps(T.to_wire(state)))) == state
    with pytest.raises(ValueError):
        T.from_wire({"settings": {}})
    assert T.from_wire(T.to_wire(T.new_game({}, 2, None))) == T.new_game({}, 2, None)


def test_fixed_chance_drives_setup():
    state = T.new_game({"layout": "ring"}, 2, None)
    action = T.complete(state, SYSTEM, T.StartTakeaway(), FixedChance([0] + [5] * 12))
    assert action.order == (1, 0) and action.faces == (6,) * 12
