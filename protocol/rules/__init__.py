"""The rule engines, found by game name in one static registry (see base.py for the ``Game`` each
engine module ends with)."""

from __future__ import annotations

from typing import Any, Mapping

from protocol.events import EventTypes
from protocol.match import MATCH_EVENTS
from protocol.rules import blink, roll_your_own, sequence, takeaway
from protocol.rules.base import Game

#: Every game by its canonical name (as shown to users). Consumers ask the registry; none compares
#: a game's name. The one place where games of different state and action types sit side by side,
#: so their types are erased here (``Game[Any, Any]``): a caller holds one game's state and actions
#: only as that game gave them, and hands them back to the same game.
AnyGame = Game[Any, Any]
GAMES: dict[str, AnyGame] = {
    "blink": blink.GAME,
    "takeaway": takeaway.GAME,
    "sequence": sequence.GAME,
    "ryo": roll_your_own.GAME,
}
ALIASES = {"roll_your_own": "ryo"}

#: Canonical names of the built-in games, as shown to users (``GAMES`` also holds registered ones).
GAME_NAMES = tuple(GAMES)


def canonical(name: str) -> str:
    return ALIASES.get(name, name)


def game_for(name: str, games: Mapping[str, AnyGame] | None = None) -> AnyGame:
    """The game called ``name`` (or an alias) in ``games`` (default: the registry); raises ValueError
    for an unknown game."""
    games = GAMES if games is None else games
    game = games.get(canonical(name)) if isinstance(name, str) else None
    if game is None:
        raise ValueError(f"unknown game {name!r}; choose one of {', '.join(games)}")
    return game


def events_of(name: str | None, games: Mapping[str, AnyGame] | None = None) -> EventTypes:
    """Every event a match of the game called ``name`` publishes, by wire name: the match's own and
    the game's (``Game.all_events``); the match's own only for no game, or one this side does not
    know -- its events then read as ``UnknownEvent``."""
    game = (GAMES if games is None else games).get(canonical(name)) if isinstance(name, str) else None
    return MATCH_EVENTS if game is None else game.all_events


def register(game: AnyGame) -> AnyGame | None:
    """Add (or replace) a game in the registry, for plug-ins and tests; returns the game it
    replaced, if any, so a test can put it back (or ``unregister`` a new one)."""
    old = GAMES.get(game.name)
    GAMES[game.name] = game
    return old


def unregister(name: str) -> None:
    """Remove a game added with ``register`` (the built-in games are not removed)."""
    if name not in GAME_NAMES:
        GAMES.pop(name, None)
