"""The codec's generated per-class decoders accept and refuse exactly what the general one does.

``protocol.codec`` compiles a decoder per message class (the field loop unrolled, the common type
tests inlined) for speed; ``from_dict_general`` is the general form it was unrolled from. For
every registered class, maps with random field values (right and wrong types, missing fields,
unknown keys) must give the same message or the same error, word for word.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

import protocol.messages  # noqa: F401 - registers the messages
import protocol.rules  # noqa: F401 - registers every game's actions
from protocol.codec import PROTOCOL_VERSION, DecodeError, decode, encode, from_dict, from_dict_general, registry

VALUES = [None, 0, 1, -5, 2**40, True, False, 1.5, "", "x", b"b", [], [1, "a"], (1,), {}, {"a": 1}, {1: 2}]


def _outcome(fn, obj):  # type: ignore[no-untyped-def]
    try:
        return ("ok", fn(obj))
    except DecodeError as exc:
        return ("error", exc.code, exc.detail)


def test_compiled_decoders_agree_with_the_general_one() -> None:
    rnd = random.Random(7)
    assert len(registry()) > 20
    accepted = 0
    for tag, cls in registry().items():
        names = [f.name for f in dataclasses.fields(cls)]
        for _ in range(400):
            obj = {"t": tag, "v": PROTOCOL_VERSION}
            for name in names:
                if rnd.random() < 0.85:
                    obj[name] = rnd.choice(VALUES)
            if rnd.random() < 0.1:
                obj[rnd.choice(["zz", "t2", "data"])] = 1
            general = _outcome(lambda o: from_dict_general(cls, o), obj)
            assert _outcome(from_dict, obj) == general, (tag, obj)
            accepted += general[0] == "ok"
    assert accepted > 100  # the random maps do reach the accepting path


def test_a_reused_packer_gives_packb_bytes_and_survives_an_error() -> None:
    import msgpack

    from protocol import messages as m

    msg = m.ActionAccepted("ABCD", 7, 12, 3)
    wire = {"t": "ActionAccepted", "v": PROTOCOL_VERSION, "match": "ABCD", "id": 7, "seq": 12, "hold_ns": 3, "recv_ns": 0, "sent_ns": 0}
    assert encode(msg) == msgpack.packb(wire, use_bin_type=True)
    bad = m.Event(match="ABCD", seq=1, ts=2, game_index=0, type="x", data={"no": object()})
    with pytest.raises(TypeError):  # msgpack cannot pack an object()
        encode(bad)
    assert decode(encode(msg)) == msg  # nothing of the failed message is left in the packer


def test_an_encoder_gives_encode_bytes_and_survives_an_error() -> None:
    """``Encoder`` (one Packer for a relay step's messages) packs exactly what ``encode`` does, and a
    message that cannot be packed leaves nothing behind for the next one."""
    from protocol import messages as m
    from protocol.codec import Encoder

    encoder = Encoder()
    msgs = [m.ActionAccepted("ABCD", 7, 12, 3), m.Pong(t0=5, t1=6, t2=7),
            m.Event(match="ABCD", seq=9, ts=2**62, game_index=1, type="card_played",
                    data={"player": "ann", "seat": 0, "card": "3-red-star", "pile": 1}),
            m.ActionRejected("ABCD", 8, "pile_changed", "the pile moved", 4)]
    for msg in msgs:
        assert encoder(msg) == encode(msg)
    bad = m.Event(match="ABCD", seq=1, ts=2, game_index=0, type="x", data={"no": object()})
    with pytest.raises(TypeError):
        encoder(bad)
    assert [encoder(msg) for msg in msgs] == [encode(msg) for msg in msgs]
