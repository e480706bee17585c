"""The journal's snapshot blob: the relay core as a record of its own, plain data with a version.

How this works
--------------
A snapshot stands for every journal entry up to its position (``relay/storage/journal.py``); recovery
reads the newest one back and replays the entries after it. ``dump(core)`` writes, and
``load(blob, where)`` reads, ``MAGIC`` + a 2-byte little-endian format version + msgpack of one map:
the core's parts under names of their own (``matches``, ``answers``, ``past``, ``fair``, ...), each
part as maps and lists. Nothing on disk names a Python attribute: the names are this module's, so
renaming an attribute of any part of the judge (``relay/judge/``) changes no byte. Any blob this
version cannot read raises ``SnapshotError`` (a ``JournalError``) with one line.

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

Older data directories: format 1 (a bare pickle of the core) and format 2 (``MAGIC``, version 2, a
pickle) are read by an unpickler that resolves only the classes such a pickle held (the core and
its parts, the games' types) and turned into the same record, so a relay's first start on them
migrates them; the next snapshot it takes is written in the current format.
"""

from __future__ import annotations

import dataclasses
import enum
import gc
import io
import operator
import pickle
import struct
import sys
from collections import OrderedDict, deque
from itertools import islice
from typing import Any, Callable, Iterable, Mapping, TypeVar, cast

import msgpack

from protocol import messages as m
from protocol.chance import SeededChance
from protocol.codec import pack_plain
from protocol.rules import GAMES, AnyGame
from protocol.rules.base import Game
from protocol.topics import Topics
from relay.core import RelayCore
from relay.fair import FairOrder, Held
from relay.storage.journal import JournalError
from relay.limits import Clients, Deadlines, Quiet, StrictBucket, TokenBucket
from relay.model import STATE_HISTORY, Match, RelayConfig, Seat

MAGIC = b"blink-core\x00"
VERSION = 3  # 1: a bare pickle of the core (no header); 2: MAGIC, version, a pickle of the core
_HEAD = struct.Struct("<H")
#: Settings of ``RelayConfig`` that are written (``games`` holds code, not data: it is the loader's).
_CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(RelayConfig) if f.name != "games")

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


def _chance(c: SeededChance) -> list[int]:
    return [c.seed, c.position(), c.draws]


def _chance_of(v: list[int]) -> SeededChance:
    return SeededChance.at(v[0], v[1], v[2])


def _bucket(b: TokenBucket) -> list[Any]:
    return [b.rate, b.burst, b.tokens, b.at_ns, b.refusing, b.dropped, type(b) is StrictBucket]


def _bucket_of(v: list[Any]) -> TokenBucket:
    b = (StrictBucket if v[6] else TokenBucket)(v[0], v[1], 0)
    b.tokens, b.at_ns, b.refusing, b.dropped = v[2], v[3], v[4], v[5]
    return b


def _match(x: Match, enc: _Encoder) -> dict[str, Any]:
    return {
        "code": x.code, "game": x.game, "settings": enc.enc(x.settings), "seats": x.seats, "quick": x.quick,
        "seed": x.seed,
        # a sixth item only for a seat taken out of play: other snapshots keep their form
        "players": [[s.client, s.name, s.rematch, s.token, s.dropped_at, *([True] if s.left else [])]
                    for s in x.players],
        "status": x.status, "seq": x.seq, "game_index": x.game_index, "wins": list(x.wins), "best_of": x.best_of,
        # One value, in this order: the history's newest state is the current one (one object).
        "states": enc.enc((x.state, [[s, st] for s, st in x.history], x.timers)),
        "history_at": list(x.history_at),
        "chance": None if x.chance is None else _chance(x.chance),
        "next_game_at": x.next_game_at, "game_seed": x.game_seed, "winner": x.winner,
        "results": enc.enc(x.results), "order": x.order, "creator": x.creator, "housekeep_at": x.housekeep_at,
        "grace_s": x.grace_s, "wake_at": x.wake_at, "snapshot_at": x.snapshot_at, "snapshot_due": x.snapshot_due,
    }


