"""Public events as typed classes: what a game, or the match around it, says happened.

How this works
--------------
Each kind of event is a frozen dataclass with keyword-only fields, registered under its wire name
with ``@event("card_played")``; its fields are the event's keys, in the order the wire map has
them. A game owns its classes and lists them in one ``EventTypes`` (``Game.events``, the registry
from wire name to class); the match's own events (seats taken, a game's result, the match's end)
are ``protocol.match.MATCH_EVENTS``. An engine's ``apply`` returns instances; the relay publishes
them; a reader decodes them back into the same classes and asks ``isinstance`` (or ``match``),
never the wire name.

One class, two maps. The engine's form (``event_data``) is the fields as a map, seats as ints. The
public form (``public_data``), which the relay publishes and logs, is ``protocol.records.with_names``
of it: ``player``/``winner``/``winners`` carry the players' names and the seats go beside them
(``seat``, ``winner_seat``, ``winner_seats``). ``EventTypes.decode`` reads the public form back:
those fields from their seats, every field checked against its annotation (``BadEvent`` when one
does not fit), keys it does not know ignored (a later relay may say more). A wire name no registry
here knows decodes as ``UnknownEvent`` (``read``) -- a reader passes over what it does not know.

Two kinds of field shape the map beyond a plain value:

- ``ABSENT``: a field left out of the map when it is ``None`` -- the events whose keys vary with
  what happened (a BLINK stalemate that ends in a tie has no pause); the keys keep their order.
- ``SPREAD``: a map whose items are the event's own keys at that place (``game_result`` carries
  each game's extras so); decoding gathers there the keys no other field has.

A field may also hold a ``part`` (a small frozen dataclass, such as one seat's roll) or a tuple of
them: a map inside the event, with its own fields.

Decoding is a reader's work (the client, the replay viewer), never the relay's hot path; building
the engine's map is: ``event_data`` is a function compiled per class (no ``dataclasses.fields``
per event), with the keys in the order of the fields.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Callable, ClassVar, Iterator, Literal, Mapping, Protocol, TypeVar, cast

from protocol import ProtocolError
from protocol.codec import fast_init
from protocol.records import with_names

E = TypeVar("E", bound="TypedEvent")
P = TypeVar("P")

_ABSENT_WHEN_NONE = "absent_when_none"
_SPREAD = "spread"
#: Public keys that hold a seat whose name the public form put in the field's own key.
_SEAT_KEYS = {"player": "seat", "winner": "winner_seat", "winners": "winner_seats"}


class BadEvent(ProtocolError, ValueError):
    """An event whose data does not fit its class (a field missing, or of the wrong type)."""


class PublicEvent(Protocol):
    """An event in its wire form: a wire name and its public map (``protocol.messages.Event`` is
    one, and so is a line of a log)."""

    @property
    def type(self) -> str: ...

    @property
    def data(self) -> Mapping[str, object]: ...


#: A log line's keys that are its envelope, not its event's map (``blink match --log``, the relay's
#: ``--log``: the match, seq, relay time, game index, wire name, and a shard's name).
ENVELOPE = ("seq", "ts", "type", "game", "match", "shard")


@dataclass(frozen=True)
class WireEvent:
    """An event in its wire form, as a log line holds it (a ``PublicEvent``)."""

    type: str
    data: Mapping[str, object]


def logged_event(line: Mapping[str, object]) -> WireEvent:
    """The event of a log line: its wire name and its map without the envelope."""
    name = line.get("type")
    return WireEvent(name if isinstance(name, str) else "", {k: v for k, v in line.items() if k not in ENVELOPE})


class TypedEvent:
    """The base of every event class: ``TYPE`` is the wire name ``@event`` registered it under."""

    TYPE: ClassVar[str] = ""


#: A field's metadata: the field is left out of the event's map when it is ``None`` (see the module
#: header), e.g. ``pause_s: float | None = field(default=None, metadata=ABSENT)``.
ABSENT: Mapping[str, object] = types.MappingProxyType({_ABSENT_WHEN_NONE: True})
#: A field's metadata: a map whose items are the event's own keys (see the module header), e.g.
#: ``extra: Mapping[str, object] = field(default_factory=dict, metadata=SPREAD)``.
SPREAD: Mapping[str, object] = types.MappingProxyType({_SPREAD: True})


def event(name: str) -> Callable[[type[E]], type[E]]:
    """Register a frozen dataclass as the event called ``name`` on the wire (its class's ``TYPE``)."""

    def register(cls: type[E]) -> type[E]:
        params = getattr(cls, "__dataclass_params__", None)
        if params is None or params.frozen is not True:
            raise TypeError(f"{cls.__name__} must be a frozen dataclass")
        cls.TYPE = name
        return fast_init(cls)

    return register


def part(cls: type[P]) -> type[P]:
    """Mark a frozen dataclass as a map inside an event (one seat's roll): see the module header."""
    setattr(cls, "__event_part__", True)
    return fast_init(cls)


@dataclass(frozen=True)
class UnknownEvent(TypedEvent):
    """An event of a wire name no registry here knows (a later relay's): kept as it came."""

    type: str
    data: Mapping[str, object]


# --------------------------------------------------------------------------------------- maps


_DATA: dict[type, Callable[[object], dict[str, object]]] = {}


def _is_part(tp: object) -> bool:
    return isinstance(tp, type) and getattr(tp, "__event_part__", False) is True


def _compile_data(cls: type) -> Callable[[object], dict[str, object]]:
    """Generate the engine map's builder of ``cls`` (an event or a part): see the module header."""
    hints = typing.get_type_hints(cls)
    ns: dict[str, object] = {}
    lines = [f"def data_{cls.__name__}(ev):", "    d = {}"]
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        value = f"ev.{f.name}"
        args = typing.get_args(tp)
        if _is_part(tp):
            ns[f"_part_{f.name}"] = _data_of(cast(type, tp))
            value = f"_part_{f.name}({value})"
        elif typing.get_origin(tp) is tuple and args and _is_part(args[0]):
            ns[f"_part_{f.name}"] = _data_of(args[0])
            value = f"[_part_{f.name}(x) for x in {value}]"
        if f.metadata.get(_SPREAD):
            lines.append(f"    d.update({value})")
        elif f.metadata.get(_ABSENT_WHEN_NONE):
            lines.append(f"    if ev.{f.name} is not None:")
            lines.append(f"        d[{f.name!r}] = {value}")
        else:
            lines.append(f"    d[{f.name!r}] = {value}")
    lines.append("    return d")
    exec(compile("\n".join(lines) + "\n", f"<event {cls.__name__}>", "exec"), ns)  # noqa: S102 - our own source
    return cast(Callable[[object], dict[str, object]], ns[f"data_{cls.__name__}"])


def _data_of(cls: type) -> Callable[[object], dict[str, object]]:
    fn = _DATA.get(cls)
    if fn is None:
        fn = _DATA[cls] = _compile_data(cls)
    return fn


def event_data(ev: TypedEvent) -> dict[str, object]:
    """The engine's map of an event (without its wire name): seats as ints, as ``apply`` made it."""
    fn = _DATA.get(type(ev))
    if fn is None:
        if isinstance(ev, UnknownEvent):
            return dict(ev.data)
        fn = _data_of(type(ev))
    return fn(ev)


def public_data(ev: TypedEvent, names: typing.Sequence[str]) -> dict[str, object]:
    """The public map of an event, as the relay publishes and logs it (``with_names``)."""
    return with_names(event_data(ev), names)


def wire_name(ev: TypedEvent) -> str:
    """The wire name of an event (an ``UnknownEvent``'s own)."""
    return ev.type if isinstance(ev, UnknownEvent) else ev.TYPE


# --------------------------------------------------------------------------------------- reading


_NONE = type(None)
_SIMPLE: dict[type, str] = {int: "an integer", str: "a string", bool: "true or false"}


def _value(value: object, tp: object, where: str) -> object:
    """``value`` read from the wire as type ``tp``: checked, tuples for lists, parts built."""
    if tp is object:
        return value
    simple = _SIMPLE.get(tp) if isinstance(tp, type) else None
    if simple is not None:
        if type(value) is not tp:
            raise BadEvent(f"{where}: {value!r} is not {simple}")
        return value
    if tp is float:
        if type(value) is not int and type(value) is not float:
            raise BadEvent(f"{where}: {value!r} is not a number")
        return float(cast(float, value))
    if tp is _NONE:
        if value is not None:
            raise BadEvent(f"{where}: {value!r} is not null")
        return None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and _NONE in args:
            return None
        problems = []
        for arg in args:
            if arg is _NONE:
                continue
            try:
                return _value(value, arg, where)
            except BadEvent as exc:
                problems.append(str(exc))
        raise BadEvent("; ".join(problems))
    if origin is Literal:
        for choice in args:
            if value == choice and type(value) is type(choice):
                return choice
        raise BadEvent(f"{where}: {value!r} is not one of {', '.join(map(repr, args))}")
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise BadEvent(f"{where}: {value!r} is not a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value(v, args[0], f"{where}[]") for v in value)
        if len(args) != len(value):
            raise BadEvent(f"{where}: {value!r} is not a list of {len(args)}")
        return tuple(_value(v, a, f"{where}[]") for v, a in zip(value, args))
    if origin in (dict, collections.abc.Mapping) or tp is dict:
        if not isinstance(value, dict):
            raise BadEvent(f"{where}: {value!r} is not a map")
        return value
    if _is_part(tp):
        if not isinstance(value, dict):
            raise BadEvent(f"{where}: {value!r} is not a map")
        return _build(cast(type, tp), value, where)
    raise BadEvent(f"{where}: a field of type {tp!r} cannot be read")


#: Per class: its fields as (name, type, public key, required, spread).
_Plan = tuple[tuple[str, object, str, bool, bool], ...]
_PLANS: dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    plan = _PLANS.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        plan = _PLANS[cls] = tuple(
            (f.name, hints[f.name], f.name,
             f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
             bool(f.metadata.get(_SPREAD)))
            for f in dataclasses.fields(cls))
    return plan


def _build(cls: type[P], data: Mapping[str, object], where: str) -> P:
    """An instance of ``cls`` (an event or a part) from its public map."""
    kwargs: dict[str, object] = {}
    rest: str | None = None
    for name, tp, key, required, is_spread in _plan(cls):
        if is_spread:
            rest = name
            continue
        seat_key = _SEAT_KEYS.get(key)
        if seat_key is not None and seat_key in data:
            key = seat_key
        if key in data:
            kwargs[name] = _value(data[key], tp, f"{where}.{name}")
        elif required:
            raise BadEvent(f"{where}: no {name}")
    if rest is not None:
        known = {name for name, *_ in _plan(cls)} | set(_SEAT_KEYS.values())
        kwargs[rest] = {k: v for k, v in data.items() if k not in known}
    return cls(**kwargs)


class EventTypes(Mapping[str, type[TypedEvent]]):
    """A registry of event classes by wire name (a game's own, or the match's): see the module
    header. ``a | b`` is both (a wire name in both is a mistake, refused)."""

    def __init__(self, *classes: type[TypedEvent]) -> None:
        self._by_name: dict[str, type[TypedEvent]] = {}
        for cls in classes:
            if not cls.TYPE:
                raise TypeError(f"{cls.__name__} is not an @event class")
            if cls.TYPE in self._by_name and self._by_name[cls.TYPE] is not cls:
                raise TypeError(f"two event classes for {cls.TYPE!r}: {self._by_name[cls.TYPE].__name__}, {cls.__name__}")
            self._by_name[cls.TYPE] = cls

    def __getitem__(self, name: str) -> type[TypedEvent]:
        return self._by_name[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def __or__(self, other: EventTypes) -> EventTypes:
        return EventTypes(*self._by_name.values(), *other._by_name.values())

    def decode(self, name: str, data: Mapping[str, object]) -> TypedEvent:
        """The event called ``name`` from its public map: its class's instance, an ``UnknownEvent``
        for a name this registry does not hold, or ``BadEvent`` when the map does not fit."""
        cls = self._by_name.get(name)
        if cls is None:
            return UnknownEvent(name, data)
        try:
            return _build(cls, data, name)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, BadEvent):
                raise
            raise BadEvent(f"{name}: {exc}") from exc

    def read(self, ev: PublicEvent) -> TypedEvent:
        """``decode`` for a wire event, which passes over what it cannot read: a map that does not
        fit its class is an ``UnknownEvent`` too (a reader that must know, the client's view
        applier, calls ``decode`` and resyncs)."""
        try:
            return self.decode(ev.type, ev.data)
        except BadEvent:
            return UnknownEvent(ev.type, ev.data)
