"""BLINK dealing a known deck, for tests that force a race: a variant ``Game`` the relay is given
through ``RelayConfig(games=...)`` (the generic relay core has no test hook of its own)."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from protocol.rules import GAMES, blink
from protocol.rules.base import Chance, Game


def fixed_deck(order: Sequence[str]) -> Game[blink.State, blink.Action]:
    """BLINK that deals ``order`` (card names, top of player 0's pile first) in every game."""

    def new_game(settings: dict[str, Any], players: int, chance: Chance) -> blink.State:
        s = blink.make_settings(settings)
        if players != 2:
            raise ValueError("BLINK is a game for two players")
        return blink.deal(s, tuple(blink.Card.parse(c, s.deck) for c in order))

    return dataclasses.replace(blink.GAME, new_game=new_game)


def fixed_deck_games(decks: Sequence[Sequence[str]]) -> dict[str, Game[Any, Any]]:
    """The registry's games, with BLINK dealing the (one) given deck order: for ``RelayConfig.games``."""
    if len(decks) != 1:
        raise ValueError("one deck order: every game of a match deals it")
    return {**GAMES, "blink": fixed_deck(decks[0])}
