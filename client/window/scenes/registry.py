"""The window's games: for each game the scene that plays it and the menu's options, in one place.

How this works
--------------
``WINDOW_GAMES`` maps a game's canonical name (the keys of ``protocol.rules.GAMES``) to a
``WindowGame``: the scene class that draws and plays it, its menu line, the named presets of its
own options (RULES.md) and whether it takes a turn timer. What the game's rules know -- how many
players, which settings are valid, its defaults -- is asked of the game itself
(``protocol.rules.game_for``), never repeated here. Nothing in the window compares a game's name:
the app asks ``scene_for(game)``, the menu walks ``WINDOW_GAMES`` and ``seat_choices(game)`` (``viewmodels/games.py``).
A fifth game needs its rules in ``protocol.rules.GAMES``, a scene, and one entry here.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.rules import canonical, game_for
from client.window.scenes.base import Scene
from client.window.scenes.ryo import RyoScene
from client.window.scenes.sequence import SequenceScene
from client.window.scenes.table import TableScene
from client.window.scenes.takeaway import TakeawayScene
from client.window.viewmodels import MAX_SEATS, seat_choices

__all__ = ["MAX_SEATS", "WINDOW_GAMES", "WindowGame", "scene_for", "score_word", "seat_choices", "title",
           "window_game"]



@dataclass(frozen=True)
class WindowGame:
    scene: type[Scene]
    menu_line: str
    presets: tuple[tuple[str, dict[str, object]], ...] = (("none for this game", {}),)
    turn_timer: bool = False  # the game takes the ``turn_timer_s`` setting (the menu's Turn timer row)
    score_word: str = ""  # what a game result's ``scores`` count, for the results screen ("" = not shown)
    tagline: str = ""  # the menu's line under the game's title


WINDOW_GAMES: dict[str, WindowGame] = {
    "blink": WindowGame(TableScene, "BLINK — speed cards",
                        tagline="the speed-card race: match colour, shape or count — faster than them"),
    "takeaway": WindowGame(TakeawayScene, "Takeaway Dice", (
        ("hex19 · one re-roll every turn", {}),
        ("hex19 · one re-roll per game", {"reroll_once_per_game": True}),
        ("hex37 (37 Blinks)", {"layout": "hex37"}),
        ("hex37 · one re-roll per game", {"layout": "hex37", "reroll_once_per_game": True}),
        ("ring (12 Blinks)", {"layout": "ring"}),
        ("triangle (15 Blinks)", {"layout": "triangle"}),
        ("parallelogram (16 Blinks)", {"layout": "parallelogram"}),
        ("random cluster (19 Blinks)", {"layout": "random"}),
    ), turn_timer=True, score_word="points",
        tagline="claim one free Blink a turn, with its face — a face you already hold scores 10"),
    "sequence": WindowGame(SequenceScene, "Sequence Dice", (
        ("5 in a row", {"sequence_length": 5}),
        ("6 in a row (two players)", {"sequence_length": 6}),
    ), turn_timer=True, score_word="chips on the board",
        tagline="roll two dice, place a chip on a space of that number — a line of chips wins"),
    "ryo": WindowGame(RyoScene, "Roll Your Own", (
        ("standard 6/6/3 (rolls/rounds/games)", {"rolls_per_round": 6, "rounds_per_game": 6, "games_per_match": 3}),
        ("short 3/2/1", {"rolls_per_round": 3, "rounds_per_game": 2, "games_per_match": 1}),
        ("medium 4/4/2", {"rolls_per_round": 4, "rounds_per_game": 4, "games_per_match": 2}),
    ), turn_timer=True, score_word="games won",  # the whole match is one game for the relay
        tagline="build your own die in secret, then roll it against theirs"),
}


def window_game(name: str) -> WindowGame:
    """The window's entry for ``name`` (an alias is fine); raises ValueError for a game the window
    does not play."""
    entry = WINDOW_GAMES.get(canonical(name))
    if entry is None:
        raise ValueError(f"the window does not play {name!r}; it plays {', '.join(WINDOW_GAMES)}")
    return entry


def score_word(name: str) -> str:
    """What ``name``'s result scores count on the results screen ("" for none, or a game the window
    does not know)."""
    try:
        return window_game(name).score_word
    except ValueError:
        return ""


def scene_for(name: str) -> type[Scene]:
    return window_game(name).scene


def title(name: str) -> str:
    """How the game is called on screen: the game's own title, else the window's menu line."""
    return getattr(game_for(name), "title", None) or window_game(name).menu_line
