"""The journal's snapshot blob: the relay core, serialised so that a restart reads it back fast.

How this works
--------------
A snapshot stands for every journal entry up to its position (``relay/journal.py``); recovery
reads the newest one back and replays the entries after it. Reading it back is part of every
restart, so the format is chosen for ``loads`` speed, which is set by the number of objects in
it, not its bytes:

- A blob is ``MAGIC`` + a 2-byte little-endian format version + a pickle of the core. ``load``
  refuses a version newer than ``VERSION`` with a one-line ``JournalError`` (upgrade blink, or
  start on another data directory) and reads the first format, a bare pickle of the core (it
  starts with pickle's own ``\\x80`` protocol byte), as before.
- Value interning: a game's frozen dataclass (defined under ``protocol.rules``) whose fields are
  all plain scalars (a BLINK ``Card``) is an immutable value, and equal ones are interchangeable. The pickler writes each distinct value
  once and every equal one as a reference to it (pickle's memo), so 1,000 live BLINK matches
  carry 60 cards, not 60,000 (measured: the cards were two thirds of the objects in such a
  snapshot). After a restart equal cards are one object: nothing compares cards by identity.
  Match states, which the stale check does compare by identity, are never merged.

Everything else -- including each match's state history (``Match.history``: up to
``STATE_HISTORY`` past states, which the core needs after a restart exactly as before it, to tell a
lost race from a mistake and to key fair-order races by the state a player saw) -- is pickled as
the core holds it; consecutive states share most of their parts, which the memo keeps shared.
"""

from __future__ import annotations

import dataclasses
import io
import operator
import pickle
import struct
from typing import Any, Callable

from relay.core import RelayCore
from relay.journal import JournalError

MAGIC = b"blink-core\x00"
VERSION = 2  # 1: a bare pickle of the core (no header)
_HEAD = struct.Struct("<H")
#: Field types of an internable value (not float: 0.0 and -0.0 are equal but not the same value).
_SCALARS = frozenset({int, str, bool, type(None), bytes})
_VALUE_MODULES = "protocol.rules."  # the games' value types (cards, dice): nothing else is interned


def _value_fields(cls: type) -> Callable[[Any], tuple[Any, ...]] | None:
    """A getter of the fields of a game's frozen dataclass type (a value type), or None for any other type."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or not cls.__module__.startswith(_VALUE_MODULES):
        return None
    names = [f.name for f in dataclasses.fields(cls)]
    if not names:
        return None
    get = operator.attrgetter(*names)
    return get if len(names) > 1 else (lambda obj: (get(obj),))


class _Pickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, keep: set[int]) -> None:
        super().__init__(file, pickle.HIGHEST_PROTOCOL)
        self._types: dict[type, Callable[[Any], tuple[Any, ...]] | None] = {}
        self._values: dict[tuple[Any, ...], Any] = {}
        self._keep = keep  # ids of objects never merged with an equal one

    def reducer_override(self, obj: Any) -> Any:
        cls = type(obj)
        try:
            fields = self._types[cls]
        except KeyError:
            fields = self._types[cls] = _value_fields(cls)
        if fields is None or id(obj) in self._keep:
            return NotImplemented
        values = fields(obj)
        types = tuple(map(type, values))
        if not _SCALARS.issuperset(types):
            return NotImplemented
        key = (cls, values, types)  # the types too: True == 1, but they are not the same value
        first = self._values.setdefault(key, obj)
        if first is obj:
            return NotImplemented  # pickled as usual, and memoised
        return _same, (first,)  # pickled as a reference to the first (memo hit)


def _same(value: Any) -> Any:
    return value


def dump(core: RelayCore) -> bytes:
    """The snapshot blob of ``core`` (the current format)."""
    buf = io.BytesIO()
    buf.write(MAGIC)
    buf.write(_HEAD.pack(VERSION))
    # Match states are compared by identity (is the state a play was made against still the
    # current one?): a game whose state is all scalars must not have two equal states merged.
    keep = {id(s) for x in core.matches.values() for s in (x.state, *(st for _, st in x.history))}
    _Pickler(buf, keep).dump(core)
    return buf.getvalue()


def load(blob: bytes, where: str = "the snapshot") -> RelayCore:
    """The core a snapshot blob holds; a ``JournalError`` (one line) if this version cannot read it."""
    if blob.startswith(MAGIC):
        start = len(MAGIC) + _HEAD.size
        if len(blob) < start:
            raise JournalError(f"{where} is cut short: move the data directory aside to start afresh")
        (version,) = _HEAD.unpack_from(blob, len(MAGIC))
        if version > VERSION:
            raise JournalError(f"{where} was written by a newer version of blink (snapshot format {version}, "
                               f"this version reads up to {VERSION}): upgrade blink, or use another data directory")
        payload: bytes | memoryview = memoryview(blob)[start:]
    elif blob[:1] == b"\x80":
        payload = blob  # format 1: a bare pickle
    else:
        raise JournalError(f"{where} is not a relay snapshot: move the data directory aside to start afresh")
    try:
        core = pickle.loads(payload)
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        raise JournalError(f"{where} cannot be read by this version ({type(exc).__name__}: {exc}): "
                           f"move the data directory aside to start afresh") from exc
    if not isinstance(core, RelayCore):
        raise JournalError(f"{where} is not a relay core")
    return core


__all__ = ["MAGIC", "VERSION", "dump", "load"]
