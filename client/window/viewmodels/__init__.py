"""What the window shows, computed from the client model and the time (pure: no pyglet, no clock).

How this works
--------------
Each scene of the window is split in two:

- a *view-model* here: it reads the client model (``client/model.py``) through ``ClientView``
  (``clientview.py``: what the window reads, read-only; a game's state narrowed to that game's
  class) and the time it is given (``now_ns``), keeps the little state a screen needs between
  frames (which hand card is selected, a bounce in flight, when the countdown ends, the last
  message), and answers "what is on the screen now" as plain data (frozen dataclasses, strings,
  numbers);
- a *renderer* in ``client/window/scenes/``: pyglet batches built once, brought in line with what
  the view-model says when it changed, and input handlers that ask the view-model what a key or a
  click means before sending the action.

So everything the player reads can be tested by feeding a model real relay messages, without a
window (tests/test_viewmodels.py); importing this package never imports pyglet (a test checks).

``replay.py`` turns a recorded event log into the spectator models a replay shows (``blink
replay``, the menu's Replays): the game scenes draw them as they would a live match.

``feed.EventFeed`` is how every view-model reads the model's event history: only the events of the
current game and newer, each once -- a new scene must not act on an earlier match's ``match_over``.

The scenes and the window take what they draw from this face (the viewmodels, the shapes they
hand over, and the turn-based screens' palette: ``WHITE``, ``DIM``, ``AMBER``, ...), which loads
each module when a name is first asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from client.window.viewmodels.clientview import ClientView as ClientView
    from client.window.viewmodels.feed import EventFeed as EventFeed
    from client.window.viewmodels.games import MAX_SEATS as MAX_SEATS, seat_choices as seat_choices
    from client.window.viewmodels.lan import LanGames as LanGames, LanRow as LanRow
    from client.window.viewmodels.replay import (Replay as Replay, ReplayError as ReplayError,
                                                 ReplaySession as ReplaySession, load_replay as load_replay)
    from client.window.viewmodels.ryo import RyoViewModel as RyoViewModel, rolls_of as rolls_of
    from client.window.viewmodels.sequence import (CHIP_LETTER as CHIP_LETTER, CHIP_RGB as CHIP_RGB,
                                                   SequenceViewModel as SequenceViewModel)
    from client.window.viewmodels.table import (Band as Band, BandPlace as BandPlace, CardShow as CardShow,
                                                CardStyle as CardStyle, NS as NS, RingKind as RingKind,
                                                Slot as Slot, Step as Step, TableBoard as TableBoard,
                                                TableViewModel as TableViewModel)
    from client.window.viewmodels.takeaway import TakeawayViewModel as TakeawayViewModel
    from client.window.viewmodels.turnbased import (AMBER as AMBER, BannerKind as BannerKind, DIM as DIM,
                                                    GREEN as GREEN, PENDING_LINE as PENDING_LINE, RED as RED,
                                                    RGBA as RGBA, SOFT as SOFT, TurnState as TurnState,
                                                    TurnViewModel as TurnViewModel, WHITE as WHITE,
                                                    YELLOW as YELLOW, game_of as game_of)

#: Each name of the face and the module of this package that defines it.
_WHERE: dict[str, str] = {
    "AMBER": "turnbased", "Band": "table", "BandPlace": "table", "BannerKind": "turnbased",
    "CHIP_LETTER": "sequence", "CHIP_RGB": "sequence", "CardShow": "table", "CardStyle": "table",
    "ClientView": "clientview", "DIM": "turnbased", "EventFeed": "feed", "GREEN": "turnbased",
    "LanGames": "lan", "LanRow": "lan", "MAX_SEATS": "games", "NS": "table", "PENDING_LINE": "turnbased",
    "RED": "turnbased", "RGBA": "turnbased", "Replay": "replay", "ReplayError": "replay",
    "ReplaySession": "replay", "RingKind": "table", "RyoViewModel": "ryo", "SOFT": "turnbased",
    "SequenceViewModel": "sequence", "Slot": "table", "Step": "table", "TableBoard": "table",
    "TableViewModel": "table", "TakeawayViewModel": "takeaway", "TurnState": "turnbased",
    "TurnViewModel": "turnbased", "WHITE": "turnbased", "YELLOW": "turnbased", "game_of": "turnbased",
    "load_replay": "replay", "rolls_of": "ryo", "seat_choices": "games",
}

__all__ = [
    "AMBER", "Band", "BandPlace", "BannerKind", "CHIP_LETTER", "CHIP_RGB", "CardShow", "CardStyle",
    "ClientView", "DIM", "EventFeed", "GREEN", "LanGames", "LanRow", "MAX_SEATS", "NS", "PENDING_LINE",
    "RED", "RGBA", "Replay", "ReplayError", "ReplaySession", "RingKind", "RyoViewModel", "SOFT",
    "SequenceViewModel", "Slot", "Step", "TableBoard", "TableViewModel", "TakeawayViewModel", "TurnState",
    "TurnViewModel", "WHITE", "YELLOW", "game_of", "load_replay", "rolls_of", "seat_choices",
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
