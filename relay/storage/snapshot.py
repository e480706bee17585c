"""The journal's snapshot blob: the relay core as a record of its own, plain data with a version.

How this works
--------------
A snapshot stands for every journal entry up to its position (``relay/storage/journal.py``); recovery
reads the newest one back and replays the entries after it. ``dump(core)`` writes, and
``load(blob, where)`` reads, ``MAGIC`` + a 2-byte little-endian format version + msgpack of one map:
the core's record (``RelayCore.to_record``), in which each part of the judge (``relay/judge/``: the
lobby, the matches, the answers, the past events, the scheduler, the deadlines, the gate) writes
its own state under names of its own (``matches``, ``answers``, ``past``, ``fair``, ...) as maps and
lists, and reads it back (``load_record``/``from_record``). This module never reaches inside a
part: it owns the blob, its version and the codec of values below, which it hands to the parts.
Nothing on disk names a Python attribute, so renaming an attribute of any part changes no byte.
Any blob this version cannot read raises ``SnapshotError`` (a ``JournalError``) with one line --
among them formats 1 and 2, pickles of the core, and a newer format.

The games' states (frozen dataclasses, tuples, frozensets, enums) go through a type-driven codec:
``[tag, ...]`` lists for containers and ``[DATACLASS, type id, field values...]`` for a state
class, its qualified name and field names listed once in the blob's ``types`` table. The classes a
blob may name form a closed registry built from code, never from data: every dataclass and enum
defined in a module of a game the core offers (``RelayConfig.games`` or the registry), in the
games' shared ``protocol.rules.base`` and in the protocol's messages. A name outside it is
refused; nothing is imported. Frozen values are written once and referred to after (``[REF, n]``,
numbered as they complete, so the values are read back in the order they were written), and a game
value of scalar fields only (a BLINK ``Card``) once for all its equals: 1,000 live matches carry
60 cards, not 60,000. Consecutive states in a match's history share most of their parts, and a
match's current state *is* the newest state of its history -- the stale check compares by
identity, so the references keep it, and never merge two equal states. The garbage collector is
paused while a record is built or read: it is a tree of fresh lists, none in a cycle.
"""

from __future__ import annotations

import dataclasses
import enum
import gc
import io
import operator
import struct
import sys
from collections import deque
from itertools import islice
from typing import Any, Callable, Iterable, Mapping, TypeVar

import msgpack

from protocol import messages as m
from protocol.rules import GAMES, AnyGame
from protocol.rules.base import Game
from relay.core import RelayCore
from relay.storage.journal import JournalError

MAGIC = b"blink-core\x00"
#: The format written and read. Formats 1 (a bare pickle of the core, no header) and 2 (``MAGIC``,
#: version, a pickle of the core) are refused in one line, as is a newer one.
VERSION = 3
_HEAD = struct.Struct("<H")
#: What a refusal tells the operator to do.
AFRESH = "move the data directory aside to start afresh"

# Codec tags: every non-scalar value is a list whose first item is one of these.
LIST, TUPLE, DICT, FROZENSET, DEQUE, DATACLASS, ENUM, REF, BIGINT = range(9)
_PLAIN = frozenset({type(None), bool, float, str, bytes})  # written as they are (an int: if it fits)
#: Field types of an internable game value (not float: 0.0 and -0.0 are equal but not the same value).
_INTERNED = frozenset({int, str, bool, type(None), bytes})
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1


T = TypeVar("T")


class SnapshotError(JournalError):
    """A snapshot blob this version cannot read (the message is one line saying what to do)."""


# ---------------------------------------------------------------------- the closed registry of types


def _registry(games: Mapping[str, AnyGame]) -> dict[str, type]:
    """Every class a blob may name, by qualified name: the dataclasses and enums defined in the
    modules of the games offered and of the protocol's messages (from code, never from data)."""
    modules = {m.__name__, Game.__module__}
    for game in games.values():
        for fn in (game.new_game, game.apply, game.to_wire, game.action_from_wire):
            name = getattr(fn, "__module__", None)
            if name:
                modules.add(name)
    found: dict[str, type] = {}
    for name in modules:
        module = sys.modules.get(name)
        if module is None:
            continue
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__ == name and (
                    dataclasses.is_dataclass(value) or issubclass(value, enum.Enum)):
                found[f"{name}.{value.__qualname__}"] = value
    return found


