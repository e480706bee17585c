"""The public form of an engine event, as the relay publishes and logs it (pure: no I/O).

How this works
--------------
The engines speak in seats (ints), tuples and dataclasses; the wire and the event log carry JSON.
``plain`` turns an engine value into what JSON carries (dict keys as strings, tuples as lists,
dataclasses as dicts). ``with_names`` is the public form of an event: ``player``/``winner``/
``winners`` become the players' names, the seats kept beside them (``seat``, ``winner_seat``,
``winner_seats``) so a reader needs no seat table.

The relay (``relay/core.py``) writes events in this form and ``protocol/verify.py`` rebuilds the
expected events in the same form to compare them with a log, so both use this one module: a change
here changes the log format and what the checker expects together.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence, overload

_SCALARS = frozenset({str, int, float, bool, type(None)})


@overload
def plain(value: Mapping[str, object]) -> dict[str, object]: ...
@overload
def plain(value: object) -> object: ...


def plain(value: object) -> object:
    """An engine value as JSON would carry it (a map stays a map: its values are JSON values)."""
    if isinstance(value, dict):  # events are mostly flat maps of scalars: no call per value for those
        return {k if type(k) is str else str(k): v if type(v) in _SCALARS else plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain(dataclasses.asdict(value))
    return value


def with_names(data: Mapping[str, object], names: Sequence[str], drop: str | None = None) -> dict[str, object]:
    """Public events name players: ``player``/``winner`` become names, the seat stays beside them.
    Returns a new map without the key ``drop`` (e.g. an event's ``type``); ``data`` is left as it is."""
    count = len(names)
    # ``plain(data)``, inlined for the flat maps events are (this runs for every event published);
    # the dropped key is never put in (removing it later would leave the map sized for one more).
    out: dict[str, object] = {k if type(k) is str else str(k): v if type(v) in _SCALARS else plain(v)
                              for k, v in data.items() if k != drop}
    seat = out.get("player")
    if type(seat) is int:  # (a bool is not a seat)
        out["seat"] = seat
        out["player"] = names[seat] if 0 <= seat < count else seat
    if "winner" in out:
        seat = out["winner"]
        out["winner_seat"] = seat
        out["winner"] = names[seat] if type(seat) is int and 0 <= seat < count else seat
    if "winners" in out and isinstance(out["winners"], list):
        seats = out["winners"]
        out["winner_seats"] = list(seats)
        out["winners"] = [names[w] if type(w) is int and 0 <= w < count else w for w in seats]
    return out
