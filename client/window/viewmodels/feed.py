"""Reading the model's append-only histories (events, bounces, verdicts) one new item at a time.

How this works
--------------
The model keeps bounded deques; a view-model remembers the last item it looked at (by identity)
and takes what came after it (``newer``). ``EventFeed`` gives each public event with its typed
class (``protocol/events.py``: a viewmodel asks ``isinstance``, never the wire name), and adds one
rule: an event of an older game than the one the model is in now is never taken. The event history
spans the whole match, rematches included, so without this a view-model made for a rematch would find the
previous match's ``match_over`` and declare the new one over. Nor is an event the model filed as
``history`` (a spectator's re-sent past events): the picture already shows their effect.
"""

from __future__ import annotations

from typing import Generic, Sequence, TypeVar

from protocol import messages as m
from protocol.events import TypedEvent
from protocol.rules import events_of
from client.window.viewmodels.clientview import ClientView

T = TypeVar("T")


def newer(items: Sequence[T], last: T | None) -> list[T]:
    """The items of an append-only sequence (a bounded deque) that come after ``last``, oldest
    first; all of them when ``last`` is not there (it aged out, or nothing was seen yet)."""
    out: list[T] = []
    for item in reversed(items):
        if item is last:
            break
        out.append(item)
    out.reverse()
    return out


class Feed(Generic[T]):
    """The new items of one history since the last call."""

    def __init__(self) -> None:
        self._last: T | None = None

    def take(self, items: Sequence[T]) -> list[T]:
        new = newer(items, self._last)
        if items:
            self._last = items[-1]
        return new


class EventFeed(Feed[m.Event]):
    """The new public events of the current game (and later ones), each once, with its typed class."""

    def take_current(self, model: ClientView) -> list[tuple[m.Event, TypedEvent]]:
        game = current_game(model)
        past = model.history  # re-sent past events: the snapshot already shows them
        types = events_of(model.game)
        return [(ev, types.read(ev)) for ev in self.take(model.events)
                if (game is None or ev.game_index >= game) and ev.seq not in past]


def current_game(model: ClientView) -> int | None:
    """The game number the model's confirmed state belongs to (None before the first view)."""
    pred = model.predictor
    if pred is None or pred.confirmed is None:
        return None
    return int(pred.game)