class _Encoder:
    """Values to plain lists (see the header); one per blob, ``types`` its table of classes."""

    def __init__(self, keep: set[int]) -> None:
        self.types: list[list[Any]] = []
        self._keep = keep  # ids of values never merged with an equal one (the match states)
        self._values: dict[tuple[object, ...], int] = {}  # an internable value -> its memo number
        #: Per class: its number in ``types``, a getter of its fields' values (None: an enum), frozen?
        self._classes: dict[type, tuple[int, Callable[[Any], tuple[Any, ...]] | None, bool]] = {}
        self._memo: dict[int, int] = {}
        self._alive: list[object] = []  # what the memo's ids stand for stays alive while it is used

    def _class(self, cls: type) -> tuple[int, Callable[[Any], tuple[Any, ...]] | None, bool]:
        if issubclass(cls, enum.Enum):
            names: tuple[str, ...] = ()
            info: tuple[int, Callable[[Any], tuple[Any, ...]] | None, bool] = (len(self.types), None, True)
        elif dataclasses.is_dataclass(cls):
            names = tuple(f.name for f in dataclasses.fields(cls))
            get = operator.attrgetter(*names) if names else (lambda obj: ())
            getter = get if len(names) != 1 else (lambda obj: (get(obj),))
            info = (len(self.types), getter, bool(cls.__dataclass_params__.frozen))  # type: ignore[attr-defined]
        else:
            raise SnapshotError(f"a snapshot cannot hold a {cls.__module__}.{cls.__qualname__}")
        self.types.append([f"{cls.__module__}.{cls.__qualname__}", list(names)])
        self._classes[cls] = info
        return info

    def enc(self, v: Any) -> Any:
        t = type(v)
        if t in _PLAIN:
            return v
        if t is int:
            return v if _INT_MIN <= v <= _INT_MAX else [BIGINT, str(v)]
        if t is list:
            return [LIST, *self._all(v)]
        if t is dict:
            out: list[Any] = [DICT]
            enc = self.enc
            for k, x in v.items():
                out.append(enc(k))
                out.append(enc(x))
            return out
        if t is deque:
            return [DEQUE, v.maxlen, *self._all(v)]
        ref = self._memo.get(id(v))
        if ref is not None:
            return [REF, ref]
        if t is tuple:
            out = [TUPLE, *self._all(v)]
        elif t is frozenset:
            out = [FROZENSET, *self._all(v)]
        else:
            info = self._classes.get(t)
            tid, get, frozen = info if info is not None else self._class(t)
            if get is None:
                out = [ENUM, tid, self.enc(v.value)]
            else:
                values = get(v)
                if not frozen:
                    return [DATACLASS, tid, *self._all(values)]  # a mutable one is never shared
                kinds = tuple(map(type, values))
                if values and _INTERNED.issuperset(kinds) and id(v) not in self._keep:
                    key = (t, values, kinds)  # the types too: True == 1, but they are not the same value
                    first = self._values.get(key)
                    if first is not None:
                        return [REF, first]
                    self._values[key] = len(self._memo)
                out = [DATACLASS, tid, *self._all(values)]
        self._memo[id(v)] = len(self._memo)
        self._alive.append(v)
        return out

    def _all(self, values: Iterable[Any]) -> list[Any]:
        """``enc`` of each value; a plain one (most are) without the call."""
        enc, plain = self.enc, _PLAIN
        return [x if type(x) in plain else enc(x) for x in values]


class _Decoder:
    """Plain lists back to values; classes only from the closed registry."""

    def __init__(self, types: list[Any], registry: Mapping[str, type]) -> None:
        #: Per number in the blob's table: the class, the blob's field names, whether they are the
        #: class's own (set as they were, no ``__init__`` re-run), whether it is frozen (shared).
        self._types: list[tuple[type, tuple[str, ...], bool, bool]] = []
        for entry in types:
            qualname, names = entry
            cls = registry.get(qualname)
            if cls is None:
                raise SnapshotError(f"names a type this version does not know ({qualname})")
            names = tuple(names)
            is_dc = dataclasses.is_dataclass(cls)
            current = tuple(f.name for f in dataclasses.fields(cls)) if is_dc else ()
            frozen = bool(cls.__dataclass_params__.frozen) if is_dc else True  # type: ignore[attr-defined]
            self._types.append((cls, names, names == current, frozen))
        self._memo: list[object] = []

    def dec(self, v: Any) -> Any:
        if type(v) is not list:
            return v
        tag = v[0]
        obj: object
        if tag == DATACLASS:
            cls, names, same, frozen = self._types[v[1]]
            values = self._all(v, 2)
            if same:
                obj = object.__new__(cls)
                obj.__dict__.update(zip(names, values))
            else:  # a field added since has its default; one removed or renamed is refused
                try:
                    obj = cls(**dict(zip(names, values)))
                except TypeError as exc:
                    raise SnapshotError(f"holds a {cls.__qualname__} this version cannot build ({exc})") from exc
            if not frozen:
                return obj
        elif tag == TUPLE:
            obj = tuple(self._all(v, 1))
        elif tag == REF:
            return self._memo[v[1]]
        elif tag == LIST:
            return self._all(v, 1)
        elif tag == DICT:
            it = iter(self._all(v, 1))
            return dict(zip(it, it))
        elif tag == DEQUE:
            return deque(self._all(v, 2), maxlen=v[1])
        elif tag == BIGINT:
            return int(v[1])
        elif tag == FROZENSET:
            obj = frozenset(self._all(v, 1))
        elif tag == ENUM:
            obj = self._types[v[1]][0](self.dec(v[2]))
        else:
            raise SnapshotError(f"holds an unknown value tag {tag!r}")
        self._memo.append(obj)
        return obj

    def _all(self, v: list[Any], start: int) -> list[Any]:
        """``dec`` of ``v[start:]``, in order; a plain value (most are) without the call."""
        dec = self.dec
        return [x if type(x) is not list else dec(x) for x in islice(v, start, None)]


