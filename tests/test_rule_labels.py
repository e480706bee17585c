"""Each game owns its phases, outcome reasons and rejection codes as ``Literal`` types, and labels
them for people: what the engines really produce stays inside those types, and every label names
one of them (the window shows a game's labels and has no table of its own for them)."""

from __future__ import annotations

import random
from types import ModuleType
from typing import Any, Union, get_args, get_origin

import pytest

from protocol.chance import SeededChance
from protocol.rules import GAMES, GAME_NAMES, blink, roll_your_own, sequence, takeaway
from protocol.match import MATCH_REASON_LABELS, MatchReason
from protocol.rules.base import COMMON_CODE_LABELS, SYSTEM, Accepted, CommonCode

MODULES: dict[str, ModuleType] = {"blink": blink, "takeaway": takeaway, "sequence": sequence, "ryo": roll_your_own}


def values(tp: Any) -> set[str]:
    """The strings of a ``Literal`` or of a union of them."""
    if get_origin(tp) is Union:
        return set().union(*(values(t) for t in get_args(tp)))
    return {str(v) for v in get_args(tp)}


def play(name: str, seed: int) -> tuple[set[str], set[str], set[str]]:
    """A random game: (phases seen, outcome reasons, rejection codes of plays made out of turn)."""
    game = GAMES[name]
    rnd = random.Random(seed)
    chance = SeededChance(seed)
    state = game.new_game(game.default_settings(), game.min_players, chance)
    phases, reasons, codes = set(), set(), set()
    for _ in range(400):
        phases.add(state.phase)
        outcome = game.outcome(state)
        if outcome is not None:
            reasons.add(outcome.reason)
            break
        moves = [(SYSTEM, t.action) for t in game.timers(state)]
        moves += [(seat, a) for seat in range(game.min_players) for a in game.legal_actions(state, seat)]
        for seat in range(game.min_players):  # everyone tries everyone's moves: most are refused
            for _, action in moves:
                result = game.apply(state, seat, game.complete(state, seat, action, chance.copy()))
                if not isinstance(result, Accepted):
                    codes.add(result.code)
        player, action = rnd.choice(moves)
        result = game.apply(state, player, game.complete(state, player, action, chance))
        assert isinstance(result, Accepted), result
        state = result.state
    return phases, reasons, codes


@pytest.mark.parametrize("name", GAME_NAMES)
def test_what_an_engine_produces_is_in_its_types(name: str) -> None:
    module = MODULES[name]
    phases, reasons, codes = set(), set(), set()
    for seed in range(6):
        p, r, c = play(name, seed)
        phases |= p
        reasons |= r
        codes |= c
    assert reasons, "no random game ended"
    assert phases <= values(module.Phase) and "over" in phases
    assert reasons <= values(module.Reason)
    assert codes and codes <= values(module.RejectCode)


@pytest.mark.parametrize("name", GAME_NAMES)
def test_every_label_names_a_reason_or_code_of_the_game(name: str) -> None:
    module, game = MODULES[name], GAMES[name]
    assert set(game.reason_labels) == values(module.Reason)  # every way a game ends has words
    assert set(game.code_labels) <= values(module.Code)
    assert set(COMMON_CODE_LABELS) <= values(CommonCode) and set(MATCH_REASON_LABELS) == values(MatchReason)
    for reason in values(module.Reason) | values(MatchReason):
        assert game.reason_label(reason) == game.all_reason_labels[reason]
    assert game.code_label("no_such_code_anywhere") is None
    assert game.code_label("not_a_player") == COMMON_CODE_LABELS["not_a_player"]
