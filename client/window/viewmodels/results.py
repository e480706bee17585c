"""The results screen's lines as data (pure): one line per game of the match.

How this works
--------------
The relay's ``match_state["results"]`` has, for each game played, its ``winners``, ``reason`` and
``scores``. ``game_line`` says who won and why and, for a game that counts points (Takeaway's
claimed pips: the registry's ``score_word``), everyone's points -- "you 78 · bot 54" --
so a results screen never hides what decided the game.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence


def points_text(scores: Sequence[Any], names: Sequence[str], seat: int | None) -> str:
    """``"you 78 · bot 54"``, or "" when the game keeps no points (all zero or none)."""
    nums = [s for s in scores if isinstance(s, (int, float)) and not isinstance(s, bool)]
    if len(nums) != len(scores) or not any(nums):
        return ""
    who = [("you" if i == seat else (names[i] if i < len(names) else f"seat {i + 1}")) for i in range(len(nums))]
    return " · ".join(f"{w} {s:g}" for w, s in zip(who, nums))


def game_line(index: int, result: Mapping[str, Any], names: Sequence[str], seat: int | None,
              reasons: Mapping[str, str], score_word: str = "points") -> str:
    """``game 1:  you won  (highest score)   —   points: you 78 · bot 54``; ``score_word`` names
    what the scores count ("" leaves them out: a game whose scores mean nothing on their own)."""
    ws = [w for w in (result.get("winners") or []) if isinstance(w, int)]
    if len(ws) > 1:
        who = "shared: " + " & ".join(names[w] for w in ws if w < len(names))
    elif len(ws) != 1:
        who = "tie"
    else:
        who = "you won" if ws[0] == seat else f"{names[ws[0]] if ws[0] < len(names) else '?'} won"
    reason = str(result.get("reason", ""))
    line = f"game {index + 1}:  {who}  ({reasons.get(reason, reason)})"
    points = points_text(list(result.get("scores") or []), names, seat) if score_word else ""
    return f"{line}   —   {score_word}: {points}" if points else line

