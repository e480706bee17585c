"""Sequence Dice (RULES.md section 3): every clause as a test, plus properties of whole games."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from protocol.rules import sequence as S
from protocol.rules.base import SYSTEM, FixedChance, Rejected
from tests.helpers import RandomChance, maps, ok




def brute_has_sequence(owned, length):
    owned = set(owned)
    for r, c in owned:
        for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1), (0, -1), (-1, 0), (-1, -1), (-1, 1)):
            if all((r + i * dr, c + i * dc) in owned for i in range(length)):
                return True
    return False


def board_with(chips_by_cell, players=2, settings=None):
    """A state in phase roll for seat 0 with the given chips {(r, c): colour}."""
    state = S.new_game(settings, players, None)
    chips = [list(row) for row in state.chips]
    for (r, c), colour in chips_by_cell.items():
        chips[r][c] = colour
    return replace(state, chips=tuple(tuple(row) for row in chips), phase="roll", current=0, contenders=())


def rolled(state, a, b):
    return ok(S.apply(state, SYSTEM, S.RollDice(state.turn, (a, b))))


def fire_zero_timers(state, chance, log=None):
    while True:
        due = [t for t in S.timers(state) if t.delay_ns == 0]
        if not due or S.outcome(state) is not None:
            return state
        res = ok(S.apply(state, SYSTEM, S.complete(state, SYSTEM, due[0].action, chance)))
        if log is not None:
            log.extend(maps(res.events))
        state = res.state


def play(state, chance, policy, check=None, max_steps=5000):
    log = []
    for _ in range(max_steps):
        state = fire_zero_timers(state, chance, log)
        if check:
            check(state)
        if S.outcome(state) is not None:
            return state, log
        p = state.current
        action = policy(S.view(state, p), p)
        assert action is not None
        res = ok(S.apply(state, p, S.complete(state, p, action, chance)))
        log.extend(maps(res.events))
        state = res.state
    raise AssertionError("game did not finish")


def random_policy(seed):
    rng = random.Random(seed)
    return lambda view, p: rng.choice(S.legal_actions(view, p))


# --- the board --------------------------------------------------------------------------------------


def test_default_board_exactly_as_printed():
    assert [list(r) for r in S.DEFAULT_BOARD] == [
        [2, 7, 4, 8, 5, 2],
        [5, 9, 3, 6, 9, 7],
        [8, 6, 12, 12, 3, 4],
        [4, 3, 12, 12, 6, 8],
        [7, 9, 6, 3, 9, 5],
        [2, 5, 8, 4, 7, 2],
    ]
    assert S.DEFAULT_BOARD[2][3] == 12 and S.DEFAULT_BOARD[5][0] == 2


def test_default_board_numbers():
    b = S.DEFAULT_BOARD
    counts = Counter(x for row in b for x in row)
    assert len(b) == 6 and all(len(r) == 6 for r in b)
    assert counts == Counter({n: 4 for n in (2, 3, 4, 5, 6, 7, 8, 9, 12)})
    assert {b[0][0], b[0][5], b[5][0], b[5][5]} == {2}
    assert {b[2][2], b[2][3], b[3][2], b[3][3]} == {12}
    for r0 in (0, 3):
        for c0 in (0, 3):
            quarter = [b[r][c] for r in range(r0, r0 + 3) for c in range(c0, c0 + 3)]
            assert sorted(x for x in quarter if x not in (2, 12)) == [3, 4, 5, 6, 7, 8, 9]


def test_board_is_data():
    board = [[3] * 6 for _ in range(6)]
    state = S.new_game({"board": board}, 2, None)
    assert state.settings.board == tuple(tuple(r) for r in board)
    for bad in ({"board": [[10] * 6] * 6}, {"board": [[2] * 6] * 5 + [[2] * 5]}, {"board": "x"},
                {"board": [[True] * 6] * 6}, {"sequence_length": 7}, {"max_turns": 0}, {"nope": 1},
                {"turn_timer_s": "1"}):
        with pytest.raises(ValueError):
            S.GAME.check_settings(bad, 2)


def test_settings_defaults_and_players():
    d = S.GAME.default_settings()
    assert d["sequence_length"] == 5 and d["max_turns"] == 400 and d["chips_per_colour"] == 20
    assert d["turn_timer_s"] == 0 and d["board"] == [list(r) for r in S.DEFAULT_BOARD]
    for n in (1, 5):
        with pytest.raises(ValueError):
            S.GAME.check_settings({}, n)
    for n in (2, 3, 4):
        assert S.GAME.check_settings({}, n) == d
    assert S.GAME.check_settings({"sequence_length": 6}, 2)["sequence_length"] == 6
    assert (S.GAME.min_players, S.GAME.max_players, S.GAME.best_of({})) == (2, 4, 1)


# --- colours and teams ------------------------------------------------------------------------------


def test_colours_two_three_and_four_players():
    assert [S.team_of(p, 2) for p in range(2)] == [0, 1]
    assert [S.team_of(p, 3) for p in range(3)] == [0, 1, 2]
    assert [S.team_of(p, 4) for p in range(4)] == [0, 1, 0, 1]  # players 1&3 vs 2&4
    assert S.seats_of(0, 4) == (0, 2) and S.seats_of(1, 4) == (1, 3)
    assert S.COLOURS == ("green", "blue", "red")


# --- has_sequence ------------------------------------------------------------------------------------


@pytest.mark.parametrize("line", [
    [(0, c) for c in range(5)],  # row
    [(r, 3) for r in range(1, 6)],  # column
    [(i, i) for i in range(5)],  # diagonal
    [(i, 5 - i) for i in range(5)],  # anti-diagonal
    [(1 + i, 5 - i) for i in range(5)],
])
def test_five_in_a_line_is_a_sequence(line):
    assert S.has_sequence(set(line))
    assert S.has_sequence(set(line), 5)
    assert not S.has_sequence(set(line[:4]))
    assert not S.has_sequence(set(line), 6)
    assert S.find_sequence(set(line)) == tuple(sorted(line))  # the cells in order along the line


def test_a_gap_or_a_bend_is_no_sequence():
    assert not S.has_sequence({(0, 0), (0, 1), (0, 2), (0, 4), (0, 5)})
    assert not S.has_sequence({(0, 0), (0, 1), (0, 2), (1, 3), (1, 4)})
    assert S.has_sequence({(0, c) for c in range(6)}, 6)
    assert not S.has_sequence(set())


@given(st.sets(st.tuples(st.integers(0, 5), st.integers(0, 5)), max_size=30), st.integers(3, 6))
@settings(max_examples=300, deadline=None)
def test_has_sequence_agrees_with_brute_force(owned, length):
    assert S.has_sequence(owned, length) == brute_has_sequence(owned, length)
    line = S.find_sequence(owned, length)
    if line is not None:
        assert set(line) <= owned and len(line) >= length


# --- order -------------------------------------------------------------------------------------------


def test_rolloff_highest_total_goes_first():
    state = S.new_game({}, 3, None)
    (timer,) = S.timers(state)
    assert timer.name == "rolloff-0" and timer.delay_ns == 0
    res = ok(S.apply(state, SYSTEM, S.RollOff(0, ((1, 2), (6, 5), (3, 3)))))
    assert res.state.current == 1 and res.state.phase == "roll"
    assert maps(res.events)[0]["type"] == "rolloff" and maps(res.events)[0]["tied"] == []
    assert [r["total"] for r in maps(res.events)[0]["rolls"]] == [3, 11, 6]
    assert maps(res.events)[1] == {"type": "first_player", "player": 1}


def test_rolloff_ties_roll_again_only_the_tied():
    state = S.new_game({}, 4, None)
    res = ok(S.apply(state, SYSTEM, S.RollOff(0, ((6, 6), (1, 1), (6, 6), (3, 4)))))
    s = res.state
    assert s.phase == "rolloff" and s.contenders == (0, 2) and s.rolloff_round == 1
    assert maps(res.events)[0]["tied"] == [0, 2]
    assert S.timers(s)[0].name == "rolloff-1"
    assert S.apply(s, SYSTEM, S.RollOff(0, ((1, 1), (2, 2)))).code == "wrong_phase"  # stale round
    assert S.apply(s, SYSTEM, S.RollOff(1, ((1, 1),))).code == "malformed"  # one pair per contender
    action = S.complete(s, SYSTEM, S.timers(s)[0].action, FixedChance([0, 0, 5, 5]))
    assert action.dice == ((1, 1), (6, 6))
    s = ok(S.apply(s, SYSTEM, action)).state
    assert s.current == 2 and s.phase == "roll"


def test_play_passes_to_the_left():
    state = board_with({}, players=3)
    state = replace(state, current=2)
    s = rolled(state, 3, 4).state
    s = ok(S.apply(s, 2, S.PlaceChip(0, 1))).state
    assert s.current == 0 and s.turn == 1 and s.phase == "roll"


# --- a turn ------------------------------------------------------------------------------------------


def test_roll_then_place_on_an_open_space_with_that_number():
    state = board_with({})
    assert S.timers(state)[0].name == "roll-0"
    res = rolled(state, 3, 4)
    assert maps(res.events) == ({"type": "dice_rolled", "player": 0, "turn": 0, "dice": [3, 4], "total": 7},)
    s = res.state
    sevens = [(r, c) for r in range(6) for c in range(6) if S.DEFAULT_BOARD[r][c] == 7]
    assert S.legal_actions(s, 0) == [S.PlaceChip(r, c) for r, c in sevens]
    assert S.apply(s, 0, S.PlaceChip(0, 0)).code == "not_allowed"  # a 2 space
    assert S.apply(s, 0, S.RemoveChip(0, 1)).code == "not_allowed"
    assert S.apply(s, 1, S.PlaceChip(0, 1)).code == "not_your_turn"
    assert S.apply(s, 0, S.PlaceChip(6, 0)).code == "no_such_cell"
    res = ok(S.apply(s, 0, S.PlaceChip(0, 1)))
    assert maps(res.events)[0] == {"type": "chip_placed", "player": 0, "row": 0, "col": 1, "colour": "green",
                             "replaced": None, "timeout": False}
    assert res.state.chips[0][1] == 0 and res.state.current == 1


def test_all_spaces_covered_replace_an_opponents_chip():
    sevens = [(r, c) for r in range(6) for c in range(6) if S.DEFAULT_BOARD[r][c] == 7]
    chips = {sevens[0]: 0, sevens[1]: 1, sevens[2]: 0, sevens[3]: 1}
    s = rolled(board_with(chips), 5, 2).state
    assert S.legal_actions(s, 0) == [S.PlaceChip(*sevens[1]), S.PlaceChip(*sevens[3])]
    assert S.apply(s, 0, S.PlaceChip(*sevens[0])).code == "not_allowed"  # own chip
    res = ok(S.apply(s, 0, S.PlaceChip(*sevens[3])))
    assert maps(res.events)[0]["replaced"] == "blue"
    assert res.state.chips[sevens[3][0]][sevens[3][1]] == 0


def test_replacing_on_2_and_12_spaces_is_allowed():
    twelves = [(2, 2), (2, 3), (3, 2), (3, 3)]
    s = rolled(board_with({c: 1 for c in twelves}), 6, 6).state
    assert len(S.legal_actions(s, 0)) == 4
    s2 = ok(S.apply(s, 0, S.PlaceChip(2, 2))).state
    assert s2.chips[2][2] == 0


def test_all_four_own_turn_ends_with_nothing_placed():
    sevens = [(r, c) for r in range(6) for c in range(6) if S.DEFAULT_BOARD[r][c] == 7]
    res = rolled(board_with({c: 0 for c in sevens}), 3, 4)
    types = [e["type"] for e in maps(res.events)]
    assert types == ["dice_rolled", "no_move", "turn_started"]
    assert maps(res.events)[1]["reason"] == "all_own"
    assert res.state.current == 1 and res.state.phase == "roll"


@pytest.mark.parametrize("dice", [(1, 1), (6, 6)])
def test_2_and_12_give_another_turn(dice):
    res = rolled(board_with({}), *dice)
    s = res.state
    r, c = S.legal_actions(s, 0)[0].row, S.legal_actions(s, 0)[0].col
    res = ok(S.apply(s, 0, S.PlaceChip(r, c)))
    assert res.state.current == 0 and res.state.turn == 1
    assert maps(res.events)[-1] == {"type": "turn_started", "player": 0, "turn": 1, "bonus": True}


def test_bonus_turn_even_when_nothing_could_be_placed():
    corners = [(0, 0), (0, 5), (5, 0), (5, 5)]
    res = rolled(board_with({c: 0 for c in corners}), 1, 1)
    assert [e["type"] for e in maps(res.events)] == ["dice_rolled", "no_move", "turn_started"]
    assert res.state.current == 0 and maps(res.events)[-1]["bonus"] is True


def test_ten_removes_an_opponent_chip_but_not_from_2_or_12():
    chips = {(0, 0): 1, (2, 2): 1, (0, 1): 1, (1, 1): 0}
    s = rolled(board_with(chips), 4, 6).state
    assert S.legal_actions(s, 0) == [S.RemoveChip(0, 1)]
    assert S.apply(s, 0, S.RemoveChip(0, 0)).code == "not_allowed"
    assert S.apply(s, 0, S.RemoveChip(2, 2)).code == "not_allowed"
    assert S.apply(s, 0, S.RemoveChip(1, 1)).code == "not_allowed"  # own chip
    assert S.apply(s, 0, S.PlaceChip(0, 2)).code == "not_allowed"
    res = ok(S.apply(s, 0, S.RemoveChip(0, 1)))
    assert maps(res.events)[0] == {"type": "chip_removed", "player": 0, "row": 0, "col": 1, "colour": "blue",
                             "timeout": False}
    assert res.state.chips[0][1] is None and res.state.current == 1


def test_ten_with_nothing_to_remove_ends_the_turn():
    res = rolled(board_with({(0, 0): 1, (1, 1): 0}), 5, 5)
    assert maps(res.events)[1]["type"] == "no_move" and maps(res.events)[1]["reason"] == "no_chip_to_remove"
    assert res.state.current == 1


def test_eleven_is_wild_any_open_space():
    chips = {(0, 0): 1, (1, 1): 0}
    s = rolled(board_with(chips), 5, 6).state
    opts = S.legal_actions(s, 0)
    assert len(opts) == 34 and all(isinstance(a, S.PlaceChip) for a in opts)
    assert S.apply(s, 0, S.PlaceChip(0, 0)).code == "not_allowed"  # covered, while open spaces exist
    ok(S.apply(s, 0, S.PlaceChip(4, 4)))


def test_eleven_on_a_full_board_replaces_any_opponent_chip():
    # A full board with no five in a line for anyone: colour by (col // 2 + row) % 2 stripes.
    chips = {(r, c): (r + c // 2) % 2 for r in range(6) for c in range(6)}
    state = board_with(chips)
    assert not S.has_sequence(state.owned(0)) and not S.has_sequence(state.owned(1))
    s = rolled(state, 6, 5).state
    opts = S.legal_actions(s, 0)
    assert {(a.row, a.col) for a in opts} == {k for k, v in chips.items() if v == 1}
    assert (0, 2) in {(a.row, a.col) for a in opts}  # ... including chips on 2/12 spaces if any
    res = ok(S.apply(s, 0, opts[0]))
    assert maps(res.events)[0]["replaced"] == "blue"


def test_a_colour_with_all_its_chips_placed_cannot_place_but_still_removes():
    settings = {"chips_per_colour": 3}
    state = board_with({(0, 1): 0, (1, 0): 0, (4, 4): 0, (5, 4): 1}, settings=settings)
    res = rolled(state, 3, 4)
    assert maps(res.events)[1]["type"] == "no_move" and maps(res.events)[1]["reason"] == "out_of_chips"
    s = rolled(state, 4, 6).state
    assert S.legal_actions(s, 0) == [S.RemoveChip(5, 4)]
    # Blue may place its second chip.
    assert S.legal_actions(rolled(replace(state, current=1), 3, 4).state, 1)


# --- winning ------------------------------------------------------------------------------------------


def test_five_in_a_row_wins_checked_after_the_placement():
    chips = {(1, 0): 0, (1, 1): 0, (1, 2): 0, (1, 3): 0}  # row 1: 5 9 3 6 [9] 7
    s = rolled(board_with(chips), 4, 5).state
    res = ok(S.apply(s, 0, S.PlaceChip(1, 4)))
    end = maps(res.events)[-1]
    assert end["type"] == "game_over" and end["winner"] == 0 and end["winners"] == [0]
    assert end["line"] == [[1, 0], [1, 1], [1, 2], [1, 3], [1, 4]] and end["reason"] == "sequence"
    out = S.outcome(res.state)
    assert out.winners == (0,) and out.reason == "sequence" and out.extra["line"] == end["line"]
    assert S.apply(res.state, 1, S.PlaceChip(0, 0)).code == "game_over"
    assert S.timers(res.state) == () and S.legal_actions(res.state, 1) == []


def test_a_team_wins_together():
    chips = {(i, i): 1 for i in range(4)}  # diagonal of blue: seats 1 and 3
    state = replace(board_with(chips, players=4), current=3)
    s = rolled(state, 4, 5).state  # (4,4) is a 9
    res = ok(S.apply(s, 3, S.PlaceChip(4, 4)))
    out = S.outcome(res.state)
    assert out.winners == (1, 3)
    assert maps(res.events)[-1]["winner"] is None and maps(res.events)[-1]["winners"] == [1, 3]
    assert maps(res.events)[-1]["colour"] == "blue"


def test_sequence_length_six_setting():
    chips = {(1, c): 0 for c in range(4)}
    state = board_with(chips, settings={"sequence_length": 6})
    s = ok(S.apply(rolled(state, 4, 5).state, 0, S.PlaceChip(1, 4))).state
    assert S.outcome(s) is None
    s = replace(s, current=0)
    s = ok(S.apply(rolled(s, 3, 4).state, 0, S.PlaceChip(1, 5))).state
    assert S.outcome(s).winners == (0,) and len(s.line) == 6


def test_max_turns_ends_in_a_draw():
    state = board_with({}, settings={"max_turns": 2})
    s = ok(S.apply(rolled(state, 3, 4).state, 0, S.PlaceChip(0, 1))).state
    assert S.outcome(s) is None
    res = ok(S.apply(rolled(s, 3, 4).state, 1, S.PlaceChip(1, 5)))
    out = S.outcome(res.state)
    assert out is not None and out.winners == () and out.reason == "max_turns"
    assert maps(res.events)[-1]["type"] == "game_over" and maps(res.events)[-1]["winner"] is None


# --- dice belong to the relay ------------------------------------------------------------------------


def test_clients_cannot_roll():
    state = board_with({})
    assert S.apply(state, 0, S.RollDice(0, (6, 6))).code == "not_allowed"
    assert S.apply(state, 0, S.RollOff(0, ((6, 6),))).code == "not_allowed"
    assert S.apply(state, 0, S.PlaceChip(0, 1)).code == "wrong_phase"  # not rolled yet
    with pytest.raises(ValueError):
        S.action_from_wire(S.action_to_wire(S.RollDice(0, (6, 6))))
    assert S.action_from_wire(S.action_to_wire(S.PlaceChip(1, 2))) == S.PlaceChip(1, 2)
    assert S.action_from_wire(S.action_to_wire(S.RemoveChip(1, 2))) == S.RemoveChip(1, 2)
    assert S.action_from_wire(S.action_to_wire(S.RollDice(3, (1, 2))), system=True) == S.RollDice(3, (1, 2))
    assert S.apply(state, SYSTEM, S.RollDice(0)).code == "incomplete"
    assert S.apply(state, SYSTEM, S.RollDice(0, (7, 1))).code == "malformed"
    assert S.apply(state, SYSTEM, S.RollDice(1, (1, 1))).code == "wrong_phase"
    assert S.apply(state, SYSTEM, S.PlaceChip(0, 1)).code == "not_allowed"
    action = S.complete(state, SYSTEM, S.timers(state)[0].action, FixedChance([2, 3]))
    assert action == S.RollDice(0, (3, 4))
    assert S.complete(state, 0, S.PlaceChip(0, 1), FixedChance([])) == S.PlaceChip(0, 1)


# --- turn timer ----------------------------------------------------------------------------------------


def test_turn_timer_default_move():
    state = board_with({}, settings={"turn_timer_s": 3})
    s = rolled(state, 3, 4).state
    (timer,) = S.timers(s)
    assert timer.name == "turn-0" and timer.delay_ns == 3_000_000_000
    res = ok(S.apply(s, SYSTEM, timer.action))
    assert maps(res.events)[0] == {"type": "turn_timeout", "player": 0, "turn": 0}
    assert maps(res.events)[1]["type"] == "chip_placed" and maps(res.events)[1]["timeout"] is True
    assert (maps(res.events)[1]["row"], maps(res.events)[1]["col"]) == (0, 1)  # first possible in row-major order
    assert S.apply(res.state, SYSTEM, timer.action).code == "wrong_phase"
    assert S.timers(board_with({})) == (S.Timer("roll-0", 0, S.RollDice(0)),)


# --- the bot --------------------------------------------------------------------------------------------


def test_bot_completes_its_own_line():
    chips = {(1, 0): 0, (1, 1): 0, (1, 2): 0, (1, 3): 0}
    s = rolled(board_with(chips), 4, 5).state  # 9: (1,1) taken, (1,4), (4,1), (4,4) open
    assert S.bot_action(s, 0) == S.PlaceChip(1, 4)


def test_bot_blocks_the_opponents_four():
    chips = {(4, 0): 1, (4, 1): 1, (4, 2): 1, (4, 3): 1}  # row 4: 7 9 6 3 [9] 5
    s = rolled(board_with(chips), 4, 5).state
    assert S.bot_action(s, 0) == S.PlaceChip(4, 4)
    s = rolled(board_with({(4, c): 1 for c in range(1, 5)}), 5, 5).state
    assert S.bot_action(s, 0) in [S.RemoveChip(4, c) for c in range(1, 5)]
    assert S.bot_action(s, 1) is None


# --- whole games --------------------------------------------------------------------------------------------


def _check_invariants(state):
    for colour in range(3):
        assert state.count(colour) <= state.settings.chips_per_colour
    L = state.settings.sequence_length
    lines = [c for c in range(3) if brute_has_sequence(state.owned(c), L)]
    if S.outcome(state) is None:
        assert lines == [], "a SEQUENCE on the board must end the game"
    elif state.reason == "sequence":
        assert lines == [state.colour(state.winners[0])]
        assert set(state.line) <= state.owned(lines[0])


@given(st.integers(2, 4), st.integers(0, 10**6), st.sampled_from([4, 5, 6]), st.sampled_from([6, 20]))
@settings(max_examples=40, deadline=None)
def test_random_games_keep_chip_counts_and_report_sequences_exactly(players, seed, length, chips):
    chance = RandomChance(seed)
    state = S.new_game({"sequence_length": length, "chips_per_colour": chips, "max_turns": 300}, players, chance)
    final, log = play(state, chance, random_policy(seed), check=_check_invariants)
    out = S.outcome(final)
    assert out is not None
    if out.reason == "sequence":
        assert set(out.winners) == set(S.seats_of(final.colour(out.winners[0]), players))


@given(st.integers(2, 4), st.integers(0, 10**6))
@settings(max_examples=15, deadline=None)
def test_bot_games_finish(players, seed):
    chance = RandomChance(seed)
    state = S.new_game({}, players, chance)
    final, log = play(state, chance, S.bot_action, check=_check_invariants)
    assert S.outcome(final) is not None
    assert log[-1]["type"] == "game_over"


@given(st.integers(0, 10**6), st.integers(0, 60))
@settings(max_examples=30, deadline=None)
def test_rejected_actions_change_nothing(seed, steps):
    chance = RandomChance(seed)
    rng = random.Random(seed)
    state = fire_zero_timers(S.new_game({}, 3, chance), chance)
    for _ in range(steps):
        if S.outcome(state) is not None:
            break
        before = S.to_wire(state)
        for p in (0, 1, 2, SYSTEM):
            for a in (S.PlaceChip(rng.randint(-1, 6), rng.randint(0, 6)), S.RemoveChip(rng.randint(0, 5), 0),
                      S.RollDice(state.turn, (1, 1)), S.SequenceTimeout(state.turn + 1)):
                if isinstance(S.apply(state, p, a), Rejected):
                    assert S.to_wire(state) == before
        state = ok(S.apply(state, state.current, rng.choice(S.legal_actions(state, state.current)))).state
        state = fire_zero_timers(state, chance)
        assert S.from_wire(S.to_wire(state)) == state


def test_same_seed_same_game():
    def run(seed):
        chance = RandomChance(seed)
        return play(S.new_game({}, 4, chance), chance, S.bot_action)[1]

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_wire_round_trip_and_views():
    chance = RandomChance(1)
    state = fire_zero_timers(S.new_game({"sequence_length": 4}, 3, chance), chance)
    state = ok(S.apply(state, state.current, S.legal_actions(state, state.current)[0])).state
    import json

    assert S.from_wire(json.loads(json.dumps(S.to_wire(state)))) == state
    assert S.view(state, 0) == state == S.view(state, None)
    with pytest.raises(ValueError):
        S.from_wire({"settings": {}, "players": 2})
