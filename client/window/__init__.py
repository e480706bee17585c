"""The pyglet window (``blink play``, ``blink replay``): scenes that draw, viewmodels that decide, and a
session that talks to the relay.

How this works
--------------
``app.App`` runs pyglet and asyncio on one event loop and shows one scene at a time
(``client.window.scenes``). A scene draws what its viewmodel (``client.window.viewmodels``, pure)
computes from the client model and the time, and turns input into actions. ``session.Session`` is
the window's networking side -- the local relay, the player's connection on a thread of its own,
the bots -- with no pyglet in it. The rest are the drawing's parts: ``cards``, ``mesh`` and ``hud``
draw with pyglet; ``geometry``, ``draw2d``, ``layout``, ``texts``, ``sounds``, ``framestats`` and
``playparts`` are plain code.

Importing this package does not import pyglet: only ``app``, ``mesh``, ``cards``, ``hud`` and the
scenes do, and this face loads each module when a name is first asked for. The commands
(``client.cli``) take what they open from here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from client.window.app import App as App, AppConfig as AppConfig, AppMode as AppMode
    from client.window.framestats import FrameStats as FrameStats, percentile as percentile
    from client.window.session import (BOT_LEVELS as BOT_LEVELS, Session as Session,
                                       SessionConfig as SessionConfig, parse_level as parse_level)

#: Each name of the face and the module of this package that defines it.
_WHERE: dict[str, str] = {
    "App": "app", "AppConfig": "app", "AppMode": "app", "BOT_LEVELS": "session", "FrameStats": "framestats",
    "Session": "session", "SessionConfig": "session", "parse_level": "session", "percentile": "framestats",
}

__all__ = [
    "App", "AppConfig", "AppMode", "BOT_LEVELS", "FrameStats", "Session", "SessionConfig", "parse_level",
    "percentile",
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
