"""The four rule engines, found by game name in one static registry (see base.py for the surface
they share)."""

from __future__ import annotations

from typing import Any

from protocol.rules import blink, roll_your_own, sequence, takeaway

#: Every game by its canonical name (as shown to users). Consumers ask the registry; none compares
#: a game's name.
GAMES: dict[str, Any] = {
    "blink": blink.RULES,
    "takeaway": takeaway.RULES,
    "sequence": sequence.RULES,
    "ryo": roll_your_own.RULES,
}
ALIASES = {"roll_your_own": "ryo"}

#: Canonical names, as shown to users.
GAME_NAMES = tuple(GAMES)


def canonical(name: str) -> str:
    return ALIASES.get(name, name)


def game_for(name: str) -> Any:
    """The game called ``name`` (or an alias); raises ValueError for an unknown game."""
    game = GAMES.get(canonical(name))
    if game is None:
        raise ValueError(f"unknown game {name!r}; choose one of {', '.join(GAMES)}")
    return game


rules_for = game_for  # the older name
