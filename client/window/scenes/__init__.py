"""The window's screens, one scene per screen: the menu, the LAN games, the replays, each game's table
and the match's results.

How this works
--------------
A scene (``base.Scene``) builds its pyglet drawables once and brings them in line with what its
viewmodel says, frame by frame; its input handlers ask the viewmodel what a key or a click means
and send the action through the ``SceneHost`` (``client/window/host.py``) the app gives it.
``registry.py`` names each game's scene and the menu's words for it (``scene_for``, ``title``,
``score_word``); ``turnbased.TurnBasedScene`` is the renderer the three dice games share, and
``replay.ReplayBar`` is drawn over whatever game scene a replay shows.

Every scene imports pyglet; ``client.window.app`` is the one that opens them. This face loads each
module when a name is first asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from client.window.scenes.base import Scene as Scene
    from client.window.scenes.lan import LanScene as LanScene
    from client.window.scenes.menu import MenuScene as MenuScene
    from client.window.scenes.registry import scene_for as scene_for, score_word as score_word, title as title
    from client.window.scenes.replay import ReplayBar as ReplayBar, ReplaysScene as ReplaysScene
    from client.window.scenes.results import ResultsScene as ResultsScene
    from client.window.scenes.turnbased import TurnBasedScene as TurnBasedScene

#: Each name of the face and the module of this package that defines it.
_WHERE: dict[str, str] = {
    "LanScene": "lan", "MenuScene": "menu", "ReplayBar": "replay", "ReplaysScene": "replay",
    "ResultsScene": "results", "Scene": "base", "TurnBasedScene": "turnbased", "scene_for": "registry",
    "score_word": "registry", "title": "registry",
}

__all__ = [
    "LanScene", "MenuScene", "ReplayBar", "ReplaysScene", "ResultsScene", "Scene", "TurnBasedScene",
    "scene_for", "score_word", "title",
]

if not TYPE_CHECKING:  # the type checker reads the imports above; a run loads each module when first asked
    def __getattr__(name: str) -> object:
        where = _WHERE.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module = importlib.import_module(f"{__name__}.{where}")
        value = module if where == name else getattr(module, name)
        globals()[name] = value
        return value
