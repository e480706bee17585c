"""A match's results as text (pure): one line per game of the match, and the match's own line.

How this works
--------------
The relay's ``match_state["results"]`` has, for each game played, its ``winners``, ``reason`` and
``scores``. ``game_line`` says who won and why and, for a game that counts points (Takeaway's
claimed pips: the registry's ``score_word``), everyone's points -- "you 78 · bot 54" --
so a results screen never hides what decided the game. ``match_result_line`` is the match's
result in the third person, shared by the window's results screen and replay and by the list of
recorded matches (``client/replays.py``): it lives below the window, which the player's side never
imports.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from client.matchstate import GameResult, MatchState


def points_text(scores: Sequence[object], names: Sequence[str], seat: int | None) -> str:
    """``"you 78 · bot 54"``, or "" when the game keeps no points (all zero or none)."""
    nums = [s for s in scores if isinstance(s, (int, float)) and not isinstance(s, bool)]
    if len(nums) != len(scores) or not any(nums):
        return ""
    who = [("you" if i == seat else (names[i] if i < len(names) else f"seat {i + 1}")) for i in range(len(nums))]
    return " · ".join(f"{w} {s:g}" for w, s in zip(who, nums))


def game_line(index: int, result: Mapping[str, object] | GameResult, names: Sequence[str], seat: int | None,
              reasons: Mapping[str, str], score_word: str = "points") -> str:
    """``game 1:  you won  (highest score)   —   points: you 78 · bot 54``; ``score_word`` names
    what the scores count ("" leaves them out: a game whose scores mean nothing on their own)."""
    game = result if isinstance(result, GameResult) else GameResult.read(result)
    ws = list(game.winners)
    if len(ws) > 1:
        who = "shared: " + " & ".join(names[w] for w in ws if w < len(names))
    elif len(ws) != 1:
        who = "tie"
    else:
        who = "you won" if ws[0] == seat else f"{names[ws[0]] if ws[0] < len(names) else '?'} won"
    reason = game.reason
    line = f"game {index + 1}:  {who}  ({reasons.get(reason, reason)})"
    points = points_text(game.scores, names, seat) if score_word else ""
    return f"{line}   —   {score_word}: {points}" if points else line


def match_result_line(names: list[str], state: Mapping[str, object] | MatchState) -> str:
    """A match's result in the third person: "A beat B 2–1", "A and B share the match", "in progress";
    a match a player left (``reason`` "forfeit", ``left`` naming who) or was gone from too long
    ("abandoned") says so: "B left: A won by forfeit" -- never "A beat B 0–0"."""
    ms = state if isinstance(state, MatchState) else MatchState.read(state)
    wins = list(ms.wins)
    if ms.status != "over":
        return "unfinished" if ms.status else ""
    winner = ms.winner
    score = "–".join(str(w) for w in sorted(wins, reverse=True)) if wins else ""
    reason = ms.reason
    if reason in ("forfeit", "abandoned"):
        left = ms.left
        why = (f"{left} left" if reason == "forfeit" else f"{left} was gone too long") if left else ""
        won = (f"{names[winner]} won by forfeit" if isinstance(winner, int) and 0 <= winner < len(names)
               else "the match ended by forfeit")
        played = f" ({score} in games)" if any(wins) else ""
        return f"{why}: {won}{played}" if why else f"{won}{played}"
    if winner is None or not 0 <= winner < len(names):
        top = [names[s] for s in range(min(len(names), len(wins))) if wins[s] == max(wins)] if wins else []
        return f"{' and '.join(top)} share the match {score}".strip() if top else "match drawn"
    if len(names) > 2:  # the score names no one: who won is the news, the others are in the row
        return f"{names[winner]} won the match {score}".strip()
    others = [n for s, n in enumerate(names) if s != winner]
    return f"{names[winner]} beat {', '.join(others)} {score}".strip()


def rating_line(before: float, after: float, matches: int) -> str:
    """A player's rating change at a rated match's end, as the results screen says it."""
    return (f"your rating {before:.2f} \u2192 {after:.2f} ({after - before:+.2f}) \u00b7 "
            f"{matches} rated match{'es' if matches != 1 else ''}")