# ---------------------------------------------------------------------- the core as a record


def record_of(core: RelayCore) -> tuple[dict[str, object], list[list[Any]]]:
    """The core as plain data (its parts' records, ``RelayCore.to_record``), and its table of value
    types. The codec's references count the values in the order they are encoded: ``core_of``
    decodes them in the same order."""
    # Match states are compared by identity (is the state a play was made against still the
    # current one?): a game whose state is all scalars must not have two equal states merged.
    enc = _Encoder({id(s) for x in core.matches.values() for s in (x.state, *(st for _, st in x.history))})
    return core.to_record(enc.enc), enc.types


def core_of(rec: dict[str, Any], types: list[Any], games: Mapping[str, AnyGame] | None = None) -> RelayCore:
    """The core a record holds (``games``: those the relay offers; default the registry)."""
    dec = _Decoder(types, _registry(GAMES if games is None else games))
    try:
        return RelayCore.from_record(rec, dec.dec, games)
    except ValueError as exc:  # a record the judge cannot take: its words
        raise SnapshotError(str(exc)) from exc


# ---------------------------------------------------------------------- blobs


def _no_gc(fn: Callable[[], T]) -> T:
    """Run ``fn`` with the cyclic garbage collector paused: a record is a tree of thousands of
    fresh lists and maps, none in a cycle, which the collector would walk again and again
    (measured at 1,000 matches: twice the time of writing or reading the record)."""
    was = gc.isenabled()
    gc.disable()
    try:
        return fn()
    finally:
        if was:
            gc.enable()


def dump(core: RelayCore) -> bytes:
    """The snapshot blob of ``core`` (the current format)."""
    rec, types = _no_gc(lambda: record_of(core))
    buf = io.BytesIO()
    buf.write(MAGIC)
    buf.write(_HEAD.pack(VERSION))
    buf.write(msgpack.packb({"types": types, "core": rec}, use_bin_type=True))
    return buf.getvalue()


def load(blob: bytes | bytearray | memoryview, where: str = "the snapshot",
         games: Mapping[str, AnyGame] | None = None) -> RelayCore:
    """The core a snapshot blob holds; a ``SnapshotError`` (one line) if this version cannot read it."""
    view = memoryview(blob)
    if bytes(view[:1]) == b"\x80":  # a bare pickle of the core: format 1
        raise SnapshotError(f"{where} is in snapshot format 1 (a pickle of the relay's core), which this version "
                            f"does not read (it reads format {VERSION}): {AFRESH}")
    if bytes(view[:len(MAGIC)]) != MAGIC:
        raise SnapshotError(f"{where} is not a relay snapshot: {AFRESH}")
    start = len(MAGIC) + _HEAD.size
    if len(view) < start:
        raise SnapshotError(f"{where} is cut short: {AFRESH}")
    (version,) = _HEAD.unpack_from(view, len(MAGIC))
    if version > VERSION:
        raise SnapshotError(f"{where} was written by a newer version of blink (snapshot format {version}, "
                            f"this version reads up to {VERSION}): upgrade blink, or use another data directory")
    if version < VERSION:
        raise SnapshotError(f"{where} is in snapshot format {version} (a pickle of the relay's core), which this "
                            f"version does not read (it reads format {VERSION}): {AFRESH}")
    try:
        return _no_gc(lambda: _read(view[start:], games))
    except SnapshotError as exc:
        raise SnapshotError(f"{where} (snapshot format {version}) {exc}: {AFRESH}") from exc
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        raise SnapshotError(f"{where} (snapshot format {version}) cannot be read by this version "
                            f"({type(exc).__name__}: {exc}): {AFRESH}") from exc


def _read(payload: memoryview, games: Mapping[str, AnyGame] | None) -> RelayCore:
    whole = msgpack.unpackb(payload, raw=False, strict_map_key=False, use_list=True)
    return core_of(whole["core"], whole["types"], games)


__all__ = ["MAGIC", "VERSION", "SnapshotError", "core_of", "dump", "load", "record_of"]
