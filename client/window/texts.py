"""What the window says: rejection reasons, phase lines and key hints (pure strings, no pyglet).

How this works
--------------
The relay answers a rejected play with a reason *code* (``pile_changed``, ``no_match``, ...);
``reason_text`` turns it into the few words a racing player can read at a glance. Codes this
table does not know are shown as their words, so a new relay code is never a blank.
"""

from __future__ import annotations

REASONS: dict[str, str] = {
    "pile_changed": "too slow — pile changed",
    "no_match": "doesn't match",
    "not_running": "wait for the start",
    "stalemate": "paused — stalemate",
    "game_over": "the game is over",
    "not_in_hand": "that card is not in your hand",
    "bad_pile": "no such pile",
    "bad_seq": "out of step — resyncing",
    "malformed": "the relay could not read that",
    "not_a_player": "you are not playing in this match",
    "no_such_match": "that match is gone",
    "already_picked": "you already chose a card",
    "not_stalemate": "no stalemate to choose for",
    "no_match_joined": "not in a match",
    "no_game": "no game running",
    "auto_refill": "hands refill by themselves",
    "hand_full": "your hand is full",
    "draw_empty": "your draw pile is empty",
}


def reason_text(code: str) -> str:
    return REASONS.get(code, code.replace("_", " "))


KEY_HINTS = "1 2 3  choose a card     ← →  or  A D  play it on a pile     mouse: click card then pile, or drag     Esc  menu"
PICK_HINTS = "1 2 3  (or click)  place that card on your own pile     Esc  menu"
OVER_HINTS = "R  rematch     M  menu     Q  quit"


def ordinal_game(index: int) -> str:
    return f"game {index + 1}"


def score_line(names: list[str], wins: list[int], seat: int | None) -> str:
    if len(names) < 2 or len(wins) < 2:
        return ""
    me = seat if seat in (0, 1) else 0
    other = 1 - me
    return f"{names[me]}  {wins[me]} – {wins[other]}  {names[other]}"
