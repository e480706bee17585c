"""The spectator page: the relay's matches in any browser, served by ``blink serve --web``.

How this works
--------------
``WebServer`` (``server.py``) is a small HTTP server in the relay's own process: the list of live
and recent matches, a page per match drawn live, and that match's changes as Server-Sent Events.
What it shows comes only from the public stream, read as a spectator reads it: ``feed.py`` is one
MQTT client of the broker with no login (the broker's rules let it read the public topics only),
subscribed to every match's snapshot and to the events of the matches a page is open on, and
asking for each game's leaderboard as any client may;
``book.py`` (pure) keeps the list and advances each watched match's public view with the game's own
rules. The page itself (``static/``: HTML, CSS and JavaScript written for it, no library) draws
the cards as the window does (``client/window/geometry.py``'s shapes and colours) in SVG.

The face loads each module when a name is first asked for: a relay without ``--web`` loads none.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relay.web.book import Book as Book
    from relay.web.server import WebAddress as WebAddress, WebError as WebError, WebServer as WebServer, parse_web as parse_web

#: Each name of the face and the module of this package that defines it.
_WHERE: dict[str, str] = {"Book": "book", "WebAddress": "server", "WebError": "server", "WebServer": "server",
                          "parse_web": "server"}

__all__ = ["Book", "WebAddress", "WebError", "WebServer", "parse_web"]

if not TYPE_CHECKING:  # the type checker reads the imports above; a run loads each module when first asked
    def __getattr__(name: str) -> object:
        where = _WHERE.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module = importlib.import_module(f"{__name__}.{where}")
        value = module if where == name else getattr(module, name)
        globals()[name] = value
        return value
