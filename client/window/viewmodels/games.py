"""Which seat counts the window offers for a game (pure: the command line checks ``--players``
with it before anything opens a window).

How this works
--------------
The game's own rules say how many players it takes (``min_players``/``max_players`` of
``protocol.rules.game_for``); the window lays out at most ``MAX_SEATS`` (the player list, the dice
rows), so it offers the game's range up to that. No game is named here.
"""

from __future__ import annotations

from protocol.rules import game_for

#: the most seats the window lays out: bots fill all but yours
MAX_SEATS = 4


def seat_choices(name: str) -> tuple[int, ...]:
    """The seat counts the window offers for ``name``: the game's own range, up to ``MAX_SEATS``."""
    game = game_for(name)
    low = int(getattr(game, "min_players", 2))
    high = min(int(getattr(game, "max_players", low)), MAX_SEATS)
    return tuple(range(low, max(low, high) + 1))
