"""The rules that end a match (protocol/match.py), which the judge and the log checker share."""

from __future__ import annotations

from protocol.events import event_data
from protocol.match import FORFEIT, MatchEnd, MatchOver, abandoned, after_game, game_cap, left, wins_needed
from protocol.records import plain


def test_a_majority_of_the_games_wins_the_match() -> None:
    assert [wins_needed(n) for n in (1, 2, 3, 5)] == [1, 2, 2, 3]
    assert after_game([1, 0], 1, 3, "out_of_cards") is None  # best of 3: one win is not enough
    assert after_game([2, 1], 3, 3, "out_of_cards") == MatchEnd(0, (0,), "won")
    # Several leaders at once share the win: no single winner.
    assert after_game([1, 1, 0], 1, 1, "shared_win") == MatchEnd(None, (0, 1), "won")


def test_a_game_the_others_all_left_ends_the_match_as_a_forfeit() -> None:
    assert after_game([0, 1, 0], 1, 1, FORFEIT) == MatchEnd(1, (1,), "forfeit")


def test_ties_end_at_the_cap_on_games() -> None:
    assert game_cap(3) == 9
    assert after_game([1, 1], 8, 3, "tie") is None
    assert after_game([1, 1], 9, 3, "tie") == MatchEnd(None, (0, 1), "game_limit")
    assert after_game([2, 1, 2], 15, 5, "tie") == MatchEnd(None, (0, 2), "game_limit")


def test_a_leave_and_an_abandoned_seat_end_the_match_for_the_others() -> None:
    assert left(2, 0) == MatchEnd(1, (1,), "forfeit")
    assert left(3, 0) == MatchEnd(None, (), "forfeit")  # two others: nobody wins alone
    assert left(3, 0, out_of_play=(2,)) == MatchEnd(1, (1,), "forfeit")
    assert abandoned(3, late=(0,)) == MatchEnd(None, (1, 2), "abandoned")
    over = abandoned(3, late=(0,), out_of_play=(1,)).event([0, 0, 0])
    assert over == MatchOver(winner=2, winners=(2,), reason="abandoned", wins=(0, 0, 0))
    assert plain(event_data(over)) == {"winner": 2, "winners": [2], "reason": "abandoned", "wins": [0, 0, 0]}