def _match_of(r: dict[str, Any], dec: _Decoder, games: Mapping[str, AnyGame]) -> Match:
    rules = games.get(r["game"])
    if rules is None:
        raise SnapshotError(f"holds a match of a game this relay does not offer ({r['game']!r})")
    settings = dec.dec(r["settings"])  # (decoded in the order they were encoded: see ``record_of``)
    state, history, timers = dec.dec(r["states"])
    results = dec.dec(r["results"])
    return Match(
        code=r["code"], game=r["game"], rules=rules, settings=settings, seats=r["seats"],
        quick=r["quick"], seed=r["seed"],
        players=[Seat(client=p[0], name=p[1], rematch=p[2], token=p[3], dropped_at=p[4], left=len(p) > 5 and p[5] is True)
                 for p in r["players"]],
        status=r["status"], seq=r["seq"], game_index=r["game_index"], wins=list(r["wins"]), best_of=r["best_of"],
        state=state, chance=None if r["chance"] is None else _chance_of(r["chance"]),
        history=deque(((s, st) for s, st in history), maxlen=STATE_HISTORY),
        history_at=deque(r["history_at"], maxlen=STATE_HISTORY), timers=timers,
        next_game_at=r["next_game_at"], game_seed=r["game_seed"], winner=r["winner"], results=results,
        order=r["order"], creator=r["creator"], housekeep_at=r["housekeep_at"], grace_s=r["grace_s"],
        wake_at=r["wake_at"], snapshot_at=r["snapshot_at"], snapshot_due=r["snapshot_due"])


def _held(h: Held, enc: _Encoder) -> list[Any]:
    return [h.seat, h.client, enc.enc(h.act), enc.enc(h.action), h.arrival_ns, h.virtual_ns, h.reaction_ns,
            h.claimed_ns, enc.enc(h.key), h.release_ns, h.published_ns, h.rtt_ns, [list(c) for c in h.considered],
            h.state_seq, h.capped]


def _held_of(v: list[Any], dec: _Decoder) -> Held:
    return Held(seat=v[0], client=v[1], act=dec.dec(v[2]), action=dec.dec(v[3]), arrival_ns=v[4], virtual_ns=v[5],
                reaction_ns=v[6], claimed_ns=v[7], key=dec.dec(v[8]), release_ns=v[9],
                **({} if len(v) < 15 else {"published_ns": v[10], "rtt_ns": v[11],
                                           "considered": tuple((s, r, k) for s, r, k in v[12]),
                                           "state_seq": v[13], "capped": v[14]}))


def _fair(f: FairOrder, enc: _Encoder) -> dict[str, Any]:
    return {
        "cap_ns": f.cap_ns, "floor_ns": f.floor_ns, "probe_interval_ns": f.probe_interval_ns,
        "rtt": {c: [q.maxlen, list(q)] for c, q in f.rtt.items()},
        "last_probe_ns": f.last_probe_ns,
        "published": {code: [[s, t] for s, t in book.items()] for code, book in f.published.items()},
        "held": {code: [_held(h, enc) for h in hs] for code, hs in f.held.items()},
        "coins": {code: _chance(c) for code, c in f.coins.items()},
    }


def _fair_of(r: dict[str, Any], dec: _Decoder) -> FairOrder:
    f = FairOrder(r["cap_ns"], r["floor_ns"], r["probe_interval_ns"])
    f.rtt = {c: deque(q, maxlen=n) for c, (n, q) in r["rtt"].items()}
    f.last_probe_ns = r["last_probe_ns"]
    f.published = {code: {s: t for s, t in book} for code, book in r["published"].items()}
    f.held = {code: [_held_of(h, dec) for h in hs] for code, hs in r["held"].items()}
    f.coins = {code: _chance_of(c) for code, c in r["coins"].items()}
    return f


def _answer(code: str, action_id: int, a: object) -> object:
    """A remembered answer in the core's own form (an acceptance as its packed int)."""
    if isinstance(a, tuple):  # an acceptance as a pickled core of the first forms kept it: (seq, hold_ns)
        a = m.ActionAccepted(code, action_id, a[0], a[1])
    if type(a) is m.ActionAccepted and a.match == code and a.id == action_id and 0 <= a.seq < 1 << 40 and a.hold_ns >= 0:
        return a.hold_ns << 40 | a.seq
    return a


