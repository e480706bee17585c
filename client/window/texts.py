"""What the window says: rejection reasons, phase lines and key hints (pure strings, no pyglet).

How this works
--------------
The relay answers a rejected play with a reason *code* (``pile_changed``, ``no_match``, ...);
``reason_text`` turns it into the few words a racing player can read at a glance. A game's own
codes are labelled by the game (``Game.code_label``); this table holds only the codes of the relay
and of the client themselves. Codes no one labels are shown as their words, so a new code is never
a blank.
"""

from __future__ import annotations

from protocol.rules import AnyGame
from protocol.rules.base import COMMON_CODE_LABELS

#: The relay's and the client's own codes (a game's are the game's, see above).
REASONS: dict[str, str] = {
    "bad_seq": "out of step — resyncing",
    "no_such_match": "that match is gone",
    "no_match_joined": "not in a match",
    "no_game": "no game running",
}


def label(code: str, game: AnyGame | None = None) -> str | None:
    """The label of ``code``: the game's, else the relay's or the client's; None if no one has one."""
    found = game.code_label(code) if game is not None else None
    return found or REASONS.get(code) or COMMON_CODE_LABELS.get(code)


def reason_text(code: str, game: AnyGame | None = None) -> str:
    return label(code, game) or code.replace("_", " ")


KEY_HINTS = "1 2 3  choose a card     ← →  or  A D  play it on a pile     mouse: click card then pile, or drag     Esc  menu"
PICK_HINTS = "1 2 3  (or click)  place that card on your own pile     Esc  menu"
OVER_HINTS = "R  rematch     M  menu     Q  quit"


def possessive(name: str) -> str:
    """``name``'s, as a pile or a turn is labelled: "ann's", "james'", and "your" for a player
    named "you" (the default name), never "you's"."""
    if name.strip().lower() == "you":
        return "your"
    return f"{name}'" if name.endswith(("s", "S")) else f"{name}'s"


def with_you(name: str, mine: bool) -> str:
    """A seat's name with "(you)" after your own -- unless the name already says it."""
    return f"{name}  (you)" if mine and name.strip().lower() != "you" else name


def replay_hint(hint: str) -> str:
    """A game's key hint shown under a replay's bar: Esc belongs to the bar there (it says what
    Esc does), so the game's own "Esc  menu" is left out."""
    return "     ".join(part for part in hint.split("     ") if part.strip() and part.strip() != "Esc  menu")


def score_line(names: list[str], wins: list[int], seat: int | None) -> str:
    if len(names) < 2 or len(wins) < 2:
        return ""
    me = seat if seat in (0, 1) else 0
    other = 1 - me
    return f"{names[me]}  {wins[me]} – {wins[other]}  {names[other]}"
