"""The wire codec: typed messages <-> msgpack bytes.

How this works
--------------
Every message is a frozen dataclass registered under a type tag with ``@message("Tag")``.
On the wire it is a msgpack map ``{"t": tag, "v": PROTOCOL_VERSION, field: value, ...}``.

Versions. This side writes ``PROTOCOL_VERSION`` and reads it and version 1, whose messages name a
few fields otherwise (version 2 gave each wire name one meaning: ``game`` a game's name,
``game_index`` a game's index in its match, ``match`` a match's code, ``code`` a rejection's).
A class whose version-1 form differs registers a rewrite (``@message(tag, v1=...)``) that turns a
version-1 map into the current one before the usual checks, so a journal of version-1 messages
replays, and a peer of version 1 is understood; a field of the current form in a version-1 map is
an unknown field there, as in version 1 itself. Every other version is ``bad_version``.

``decode`` is the one door for untrusted bytes. It either returns an instance of a registered
message class whose fields have been checked against the dataclass annotations, or raises
``DecodeError`` -- never anything else, whatever the bytes (a hypothesis test holds it to that).
The checks are deliberately strict (no bool where an int is expected, no unknown fields) because
the relay must be able to trust a decoded message's shape before the rule engine ever sees it.

Supported field types: ``int``, ``float``, ``str``, ``bool``, ``bytes``, ``X | None``,
``tuple[X, ...]``, ``dict[str, object]`` and ``object`` (a msgpack value of bounded size). Nested
messages are carried as plain maps and decoded by the layer that knows what to expect.

A *bundle* is several messages for one topic in one payload: a msgpack array whose items are the
messages' own encodings, byte for byte (``pack_bundle`` prefixes an array header to bytes already
encoded: nothing is packed twice). The relay publishes one per topic and step where a step says
several things to one topic (a play's events; a verdict and the hand it changed), so a player
receives one message where it received two or three. ``decode_all`` reads either form; ``decode``
reads single messages only.

Speed: the relay encodes several messages and decodes two (an ``Act`` and its action) per play,
so each class gets, on first use, a compiled encoder (generated source that builds the wire map
field by field: no ``dataclasses.fields``, no ``hasattr`` per field) and a table of per-field
checks with the common cases (``int``, ``str``, ``bool``, ``X | None``, maps) as one type test;
anything else, and every failure, goes through the general ``_check``, so the accepted values and
the error messages are exactly those of the general path. The bytes are those of the general path:
the map's keys in the same order (tag, version, fields in declaration order).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Callable, Literal, Mapping, TypeVar, cast

import msgpack

from protocol import ProtocolError

PROTOCOL_VERSION = 2
#: The versions ``decode`` reads (see the header).
READ_VERSIONS = (1, PROTOCOL_VERSION)

#: Largest message the decoder accepts, in bytes; bigger payloads are refused before unpacking.
MAX_MESSAGE_BYTES = 64 * 1024

_REGISTRY: dict[str, type] = {}
_HINTS: dict[type, dict[str, object]] = {}

T = TypeVar("T")


#: Why bytes are not a message: not a message of this protocol at all, too large to read, of another
#: protocol version, or of a type this side does not know.
DecodeCode = Literal["malformed", "too_large", "bad_version", "unknown_type"]


class DecodeError(ProtocolError, ValueError):
    """Raised for any bytes that are not a valid message of this protocol version."""

    def __init__(self, code: DecodeCode, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


#: A rewrite of a version-1 wire map into the current form (``renamed`` makes the common one).
Rewrite = Callable[[dict[object, object]], dict[object, object]]
_V1: dict[type, Rewrite] = {}


def renamed(tag: str, names: Mapping[str, str]) -> Rewrite:
    """The rewrite of a version-1 map whose fields ``names`` maps (version-1 name -> current name);
    a current name that version 1 did not have is an unknown field of a version-1 map."""
    targets = frozenset(names.values()) - frozenset(names)

    def rewrite(obj: dict[object, object]) -> dict[object, object]:
        for key in obj:
            if key in targets:
                raise DecodeError("malformed", f"{tag}: unknown field {str(key)[:40]!r}")
        return {names.get(k, k) if isinstance(k, str) else k: v for k, v in obj.items()}

    return rewrite


def message(tag: str, v1: Rewrite | None = None) -> Callable[[type[T]], type[T]]:
    """Register a frozen dataclass as a wire message with the type tag ``tag``; ``v1``: the rewrite
    of its version-1 form, where that differs (see the header)."""

    def register(cls: type[T]) -> type[T]:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{cls.__name__} must be a dataclass")
        if tag in _REGISTRY and _REGISTRY[tag] is not cls:
            raise TypeError(f"message tag {tag!r} registered twice")
        clash = {f.name for f in dataclasses.fields(cls)} & {"t", "v"}
        if clash:
            raise TypeError(f"{cls.__name__}: field names {sorted(clash)} are the envelope's (type tag, version)")
        _REGISTRY[tag] = cls
        if v1 is not None:
            _V1[cls] = v1
        setattr(cls, "TYPE", tag)
        return fast_init(cls)

    return register


_MISSING_ARG = object()  # stands for "no value given" where a field has a default factory


def fast_init(cls: type[T]) -> type[T]:
    """Give a frozen dataclass an ``__init__`` that stores its fields straight into the instance's
    ``__dict__``. The one dataclasses generates calls ``object.__setattr__`` per field (to get past
    the frozen ``__setattr__``): about 0.3 us a field, and the relay builds several messages per play.
    Same signature, defaults and default factories; the instance is the same (the class, its
    ``__setattr__``, equality and hash are untouched); keyword-only fields stay keyword-only. A class
    with ``__post_init__``, init-only fields, slots or fields left out of ``__init__`` keeps the
    dataclasses one."""
    if (not dataclasses.is_dataclass(cls) or hasattr(cls, "__post_init__") or "__slots__" in vars(cls)
            or getattr(cls, "__dataclass_params__").frozen is not True):
        return cls
    fields = dataclasses.fields(cls)
    if any(not f.init or not f.name.isidentifier() for f in fields):
        return cls
    if any(f._field_type is not dataclasses._FIELD for f in vars(cls)["__dataclass_fields__"].values()):  # type: ignore[attr-defined]
        return cls  # an InitVar or ClassVar: leave it to dataclasses
    namespace: dict[str, object] = {"_MISSING_ARG": _MISSING_ARG}
    positional: list[str] = []
    keywords: list[str] = []  # after a ``*``, as dataclasses puts keyword-only fields
    body: list[str] = []
    for f in fields:
        params = keywords if f.kw_only is True else positional
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
            body.append(f"    attrs[{f.name!r}] = {f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_MISSING_ARG")
            body.append(f"    attrs[{f.name!r}] = _factory_{f.name}() if {f.name} is _MISSING_ARG else {f.name}")
        else:
            params.append(f.name)
            body.append(f"    attrs[{f.name!r}] = {f.name}")
    params = positional + (["*", *keywords] if keywords else [])
    source = f"def __init__(self{''.join(', ' + p for p in params)}):\n    attrs = self.__dict__\n"
    source += "\n".join(body) + ("\n" if body else "    pass\n")
    exec(compile(source, f"<fast_init {cls.__name__}>", "exec"), namespace)  # noqa: S102 - our own source
    init = cast(Callable[..., None], namespace["__init__"])
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    setattr(cls, "__init__", init)
    return cls


def evolve(obj: T, **changes: object) -> T:
    """``dataclasses.replace`` for an instance of a ``fast_init`` class (every message is one): the
    same copy, built from the instance's own fields (``replace`` looks the class's fields up on every
    call, and the relay stamps every verdict as it leaves)."""
    return type(obj)(**{**obj.__dict__, **changes})


def registered(tag: str) -> type | None:
    return _REGISTRY.get(tag)


def registry() -> Mapping[str, type]:
    """Every registered class by its tag, read-only (for tests that go through all of them)."""
    return types.MappingProxyType(_REGISTRY)


def _hints(cls: type) -> dict[str, object]:
    hints = _HINTS.get(cls)
    if hints is None:
        module = __import__(cls.__module__, fromlist=["_"])
        hints = typing.get_type_hints(cls, vars(module))
        hints = {f.name: hints[f.name] for f in dataclasses.fields(cls)}
        _HINTS[cls] = hints
    return hints


#: Field types whose values are plain msgpack data, never a message: packed as they are.
_PLAIN_ORIGINS = (tuple, dict, list)
_PLAIN_TYPES = frozenset({int, float, str, bool, bytes, type(None)})

_TO_DICT: dict[type, Callable[[object], dict[str, object]]] = {}


def _plain_type(tp: object) -> bool:
    """Can a value of this annotated type never be a message (so it needs no conversion)?"""
    if tp in _PLAIN_TYPES:
        return True
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return all(_plain_type(a) for a in typing.get_args(tp))
    return origin in _PLAIN_ORIGINS


def _convert(value: object) -> object:
    """A field value that may be a message: its wire map, else the value."""
    if hasattr(type(value), "TYPE") and dataclasses.is_dataclass(value):
        return to_dict(value)
    return value


def _compile_to_dict(cls: type) -> Callable[[object], dict[str, object]]:
    """Generate ``lambda msg: {"t": TAG, "v": VERSION, "f": msg.f, ...}`` for ``cls``; a field whose
    type could hold a message (``object``, a class) goes through ``_convert``."""
    hints = _hints(cls)
    items = [f'"t": {cls.TYPE!r}', f'"v": {PROTOCOL_VERSION!r}']  # type: ignore[attr-defined]
    for f in dataclasses.fields(cls):
        if not f.name.isidentifier():
            raise TypeError(f"{cls.__name__}: field name {f.name!r} is not an identifier")
        get = f"msg.{f.name}"
        items.append(f"{f.name!r}: {get if _plain_type(hints[f.name]) else f'_convert({get})'}")
    source = f"def to_dict_{cls.__name__}(msg):\n    return {{{', '.join(items)}}}\n"
    namespace: dict[str, object] = {"_convert": _convert}
    exec(compile(source, f"<codec {cls.__name__}>", "exec"), namespace)  # noqa: S102 - our own source
    fn = cast(Callable[[object], dict[str, object]], namespace[f"to_dict_{cls.__name__}"])
    return fn


def to_dict(msg: object) -> dict[str, object]:
    """The wire map of a message (type tag and version included).

    Shallow on purpose: msgpack packs tuples, lists and maps itself, and this runs for every
    message the relay sends, so only a field that is itself a message is converted."""
    cls = type(msg)
    fn = _TO_DICT.get(cls)
    if fn is None:
        fn = _TO_DICT[cls] = _compile_to_dict(cls)
    return fn(msg)


def encode(msg: object) -> bytes:
    # ``packb`` (a new Packer each call): a reused one would have to be one per thread (the window's
    # network thread encodes too), and the pure core keeps out of threading.
    fn = _TO_DICT.get(type(msg))
    wire = to_dict(msg) if fn is None else fn(msg)
    data: bytes = msgpack.packb(wire, use_bin_type=True)
    return data


class Encoder:
    """``encode`` for a run of messages in one thread (a relay's step): one msgpack ``Packer``
    reused, not one made per message; the same bytes. Not for sharing between threads."""

    __slots__ = ("_pack",)

    def __init__(self) -> None:
        self._pack: Callable[[object], bytes] = msgpack.Packer(use_bin_type=True).pack

    def __call__(self, msg: object) -> bytes:
        fn = _TO_DICT.get(type(msg))
        return self._pack(to_dict(msg) if fn is None else fn(msg))


def pack_plain(value: object) -> bytes:
    """Plain data (maps, lists, scalars) as msgpack bytes, as ``encode`` packs them: a compact form
    for data kept long and read rarely (``unpack_plain`` gives it back)."""
    data: bytes = msgpack.packb(value, use_bin_type=True)
    return data


def unpack_plain(data: bytes) -> object:
    """``pack_plain``'s bytes back (trusted: made by this process, which knows their shape)."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def decode(data: bytes | bytearray | memoryview) -> Any:
    """Decode untrusted bytes into a registered message, or raise ``DecodeError``.

    Typed ``Any`` on purpose, the one such door: the message is one of the registered classes
    (``from_dict`` says ``object``), and the hot loops that call this dispatch on ``type(msg) is
    X`` -- faster than ``isinstance`` chains, but not something the type checker narrows."""
    try:
        raw = data if type(data) is bytes else bytes(data)  # (bytes are immutable: no copy needed)
    except Exception as exc:  # noqa: BLE001 - anything not bytes-like is simply malformed
        raise DecodeError("malformed", f"not bytes: {type(data).__name__}") from exc
    if len(raw) > MAX_MESSAGE_BYTES:
        raise DecodeError("too_large", f"{len(raw)} bytes > {MAX_MESSAGE_BYTES}")
    try:
        obj = msgpack.unpackb(
            raw,
            raw=False,
            strict_map_key=True,
            max_array_len=4096,
            max_map_len=1024,
        )
    except Exception as exc:  # noqa: BLE001 - msgpack raises a zoo of types; we raise one
        raise DecodeError("malformed", f"not msgpack: {type(exc).__name__}") from exc
    return from_dict(obj)


#: A bundle's items, at most (the relay splits longer runs).
MAX_BUNDLE_ITEMS = 256

#: The first byte of a msgpack array (fixarray, array 16, array 32): a bundle; a message is a map.
_ARRAY_HEADS = frozenset(range(0x90, 0xA0)) | {0xDC, 0xDD}


def pack_bundle(payloads: list[bytes]) -> bytes:
    """Encoded messages as one bundle (see the header): an array header, then each payload as it is."""
    n = len(payloads)
    if not 0 < n <= MAX_BUNDLE_ITEMS:
        raise ValueError(f"a bundle holds 1 to {MAX_BUNDLE_ITEMS} messages, not {n}")
    head = bytes((0x90 | n,)) if n < 16 else b"\xdc" + n.to_bytes(2, "big")
    return head + b"".join(payloads)


def decode_all(data: bytes | bytearray | memoryview) -> list[Any]:
    """Decode untrusted bytes holding one message or a bundle of them (``pack_bundle``): the messages
    in order, or ``DecodeError`` (as ``decode``) if any item is not a valid message."""
    if type(data) is not bytes and not isinstance(data, (bytearray, memoryview)):
        return [decode(data)]  # (refused there, as anything not bytes-like)
    raw = data if type(data) is bytes else bytes(data)
    if not raw or raw[0] not in _ARRAY_HEADS:
        return [decode(raw)]
    if len(raw) > MAX_MESSAGE_BYTES:
        raise DecodeError("too_large", f"{len(raw)} bytes > {MAX_MESSAGE_BYTES}")
    try:
        items = msgpack.unpackb(raw, raw=False, strict_map_key=True, max_array_len=4096, max_map_len=1024)
    except Exception as exc:  # noqa: BLE001 - msgpack raises a zoo of types; we raise one
        raise DecodeError("malformed", f"not msgpack: {type(exc).__name__}") from exc
    if not isinstance(items, list) or not 0 < len(items) <= MAX_BUNDLE_ITEMS:
        raise DecodeError("malformed", "a bundle holds 1 to %d messages" % MAX_BUNDLE_ITEMS)
    return [from_dict(item) for item in items]


def from_dict(obj: object) -> object:
    """Validate a plain map (as unpacked) into a registered message, or raise ``DecodeError``."""
    if not isinstance(obj, dict):
        raise DecodeError("malformed", "a message must be a map")
    tag = obj.get("t")
    if not isinstance(tag, str):
        raise DecodeError("malformed", "missing type tag 't'")
    version = obj.get("v")
    if type(version) is not int:
        raise DecodeError("malformed", "missing protocol version 'v'")
    if version != PROTOCOL_VERSION and version not in READ_VERSIONS:
        raise DecodeError("bad_version", f"protocol version {version} (this side speaks {PROTOCOL_VERSION}, "
                                         f"and reads {', '.join(map(str, READ_VERSIONS))})")
    cls = _REGISTRY.get(tag)
    if cls is None:
        raise DecodeError("unknown_type", f"unknown message type {tag[:40]!r}")
    if version != PROTOCOL_VERSION:
        v1 = _V1.get(cls)
        if v1 is not None:
            obj = v1(obj)
    fn = _FROM_DICT.get(cls)
    if fn is None:
        fn = _FROM_DICT[cls] = _compile_from_dict(cls)
    return fn(obj)


def from_dict_general(cls: type, obj: dict[object, object]) -> object:
    """The general form of a class's decoder (what ``_compile_from_dict`` generates, unrolled)."""
    tag: str = cls.TYPE  # type: ignore[attr-defined]
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _plan(cls)
    allowed, fields = plan
    kwargs: dict[str, object] = {}
    for key in obj:
        if key not in allowed:
            raise DecodeError("malformed", f"{tag}: unknown field {str(key)[:40]!r}")
    for name, fast, tp, required in fields:
        if name in obj:
            value = obj[name]
            # The common types are one test; anything else (and every failure) takes the general
            # path, which accepts exactly the same values and words the error.
            kwargs[name] = value if fast is not None and fast(value) else _check(value, tp, f"{tag}.{name}")
        elif required:
            raise DecodeError("malformed", f"{tag}: missing field {name!r}")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:  # a __post_init__ may refuse values
        raise DecodeError("malformed", f"{tag}: {exc}") from exc


_FROM_DICT: dict[type, Callable[[dict[object, object]], object]] = {}
_ABSENT = object()
#: The fast tests as inline expressions of ``v`` (see ``_fast_test``).
_INLINE_TESTS: dict[Callable[[object], bool], str] = {}


def _compile_from_dict(cls: type) -> Callable[[dict[object, object]], object]:
    """Generate the decoder of one class: ``from_dict_general`` with its loop over the fields
    unrolled and each field's fast test inlined (no call per field). The same checks in the same
    order, so the same values pass and the same errors are raised, word for word."""
    tag: str = cls.TYPE  # type: ignore[attr-defined]
    allowed, fields = _plan(cls)
    if not all(name.isidentifier() for name, _, _, _ in fields):
        return lambda obj: from_dict_general(cls, obj)
    ns: dict[str, object] = {"_cls": cls, "_tag": tag, "_allowed": allowed, "_check": _check, "_ABSENT": _ABSENT,
                          "DecodeError": DecodeError}
    lines = [f"def from_dict_{cls.__name__}(obj):",
             "    if not _allowed.issuperset(obj):",
             "        for key in obj:",
             "            if key not in _allowed:",
             "                raise DecodeError('malformed', f'{_tag}: unknown field {str(key)[:40]!r}')",
             "    kwargs = {}"]
    for name, fast, tp, required in fields:
        ns[f"_tp_{name}"] = tp
        test = _INLINE_TESTS.get(fast) if fast is not None else None
        where = f"{tag}.{name}"
        lines.append(f"    v = obj.get({name!r}, _ABSENT)")
        lines.append("    if v is not _ABSENT:")
        if test == "True":
            lines.append(f"        kwargs[{name!r}] = v")
        elif test is not None:
            lines.append(f"        kwargs[{name!r}] = v if {test} else _check(v, _tp_{name}, {where!r})")
        else:
            lines.append(f"        kwargs[{name!r}] = _check(v, _tp_{name}, {where!r})")
        if required:
            lines.append("    else:")
            lines.append(f"        raise DecodeError('malformed', {f'{tag}: missing field {name!r}'!r})")
    lines += ["    try:",
              "        return _cls(**kwargs)",
              "    except (TypeError, ValueError) as exc:  # a __post_init__ may refuse values",
              "        raise DecodeError('malformed', f'{_tag}: {exc}') from exc"]
    exec(compile("\n".join(lines) + "\n", f"<codec decode {cls.__name__}>", "exec"), ns)  # noqa: S102 - our own source
    fn = cast(Callable[[dict[object, object]], object], ns[f"from_dict_{cls.__name__}"])
    return fn


#: Per class: the keys a wire map may have, and per field (name, fast test or None, type, required).
_Plan = tuple[frozenset[str], tuple[tuple[str, "Callable[[object], bool] | None", object, bool], ...]]
_PLANS: dict[type, _Plan] = {}


def _is_int(v: object) -> bool:
    return type(v) is int


def _is_str(v: object) -> bool:
    return type(v) is str


def _is_bool(v: object) -> bool:
    return type(v) is bool


def _is_bytes(v: object) -> bool:
    return type(v) is bytes


def _is_int_or_none(v: object) -> bool:
    return v is None or type(v) is int


def _is_str_or_none(v: object) -> bool:
    return v is None or type(v) is str


def _is_dict(v: object) -> bool:
    return isinstance(v, dict)


def _is_anything(v: object) -> bool:
    return True


_INLINE_TESTS.update({_is_int: "type(v) is int", _is_str: "type(v) is str", _is_bool: "type(v) is bool",
                      _is_bytes: "type(v) is bytes", _is_int_or_none: "(v is None or type(v) is int)",
                      _is_str_or_none: "(v is None or type(v) is str)", _is_dict: "isinstance(v, dict)",
                      _is_anything: "True"})


_SIMPLE_TESTS: dict[type, Callable[[object], bool]] = {int: _is_int, str: _is_str, bool: _is_bool,
                                                      bytes: _is_bytes}


def _fast_test(tp: object) -> Callable[[object], bool] | None:
    """A one-test check that accepts a value only where ``_check`` would return it unchanged."""
    if tp is object:
        return _is_anything
    simple = _SIMPLE_TESTS.get(tp) if isinstance(tp, type) else None
    if simple is not None:
        return simple
    origin = typing.get_origin(tp)
    if origin is dict:
        return _is_dict
    if origin in (typing.Union, types.UnionType):
        args = set(typing.get_args(tp))
        if args == {int, type(None)}:
            return _is_int_or_none
        if args == {str, type(None)}:
            return _is_str_or_none
    return None  # float (ints become floats), tuples (lists become tuples): the general path


def _plan(cls: type) -> _Plan:
    hints = _hints(cls)
    fields = tuple((f.name, _fast_test(hints[f.name]), hints[f.name],
                    f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
                   for f in dataclasses.fields(cls))
    return frozenset({"t", "v", *hints}), fields


def _check(value: object, tp: object, where: str) -> object:
    if tp is object:
        return value
    if tp is int or tp is str:  # the common fields first: no typing introspection for them
        if type(value) is not tp:
            raise DecodeError("malformed", f"{where}: expected {'an integer' if tp is int else 'a string'}")
        return value
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _check(value, arg, where)
            except DecodeError as exc:
                errors.append(exc.detail)
        raise DecodeError("malformed", f"{where}: " + "; ".join(errors))
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, (list, tuple)):  # a tuple: a map made in-process, not unpacked
            raise DecodeError("malformed", f"{where}: expected a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_check(v, args[0], f"{where}[]") for v in value)
        if len(args) != len(value):
            raise DecodeError("malformed", f"{where}: expected {len(args)} items")
        return tuple(_check(v, a, f"{where}[]") for v, a in zip(value, args))
    if origin is dict:
        if not isinstance(value, dict):
            raise DecodeError("malformed", f"{where}: expected a map")
        return value
    if tp is bool:
        if type(value) is not bool:
            raise DecodeError("malformed", f"{where}: expected a boolean")
        return value
    if tp is int:
        if type(value) is not int:
            raise DecodeError("malformed", f"{where}: expected an integer")
        return value
    if tp is float:
        if not (type(value) is int or type(value) is float):
            raise DecodeError("malformed", f"{where}: expected a number")
        return float(value)
    if tp is str:
        if type(value) is not str:
            raise DecodeError("malformed", f"{where}: expected a string")
        return value
    if tp is bytes:
        if type(value) is not bytes:
            raise DecodeError("malformed", f"{where}: expected bytes")
        return value
    raise DecodeError("malformed", f"{where}: unsupported field type")