def _past_event(kept: object) -> bytes:
    """A kept public event in the core's own form (one packed list) whatever form a pickle held."""
    if isinstance(kept, bytes):
        return kept
    if isinstance(kept, m.Event):
        return pack_plain([kept.seq, kept.ts, kept.game, kept.type, kept.data])
    seq, ts, game, etype, data = cast(tuple[Any, ...], kept)
    return pack_plain([seq, ts, game, etype, data if isinstance(data, dict) else msgpack.unpackb(data, raw=False)])


def record_of(core: RelayCore) -> tuple[dict[str, Any], list[list[Any]]]:
    """The core as plain data, and its table of value types. The codec's references count the
    values in the order they are encoded: ``core_of`` decodes them in the same order (the
    matches, each its settings, states and results; the answers; the stats; the held plays)."""
    # Match states are compared by identity (is the state a play was made against still the
    # current one?): a game whose state is all scalars must not have two equal states merged.
    enc = _Encoder({id(s) for x in core.matches.values() for s in (x.state, *(st for _, st in x.history))})
    t, gate, deadlines = core.tables, core.gate, core.deadlines
    rec = {
        "seed": core.seed,
        "topics": {"prefix": core.topics.prefix, "shard": core.topics.shard},
        "config": {k: getattr(core.config, k) for k in _CONFIG_FIELDS},
        "codes": _chance(core.lobby.codes),
        "last_now_ns": core.last_now_ns,
        "wall_offset": t.wall_offset,
        "matches": [_match(x, enc) for x in core.matches.values()],
        "client_match": core.client_match,
        "answers": {client: [[c, i, enc.enc(a)] for (c, i), a in book.items()]
                    for client, book in core.answers.book.items()},
        "past": {code: [q.maxlen, list(q), sent] for code, (q, sent) in core.events.past.items()},
        "stats": enc.enc(core.stats),
        "fair": _fair(core.fair, enc),
        "waiting": list(t.waiting), "live": list(t.live), "fair_live": list(t.fair_live),
        "wake": [list(e) for e in deadlines.wake.heap],
        "owned": {c: sorted(codes) for c, codes in gate.owned.items()},
        "housekeeping": [list(e) for e in deadlines.housekeeping.heap],
        "clients": {"idle_ns": gate.clients.idle_ns, "seen": [[c, t] for c, t in gate.clients.seen.items()]},
        "act_buckets": {c: _bucket(b) for c, b in gate.act_buckets.items()},
        "req_buckets": {c: _bucket(b) for c, b in gate.req_buckets.items()},
        "quiet": {"quiet_ns": gate.quiet.quiet_ns,
                  "last": {s: {k: list(v) for k, v in kinds.items()} for s, kinds in gate.quiet.last.items()}},
    }
    return rec, enc.types


def core_of(rec: dict[str, Any], types: list[Any], games: Mapping[str, AnyGame] | None = None) -> RelayCore:
    """The core a record holds (``games``: those the relay offers; default the registry)."""
    config = RelayConfig(**{k: v for k, v in rec["config"].items() if k in _CONFIG_FIELDS}, games=games)
    offered = GAMES if games is None else games
    dec = _Decoder(types, _registry(offered))
    topics = Topics(prefix=rec["topics"]["prefix"], shard=rec["topics"]["shard"])
    core = RelayCore(topics, config, rec["seed"])
    matches = {r["code"]: _match_of(r, dec, offered) for r in rec["matches"]}
    wake, housekeeping = Deadlines(), Deadlines()
    wake.heap = [tuple(e) for e in rec["wake"]]
    housekeeping.heap = [tuple(e) for e in rec["housekeeping"]]
    clients = Clients(rec["clients"]["idle_ns"])
    clients.seen = OrderedDict((c, t) for c, t in rec["clients"]["seen"])
    quiet = Quiet(rec["quiet"]["quiet_ns"], {s: {k: (v[0], v[1]) for k, v in kinds.items()}
                                              for s, kinds in rec["quiet"]["last"].items()})
    answers = {client: {(c, i): dec.dec(a) for c, i, a in book} for client, book in rec["answers"].items()}
    t = core.tables
    t.stats = dec.dec(rec["stats"])
    t.fair = _fair_of(rec["fair"], dec)
    t.matches = matches
    t.client_match = dict(rec["client_match"])
    t.wall_offset = rec["wall_offset"]
    t.waiting = {c: matches[c] for c in rec["waiting"]}
    t.live = {c: matches[c] for c in rec["live"]}
    t.fair_live = dict.fromkeys(rec["fair_live"])
    core.last_now_ns = rec["last_now_ns"]
    core.lobby.codes = _chance_of(rec["codes"])
    core.answers.book = answers
    core.events.past = {code: (deque(q, maxlen=n), dict(sent)) for code, (n, q, sent) in rec["past"].items()}
    core.deadlines.wake, core.deadlines.housekeeping = wake, housekeeping
    gate = core.gate
    gate.clients, gate.quiet = clients, quiet
    gate.owned = {c: set(v) for c, v in rec["owned"].items()}
    gate.act_buckets = {c: _bucket_of(b) for c, b in rec["act_buckets"].items()}
    gate.req_buckets = {c: _bucket_of(b) for c, b in rec["req_buckets"].items()}
    return core


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
    version = 1
    if bytes(view[:len(MAGIC)]) == MAGIC:
        start = len(MAGIC) + _HEAD.size
        if len(view) < start:
            raise SnapshotError(f"{where} is cut short: move the data directory aside to start afresh")
        (version,) = _HEAD.unpack_from(view, len(MAGIC))
        if version > VERSION:
            raise SnapshotError(f"{where} was written by a newer version of blink (snapshot format {version}, "
                                f"this version reads up to {VERSION}): upgrade blink, or use another data directory")
        payload = view[start:]
    elif bytes(view[:1]) == b"\x80":
        payload = view  # format 1: a bare pickle
    else:
        raise SnapshotError(f"{where} is not a relay snapshot: move the data directory aside to start afresh")
    try:
        return _no_gc(lambda: _read(version, payload, games))
    except SnapshotError as exc:
        raise SnapshotError(f"{where} (snapshot format {version}) {exc}: move the data directory aside to start afresh") \
            from exc
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        raise SnapshotError(f"{where} (snapshot format {version}) cannot be read by this version "
                            f"({type(exc).__name__}: {exc}): move the data directory aside to start afresh") from exc


def _read(version: int, payload: memoryview, games: Mapping[str, AnyGame] | None) -> RelayCore:
    if version < 3:
        rec, types = record_of(_unpickle_legacy(payload))
    else:
        whole = msgpack.unpackb(payload, raw=False, strict_map_key=False, use_list=True)
        rec, types = whole["core"], whole["types"]
    return core_of(rec, types, games)


# ---------------------------------------------------------------------- formats 1 and 2: pickles

#: What a pickled core held besides the games' own types, by module: nothing else is resolved.
_LEGACY: dict[str, frozenset[str]] = {
    "relay.core": frozenset({"RelayCore"}),
    "relay.model": frozenset({"Match", "Seat", "RelayConfig"}),
    "relay.limits": frozenset({"TokenBucket", "StrictBucket", "Quiet", "Clients", "Deadlines"}),
    "relay.fair": frozenset({"FairOrder", "Held"}),
    "protocol.chance": frozenset({"SeededChance"}),
    "protocol.topics": frozenset({"Topics"}),
    "protocol.rules.base": frozenset({"Game", "RaceRule", "Timer"}),
    "collections": frozenset({"deque", "OrderedDict"}),
    "builtins": frozenset({"getattr", "set", "frozenset"}),
    "copyreg": frozenset({"_reconstructor"}),
    "relay.snapshot": frozenset({"_same"}),
}


def _same(value: object) -> object:
    """Format 2 wrote an equal game value as a call of this on the first one."""
    return value


class _LegacyUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, registry: Mapping[str, type]) -> None:
        super().__init__(file)
        self._registry = registry

    def find_class(self, module: str, name: str) -> Any:
        if name in _LEGACY.get(module, ()):
            if (module, name) == ("relay.core", "RelayCore"):
                return _LegacyCore
            return _same if (module, name) == ("relay.storage.snapshot", "_same") else super().find_class(module, name)
        qualname = f"{module}.{name}"
        if qualname in self._registry:
            return self._registry[qualname]
        if module.startswith("protocol.rules.") and "." not in name:
            # A game's function (a ``Game`` held by its matches): the registry's game is used instead.
            value = getattr(sys.modules.get(module), name, None)
            if callable(value) and not isinstance(value, type):
                return value
        raise SnapshotError(f"holds {qualname}, which a relay snapshot never held")


class _LegacyCore:
    """What a pickle of the core held: its attribute map, read by ``_from_legacy``, never run."""

    state: dict[str, Any]

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.state = state


def _unpickle_legacy(payload: memoryview) -> RelayCore:
    games: dict[str, AnyGame] = dict(GAMES)
    held = _LegacyUnpickler(io.BytesIO(bytes(payload)), _registry(games)).load()
    if not isinstance(held, _LegacyCore):
        raise SnapshotError("is not a relay core")
    return _from_legacy(held.state, games)


def migrate(state: dict[str, Any], games: Mapping[str, AnyGame] | None = None) -> RelayCore:
    """The core that a pickled core's attribute map (formats 1 and 2) stands for, through the
    current record (``games``: those the relay offers; default the registry)."""
    offered = GAMES if games is None else games
    return core_of(*record_of(_from_legacy(state, offered)), games)


def _from_legacy(d: dict[str, Any], games: Mapping[str, AnyGame]) -> RelayCore:
    """A core from the attribute map of a pickled one, in every form a relay has pickled: the
    first ones had no limits' state and no deadline heap (rebuilt here from the matches), kept
    acceptances as (seq, hold_ns) and past events as tuples or ``Event``s (turned into the
    current forms by ``record_of``)."""
    config: RelayConfig = d["config"]
    core = RelayCore(d["topics"], config, d["seed"])
    t, gate, deadlines = core.tables, core.gate, core.deadlines
    for x in d["matches"].values():  # a field added since that pickle: its default
        for f in dataclasses.fields(Match):
            if f.name not in vars(x):
                default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
                setattr(x, f.name, default)
        x.rules = games.get(x.game, x.rules)
    t.matches, t.client_match, t.stats, t.fair = d["matches"], d["client_match"], d["stats"], d["fair"]
    fair_state = vars(t.fair)
    if "_last_probe_ns" in fair_state:  # the scheduler's name for it then
        fair_state["last_probe_ns"] = fair_state.pop("_last_probe_ns")
    t.wall_offset = d.get("_wall_offset", 0)
    core.last_now_ns = d.get("last_now_ns", 0)
    core.lobby.codes = d["_codes"]
    core.answers.book = {c: {k: _answer(k[0], k[1], a) for k, a in book.items()}  # type: ignore[misc]
                         for c, book in d["_answers"].items()}
    core.events.past = {code: (deque((_past_event(e) for e in q), maxlen=q.maxlen), sent)
                        for code, (q, sent) in d["_past"].items()}
    if "_waiting" in d:
        t.waiting, t.live = d["_waiting"], d["_live"]
        gate.owned, gate.clients, gate.quiet = d["_owned"], d["_clients"], d["_quiet"]
        gate.act_buckets, gate.req_buckets = d["_act_buckets"], d["_req_buckets"]
        deadlines.housekeeping = d["_housekeeping"]
    else:  # from before the limits: their state starts empty, the indexes come from the matches
        t.stats.setdefault("limited", {"dropped": 0, "bursts": 0})
        t.waiting = {c: x for c, x in t.matches.items() if x.status == "waiting"}
        t.live = {c: x for c, x in t.matches.items() if x.status in ("playing", "between")}
        # The relay's time when the snapshot was taken, near enough: its last publication.
        then = max((at for book in t.fair.published.values() for at in book.values()), default=0)
        for client in core.answers.book:
            gate.clients.touch(client, then)
        for match in t.matches.values():
            if match.status == "waiting":
                match.creator = match.players[0].client if match.players else ""
                if match.creator:
                    gate.owned.setdefault(match.creator, set()).add(match.code)
                deadlines.schedule(match, then + int(config.waiting_ttl_s * 1_000_000_000))
            elif match.status == "over":
                deadlines.schedule(match, then + int(config.linger_s * 1_000_000_000))
    if "_wake" in d:
        t.fair_live, deadlines.wake = d["_fair_live"], d["_wake"]
    else:  # from before the deadline heap: build it
        t.fair_live = {c: None for c, x in t.live.items() if x.order == "fair"}
        for x in t.matches.values():
            x.wake_at = None
            x.snapshot_due = None
            deadlines.wake_up(x)
    return core


__all__ = ["MAGIC", "VERSION", "SnapshotError", "core_of", "dump", "load", "migrate", "record_of"]
